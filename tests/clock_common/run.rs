//! Running a world: its workload, and every zone checked against the truth as it comes.

use super::{Jump, Lateness, Read, World, WorldGpu, MS, S};
use gpu_event_pool::sim::SimStream;
use gpu_event_pool::sink::{ClockDiscontinuity, ContextInfo, Sink, Zone, ZoneBatch};
use gpu_event_pool::testing::SimFaults;
use gpu_event_pool::{location, CollectError, Error, TracingContext};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What a world's run measured; [`Outcome::check`] says what of it breaks P1 to P4.
#[derive(Debug, Default)]
pub struct Outcome {
    pub zones: usize,
    pub lists: usize,
    /// P1: zone edges outside their bound (the first few described).
    pub outside: usize,
    pub outside_first: Vec<String>,
    /// The largest distance of a placed time from the truth, and the largest bound, from 1 s
    /// on.
    pub worst_error: u64,
    pub worst_bound: u64,
    /// P2: bounds over 2 µs from 1 s on (the first described).
    pub wide: usize,
    pub wide_first: Option<String>,
    /// P3: lists failed, lists emitted later than the collect after they completed,
    /// discontinuities counted (`Stats`) and delivered to the sink.
    pub failed: usize,
    /// Lists never emitted although no jump came while they were in flight (between their
    /// first record and their read) and no read of theirs was absurd twice.
    pub lost: usize,
    pub late: usize,
    pub late_first: Option<String>,
    pub missing: usize,
    pub discontinuities: usize,
    pub delivered_discontinuities: usize,
    pub reported_discontinuities: usize,
    /// P4: zones whose host duration, or gap from the zone before in their list, is not the
    /// GPU's.
    pub stretched: usize,
    /// GPU times not exact where the world promises them.
    pub inexact: usize,
    pub inexact_first: Option<String>,
    pub placed_alone: usize,
    /// Whether the world's absurd read was injected (a world may end before its time comes).
    pub absurd_injected: bool,
    /// Whether the final flush is being checked.
    pub flushing: bool,
    pub time_errors: Vec<String>,
    pub other_errors: Vec<String>,
}

impl Outcome {
    /// What of P1 to P4 (and exact GPU times) the run broke, if anything.
    pub fn check(&self, world: &World) -> Result<(), String> {
        let absurd_persists =
            world.absurd.is_some_and(|(_, read, _, times)| times > 1 && read != Read::AnchorStep);
        let misses = [
            (
                self.outside > 0,
                format!("P1: {} edges outside their bound: {:?}", self.outside, self.outside_first),
            ),
            (
                world.tight() && self.wide > 0,
                format!("P2: {} bounds over 2 µs from 1 s on: {:?}", self.wide, self.wide_first),
            ),
            (
                self.lost > usize::from(absurd_persists),
                format!(
                    "P3: {} lists lost ({} failed): {:?}",
                    self.lost,
                    self.failed,
                    self.time_errors.first()
                ),
            ),
            (self.late > 0, format!("P3: {} lists emitted late: {:?}", self.late, self.late_first)),
            (
                self.discontinuities != world.discontinuities(self.absurd_injected)
                    || self.delivered_discontinuities != self.discontinuities
                    // A collect returns its first failure (the rest are counted in its report).
                    || (self.reported_discontinuities == 0 && self.discontinuities > 0 && self.time_errors.is_empty())
                    || (self.reported_discontinuities > 0 && self.discontinuities == 0),
                format!(
                    "P3: {} discontinuities counted ({} delivered, {} reported), {} in the world",
                    self.discontinuities,
                    self.delivered_discontinuities,
                    self.reported_discontinuities,
                    world.discontinuities(self.absurd_injected)
                ),
            ),
            (self.stretched > 0, format!("P4: {} zones stretched", self.stretched)),
            (
                world.exact() && self.inexact > 0,
                format!("{} GPU times not exact: {:?}", self.inexact, self.inexact_first),
            ),
            (!self.other_errors.is_empty() && !world.misplaced(), format!("errors: {:?}", self.other_errors)),
        ];
        let missed: Vec<String> =
            misses.into_iter().filter(|(miss, _)| *miss).map(|(_, what)| what).collect();
        if missed.is_empty() {
            Ok(())
        } else {
            let missed: Vec<String> = missed
                .into_iter()
                .map(|mut m| {
                    m.truncate(1_500);
                    m
                })
                .collect();
            Err(format!("{world:?}\n{}", missed.join("\n")))
        }
    }
}

