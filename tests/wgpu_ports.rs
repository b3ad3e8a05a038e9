//! Every scenario of `wgpu-profiler` 0.28's own tests (its `tests/src/*.rs`), written with this
//! crate's API, on lavapipe: nested scopes with each set of timestamp features, interleaved
//! and multithreaded command buffers, several resolves per frame, frames not read at once,
//! and its error cases. Each checks the tree `wgpu-profiler` expects (`WgpuFrames`, untimed
//! scopes kept); which scopes are timed follows this crate's rules (docs/wgpu.md: a scope on
//! an encoder is timed with `TIMESTAMP_QUERY` alone). Where the two differ on purpose, the
//! test says so.
//!
//! Without an adapter every test prints `SKIPPED: ...` to stderr and returns;
//! `GPU_EVENT_POOL_REQUIRE_WGPU=1` (set by `.ci/run`) makes that a failure.

mod wgpu_common;

use gpu_event_pool::backend::wgpu::{ScopeResult, WgpuBackend, WgpuFrames, WgpuQueue};
use gpu_event_pool::{location, DynamicLocation, Refused, TracingContext};
use std::time::Duration;
use wgpu_common::{gpu, Gpu, ALL_TIMESTAMPS};

type Ctx = TracingContext<WgpuBackend>;

/// A context keeping every finished frame, its backend's queue, and frame 0 begun.
fn profiler(gpu: &Gpu) -> (Ctx, WgpuFrames, WgpuQueue) {
    let backend = WgpuBackend::new(&gpu.device, &gpu.queue).unwrap();
    let (frames, lane) = (backend.keep_frames(), backend.queue());
    let ctx = TracingContext::builder(backend).sink(frames.sink()).build().unwrap();
    ctx.frame(0);
    (ctx, frames, lane)
}

fn encoder(gpu: &Gpu) -> wgpu::CommandEncoder {
    gpu.device.create_command_encoder(&Default::default())
}

/// Begins frame `next` and reads everything: frame `next - 1` is finished then.
fn end_frame(ctx: &Ctx, frames: &WgpuFrames, next: u64) -> Vec<ScopeResult> {
    ctx.frame(next);
    ctx.flush().unwrap();
    let frame = frames.next_finished().expect("the frame is finished");
    assert_eq!(frame.id, next - 1);
    frame.scopes
}

/// Which device feature times a scope (this crate's rules).
#[derive(Debug, Clone, Copy)]
enum Requires {
    Disabled,
    Timestamps,
    TimestampsInPasses,
}

impl Requires {
    fn timed(self, features: wgpu::Features) -> bool {
        match self {
            Requires::Disabled => false,
            Requires::Timestamps => features.contains(wgpu::Features::TIMESTAMP_QUERY),
            Requires::TimestampsInPasses => features
                .contains(wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES),
        }
    }
}

#[derive(Debug)]
struct Expected(String, Requires, Vec<Expected>);

fn expected(name: impl Into<String>, requires: Requires, children: impl Into<Vec<Expected>>) -> Expected {
    Expected(name.into(), requires, children.into())
}

fn validate(features: wgpu::Features, results: &[ScopeResult], expected: &[Expected]) {
    let names = |r: &[ScopeResult]| r.iter().map(|s| s.name().to_owned()).collect::<Vec<_>>();
    assert_eq!(results.len(), expected.len(), "{:?} for {expected:?}", names(results));
    for (result, expected) in results.iter().zip(expected) {
        assert_eq!(result.name(), expected.0);
        assert_eq!(result.zone.is_some(), expected.1.timed(features), "{}", expected.0);
        assert_eq!(result.pid, std::process::id());
        validate(features, &result.children, &expected.2);
    }
}

