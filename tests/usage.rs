//! What the README's usage section promises a newcomer: one list records on a stream at a
//! time, and lists recorded on one stream at once are counted and reported (lists recorded
//! one after the other may be submitted in any order); a zone skipped by verbosity hands its
//! children to its parent, so a switch in the middle of a list changes its tree's shape.

use gpu_event_pool::sim::{SimBackend, SimStream};
use gpu_event_pool::sink::results::{ListResults, ResultsSink, ZoneNode};
use gpu_event_pool::{location, Backend, CollectError, Error, Lane, Location, TracingContext, Verbosity};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn context(gpu: &SimBackend) -> TracingContext<SimBackend> {
    TracingContext::builder(gpu.clone()).build().unwrap()
}

/// The `ConcurrentLists` fields of a collect's error (locations as `name at file`).
fn concurrent(error: &CollectError) -> (Lane, u64, String, u64, String) {
    let place = |l: &Location| format!("{} at {}", l.name(), l.file());
    match &error.error {
        Error::ConcurrentLists { lane, list_id, location, earlier_list_id, earlier_location } => {
            (*lane, *list_id, place(location), *earlier_list_id, place(earlier_location))
        }
        other => panic!("not a ConcurrentLists report: {other}"),
    }
}

#[test]
fn lists_recorded_on_one_stream_at_once_are_counted_and_the_first_is_reported() {
    let gpu = SimBackend::manual();
    let stream = gpu.stream();
    let ctx = context(&gpu);
    // On the stream: first begins, second begins, 1 us of work, first ends, third begins,
    // 1 us, second ends, third ends. first: 0..1 us, second: 0..2 us, third: 1..2 us.
    let (mut first, mut second, mut third) = (ctx.list(), ctx.list(), ctx.list());
    first.zone_begin(&stream, location!("first")).unwrap();
    second.zone_begin(&stream, location!("second")).unwrap();
    gpu.launch(&stream, 1_000);
    first.zone_end(&stream).unwrap();
    third.zone_begin(&stream, location!("third")).unwrap();
    gpu.launch(&stream, 1_000);
    second.zone_end(&stream).unwrap();
    third.zone_end(&stream).unwrap();
    let ids = [first.id(), second.id(), third.id()];
    for list in [third, first, second] {
        ctx.submit(list).unwrap();
    }

    let error = ctx.flush().expect_err("the lists are reported");
    assert_eq!(error.report.zones, 3, "nothing is dropped: every list is still emitted");
    assert_eq!(error.report.errors, 1, "once per stream");
    let (lane, list_id, location, earlier_list_id, earlier_location) = concurrent(&error);
    assert_eq!((lane, list_id, earlier_list_id), (Lane::Stream(gpu.stream_key(&stream)), ids[1], ids[0]));
    assert_eq!(
        (location.as_str(), earlier_location.as_str()),
        ("second at tests/usage.rs", "first at tests/usage.rs")
    );
    let message = error.to_string();
    assert!(message.contains("(first zone second at tests/usage.rs:"), "{message}");
    assert!(message.contains("record one list on a stream at a time"), "{message}");
    assert_eq!(
        ctx.stats().concurrent_lists,
        2,
        "second and third: both began before the list before them ended"
    );

    // Another stream's first is reported on its own.
    let other = gpu.stream();
    let (mut a, mut b) = (ctx.list(), ctx.list());
    a.zone_begin(&other, location!("a")).unwrap();
    b.zone_begin(&other, location!("b")).unwrap();
    gpu.launch(&other, 1_000);
    a.zone_end(&other).unwrap();
    b.zone_end(&other).unwrap();
    ctx.submit(a).unwrap();
    ctx.submit(b).unwrap();
    let error = ctx.flush().expect_err("another stream");
    assert_eq!(concurrent(&error).0, Lane::Stream(gpu.stream_key(&other)));
    assert_eq!(ctx.stats().concurrent_lists, 3);
}

#[test]
fn lists_recorded_one_after_another_are_not_concurrent_whatever_order_they_are_submitted_in() {
    let gpu = SimBackend::manual();
    let (s0, s1) = (gpu.stream(), gpu.stream());
    let ctx = context(&gpu);
    // Recorded one after the other on s0, each complete before the next begins, submitted
    // last first: a list waiting for its submit holds nothing.
    let lists: Vec<_> = (0..3)
        .map(|_| {
            let mut list = ctx.list();
            list.zone_begin(&s0, location!("in turn")).unwrap();
            gpu.launch(&s0, 1_000);
            list.zone_end(&s0).unwrap();
            list
        })
        .collect();
    for list in lists.into_iter().rev() {
        ctx.submit(list).unwrap();
    }
    // Open at once, each on a stream of its own.
    let (mut a, mut b) = (ctx.list(), ctx.list());
    a.zone_begin(&s0, location!("a")).unwrap();
    b.zone_begin(&s1, location!("b")).unwrap();
    gpu.launch(&s0, 1_000);
    gpu.launch(&s1, 1_000);
    a.zone_end(&s0).unwrap();
    b.zone_end(&s1).unwrap();
    ctx.submit(b).unwrap();
    ctx.submit(a).unwrap();
    let report = ctx.flush().unwrap();
    assert_eq!((report.zones, ctx.stats().concurrent_lists), (5, 0));
}