/// Each list's id and zones, as they reach the sink.
type Batches = Vec<(u64, Vec<Zone>)>;

/// The zones of each list as they reach the sink, and the discontinuities.
#[derive(Clone, Default)]
struct Recorder {
    batches: Arc<Mutex<Batches>>,
    discontinuities: Arc<Mutex<usize>>,
}

impl Sink for Recorder {
    fn zones(&mut self, _: &ContextInfo, batch: ZoneBatch<'_>) -> std::io::Result<()> {
        self.batches.lock().unwrap().push((batch.list_id, batch.zones.to_vec()));
        Ok(())
    }
    fn clock_discontinuity(&mut self, _: &ContextInfo, _: ClockDiscontinuity) -> std::io::Result<()> {
        *self.discontinuities.lock().unwrap() += 1;
        Ok(())
    }
}

/// What the world knows of one list: each zone's simulated begin and end, when its last
/// event is reached, and whether it is exempt from the resume check (a long zone, submitted
/// late on purpose).
struct Truth {
    zones: Vec<(i64, i64)>,
    recorded_at: i64,
    complete_at: i64,
    long: bool,
    emitted: bool,
}

/// Runs `world`: rounds every `period` of one command buffer of three kernels on each of two
/// streams, collected partway through the round and at its end; every `long_every` rounds a
/// 4.9 s zone on a third stream, submitted a round later than it ends.
pub fn run(world: &World) -> Outcome {
    let gpu = WorldGpu::new(world.seed, world.drift_ppm, world.lateness, world.read_delay, world.bad_pair);
    let recorder = Recorder::default();
    let ctx = TracingContext::builder(gpu.clone()).sink(recorder.clone()).build().unwrap();
    let streams: Vec<SimStream> = (0..4).map(|_| gpu.sim.stream()).collect();
    let mut out = Outcome::default();
    let mut seen =
        Seen { truths: HashMap::new(), collects: Vec::new(), jumped: Vec::new(), period: world.period };
    let (mut rates, mut jumps) = (world.rates.clone(), world.jumps.clone());
    rates.sort_by_key(|r| std::cmp::Reverse(r.0));
    jumps.sort_by_key(|j| std::cmp::Reverse(j.0));
    let mut rate = world.drift_ppm;
    let mut absurd = world.absurd;
    let mut long: Option<(gpu_event_pool::EventList<WorldGpu>, u64)> = None;
    let rounds = (world.duration / world.period).max(1) as u64;
    for round in 0..rounds {
        let now = gpu.sim.now();
        while rates.last().is_some_and(|&(at, _)| at <= now) {
            rate = rates.pop().unwrap().1;
            gpu.sim.set_host_drift(rate);
        }
        while jumps.last().is_some_and(|&(at, _)| at <= now) {
            // As a system about to suspend does (and a GPU that gates its counter's power is
            // idle): the GPU finishes its work, and the collector has what it recorded. Work
            // run while one clock stands still has no host time to bound.
            // (The pause counts from here, also for the lists the drain's collects emit.)
            seen.jumped.push((gpu.sim.now(), i64::MAX));
            if let Some((list, _)) = long.take() {
                ctx.submit(list).unwrap();
            }
            // (And the collector's own anchor, reached as late as the world makes events: at
            // most 10 ms in the worlds generated.)
            let idle = streams.iter().map(|s| gpu.sim.pending_ns(s)).max().unwrap_or(0);
            gpu.sim.advance(idle + world.period + 20 * MS);

            for _ in 0..2 {
                seen.take(&gpu, &recorder, &mut out, ctx.collect().map(drop));
            }
            match jumps.pop().unwrap().1 {
                Jump::Suspend(ns) => {
                    // The host, asleep, records nothing meanwhile; the GPU's counter runs on.
                    gpu.sim.set_host_drift(-1e6);
                    gpu.sim.advance(ns);
                    gpu.sim.set_host_drift(rate);
                }
                Jump::CounterStop(ns) => gpu.step_host_clock(ns),
                Jump::HostStep(ns) => gpu.step_host_clock(ns),
            }
            // Where the GPU resumes: the lists after are placed from their own reads until an
            // anchor shows the jump.
            if let Some(pause) = seen.jumped.last_mut() {
                pause.1 = gpu.sim.now();
            }
        }
        let now = gpu.sim.now();
        keep_busy(&gpu, world, &streams[3], now);
        if let Some((_, read, ns, times)) = absurd.filter(|&(at, ..)| at <= now) {
            gpu.absurd_read(read, ns, times);
            out.absurd_injected = true;
            absurd = None;
        }
        for stream in &streams[..2] {
            let (list, truth) = command_buffer(&ctx, &gpu, stream);
            seen.truths.insert(list.id(), truth);
            ctx.submit(list).unwrap();
        }
        if world.long_every > 0 && round % world.long_every == world.long_every / 2 && long.is_none() {
            let mut list = ctx.list();
            list.zone_begin(&streams[2], location!("long")).unwrap();
            gpu.sim.launch(&streams[2], 4_900 * MS);
            list.zone_end(&streams[2]).unwrap();
            let s = gpu.take_stamps();
            let truth = Truth {
                zones: vec![(s[0], s[1])],
                recorded_at: now,
                complete_at: s[1],
                long: true,
                emitted: false,
            };
            seen.truths.insert(list.id(), truth);
            long = Some((list, round + 4_900 * MS as u64 / world.period as u64 + 1));
        }
        if long.as_ref().is_some_and(|(_, at)| round >= *at) {
            ctx.submit(long.take().unwrap().0).unwrap();
        }
        let partway = gpu.random((2 * MS).min(world.period / 2));
        gpu.sim.advance(partway);
        seen.take(&gpu, &recorder, &mut out, ctx.collect().map(drop));
        gpu.sim.advance(world.period - partway);
        seen.take(&gpu, &recorder, &mut out, ctx.collect().map(drop));
    }
    if let Some((list, _)) = long.take() {
        ctx.submit(list).unwrap();
    }
    // The final flush waits for whatever is left (a long zone: seconds without a collect),
    // outside the world's collect pace: P2 does not apply to what it emits.
    out.flushing = true;
    seen.take(&gpu, &recorder, &mut out, ctx.flush().map(drop));
    let stats = ctx.stats();
    out.failed = stats.lists_failed;
    out.discontinuities = stats.clock_discontinuities;
    out.delivered_discontinuities = *recorder.discontinuities.lock().unwrap();
    out.placed_alone = stats.lists_placed_alone;
    out.missing = seen.truths.values().filter(|t| !t.emitted).count();
    // A list may fail when a jump came while it was in flight (its own reads then straddle
    // it: they cannot both hold).
    let in_flight = |t: &Truth| {
        seen.jumped
            .iter()
            .any(|&(_, j)| t.recorded_at <= j && j <= t.complete_at + 2 * world.period + 10 * MS)
    };
    out.lost = seen.truths.values().filter(|t| !t.emitted && !in_flight(t)).count();
    out
}

