//! The Perfetto sink (feature `perfetto`), checked with Perfetto's own importer: every file
//! loads with no import error or data loss, and a run's zones, tracks, nesting, times, flows
//! and counters equal the Chrome trace's of the same run.

use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::sink::chrome::ChromeTrace;
use gpu_event_pool::sink::perfetto::PerfettoTrace;
use gpu_event_pool::{dynamic_location, location, TracingContext};
use perfetto_common::{
    decode_check, has_schema, import_errors, query, run_check, scratch, trace_processor_or_skip, COUNTERS,
    FLOWS, SLICES,
};
use std::path::Path;
use std::time::Duration;

mod perfetto_common;

/// Records a run into a Chrome trace and a Perfetto trace at once (the same zones through
/// both sinks): three streams, nested zones, adjacent zones, a dynamic location with
/// arguments, frames, counters and launch arrows from two recording threads.
fn record_both(chrome: &Path, perfetto: &Path) {
    let chrome = ChromeTrace::create(chrome).unwrap();
    let perfetto = PerfettoTrace::create(perfetto).unwrap();
    let sim = SimBackend::realtime();
    let ctx = TracingContext::builder(sim.clone())
        .name("gpu 0")
        .sink(chrome.sink().with_counters(Duration::ZERO))
        .sink(perfetto.sink().with_counters(Duration::ZERO))
        .record_launches(true)
        .build()
        .unwrap();
    let streams: Vec<_> = (0..3).map(|_| sim.stream()).collect();
    ctx.name_stream(&streams[0], "copy queue");
    std::thread::scope(|s| {
        for t in 0..2 {
            let (ctx, sim, streams) = (&ctx, &sim, &streams);
            std::thread::Builder::new()
                .name(format!("recorder {t}"))
                .spawn_scoped(s, move || {
                    for i in 0..12 {
                        if t == 0 {
                            ctx.frame(i / 4);
                        }
                        // One list at a time on a stream: thread 0 on streams 0 and 1,
                        // thread 1 on stream 2.
                        let stream = if t == 0 { &streams[i as usize % 2] } else { &streams[2] };
                        let mut list = ctx.list();
                        {
                            let mut cb = list.zone(stream, location!("command buffer"));
                            {
                                let mut kernel = cb.zone(stream, location!("matmul"));
                                sim.launch(stream, 20_000);
                                kernel.next(location!("softmax"));
                                sim.launch(stream, 5_000);
                            }
                            let layer = dynamic_location!(format!("layer {}", i % 3))
                                .arg("m", 1024)
                                .arg("dtype", "f16");
                            let _layer = cb.zone(stream, layer);
                            sim.launch(stream, 7_000);
                        }
                        ctx.submit(list).unwrap();
                        ctx.collect().unwrap();
                    }
                })
                .unwrap();
        }
    });
    ctx.flush().unwrap();
    drop(ctx);
}