fn nested_scopes(test: &str, features: wgpu::Features) {
    let Some(gpu) = gpu(test, features) else { return };
    let (ctx, frames, lane) = profiler(&gpu);
    let (mut encoder0, mut encoder1, mut encoder2) = (encoder(&gpu), encoder(&gpu), encoder(&gpu));
    let (mut list0, mut list1, mut list2) =
        (ctx.wgpu_list(&lane), ctx.wgpu_list(&lane), ctx.wgpu_list(&lane));
    {
        let mut outer_scope = list0.scope(&mut encoder0, location!("e0_s0"));
        drop(outer_scope.scoped_compute_pass(location!("e0_s0_c0")));
        let mut inner_scope = outer_scope.scoped_compute_pass(location!("e0_s0_c1"));
        drop(inner_scope.scope(location!("e0_s0_c1_s0")));
        let mut innermost_scope = inner_scope.scope(location!("e0_s0_c1_s1"));
        let mut scope = innermost_scope.scope(location!("e0_s0_c1_s1_s0"));
        drop(scope.scope(location!("e0_s0_c1_s1_s0_s0")));
    }
    // Interleaved scopes on an encoder.
    {
        let mut scope = list1.scope(&mut encoder1, location!("e1_s0"));
        drop(scope.scope(location!("e1_s0_s0")));
        drop(scope.scope(location!("e1_s0_s1")));
        let mut scope = scope.scope(location!("e1_s0_s2"));
        drop(scope.scope(location!("e1_s0_s2_s0")));
    }
    drop(list2.scope(&mut encoder2, location!("e2_s0")));
    // Another scope on encoder 0 with recording switched off on the fly: kept, untimed.
    ctx.set_enabled(false);
    let mut list3 = ctx.wgpu_list(&lane);
    {
        let mut scope = list3.scope(&mut encoder0, location!("e2_s1"));
        let mut scope = scope.scoped_compute_pass(location!("e2_s1_c1"));
        drop(scope.scope(location!("e2_s1_c1_s0")));
    }
    ctx.set_enabled(true);
    for list in [&mut list0, &mut list1, &mut list2, &mut list3] {
        list.resolve(&mut encoder2).unwrap();
    }
    let command_buffers = [encoder0.finish(), encoder1.finish(), encoder2.finish()];
    ctx.queue_submit(&lane, command_buffers, [list0, list1, list2, list3]).unwrap();
    let frame = end_frame(&ctx, &frames, 1);
    use Requires::*;
    #[rustfmt::skip]
    validate(features, &frame, &[
        expected("e0_s0", Timestamps, [
            expected("e0_s0_c0", Timestamps, []),
            expected("e0_s0_c1", Timestamps, [
                expected("e0_s0_c1_s0", TimestampsInPasses, []),
                expected("e0_s0_c1_s1", TimestampsInPasses, [
                    expected("e0_s0_c1_s1_s0", TimestampsInPasses, [
                        expected("e0_s0_c1_s1_s0_s0", TimestampsInPasses, []),
                    ]),
                ]),
            ]),
        ]),
        expected("e1_s0", Timestamps, [
            expected("e1_s0_s0", Timestamps, []),
            expected("e1_s0_s1", Timestamps, []),
            expected("e1_s0_s2", Timestamps, [expected("e1_s0_s2_s0", Timestamps, [])]),
        ]),
        expected("e2_s0", Timestamps, []),
        expected("e2_s1", Disabled, [
            expected("e2_s1_c1", Disabled, [expected("e2_s1_c1_s0", Disabled, [])]),
        ]),
    ]);
}

#[test]
fn nested_scopes_timestamp_in_passes_and_encoder_enabled() {
    nested_scopes("nested_scopes_timestamp_in_passes_and_encoder_enabled", ALL_TIMESTAMPS);
}

#[test]
fn nested_scopes_timestamp_in_passes_enabled() {
    let features = wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
    nested_scopes("nested_scopes_timestamp_in_passes_enabled", features);
}

#[test]
fn nested_scopes_timestamp_in_encoders_enabled() {
    let features = wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS;
    nested_scopes("nested_scopes_timestamp_in_encoders_enabled", features);
}

#[test]
fn nested_scopes_timestamp_enabled() {
    nested_scopes("nested_scopes_timestamp_enabled", wgpu::Features::TIMESTAMP_QUERY);
}

#[test]
fn nested_scopes_no_features() {
    nested_scopes("nested_scopes_no_features", wgpu::Features::empty());
}

