//! Checks of a Chrome trace as Perfetto reads it, and an in-memory output to write one into,
//! shared by the tests that write Chrome traces.
#![allow(dead_code)]

use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A `Write` into a buffer the test keeps a handle of (`SharedWriter::new` returns both).
#[derive(Clone)]
pub struct SharedWriter(pub Arc<Mutex<Vec<u8>>>);

impl SharedWriter {
    /// A writer and the buffer it writes into.
    pub fn new() -> (Self, Arc<Mutex<Vec<u8>>>) {
        let out = Arc::new(Mutex::new(Vec::new()));
        (Self(Arc::clone(&out)), out)
    }
}

impl std::io::Write for SharedWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `ts` or `dur` in nanoseconds (the file writes three decimals: exact through `f64` here,
/// the values are small).
pub fn ns(event: &Value, key: &str) -> i64 {
    (event[key].as_f64().unwrap() * 1000.0).round() as i64
}

/// Flow events of a trace, checked as Perfetto binds them: every start has one finish (same
/// `id`, `cat`, `name`), a start is enclosed by a slice on its track, and a finish (`bp` "e")
/// is enclosed by the GPU zone it was drawn to: on its track, named as the launch slice the
/// start sits in. Returns the number of flows.
pub fn check_flows(events: &[Value]) -> usize {
    let slices: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    let track = |e: &Value| (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
    let enclosing = |flow: &Value, cat: &str| -> Vec<&Value> {
        let t = ns(flow, "ts");
        slices
            .iter()
            .copied()
            .filter(|s| track(s) == track(flow) && s["cat"] == cat)
            .filter(|s| ns(s, "ts") <= t && t <= ns(s, "ts") + ns(s, "dur"))
            .collect()
    };
    let mut starts = HashMap::new();
    let mut finishes = HashMap::new();
    for e in events {
        let key = || (e["id"].as_u64().unwrap(), e["cat"].to_string(), e["name"].to_string());
        match e["ph"].as_str() {
            Some("s") => assert!(starts.insert(key(), e).is_none(), "a flow id starts twice: {e}"),
            Some("f") => {
                assert_eq!(e["bp"], "e", "a finish binds to its enclosing slice: {e}");
                assert!(finishes.insert(key(), e).is_none(), "a flow id finishes twice: {e}");
            }
            _ => {}
        }
    }
    assert_eq!(starts.len(), finishes.len(), "every start has its finish");
    for (key, start) in &starts {
        let finish = finishes.get(key).unwrap_or_else(|| panic!("no finish for {start}"));
        let launch = enclosing(start, "launch");
        assert_eq!(launch.len(), 1, "a start sits in its launch slice: {start}");
        let zones = enclosing(finish, "gpu");
        assert!(
            zones.iter().any(|z| z["name"] == launch[0]["name"]),
            "the finish {finish} lies in no GPU zone named {}",
            launch[0]["name"]
        );
        // No order between start and finish is checked: the zone's host time comes through
        // the collector's GPU-to-host mapping, which may place it before its launch by the
        // mapping's error (an anchor's host time is read before the GPU reaches it).
        assert_ne!(track(start).0, track(finish).0, "from the CPU process to a GPU process");
    }
    starts.len()
}

/// A complete event: begin and end (ns), name.
type Slice = (i64, i64, String);

/// On every track (`pid`, `tid`), complete events nest or are disjoint (as
/// `shared/tools/trace-check` checks); no duration is negative. Returns the number of tracks.
pub fn check_nesting(events: &[Value]) -> usize {
    let mut tracks: HashMap<(u64, u64), Vec<Slice>> = HashMap::new();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        assert!(ns(e, "dur") >= 0, "negative duration: {e}");
        tracks.entry(key).or_default().push((ns(e, "ts"), ns(e, "ts") + ns(e, "dur"), e["name"].to_string()));
    }
    for (key, slices) in &mut tracks {
        slices.sort_by_key(|&(begin, end, _)| (begin, std::cmp::Reverse(end)));
        let mut open: Vec<&Slice> = Vec::new();
        for slice in slices.iter() {
            while open.last().is_some_and(|top| top.1 <= slice.0) {
                open.pop();
            }
            if let Some(top) = open.last() {
                assert!(slice.1 <= top.1, "track {key:?}: {slice:?} crosses {top:?}");
            }
            open.push(slice);
        }
    }
    tracks.len()
}
