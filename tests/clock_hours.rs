//! The one clock over hours (docs/design.md, section 8, "One clock"): a simulated GPU whose
//! host clock drifts against it, anchors that come late while the GPU is busy, jittered
//! calibration pairs, and first pairs that are wrong. The truth is known: GPU time `g` ran
//! at sim time `base + g`, which the host clock read as `host(base + g)`.
//!
//! The goal checked for every zone: once 1 s of GPU time has passed, its host begin and end
//! within 2 µs of the truth, its host duration the true host duration within 1 ns plus
//! 10 ppm; before, within the first pair's error; host time never going back as GPU time
//! goes on (across lists, lanes, collects, and long zones emitted late).
//!
//! The default run covers a few simulated minutes per case; `clock_matrix_over_ten_hours`
//! (ignored by default, run by CI in release mode) covers ten simulated hours per case:
//! `cargo test --release --test clock_hours -- --ignored`.

use gpu_event_pool::sim::{SimBackend, SimEvent, SimGraph, SimGraphNode, SimStream};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::sink::Zone;
use gpu_event_pool::{location, Backend, BackendError, TracingContext};
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

const MS: i64 = 1_000_000;
const S: i64 = 1_000 * MS;

/// What goes wrong with the clocks in one case.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Trouble {
    /// A busy GPU reaches events recorded on idle streams 1 ms late (the anchors too).
    LateWhileBusy,
    /// Every calibration pair's host time up to 50 µs early (uniform).
    Jitter,
    /// Every read of the host clock up to 50 µs early (uniform): the pairs, the lists' first
    /// records and the reads after an anchor completed alike.
    HostJitter,
    /// The first calibration pairs (the context's base and start-up pairs) 10 ms too late.
    BadFirstPairs,
}

/// The simulated GPU with a host clock that drifts against it (`drift`: host ns per GPU ns,
/// minus 1), and calibration pairs jittered or wrong as `trouble` says.
#[derive(Clone)]
struct Skewed {
    sim: SimBackend,
    drift: f64,
    trouble: Trouble,
    /// Anchors recorded so far.
    anchors: Arc<AtomicU32>,
    /// Sim time of the first anchor (the context's base event), or -1.
    base: Arc<AtomicI64>,
    seed: Arc<AtomicU64>,
}

/// The first pairs `BadFirstPairs` makes wrong: the base and the start-up pairs.
const BAD_PAIRS: u32 = 5;
const BAD_PAIR_ERROR: i64 = 10 * MS;
const JITTER: i64 = 50_000;

impl Skewed {
    fn new(drift_ppm: f64, trouble: Trouble) -> Self {
        let sim = SimBackend::manual();
        sim.advance(3 * MS);
        if trouble == Trouble::LateWhileBusy {
            sim.set_late_records(MS);
        }
        Self {
            sim,
            drift: drift_ppm * 1e-6,
            trouble,
            anchors: Arc::new(AtomicU32::new(0)),
            base: Arc::new(AtomicI64::new(-1)),
            seed: Arc::new(AtomicU64::new(0x9e37_79b9_7f4a_7c15)),
        }
    }

    /// The host clock's reading at sim time `t`.
    fn host(&self, t: i64) -> i64 {
        t + (t as f64 * self.drift).round() as i64
    }

    fn random(&self, max: i64) -> i64 {
        let mut x = self.seed.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.seed.store(x, Ordering::Relaxed);
        (x % (max as u64 + 1)) as i64
    }

    /// The true host time of GPU time `gpu`.
    fn truth(&self, gpu: i64) -> i64 {
        self.host(self.base.load(Ordering::Relaxed) + gpu)
    }

    /// The true host duration from GPU time `begin` to `end`, unrounded.
    fn true_duration(&self, begin: i64, end: i64) -> f64 {
        (end - begin) as f64 * (1.0 + self.drift)
    }
}

impl Backend for Skewed {
    type Event = SimEvent;
    type Stream = SimStream;
    type Graph = SimGraph;
    type GraphNode = SimGraphNode;

