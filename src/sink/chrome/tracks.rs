//! The CPU tracks of one trace already named, and the flow ids handed out: state kept in
//! the trace's output, under its lock. A leaf: imports nothing of `chrome/`.

use crate::launch::thread_name;
use serde_json::json;
use std::collections::HashSet;

/// The CPU tracks of one trace already named, and the flow ids handed out.
#[derive(Debug, Default)]
pub(crate) struct CpuTracks {
    process_named: HashSet<u32>,
    threads: HashSet<(u32, u64)>,
    flows: u64,
}

impl CpuTracks {
    /// The metadata naming CPU process `pid` and thread `tid` the first time they are used.
    pub(crate) fn name_track(&mut self, pid: u32, tid: u64) -> Vec<String> {
        let mut meta = Vec::new();
        if self.process_named.insert(pid) {
            let exe = std::env::current_exe().ok();
            let exe = exe.as_ref().and_then(|p| p.file_stem()).map(|s| s.to_string_lossy().into_owned());
            let name = format!("{} (cpu)", exe.as_deref().unwrap_or("process"));
            meta.push(
                json!({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}}).to_string(),
            );
            let order =
                json!({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": 0}});
            meta.push(order.to_string());
        }
        if self.threads.insert((pid, tid)) {
            let name = thread_name(tid).unwrap_or_else(|| format!("thread {tid}"));
            meta.push(
                json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
                    .to_string(),
            );
        }
        meta
    }

    /// A flow id unique in this trace; the CPU process id in bits 31 to 52 keeps it apart
    /// from other processes' (at most 2^53, exact in a viewer's `f64`).
    pub(super) fn flow_id(&mut self, cpu_pid: u32) -> u64 {
        self.flows += 1;
        (u64::from(cpu_pid & 0x3f_ffff) << 31) | (self.flows & 0x7fff_ffff)
    }
}
