//! The flight recorder (feature `perfetto`): its dumps load in Perfetto's importer as normal
//! traces of the newest zones, triggers dump (at most once per cooldown), and its memory
//! stays constant however long it runs.

use gpu_event_pool::sim::{SimBackend, SimStream};
use gpu_event_pool::sink::chrome::ChromeTrace;
use gpu_event_pool::sink::flight::{DumpFormat, FlightRecorder, Trigger};
use gpu_event_pool::sink::frames::FrameStats;
use gpu_event_pool::sink::perfetto::PerfettoTrace;
use gpu_event_pool::sink::{ContextInfo, Sink, Zone, ZoneBatch};
use gpu_event_pool::{location, Lane, TracingContext};
use perfetto_common::{import_errors, query, scratch, trace_processor_or_skip};
use std::time::Duration;

mod perfetto_common;

/// Records `lists` lists on `stream`: a command buffer around one `kernel` of `ns`.
fn record(ctx: &TracingContext<SimBackend>, sim: &SimBackend, stream: &SimStream, lists: usize, ns: i64) {
    for _ in 0..lists {
        let mut list = ctx.list();
        {
            let mut cb = list.zone(stream, location!("command buffer"));
            let _kernel = cb.zone(stream, location!("kernel"));
            sim.launch(stream, ns);
        }
        ctx.submit(list).unwrap();
    }
    ctx.collect().unwrap();
}

const SLICES: &str = "select s.name, s.ts - (select min(ts) from slice) as ts, s.dur, s.depth from slice s order by ts, depth;";

#[test]
fn a_dump_on_request_holds_the_newest_zones_as_a_normal_trace_in_both_formats() {
    let Some(tp) =
        trace_processor_or_skip("a_dump_on_request_holds_the_newest_zones_as_a_normal_trace_in_both_formats")
    else {
        return;
    };
    let dir = scratch("flight-on-request");
    // Room for about 100 lists of two zones: the oldest of the 1000 leave.
    let bytes = 100 * 2 * std::mem::size_of::<Zone>();
    let recorder = FlightRecorder::builder(Duration::from_secs(3600))
        .max_bytes(bytes)
        .with_counters(Duration::ZERO)
        .build()
        .unwrap();
    let sim = SimBackend::realtime();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone()).name("gpu 0").sink(recorder.sink()).build().unwrap();
    ctx.name_stream(&stream, "compute queue");
    for frame in 0..10 {
        ctx.frame(frame);
        record(&ctx, &sim, &stream, 100, 10_000);
    }
    ctx.flush().unwrap();
    let kept = recorder.zones();
    assert!(kept > 0 && kept < 2 * 1000, "kept {kept} of 2000 zones");
    assert!(recorder.bytes() <= bytes + 64 * 1024, "{} bytes", recorder.bytes());
    let perfetto = recorder.dump(dir.join("dump.pftrace"), DumpFormat::Perfetto).unwrap();
    let chrome = recorder.dump(dir.join("dump.json"), DumpFormat::Chrome).unwrap();
    assert_eq!((perfetto.zones, chrome.zones), (kept, kept));
    assert_eq!(perfetto.reason, "on request");
    for path in [&perfetto.path, &chrome.path] {
        assert_eq!(import_errors(&tp, path), vec![], "{}", path.display());
        let zones =
            query(&tp, path, "select count(*) from slice where name in ('command buffer', 'kernel');");
        assert_eq!(zones, vec![vec![kept.to_string()]], "{}", path.display());
        let track = query(&tp, path, "select count(*) from slice s join thread_track tt on s.track_id = tt.id join thread using (utid) where thread.name = 'compute queue' union all select count(*) from slice s join track t on s.track_id = t.id where t.name = 'compute queue';");
        assert!(track.iter().any(|row| row[0] == kept.to_string()), "on the named track: {track:?}");
    }
    assert_eq!(
        query(&tp, &perfetto.path, SLICES),
        query(&tp, &chrome.path, SLICES),
        "the same zones and frames"
    );
    let counters = query(&tp, &perfetto.path, "select count(*) from counter;");
    assert_ne!(counters, vec![vec!["0".to_owned()]], "counters kept");
}

/// Counter samples as (counter, ts, value), on the trace's own clock (a Chrome trace's
/// counter tracks are named `<name> value`).
const COUNTERS: &str = "select replace(t.name, ' value', '') as counter, c.ts, c.value \
    from counter c join track t on c.track_id = t.id order by c.ts, counter;";