    fn name(&self) -> &'static str {
        "skewed sim"
    }
    fn create_event(&self) -> Result<SimEvent, BackendError> {
        self.sim.create_event()
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
    fn record(&self, event: &SimEvent, stream: &SimStream) -> Result<(), BackendError> {
        self.sim.record(event, stream)
    }
    fn record_anchor(&self, event: &SimEvent, stream: &SimStream) -> Result<Option<i64>, BackendError> {
        let now = self.sim.now();
        self.sim.record(event, stream)?;
        let n = self.anchors.fetch_add(1, Ordering::Relaxed);
        if n == 0 {
            // The base event: the context is made on an idle GPU, so it ran now.
            self.base.store(now, Ordering::Relaxed);
        }
        Ok(match self.trouble {
            Trouble::BadFirstPairs if n < BAD_PAIRS => Some(self.host(now) + BAD_PAIR_ERROR),
            Trouble::Jitter => Some(self.host(now) - self.random(JITTER)),
            _ => None,
        })
    }
    fn add_graph_record_node(
        &self,
        event: &SimEvent,
        graph: &SimGraph,
        dependencies: &[SimGraphNode],
    ) -> Result<SimGraphNode, BackendError> {
        self.sim.add_graph_record_node(event, graph, dependencies)
    }
    fn is_complete(&self, event: &SimEvent) -> Result<bool, BackendError> {
        self.sim.is_complete(event)
    }
    fn wait(&self, event: &SimEvent) -> Result<(), BackendError> {
        self.sim.wait(event)
    }
    fn elapsed_ms(&self, start: &SimEvent, end: &SimEvent) -> Result<Option<f32>, BackendError> {
        self.sim.elapsed_ms(start, end)
    }
    fn host_now_ns(&self) -> i64 {
        let jitter = if self.trouble == Trouble::HostJitter { self.random(JITTER) } else { 0 };
        self.host(self.sim.now()) - jitter
    }
}

/// What one case measured.
#[derive(Debug, Default)]
struct Worst {
    zones: usize,
    /// Largest |host - truth| once 1 s has passed (at GPU time `at`), and before.
    after: i64,
    at: i64,
    before: i64,
    /// Largest duration error beyond 1 ns + 10 ppm (0: within).
    duration_excess: f64,
    /// Host time going back as GPU time goes on (count).
    backwards: usize,
}

