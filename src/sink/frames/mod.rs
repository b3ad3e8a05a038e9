//! Statistics over the last N frames: per zone name, count / mean / min / p50 / p99 / max of
//! its GPU durations over the newest N frames, read by the application at any time, at a
//! bounded memory cost; and each of the newest frames' zones as a tree (the shape
//! `wgpu-profiler` returns a frame in). docs/watch.md says how a runtime uses it.
//!
//! Frames are what the application marks with
//! [`TracingContext::frame`](crate::TracingContext::frame): a frame, a training step, a
//! request. A zone counts in the frame of its list ([`Zone::frame`]); zones of lists made
//! before any frame are not counted ([`SkippedZones::unframed`]).
//!
//! - **The window** is the N newest frame ids seen ([`FrameStats::new`]): a zone of a newer
//!   frame opens it and, once N are kept, the oldest leaves with everything it counted. A
//!   zone of a frame older than every kept one, while N are kept, is not counted
//!   ([`SkippedZones::late`]).
//! - **Exact**: count, mean, min and max. **Within 1/64 (1.6%)**: the percentiles, read from
//!   log-linear buckets (32 per power of two; exact below 64 ns): the value reported for the
//!   nearest-rank percentile (the `ceil(p n)`-th smallest duration) is within 1/64 of it.
//! - **Memory** grows with neither the number of zones nor the length of the run: per name
//!   at most 60 blocks of 32 counts; per kept frame and name, one (bucket, count) pair per
//!   bucket its durations fall in (at most 1920); the zones of the newest
//!   [`keep_zones`](FrameStats::keep_zones) frames, up to a cap each; at most
//!   [`max_names`](FrameStats::max_names) names (zones of more are counted in
//!   [`SkippedZones::untracked`]). docs/design.md, section 12, has the bound.
//! - **Reading** takes the statistics' lock for one pass over them; collection never stops,
//!   the collector's next batch waits that long at most.
//!
//! One [`FrameStats`] may be fed by several contexts (one [`sink`](FrameStats::sink) each):
//! their frames are matched by id, so give every context the same frame ids (one GPU per
//! context, one step for all).
//!
//! ```
//! use gpu_event_pool::sink::frames::FrameStats;
//! use gpu_event_pool::{location, sim::SimBackend, TracingContext};
//!
//! let sim = SimBackend::manual();
//! let stream = sim.stream();
//! let stats = FrameStats::new(100); // the last 100 frames
//! let ctx = TracingContext::builder(sim.clone()).sink(stats.sink()).build()?;
//! for step in 0..300 {
//!     ctx.frame(step);
//!     let mut list = ctx.list();
//!     {
//!         let mut frame = list.zone(&stream, location!("step"));
//!         let _pass = frame.zone(&stream, location!("matmul"));
//!         sim.launch(&stream, 20_000 + step as i64);
//!     }
//!     ctx.submit(list)?;
//!     ctx.collect()?;
//! }
//! ctx.flush()?;
//! let matmul = stats.zone("matmul").expect("in the window");
//! assert_eq!((matmul.count, matmul.frames, matmul.max_ns), (100, 100, 20_299));
//! assert!(matmul.p50_ns.abs_diff(20_249) <= 20_249 / 64);
//! let last = stats.frame(299).expect("the newest frames keep their zones");
//! let tree = last.tree();
//! assert_eq!((tree[0].zone.location.name(), tree[0].children[0].zone.location.name()), ("step", "matmul"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod histogram;
mod window;

use super::{zone_tree, ContextInfo, Sink, Zone, ZoneBatch, ZoneNode};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use window::{Limits, Window};

/// The most frames a window keeps ([`FrameStats::new`] cuts a larger N to it).
pub const MAX_FRAMES: usize = 1 << 16;
/// Names counted unless [`FrameStats::max_names`] says otherwise.
pub const DEFAULT_MAX_NAMES: usize = 1024;
/// The newest frames whose zones are kept, unless [`FrameStats::keep_zones`] says otherwise.
pub const DEFAULT_TREE_FRAMES: usize = 2;
/// The most zones kept per frame, unless [`FrameStats::keep_zones`] says otherwise.
pub const DEFAULT_TREE_ZONES: usize = 4096;

