//! What a runtime watches (docs/watch.md): the counters on a Chrome trace's timeline, frames
//! on zones, results and the trace, and when sinks get them.

use gpu_event_pool::sim::{SimBackend, SimStream};
use gpu_event_pool::sink::chrome::ChromeTrace;
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::results::ResultsSink;
use gpu_event_pool::sink::{ContextInfo, CounterSample, FrameMark, Sink, ZoneBatch};
use gpu_event_pool::{location, Config, TracingContext};
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod trace_check;

use trace_check::{check_nesting, ns, SharedWriter};

/// The events of a trace written into `out`.
fn events(out: &Arc<Mutex<Vec<u8>>>) -> Vec<Value> {
    let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
    // A trace on a stream writer is closed when its sink is dropped; until then, close it here.
    let text = if text.trim_end().ends_with(']') { text } else { format!("{}]", text.trim_end()) };
    serde_json::from_str(&text).unwrap()
}

/// The values of counter `name`, in file order, and the pid of each.
fn counter(events: &[Value], name: &str) -> Vec<(u64, i64)> {
    events
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == name)
        .map(|e| (e["pid"].as_u64().unwrap(), (e["args"]["value"].as_f64().unwrap() * 1000.0).round() as i64))
        .collect()
}

/// Consecutive repeats removed: what a counter track that writes only changes shows.
fn changes(values: impl IntoIterator<Item = usize>) -> Vec<i64> {
    let mut out: Vec<i64> = Vec::new();
    for v in values {
        if out.last() != Some(&(v as i64 * 1000)) {
            out.push(v as i64 * 1000);
        }
    }
    out
}

/// Records a list of two zones on `stream` (dropped ones are counted, not errors here).
fn record(ctx: &TracingContext<SimBackend>, sim: &SimBackend, stream: &SimStream) {
    let mut list = ctx.list();
    let _ = list.zone_begin(stream, location!("pass"));
    sim.launch(stream, 10_000);
    let _ = list.zone_next(stream, location!("blit"));
    sim.launch(stream, 5_000);
    let _ = list.zone_end(stream);
    ctx.submit(list).unwrap();
}

#[test]
fn counter_tracks_in_the_chrome_trace_rise_and_fall_with_the_stats() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let (writer, out) = SharedWriter::new();
    let mut config = Config::default();
    (config.initial_capacity, config.max_capacity, config.batch) = (8, 16, 2);
    let ctx = TracingContext::builder(sim.clone())
        .config(config)
        .sink(ChromeTrace::new(writer).sink().with_counters(Duration::ZERO))
        .build()
        .unwrap();
    sim.advance(1_000_000);
    let mut seen = Vec::new();
    let mut collect = || {
        ctx.collect().unwrap();
        let stats = ctx.stats();
        seen.push((stats.in_use, stats.dropped_zones, stats.lists_submitted - stats.lists_collected));
    };
    for round in 0..3 {
        // To exhaustion (nothing has run: every list holds its slots), then back.
        for _ in 0..12 {
            record(&ctx, &sim, &stream);
            collect();
        }
        sim.advance(1_000_000);
        collect();
        assert_eq!(ctx.stats().in_use, 0, "round {round}");
    }
    assert!(ctx.stats().dropped_zones > 0, "the pool ran out");
    let events = events(&out);
    let pid = events.iter().find(|e| e["name"] == "process_name").unwrap()["pid"].as_u64().unwrap();
    let slots = counter(&events, "slots in use");
    assert!(slots.iter().all(|&(p, _)| p == pid), "a track in the context's process");
    let values = |c: &[(u64, i64)]| c.iter().map(|&(_, v)| v).collect::<Vec<_>>();
    // Every value the stats showed after a collect is on the track, in order; the track may
    // hold more: a recording thread that finds the pool exhausted collects too (before it
    // drops its zone), and each collect samples the counters.
    let in_order = |track: Vec<i64>, seen: Vec<i64>| {
        let mut track = track.into_iter();
        seen.iter().all(|v| track.any(|t| t == *v))
    };
    assert!(in_order(values(&slots), changes(seen.iter().map(|s| s.0))), "{slots:?} against {seen:?}");
    assert!(values(&slots).iter().max() >= Some(&15_000), "rises to the pool's maximum: {slots:?}");
    assert!(values(&slots).iter().all(|&v| (0..=16_000).contains(&v)), "{slots:?}");
    let dropped = counter(&events, "zones dropped");
    assert!(in_order(values(&dropped), changes(seen.iter().map(|s| s.1))), "{dropped:?}");
    assert!(values(&dropped).windows(2).all(|w| w[0] <= w[1]), "cumulative: {dropped:?}");
    let pending = counter(&events, "lists pending");
    assert!(in_order(values(&pending), changes(seen.iter().map(|s| s.2))), "{pending:?}");
    let lag = counter(&events, "collection lag (us)");
    assert!(!lag.is_empty() && lag.iter().all(|&(_, v)| v >= 0));
    check_nesting(&events);
}

#[test]
fn counters_are_written_at_most_once_per_interval_and_never_unless_asked() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let (writer, out) = SharedWriter::new();
    let (plain_writer, plain_out) = SharedWriter::new();
    let ctx = TracingContext::builder(sim.clone())
        .sink(ChromeTrace::new(writer).sink().with_counters(Duration::from_micros(500)))
        .build()
        .unwrap();
    let plain =
        TracingContext::builder(sim.clone()).sink(ChromeTrace::new(plain_writer).sink()).build().unwrap();
    for step in 0..40 {
        record(&ctx, &sim, &stream);
        record(&plain, &sim, &stream);
        // The lag changes every time (an unchanged counter is not written again).
        sim.advance(100_000 + step * 1_000);
        ctx.collect().unwrap();
        plain.collect().unwrap();
    }
    let events = events(&out);
    let times: Vec<i64> =
        events.iter().filter(|e| e["name"] == "collection lag (us)").map(|e| ns(e, "ts")).collect();
    assert!(times.windows(2).all(|w| w[1] - w[0] >= 500_000), "{times:?}");
    assert!(times.len() >= 8, "4.8 ms of samples, one per 500 µs: {times:?}");
    assert!(self::events(&plain_out).iter().all(|e| e["ph"] != "C"), "no counters unless asked");
}

