//! CPU and GPU on one trace (feature `tracing`): the `tracing` layer writes CPU spans into the
//! same `ChromeTrace` as the GPU zones, on the same clock and origin, on a process of its own,
//! one track per thread; with launches on, flow arrows go from the recording thread's track
//! (the one its spans are on) to each GPU zone.

use gpu_event_pool::launch::thread_number;
use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::sink::chrome::ChromeTrace;
use gpu_event_pool::{location, TracingContext};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;
use trace_check::{check_flows, check_nesting, ns};
use tracing::Dispatch;
use tracing_subscriber::layer::SubscriberExt;

mod trace_check;

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpu-event-pool-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn parse(path: &std::path::Path) -> Vec<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A subscriber writing into `trace`. Tests run in parallel in one process, so each thread
/// sets it as its own default instead of the global one.
fn dispatch(trace: &ChromeTrace) -> Dispatch {
    Dispatch::new(tracing_subscriber::registry().with(trace.layer()))
}

#[test]
fn one_file_holds_cpu_spans_gpu_zones_and_arrows_from_each_recording_thread() {
    let path = scratch("layer-one-file").join("trace.json");
    let trace = ChromeTrace::create(&path).unwrap();
    let dispatch = dispatch(&trace);
    let sim = SimBackend::realtime();
    let ctx = TracingContext::builder(sim.clone())
        .name("gpu 0")
        .sink(trace.sink())
        .record_launches(true)
        .build()
        .unwrap();
    let recorders: Vec<u64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..3)
            .map(|t| {
                let (ctx, sim, dispatch) = (&ctx, &sim, dispatch.clone());
                std::thread::Builder::new()
                    .name(format!("recorder {t}"))
                    .spawn_scoped(s, move || {
                        let _default = tracing::dispatcher::set_default(&dispatch);
                        let stream = sim.stream();
                        for frame in 0..4 {
                            let _span = tracing::info_span!("record command buffer", frame).entered();
                            let mut list = ctx.list();
                            {
                                let mut cb = list.zone(&stream, location!("command buffer"));
                                let mut kernel = cb.zone(&stream, location!("matmul"));
                                sim.launch(&stream, 20_000);
                                kernel.next(location!("softmax"));
                                sim.launch(&stream, 10_000);
                            }
                            ctx.submit(list).unwrap();
                        }
                        tracing::info!(frames = 4, "recorded");
                        thread_number()
                    })
                    .unwrap()
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    std::thread::sleep(Duration::from_millis(2));
    ctx.flush().unwrap();
    drop(ctx);
    trace.flush().unwrap();
    let events = parse(&path);

    assert_eq!(check_flows(&events), 3 * 4 * 3, "an arrow per zone");
    check_nesting(&events);
    let cpu = u64::from(trace.cpu_pid());
    let spans: Vec<&Value> = events.iter().filter(|e| e["name"] == "record command buffer").collect();
    assert_eq!(spans.len(), 12);
    for launch in events.iter().filter(|e| e["cat"] == "launch" && e["ph"] == "X") {
        let (t, begin, end) =
            (launch["tid"].as_u64(), ns(launch, "ts"), ns(launch, "ts") + ns(launch, "dur"));
        assert!(
            spans
                .iter()
                .any(|s| s["tid"].as_u64() == t && ns(s, "ts") <= begin && end <= ns(s, "ts") + ns(s, "dur")),
            "the launch {launch} lies in the span that recorded it, on the same track"
        );
    }
    for &recorder in &recorders {
        let named = |name: &str| {
            events.iter().any(|e| {
                e["name"] == "thread_name"
                    && e["pid"].as_u64() == Some(cpu)
                    && e["tid"].as_u64() == Some(recorder)
                    && e["args"]["name"].as_str().is_some_and(|n| n.starts_with(name))
            })
        };
        assert!(named("recorder "), "thread {recorder} is named once, after the thread");
        assert!(events.iter().any(|e| e["ph"] == "i"
            && e["name"] == "recorded"
            && e["tid"].as_u64() == Some(recorder)
            && e["args"]["frames"] == 4));
    }
    let gpu_pids: Vec<u64> =
        events.iter().filter(|e| e["cat"] == "gpu").map(|e| e["pid"].as_u64().unwrap()).collect();
    assert!(!gpu_pids.is_empty() && !gpu_pids.contains(&cpu), "the GPU has a process of its own");
    assert_eq!(spans[0]["args"]["frame"].as_u64().map(|f| f < 4), Some(true), "span fields are args");
    assert_eq!(
        events.iter().filter(|e| e["name"] == "process_name" && e["pid"].as_u64() == Some(cpu)).count(),
        1
    );
}

#[test]
fn a_gpu_zone_waited_for_inside_a_cpu_span_lies_inside_it() {
    let path = scratch("layer-wait").join("trace.json");
    let trace = ChromeTrace::create(&path).unwrap();
    let _default = tracing::dispatcher::set_default(&dispatch(&trace));
    // A GPU made 30 ms after the trace: a zone on a clock or origin of its own would land
    // 30 ms off the span.
    std::thread::sleep(Duration::from_millis(30));
    let sim = SimBackend::realtime();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone()).sink(trace.sink()).build().unwrap();
    {
        let _wait = tracing::info_span!("launch and wait").entered();
        let mut list = ctx.list();
        list.zone_begin(&stream, location!("kernel")).unwrap();
        let done = sim.launch(&stream, 2_000_000);
        list.zone_end(&stream).unwrap();
        ctx.submit(list).unwrap();
        while sim.now() < done {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    ctx.flush().unwrap();
    trace.flush().unwrap();
    let events = parse(&path);
    let find = |name: &str| events.iter().find(|e| e["name"] == name).unwrap();
    let (span, kernel) = (find("launch and wait"), find("kernel"));
    assert!(ns(span, "ts") <= ns(kernel, "ts"), "{span} {kernel}");
    assert!(ns(kernel, "ts") + ns(kernel, "dur") <= ns(span, "ts") + ns(span, "dur"), "{span} {kernel}");
}

#[test]
fn a_span_records_fields_given_later_and_each_entry_is_one_slice() {
    let path = scratch("layer-fields").join("trace.json");
    let trace = ChromeTrace::create(&path).unwrap();
    {
        let _default = tracing::dispatcher::set_default(&dispatch(&trace));
        let span = tracing::info_span!("step", size = tracing::field::Empty);
        span.record("size", 64);
        for _ in 0..2 {
            let _entered = span.enter();
        }
    }
    trace.flush().unwrap();
    let events = parse(&path);
    let steps: Vec<&Value> = events.iter().filter(|e| e["name"] == "step").collect();
    assert_eq!(steps.len(), 2);
    assert!(steps.iter().all(|s| s["args"]["size"] == 64 && s["ph"] == "X" && s["cat"] == "tracing_layer"));
}
