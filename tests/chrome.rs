//! The Chrome/Perfetto trace: valid JSON, one complete event per zone, correct nesting.

use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::sink::chrome::ChromeTraceSink;
use gpu_event_pool::{location, TracingContext, Verbosity};
use serde_json::Value;

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
        .sink(ChromeTraceSink::create(&path).unwrap())
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
