//! What a runtime asks for next (issue 20): timings back in code (the results sink), launches
//! linked to their GPU zones (flow arrows in the Chrome trace), dynamic names that keep their
//! call site and carry arguments, and traces of several processes on the wall clock.

use gpu_event_pool::launch::thread_number;
use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::sink::chrome::ChromeTrace;
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::results::{ListResults, ResultsSink};
use gpu_event_pool::{dynamic_location, location, Backend, DynamicLocation, TracingContext};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use trace_check::check_flows;

mod trace_check;

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpu-event-pool-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn parse(path: &std::path::Path) -> Vec<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Records one list on `stream`: a "frame" zone around `kernels` adjacent zones.
fn record_frame(ctx: &TracingContext<SimBackend>, sim: &SimBackend, kernels: &[(&str, i64)]) -> u64 {
    let stream = sim.stream();
    let mut list = ctx.list();
    list.zone_begin(&stream, location!("frame")).unwrap();
    for (i, &(name, ns)) in kernels.iter().enumerate() {
        let location = DynamicLocation::new(name).arg("index", i);
        if i == 0 {
            list.zone_begin(&stream, location).unwrap();
        } else {
            list.zone_next(&stream, location).unwrap();
        }
        sim.launch(&stream, ns);
    }
    list.zone_end(&stream).unwrap();
    list.zone_end(&stream).unwrap();
    let id = list.id();
    ctx.submit(list).unwrap();
    id
}

#[test]
fn the_results_sink_hands_each_list_to_the_application_under_the_id_it_submitted() {
    let sim = SimBackend::manual();
    let got: Arc<Mutex<Vec<ListResults>>> = Arc::default();
    let keep = Arc::clone(&got);
    let (channel, received) = ResultsSink::channel();
    let ctx = TracingContext::builder(sim.clone())
        .sink(ResultsSink::new(move |list| keep.lock().unwrap().push(list)))
        .sink(channel)
        .build()
        .unwrap();
    let first = record_frame(&ctx, &sim, &[("matmul", 3_000), ("softmax", 1_000)]);
    let second = record_frame(&ctx, &sim, &[("matmul", 5_000)]);
    ctx.flush().unwrap();

    let got = got.lock().unwrap();
    let by_id: HashMap<u64, &ListResults> = got.iter().map(|l| (l.list_id, l)).collect();
    assert_eq!(got.len(), 2);
    let durations = |id: u64| -> Vec<(String, i64)> {
        by_id[&id]
            .zones
            .iter()
            .map(|z| (z.location.name().to_owned(), z.gpu_end_ns - z.gpu_begin_ns))
            .collect()
    };
    assert_eq!(
        durations(first),
        [("frame".into(), 4_000), ("matmul".into(), 3_000), ("softmax".into(), 1_000)]
    );
    assert_eq!(durations(second), [("frame".into(), 5_000), ("matmul".into(), 5_000)]);
    assert!(got.iter().all(|l| l.context == ctx.info().id));
    let tree = by_id[&first].tree();
    assert_eq!(tree.len(), 1);
    assert_eq!(tree[0].children.len(), 2);
    let sent: Vec<u64> = received.try_iter().map(|l| l.list_id).collect();
    assert_eq!(sent, [first, second], "the channel gets the same lists, in order");
}

#[test]
fn a_results_sink_whose_receiver_is_gone_keeps_collecting() {
    let sim = SimBackend::manual();
    let (channel, received) = ResultsSink::channel();
    drop(received);
    let ctx = TracingContext::builder(sim.clone()).sink(channel).build().unwrap();
    record_frame(&ctx, &sim, &[("matmul", 1_000)]);
    let report = ctx.flush().unwrap();
    assert_eq!((report.lists, report.errors), (1, 0));
}

