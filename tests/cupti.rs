//! CUPTI activity records on a real GPU: spin kernels of known duration (the CUDA backend's
//! `%globaltimer` spin kernel), traced through `ActivityTracer`.
//!
//! Without a CUDA device, or without libcupti, every test prints `SKIPPED: ...` to stderr and
//! returns. Set `GPU_EVENT_POOL_REQUIRE_CUDA=1` to make that a failure instead (on the GPU
//! machine, so that a missing library cannot pass as a skip).
//!
//! The tests share the process-wide tracer, so each takes its turn first (`cupti_common::gpu`).

use gpu_event_pool::backend::cupti::{stream_id, timestamp_ns};
use gpu_event_pool::{ActivityKind, ActivityRecord, ActivityTracer, CuptiError, TracerConfig};
use std::io::Write;

mod cupti_common;
use cupti_common::{gpu, US};

/// Flushes and drains `tracer`, keeping the kernel records of stream `stream`.
fn kernels_on(tracer: &ActivityTracer, stream: u32) -> Vec<ActivityRecord> {
    tracer.flush().unwrap();
    let mut kernels = Vec::new();
    tracer
        .drain(|r| {
            if r.kind == ActivityKind::Kernel && r.stream_id == stream {
                kernels.push(r);
            }
        })
        .unwrap();
    kernels
}

#[test]
fn every_launch_gives_one_kernel_record_in_launch_order_on_its_stream() {
    let Some(gpu) = gpu("every_launch_gives_one_kernel_record_in_launch_order_on_its_stream") else {
        return;
    };
    const LAUNCHES: usize = 1_000;
    const SPIN_NS: u64 = 50 * US;
    let tracer = ActivityTracer::start(TracerConfig::default()).unwrap();
    let stream = gpu.cuda.new_stream().unwrap();
    let id = stream_id(&stream).unwrap();
    let before = timestamp_ns().unwrap();
    for _ in 0..LAUNCHES {
        gpu.spin.launch(&stream, SPIN_NS).unwrap();
    }
    stream.synchronize().unwrap();
    let after = timestamp_ns().unwrap();
    let kernels = kernels_on(&tracer, id);
    assert_eq!(tracer.losses(), Default::default());
    assert_eq!(kernels.len(), LAUNCHES);
    for pair in kernels.windows(2) {
        assert!(pair[0].correlation_id < pair[1].correlation_id, "launch order: {pair:?}");
        assert!(pair[0].end_ns <= pair[1].start_ns, "one stream runs one kernel at a time: {pair:?}");
    }
    // The spin kernel spins at least SPIN_NS on %globaltimer; CUPTI's span adds launch and
    // exit. Within 1% or 2 µs, whichever is larger.
    let slack = (SPIN_NS / 100).max(2 * US);
    for k in &kernels {
        let ns = k.end_ns - k.start_ns;
        assert!(
            ns + 2 * US >= SPIN_NS && ns <= SPIN_NS + slack,
            "kernel took {ns} ns, spin is {SPIN_NS} ns: {k:?}"
        );
        assert!(
            before <= k.start_ns && k.end_ns <= after,
            "CUPTI's times are on cuptiGetTimestamp's clock: {k:?}"
        );
        assert_eq!(k.name.as_deref(), Some("spin_ns"));
        assert_eq!(k.graph_id, 0);
    }
}

#[test]
fn a_one_buffer_pool_drops_records_and_counts_every_one() {
    let Some(gpu) = gpu("a_one_buffer_pool_drops_records_and_counts_every_one") else {
        return;
    };
    const LAUNCHES: usize = 20_000;
    // Room for some tens of kernel records: most of the launches find no buffer.
    let tracer = ActivityTracer::start(TracerConfig { buffer_size: 16 << 10, buffer_count: 1 }).unwrap();
    let stream = gpu.cuda.new_stream().unwrap();
    let id = stream_id(&stream).unwrap();
    for _ in 0..LAUNCHES {
        gpu.spin.launch(&stream, US).unwrap();
    }
    stream.synchronize().unwrap();
    let kernels = kernels_on(&tracer, id);
    let losses = tracer.losses();
    let _ =
        writeln!(std::io::stderr(), "{} kernel records of {LAUNCHES} launches, {losses:?}", kernels.len());
    assert!(losses.records_dropped > 0 && losses.buffers_refused > 0, "{losses:?}");
    assert_eq!(kernels.len() as u64 + losses.records_dropped, LAUNCHES as u64, "{losses:?}");
}

#[test]
fn a_second_tracer_is_refused_while_the_first_runs() {
    let Some(_gpu) = gpu("a_second_tracer_is_refused_while_the_first_runs") else {
        return;
    };
    let first = ActivityTracer::start(TracerConfig::default()).unwrap();
    assert_eq!(ActivityTracer::start(TracerConfig::default()).unwrap_err(), CuptiError::AlreadyStarted);
    drop(first);
    drop(ActivityTracer::start(TracerConfig::default()).unwrap());
}
