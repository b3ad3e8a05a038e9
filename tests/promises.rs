//! Promises of the README, the guides and the rustdoc that no other test checked, each tested
//! as written (the sentence it backs is quoted above each test).

use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::sink::chrome::{ChromeTrace, TraceFileError};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::{Calibration, ContextInfo, CounterSample, Sink, Zone, ZoneBatch};
use gpu_event_pool::{location, DynamicLocation, Error, Lane, RecordError, TracingContext};
use serde_json::Value;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The deepest nesting a list records (`RecordError::TooDeep`'s `max_depth`).
const MAX_DEPTH: usize = 32;

fn names(zones: &[Zone]) -> Vec<String> {
    zones.iter().map(|z| z.location.name().to_owned()).collect()
}

/// README, "Recording": "A zone that cannot be recorded (pool exhausted, nesting too deep,
/// backend failure) is dropped and counted in `stats()`, and the nesting stays balanced: the
/// recording calls return the `RecordError` for logging [...] a guard keeps it in
/// `guard.error()`." docs/design.md, section 7: "depth up to 32, deeper zones are dropped and
/// counted but still balance".
#[test]
fn zones_nested_deeper_than_the_limit_are_dropped_counted_and_the_nesting_stays_balanced() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let sink = MemorySink::new();
    let ctx = TracingContext::builder(sim.clone()).sink(sink.clone()).build().unwrap();
    let mut list = ctx.list();
    let levels: Vec<DynamicLocation> =
        (0..MAX_DEPTH + 8).map(|d| DynamicLocation::new(format!("depth {d}"))).collect();
    let too_deep = RecordError::TooDeep { max_depth: MAX_DEPTH };
    for (depth, level) in levels.iter().enumerate() {
        let begun = list.zone_begin(&stream, level.clone());
        if depth < MAX_DEPTH {
            assert_eq!(begun, Ok(()), "depth {depth}");
        } else {
            assert_eq!(begun, Err(too_deep.clone()), "depth {depth}");
        }
        sim.launch(&stream, 100);
    }
    {
        let guard = list.zone(&stream, location!("guarded, too deep"));
        assert_eq!(guard.error(), Some(&too_deep));
    }
    assert_eq!(list.zone_next(&stream, location!("next, too deep")), Err(too_deep.clone()));
    assert_eq!(list.open_zones(), MAX_DEPTH + 8, "each dropped zone is still open");
    for depth in (0..MAX_DEPTH + 8).rev() {
        assert_eq!(list.zone_end(&stream), Ok(()), "depth {depth}");
    }
    assert_eq!(list.zone_end(&stream), Err(RecordError::NoOpenZone), "balanced: nothing left to end");
    ctx.submit(list).unwrap();
    sim.advance(1_000_000);
    ctx.flush().unwrap();
    let zones = sink.zones();
    let expected: Vec<String> = (0..MAX_DEPTH).map(|d| format!("depth {d}")).collect();
    assert_eq!(names(&zones), expected);
    for pair in zones.windows(2) {
        let (outer, inner) = (&pair[0], &pair[1]);
        assert_eq!(inner.depth, outer.depth + 1);
        assert!(outer.gpu_begin_ns <= inner.gpu_begin_ns && inner.gpu_end_ns <= outer.gpu_end_ns);
    }
    let stats = ctx.stats();
    assert_eq!(stats.dropped_zones, 8 + 2, "the eight too deep, the guard's and the next's: {stats:?}");
    assert_eq!(stats.unaccounted(), 0);
}

