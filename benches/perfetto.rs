//! `perfetto`: the Perfetto sink and the flight recorder against the Chrome sink, on the
//! demo's workload fed to the sinks as the collector feeds them (no context, no backend: the
//! sinks' own cost).
//!
//! The workload: lists of 17 zones (a command buffer around 16 adjacent dispatches whose
//! kernels and durations are drawn as the demo draws them), on 4 streams, a frame every 4
//! lists, a counter sample every 8 lists (the sinks write at most one a millisecond), zones on
//! the host clock of a context whose clock origin is known. Figures, in one run:
//!
//! - **bytes per zone** of each format (everything the file holds: descriptors, interned
//!   data, frames, counters), and their ratio;
//! - **sink CPU per zone**, Chrome and Perfetto writing to `std::io::sink()` in turns
//!   (`BENCH_PERFETTO_ROUNDS` rounds, default 7: each round times both on the same lists,
//!   a fresh sink each); the median of each and of their per-round ratio;
//! - **prost**: the same packets a zone makes (a begin with its name, source location and
//!   delta, an end with its delta) encoded with `prost`-derived messages into a reused
//!   buffer, per zone: the encoding alone, set beside the whole Perfetto sink;
//! - **flight recorder per zone** when nothing is dumped: `FlightRecorderSink::zones`, with no
//!   trigger and with a zone trigger that never fires;
//! - **flight recorder memory** over a simulated hour at 100,000 zones a second (a list of
//!   100 zones every simulated millisecond, a 1 s window): the ring's bytes and the process's
//!   live heap (a counting allocator) after 1, 10 and 60 minutes.
//!
//! `cargo bench -p gpu-event-pool-benches --bench perfetto` (label the machine with
//! `BENCH_MACHINE`; `BENCH_PERFETTO_PARTS`, comma-separated, runs some of `bytes`, `cpu`,
//! `prost`, `flight`, `memory`, default all). Without `--bench` (`cargo test --benches`) it runs a small workload and
//! 10 simulated seconds.

use gpu_event_pool::sink::chrome::ChromeTrace;
use gpu_event_pool::sink::flight::{FlightRecorder, Trigger};
use gpu_event_pool::sink::perfetto::PerfettoTrace;
use gpu_event_pool::sink::{Calibration, ContextInfo, CounterSample, FrameMark, Sink, Zone, ZoneBatch};
use gpu_event_pool::{location, Lane, SourceLocation};
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicIsize, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The process's live heap bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// Safety: every call forwards to `System` with the caller's arguments, so `System`'s
// guarantees hold; the counter is only arithmetic on the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Relaxed);
        // Safety: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Relaxed);
        // Safety: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Relaxed);
        // Safety: `ptr` came from `alloc` with `layout`, as the caller guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const KERNELS: [(&str, i64); 5] =
    [("matmul", 24_000), ("softmax", 6_000), ("layernorm", 4_000), ("gelu", 3_000), ("copy", 9_000)];

fn dispatch_location(kernel: usize) -> &'static SourceLocation {
    match kernel {
        0 => location!("matmul"),
        1 => location!("softmax"),
        2 => location!("layernorm"),
        3 => location!("gelu"),
        _ => location!("copy"),
    }
}

/// What a sink is handed, in the order the collector hands it.
enum Call {
    Zones(u64, Vec<Zone>),
    Frame(FrameMark),
    Counters(CounterSample),
}

