//! Perfetto's own importer (`trace_processor_shell`, beside the repository in
//! `../shared/tools/perfetto/`) as the tests of the Perfetto sink and the flight recorder use
//! it: SQL over a trace, the import errors it counted, and the zones, flows and counters of a
//! trace in one shape whichever format it is (Chrome JSON or Perfetto protobuf). Where the
//! importer is absent (a clone without `shared/`), each test that needs it prints `SKIPPED`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The importer, if it is there.
pub fn trace_processor() -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tools/perfetto/trace_processor_shell");
    path.is_file().then_some(path)
}

/// The importer, or `None` after printing that `test` is skipped.
pub fn trace_processor_or_skip(test: &str) -> Option<PathBuf> {
    let found = trace_processor();
    if found.is_none() {
        println!("SKIPPED {test}: no ../shared/tools/perfetto/trace_processor_shell beside the repository");
    }
    found
}

/// A scratch directory of its own for `test`.
pub fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpu-event-pool-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The rows `sql` returns on `trace`, each a list of its columns as text (the importer's
/// CSV, unquoted).
pub fn query(tp: &Path, trace: &Path, sql: &str) -> Vec<Vec<String>> {
    let file = trace.with_extension(format!("{}.sql", std::process::id()));
    std::fs::write(&file, sql).unwrap();
    let output =
        Command::new(tp).arg("-q").arg(&file).arg(trace).output().expect("trace_processor_shell runs");
    std::fs::remove_file(&file).ok();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "trace_processor_shell failed on {}:\n{stdout}\n{}",
        trace.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let mut lines = stdout.lines().filter(|line| !line.is_empty());
    lines.next(); // the header
    lines.map(split_csv).collect()
}

/// One CSV line's fields, quotes removed.
fn split_csv(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut field)),
            _ => field.push(c),
        }
    }
    fields.push(field);
    fields
}

/// The import's errors and data losses: (name, value) of every such stat above 0.
pub fn import_errors(tp: &Path, trace: &Path) -> Vec<(String, String)> {
    query(
        tp,
        trace,
        "select name, idx, value from stats where severity in ('error', 'data_loss') and value > 0;",
    )
    .into_iter()
    .map(|row| (format!("{}[{}]", row[0], row[1]), row[2].clone()))
    .collect()
}

/// Zones, launches and frames of a trace as (group, track, name, ts since the first slice,
/// dur, depth), the same query for both formats: a Chrome trace's processes and threads,
/// a Perfetto trace's parent tracks (or process) and tracks.
pub const SLICES: &str = include_str!("slices.sql");

/// Flows as (from slice, its ts, to slice, its ts), ts since the first slice.
pub const FLOWS: &str = include_str!("flows.sql");

/// Counter values as (counter, ts since the first slice, value); the Chrome importer names a
/// counter's track `<name> value`.
pub const COUNTERS: &str = include_str!("counters.sql");

/// Whether Python has Perfetto's schema (the `perfetto` package), printing that `test` skips
/// the decoding check where not.
pub fn has_schema(test: &str) -> bool {
    let found = std::process::Command::new("python3")
        .args(["-c", "import perfetto.protos.perfetto.trace.perfetto_trace_pb2"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !found {
        println!("SKIPPED the decoding check of {test}: no python3 with the perfetto package (pip install perfetto protobuf)");
    }
    found
}

/// Runs tests/perfetto_check.py on `traces`: whether it passed, and what it printed.
pub fn run_check(traces: &[&Path]) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/perfetto_check.py");
    let output = std::process::Command::new("python3").arg(&script).args(traces).output().unwrap();
    let text =
        String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

/// Runs the decoding check (tests/perfetto_check.py, Perfetto's own schema) on `traces`, or
/// says it is skipped where Python or the `perfetto` package is missing.
pub fn decode_check(test: &str, traces: &[&Path]) {
    if !has_schema(test) {
        return;
    }
    let (passed, text) = run_check(traces);
    println!("{text}");
    assert!(passed, "perfetto_check.py failed:\n{text}");
}