/// Statistics per zone name over the newest N frames, and the newest frames' zones (module
/// docs). Cheap to clone: clones and the sinks made from it share one window.
#[derive(Clone)]
pub struct FrameStats {
    window: Arc<Mutex<Window>>,
}

impl std::fmt::Debug for FrameStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameStats").finish_non_exhaustive()
    }
}

/// One zone name's figures over the window ([`FrameStats::summary`]); durations are GPU
/// nanoseconds.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ZoneStats {
    /// The zones' name ([`Location::name`](crate::Location::name): arguments do not split it).
    pub name: String,
    /// Zones of this name in the window.
    pub count: u64,
    /// Frames of the window with at least one of them.
    pub frames: usize,
    /// Their mean duration (exact).
    pub mean_ns: f64,
    /// The shortest (exact).
    pub min_ns: u64,
    /// The median: nearest rank, within 1/64.
    pub p50_ns: u64,
    /// The 99th percentile: nearest rank, within 1/64.
    pub p99_ns: u64,
    /// The longest (exact).
    pub max_ns: u64,
}

/// One frame of the window ([`FrameStats::frames`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FrameSummary {
    /// The frame's id.
    pub id: u64,
    /// Its zones collected so far (those of untracked names included).
    pub zones: u64,
    /// The earliest host begin of its zones: where its GPU work starts on the host clock.
    pub host_begin_ns: i64,
    /// The latest host end of its zones.
    pub host_end_ns: i64,
    /// The largest host-time bound of its zones' begins and ends
    /// ([`Zone::host_begin_bound_ns`]): how far any of its zones may be from the true host
    /// time (`u64::MAX`: one was not bounded).
    pub worst_bound_ns: u64,
    /// The 99th percentile of its zones' bounds (each zone's larger one): nearest rank,
    /// within 1/64.
    pub p99_bound_ns: u64,
}

impl FrameSummary {
    /// From its first zone's begin to its last zone's end, in nanoseconds: how long the GPU
    /// worked on it, idle gaps included.
    pub fn span_ns(&self) -> u64 {
        self.host_end_ns.saturating_sub(self.host_begin_ns).max(0) as u64
    }
}

/// The zones of one kept frame ([`FrameStats::frame`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FrameZones {
    /// The frame's id.
    pub id: u64,
    /// Its zones collected so far, list after list, each list's in begin order.
    pub zones: Vec<Zone>,
    /// Zones beyond the cap ([`FrameStats::keep_zones`]), not kept (still counted).
    pub truncated: usize,
}

impl FrameZones {
    /// The zones as a tree: each list's outermost zones, in the order the lists were
    /// collected, with the zones nested in them.
    pub fn tree(&self) -> Vec<ZoneNode<'_>> {
        zone_tree(&self.zones)
    }
}

/// Zones the statistics did not count ([`FrameStats::skipped`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkippedZones {
    /// Of a frame older than every frame kept, while the window was full.
    pub late: u64,
    /// Of a list made before any frame (or after `frame(u64::MAX)`).
    pub unframed: u64,
    /// Of a name beyond [`FrameStats::max_names`] (counted in their frame's zones).
    pub untracked: u64,
}

impl FrameStats {
    /// Statistics over the newest `frames` frames (at least 1, at most [`MAX_FRAMES`]).
    pub fn new(frames: usize) -> Self {
        let limits = Limits {
            frames: frames.clamp(1, MAX_FRAMES),
            max_names: DEFAULT_MAX_NAMES,
            tree_frames: DEFAULT_TREE_FRAMES.min(frames.max(1)),
            tree_zones: DEFAULT_TREE_ZONES,
        };
        Self { window: Arc::new(Mutex::new(Window::new(limits))) }
    }

    /// Counts at most `names` zone names (at least 1; default [`DEFAULT_MAX_NAMES`]); zones
    /// of later names are counted in [`SkippedZones::untracked`].
    pub fn max_names(self, names: usize) -> Self {
        self.lock().limits.max_names = names.clamp(1, u32::MAX as usize);
        self
    }

