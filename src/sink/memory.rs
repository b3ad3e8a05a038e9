//! A sink that keeps every collected zone in memory, for tests and in-process analysis.

use super::{Calibration, ContextInfo, Sink, Zone, ZoneBatch};
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Debug, Default)]
struct Recorded {
    info: Option<ContextInfo>,
    calibrations: Vec<Calibration>,
    /// Every zone kept, batch after batch, in one buffer: a batch costs the collector a copy
    /// into it, not an allocation of its own.
    zones: Vec<Zone>,
    /// Each batch's list id and where its zones end in `zones`.
    batches: Vec<(u64, usize)>,
    flushes: usize,
}

/// Keeps zones in memory. Clones share the same store: give one to the context and keep
/// one to read from.
#[derive(Debug, Clone, Default)]
pub struct MemorySink {
    recorded: Arc<Mutex<Recorded>>,
}

impl MemorySink {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Recorded> {
        self.recorded.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every zone so far, batch after batch (each batch in begin order). Copies them and
    /// keeps them; [`take_zones`](Self::take_zones) hands them over instead.
    pub fn zones(&self) -> Vec<Zone> {
        self.lock().zones.clone()
    }

    /// Every zone collected since the last `take_zones` (or [`clear`](Self::clear)), batch
    /// after batch, removed from the store: a long run can drain it as it goes instead of
    /// keeping (and copying) everything. Calibrations and the context info stay.
    ///
    /// ```
    /// use gpu_event_pool::{location, sim::SimBackend, sink::memory::MemorySink, TracingContext};
    /// let sim = SimBackend::manual();
    /// let stream = sim.stream();
    /// let memory = MemorySink::new();
    /// let ctx = TracingContext::builder(sim.clone()).sink(memory.clone()).build()?;
    /// let mut list = ctx.list();
    /// list.zone_begin(&stream, location!("dispatch"))?;
    /// sim.launch(&stream, 1_000);
    /// list.zone_end(&stream)?;
    /// ctx.submit(list)?;
    /// ctx.flush()?;
    /// assert_eq!(memory.take_zones().len(), 1);
    /// assert!(memory.take_zones().is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn take_zones(&self) -> Vec<Zone> {
        let mut recorded = self.lock();
        recorded.batches.clear();
        std::mem::take(&mut recorded.zones)
    }

    /// Every batch so far: (list id, zones), in the order the collector sent them.
    pub fn batches(&self) -> Vec<(u64, Vec<Zone>)> {
        let recorded = self.lock();
        let mut start = 0;
        recorded
            .batches
            .iter()
            .map(|&(list_id, end)| {
                let zones = recorded.zones[start..end].to_vec();
                start = end;
                (list_id, zones)
            })
            .collect()
    }

    /// Calibration pairs received (the base pair is in [`info`](Self::info)).
    pub fn calibrations(&self) -> Vec<Calibration> {
        self.lock().calibrations.clone()
    }

    /// The context this sink was opened for, if it was.
    pub fn info(&self) -> Option<ContextInfo> {
        self.lock().info.clone()
    }

    /// How many times the sink was flushed.
    pub fn flushes(&self) -> usize {
        self.lock().flushes
    }

    /// Forgets everything collected so far.
    pub fn clear(&self) {
        let mut recorded = self.lock();
        recorded.batches.clear();
        recorded.zones.clear();
        recorded.calibrations.clear();
    }
}

impl Sink for MemorySink {
    fn open(&mut self, context: &ContextInfo) -> std::io::Result<()> {
        self.lock().info = Some(context.clone());
        Ok(())
    }

    fn calibrate(&mut self, _context: &ContextInfo, calibration: Calibration) -> std::io::Result<()> {
        self.lock().calibrations.push(calibration);
        Ok(())
    }

    fn zones(&mut self, _context: &ContextInfo, batch: ZoneBatch<'_>) -> std::io::Result<()> {
        let mut recorded = self.lock();
        recorded.zones.extend_from_slice(batch.zones);
        let end = recorded.zones.len();
        recorded.batches.push((batch.list_id, end));
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.lock().flushes += 1;
        Ok(())
    }
}

#[cfg(all(test, not(gpu_event_pool_loom)))]
mod tests {
    use super::MemorySink;
    use crate::backend::sim::SimBackend;
    use crate::{location, TracingContext};

    #[test]
    fn take_zones_drains_what_zones_only_copies() {
        let sim = SimBackend::manual();
        let stream = sim.stream();
        let memory = MemorySink::new();
        let ctx = TracingContext::builder(sim.clone()).sink(memory.clone()).build().unwrap();
        let record = |name| {
            let mut list = ctx.list();
            list.zone_begin(&stream, name).unwrap();
            sim.launch(&stream, 1_000);
            list.zone_end(&stream).unwrap();
            ctx.submit(list).unwrap();
            ctx.flush().unwrap();
        };
        record(location!("first"));
        assert_eq!(memory.zones().len(), 1);
        assert_eq!(memory.zones().len(), 1, "zones() keeps them");
        let taken = memory.take_zones();
        assert_eq!(taken.iter().map(|z| z.location.name()).collect::<Vec<_>>(), ["first"]);
        assert!(memory.zones().is_empty() && memory.batches().is_empty(), "take_zones() drains");
        record(location!("second"));
        let taken = memory.take_zones();
        assert_eq!(taken.iter().map(|z| z.location.name()).collect::<Vec<_>>(), ["second"]);
        assert!(memory.info().is_some(), "the context info stays");
    }
}