/// Each counter's value at `ts` in `rows` (counter, ts, value): its latest sample at or before.
fn value_at(rows: &[Vec<String>], counter: &str, ts: i64) -> Option<String> {
    rows.iter()
        .rfind(|row| row[0] == counter && row[1].parse::<i64>().unwrap() <= ts)
        .map(|row| row[2].clone())
}

#[test]
fn a_dump_overlays_the_streamed_trace_in_both_formats_with_the_same_counter_samples() {
    let Some(tp) = trace_processor_or_skip(
        "a_dump_overlays_the_streamed_trace_in_both_formats_with_the_same_counter_samples",
    ) else {
        return;
    };
    let dir = scratch("flight-overlay");
    let (chrome_path, perfetto_path) = (dir.join("trace.json"), dir.join("trace.pftrace"));
    let chrome = ChromeTrace::create(&chrome_path).unwrap();
    let perfetto = PerfettoTrace::create(&perfetto_path).unwrap();
    let every = Duration::from_micros(500);
    let recorder = FlightRecorder::builder(Duration::from_secs(3600))
        .with_counters(every)
        .chrome_timeline_of(&chrome)
        .build()
        .unwrap();
    let sim = SimBackend::realtime();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone())
        .name("gpu 0")
        .sink(chrome.sink().with_counters(every))
        .sink(perfetto.sink().with_counters(every))
        .sink(recorder.sink())
        .build()
        .unwrap();
    for frame in 0..10 {
        ctx.frame(frame);
        for _ in 0..20 {
            record(&ctx, &sim, &stream, 1, 20_000);
        }
    }
    ctx.flush().unwrap();
    drop(ctx);
    chrome.flush().unwrap();
    perfetto.flush().unwrap();
    let dumps = [
        (recorder.dump(dir.join("dump.json"), DumpFormat::Chrome).unwrap().path, &chrome_path),
        (recorder.dump(dir.join("dump.pftrace"), DumpFormat::Perfetto).unwrap().path, &perfetto_path),
    ];
    let zones = "select name, ts, dur, depth from slice where name in ('command buffer', 'kernel') \
        order by ts, depth;";
    for (dump, streamed) in &dumps {
        assert_eq!(import_errors(&tp, dump), vec![], "{}", dump.display());
        let kept = query(&tp, dump, zones);
        assert_eq!(kept.len(), 400, "every zone kept: {}", dump.display());
        assert_eq!(kept, query(&tp, streamed, zones), "each zone at the same ns: {}", dump.display());
        let (kept, all) = (query(&tp, dump, COUNTERS), query(&tp, streamed, COUNTERS));
        let times = |rows: &[Vec<String>], from: i64| -> Vec<i64> {
            let mut times: Vec<i64> =
                rows.iter().map(|row| row[1].parse().unwrap()).filter(|&ts| ts >= from).collect();
            times.dedup();
            times
        };
        let first = kept.first().map(|row| row[1].parse::<i64>().unwrap()).expect("samples kept");
        assert_eq!(times(&kept, first), times(&all, first), "the same samples: {}", dump.display());
        for row in &kept {
            let ts = row[1].parse().unwrap();
            assert_eq!(Some(row[2].clone()), value_at(&all, &row[0], ts), "{row:?} in {}", dump.display());
        }
    }
}

#[test]
fn a_zone_over_its_threshold_dumps_once_per_cooldown() {
    let Some(tp) = trace_processor_or_skip("a_zone_over_its_threshold_dumps_once_per_cooldown") else {
        return;
    };
    let dir = scratch("flight-threshold");
    let recorder = FlightRecorder::builder(Duration::from_secs(60))
        .trigger_on(Trigger::ZoneLongerThan { name: "kernel".into(), threshold: Duration::from_micros(50) })
        .dump_to(&dir, DumpFormat::Perfetto)
        .cooldown(Duration::from_secs(3600))
        .build()
        .unwrap();
    // Exact durations: the simulated clock moves only as told.
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone()).sink(recorder.sink()).build().unwrap();
    record(&ctx, &sim, &stream, 50, 10_000);
    ctx.flush().unwrap();
    assert_eq!(recorder.triggers(), 0, "nothing over 50 µs yet");
    record(&ctx, &sim, &stream, 1, 80_000);
    ctx.flush().unwrap();
    assert!(recorder.wait_for_dumps(Duration::from_secs(30)));
    let dumps = recorder.dumps();
    assert_eq!(dumps.len(), 1, "{dumps:?}");
    assert!(dumps[0].reason.contains("zone kernel took 80000 ns"), "{}", dumps[0].reason);
    assert_eq!(dumps[0].path, dir.join("flight-1.pftrace"));
    assert_eq!(import_errors(&tp, &dumps[0].path), vec![]);
    let slow =
        query(&tp, &dumps[0].path, "select count(*) from slice where name = 'kernel' and dur = 80000;");
    assert_eq!(slow, vec![vec!["1".to_owned()]], "the slow zone is in its dump");
    record(&ctx, &sim, &stream, 1, 80_000);
    ctx.flush().unwrap();
    assert_eq!((recorder.triggers(), recorder.suppressed()), (2, 1), "the second within the cooldown");
    assert!(recorder.wait_for_dumps(Duration::from_secs(30)));
    assert_eq!(recorder.dumps().len(), 1);
}

