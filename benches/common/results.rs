//! Benchmark results as JSON, one file per benchmark executable, for `bench_report.rs`.
//!
//! Written to `$BENCH_RESULTS_DIR`, else `$CARGO_TARGET_DIR/bench-results`, else
//! `target/bench-results`. Each file holds the machine it ran on (cores available to the
//! process, CPU model) and one [`Record`] per measured configuration.
#![allow(dead_code)]

use serde::Serialize;
use std::path::PathBuf;

/// One measured configuration.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Record {
    /// Which benchmark group (`pool_single`, `record`, `latency`, `startup`, ...).
    pub group: String,
    /// Which implementation (`ours`, `seed_port`, `std_mutex`, ...).
    pub implementation: String,
    /// The mode within the group (`single`, `batch16`, `collecting`, `idle`, ...).
    pub mode: String,
    /// Worker threads (recording threads; the collector, if any, is extra).
    pub threads: usize,
    /// Nanoseconds per operation (as the group defines one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ns_per_op: Option<f64>,
    /// Operations per second, all threads together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_per_sec: Option<f64>,
    /// Zones per second (record).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zones_per_sec: Option<f64>,
    /// Percentiles of per-call latency, nanoseconds (latency).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_ns: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_ns: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p999_ns: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ns: Option<f64>,
    /// Bytes of host memory per slot (startup).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_slot: Option<f64>,
    /// Slots (events) created (startup).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slots: Option<u64>,
    /// How many samples the figure is computed from (latency).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    /// Distinct CPUs the worker threads were last seen on (thread placement; unpinned).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cpus_seen: Vec<u32>,
    /// Anything else worth knowing (dropped zones, ...).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// Where the benchmark ran.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// Cores this process may run on (affinity and cgroup quota applied).
    pub cores_available: usize,
    /// The CPU model, from `/proc/cpuinfo`.
    pub cpu_model: String,
    /// Logical CPUs the kernel reports online.
    pub cpus_online: usize,
    /// `BENCH_MACHINE` if set (a label for reports).
    pub label: String,
    /// How worker threads were placed.
    pub placement: String,
}

/// The file one benchmark executable writes.
#[derive(Debug, Clone, Serialize)]
pub struct ResultsFile {
    /// The benchmark (`pool`, `record`, `latency`, `startup`).
    pub bench: String,
    /// The commit the bench was built from (`git describe --always --dirty` when built).
    pub commit: String,
    /// Seconds since the Unix epoch when written.
    pub unix_time: u64,
    /// Criterion's `--quick` was given.
    pub quick: bool,
    /// The command-line arguments after the executable.
    pub args: Vec<String>,
    /// Where it ran.
    pub machine: Machine,
    /// The figures.
    pub records: Vec<Record>,
}

/// Collects records and writes them on [`Results::write`].
#[derive(Debug, Default)]
pub struct Results {
    records: Vec<Record>,
}

impl Results {
    /// Adds a record.
    pub fn push(&mut self, record: Record) {
        self.records.push(record);
    }

    /// Writes `<dir>/<bench>.json` and says where.
    pub fn write(self, bench: &str) {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let file = ResultsFile {
            bench: bench.to_owned(),
            commit: env!("BENCH_BUILD_COMMIT").to_owned(),
            unix_time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            quick: args.iter().any(|a| a == "--quick"),
            args,
            machine: machine(),
            records: self.records,
        };
        let dir = results_dir();
        let path = dir.join(format!("{bench}.json"));
        let written = std::fs::create_dir_all(&dir).and_then(|()| {
            let json = serde_json::to_string_pretty(&file).map_err(std::io::Error::other)?;
            std::fs::write(&path, json)
        });
        match written {
            Ok(()) => {
                eprintln!("bench results: {} (built from {})", path.display(), env!("BENCH_BUILD_COMMIT"))
            }
            Err(e) => eprintln!("could not write {}: {e}", path.display()),
        }
    }
}

/// The directory results go to.
pub fn results_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("BENCH_RESULTS_DIR") {
        return PathBuf::from(dir);
    }
    // Benchmarks run in their package's folder (benches/): the default is the workspace's.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target")), PathBuf::from);
    target.join("bench-results")
}

/// Cores this process may use.
pub fn cores_available() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Describes the machine.
pub fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim()))
        .unwrap_or("unknown")
        .to_owned();
    let cpus_online = cpuinfo.lines().filter(|l| l.starts_with("processor")).count();
    Machine {
        cores_available: cores_available(),
        cpu_model,
        cpus_online,
        label: std::env::var("BENCH_MACHINE").unwrap_or_default(),
        placement: "unpinned (OS scheduler); cpus_seen lists the CPUs worker threads ended on".to_owned(),
    }
}

/// The CPU the calling thread last ran on (field 39 of `/proc/thread-self/stat`).
pub fn current_cpu() -> Option<u32> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // The command name (field 2) may hold spaces: count fields after its closing paren.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(36)?.parse().ok()
}

/// Percentile `p` (0..=100) of sorted nanosecond samples (nearest rank).
pub fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64
}
