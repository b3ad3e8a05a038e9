//! The Chrome/Perfetto trace: valid JSON, one complete event per zone, correct nesting; on
//! the host clock it lines up with a CPU trace of the same run.

use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::sink::chrome::{ChromeClock, ChromeTrace};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::{location, Backend, TracingContext, Verbosity};
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing_subscriber::layer::SubscriberExt;

/// A fresh directory for one test's files.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpu-event-pool-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn parse(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not valid JSON ({e}): {text}", path.display()))
}

/// `ts` (or another key) of one event, read from its raw text: nanoseconds, exactly.
fn raw_ns(text: &str, name: &str, key: &str) -> i64 {
    let line = text.lines().find(|l| l.contains(&format!("\"name\":\"{name}\""))).unwrap();
    micros_to_ns(line, key)
}

/// Reads the number after `"key":` in one event's raw JSON text (serde_json would make it an
/// f64, hiding whether the file kept three decimals).
fn micros_to_ns(raw: &str, key: &str) -> i64 {
    let start = raw.find(&format!("\"{key}\":")).unwrap() + key.len() + 3;
    let text: String =
        raw[start..].chars().take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '-').collect();
    let (whole, frac) = text.split_once('.').expect("three decimals");
    assert_eq!(frac.len(), 3, "{text}");
    whole.parse::<i64>().unwrap() * 1000 + frac.parse::<i64>().unwrap()
}