/// README, "Recording": "`ctx.set_enabled(..)` switch[es] recording for zones begun
/// afterwards"; `TracingContext::set_enabled`: "a zone begun before is still ended, so
/// nesting stays balanced. Lists already submitted are still collected."
#[test]
fn zones_begun_before_recording_is_turned_off_still_end_and_submitted_lists_are_still_collected() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let sink = MemorySink::new();
    let ctx = TracingContext::builder(sim.clone()).sink(sink.clone()).build().unwrap();
    let mut submitted = ctx.list();
    submitted.zone_begin(&stream, location!("submitted before")).unwrap();
    sim.launch(&stream, 1_000);
    submitted.zone_end(&stream).unwrap();
    ctx.submit(submitted).unwrap();

    let mut list = ctx.list();
    list.zone_begin(&stream, location!("outer")).unwrap();
    sim.launch(&stream, 1_000);
    let mut guarded = list.zone(&stream, location!("guarded"));
    sim.launch(&stream, 2_000);
    ctx.set_enabled(false);
    {
        let off = guarded.zone(&stream, location!("begun while off"));
        assert!(off.error().is_none(), "not recorded, and not an error");
        sim.launch(&stream, 4_000);
    }
    drop(guarded);
    sim.launch(&stream, 8_000);
    list.zone_end(&stream).unwrap();
    assert_eq!(list.open_zones(), 0);
    ctx.submit(list).unwrap();
    sim.advance(1_000_000);
    ctx.flush().unwrap();

    let zones = sink.zones();
    assert_eq!(names(&zones), ["submitted before", "outer", "guarded"]);
    let duration = |z: &Zone| z.gpu_end_ns - z.gpu_begin_ns;
    assert_eq!(duration(&zones[1]), 15_000, "outer ends after everything recorded inside it");
    assert_eq!(duration(&zones[2]), 6_000, "the guard's zone ends when the guard drops");
    assert_eq!(ctx.stats().dropped_zones, 0, "turned off is not dropped");
}

/// A writer the test reads back.
#[derive(Clone, Default)]
struct SharedWriter(Arc<Mutex<Vec<u8>>>);

impl Write for SharedWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn info() -> ContextInfo {
    ContextInfo {
        id: 1,
        name: "queue".to_owned(),
        backend: "sim",
        base: Calibration { gpu_ns: 0, host_ns: 0 },
        host_clock_origin: None,
    }
}

/// The counter events (`"ph":"C"`) of a trace, as (name, value).
fn counter_events(text: &[u8]) -> Vec<(String, f64)> {
    let text = String::from_utf8_lossy(text);
    let events: Vec<Value> = serde_json::from_str(&format!("{}]", text.trim_end().trim_end_matches(']')))
        .unwrap_or_else(|e| panic!("{e}: {text}"));
    events
        .iter()
        .filter(|e| e["ph"] == "C")
        .map(|e| (e["name"].as_str().unwrap().to_owned(), e["args"]["value"].as_f64().unwrap()))
        .collect()
}

/// `ChromeTraceSink::with_counters`: "at most one sample per `every` of host time
/// (`Duration::ZERO`: every sample, one per emit phase), and of it only the counters that
/// changed since the last one written" (docs/chrome.md and docs/watch.md say the same).
#[test]
fn a_counter_sample_writes_only_the_counters_that_changed_since_the_last_written() {
    let out = SharedWriter::default();
    let mut sink = ChromeTrace::new(out.clone()).sink().with_counters(Duration::ZERO);
    sink.open(&info()).unwrap();
    let mut sample = CounterSample {
        host_ns: 1_000,
        slots_in_use: 4,
        zones_dropped: 0,
        lists_pending: 1,
        lag_ns: None,
        clock_bound_ns: None,
    };
    let mut written = Vec::new();
    let mut send = |sample: &CounterSample| {
        let before = counter_events(&out.0.lock().unwrap()).len();
        sink.counters(&info(), sample).unwrap();
        sink.flush().unwrap();
        let events = counter_events(&out.0.lock().unwrap());
        written.push(events[before..].to_vec());
    };
    send(&sample);
    sample.host_ns += 1_000;
    send(&sample);
    sample.host_ns += 1_000;
    sample.slots_in_use = 6;
    send(&sample);
    sample.host_ns += 1_000;
    sample.lag_ns = Some(250_000);
    send(&sample);
    sample.host_ns += 1_000;
    send(&sample);
    let counter = |name: &str, value: f64| (name.to_owned(), value);
    assert_eq!(
        written,
        [
            vec![counter("slots in use", 4.0), counter("zones dropped", 0.0), counter("lists pending", 1.0)],
            vec![],
            vec![counter("slots in use", 6.0)],
            vec![counter("collection lag (us)", 250.0)],
            vec![],
        ]
    );
}

