//! What the clock's test files share: a simulated GPU whose host clock drifts against it (at
//! rates that may change), whose anchors come late while it is busy, whose calibration pairs
//! are jittered or wrong, and whose reads may be absurd; and a workload that checks every
//! zone against the truth. The truth is known: GPU time `g` ran at sim time `base + g`,
//! which the host clock read as `sim.host_at(base + g)`.
#![allow(dead_code)]

use gpu_event_pool::sim::{SimBackend, SimEvent, SimGraph, SimGraphNode, SimStream};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::Zone;
use gpu_event_pool::{
    location, Backend, BackendError, CollectError, Elapsed, Error, TimeError, TracingContext,
};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub const MS: i64 = 1_000_000;
pub const S: i64 = 1_000 * MS;
/// How early a jittered host read may be (uniform).
pub const JITTER: i64 = 50_000;

/// The default seed of a case's random sequence (jitter, kernel lengths).
pub const SEED: u64 = 0x9e37_79b9_7f4a_7c15;
/// The first pairs `BadFirstPairs` makes wrong: the base and the start-up pairs.
pub const BAD_PAIRS: u32 = 5;
pub const BAD_PAIR_ERROR: i64 = 10 * MS;

/// The cases to run: all of them, or the first only where tests run slow
/// (`GPU_EVENT_POOL_QUICK_TESTS`: ThreadSanitizer in `.ci/verify.sh`).
pub fn sample<T>(all: &[T]) -> &[T] {
    if std::env::var_os("GPU_EVENT_POOL_QUICK_TESTS").is_some() {
        &all[..all.len().min(1)]
    } else {
        all
    }
}

/// What goes wrong with the clocks in one case.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Trouble {
    /// Nothing: every bound exact.
    None,
    /// A busy GPU reaches events recorded on idle streams 1 ms late (the anchors too).
    LateWhileBusy,
    /// Every calibration pair's host time up to 50 µs early (uniform).
    Jitter,
    /// Both: late while busy, and every pair up to 50 µs early.
    LateAndJitter,
    /// Every read of the host clock up to 50 µs early (uniform): the pairs, the lists' first
    /// records and the reads after an anchor completed alike.
    HostJitter,
    /// The first calibration pairs (the context's base and start-up pairs) 10 ms too late.
    BadFirstPairs,
}

impl Trouble {
    fn late(self) -> bool {
        matches!(self, Self::LateWhileBusy | Self::LateAndJitter)
    }
    fn jitter(self) -> bool {
        matches!(self, Self::Jitter | Self::LateAndJitter)
    }
}

/// Which read an absurd value is injected into.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Read {
    /// A step between two events of a list.
    ListStep,
    /// A list's first event read from an anchor (its placement).
    Placement,
    /// The step from one anchor to the next.
    AnchorStep,
}

/// The simulated GPU, its host clock drifting against it (`SimBackend::set_host_drift`), with
/// calibration pairs jittered or wrong as `trouble` says, and absurd reads on demand.
#[derive(Clone)]
pub struct Skewed {
    pub sim: SimBackend,
    trouble: Trouble,
    /// Anchors recorded so far.
    anchors: Arc<AtomicU32>,
    /// Sim time of the first anchor (the context's base event), or -1.
    base: Arc<AtomicI64>,
    seed: Arc<AtomicU64>,
    /// The next read of this kind returns this many nanoseconds, exact.
    absurd: Arc<Mutex<Option<(Read, i64)>>>,
}

impl Skewed {
    pub fn new(drift_ppm: f64, trouble: Trouble) -> Self {
        Self::seeded(drift_ppm, trouble, SEED)
    }

    /// [`Skewed::new`] with its own sequence of jitter and kernel lengths.
    pub fn seeded(drift_ppm: f64, trouble: Trouble, seed: u64) -> Self {
        let sim = SimBackend::manual();
        sim.set_host_drift(drift_ppm);
        sim.advance(3 * MS);
        if trouble.late() {
            sim.set_late_records(MS);
        }
        Self {
            sim,
            trouble,
            anchors: Arc::new(AtomicU32::new(0)),
            base: Arc::new(AtomicI64::new(-1)),
            seed: Arc::new(AtomicU64::new(seed.max(1))),
            absurd: Arc::new(Mutex::new(None)),
        }
    }

    /// The next read of kind `read` returns `ns` (exact nanoseconds), as a backend whose
    /// difference did not fit returns `i64::MAX`.
    pub fn absurd_read(&self, read: Read, ns: i64) {
        *self.absurd.lock().unwrap() = Some((read, ns));
    }

