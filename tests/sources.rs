//! The same application code on the simulated GPU timed by events and by activity records
//! (tests/one_api/mod.rs): only the backend given to the builder differs.

mod one_api;
mod trace_check;

use gpu_event_pool::sim::{SimActivities, SimBackend, SimStream};
use one_api::{one_api, Gpu, FRAMES, THREADS};

struct SimEvents(SimBackend);

impl Gpu for SimEvents {
    type B = SimBackend;
    fn backend(&self) -> SimBackend {
        self.0.clone()
    }
    fn stream(&self) -> SimStream {
        self.0.stream()
    }
    fn kernel(&self, stream: &SimStream, ns: i64) {
        self.0.launch(stream, ns);
    }
    fn synchronize(&self, stream: &SimStream) {
        std::thread::sleep(std::time::Duration::from_nanos(self.0.pending_ns(stream) as u64));
    }
}

struct SimWork(SimActivities);

impl Gpu for SimWork {
    type B = SimActivities;
    fn backend(&self) -> SimActivities {
        self.0.clone()
    }
    fn stream(&self) -> SimStream {
        self.0.sim().stream()
    }
    fn kernel(&self, stream: &SimStream, ns: i64) {
        self.0.launch(stream, ns);
    }
    fn synchronize(&self, stream: &SimStream) {
        std::thread::sleep(std::time::Duration::from_nanos(self.0.sim().pending_ns(stream) as u64));
    }
}

#[test]
#[cfg_attr(miri, ignore = "four threads on a simulated GPU that runs in real time: minutes under Miri")]
fn the_same_code_runs_on_simulated_events() {
    let ran = one_api(&SimEvents(SimBackend::realtime()));
    assert_eq!(ran.zones.len(), 3 * THREADS * FRAMES as usize, "user zones only: events time nothing else");
}

#[test]
#[cfg_attr(miri, ignore = "four threads on a simulated GPU that runs in real time: minutes under Miri")]
fn the_same_code_runs_on_simulated_activity_records() {
    let ran = one_api(&SimWork(SimActivities::new(SimBackend::realtime())));
    // And the work: each kernel a zone inside its pass.
    let kernels: Vec<_> = ran.zones.iter().filter(|z| z.location.name() == "kernel").collect();
    assert_eq!(kernels.len(), 2 * THREADS * FRAMES as usize);
    assert!(kernels.iter().all(|k| k.depth == 2 && k.frame.is_some()));
}