#[test]
fn a_zone_over_its_p99_in_frame_stats_times_a_factor_dumps() {
    let Some(tp) = trace_processor_or_skip("a_zone_over_its_p99_in_frame_stats_times_a_factor_dumps") else {
        return;
    };
    let dir = scratch("flight-p99");
    let stats = FrameStats::new(100);
    let recorder = FlightRecorder::builder(Duration::from_secs(60))
        .trigger_on(Trigger::zone_over_p99(&stats, 3.0))
        .dump_to(&dir, DumpFormat::Chrome)
        .build()
        .unwrap();
    // Exact durations: the simulated clock moves only as told.
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone()).sink(stats.sink()).sink(recorder.sink()).build().unwrap();
    for frame in 0..20 {
        ctx.frame(frame);
        record(&ctx, &sim, &stream, 10, 10_000);
    }
    ctx.flush().unwrap();
    // Thresholds are read again at most every 100 ms of host time.
    sim.advance(120_000_000);
    record(&ctx, &sim, &stream, 1, 25_000);
    ctx.flush().unwrap();
    assert_eq!(recorder.triggers(), 0, "2.5 times the p99 is not over 3 times it");
    record(&ctx, &sim, &stream, 1, 40_000);
    ctx.flush().unwrap();
    assert!(recorder.wait_for_dumps(Duration::from_secs(30)));
    let dumps = recorder.dumps();
    assert_eq!(dumps.len(), 1, "{dumps:?}");
    // The command buffer around the kernel is as long, and comes first in its list.
    assert!(dumps[0].reason.contains("took 40000 ns, over its threshold of 30"), "{}", dumps[0].reason);
    assert_eq!(import_errors(&tp, &dumps[0].path), vec![]);
}

#[test]
fn a_zone_over_its_p99_is_caught_as_soon_as_its_name_has_100_zones_in_a_short_run() {
    let dir = scratch("flight-p99-short");
    let stats = FrameStats::new(100);
    let recorder = FlightRecorder::builder(Duration::from_secs(60))
        .trigger_on(Trigger::zone_over_p99(&stats, 3.0))
        .dump_to(&dir, DumpFormat::Perfetto)
        .build()
        .unwrap();
    // Exact durations, and a run of 2 ms of host time: far less than 100 ms.
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone()).sink(stats.sink()).sink(recorder.sink()).build().unwrap();
    for frame in 0..10 {
        ctx.frame(frame);
        record(&ctx, &sim, &stream, 10, 10_000);
    }
    ctx.flush().unwrap();
    assert_eq!(recorder.triggers(), 0, "no zone over 3 times its p99 yet");
    record(&ctx, &sim, &stream, 1, 40_000);
    ctx.flush().unwrap();
    assert_eq!(recorder.triggers(), 1, "the 101st kernel, 4 times the p99, 2 ms into the run");
    assert!(recorder.wait_for_dumps(Duration::from_secs(30)));
    assert!(recorder.dumps()[0].reason.contains("took 40000 ns"), "{:?}", recorder.dumps());
}

