//! `CuptiContext` on a real GPU: kernels as zones, nested in user zones, on one host clock,
//! with no CUDA event (docs/cupti.md). Spin kernels of known duration (the CUDA backend's
//! `%globaltimer` spin kernel).
//!
//! Without a CUDA device, or without libcupti, every test prints `SKIPPED: ...` to stderr and
//! returns. Set `GPU_EVENT_POOL_REQUIRE_CUDA=1` to make that a failure instead.
//!
//! CUPTI is process-wide: the tests take turns (`cupti_common::gpu`), and run in their own process
//! (not beside tests/cupti.rs, which reads CUPTI's own clock).

use cudarc::driver::sys::CUgraphInstantiate_flags;
use cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
use gpu_event_pool::backend::cupti::{ClockSource, CuptiContext, CuptiError, TracerConfig};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::Zone;
use gpu_event_pool::{location, Lane};
use std::io::Write;

mod cupti_common;
use cupti_common::{gpu, US};

/// A kernel spun `spin` ns: within 2 µs below, and 1% (at least 2 µs) above.
fn assert_spun(zone: &Zone, spin: u64) {
    let ns = zone.duration_ns();
    let slack = (spin / 100).max(2 * US);
    assert!(
        ns + 2 * US >= spin && ns <= spin + slack,
        "{} took {ns} ns, spin is {spin} ns",
        zone.location.name()
    );
}