/// Runs `seconds` of simulated work: rounds every `period` of one command buffer of three
/// kernels on each of two streams, collected partway through the round (the GPU often
/// still busy) and at its end; every `long_every` rounds, a long zone (a kernel of 4.9 s on
/// a third stream). Checks each collect's zones as they come, keeping only the worst.
fn run_case(drift_ppm: f64, trouble: Trouble, seconds: i64, period: i64, long_every: u64) -> Worst {
    let gpu = Skewed::new(drift_ppm, trouble);
    let sink = MemorySink::new();
    let ctx = TracingContext::builder(gpu.clone()).sink(sink.clone()).build().unwrap();
    let streams: Vec<SimStream> = (0..3).map(|_| gpu.sim.stream()).collect();
    let mut worst = Worst::default();
    let mut last: Option<(i64, i64)> = None;
    let mut long: Option<gpu_event_pool::EventList<Skewed>> = None;
    let rounds = (seconds * S / period) as u64;
    let mut check = |zones: Vec<Zone>, worst: &mut Worst| {
        let mut points = Vec::with_capacity(zones.len() * 2);
        for z in &zones {
            for (g, h) in [(z.gpu_begin_ns, z.host_begin_ns), (z.gpu_end_ns, z.host_end_ns)] {
                let error = (h - gpu.truth(g)).abs();
                if g >= S {
                    if error > worst.after {
                        worst.at = g;
                    }
                    worst.after = worst.after.max(error);
                } else {
                    worst.before = worst.before.max(error);
                }
                points.push((g, h));
            }
            if z.gpu_begin_ns >= S {
                let truth = gpu.true_duration(z.gpu_begin_ns, z.gpu_end_ns);
                let error = ((z.host_end_ns - z.host_begin_ns) as f64 - truth).abs();
                let allowed = 1.0 + 10e-6 * truth;
                worst.duration_excess = worst.duration_excess.max(error - allowed);
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
    for round in 0..rounds {
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
        ctx.collect().unwrap();
        gpu.sim.advance(period - partway);
        ctx.collect().unwrap();
        let zones = sink.take_zones();
        check(zones, &mut worst);
    }
    if let Some(list) = long.take() {
        ctx.submit(list).unwrap();
    }
    ctx.flush().unwrap();
    check(sink.take_zones(), &mut worst);
    worst
}

const DRIFTS_PPM: [f64; 9] = [0.0, 0.5, -0.5, 1.0, -1.0, 10.0, -10.0, 100.0, -100.0];
const TROUBLES: [Trouble; 4] =
    [Trouble::LateWhileBusy, Trouble::Jitter, Trouble::HostJitter, Trouble::BadFirstPairs];

fn matrix(troubles: &[Trouble], seconds: i64, period: i64, long_every: u64) {
    let mut failures = Vec::new();
    for &trouble in troubles {
        for drift in DRIFTS_PPM {
            let worst = run_case(drift, trouble, seconds, period, long_every);
            let first_pair_error = if trouble == Trouble::BadFirstPairs { BAD_PAIR_ERROR } else { 100_000 };
            let ok = worst.after <= 2_000
                && worst.before <= first_pair_error
                && worst.duration_excess <= 0.0
                && worst.backwards == 0;
            println!(
                "{trouble:?} {drift:+} ppm over {seconds} s: {worst:?}{}",
                if ok { "" } else { "  FAILED" }
            );
            if !ok {
                failures.push(format!("{trouble:?} at {drift:+} ppm: {worst:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Every case for two simulated minutes, one round every 20 ms, a long zone every minute.
#[test]
#[cfg_attr(miri, ignore = "minutes of simulation")]
fn clock_matrix_over_two_minutes() {
    matrix(&TROUBLES, 120, 20 * MS, 3_000);
}

/// Every case for ten simulated hours, one round every 250 ms, a long zone every 10 minutes;
/// but host reads jittered everywhere (`HostJitter`), whose bounds are too few at one round
/// every 250 ms for the goal (docs/design.md, section 8, "What the clock cannot do").
#[test]
#[ignore = "slow in debug builds: CI runs it in release mode"]
fn clock_matrix_over_ten_hours() {
    matrix(&[Trouble::LateWhileBusy, Trouble::Jitter, Trouble::BadFirstPairs], 10 * 3_600, 250 * MS, 2_400);
}

/// Issue 26, item 1: anchors 1 ms late while the GPU is busy, idle for the first 1.2 s and
/// busy after (a stream kept busy by other work) for 8 s: the drift is not fitted from an
/// exact early pair to a late later one.
#[test]
#[cfg_attr(miri, ignore = "seconds of simulation")]
fn anchors_late_while_busy_for_seconds_do_not_invent_a_drift() {
    for drift in [0.0, 100.0, -100.0] {
        let gpu = Skewed::new(drift, Trouble::LateWhileBusy);
        let sink = MemorySink::new();
        let ctx = TracingContext::builder(gpu.clone()).sink(sink.clone()).build().unwrap();
        let (stream, busy) = (gpu.sim.stream(), gpu.sim.stream());
        let (mut worst, mut first_second) = (0, 0);
        for round in 0..800i64 {
            if round == 120 {
                gpu.sim.launch(&busy, 20 * S);
            }
            let mut list = ctx.list();
            list.zone_begin(&stream, location!("kernel")).unwrap();
            gpu.sim.launch(&stream, 200_000);
            list.zone_end(&stream).unwrap();
            ctx.submit(list).unwrap();
            gpu.sim.advance(10 * MS);
            ctx.collect().unwrap();
            for z in sink.take_zones() {
                let error = (z.host_begin_ns - gpu.truth(z.gpu_begin_ns)).abs();
                if z.gpu_begin_ns >= S {
                    worst = worst.max(error);
                } else {
                    first_second = first_second.max(error);
                }
            }
        }
        assert!(worst <= 2_000, "{drift} ppm: {worst} ns off the truth after 1 s");
        assert!(first_second <= 100_000, "{drift} ppm: {first_second} ns off the truth in the first second");
    }
}