/// Keeps the busy stream busy while the world's lateness applies (a GPU busy all along, or in
/// bursts).
fn keep_busy(gpu: &WorldGpu, world: &World, busy: &SimStream, now: i64) {
    let until = match world.lateness {
        Lateness::None => return,
        Lateness::Bursts { on, off, .. } => {
            let at = now % (on + off);
            gpu.set_late_on(at < on);
            if at >= on {
                return;
            }
            now + on - at
        }
        _ => now + 2 * world.period,
    };
    let pending = gpu.sim.pending_ns(busy);
    if now + pending < until {
        gpu.sim.launch(busy, until - now - pending);
    }
}

/// One command buffer on `stream`: a zone around three kernels (one zone, then two joined by
/// `zone_next`), and what the world knows of it.
fn command_buffer(
    ctx: &TracingContext<WorldGpu>,
    gpu: &WorldGpu,
    stream: &SimStream,
) -> (gpu_event_pool::EventList<WorldGpu>, Truth) {
    let mut list = ctx.list();
    list.zone_begin(stream, location!("command buffer")).unwrap();
    for k in 0..3 {
        if k == 0 {
            list.zone_begin(stream, location!("a")).unwrap();
        } else {
            list.zone_next(stream, location!("b")).unwrap();
        }
        gpu.sim.launch(stream, 20_000 + gpu.random(600_000));
    }
    list.zone_end(stream).unwrap();
    list.zone_end(stream).unwrap();
    // Events: begin cb, begin a, a|b, b|b, end b, end cb.
    let s = gpu.take_stamps();
    assert_eq!(s.len(), 6, "one event per call");
    let zones = vec![(s[0], s[5]), (s[1], s[2]), (s[2], s[3]), (s[3], s[4])];
    let recorded_at = gpu.sim.now();
    (list, Truth { zones, recorded_at, complete_at: s[5], long: false, emitted: false })
}