/// The test's zones: `n` zones of one list, each with a name of 1,000 bytes, so that a few
/// dozen fill one of the file writer's 32 KB stages.
fn wide_zones(n: usize) -> Vec<Zone> {
    let name = DynamicLocation::new("z".repeat(1_000));
    (0..n as i64).map(|i| Zone::new(name.clone(), Lane::Stream(1), 0, i * 10, i * 10 + 5)).collect()
}

/// docs/chrome.md, "When the file is valid JSON", and `ChromeTrace::create`: "A write that
/// fails there (a full disk) is reported by a later call of a sink of the trace, and at the
/// latest by the next flush." The file is `/dev/full`, where every write fails with "no space
/// left on device". The writer thread takes at most 8 stages of 32 KB ahead of the sink, so
/// once the sink has handed it 20 stages the thread has failed on the first; the failure must
/// come back from a sink call by then, with no flush.
#[test]
#[cfg(target_os = "linux")]
#[cfg_attr(miri, ignore = "writes hundreds of kilobytes of JSON")]
fn a_failed_write_of_a_trace_file_is_reported_by_a_later_sink_call_with_the_files_path() {
    let mut sink = ChromeTrace::create("/dev/full").unwrap().sink();
    sink.open(&info()).unwrap();
    let zones = wide_zones(32);
    let mut handed = 0;
    let error = loop {
        if let Err(e) = sink.zones(&info(), ZoneBatch { list_id: handed as u64, zones: &zones }) {
            break e;
        }
        handed += zones.len() * 1_000;
        assert!(handed < 20 * 32 * 1024, "no sink call reported the failed writes");
    };
    assert_eq!(error.kind(), std::io::ErrorKind::StorageFull, "{error}");
    let file = error.get_ref().and_then(|e| e.downcast_ref::<TraceFileError>()).expect("a TraceFileError");
    assert_eq!(file.path, std::path::Path::new("/dev/full"));
    assert!(error.to_string().contains("/dev/full"), "{error}");
}

/// The same failure through a context: its flush reports it (`Error::Sink`), naming the file.
#[test]
#[cfg(target_os = "linux")]
fn a_trace_file_that_cannot_be_written_fails_the_contexts_flush_with_the_files_path() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let trace = ChromeTrace::create("/dev/full").unwrap();
    let ctx = TracingContext::builder(sim.clone()).sink(trace.sink()).build().unwrap();
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("kernel")).unwrap();
    sim.launch(&stream, 1_000);
    list.zone_end(&stream).unwrap();
    ctx.submit(list).unwrap();
    sim.advance(1_000_000);
    let error = ctx.flush().unwrap_err();
    assert!(
        matches!(&error.error, Error::Sink(e) if e.kind() == std::io::ErrorKind::StorageFull),
        "{error:?}"
    );
    assert!(error.to_string().contains("trace file /dev/full"), "{error}");
}

/// `ChromeTrace::create`: an error names the path it could not create.
#[test]
fn a_trace_file_that_cannot_be_created_is_an_error_naming_its_path() {
    let missing = std::env::temp_dir().join("gpu-event-pool no such directory").join("trace.json");
    let error = ChromeTrace::create(&missing).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
    assert!(error.to_string().contains(&*missing.to_string_lossy()), "{error}");
    let file = error.get_ref().and_then(|e| e.downcast_ref::<TraceFileError>()).expect("a TraceFileError");
    assert_eq!(file.path, missing);
    assert_eq!(file.error.kind(), std::io::ErrorKind::NotFound);
}