#[test]
fn a_run_loads_with_no_import_error_and_shows_what_the_chrome_trace_shows() {
    let Some(tp) =
        trace_processor_or_skip("a_run_loads_with_no_import_error_and_shows_what_the_chrome_trace_shows")
    else {
        return;
    };
    let dir = scratch("perfetto-equals-chrome");
    let (chrome, perfetto) = (dir.join("trace.json"), dir.join("trace.pftrace"));
    record_both(&chrome, &perfetto);
    assert_eq!(import_errors(&tp, &perfetto), vec![], "Perfetto's importer found errors");
    assert_eq!(import_errors(&tp, &chrome), vec![], "the Chrome trace too");
    let slices = query(&tp, &perfetto, SLICES);
    // 24 lists of 4 zones, their 96 launches, 12 frame marks.
    assert_eq!(slices.len(), 24 * 4 * 2 + 12, "{} slices", slices.len());
    assert_eq!(
        slices,
        query(&tp, &chrome, SLICES),
        "zones, launches and frames: tracks, names, times, depths"
    );
    let tracks: std::collections::BTreeSet<_> =
        slices.iter().map(|row| (row[0].clone(), row[1].clone())).collect();
    assert!(tracks.contains(&("gpu 0 (sim)".to_owned(), "copy queue".to_owned())), "{tracks:?}");
    assert!(tracks.contains(&("gpu 0 (sim)".to_owned(), "frames".to_owned())), "{tracks:?}");
    let flows = query(&tp, &perfetto, FLOWS);
    assert_eq!(flows.len(), 96, "an arrow from every launch");
    for flow in &flows {
        assert_eq!(flow[0], flow[2], "an arrow goes from a launch to its own zone: {flow:?}");
    }
    // The Chrome trace's arrows start and end at the same times. Its flow finish binds to a
    // slice by time, so where a nested zone begins with its parent the importer binds the
    // parent's arrow to the nested zone; the Perfetto trace names the slice itself.
    let times = |flows: &[Vec<String>]| -> Vec<(String, String, String)> {
        flows.iter().map(|f| (f[0].clone(), f[1].clone(), f[3].clone())).collect()
    };
    assert_eq!(times(&flows), times(&query(&tp, &chrome, FLOWS)), "flows");
    let counters = query(&tp, &perfetto, COUNTERS);
    assert!(counters.iter().any(|row| row[0] == "slots in use"), "{counters:?}");
    assert_eq!(counters, query(&tp, &chrome, COUNTERS), "counters");
    decode_check("a_run_loads_with_no_import_error_and_shows_what_the_chrome_trace_shows", &[&perfetto]);
}

/// Records `lists` lists of two zones each on `stream` and collects them.
fn record(
    ctx: &TracingContext<SimBackend>,
    sim: &SimBackend,
    stream: &gpu_event_pool::sim::SimStream,
    lists: usize,
) {
    for _ in 0..lists {
        let mut list = ctx.list();
        {
            let mut cb = list.zone(stream, location!("command buffer"));
            let _kernel = cb.zone(stream, location!("kernel"));
            sim.launch(stream, 10_000);
        }
        ctx.submit(list).unwrap();
    }
}

#[test]
fn the_file_is_a_whole_trace_after_every_flush() {
    let Some(tp) = trace_processor_or_skip("the_file_is_a_whole_trace_after_every_flush") else { return };
    let dir = scratch("perfetto-every-flush");
    let path = dir.join("trace.pftrace");
    let sim = SimBackend::realtime();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone())
        .sink(PerfettoTrace::create(&path).unwrap().sink())
        .build()
        .unwrap();
    let mut copies = Vec::new();
    for round in 1..=3 {
        record(&ctx, &sim, &stream, 50 * round);
        ctx.flush().unwrap();
        let copy = dir.join(format!("after-flush-{round}.pftrace"));
        std::fs::copy(&path, &copy).unwrap();
        copies.push(copy);
    }
    for (round, copy) in copies.iter().enumerate() {
        assert_eq!(import_errors(&tp, copy), vec![], "{}", copy.display());
        let zones: usize = (1..=round + 1).map(|r| 50 * r * 2).sum();
        let count =
            query(&tp, copy, "select count(*) from slice where name in ('command buffer', 'kernel');");
        assert_eq!(count, vec![vec![zones.to_string()]], "every zone flushed by flush {}", round + 1);
    }
    let copies: Vec<&Path> = copies.iter().map(|c| c.as_path()).collect();
    decode_check("the_file_is_a_whole_trace_after_every_flush", &copies);
    // A write cut short inside a packet (the process died in it): the reader drops the
    // packet cut short and keeps every one before it.
    let bytes = std::fs::read(copies[2]).unwrap();
    let cut = dir.join("cut.pftrace");
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).unwrap();
    assert_eq!(import_errors(&tp, &cut), vec![], "a cut packet is no import error");
    let count = query(&tp, &cut, "select count(*) from slice;")[0][0].parse::<usize>().unwrap();
    assert!(count >= 600 - 1, "the slices before the cut packet: {count}");
}