#[test]
fn chrome_trace_has_one_complete_event_per_zone_nested_per_stream() {
    let dir = std::env::temp_dir().join(format!("gpu-event-pool-chrome-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.json");
    let sim = SimBackend::manual();
    let streams = [sim.stream(), sim.stream()];
    let ctx = TracingContext::builder(sim.clone())
        .name("test gpu")
        .sink(ChromeTrace::create(&path).unwrap().sink())
        .build()
        .unwrap();
    let id = ctx.info().id;
    for i in 0..6 {
        let stream = &streams[i % 2];
        let mut list = ctx.list();
        list.zone_begin(stream, location!("command buffer", Verbosity::Coarse)).unwrap();
        list.zone_begin(stream, location!("dispatch")).unwrap();
        for _ in 0..3 {
            sim.launch(stream, 1_001);
            list.zone_next(stream, location!("dispatch")).unwrap();
        }
        sim.launch(stream, 999);
        list.zone_end(stream).unwrap();
        list.zone_end(stream).unwrap();
        ctx.submit(list).unwrap();
        sim.advance(1_234);
    }
    ctx.flush().unwrap();
    drop(ctx);

    let text = std::fs::read_to_string(&path).unwrap();
    let trace: Vec<Value> = serde_json::from_str(&text).unwrap();
    let raw: Vec<&str> = text.lines().filter(|l| l.contains("\"ph\":\"X\"")).collect();
    let complete: Vec<(&Value, &str)> =
        trace.iter().filter(|e| e["ph"] == "X").zip(raw.iter().copied()).collect();
    assert_eq!(complete.len(), 6 * 5);
    let process = trace.iter().find(|e| e["name"] == "process_name").unwrap();
    assert_eq!(process["args"]["name"], "test gpu (sim)");
    assert_eq!(trace.iter().filter(|e| e["name"] == "thread_name").count(), 2, "one thread per stream");
    for tid in [1, 2] {
        let mut spans: Vec<(i64, i64)> = complete
            .iter()
            .filter(|(e, _)| e["tid"] == tid && e["pid"] == id)
            .map(|(_, raw)| {
                let ts = micros_to_ns(raw, "ts");
                (ts, ts + micros_to_ns(raw, "dur"))
            })
            .collect();
        assert_eq!(spans.len(), 15);
        spans.sort_by_key(|&(b, e)| (b, std::cmp::Reverse(e)));
        let mut open: Vec<(i64, i64)> = Vec::new();
        for span in spans {
            while open.last().is_some_and(|top| top.1 <= span.0) {
                open.pop();
            }
            if let Some(top) = open.last() {
                assert!(span.1 <= top.1, "{span:?} overlaps {top:?}");
            }
            open.push(span);
        }
    }
    let (dispatch, raw) = complete.iter().find(|(e, _)| e["name"] == "dispatch").unwrap();
    assert_eq!(micros_to_ns(raw, "dur"), 1_001, "nanoseconds survive");
    assert!(dispatch["args"]["file"].as_str().unwrap().ends_with("chrome.rs"));
    assert_eq!(dispatch["args"]["depth"], 1);
    assert!(dispatch["args"]["list"].as_u64().unwrap() >= 1);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn gpu_zones_fall_inside_the_cpu_span_that_waited_for_them_in_a_merged_trace() {
    let dir = scratch("merged");
    let (cpu_path, gpu_path, merged_path) =
        (dir.join("cpu.json"), dir.join("gpu.json"), dir.join("merged.json"));
    // tracing-chrome writes ts as microseconds since an Instant taken inside `build()`: take
    // the GPU trace's origin right after it.
    let (layer, guard) = tracing_chrome::ChromeLayerBuilder::new().file(&cpu_path).build();
    let origin = Instant::now();
    // Without a shared origin the two clocks would be this far apart (the simulated GPU's
    // host clock starts at its creation): far outside the tolerance below.
    std::thread::sleep(Duration::from_millis(50));
    let gpu = SimBackend::realtime();
    let stream = gpu.stream();
    let trace = ChromeTrace::create(&gpu_path).unwrap().sink().with_origin(origin).with_pid(2);
    let ctx = TracingContext::builder(gpu.clone()).name("gpu").sink(trace).build().unwrap();
    ctx.name_stream(&stream, "compute");

    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
        let _step = tracing::info_span!("step").entered();
        let mut list = ctx.list();
        list.zone_begin(&stream, location!("kernel")).unwrap();
        let done = gpu.launch(&stream, 2_000_000);
        list.zone_end(&stream).unwrap();
        ctx.submit(list).unwrap();
        // The span ends only once the GPU has run the kernel (the sim's clock is the host's).
        while gpu.now() < done {
            std::thread::sleep(Duration::from_micros(200));
        }
    });
    ctx.flush().unwrap();
    drop(ctx);
    drop(guard);

    let mut merged = parse(&cpu_path);
    merged.extend(parse(&gpu_path));
    std::fs::write(&merged_path, serde_json::to_string(&merged).unwrap()).unwrap();
    let merged = parse(&merged_path);
    let cpu_at = |ph: &str| {
        let event = merged.iter().find(|e| e["name"] == "step" && e["ph"] == ph).unwrap();
        assert_ne!(event["pid"], 2, "the GPU's pid is its own");
        (event["ts"].as_f64().unwrap() * 1e3) as i64
    };
    let (span_begin, span_end) = (cpu_at("B"), cpu_at("E"));
    let kernel = merged.iter().find(|e| e["name"] == "kernel").unwrap();
    assert_eq!(kernel["pid"], 2);
    let track = merged.iter().find(|e| e["name"] == "thread_name" && e["pid"] == 2).unwrap();
    assert_eq!(track["args"]["name"], "compute");
    let begin = (kernel["ts"].as_f64().unwrap() * 1e3) as i64;
    let end = begin + (kernel["dur"].as_f64().unwrap() * 1e3) as i64;
    // Generous: the mapping is exact to microseconds; the clocks' gap without it is 50 ms.
    let tolerance = 1_000_000;
    assert!(
        span_begin - tolerance <= begin && end <= span_end + tolerance,
        "GPU zone {begin}..{end} ns is not inside the CPU span {span_begin}..{span_end} ns"
    );
    assert!(end - begin >= 2_000_000, "the kernel took its 2 ms");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn host_clock_ts_is_the_zone_host_time_on_the_origin_clock_and_gpu_clock_ts_is_gpu_time() {
    let dir = scratch("clocks");
    let gpu = SimBackend::realtime();
    let stream = gpu.stream();
    let origin = Instant::now();
    let memory = MemorySink::new();
    let host = ChromeTrace::create(dir.join("host.json")).unwrap().sink().with_origin(origin);
    assert_eq!(host.clock(), ChromeClock::Host, "the default");
    let gpu_clock = ChromeTrace::create(dir.join("gpu.json")).unwrap().sink().with_clock(ChromeClock::Gpu);
    let ctx =
        TracingContext::builder(gpu.clone()).sink(memory.clone()).sink(host).sink(gpu_clock).build().unwrap();
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("kernel")).unwrap();
    gpu.launch(&stream, 10_000);
    list.zone_end(&stream).unwrap();
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
    drop(ctx);

    let zone = &memory.zones()[0];
    let sim_origin = gpu.host_clock_origin().unwrap();
    // The origin was taken after the simulation started: its host clock is ahead.
    let offset = -i64::try_from(origin.duration_since(sim_origin).as_nanos()).unwrap();
    assert!(offset < 0);
    let host_text = std::fs::read_to_string(dir.join("host.json")).unwrap();
    assert_eq!(raw_ns(&host_text, "kernel", "ts"), zone.host_begin_ns + offset);
    assert_eq!(raw_ns(&host_text, "kernel", "dur"), zone.host_end_ns - zone.host_begin_ns);
    let gpu_text = std::fs::read_to_string(dir.join("gpu.json")).unwrap();
    assert_eq!(raw_ns(&gpu_text, "kernel", "ts"), zone.gpu_begin_ns);
    for trace in [parse(&dir.join("host.json")), parse(&dir.join("gpu.json"))] {
        let kernel = trace.iter().find(|e| e["name"] == "kernel").unwrap();
        assert_eq!(kernel["args"]["gpu_begin_ns"], zone.gpu_begin_ns, "GPU times always in args");
        assert_eq!(kernel["args"]["gpu_end_ns"], zone.gpu_end_ns);
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn named_streams_get_their_names_as_tracks_and_a_later_name_replaces_the_first() {
    let dir = scratch("names");
    let path = dir.join("trace.json");
    let sim = SimBackend::manual();
    let (named, renamed, plain) = (sim.stream(), sim.stream(), sim.stream());
    let ctx = TracingContext::builder(sim.clone())
        .sink(ChromeTrace::create(&path).unwrap().sink())
        .build()
        .unwrap();
    let record = |stream| {
        let mut list = ctx.list();
        list.zone_begin(stream, location!("work")).unwrap();
        sim.launch(stream, 1_000);
        list.zone_end(stream).unwrap();
        ctx.submit(list).unwrap();
        sim.advance(2_000);
        ctx.flush().unwrap();
    };
    ctx.name_stream(&named, "copy queue");
    for stream in [&named, &renamed, &plain] {
        record(stream);
    }
    ctx.name_stream(&renamed, "compute");
    record(&renamed);
    drop(ctx);

    let trace = parse(&path);
    // The zones' tracks, in the order recorded: named, renamed, plain, renamed.
    let tids: Vec<Value> = trace.iter().filter(|e| e["ph"] == "X").map(|e| e["tid"].clone()).collect();
    assert_eq!(tids.len(), 4);
    let last_name = |tid: &Value| {
        let names: Vec<&Value> = trace
            .iter()
            .filter(|e| e["name"] == "thread_name" && &e["tid"] == tid)
            .map(|e| &e["args"]["name"])
            .collect();
        names.last().unwrap().as_str().unwrap().to_owned()
    };
    assert_eq!(last_name(&tids[0]), "copy queue");
    assert_eq!(last_name(&tids[1]), "compute", "the later name is the last thread_name of its track");
    assert_eq!(tids[1], tids[3], "one track per stream");
    assert_eq!(
        last_name(&tids[2]),
        format!("stream {:#x}", sim.stream_key(&plain)),
        "unnamed streams keep their key"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn the_trace_is_valid_json_while_an_empty_list_of_a_dropped_context_lives() {
    let dir = scratch("held-list");
    let path = dir.join("trace.json");
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone())
        .sink(ChromeTrace::create(&path).unwrap().sink())
        .build()
        .unwrap();
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("work")).unwrap();
    sim.launch(&stream, 1_000);
    list.zone_end(&stream).unwrap();
    ctx.submit(list).unwrap();
    sim.advance(2_000);
    let held = ctx.list();
    drop(ctx); // the last handle flushes; the sink lives on with `held`
    let trace = parse(&path);
    assert_eq!(trace.iter().filter(|e| e["ph"] == "X").count(), 1);
    drop(held);
    assert_eq!(parse(&path).len(), trace.len(), "closing the sink changes nothing more");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn the_trace_stays_valid_json_across_flushes_and_writes() {
    let dir = scratch("flushes");
    let path = dir.join("trace.json");
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone())
        .sink(ChromeTrace::create(&path).unwrap().sink())
        .build()
        .unwrap();
    ctx.flush().unwrap();
    assert_eq!(parse(&path).len(), 1, "only the process name");
    for round in 1..=3 {
        let mut list = ctx.list();
        list.zone_begin(&stream, location!("work")).unwrap();
        sim.launch(&stream, 1_000);
        list.zone_end(&stream).unwrap();
        ctx.submit(list).unwrap();
        sim.advance(2_000);
        ctx.flush().unwrap();
        let trace = parse(&path);
        assert_eq!(trace.iter().filter(|e| e["ph"] == "X").count(), round);
    }
    drop(ctx);
    assert_eq!(parse(&path).iter().filter(|e| e["ph"] == "X").count(), 3);
    std::fs::remove_dir_all(dir).ok();
}

/// Records `lists` one-zone lists on `stream`, one after another on the manual clock.
fn record_lists(
    ctx: &TracingContext<SimBackend>,
    sim: &SimBackend,
    stream: &gpu_event_pool::sim::SimStream,
    lists: usize,
) {
    for _ in 0..lists {
        let mut list = ctx.list();
        list.zone_begin(stream, location!("work")).unwrap();
        sim.launch(stream, 1_000);
        list.zone_end(stream).unwrap();
        ctx.submit(list).unwrap();
        sim.advance(2_000);
    }
}

#[test]
fn several_contexts_write_one_trace_each_as_its_own_process() {
    // (Fewer under Miri, where these 150 flushes took four minutes.)
    const DEVICES: usize = if cfg!(miri) { 2 } else { 3 };
    const LISTS: usize = if cfg!(miri) { 5 } else { 50 };
    let dir = scratch("shared");
    let path = dir.join("trace.json");
    let trace = ChromeTrace::create(&path).unwrap();
    let devices: Vec<(SimBackend, TracingContext<SimBackend>)> = (0..DEVICES)
        .map(|d| {
            let sim = SimBackend::manual();
            let ctx = TracingContext::builder(sim.clone())
                .name(format!("gpu {d}"))
                .sink(trace.sink())
                .build()
                .unwrap();
            (sim, ctx)
        })
        .collect();
    // Every context records and flushes from its own thread at once: their batches share
    // the file and must not cut into each other.
    std::thread::scope(|s| {
        for (sim, ctx) in &devices {
            s.spawn(move || {
                let streams = [sim.stream(), sim.stream()];
                for round in 0..LISTS {
                    record_lists(ctx, sim, &streams[round % 2], 1);
                    ctx.flush().unwrap();
                }
            });
        }
    });
    let events = parse(&path);
    assert_eq!(events.len(), trace.events(), "a complete JSON array after the flushes");
    let ids: Vec<u32> = devices.iter().map(|(_, ctx)| ctx.info().id).collect();
    for (d, id) in ids.iter().enumerate() {
        let of = |e: &&Value| e["pid"] == *id;
        let process: Vec<&Value> = events.iter().filter(of).filter(|e| e["name"] == "process_name").collect();
        assert_eq!(process.len(), 1, "one process per context");
        assert_eq!(process[0]["args"]["name"], format!("gpu {d} (sim)"));
        assert_eq!(events.iter().filter(of).filter(|e| e["ph"] == "X").count(), LISTS);
        assert_eq!(
            events.iter().filter(of).filter(|e| e["name"] == "thread_name").count(),
            2,
            "its two streams"
        );
    }
    let pids: std::collections::BTreeSet<String> = events.iter().map(|e| e["pid"].to_string()).collect();
    assert_eq!(pids.len(), DEVICES, "no event outside the contexts' processes");

    drop(devices);
    assert_eq!(
        parse(&path).len(),
        events.len(),
        "the trace still holds the file open, closed as at the last flush"
    );
    drop(trace);
    assert_eq!(parse(&path).len(), events.len(), "closed once, by the last one dropped");
    std::fs::remove_dir_all(dir).ok();
}

/// A writer whose bytes the test can read while the trace holds it.
#[derive(Clone, Default)]
struct SharedBytes(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBytes {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_trace_on_a_plain_writer_is_closed_by_the_last_of_its_sinks_and_handle() {
    let bytes = SharedBytes::default();
    let text = || String::from_utf8(bytes.0.lock().unwrap().clone()).unwrap();
    let trace = ChromeTrace::new(bytes.clone());
    let (first, second) = (SimBackend::manual(), SimBackend::manual());
    let a = TracingContext::builder(first.clone()).sink(trace.sink()).build().unwrap();
    let b = TracingContext::builder(second.clone()).sink(trace.sink()).build().unwrap();
    drop(trace);
    record_lists(&a, &first, &first.stream(), 2);
    record_lists(&b, &second, &second.stream(), 3);
    drop(a);
    assert!(!text().trim_end().ends_with(']'), "one sink still writes: not closed yet");
    drop(b);
    let events: Vec<Value> = serde_json::from_str(&text()).unwrap();
    assert_eq!(events.iter().filter(|e| e["ph"] == "X").count(), 5);
    assert_eq!(text().matches("\n]").count(), 1, "closed once");
}

#[test]
#[cfg_attr(miri, ignore = "real time: under Miri the two launches are far apart, not at one moment")]
fn contexts_of_one_trace_share_its_origin_on_the_host_clock() {
    let dir = scratch("shared-origin");
    let path = dir.join("trace.json");
    let trace = ChromeTrace::create(&path).unwrap();
    let context = |gpu: &SimBackend| TracingContext::builder(gpu.clone()).sink(trace.sink()).build().unwrap();
    // The second GPU, its context and its sink come 30 ms after the first: its GPU clock
    // (from its context's base event) and its host clock start that much later, and a sink
    // on an origin of its own (when it was made) would put its zones 30 ms off.
    let early = SimBackend::realtime();
    let first = context(&early);
    std::thread::sleep(Duration::from_millis(30));
    let late = SimBackend::realtime();
    let contexts = [first, context(&late)];
    // One kernel queued on each GPU at the same moment.
    for (ctx, gpu) in contexts.iter().zip([&early, &late]) {
        let stream = gpu.stream();
        let mut list = ctx.list();
        list.zone_begin(&stream, location!("kernel")).unwrap();
        gpu.launch(&stream, 1_000_000);
        list.zone_end(&stream).unwrap();
        ctx.submit(list).unwrap();
    }
    for ctx in &contexts {
        ctx.flush().unwrap();
    }
    let events = parse(&path);
    let kernels: Vec<&Value> = events.iter().filter(|e| e["name"] == "kernel").collect();
    assert_eq!(kernels.len(), 2);
    let ts = |e: &Value| (e["ts"].as_f64().unwrap() * 1e3) as i64;
    let gpu_begin = |e: &Value| e["args"]["gpu_begin_ns"].as_i64().unwrap();
    assert!(gpu_begin(kernels[0]) - gpu_begin(kernels[1]) >= 30_000_000, "GPU clocks 30 ms apart");
    assert!((ts(kernels[0]) - ts(kernels[1])).abs() < 5_000_000, "one timeline: {kernels:?}");
    drop(contexts);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn zones_that_overlap_without_nesting_go_to_rows_of_their_own_so_nothing_is_falsely_nested() {
    use gpu_event_pool::sink::{Calibration, ContextInfo, Sink, Zone, ZoneBatch};
    use gpu_event_pool::Lane;
    let dir = scratch("overlap-rows");
    let path = dir.join("trace.json");
    let mut sink = ChromeTrace::create(&path).unwrap().sink().with_clock(ChromeClock::Gpu);
    let info = ContextInfo {
        id: 7,
        name: "vulkan".into(),
        backend: "vulkan",
        base: Calibration { gpu_ns: 0, host_ns: 0 },
        host_clock_origin: None,
    };
    sink.open(&info).unwrap();
    let lane = Lane::Stream(1);
    // A contains B; C, B's sibling, starts before B ends (no barrier between them); D is C's
    // child; E, A's sibling, starts before A ends; F comes after everything.
    let zones = [
        Zone::new(location!("A"), lane, 0, 0, 100),
        Zone::new(location!("B"), lane, 1, 10, 50),
        Zone::new(location!("C"), lane, 1, 40, 90),
        Zone::new(location!("D"), lane, 2, 45, 60),
        Zone::new(location!("E"), lane, 0, 80, 120),
        Zone::new(location!("F"), lane, 0, 130, 140),
    ];
    sink.zones(&info, ZoneBatch { list_id: 1, zones: &zones }).unwrap();
    sink.flush().unwrap();
    let trace = parse(&path);
    let tid = |name: &str| trace.iter().find(|e| e["ph"] == "X" && e["name"] == name).unwrap()["tid"].clone();
    assert_eq!((tid("B"), tid("F")), (tid("A"), tid("A")), "nested and later zones share the lane's track");
    assert_eq!(tid("D"), tid("C"), "a child follows its parent's row");
    assert_ne!(tid("C"), tid("A"), "C overlaps B without nesting in it");
    assert!(tid("E") != tid("A") && tid("E") != tid("C"), "E overlaps A and C");
    let names: Vec<&str> = trace
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    assert_eq!(names, ["stream 0x1", "stream 0x1 (overlapping 1)", "stream 0x1 (overlapping 2)"]);
    std::fs::remove_dir_all(dir).ok();
}