    /// Keeps the zones of the newest `frames` frames (at most the window's; default
    /// [`DEFAULT_TREE_FRAMES`]), at most `zones` each (default [`DEFAULT_TREE_ZONES`]), for
    /// [`frame`](Self::frame). Frames opened from now on follow it.
    pub fn keep_zones(self, frames: usize, zones: usize) -> Self {
        let mut window = self.lock();
        window.limits.tree_frames = frames.min(window.limits.frames);
        window.limits.tree_zones = zones;
        drop(window);
        self
    }

    /// A sink feeding these statistics: one per context.
    pub fn sink(&self) -> FrameStatsSink {
        FrameStatsSink { window: Arc::clone(&self.window) }
    }

    fn lock(&self) -> MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every zone name with zones in the window, in name order.
    pub fn summary(&self) -> Vec<ZoneStats> {
        let window = self.lock();
        window.figures().into_iter().map(|(name, f)| zone_stats(&window, name, &f)).collect()
    }

    /// The figures of the zones named `name`, if any is in the window.
    pub fn zone(&self, name: &str) -> Option<ZoneStats> {
        let window = self.lock();
        let (name, figures) = window.figures().into_iter().find(|(n, _)| *n == name)?;
        Some(zone_stats(&window, name, &figures))
    }

    /// The nearest-rank `p` percentile (`p` in (0, 1]; smaller is the minimum's bucket,
    /// larger the maximum) of `name`'s durations in the window, within 1/64.
    pub fn percentile(&self, name: &str, p: f64) -> Option<u64> {
        let window = self.lock();
        let (_, figures) = window.figures().into_iter().find(|(n, _)| *n == name)?;
        Some(window.percentile(name, &figures, p))
    }

    /// The frames of the window, oldest first.
    pub fn frames(&self) -> Vec<FrameSummary> {
        let window = self.lock();
        window
            .frames
            .iter()
            .map(|f| FrameSummary {
                id: f.id,
                zones: f.zones,
                host_begin_ns: f.host_begin_ns,
                host_end_ns: f.host_end_ns,
                worst_bound_ns: f.worst_bound_ns,
                p99_bound_ns: f.p99_bound_ns(),
            })
            .collect()
    }

    /// The zones of frame `id`, if it is one of the newest frames that keep theirs
    /// ([`keep_zones`](Self::keep_zones)). Its lists are collected as the GPU finishes them,
    /// so the newest frame is usually incomplete; after `flush`, every list submitted is in.
    pub fn frame(&self, id: u64) -> Option<FrameZones> {
        let window = self.lock();
        let at = window.frames.binary_search_by_key(&id, |f| f.id).ok()?;
        let frame = &window.frames[at];
        let zones = frame.kept.clone()?;
        Some(FrameZones { id, zones, truncated: frame.truncated })
    }

    /// Zones not counted, and why.
    pub fn skipped(&self) -> SkippedZones {
        let skipped = self.lock().skipped;
        SkippedZones { late: skipped.late, unframed: skipped.unframed, untracked: skipped.untracked }
    }
}

/// One name's [`ZoneStats`] from its figures.
fn zone_stats(window: &Window, name: &str, f: &window::NameFigures) -> ZoneStats {
    ZoneStats {
        name: name.to_owned(),
        count: f.count,
        frames: f.frames,
        mean_ns: f.sum_ns as f64 / f.count as f64,
        min_ns: f.min_ns,
        p50_ns: window.percentile(name, f, 0.5),
        p99_ns: window.percentile(name, f, 0.99),
        max_ns: f.max_ns,
    }
}

/// Feeds a [`FrameStats`] with one context's zones ([`FrameStats::sink`]).
pub struct FrameStatsSink {
    window: Arc<Mutex<Window>>,
}

impl std::fmt::Debug for FrameStatsSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameStatsSink").finish_non_exhaustive()
    }
}

impl Sink for FrameStatsSink {
    fn zones(&mut self, _context: &ContextInfo, batch: ZoneBatch<'_>) -> std::io::Result<()> {
        self.window.lock().unwrap_or_else(PoisonError::into_inner).add(batch.zones);
        Ok(())
    }
}