#[test]
fn interleaved_scopes() {
    let Some(gpu) = gpu("interleaved_scopes", wgpu::Features::TIMESTAMP_QUERY) else { return };
    let (ctx, frames, lane) = profiler(&gpu);
    let (mut encoder0, mut encoder1) = (encoder(&gpu), encoder(&gpu));
    let (mut list0, mut list1) = (ctx.wgpu_list(&lane), ctx.wgpu_list(&lane));
    {
        let mut e0_s0 = list0.scope(&mut encoder0, location!("e0_s0"));
        let mut e1_s0 = list1.scope(&mut encoder1, location!("e1_s0"));
        drop(e0_s0.scope(location!("e0_s0_s0")));
        drop(e0_s0.scope(location!("e0_s0_s1")));
        drop(e1_s0.scope(location!("e1_s0_s0")));
    }
    list0.resolve(&mut encoder0).unwrap();
    list1.resolve(&mut encoder0).unwrap();
    ctx.queue_submit(&lane, [encoder1.finish(), encoder0.finish()], [list1, list0]).unwrap();
    let frame = end_frame(&ctx, &frames, 1);
    use Requires::Timestamps;
    #[rustfmt::skip]
    validate(gpu.device.features(), &frame, &[
        expected("e1_s0", Timestamps, [expected("e1_s0_s0", Timestamps, [])]),
        expected("e0_s0", Timestamps, [
            expected("e0_s0_s0", Timestamps, []),
            expected("e0_s0_s1", Timestamps, []),
        ]),
    ]);
}

#[test]
fn multithreaded_scopes() {
    let Some(gpu) = gpu("multithreaded_scopes", wgpu::Features::TIMESTAMP_QUERY) else { return };
    let (ctx, frames, lane) = profiler(&gpu);
    const NUM_SCOPES_PER_THREAD: usize = 1000;
    let barrier = std::sync::Barrier::new(2);
    let record = |thread: usize| {
        let (mut encoder, mut list) = (encoder(&gpu), ctx.wgpu_list(&lane));
        barrier.wait();
        for i in 0..NUM_SCOPES_PER_THREAD {
            drop(list.scope(&mut encoder, DynamicLocation::new(format!("e{thread}_s{i}"))));
        }
        (encoder.finish(), list)
    };
    let ((command_buffer0, list0), (command_buffer1, list1)) = std::thread::scope(|s| {
        let thread0 = s.spawn(|| record(0));
        let thread1 = s.spawn(|| record(1));
        (thread0.join().unwrap(), thread1.join().unwrap())
    });
    let (mut lists, mut resolve_encoder) = ([list0, list1], encoder(&gpu));
    for list in &mut lists {
        list.resolve(&mut resolve_encoder).unwrap();
    }
    ctx.queue_submit(&lane, [command_buffer0, command_buffer1, resolve_encoder.finish()], lists).unwrap();
    let frame = end_frame(&ctx, &frames, 1);
    // Each thread's scopes, thread 0's list submitted first.
    let expected: Vec<_> = (0..2)
        .flat_map(|t| {
            (0..NUM_SCOPES_PER_THREAD).map(move |i| expected(format!("e{t}_s{i}"), Requires::Timestamps, []))
        })
        .collect();
    validate(gpu.device.features(), &frame, &expected);
    assert_ne!(frame[0].tid, frame[NUM_SCOPES_PER_THREAD].tid, "each scope carries its thread");
}

#[test]
fn multiple_resolves_per_frame() {
    const NUM_SCOPES: usize = 1000;
    let features = wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS;
    let Some(gpu) = gpu("multiple_resolves_per_frame", features) else { return };
    let (ctx, frames, lane) = profiler(&gpu);
    let (mut encoder, mut list) = (encoder(&gpu), ctx.wgpu_list(&lane));
    // A resolve per scope, many times over, then one more, resolving nothing.
    for i in 0..NUM_SCOPES {
        drop(list.scope(&mut encoder, DynamicLocation::new(format!("{i}"))));
        list.resolve(&mut encoder).unwrap();
    }
    list.resolve(&mut encoder).unwrap();
    ctx.queue_submit(&lane, [encoder.finish()], [list]).unwrap();
    let scopes = end_frame(&ctx, &frames, 1);
    assert_eq!(scopes.len(), NUM_SCOPES);
    for (i, scope) in scopes.iter().enumerate() {
        assert_eq!(scope.name(), format!("{i}"));
        assert!(scope.zone.is_some());
    }
}