/// What the run knows as it goes: each list's truth, the simulated times of the collects so
/// far, the jumps (from the pause in collects before one, the GPU drained, to where the GPU
/// resumes after it), the world's period.
struct Seen {
    truths: HashMap<u64, Truth>,
    collects: Vec<i64>,
    jumped: Vec<(i64, i64)>,
    period: i64,
}

impl Seen {
    /// Takes a collect's result, then checks every zone emitted so far against the truth.
    fn take(
        &mut self,
        gpu: &WorldGpu,
        recorder: &Recorder,
        out: &mut Outcome,
        result: Result<(), CollectError>,
    ) {
        let Seen { truths, collects, jumped, period } = self;
        let period = *period;
        collects.push(gpu.sim.now());
        if let Err(e) = result {
            match e.error {
                Error::Time(e) => out.time_errors.push(e.to_string()),
                Error::ClockDiscontinuity { .. } => out.reported_discontinuities += 1,
                other => out.other_errors.push(other.to_string()),
            }
        }

        let base = gpu.base();
        let batches = std::mem::take(&mut *recorder.batches.lock().unwrap());
        for (list_id, zones) in batches {
            let Some(truth) = truths.get_mut(&list_id) else { continue };
            truth.emitted = true;
            let truth = &*truth;
            out.lists += 1;
            // P3: emitted by the collect after the one that first found it complete, at the latest.
            let first_complete =
                Some(collects.partition_point(|&c| c < truth.complete_at)).filter(|&k| k < collects.len());

            if !truth.long && first_complete.is_some_and(|k| collects.len() > k + 2) {
                out.late += 1;
                out.late_first.get_or_insert_with(|| {
                    format!(
                        "list {list_id} complete at {}, collects {:?}",
                        truth.complete_at,
                        &collects[first_complete.unwrap()..]
                    )
                });
            }
            for (i, (zone, &(begin, end))) in zones.iter().zip(&truth.zones).enumerate() {
                out.zones += 1;
                for (host, bound, t) in [
                    (zone.host_begin_ns, zone.host_begin_bound_ns, begin),
                    (zone.host_end_ns, zone.host_end_bound_ns, end),
                ] {
                    let error = host.abs_diff(gpu.truth(t));
                    if error > bound {
                        out.outside += 1;
                        if out.outside_first.len() < 3 {
                            out.outside_first.push(format!(
                                "{zone:?}: {error} ns off the truth at {} ns, bound {bound}",
                                t - base
                            ));
                        }
                    }
                    // P2 holds from 1 s on, for lists short enough that one offset fits them (a
                    // list of T ns with exact durations is off at its ends by the drift times
                    // T / 2), away from a discontinuity (a list just after one is placed from its
                    // own reads until an anchor shows it).
                    let (first, last) = (truth.zones[0].0, truth.complete_at);
                    let near_jump = jumped.iter().any(|&(from, to)| {
                        first + 2 * period >= from && first <= to.saturating_add(4 * period)
                    });
                    if t - base >= S && last - first < 16 * MS && !near_jump && !out.flushing {
                        out.worst_error = out.worst_error.max(error);
                        out.worst_bound = out.worst_bound.max(bound);
                        if bound > 2_000 {
                            out.wide += 1;
                            out.wide_first
                                .get_or_insert_with(|| format!("{zone:?}: bound {bound} at {} ns", t - base));
                        }
                    }
                }
                let exact = zone.gpu_begin_ns == begin - base && zone.gpu_end_ns == end - base;
                if !truth.long && !exact {
                    out.inexact += 1;
                    out.inexact_first
                        .get_or_insert_with(|| format!("{zone:?}: truth {} to {}", begin - base, end - base));
                }
                let gpu_duration = zone.gpu_end_ns - zone.gpu_begin_ns;
                let gap = |z: &Zone| z.host_begin_ns - z.gpu_begin_ns;
                if zone.host_end_ns - zone.host_begin_ns != gpu_duration
                    || (i > 0 && gap(zone) != gap(&zones[0]))
                {
                    out.stretched += 1;
                }
            }
        }
    }
}