/// The child of `a_writer_killed_after_a_flush_leaves_every_flushed_zone`: records and
/// flushes 40 lists, records and collects 40 more without a flush, and aborts.
#[test]
#[ignore = "run by a_writer_killed_after_a_flush_leaves_every_flushed_zone, in a process of its own"]
fn writer_that_aborts() {
    let Ok(path) = std::env::var("GPU_EVENT_POOL_PERFETTO_ABORT_TO") else { return };
    let sim = SimBackend::realtime();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone())
        .sink(PerfettoTrace::create(&path).unwrap().sink())
        .build()
        .unwrap();
    record(&ctx, &sim, &stream, 40);
    ctx.flush().unwrap();
    record(&ctx, &sim, &stream, 40);
    ctx.collect().unwrap();
    std::process::abort();
}

#[test]
fn a_writer_killed_after_a_flush_leaves_every_flushed_zone() {
    let Some(tp) = trace_processor_or_skip("a_writer_killed_after_a_flush_leaves_every_flushed_zone") else {
        return;
    };
    let path = scratch("perfetto-abort").join("trace.pftrace");
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "writer_that_aborts", "--nocapture"])
        .env("GPU_EVENT_POOL_PERFETTO_ABORT_TO", &path)
        .status()
        .unwrap();
    assert!(!status.success(), "the writer aborted");
    assert_eq!(import_errors(&tp, &path), vec![]);
    let count = query(&tp, &path, "select count(*) from slice;");
    let count: usize = count[0][0].parse().unwrap();
    // Every zone of the first 40 lists; of the 40 after the flush, those written out in
    // whole stages of 64 KiB before the abort (here: none, 40 lists are far less).
    assert_eq!(count, 80, "the 80 zones flushed, and nothing after them");
    decode_check("a_writer_killed_after_a_flush_leaves_every_flushed_zone", &[&path]);
}

#[test]
fn thousands_of_names_and_lanes_restart_sequences_and_every_zone_keeps_its_name() {
    let Some(tp) = trace_processor_or_skip(
        "thousands_of_names_and_lanes_restart_sequences_and_every_zone_keeps_its_name",
    ) else {
        return;
    };
    let path = scratch("perfetto-names").join("trace.pftrace");
    let sim = SimBackend::realtime();
    let ctx = TracingContext::builder(sim.clone())
        .sink(PerfettoTrace::create(&path).unwrap().sink())
        .build()
        .unwrap();
    let stream = sim.stream();
    // Past the 4096 entries a sequence interns before it starts over.
    for i in 0..5000 {
        let mut list = ctx.list();
        list.zone_begin(&stream, dynamic_location!(format!("kernel {i}")).arg(format!("arg {i}"), i))
            .unwrap();
        sim.launch(&stream, 1_000);
        list.zone_end(&stream).unwrap();
        ctx.submit(list).unwrap();
    }
    ctx.flush().unwrap();
    drop(ctx);
    assert_eq!(import_errors(&tp, &path), vec![]);
    let names =
        query(&tp, &path, "select count(distinct name), count(*) from slice where name like 'kernel %';");
    assert_eq!(names, vec![vec!["5000".to_owned(), "5000".to_owned()]]);
    let wrong = query(
        &tp,
        &path,
        "select count(*) from slice s join args a on a.arg_set_id = s.arg_set_id \
         where a.key like 'debug.arg %' and 'kernel ' || substr(a.key, 11) != s.name;",
    );
    assert_eq!(wrong, vec![vec!["0".to_owned()]], "each zone's argument is its own");
    decode_check("thousands_of_names_and_lanes_restart_sequences_and_every_zone_keeps_its_name", &[&path]);
}