    /// Whether an absurd read is still waiting for its read.
    pub fn absurd_pending(&self) -> bool {
        self.absurd.lock().unwrap().is_some()
    }

    pub fn random(&self, max: i64) -> i64 {
        let mut x = self.seed.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.seed.store(x, Ordering::Relaxed);
        (x % (max as u64 + 1)) as i64
    }

    /// The true host time of GPU time `gpu`.
    pub fn truth(&self, gpu: i64) -> i64 {
        self.sim.host_at(self.base.load(Ordering::Relaxed).saturating_add(gpu))
    }

    /// The true host duration from GPU time `begin` to `end`.
    pub fn true_duration(&self, begin: i64, end: i64) -> i64 {
        self.truth(end) - self.truth(begin)
    }
}

/// A simulated event that knows whether it was last recorded as an anchor.
#[derive(Debug)]
pub struct Event {
    sim: SimEvent,
    anchor: AtomicBool,
}

impl Backend for Skewed {
    type Event = Event;
    type Stream = SimStream;
    type Graph = SimGraph;
    type GraphNode = SimGraphNode;

    fn name(&self) -> &'static str {
        "skewed sim"
    }
    fn create_event(&self) -> Result<Event, BackendError> {
        Ok(Event { sim: self.sim.create_event()?, anchor: AtomicBool::new(false) })
    }
    fn create_stream(&self) -> Result<SimStream, BackendError> {
        self.sim.create_stream()
    }
    fn stream_key(&self, stream: &SimStream) -> u64 {
        self.sim.stream_key(stream)
    }
    fn graph_key(&self, graph: &SimGraph) -> u64 {
        self.sim.graph_key(graph)
    }
    fn record(&self, event: &Event, stream: &SimStream) -> Result<(), BackendError> {
        event.anchor.store(false, Ordering::Relaxed);
        self.sim.record(&event.sim, stream)
    }
    fn record_anchor(&self, event: &Event, stream: &SimStream) -> Result<Option<i64>, BackendError> {
        let now = self.sim.now();
        self.sim.record(&event.sim, stream)?;
        event.anchor.store(true, Ordering::Relaxed);
        let n = self.anchors.fetch_add(1, Ordering::Relaxed);
        if n == 0 {
            // The base event: the context is made on an idle GPU, so it ran now.
            self.base.store(now, Ordering::Relaxed);
        }
        let host = self.sim.host_at(now);
        Ok(match self.trouble {
            Trouble::BadFirstPairs if n < BAD_PAIRS => Some(host + BAD_PAIR_ERROR),
            t if t.jitter() => Some(host - self.random(JITTER)),
            _ => None,
        })
    }
    fn add_graph_record_node(
        &self,
        event: &Event,
        graph: &SimGraph,
        dependencies: &[SimGraphNode],
    ) -> Result<SimGraphNode, BackendError> {
        event.anchor.store(false, Ordering::Relaxed);
        self.sim.add_graph_record_node(&event.sim, graph, dependencies)
    }
    fn is_complete(&self, event: &Event) -> Result<bool, BackendError> {
        self.sim.is_complete(&event.sim)
    }
    fn wait(&self, event: &Event) -> Result<(), BackendError> {
        self.sim.wait(&event.sim)
    }
    fn elapsed_ms(&self, start: &Event, end: &Event) -> Result<Option<f32>, BackendError> {
        self.sim.elapsed_ms(&start.sim, &end.sim)
    }
    fn elapsed(&self, start: &Event, end: &Event) -> Result<Option<Elapsed>, BackendError> {
        let read = match (start.anchor.load(Ordering::Relaxed), end.anchor.load(Ordering::Relaxed)) {
            (true, true) => Read::AnchorStep,
            (true, false) => Read::Placement,
            _ => Read::ListStep,
        };
        let elapsed = self.sim.elapsed(&start.sim, &end.sim)?;
        let mut absurd = self.absurd.lock().unwrap();
        match *absurd {
            Some((kind, ns)) if kind == read && elapsed.is_some() => {
                *absurd = None;
                Ok(Some(Elapsed::from_ns(ns)))
            }
            _ => Ok(elapsed),
        }
    }
    fn host_now_ns(&self) -> i64 {
        let jitter = if self.trouble == Trouble::HostJitter { self.random(JITTER) } else { 0 };
        self.sim.host_now_ns() - jitter
    }
}