#[test]
fn frames_reach_the_chrome_trace_as_instant_events_and_zones_carry_them() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let (writer, out) = SharedWriter::new();
    let ctx = TracingContext::builder(sim.clone()).sink(ChromeTrace::new(writer).sink()).build().unwrap();
    for frame in 10..15 {
        ctx.frame(frame);
        sim.advance(50_000);
        record(&ctx, &sim, &stream);
        sim.advance(50_000);
        ctx.collect().unwrap();
    }
    ctx.flush().unwrap();
    let events = events(&out);
    let pid = events.iter().find(|e| e["name"] == "process_name").unwrap()["pid"].clone();
    let marks: Vec<&Value> = events.iter().filter(|e| e["ph"] == "i").collect();
    assert_eq!(marks.len(), 5);
    for (mark, frame) in marks.iter().zip(10..) {
        assert_eq!(
            (&mark["name"], &mark["s"], &mark["pid"]),
            (&Value::from(format!("frame {frame}")), &"p".into(), &pid)
        );
        assert_eq!(mark["args"]["frame"], frame);
        let zones: Vec<&Value> =
            events.iter().filter(|e| e["ph"] == "X" && e["args"]["frame"] == frame).collect();
        assert_eq!(zones.len(), 2, "frame {frame}");
        // The mark is the host time of `frame`, 50 µs before its list's first zone ran: the
        // zone is drawn there, within its bound.
        let first = zones.iter().min_by_key(|z| ns(z, "ts")).unwrap();
        let bound = first["args"]["bound_begin_ns"].as_i64().unwrap();
        assert!((ns(first, "ts") - ns(mark, "ts") - 50_000).abs() <= bound, "frame {frame}");
        assert!(bound <= 1_000, "a tight bound: {bound}");
    }
    check_nesting(&events);
}

#[test]
fn a_list_belongs_to_the_frame_current_when_it_was_made() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let (sink, results) = ResultsSink::channel();
    let memory = MemorySink::new();
    let ctx = TracingContext::builder(sim.clone()).sink(sink).sink(memory.clone()).build().unwrap();
    assert_eq!(ctx.current_frame(), None);
    let before = ctx.list();
    ctx.frame(6);
    let mut made_in_6 = ctx.list();
    ctx.frame(7);
    assert_eq!(ctx.current_frame(), Some(7));
    let mut made_in_7 = ctx.list();
    ctx.frame(u64::MAX);
    let mut made_after = ctx.list();
    assert_eq!(
        (before.frame(), made_in_6.frame(), made_in_7.frame(), made_after.frame()),
        (None, Some(6), Some(7), None)
    );
    drop(before);
    // Recorded and submitted in another order, after frame 7 began: still frame 6.
    for list in [&mut made_in_7, &mut made_in_6, &mut made_after] {
        list.zone_begin(&stream, location!("work")).unwrap();
        sim.launch(&stream, 1_000);
        list.zone_end(&stream).unwrap();
    }
    let ids = [made_in_7.id(), made_in_6.id(), made_after.id()];
    for list in [made_in_7, made_in_6, made_after] {
        ctx.submit(list).unwrap();
    }
    ctx.flush().unwrap();
    let frames: Vec<(u64, Option<u64>)> = results.try_iter().map(|l| (l.list_id, l.frame)).collect();
    assert_eq!(frames, [(ids[0], Some(7)), (ids[1], Some(6)), (ids[2], None)]);
    let zones: Vec<Option<u64>> = memory.zones().iter().map(|z| z.frame).collect();
    assert_eq!(zones, [Some(7), Some(6), None]);
}

/// Every call a sink gets, in order.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<String>>>);

impl Sink for Calls {
    fn zones(&mut self, _: &ContextInfo, batch: ZoneBatch<'_>) -> std::io::Result<()> {
        let frames: BTreeSet<_> = batch.zones.iter().map(|z| z.frame).collect();
        self.0.lock().unwrap().push(format!("zones of {frames:?}"));
        Ok(())
    }
    fn frame(&mut self, _: &ContextInfo, mark: FrameMark) -> std::io::Result<()> {
        self.0.lock().unwrap().push(format!("frame {}", mark.id));
        Ok(())
    }
    fn counters(&mut self, _: &ContextInfo, _: &CounterSample) -> std::io::Result<()> {
        self.0.lock().unwrap().push("counters".to_owned());
        Ok(())
    }
}

#[test]
fn a_frames_mark_reaches_the_sinks_by_the_end_of_the_emit_phase_of_its_first_zones() {
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let calls = Calls::default();
    let ctx = TracingContext::builder(sim.clone()).sink(calls.clone()).build().unwrap();
    for frame in 0..4 {
        ctx.frame(frame);
        record(&ctx, &sim, &stream);
        sim.advance(100_000);
        ctx.collect().unwrap();
        // One collect, one emit phase: its zones, then the marks; no counters (not asked).
        let phase = std::mem::take(&mut *calls.0.lock().unwrap());
        assert_eq!(phase, [format!("zones of {{Some({frame})}}"), format!("frame {frame}")]);
    }
}