/// CLOCK_BOOTTIME now, in nanoseconds: the clock of a Linux system trace.
#[cfg(target_os = "linux")]
fn boottime_ns() -> i64 {
    let mut at = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: `at` is a valid, writable timespec for the call.
    assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut at) }, 0);
    at.tv_sec * 1_000_000_000 + at.tv_nsec
}

#[cfg(target_os = "linux")]
#[test]
fn a_trace_is_read_on_clock_boottime_as_a_system_trace_is() {
    let Some(tp) = trace_processor_or_skip("a_trace_is_read_on_clock_boottime_as_a_system_trace_is") else {
        return;
    };
    let path = scratch("perfetto-boottime").join("trace.pftrace");
    let sim = SimBackend::realtime();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone())
        .sink(PerfettoTrace::create(&path).unwrap().sink())
        .build()
        .unwrap();
    let before = boottime_ns();
    let mut list = ctx.list();
    {
        let _zone = list.zone(&stream, location!("kernel"));
        sim.launch(&stream, 2_000_000);
    }
    ctx.submit(list).unwrap();
    ctx.flush().unwrap();
    let after = boottime_ns();
    drop(ctx);
    let rows = query(&tp, &path, "select ts, ts + dur from slice where name = 'kernel';");
    let (begin, end): (i64, i64) = (rows[0][0].parse().unwrap(), rows[0][1].parse().unwrap());
    assert!(
        before <= begin && end <= after,
        "the zone [{begin}, {end}] lies within [{before}, {after}] of CLOCK_BOOTTIME"
    );
    assert!(end - begin >= 2_000_000, "and lasts its kernel's 2 ms at least");
}

#[test]
fn gpu_times_are_every_zones_arguments_when_asked_for() {
    let Some(tp) = trace_processor_or_skip("gpu_times_are_every_zones_arguments_when_asked_for") else {
        return;
    };
    let path = scratch("perfetto-gpu-times").join("trace.pftrace");
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let sink = PerfettoTrace::create(&path).unwrap().sink().with_gpu_times(true);
    let ctx = TracingContext::builder(sim.clone()).sink(sink).build().unwrap();
    record(&ctx, &sim, &stream, 10);
    ctx.flush().unwrap();
    drop(ctx);
    assert_eq!(import_errors(&tp, &path), vec![]);
    let times = query(
        &tp,
        &path,
        "select s.name, b.int_value, e.int_value, s.dur from slice s \
         join args b on b.arg_set_id = s.arg_set_id and b.key = 'debug.gpu_begin_ns' \
         join args e on e.arg_set_id = s.arg_set_id and e.key = 'debug.gpu_end_ns' order by s.ts, s.depth;",
    );
    assert_eq!(times.len(), 20, "both times on every zone: {times:?}");
    for row in &times {
        let (begin, end): (i64, i64) = (row[1].parse().unwrap(), row[2].parse().unwrap());
        assert_eq!((end - begin).to_string(), row[3], "the GPU times span the zone: {row:?}");
    }
}

/// The packets of a trace file (each `Trace.packet` field, key and length included).
fn packets(bytes: &[u8]) -> Vec<&[u8]> {
    let mut packets = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        assert_eq!(bytes[at], 0x0a, "a Trace.packet field");
        let (mut len, mut shift, mut end) = (0usize, 0, at + 1);
        loop {
            let byte = bytes[end];
            len |= usize::from(byte & 0x7f) << shift;
            shift += 7;
            end += 1;
            if byte & 0x80 == 0 {
                break;
            }
        }
        packets.push(&bytes[at..end + len]);
        at = end + len;
    }
    packets
}