#[test]
fn a_frame_over_the_frames_p99_times_a_factor_dumps() {
    let dir = scratch("flight-frame-p99");
    let stats = FrameStats::new(100);
    let recorder = FlightRecorder::builder(Duration::from_secs(60))
        .trigger_on(Trigger::frame_over_p99(&stats, 3.0))
        .dump_to(&dir, DumpFormat::Perfetto)
        .cooldown(Duration::ZERO)
        .build()
        .unwrap();
    // Exact durations: the simulated clock moves only as told.
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone()).sink(stats.sink()).sink(recorder.sink()).build().unwrap();
    // Each frame's zones reach the sinks before the next frame starts.
    let frame = |id: u64, ns: i64| {
        ctx.frame(id);
        record(&ctx, &sim, &stream, 2, ns);
        ctx.flush().unwrap();
    };
    // Frames of two lists: 20 µs, every tenth 30 µs.
    for id in 0..120 {
        frame(id, if id % 10 == 0 { 15_000 } else { 10_000 });
    }
    // Thresholds are read again at most every 100 ms of host time: here, at frame 120's
    // first zones, from the 100 frames `stats` keeps (nine of 30 µs; the last, frame 120, one
    // list of 40 µs so far): the p99 is 30 µs (the p50 20), 3 times it 90 µs.
    sim.advance(120_000_000);
    // A frame is checked once the frame two after it starts.
    for (id, ns) in [(120, 40_000), (121, 10_000), (122, 10_000)] {
        frame(id, ns);
    }
    assert_eq!(recorder.triggers(), 0, "a frame of 80 µs is not over 90 µs");
    for (id, ns) in [(123, 50_000), (124, 10_000), (125, 10_000)] {
        frame(id, ns);
    }
    assert!(recorder.wait_for_dumps(Duration::from_secs(30)));
    let reasons: Vec<String> = recorder.dumps().into_iter().map(|d| d.reason).collect();
    assert_eq!(reasons, vec!["frame 123 spanned 100000 ns, over its threshold of 90000 ns".to_owned()]);
}

#[test]
fn a_frame_over_its_threshold_and_the_applications_own_trigger_dump() {
    let dir = scratch("flight-frame");
    let recorder = FlightRecorder::builder(Duration::from_secs(60))
        .trigger_on(Trigger::FrameLongerThan(Duration::from_micros(500)))
        .dump_to(&dir, DumpFormat::Perfetto)
        .cooldown(Duration::ZERO)
        .build()
        .unwrap();
    // Exact durations: the simulated clock moves only as told.
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone()).sink(recorder.sink()).build().unwrap();
    for frame in 0..6 {
        ctx.frame(frame);
        // Frame 3's work spans 10 lists of 100 µs: 1 ms.
        let lists = if frame == 3 { 10 } else { 2 };
        record(&ctx, &sim, &stream, lists, if frame == 3 { 100_000 } else { 10_000 });
        ctx.flush().unwrap();
    }
    assert!(recorder.wait_for_dumps(Duration::from_secs(30)));
    let reasons: Vec<String> = recorder.dumps().into_iter().map(|d| d.reason).collect();
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(reasons[0].starts_with("frame 3 spanned"), "{reasons:?}");
    assert!(recorder.trigger("collect failed"));
    assert!(recorder.wait_for_dumps(Duration::from_secs(30)));
    let dumps = recorder.dumps();
    assert_eq!(dumps[1].reason, "collect failed");
    assert!(dumps[1].path.is_file() && dumps[1].zones > 0, "{dumps:?}");
    if let Some(tp) =
        trace_processor_or_skip("a_frame_over_its_threshold_and_the_applications_own_trigger_dump")
    {
        for dump in &dumps {
            assert_eq!(import_errors(&tp, &dump.path), vec![], "{}", dump.path.display());
        }
    }
}

/// A collector's calls, straight to a sink: one list of 100 zones every millisecond of
/// simulated time.
fn feed(sink: &mut dyn Sink, info: &ContextInfo, from_ms: u64, ms: u64) {
    let mut zones = Vec::with_capacity(100);
    for at in from_ms..from_ms + ms {
        zones.clear();
        let begin = at as i64 * 1_000_000;
        zones.extend((0..100).map(|i| {
            Zone::new(location!("kernel"), Lane::Stream(1), 0, begin + i * 10_000, begin + i * 10_000 + 9_000)
        }));
        sink.zones(info, ZoneBatch { list_id: at, zones: &zones }).unwrap();
    }
}

#[test]
fn memory_stays_constant_over_a_simulated_minute_at_100000_zones_a_second() {
    let recorder = FlightRecorder::builder(Duration::from_secs(1)).build().unwrap();
    let mut sink = recorder.sink();
    let base = gpu_event_pool::sink::Calibration { gpu_ns: 0, host_ns: 0 };
    let info = ContextInfo { id: 1, name: "gpu".into(), backend: "sim", base, host_clock_origin: None };
    sink.open(&info).unwrap();
    feed(&mut sink, &info, 0, 5_000);
    let warm = recorder.bytes();
    let kept = recorder.zones();
    assert_eq!(kept, 1_001 * 100, "the last second: 1001 lists");
    for second in 5..60 {
        feed(&mut sink, &info, second * 1_000, 1_000);
        assert_eq!(recorder.bytes(), warm, "after {second} s");
        assert_eq!(recorder.zones(), kept);
    }
}
