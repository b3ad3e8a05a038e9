//! Faults the simulated GPU can be told to inject, for the crate's own tests of its error
//! paths: reached through the hidden `gpu_event_pool::testing` room, not part of the API.

/// Faults of [`SimBackend`](super::SimBackend): failed or panicking calls, late records and
/// waits, a drifting host clock.
pub trait SimFaults {
    /// Events created so far.
    fn events_created(&self) -> usize;

    /// After `n` more successful event creations, every creation fails (until reset with
    /// `None`).
    fn fail_event_creation_after(&self, n: Option<u32>);

    /// The next `n` records (on streams or as graph nodes) fail.
    fn fail_records(&self, n: u32);

    /// From now on, while any stream has work queued, an event recorded on an idle stream is
    /// stamped `late_ns` after the record call instead of at it (the stream then waits for
    /// it): a busy GPU reaches such an event late, as a loaded H200 reaches the collector's
    /// anchors (up to a millisecond measured). 0 (the default) turns it off.
    fn set_late_records(&self, late_ns: i64);

    /// The next [`wait`](crate::Backend::wait) returns `delay_ns` after its event completes instead
    /// of at once, as a backend whose completion is seen late does (wgpu maps a readback
    /// buffer; a loaded host wakes the waiting thread late): the host time read after it is
    /// then well past the GPU's. Later waits return at once again.
    fn delay_next_wait(&self, delay_ns: i64);

    /// From now on, the host clock of a manual simulation ([`host_now_ns`](crate::Backend::host_now_ns))
    /// runs `ppm` parts per million faster than the GPU (slower when negative), as a host
    /// clock that NTP or chrony slews does; a later call changes the rate again, the clock
    /// staying continuous. No effect on a real-time simulation, whose host clock is the
    /// host's.
    fn set_host_drift(&self, ppm: f64);

    /// What the host clock reads at simulated time `t` (nanoseconds), under the drifts set so
    /// far: `t` itself until [`set_host_drift`](Self::set_host_drift) is called.
    fn host_at(&self, t: i64) -> i64;

    /// The next `n` elapsed-time reads fail.
    fn fail_elapsed(&self, n: u32);

    /// The next `n` elapsed-time reads panic (a buggy backend: the crate must survive it).
    fn panic_in_elapsed(&self, n: u32);

    /// The next `n` reads of the host clock (`Backend::host_now_ns`) panic (a buggy backend:
    /// the crate must survive it).
    fn panic_in_host_clock(&self, n: u32);
}

/// Faults of [`SimActivities`](super::SimActivities): calls without a record or that fail,
/// records lost, held back, or with chosen correlation ids.
pub trait SimActivityFaults {
    /// A launching call that makes no work record (CUDA's `cuLaunchHostFunc`, which CUPTI
    /// reports no record for): its zone must not wait for one past the hold limit.
    fn launch_without_record(&self);

    /// A launching call that fails: linked at its entry, untied at its exit.
    fn fail_launch(&self);

    /// The records of the next `n` launches are lost (counted in
    /// [`ActivityLosses::records_dropped`](crate::ActivityLosses::records_dropped)), as CUPTI drops records when it has no buffer.
    fn drop_records(&self, n: u32);

    /// The records of the next `n` launches come one read late, after later records, as a
    /// buffer CUPTI holds back until every record in it is complete.
    fn hold_back_records(&self, n: u32);

    /// The next launch gets correlation id `id` (ids wrap at `u32::MAX`, as CUPTI's do).
    fn next_correlation(&self, id: u32);
}