#[test]
fn the_decoding_check_fails_a_trace_whose_packets_come_in_the_wrong_order() {
    if !has_schema("the_decoding_check_fails_a_trace_whose_packets_come_in_the_wrong_order") {
        return;
    }
    let dir = scratch("perfetto-check-fails");
    let path = dir.join("trace.pftrace");
    let sim = SimBackend::manual();
    let stream = sim.stream();
    let ctx = TracingContext::builder(sim.clone())
        .sink(PerfettoTrace::create(&path).unwrap().sink())
        .build()
        .unwrap();
    record(&ctx, &sim, &stream, 10);
    ctx.flush().unwrap();
    drop(ctx);
    let (passed, text) = run_check(&[&path]);
    assert!(passed, "{text}");
    // Reversed: every sequence's events come before the packet that starts it, and go
    // back in time.
    let bytes = std::fs::read(&path).unwrap();
    let reversed: Vec<u8> = packets(&bytes).into_iter().rev().flatten().copied().collect();
    assert_eq!(reversed.len(), bytes.len());
    let bad = dir.join("reversed.pftrace");
    std::fs::write(&bad, reversed).unwrap();
    let (passed, text) = run_check(&[&bad]);
    assert!(!passed, "the check must fail:\n{text}");
    for problem in ["before its sequence cleared its state", "goes back"] {
        assert!(text.contains(problem), "{problem}: {text}");
    }
    // The track descriptors moved to the end (each on the trace's own sequence, 1: the key
    // of `track_descriptor` right after the sequence id): tracks used before described.
    let (descriptors, rest): (Vec<&[u8]>, Vec<&[u8]>) =
        packets(&bytes).into_iter().partition(|p| p.len() > 6 && p[2..6] == [0x50, 1, 0xe2, 0x03]);
    assert!(!descriptors.is_empty());
    let late: Vec<u8> = rest.into_iter().chain(descriptors).flatten().copied().collect();
    std::fs::write(&bad, late).unwrap();
    let (passed, text) = run_check(&[&bad]);
    assert!(!passed && text.contains("used before it is described"), "the check must fail:\n{text}");
}

/// A collector's calls, straight to `sinks`: a list every millisecond, of three zones of 1 µs
/// one after the other, each zone on a lane of its own (a runtime making streams or graphs
/// per step) and launched by one thread: `3 * lists` lanes over the run, a list's later zones
/// meeting new lanes after its first, lanes (and their launch sequences) idle for long
/// enough to be forgotten.
fn feed_new_lanes(sinks: &mut [&mut dyn gpu_event_pool::sink::Sink], lists: u64) {
    use gpu_event_pool::sink::{Calibration, ContextInfo, Zone, ZoneBatch};
    use gpu_event_pool::{Lane, Launch};
    let base = Calibration { gpu_ns: 0, host_ns: 0 };
    let origin = Some(std::time::Instant::now());
    let info = ContextInfo { id: 1, name: "gpu".into(), backend: "sim", base, host_clock_origin: origin };
    for sink in sinks.iter_mut() {
        sink.open(&info).unwrap();
    }
    for list in 0..lists {
        let at = list as i64 * 1_000_000;
        let launch = |n: i64| Launch::new(at - 500 + 100 * n, at - 450 + 100 * n, 1);
        let zones = [
            Zone::new(location!("first"), Lane::Stream(3 * list), 0, at, at + 1_000).with_launch(launch(0)),
            Zone::new(location!("second"), Lane::Stream(3 * list + 1), 0, at + 1_000, at + 2_000)
                .with_launch(launch(1)),
            Zone::new(location!("third"), Lane::Stream(3 * list + 2), 0, at + 2_000, at + 3_000)
                .with_launch(launch(2)),
        ];
        for sink in sinks.iter_mut() {
            sink.zones(&info, ZoneBatch { list_id: list, zones: &zones }).unwrap();
        }
    }
    for sink in sinks.iter_mut() {
        sink.flush().unwrap();
    }
}

