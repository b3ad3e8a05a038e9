//! What the CUDA test files share: measuring a zone against a kernel of known duration, and
//! checking that every slot went back.
#![allow(dead_code)]

use gpu_event_pool::backend::cuda::CudaBackend;
use gpu_event_pool::sink::Zone;
use gpu_event_pool::TracingContext;

pub fn duration(zone: &Zone) -> i64 {
    zone.gpu_end_ns - zone.gpu_begin_ns
}

/// Asserts `zone` lasted `expected_ns` within 5% (and not less: the kernel spins at least
/// that long; 1 µs covers the events' half-microsecond resolution).
pub fn assert_measures(zone: &Zone, expected_ns: u64) {
    let (measured, expected) = (duration(zone), expected_ns as i64);
    assert!(
        measured >= expected - 1_000 && measured <= expected + expected / 20,
        "zone {:?} measured {measured} ns, expected {expected} ns within 5%",
        zone.location.name()
    );
}

pub fn assert_no_slot_leaked(ctx: &TracingContext<CudaBackend>) {
    let stats = ctx.stats();
    assert_eq!(stats.unaccounted(), 0, "{stats:?}");
    assert_eq!((stats.owned, stats.submitted), (0, 0), "{stats:?}");
    assert_eq!(ctx.free_slots_walked(), stats.capacity, "every slot is back on the freelist: {stats:?}");
}