/// The demo's workload: `lists` lists (module docs).
fn workload(lists: u64) -> Vec<Call> {
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut streams = [1_000_000_i64; 4];
    let mut calls = Vec::new();
    for list in 0..lists {
        let stream = (list % 4) as usize;
        let begin = streams[stream];
        let mut at = begin;
        let mut zones =
            vec![Zone::new(location!("command buffer"), Lane::Stream(stream as u64 + 1), 0, begin, begin)];
        for _ in 0..16 {
            let kernel = (next() % KERNELS.len() as u64) as usize;
            let base = KERNELS[kernel].1;
            let ns = base / 2 + (next() % base as u64) as i64;
            zones.push(Zone::new(dispatch_location(kernel), Lane::Stream(stream as u64 + 1), 1, at, at + ns));
            at += ns;
        }
        zones[0] = Zone::new(location!("command buffer"), Lane::Stream(stream as u64 + 1), 0, begin, at);
        let frame = list / 4;
        let zones = zones.into_iter().map(|zone| zone.with_frame(frame)).collect();
        if list % 4 == 0 {
            calls.push(Call::Frame(FrameMark { id: frame, host_ns: begin }));
        }
        calls.push(Call::Zones(list, zones));
        if list % 8 == 7 {
            let sample = CounterSample {
                host_ns: at,
                slots_in_use: (next() % 4096) as usize,
                zones_dropped: 0,
                lists_pending: (next() % 32) as usize,
                lag_ns: Some((next() % 200_000) as i64),
                clock_bound_ns: Some(next() % 5_000),
            };
            calls.push(Call::Counters(sample));
        }
        streams[stream] = at + 1_000;
    }
    calls
}

fn info() -> ContextInfo {
    ContextInfo {
        id: 1,
        name: "gpu 0".into(),
        backend: "sim",
        base: Calibration { gpu_ns: 0, host_ns: 0 },
        host_clock_origin: Some(Instant::now()),
    }
}

/// Feeds `calls` to `sink` as the collector would: the zones fed, and the nanoseconds spent
/// in the sink's calls. Each list is first copied into a buffer reused from list to list
/// (untimed): a collector hands a sink the zones it has just built, in cache.
fn feed(sink: &mut dyn Sink, info: &ContextInfo, calls: &[Call]) -> (u64, u64) {
    let (mut zones, mut ns) = (0, 0);
    let mut hot: Vec<Zone> = Vec::with_capacity(64);
    for call in calls {
        if let Call::Zones(_, batch) = call {
            hot.clear();
            hot.extend_from_slice(batch);
        }
        let start = Instant::now();
        match call {
            Call::Zones(list_id, _) => {
                sink.zones(info, ZoneBatch { list_id: *list_id, zones: &hot }).unwrap();
                zones += hot.len() as u64;
            }
            Call::Frame(mark) => sink.frame(info, *mark).unwrap(),
            Call::Counters(sample) => sink.counters(info, sample).unwrap(),
        }
        ns += start.elapsed().as_nanos() as u64;
    }
    let start = Instant::now();
    sink.flush().unwrap();
    (zones, ns + start.elapsed().as_nanos() as u64)
}

/// A writer counting what it is handed.
#[derive(Clone, Default)]
struct CountingWriter(Arc<AtomicU64>);

impl Write for CountingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.fetch_add(buf.len() as u64, Relaxed);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn chrome_sink(out: impl Write + Send + 'static) -> Box<dyn Sink> {
    Box::new(ChromeTrace::new(out).sink().with_counters(Duration::from_millis(1)))
}

fn perfetto_sink(out: impl Write + Send + 'static) -> Box<dyn Sink> {
    Box::new(PerfettoTrace::new(out).sink().with_counters(Duration::from_millis(1)))
}

/// Bytes a format writes for the workload (the sink dropped, so everything is out).
fn bytes(make: fn(CountingWriter) -> Box<dyn Sink>, calls: &[Call]) -> (u64, u64) {
    let out = CountingWriter::default();
    let info = info();
    let mut sink = make(out.clone());
    sink.open(&info).unwrap();
    let (zones, _) = feed(sink.as_mut(), &info, calls);
    drop(sink);
    (out.0.load(Relaxed), zones)
}