/// One case of the workload: the clocks, what goes wrong with them, and the work.
#[derive(Debug, Clone)]
pub struct Case {
    /// The host clock's drift against the GPU from the start (ppm).
    pub drift_ppm: f64,
    /// Later drifts: from sim time `.0` on, `.1` ppm.
    pub changes: Vec<(i64, f64)>,
    pub trouble: Trouble,
    pub seconds: i64,
    /// One round of work every `period` of sim time.
    pub period: i64,
    /// Every this many rounds a 4.9 s zone (0: never).
    pub long_every: u64,
    /// A stream kept busy (untraced work) over this span of sim time.
    pub busy: Option<(i64, i64)>,
    /// At sim time `.0`, the next read of kind `.1` returns `.2` nanoseconds.
    pub absurd: Option<(i64, Read, i64)>,
    /// The seed of the case's jitter and kernel lengths.
    pub seed: u64,
}

impl Case {
    pub fn new(drift_ppm: f64, trouble: Trouble, seconds: i64, period: i64) -> Self {
        Self {
            drift_ppm,
            changes: Vec::new(),
            trouble,
            seconds,
            period,
            long_every: 0,
            busy: None,
            absurd: None,
            seed: SEED,
        }
    }
}

/// What a case must hold: within `after` ns of the truth and host durations within 1 ns plus
/// `rate_ppm` ppm of the true ones from `from` ns of GPU time on (1 s or 4 s), within `first`
/// ns of the truth before 1 s, host time never back, and no error but time errors.
#[derive(Debug, Clone, Copy)]
pub struct Goal {
    pub after: i64,
    pub from: i64,
    pub first: i64,
    pub rate_ppm: f64,
}

/// 2 µs from 1 s on, 100 µs before, durations within 10 ppm.
pub const GOAL: Goal = Goal { after: 2_000, from: S, first: 100_000, rate_ppm: 10.0 };

impl Worst {
    /// What of `goal` this case missed, if anything.
    pub fn shortfall(&self, goal: &Goal) -> Option<String> {
        let (after, rate) = if goal.from >= 4 * S {
            (self.after_4s, self.duration_ppm_4s)
        } else {
            (self.after, self.duration_ppm)
        };
        let missed = [
            (after > goal.after, format!("{after} ns off the truth (at most {})", goal.after)),
            (
                self.before > goal.first,
                format!("{} ns off in the first second (at most {})", self.before, goal.first),
            ),
            (rate > goal.rate_ppm, format!("a duration {rate:.1} ppm off (at most {})", goal.rate_ppm)),
            (self.backwards > 0, format!("host time went back {} times", self.backwards)),
            (self.other_errors > 0, format!("{} errors", self.other_errors)),
        ];
        let missed: Vec<String> =
            missed.into_iter().filter(|(miss, _)| *miss).map(|(_, what)| what).collect();
        (!missed.is_empty()).then(|| missed.join(", "))
    }
}

/// What one case measured.
#[derive(Debug, Default)]
pub struct Worst {
    pub zones: usize,
    /// Largest |host - truth| once 1 s has passed (at GPU time `at`, signed `signed`), and
    /// before.
    pub after: i64,
    pub at: i64,
    pub signed: i64,
    pub before: i64,
    /// Largest |host - truth| once 4 s have passed.
    pub after_4s: i64,
    /// Largest |host duration - true host duration| (ns) beyond 1 ns plus 10 ppm of the
    /// zone, once 1 s has passed (0: within).
    pub duration_excess: i64,
    /// Largest |host duration - true host duration| beyond 2 ns (1 ns, and 1 ns for the
    /// truth's own rounding), in ppm of the zone's duration, once 1 s has passed, and once
    /// 4 s have.
    pub duration_ppm: f64,
    pub duration_ppm_4s: f64,
    /// Host time going back as GPU time goes on (count).
    pub backwards: usize,
    /// Time errors collect reported (`TimeError`), and other collect errors.
    pub time_errors: Vec<TimeError>,
    pub other_errors: usize,
}

