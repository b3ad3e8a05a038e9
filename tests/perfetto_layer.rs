//! CPU and GPU in one Perfetto trace (features `perfetto` and `tracing`): the `tracing`
//! layer writes the recording threads' spans into the same `PerfettoTrace` as the GPU zones,
//! one track per thread, and each launch lands in the span that recorded it, its arrow going
//! to its zone. The same run's Chrome trace (the Chrome layer and sink beside them) shows
//! the same slices on the same tracks, at the same nanoseconds.

use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::sink::chrome::ChromeTrace;
use gpu_event_pool::sink::perfetto::PerfettoTrace;
use gpu_event_pool::{location, TracingContext};
use perfetto_common::{decode_check, import_errors, query, scratch, trace_processor_or_skip, FLOWS, SLICES};
use tracing::Dispatch;
use tracing_subscriber::layer::SubscriberExt;

mod perfetto_common;

#[test]
fn spans_zones_and_arrows_share_one_perfetto_trace_as_in_the_chrome_trace_to_the_nanosecond() {
    let Some(tp) = trace_processor_or_skip(
        "spans_zones_and_arrows_share_one_perfetto_trace_as_in_the_chrome_trace_to_the_nanosecond",
    ) else {
        return;
    };
    let dir = scratch("perfetto-layer");
    let (chrome_path, perfetto_path) = (dir.join("trace.json"), dir.join("trace.pftrace"));
    let chrome = ChromeTrace::create(&chrome_path).unwrap();
    let perfetto = PerfettoTrace::create(&perfetto_path).unwrap();
    let dispatch = Dispatch::new(tracing_subscriber::registry().with(chrome.layer()).with(perfetto.layer()));
    let sim = SimBackend::realtime();
    let ctx = TracingContext::builder(sim.clone())
        .name("gpu 0")
        .sink(chrome.sink())
        .sink(perfetto.sink())
        .record_launches(true)
        .build()
        .unwrap();
    std::thread::scope(|s| {
        for t in 0..3 {
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
                            for _ in 0..3 {
                                let _kernel = cb.zone(&stream, location!("kernel"));
                                sim.launch(&stream, 5_000);
                            }
                        }
                        ctx.submit(list).unwrap();
                        tracing::info!(frame, "submitted");
                    }
                })
                .unwrap();
        }
    });
    ctx.flush().unwrap();
    drop(ctx);
    chrome.flush().unwrap();
    perfetto.flush().unwrap();
    assert_eq!(import_errors(&tp, &perfetto_path), vec![]);
    assert_eq!(import_errors(&tp, &chrome_path), vec![]);
    // One reading of the clock per span edge and event, shared by both layers: the same
    // slices at the same nanoseconds.
    let slices = query(&tp, &perfetto_path, SLICES);
    // 12 spans, 12 events, 12 lists of 4 zones and their 48 launches.
    assert_eq!(slices.len(), 12 + 12 + 48 + 48, "{slices:?}");
    assert_eq!(slices, query(&tp, &chrome_path, SLICES), "tracks, names, times, durations, depths");
    let launches_in_spans = query(
        &tp,
        &perfetto_path,
        "select count(*) from slice s join slice p on s.parent_id = p.id \
         where s.category = 'launch' and p.name = 'record command buffer';",
    );
    assert_eq!(
        launches_in_spans,
        vec![vec!["48".to_owned()]],
        "every launch inside the span that recorded it"
    );
    let flows = query(&tp, &perfetto_path, FLOWS);
    assert_eq!(flows.len(), 48);
    assert!(flows.iter().all(|f| f[0] == f[2]), "each arrow from a launch to its own zone");
    decode_check(
        "spans_zones_and_arrows_share_one_perfetto_trace_as_in_the_chrome_trace_to_the_nanosecond",
        &[&perfetto_path],
    );
}
