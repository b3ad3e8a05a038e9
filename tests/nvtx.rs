//! NVTX ranges around zones (feature `nvtx`), seen by a real NVTX tool.
//!
//! `ranges_reach_an_nvtx_tool` builds the small tool in `tests/nvtx_tool.c` with the C
//! compiler (`cc`, or `$CC`), runs `child_scenario` in a child process with the tool
//! injected (`NVTX_INJECTION64_PATH`: NVTX reads it once per process), and checks the pushes
//! and pops the tool logged, thread by thread. The other tests check the crate's own
//! bookkeeping with no tool attached.

use gpu_event_pool::nvtx::{open_ranges, DOMAIN_NAME};
use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::{location, TracingContext, Verbosity};
use std::path::{Path, PathBuf};
use std::process::Command;

const CHILD: &str = "GPU_EVENT_POOL_NVTX_CHILD";
const LOG: &str = "GPU_EVENT_POOL_NVTX_LOG";

/// What the child records; each step's expected log lines are in `expected_log`.
fn scenario() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let ctx = TracingContext::new(sim.clone()).unwrap();
    assert!(ctx.nvtx_ranges(), "ranges are on by default with the feature");

    // Nested zones, zone_next and a guard.
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("frame")).unwrap();
    list.zone_begin(&stream, location!("dispatch a")).unwrap();
    assert_eq!(open_ranges(), 2);
    list.zone_next(&stream, location!("dispatch b")).unwrap();
    list.zone_end(&stream).unwrap();
    list.zone_end(&stream).unwrap();
    drop(list.zone(&stream, location!("guarded")));
    assert_eq!(open_ranges(), 0);
    ctx.submit(list).unwrap();

    // Skipped by verbosity, switched off, disabled: no range.
    let mut list = ctx.list();
    ctx.set_verbosity(Verbosity::Coarse);
    list.zone_begin(&stream, location!("too fine")).unwrap();
    list.zone_end(&stream).unwrap();
    ctx.set_verbosity(Verbosity::Fine);
    ctx.set_nvtx_ranges(false);
    list.zone_begin(&stream, location!("switched off")).unwrap();
    list.zone_end(&stream).unwrap();
    ctx.set_nvtx_ranges(true);
    ctx.set_enabled(false);
    list.zone_begin(&stream, location!("disabled")).unwrap();
    list.zone_end(&stream).unwrap();
    ctx.set_enabled(true);
    assert_eq!(open_ranges(), 0);

    // Switched off while a zone is open: its range still ends with it.
    list.zone_begin(&stream, location!("toggled")).unwrap();
    ctx.set_nvtx_ranges(false);
    list.zone_end(&stream).unwrap();
    ctx.set_nvtx_ranges(true);
    ctx.submit(list).unwrap();

    // A list dropped with zones open ends their ranges.
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("abandoned outer")).unwrap();
    list.zone_begin(&stream, location!("abandoned inner")).unwrap();
    drop(list);
    assert_eq!(open_ranges(), 0);

    // A zone dropped because the pool is exhausted still has its range.
    let small = TracingContext::builder(sim.clone()).capacity(2, 2).batch(1).build().unwrap();
    let mut list = small.list();
    let mut begun = 0;
    loop {
        begun += 1;
        if list.zone_begin(&stream, location!("exhaust")).is_err() {
            break;
        }
        assert!(begun < 10, "a pool of 2 events ran out");
    }
    assert_eq!(open_ranges(), begun);
    for _ in 0..begun {
        let _ = list.zone_end(&stream);
    }
    assert_eq!(open_ranges(), 0);
    drop(list);
    std::fs::write(std::env::var(LOG).unwrap() + ".exhaust", begun.to_string()).unwrap();

    // Two lists interleaved on one thread: ending the outer range ends the inner one too
    // (NVTX ranges nest per thread), and the inner zone's end pops nothing.
    let (mut a, mut b) = (ctx.list(), ctx.list());
    a.zone_begin(&stream, location!("list a")).unwrap();
    b.zone_begin(&stream, location!("list b")).unwrap();
    a.zone_end(&stream).unwrap();
    assert_eq!(open_ranges(), 0);
    b.zone_end(&stream).unwrap();
    ctx.submit(a).unwrap();
    ctx.submit(b).unwrap();

    // A list moved to another thread with a zone open: the zone's end there pops nothing
    // on that thread; the range ends on its own thread when that thread exits.
    let mut list = ctx.list();
    std::thread::scope(|s| {
        s.spawn(|| {
            list.zone_begin(&stream, location!("moved")).unwrap();
            assert_eq!(open_ranges(), 1);
        });
    });
    std::thread::scope(|s| {
        s.spawn(|| {
            list.zone_end(&stream).unwrap();
            assert_eq!(open_ranges(), 0);
        });
    });
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
}