/// Runs `case`: rounds every `period` of one command buffer of three kernels on each of two
/// streams, collected partway through the round (the GPU often still busy) and at its end;
/// every `long_every` rounds, a long zone (a kernel of 4.9 s on a third stream). Checks each
/// collect's zones as they come, keeping only the worst.
pub fn run_case(case: &Case) -> Worst {
    let gpu = Skewed::seeded(case.drift_ppm, case.trouble, case.seed);
    let sink = MemorySink::new();
    let ctx = TracingContext::builder(gpu.clone()).sink(sink.clone()).build().unwrap();
    let streams: Vec<SimStream> = (0..4).map(|_| gpu.sim.stream()).collect();
    let mut worst = Worst::default();
    let mut last: Option<(i64, i64)> = None;
    let mut long: Option<gpu_event_pool::EventList<Skewed>> = None;
    let rounds = (case.seconds * S / case.period) as u64;
    let (mut changes, mut busy, mut absurd) = (case.changes.clone(), case.busy, case.absurd);
    changes.reverse();
    let long_every = case.long_every;
    let mut check = |zones: Vec<Zone>, worst: &mut Worst| {
        let mut points = Vec::with_capacity(zones.len() * 2);
        for z in &zones {
            for (g, h) in [(z.gpu_begin_ns, z.host_begin_ns), (z.gpu_end_ns, z.host_end_ns)] {
                let error = h - gpu.truth(g);
                if g >= 4 * S {
                    worst.after_4s = worst.after_4s.max(error.abs());
                }
                if g >= S {
                    if error.abs() > worst.after {
                        (worst.at, worst.signed) = (g, error);
                    }
                    worst.after = worst.after.max(error.abs());
                } else {
                    worst.before = worst.before.max(error.abs());
                }
                points.push((g, h));
            }
            if z.gpu_begin_ns >= S {
                let truth = gpu.true_duration(z.gpu_begin_ns, z.gpu_end_ns);
                let error = ((z.host_end_ns - z.host_begin_ns) - truth).abs();
                // 1 ns + 10 ppm, and 1 ns for the truth's own ends rounded to nanoseconds.
                let allowed = 2 + truth / 100_000;
                worst.duration_excess = worst.duration_excess.max(error - allowed);
                let ppm = (error - 2).max(0) as f64 / truth.max(1) as f64 * 1e6;
                worst.duration_ppm = worst.duration_ppm.max(ppm);
                if z.gpu_begin_ns >= 4 * S {
                    worst.duration_ppm_4s = worst.duration_ppm_4s.max(ppm);
                }
            }
        }
        worst.zones += zones.len();
        // Across collects: every point against the points emitted before, through the
        // latest one before it in GPU time (kept as the max host time at or below).
        points.sort_unstable();
        for pair in points.windows(2) {
            worst.backwards += usize::from(pair[1].1 < pair[0].1);
        }
        if let (Some((g0, h0)), Some(&(g1, h1))) = (last, points.first()) {
            worst.backwards += usize::from(g1 >= g0 && h1 < h0);
        }
        if let Some(&p) = points.last() {
            if last.is_none_or(|(g0, _)| p.0 >= g0) {
                last = Some(p);
            }
        }
    };
    let collect = |worst: &mut Worst, result: Result<(), CollectError>| match result {
        Ok(()) => {}
        Err(CollectError { error: Error::Time(e), .. }) => worst.time_errors.push(e),
        Err(_) => worst.other_errors += 1,
    };
    for round in 0..rounds {
        let now = gpu.sim.now();
        while changes.last().is_some_and(|&(at, _)| at <= now) {
            gpu.sim.set_host_drift(changes.pop().unwrap().1);
        }
        if let Some((from, to)) = busy.filter(|&(from, _)| from <= now) {
            gpu.sim.launch(&streams[3], to - now.max(from));
            busy = None;
        }
        if let Some((_, read, ns)) = absurd.filter(|&(at, _, _)| at <= now) {
            gpu.absurd_read(read, ns);
            absurd = None;
        }
        for stream in &streams[..2] {
            let mut list = ctx.list();
            list.zone_begin(stream, location!("command buffer")).unwrap();
            for k in 0..3 {
                let kernel = if k == 0 { location!("a") } else { location!("b") };
                if k == 0 {
                    list.zone_begin(stream, kernel).unwrap();
                } else {
                    list.zone_next(stream, kernel).unwrap();
                }
                gpu.sim.launch(stream, 20_000 + gpu.random(600_000));
            }
            list.zone_end(stream).unwrap();
            list.zone_end(stream).unwrap();
            ctx.submit(list).unwrap();
        }
        if long_every > 0 && round % long_every == long_every / 2 {
            let mut list = ctx.list();
            list.zone_begin(&streams[2], location!("long")).unwrap();
            gpu.sim.launch(&streams[2], 4_900 * MS);
            list.zone_end(&streams[2]).unwrap();
            long = Some(list);
        }
        if let Some(list) = long.take_if(|_| round % long_every.max(1) == 0) {
            ctx.submit(list).unwrap();
        }
        let partway = gpu.random(2 * MS);
        gpu.sim.advance(partway);
        collect(&mut worst, ctx.collect().map(drop));
        gpu.sim.advance(case.period - partway);
        collect(&mut worst, ctx.collect().map(drop));
        check(sink.take_zones(), &mut worst);
    }
    if let Some(list) = long.take() {
        ctx.submit(list).unwrap();
    }
    collect(&mut worst, ctx.flush().map(drop));
    check(sink.take_zones(), &mut worst);
    worst
}