#[test]
fn launches_are_off_by_default_and_switched_at_run_time() {
    let sim = SimBackend::manual();
    let memory = MemorySink::new();
    let ctx = TracingContext::builder(sim.clone()).sink(memory.clone()).build().unwrap();
    assert!(!ctx.records_launches());
    record_frame(&ctx, &sim, &[("a", 1_000)]);
    ctx.set_record_launches(true);
    record_frame(&ctx, &sim, &[("b", 1_000)]);
    ctx.set_record_launches(false);
    record_frame(&ctx, &sim, &[("c", 1_000)]);
    ctx.flush().unwrap();
    let launched: Vec<(String, bool)> =
        memory.zones().iter().map(|z| (z.location.name().to_owned(), z.launch.is_some())).collect();
    assert_eq!(
        launched,
        [("frame", false), ("a", false), ("frame", true), ("b", true), ("frame", false), ("c", false)]
            .map(|(n, l)| (n.to_owned(), l))
    );
}

#[test]
fn a_launch_keeps_the_recording_threads_number_and_the_host_time_around_the_record_call() {
    let sim = SimBackend::realtime();
    let memory = MemorySink::new();
    let ctx =
        TracingContext::builder(sim.clone()).sink(memory.clone()).record_launches(true).build().unwrap();
    let (before, recorder) = std::thread::scope(|s| {
        s.spawn(|| {
            let before = sim.host_now_ns();
            record_frame(&ctx, &sim, &[("a", 50_000), ("b", 50_000)]);
            (before, thread_number())
        })
        .join()
        .unwrap()
    });
    let after = sim.host_now_ns();
    ctx.flush().unwrap();
    let zones = memory.zones();
    assert_eq!(zones.len(), 3);
    assert_ne!(recorder, thread_number(), "the recording thread's number, not the collector's");
    let mut last = before;
    for zone in &zones {
        let launch = zone.launch.expect("recorded");
        assert_eq!(launch.thread, recorder);
        assert!(last <= launch.host_begin_ns && launch.host_begin_ns <= launch.host_end_ns);
        assert!(launch.host_end_ns <= after);
        last = launch.host_begin_ns;
    }
}

#[test]
fn launches_become_flow_arrows_from_the_recording_threads_track_to_the_gpu_zone() {
    let path = scratch("launch-flows").join("trace.json");
    let trace = ChromeTrace::create(&path).unwrap();
    let sim = SimBackend::realtime();
    let ctx = TracingContext::builder(sim.clone()).sink(trace.sink()).record_launches(true).build().unwrap();
    let recorders: Vec<u64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    record_frame(&ctx, &sim, &[("matmul", 20_000), ("softmax", 10_000)]);
                    thread_number()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    std::thread::sleep(Duration::from_millis(5));
    ctx.flush().unwrap();
    let events = parse(&path);
    assert_eq!(check_flows(&events), 6, "one arrow per zone");
    let launch_tracks: Vec<u64> = events
        .iter()
        .filter(|e| e["cat"] == "launch" && e["ph"] == "X")
        .map(|e| e["tid"].as_u64().unwrap())
        .collect();
    assert!(launch_tracks.iter().all(|t| recorders.contains(t)));
    assert!(launch_tracks.iter().all(|&t| events
        .iter()
        .any(|e| e["name"] == "thread_name" && e["pid"] == trace.cpu_pid() && e["tid"] == t)));
    assert!(events
        .iter()
        .filter(|e| e["cat"] == "launch" && e["ph"] != "f")
        .all(|e| e["pid"] == trace.cpu_pid()));
}

#[test]
fn without_launches_the_trace_has_no_cpu_track_and_no_flow() {
    let path = scratch("no-launch-flows").join("trace.json");
    let trace = ChromeTrace::create(&path).unwrap();
    let sim = SimBackend::realtime();
    let ctx = TracingContext::builder(sim.clone()).sink(trace.sink()).build().unwrap();
    record_frame(&ctx, &sim, &[("matmul", 1_000)]);
    ctx.flush().unwrap();
    let events = parse(&path);
    assert_eq!(events.iter().filter(|e| e["ph"] == "X").count(), 2);
    assert!(!events.iter().any(|e| e["ph"] == "s" || e["ph"] == "f" || e["pid"] == trace.cpu_pid()));
}