#[test]
fn kernels_come_out_in_stream_order_nested_in_their_user_zones() {
    let Some(gpu) = gpu("kernels_come_out_in_stream_order_nested_in_their_user_zones") else { return };
    const LISTS: usize = 40;
    let memory = MemorySink::new();
    let ctx = CuptiContext::builder().name("test").sink(memory.clone()).build().unwrap();
    let stream = gpu.cuda.new_stream().unwrap();
    let _ = writeln!(std::io::stderr(), "clock: {:?}", ctx.stats().clock);
    let mut collected_before_flush = 0;
    let (mut first_begin, mut last_end) = (i64::MAX, 0);
    for list in 0..LISTS {
        let begin = ctx.host_now_ns();
        {
            let _list = ctx.zone(&stream, location!("list"));
            {
                let _pass = ctx.zone(&stream, location!("pass"));
                gpu.spin.launch(&stream, 20 * US).unwrap();
                gpu.spin.launch(&stream, 30 * US).unwrap();
            }
            gpu.spin.launch(&stream, 10 * US).unwrap();
        }
        first_begin = first_begin.min(begin);
        if list == LISTS / 2 {
            // Without a flush: collect alone brings finished trees out.
            stream.synchronize().unwrap();
            for _ in 0..100 {
                collected_before_flush += ctx.collect().unwrap().user_zones;
                if collected_before_flush > 0 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
    }
    stream.synchronize().unwrap();
    last_end = last_end.max(ctx.host_now_ns());
    ctx.flush().unwrap();
    let stats = ctx.stats();
    let _ =
        writeln!(std::io::stderr(), "{stats:?}; {collected_before_flush} user zones collected before flush");
    assert!(collected_before_flush > 0, "collect emits finished trees without a flush");
    assert_eq!((stats.user_zones, stats.activities), (2 * LISTS as u64, 3 * LISTS as u64), "{stats:?}");
    assert_eq!((stats.records_dropped, stats.empty_zones, stats.pending), (0, 0, 0), "{stats:?}");
    let batches = memory.batches();
    assert_eq!(batches.len(), LISTS);
    let mut previous_end = i64::MIN;
    for (_, zones) in &batches {
        let shape: Vec<(&str, u32)> = zones.iter().map(|z| (z.location.name(), z.depth)).collect();
        assert_eq!(
            shape,
            [("list", 0), ("pass", 1), ("spin_ns", 2), ("spin_ns", 2), ("spin_ns", 1)],
            "one list's zones in begin order, kernels inside their zones"
        );
        let (list, pass, k20, k30, k10) = (&zones[0], &zones[1], &zones[2], &zones[3], &zones[4]);
        assert_spun(k20, 20 * US);
        assert_spun(k30, 30 * US);
        assert_spun(k10, 10 * US);
        assert_eq!((pass.gpu_begin_ns, pass.gpu_end_ns), (k20.gpu_begin_ns, k30.gpu_end_ns));
        assert_eq!((list.gpu_begin_ns, list.gpu_end_ns), (k20.gpu_begin_ns, k10.gpu_end_ns));
        assert!(k20.gpu_end_ns <= k30.gpu_begin_ns && k30.gpu_end_ns <= k10.gpu_begin_ns, "stream order");
        assert!(previous_end <= list.gpu_begin_ns, "lists in stream order");
        previous_end = list.gpu_end_ns;
        // One host clock: a zone's work starts after the host began it, ends before the
        // host saw the stream done.
        let launch = list.launch.expect("a user zone carries its launch");
        assert!(launch.host_begin_ns <= list.host_begin_ns, "GPU work after its launch: {list:?}");
        assert!(first_begin <= launch.host_begin_ns && list.host_end_ns <= last_end, "{list:?}");
        assert!(zones.iter().all(|z| z.lane == zones[0].lane && matches!(z.lane, Lane::Stream(_))));
        assert_eq!(list.host_begin_ns - list.gpu_begin_ns, ctx.info().base.host_ns);
    }
}

#[test]
fn a_launch_with_no_user_zone_is_still_timed() {
    let Some(gpu) = gpu("a_launch_with_no_user_zone_is_still_timed") else { return };
    let memory = MemorySink::new();
    let ctx = CuptiContext::builder().sink(memory.clone()).build().unwrap();
    let stream = gpu.cuda.new_stream().unwrap();
    let before = ctx.host_now_ns();
    for _ in 0..10 {
        gpu.spin.launch(&stream, 40 * US).unwrap();
    }
    stream.synchronize().unwrap();
    let after = ctx.host_now_ns();
    ctx.flush().unwrap();
    let zones = memory.zones();
    assert_eq!(zones.len(), 10);
    for z in &zones {
        assert_eq!((z.location.name(), z.depth, z.launch), ("spin_ns", 0, None));
        assert_spun(z, 40 * US);
        assert!(
            before <= z.host_begin_ns && z.host_end_ns <= after,
            "on the host clock: {z:?} in {before}..{after}"
        );
    }
    if ctx.stats().clock != ClockSource::Callback {
        let _ = writeln!(std::io::stderr(), "note: CUPTI's clock is mapped by offset");
    }
}

#[test]
fn a_graph_replayed_100_times_gives_100_timed_replays() {
    let Some(gpu) = gpu("a_graph_replayed_100_times_gives_100_timed_replays") else { return };
    const REPLAYS: usize = 100;
    let stream = gpu.cuda.new_stream().unwrap();
    stream.begin_capture(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).unwrap();
    gpu.spin.launch(&stream, 10 * US).unwrap();
    gpu.spin.launch(&stream, 20 * US).unwrap();
    let graph = stream.end_capture(CUgraphInstantiate_flags(0)).unwrap().expect("a captured graph");
    let memory = MemorySink::new();
    let ctx = CuptiContext::builder().sink(memory.clone()).build().unwrap();
    for _ in 0..REPLAYS {
        let _replay = ctx.zone(&stream, location!("replay"));
        graph.launch().unwrap();
    }
    stream.synchronize().unwrap();
    ctx.flush().unwrap();
    let batches = memory.batches();
    assert_eq!(batches.len(), REPLAYS, "{:?}", ctx.stats());
    let arg = |z: &Zone, key: &str| {
        z.location.args().iter().find(|(k, _)| k == key).map(|(_, v)| format!("{v:?}")).unwrap_or_default()
    };
    let mut nodes = std::collections::BTreeSet::new();
    for (_, zones) in &batches {
        let shape: Vec<(&str, u32)> = zones.iter().map(|z| (z.location.name(), z.depth)).collect();
        assert_eq!(shape, [("replay", 0), ("spin_ns", 1), ("spin_ns", 1)]);
        assert_spun(&zones[1], 10 * US);
        assert_spun(&zones[2], 20 * US);
        for k in &zones[1..] {
            assert!(!arg(k, "graph").is_empty(), "a graph's kernel names its graph: {k:?}");
            nodes.insert(arg(k, "graph_node"));
        }
        assert_eq!(arg(&zones[1], "graph"), arg(&zones[2], "graph"));
    }
    assert_eq!(nodes.len(), 2, "two nodes, the same on every replay: {nodes:?}");
}

#[test]
fn records_dropped_under_a_tiny_buffer_are_counted() {
    let Some(gpu) = gpu("records_dropped_under_a_tiny_buffer_are_counted") else { return };
    const LAUNCHES: u64 = 20_000;
    let ctx = CuptiContext::builder()
        .tracer(TracerConfig { buffer_size: 16 << 10, buffer_count: 1 })
        .build()
        .unwrap();
    let stream = gpu.cuda.new_stream().unwrap();
    for _ in 0..LAUNCHES {
        gpu.spin.launch(&stream, US).unwrap();
    }
    stream.synchronize().unwrap();
    ctx.flush().unwrap();
    let stats = ctx.stats();
    let _ = writeln!(std::io::stderr(), "{stats:?}");
    // Losses show: refused buffer requests, and CUPTI's own count of dropped records as it
    // reports it (with each buffer it completes: a lower bound).
    assert!(stats.buffers_refused > 0 && stats.activities < LAUNCHES, "{stats:?}");
    assert!(stats.activities + stats.records_dropped + stats.records_incomplete <= LAUNCHES, "{stats:?}");
}

#[test]
fn a_second_context_gets_a_clear_error() {
    let Some(_gpu) = gpu("a_second_context_gets_a_clear_error") else { return };
    let first = CuptiContext::builder().build().unwrap();
    let second = CuptiContext::builder().build().unwrap_err();
    assert_eq!(second, CuptiError::AlreadyStarted);
    assert!(second.to_string().contains("already running"), "{second}");
    drop(first);
    drop(CuptiContext::builder().build().unwrap());
}