/// Four threads on two streams, each holding its stream's lock from its list's first zone to
/// its submit (the README's pattern).
#[test]
fn threads_holding_a_lock_per_stream_record_no_concurrent_lists() {
    let gpu = SimBackend::realtime();
    let ctx = context(&gpu);
    let streams = [Mutex::new(gpu.stream()), Mutex::new(gpu.stream())];
    std::thread::scope(|s| {
        for thread in 0..4 {
            let (gpu, ctx, streams) = (&gpu, &ctx, &streams);
            s.spawn(move || {
                for i in 0..50 {
                    let stream = streams[(thread + i) % 2].lock().unwrap();
                    let mut list = ctx.list();
                    {
                        let _kernel = list.zone(&stream, location!("kernel"));
                        gpu.launch(&stream, 2_000);
                    }
                    ctx.submit(list).unwrap();
                }
            });
        }
    });
    ctx.flush().unwrap();
    let stats = ctx.stats();
    assert_eq!((stats.concurrent_lists, stats.zones_emitted), (0, 200), "{stats:?}");
}

#[test]
fn background_collection_reports_concurrent_lists_through_on_error() {
    let gpu = SimBackend::manual();
    let stream = gpu.stream();
    let reports = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&reports);
    let ctx = TracingContext::builder(gpu.clone())
        .collect_every(Duration::from_millis(1))
        .on_error(move |_, error| {
            if let Error::ConcurrentLists { list_id, earlier_list_id, .. } = error.error {
                seen.lock().unwrap().push((list_id, earlier_list_id));
            }
        })
        .build()
        .unwrap();
    let (mut first, mut second) = (ctx.list(), ctx.list());
    first.zone_begin(&stream, location!("first")).unwrap();
    second.zone_begin(&stream, location!("second")).unwrap();
    gpu.launch(&stream, 1_000);
    first.zone_end(&stream).unwrap();
    second.zone_end(&stream).unwrap();
    let ids = (second.id(), first.id());
    ctx.submit(first).unwrap();
    ctx.submit(second).unwrap();
    gpu.advance(10_000);
    let deadline = Instant::now() + Duration::from_secs(10);
    while reports.lock().unwrap().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(*reports.lock().unwrap(), [ids]);
}

/// Records one list on `stream`: a frame (coarse), two passes (fine) each around a kernel
/// (coarse), with `between` called between the passes.
fn frame(ctx: &TracingContext<SimBackend>, gpu: &SimBackend, stream: &SimStream, between: impl FnOnce()) {
    let mut list = ctx.list();
    {
        let mut frame = list.zone(stream, location!("frame", Verbosity::Coarse));
        {
            let mut pass = frame.zone(stream, location!("pass 1", Verbosity::Fine));
            let _kernel = pass.zone(stream, location!("kernel 1", Verbosity::Coarse));
            gpu.launch(stream, 1_000);
        }
        between();
        let mut pass = frame.zone(stream, location!("pass 2", Verbosity::Fine));
        let _kernel = pass.zone(stream, location!("kernel 2", Verbosity::Coarse));
        gpu.launch(stream, 1_000);
    }
    ctx.submit(list).unwrap();
}

/// A tree as (name, children) pairs.
fn shape(nodes: &[ZoneNode<'_>]) -> Vec<(String, Vec<String>)> {
    nodes
        .iter()
        .map(|n| {
            (
                n.zone.location.name().to_owned(),
                n.children.iter().map(|c| c.zone.location.name().to_owned()).collect(),
            )
        })
        .collect()
}

fn results_context(
    gpu: &SimBackend,
    verbosity: Verbosity,
) -> (TracingContext<SimBackend>, Receiver<ListResults>) {
    let (sink, results) = ResultsSink::channel();
    let ctx = TracingContext::builder(gpu.clone()).verbosity(verbosity).sink(sink).build().unwrap();
    (ctx, results)
}

#[test]
fn a_zone_skipped_by_verbosity_hands_its_children_to_its_parent() {
    let gpu = SimBackend::manual();
    let stream = gpu.stream();
    let (ctx, results) = results_context(&gpu, Verbosity::Fine);
    frame(&ctx, &gpu, &stream, || {});
    ctx.set_verbosity(Verbosity::Coarse);
    frame(&ctx, &gpu, &stream, || {});
    ctx.flush().unwrap();
    let fine = results.recv().unwrap();
    let frame_children = |list: &ListResults| shape(&list.tree()[0].children);
    assert_eq!(
        frame_children(&fine),
        [
            ("pass 1".to_owned(), vec!["kernel 1".to_owned()]),
            ("pass 2".to_owned(), vec!["kernel 2".to_owned()])
        ]
    );
    let coarse = results.recv().unwrap();
    assert_eq!(frame_children(&coarse), [("kernel 1".to_owned(), vec![]), ("kernel 2".to_owned(), vec![])]);
    assert_eq!(coarse.zones.iter().map(|z| z.depth).collect::<Vec<_>>(), [0, 1, 1]);
}

#[test]
fn a_verbosity_switch_in_the_middle_of_a_list_changes_the_shape_of_its_tree() {
    let gpu = SimBackend::manual();
    let stream = gpu.stream();
    let (ctx, results) = results_context(&gpu, Verbosity::Fine);
    frame(&ctx, &gpu, &stream, || ctx.set_verbosity(Verbosity::Coarse));
    ctx.flush().unwrap();
    let list = results.recv().unwrap();
    let tree = list.tree();
    assert_eq!(shape(&tree), [("frame".to_owned(), vec!["pass 1".to_owned(), "kernel 2".to_owned()])]);
    assert_eq!(shape(&tree[0].children[0].children), [("kernel 1".to_owned(), vec![])]);
}