/// `wgpu-profiler` drops the older of two frames not yet read when it keeps one pending;
/// here a frame is never dropped: both come, in order, once read.
#[test]
fn handle_dropped_frames_gracefully() {
    let features = wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS;
    let Some(gpu) = gpu("handle_dropped_frames_gracefully", features) else { return };
    let (ctx, frames, lane) = profiler(&gpu);
    // Two frames without reading anything.
    for frame in 0..2 {
        ctx.frame(frame);
        let (mut encoder, mut list) = (encoder(&gpu), ctx.wgpu_list(&lane));
        drop(list.scope(&mut encoder, location!("testscope")));
        list.resolve(&mut encoder).unwrap();
        ctx.queue_submit(&lane, [encoder.finish()], [list]).unwrap();
        assert!(frames.next_finished().is_none(), "nothing read yet");
    }
    ctx.frame(2);
    ctx.flush().unwrap();
    for id in 0..2 {
        let frame = frames.next_finished().expect("every frame comes");
        assert_eq!((frame.id, frame.scopes.len(), frame.lost_lists), (id, 1, 0));
    }
    assert!(frames.next_finished().is_none());
}

#[test]
fn invalid_pending_frame_count() {
    let Some(gpu) = gpu("invalid_pending_frame_count", wgpu::Features::TIMESTAMP_QUERY) else { return };
    let backend = WgpuBackend::new(&gpu.device, &gpu.queue).unwrap();
    let error = backend.set_readback_limit(Duration::ZERO).unwrap_err();
    assert_eq!(error.kind(), Some(gpu_event_pool::ErrorKind::ZeroReadbackLimit));
}

#[test]
fn end_frame_unclosed_query() {
    let Some(gpu) = gpu("end_frame_unclosed_query", ALL_TIMESTAMPS) else { return };
    let (ctx, _frames, lane) = profiler(&gpu);
    let (mut encoder, mut list) = (encoder(&gpu), ctx.wgpu_list(&lane));
    list.zone_begin(&mut encoder, location!("open query")).unwrap();
    list.resolve(&mut encoder).unwrap();
    let error = ctx.queue_submit(&lane, [], [list]).unwrap_err();
    assert_eq!(error.refused, Refused::OpenZones(1));
    // Recovers: the list comes back whole.
    let mut list = error.lists.into_iter().next().unwrap();
    list.zone_end(&mut encoder).unwrap();
    list.resolve(&mut encoder).unwrap();
    ctx.queue_submit(&lane, [encoder.finish()], [list]).unwrap();
}

#[test]
fn end_frame_unresolved_query() {
    let Some(gpu) = gpu("end_frame_unresolved_query", ALL_TIMESTAMPS) else { return };
    let (ctx, _frames, lane) = profiler(&gpu);
    let (mut encoder, mut list) = (encoder(&gpu), ctx.wgpu_list(&lane));
    list.zone_begin(&mut encoder, location!("open query")).unwrap();
    list.zone_end(&mut encoder).unwrap();
    let error = ctx.queue_submit(&lane, [], [list]).unwrap_err();
    assert_eq!(error.refused, Refused::Unresolved(2));
    // Recovers.
    let mut list = error.lists.into_iter().next().unwrap();
    list.resolve(&mut encoder).unwrap();
    ctx.queue_submit(&lane, [encoder.finish()], [list]).unwrap();
    ctx.flush().unwrap();
}

#[test]
fn change_settings_while_query_open() {
    let Some(gpu) = gpu("change_settings_while_query_open", ALL_TIMESTAMPS) else { return };
    let (ctx, _frames, lane) = profiler(&gpu);
    let (mut encoder, mut list) = (encoder(&gpu), ctx.wgpu_list(&lane));
    list.zone_begin(&mut encoder, location!("open query")).unwrap();
    ctx.set_enabled(false);
    list.zone_end(&mut encoder).unwrap();
}
