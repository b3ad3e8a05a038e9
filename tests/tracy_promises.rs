//! Promises of docs/tracy.md, docs/cuda.md and the Tracy sink's rustdoc that no other test
//! checked, each tested as written (the sentence it backs is quoted above each test). The
//! sink talks to a recorder of the contexts it makes and the zones it begins in each.

use gpu_event_pool::sim::SimBackend;
use gpu_event_pool::sink::tracy::{TracyApi, TracyContextIds, TracyGpuKind, TracySink};
use gpu_event_pool::sink::{Calibration, ContextInfo, Sink, Zone, ZoneBatch};
use gpu_event_pool::{location, Error, Lane, SourceLocation, TracingContext};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Each Tracy context's name and the names of the zones begun in it, by context id.
type Contexts = BTreeMap<u8, (String, Vec<String>)>;

/// What reached Tracy.
#[derive(Clone, Default)]
struct Recorder {
    ids: Arc<TracyContextIds>,
    contexts: Arc<Mutex<Contexts>>,
}

impl Recorder {
    /// Each context's name with its zones, in the order the contexts were named.
    fn lanes(&self) -> Vec<(String, Vec<String>)> {
        self.contexts.lock().unwrap().values().rev().cloned().collect()
    }
    fn begun(&self, context: u8, name: &str) {
        self.contexts.lock().unwrap().entry(context).or_default().1.push(name.to_owned());
    }
}

impl TracyApi for Recorder {
    type Location = &'static SourceLocation;

    fn reserve_context(&mut self) -> Option<u8> {
        self.ids.take()
    }
    fn static_location(&mut self, location: &'static SourceLocation) -> &'static SourceLocation {
        location
    }
    fn new_context(&mut self, _: u8, _: TracyGpuKind, _: i64) {}
    fn name_context(&mut self, context: u8, name: &str) {
        self.contexts.lock().unwrap().entry(context).or_default().0 = name.to_owned();
    }
    fn calibrate(&mut self, _: u8, _: i64, _: i64) {}
    fn begin_span(&mut self, context: u8, location: &'static SourceLocation, _: u16) {
        self.begun(context, location.name);
    }
    fn begin_span_alloc(&mut self, context: u8, name: &str, _: &str, _: &str, _: u32, _: u16) {
        self.begun(context, name);
    }
    fn end_span(&mut self, _: u8, _: u16) {}
    fn upload_gpu_timestamp(&mut self, _: u8, _: u16, _: i64) {}
    fn plot(&mut self, _: &str, _: f64) {}
    fn frame_mark(&mut self, _: &str) {}
}

fn info() -> ContextInfo {
    ContextInfo {
        id: 1,
        name: "queue".to_owned(),
        backend: "sim",
        base: Calibration { gpu_ns: 0, host_ns: 0 },
        host_clock_origin: None,
    }
}

/// docs/tracy.md, "What you see": "The cap is 16 streams per sink by default
/// (`TracySink::with_max_stream_lanes(n)`); 0 puts every stream there" (on the shared
/// `<context> / other streams` lane); `TracySink::with_max_stream_lanes`: "With 0, every
/// stream shares that lane."
#[test]
fn with_no_stream_lanes_every_stream_shares_the_other_streams_lane() {
    let recorder = Recorder::default();
    let mut sink = TracySink::with_api(recorder.clone(), || 0).with_max_stream_lanes(0);
    sink.open(&info()).unwrap();
    let lanes =
        [(Lane::Stream(1), "a"), (Lane::Stream(2), "b"), (Lane::Graph(3), "graph"), (Lane::Stream(3), "c")];
    for (i, (lane, name)) in lanes.into_iter().enumerate() {
        let t = 1_000 * (i as i64 + 1);
        let zone = Zone::new(gpu_event_pool::DynamicLocation::new(name), lane, 0, t, t + 500);
        sink.zones(&info(), ZoneBatch { list_id: i as u64, zones: &[zone] }).unwrap();
    }
    let strings = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        recorder.lanes(),
        [
            ("queue / other streams".to_owned(), strings(&["a", "b", "c"])),
            ("queue / graphs".to_owned(), strings(&["graph"])),
        ]
    );
    assert_eq!(sink.context_ids().len(), 2, "no stream took a context of its own");
}

/// A sink shared by two contexts, as an application could write one.
struct Shared(Arc<Mutex<TracySink<Recorder>>>);

impl Sink for Shared {
    fn open(&mut self, context: &ContextInfo) -> std::io::Result<()> {
        self.0.lock().unwrap().open(context)
    }
    fn zones(&mut self, context: &ContextInfo, batch: ZoneBatch<'_>) -> std::io::Result<()> {
        self.0.lock().unwrap().zones(context, batch)
    }
}

/// docs/cuda.md, "Several GPUs": "Each context needs its own `TracySink` (opening one sink for
/// two contexts is an error)." The second context's build fails, naming it; the first goes on.
#[test]
fn opening_one_tracy_sink_for_a_second_context_fails_that_contexts_build() {
    let recorder = Recorder::default();
    let sink = Arc::new(Mutex::new(TracySink::with_api(recorder.clone(), || 0)));
    let sim = SimBackend::manual();
    let first =
        TracingContext::builder(sim.clone()).name("first").sink(Shared(Arc::clone(&sink))).build().unwrap();
    let second = TracingContext::builder(sim.clone()).name("second").sink(Shared(Arc::clone(&sink))).build();
    let error = second.expect_err("the second context's build fails");
    assert!(matches!(&error, Error::Sink(e) if e.to_string().contains("opened twice")), "{error}");
    assert!(error.to_string().contains("\"second\""), "the error names the context: {error}");

    let stream = sim.stream();
    let mut list = first.list();
    list.zone_begin(&stream, location!("kernel")).unwrap();
    sim.launch(&stream, 1_000);
    list.zone_end(&stream).unwrap();
    first.submit(list).unwrap();
    sim.advance(10_000);
    first.flush().unwrap();
    assert_eq!(recorder.lanes(), [("first / stream 1".to_owned(), vec!["kernel".to_owned()])]);
}
