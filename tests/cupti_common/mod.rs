//! What the CUPTI test files share: the GPU, or a visible skip without one (or without
//! libcupti), and one turn at CUPTI at a time (its activity state is process-wide).
#![allow(dead_code)]

use gpu_event_pool::backend::cuda::{CudaBackend, SpinKernel};
use gpu_event_pool::backend::cupti::{timestamp_ns, CuptiError};
use gpu_event_pool::ErrorKind;
use std::io::Write;
use std::sync::{Mutex, MutexGuard};

pub const US: u64 = 1_000;

/// One user of CUPTI per process: the tests take turns.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

pub struct Gpu {
    pub cuda: CudaBackend,
    pub spin: SpinKernel,
    _turn: MutexGuard<'static, ()>,
}

fn skip(test: &str, why: &str) -> Option<Gpu> {
    assert!(
        std::env::var_os("GPU_EVENT_POOL_REQUIRE_CUDA").is_none(),
        "GPU_EVENT_POOL_REQUIRE_CUDA is set, but {why}"
    );
    // Straight to stderr, past the test harness's output capture: a skip must show.
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}: {test}");
    None
}

/// The GPU and CUPTI's turn, or `None` (after saying so on stderr) without a GPU or
/// libcupti.
pub fn gpu(test: &str) -> Option<Gpu> {
    let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cuda = match CudaBackend::new(0) {
        Ok(cuda) => cuda,
        Err(e) if e.kind() == Some(ErrorKind::NoDevice) => {
            return skip(test, &format!("no CUDA device ({e})"))
        }
        Err(e) => panic!("the CUDA driver is present but unusable: {e}"),
    };
    if let Err(e @ CuptiError::LibraryNotFound { .. }) = timestamp_ns() {
        return skip(test, &format!("no libcupti ({e})"));
    }
    let spin = SpinKernel::load(&cuda).expect("load the spin kernel");
    Some(Gpu { cuda, spin, _turn: turn })
}

/// A kernel spun `spin` ns: within 2 µs below, and a fifth (at least 5 µs) above: a kernel's
/// record spans its launch on the GPU too (up to 3.2 µs over a 20 µs spin on an H100 whose
/// clocks were idle), and no other work of the tests comes near that.
pub fn assert_spun(zone: &gpu_event_pool::sink::Zone, spin: u64) {
    let ns = zone.duration_ns();
    let slack = (spin / 5).max(5 * US);
    assert!(
        ns + 2 * US >= spin && ns <= spin + slack,
        "{} took {ns} ns, spin is {spin} ns",
        zone.location.name()
    );
}