/// The lines the tool must log, as (thread, line) with threads numbered by first
/// appearance: 0 the scenario's thread, 1 the thread that begins "moved".
fn expected_log(exhaust: usize) -> Vec<(usize, String)> {
    let mut lines = Vec::new();
    let push = |lines: &mut Vec<(usize, String)>, t, name: &str| {
        lines.push((t, format!("push {DOMAIN_NAME} {name}")))
    };
    let pop = |lines: &mut Vec<(usize, String)>, t| lines.push((t, format!("pop {DOMAIN_NAME}")));
    push(&mut lines, 0, "frame");
    push(&mut lines, 0, "dispatch a");
    pop(&mut lines, 0);
    push(&mut lines, 0, "dispatch b");
    pop(&mut lines, 0);
    pop(&mut lines, 0);
    push(&mut lines, 0, "guarded");
    pop(&mut lines, 0);
    push(&mut lines, 0, "toggled");
    pop(&mut lines, 0);
    push(&mut lines, 0, "abandoned outer");
    push(&mut lines, 0, "abandoned inner");
    pop(&mut lines, 0);
    pop(&mut lines, 0);
    for _ in 0..exhaust {
        push(&mut lines, 0, "exhaust");
    }
    for _ in 0..exhaust {
        pop(&mut lines, 0);
    }
    push(&mut lines, 0, "list a");
    push(&mut lines, 0, "list b");
    pop(&mut lines, 0);
    pop(&mut lines, 0);
    push(&mut lines, 1, "moved");
    pop(&mut lines, 1);
    lines
}

#[test]
#[ignore = "run by ranges_reach_an_nvtx_tool, in a child process with the tool injected"]
fn child_scenario() {
    assert!(std::env::var_os(CHILD).is_some(), "run by ranges_reach_an_nvtx_tool");
    scenario();
}

fn build_tool(dir: &Path) -> Option<PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nvtx_tool.c");
    let library = dir.join("libnvtx_test_tool.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&library)
        .arg(&source)
        .arg("-lpthread")
        .status();
    match status {
        Ok(s) if s.success() => Some(library),
        Ok(s) => panic!("{cc} failed to build the NVTX test tool: {s}"),
        Err(e) => {
            eprintln!("SKIPPED ranges_reach_an_nvtx_tool: no C compiler ({cc}: {e})");
            None
        }
    }
}

#[test]
fn ranges_reach_an_nvtx_tool() {
    let dir = std::env::temp_dir().join(format!("gpu-event-pool-nvtx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some(tool) = build_tool(&dir) else { return };
    let log = dir.join("nvtx.log");
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_scenario", "--ignored", "--test-threads=1", "--nocapture"])
        .env(CHILD, "1")
        .env(LOG, &log)
        .env("NVTX_INJECTION64_PATH", &tool)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "the child scenario failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&log).expect("the tool wrote no log: NVTX did not load it");
    let exhaust: usize =
        std::fs::read_to_string(format!("{}.exhaust", log.display())).unwrap().parse().unwrap();
    // Number the threads by first appearance and drop the thread ids.
    let mut threads: Vec<&str> = Vec::new();
    let seen: Vec<(usize, String)> = text
        .lines()
        .map(|line| {
            let mut words = line.splitn(3, ' ');
            let (op, tid, rest) = (words.next().unwrap(), words.next().unwrap(), words.next().unwrap_or(""));
            let thread = threads.iter().position(|t| *t == tid).unwrap_or_else(|| {
                threads.push(tid);
                threads.len() - 1
            });
            (thread, format!("{op} {rest}"))
        })
        .collect();
    assert_eq!(seen, expected_log(exhaust), "the tool's log:\n{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ranges_are_counted_per_thread_and_switched_at_run_time() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone()).nvtx_ranges(false).build().unwrap();
    assert!(!ctx.nvtx_ranges());
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("off")).unwrap();
    assert_eq!(open_ranges(), 0, "the builder switched ranges off");
    list.zone_end(&stream).unwrap();

    ctx.set_nvtx_ranges(true);
    ctx.set_verbosity(Verbosity::Coarse);
    assert!(ctx.nvtx_ranges(), "setting the verbosity keeps the NVTX switch");
    ctx.set_nvtx_ranges(false);
    ctx.set_verbosity(Verbosity::Fine);
    assert!(!ctx.nvtx_ranges(), "setting the verbosity keeps the NVTX switch");
    assert_eq!(ctx.verbosity(), Verbosity::Fine);

    ctx.set_nvtx_ranges(true);
    {
        let mut outer = list.zone(&stream, location!("outer"));
        let _inner = outer.zone(&stream, location!("inner"));
        assert_eq!(open_ranges(), 2);
    }
    assert_eq!(open_ranges(), 0);
    ctx.submit(list).unwrap();
}