/// Nanoseconds per zone of one fresh sink fed the workload.
fn time(make: fn(std::io::Sink) -> Box<dyn Sink>, calls: &[Call]) -> f64 {
    let info = info();
    let mut sink = make(std::io::sink());
    sink.open(&info).unwrap();
    let (zones, ns) = feed(sink.as_mut(), &info, calls);
    ns as f64 / zones as f64
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The packets of one zone as `prost` messages: the fields the Perfetto sink writes.
mod prost_packets {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TrackEvent {
        #[prost(uint64, optional, tag = "10")]
        pub name_iid: Option<u64>,
        #[prost(int32, optional, tag = "9")]
        pub r#type: Option<i32>,
        #[prost(uint64, optional, tag = "34")]
        pub source_location_iid: Option<u64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TracePacket {
        #[prost(uint64, optional, tag = "8")]
        pub timestamp: Option<u64>,
        #[prost(uint32, optional, tag = "10")]
        pub trusted_packet_sequence_id: Option<u32>,
        #[prost(message, optional, tag = "11")]
        pub track_event: Option<TrackEvent>,
    }
}

/// Nanoseconds per zone to encode each zone's begin and end with `prost` (interning and
/// deltas computed as simply as they can be: a name's id is its kernel's index).
fn prost_encode(calls: &[Call]) -> (f64, u64) {
    use prost_packets::{TracePacket, TrackEvent};
    let mut out = Vec::with_capacity(1 << 20);
    let mut last = [0_i64; 8];
    let (mut zones, mut ns) = (0, 0);
    let mut hot: Vec<Zone> = Vec::with_capacity(64);
    for call in calls {
        let Call::Zones(_, batch) = call else { continue };
        hot.clear();
        hot.extend_from_slice(batch);
        let start = Instant::now();
        for zone in &hot {
            let Lane::Stream(stream) = zone.lane else { continue };
            let stream = stream as usize;
            let iid = zone.location.name().len() as u64;
            let mut packet = |ts: i64, event: TrackEvent| {
                let delta = (ts - last[stream]).max(0) as u64;
                last[stream] = ts;
                let packet = TracePacket {
                    timestamp: Some(delta),
                    trusted_packet_sequence_id: Some(stream as u32),
                    track_event: Some(event),
                };
                // `Trace.packet`, field 1.
                prost::encoding::message::encode(1, &packet, &mut out);
            };
            packet(
                zone.host_begin_ns,
                TrackEvent { name_iid: Some(iid), r#type: Some(1), source_location_iid: Some(iid) },
            );
            packet(
                zone.host_end_ns,
                TrackEvent { name_iid: None, r#type: Some(2), source_location_iid: None },
            );
            zones += 1;
            if out.len() > (1 << 20) - 64 {
                out.clear();
            }
        }
        ns += start.elapsed().as_nanos() as u64;
    }
    (ns as f64 / zones as f64, zones)
}

/// Nanoseconds per zone of a flight recorder sink fed the workload (nothing dumped).
fn flight(calls: &[Call], trigger: bool) -> f64 {
    // A window of 100 ms of the workload's 1.3 s: the ring drops and recycles lists, as
    // it does in a run longer than its window.
    let builder = FlightRecorder::builder(Duration::from_millis(100));
    let builder = if trigger {
        builder
            .trigger_on(Trigger::ZoneLongerThan { name: "matmul".into(), threshold: Duration::from_secs(1) })
    } else {
        builder
    };
    let recorder = builder.build().unwrap();
    let info = info();
    let mut sink = recorder.sink();
    sink.open(&info).unwrap();
    // Once to fill the ring (and its buffers), once measured: a ring that has run a while.
    feed(&mut sink, &info, calls);
    let (zones, ns) = feed(&mut sink, &info, calls);
    assert_eq!(recorder.triggers(), 0);
    ns as f64 / zones as f64
}

/// The flight recorder over `minutes` simulated minutes at 100,000 zones a second: (minute,
/// ring bytes, live heap bytes) at each checkpoint.
fn flight_memory(minutes: &[u64]) -> Vec<(u64, usize, isize)> {
    let recorder = FlightRecorder::builder(Duration::from_secs(1)).build().unwrap();
    let info = info();
    let mut sink = recorder.sink();
    sink.open(&info).unwrap();
    let mut zones = Vec::with_capacity(100);
    let mut checkpoints = Vec::new();
    let mut ms = 0_u64;
    for &minute in minutes {
        while ms < minute * 60_000 {
            zones.clear();
            let begin = ms as i64 * 1_000_000;
            zones.extend((0..100).map(|i| {
                let kernel = (i % 5) as usize;
                Zone::new(
                    dispatch_location(kernel),
                    Lane::Stream(1),
                    0,
                    begin + i * 10_000,
                    begin + i * 10_000 + 9_000,
                )
            }));
            sink.zones(&info, ZoneBatch { list_id: ms, zones: &zones }).unwrap();
            ms += 1;
        }
        checkpoints.push((minute, recorder.bytes(), LIVE.load(Relaxed)));
    }
    checkpoints
}

fn main() {
    let full = std::env::args().any(|arg| arg == "--bench");
    let machine = std::env::var("BENCH_MACHINE").unwrap_or_else(|_| "unlabelled".into());
    let rounds: usize = std::env::var("BENCH_PERFETTO_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(7);
    let (lists, rounds) = if full { (20_000, rounds) } else { (200, 1) };
    let calls = workload(lists);
    let parts =
        std::env::var("BENCH_PERFETTO_PARTS").unwrap_or_else(|_| "bytes,cpu,prost,flight,memory".into());
    let runs = |part: &str| parts.split(',').any(|p| p == part);
    println!("perfetto bench on {machine}: {lists} lists of 17 zones (the demo's workload), {rounds} rounds");
    if runs("bytes") {
        bytes_part(&calls);
    }
    let mut perfetto = Vec::new();
    if runs("cpu") {
        perfetto = cpu_part(&calls, rounds);
    }
    if runs("prost") {
        let prost: Vec<f64> = (0..rounds).map(|_| prost_encode(&calls).0).collect();
        let sink = if perfetto.is_empty() {
            String::new()
        } else {
            format!(", against the whole Perfetto sink's {:.1} ns/zone", median(perfetto))
        };
        println!("prost encode        {:.1} ns/zone for the packets alone{sink}", median(prost));
    }
    if runs("flight") {
        flight_part(&calls, rounds);
    }
    if runs("memory") {
        let minutes: &[u64] = if full { &[1, 10, 60] } else { &[0, 1] };
        let base = LIVE.load(Relaxed);
        for (minute, ring, live) in flight_memory(minutes) {
            println!(
                "flight memory       after {minute:>2} simulated min at 100k zones/s: ring {ring} bytes, live heap {} bytes above the start",
                live - base
            );
        }
    }
}

fn bytes_part(calls: &[Call]) {
    let (chrome_bytes, zones) = bytes(|out| chrome_sink(out), calls);
    let (perfetto_bytes, _) = bytes(|out| perfetto_sink(out), calls);
    let (chrome_per, perfetto_per) =
        (chrome_bytes as f64 / zones as f64, perfetto_bytes as f64 / zones as f64);
    println!(
        "bytes per zone      chrome {chrome_per:.1}  perfetto {perfetto_per:.1}  ratio {:.3}",
        perfetto_per / chrome_per
    );
}

/// Nanoseconds per zone of each sink, in rounds; Perfetto's per round.
fn cpu_part(calls: &[Call], rounds: usize) -> Vec<f64> {
    let (mut chrome, mut perfetto, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let c = time(|out| chrome_sink(out), calls);
        let p = time(|out| perfetto_sink(out), calls);
        println!("  round             chrome {c:.1} ns/zone  perfetto {p:.1} ns/zone  ratio {:.3}", p / c);
        chrome.push(c);
        perfetto.push(p);
        ratio.push(p / c);
    }
    println!(
        "sink cpu per zone   chrome {:.1} ns  perfetto {:.1} ns  ratio {:.3} (medians of {rounds} rounds)",
        median(chrome),
        median(perfetto.clone()),
        median(ratio)
    );

    perfetto
}

fn flight_part(calls: &[Call], rounds: usize) {
    let plain: Vec<f64> = (0..rounds).map(|_| flight(calls, false)).collect();
    let watched: Vec<f64> = (0..rounds).map(|_| flight(calls, true)).collect();
    println!(
        "flight recorder     {:.1} ns/zone with no trigger, {:.1} ns/zone with a zone trigger (nothing dumped)",
        median(plain),
        median(watched)
    );
}