/// Feeds `lists` lists of three zones on lanes of their own into a Perfetto trace and a
/// flight recorder, dumps the recorder, and checks both files with Perfetto's importer: no
/// import error, every zone on its lane's track, ended, 1 µs long, its launch's arrow to it.
fn every_zone_ends_over_lanes_met_once(test: &str, lists: u64) {
    let Some(tp) = trace_processor_or_skip(test) else { return };
    use gpu_event_pool::sink::flight::{DumpFormat, FlightRecorder};
    let dir = scratch(test);
    let streamed = dir.join("trace.pftrace");
    let trace = PerfettoTrace::create(&streamed).unwrap();
    let mut sink = trace.sink();
    let recorder = FlightRecorder::builder(Duration::from_secs(3600)).build().unwrap();
    let mut kept = recorder.sink();
    feed_new_lanes(&mut [&mut sink, &mut kept], lists);
    drop(sink);
    trace.flush().unwrap();
    let dump = recorder.dump(dir.join("dump.pftrace"), DumpFormat::Perfetto).unwrap();
    let zones = (3 * lists).to_string();
    assert_eq!(dump.zones.to_string(), zones, "the recorder kept the whole run");
    // One import of each file (a trace of 10,000 tracks takes a second to load).
    let sql = "select (select ifnull(group_concat(name || '=' || value), 'none') from stats \
        where severity in ('error', 'data_loss') and value > 0), \
        count(*), count(distinct track_id), sum(dur != 1000), \
        (select count(*) from slice where dur = -1), \
        (select count(*) from flow f join slice s on s.id = f.slice_in where s.category is null) \
        from slice where category is null;";
    for path in [&streamed, &dump.path] {
        let expected = ["none", &zones, &zones, "0", "0", &zones].map(str::to_owned).to_vec();
        assert_eq!(
            query(&tp, path, sql),
            vec![expected],
            "no import error; every zone on its lane's track, 1 µs long; no slice unended; an \
             arrow to every zone: {}",
            path.display()
        );
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn every_zone_ends_over_ten_thousand_lanes_met_once_streamed_and_dumped() {
    every_zone_ends_over_lanes_met_once(
        "every_zone_ends_over_ten_thousand_lanes_met_once_streamed_and_dumped",
        3_334,
    );
}

#[test]
#[ignore = "a minute in a debug build, most of it in Perfetto's importer: run with --ignored"]
fn every_zone_ends_over_a_hundred_thousand_lanes_met_once_streamed_and_dumped() {
    every_zone_ends_over_lanes_met_once(
        "every_zone_ends_over_a_hundred_thousand_lanes_met_once_streamed_and_dumped",
        33_334,
    );
}

#[test]
fn a_static_locations_first_zone_on_a_track_names_its_source_and_every_zone_does_when_asked() {
    let Some(tp) = trace_processor_or_skip(
        "a_static_locations_first_zone_on_a_track_names_its_source_and_every_zone_does_when_asked",
    ) else {
        return;
    };
    let dir = scratch("perfetto-source-locations");
    let named = "select s.name, count(*), count(distinct a.string_value) from slice s \
        join args a on a.arg_set_id = s.arg_set_id and a.key = 'source.file_name' group by s.name order by s.name;";
    for every in [false, true] {
        let path = dir.join(format!("every-{every}.pftrace"));
        let sim = SimBackend::manual();
        let stream = sim.stream();
        let sink = PerfettoTrace::create(&path).unwrap().sink().with_source_locations(every);
        let ctx = TracingContext::builder(sim.clone()).sink(sink).build().unwrap();
        record(&ctx, &sim, &stream, 10);
        ctx.flush().unwrap();
        drop(ctx);
        assert_eq!(import_errors(&tp, &path), vec![]);
        let zones = if every { "10" } else { "1" };
        let expected: Vec<Vec<String>> = ["command buffer", "kernel"]
            .iter()
            .map(|name| vec![name.to_string(), zones.to_owned(), "1".to_owned()])
            .collect();
        assert_eq!(query(&tp, &path, named), expected, "every: {every}");
    }
}