#[test]
fn a_dynamic_name_keeps_its_call_site_and_its_arguments_reach_chrome_args() {
    let line = line!() + 1;
    let plain = DynamicLocation::new(format!("layer {}", 3));
    assert_eq!((plain.file.as_ref(), plain.line), (file!(), line));
    let line = line!() + 1;
    let full = dynamic_location!(format!("layer {}", 4));
    let full = full.arg("m", 1024u32).arg("scale", 0.5).arg("dtype", "f16");
    assert_eq!((full.file.as_ref(), full.line), (file!(), line));
    assert!(full.function.ends_with("reach_chrome_args"), "{}", full.function);

    let path = scratch("zone-args").join("trace.json");
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone())
        .sink(gpu_event_pool::sink::chrome::ChromeTrace::create(&path).unwrap().sink())
        .build()
        .unwrap();
    let mut list = ctx.list();
    list.zone_begin(&stream, full).unwrap();
    sim.launch(&stream, 1_000);
    list.zone_end(&stream).unwrap();
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
    let events = parse(&path);
    let zone = events.iter().find(|e| e["name"] == "layer 4").unwrap();
    let args = &zone["args"];
    assert_eq!(
        (args["m"].as_u64(), args["scale"].as_f64(), args["dtype"].as_str()),
        (Some(1024), Some(0.5), Some("f16"))
    );
    assert_eq!((args["file"].as_str(), args["line"].as_u64()), (Some(file!()), Some(u64::from(line))));
}

#[test]
#[cfg_attr(miri, ignore = "real time: Miri runs far slower than the 5 ms the traces may differ by")]
fn traces_of_two_processes_on_the_wall_clock_line_up() {
    let dir = scratch("wall-clock");
    // Two "processes": each its own trace, GPU and origin, made 30 ms apart.
    let process = |name: &str| {
        let path = dir.join(name);
        let trace = ChromeTrace::create(&path).unwrap().with_wall_clock_origin(UNIX_EPOCH);
        let sim = SimBackend::realtime();
        let ctx = TracingContext::builder(sim.clone()).sink(trace.sink().with_pid(7)).build().unwrap();
        (path, ctx, sim)
    };
    let (path_a, ctx_a, sim_a) = process("a.json");
    std::thread::sleep(Duration::from_millis(30));
    let (path_b, ctx_b, sim_b) = process("b.json");
    let now_us = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as f64;
    for (ctx, sim) in [(&ctx_a, &sim_a), (&ctx_b, &sim_b)] {
        record_frame(ctx, sim, &[("step", 1_000_000)]);
    }
    std::thread::sleep(Duration::from_millis(2));
    ctx_a.flush().unwrap();
    ctx_b.flush().unwrap();
    let begin = |path: &std::path::Path| {
        let events = parse(path);
        events.iter().find(|e| e["name"] == "step").unwrap()["ts"].as_f64().unwrap()
    };
    let (a, b) = (begin(&path_a), begin(&path_b));
    // Launched microseconds apart; on origins of their own they would be 30 ms apart.
    assert!((a - b).abs() < 5_000.0, "a {a} b {b}");
    assert!((a - now_us).abs() < 1e6, "ts is Unix time in microseconds: {a} vs {now_us}");
}

#[test]
fn a_context_whose_id_is_the_cpu_process_id_moves_out_of_its_way() {
    let sim = SimBackend::manual();
    // Context ids are process-wide and other tests make contexts at once: retry until the
    // context gets the id the trace was given.
    for _ in 0..100 {
        let next_id = TracingContext::new(sim.clone()).unwrap().info().id + 1;
        let memory = Arc::new(Mutex::new(Vec::new()));
        let trace = ChromeTrace::new(trace_check::SharedWriter(Arc::clone(&memory))).with_cpu_pid(next_id);
        let ctx = TracingContext::builder(sim.clone()).sink(trace.sink()).build().unwrap();
        if ctx.info().id != next_id {
            continue;
        }
        drop(ctx);
        drop(trace);
        let events: Vec<Value> = serde_json::from_slice(&memory.lock().unwrap()).unwrap();
        let process = events.iter().find(|e| e["name"] == "process_name").unwrap();
        assert_eq!(process["pid"].as_u64(), Some(u64::from(next_id) + 65_536));
        return;
    }
    panic!("never got the expected context id");
}
