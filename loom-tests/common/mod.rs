//! The model runners every loom model uses.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The preemption bound of [`model`] when `LOOM_MAX_PREEMPTIONS` is not set.
///
/// The bugs these models exist for need fewer: the ABA interleaving takes one preemption (a
/// popper stopped between reading the head's link and its CAS; the negative control finds it
/// at this bound), and most concurrency bugs found in practice take at most two (Musuvathi
/// and Qadeer, "Iterative context bounding for systematic testing of multithreaded
/// programs", PLDI 2007). Three multiplies the bounded models' executions by 16 to 25 and
/// their time to some 14 minutes on two cores: a deeper run to make by hand, not in CI
/// (docs/verification.md has the figures).
pub const DEFAULT_PREEMPTIONS: usize = 2;

/// The least [`loom::model::Builder::max_branches`] every model runs with.
const MIN_MAX_BRANCHES: usize = 4_000;

/// Runs `f` under loom for every interleaving within the preemption bound
/// (`LOOM_MAX_PREEMPTIONS`, or [`DEFAULT_PREEMPTIONS`]).
pub fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = builder.preemption_bound.or(Some(DEFAULT_PREEMPTIONS));
    check(builder, f);
}

/// Runs `f` under loom within a preemption bound of `bound`, for models too large for CI at
/// [`DEFAULT_PREEMPTIONS`]: `LOOM_MAX_PREEMPTIONS` (which CI sets) does not change it;
/// `LOOM_LARGE_MODEL_PREEMPTIONS` does, for a deeper run by hand.
#[allow(dead_code, reason = "each loom_* target compiles this module; not all have such models")]
pub fn model_bounded(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    let deeper = std::env::var("LOOM_LARGE_MODEL_PREEMPTIONS").ok().and_then(|v| v.parse().ok());
    builder.preemption_bound = Some(deeper.unwrap_or(bound));
    check(builder, f);
}

/// Runs `f` under loom for every interleaving, with no preemption bound: for the models
/// small enough to explore completely in well under a second.
#[allow(dead_code, reason = "each loom_* target compiles this module; not all have such models")]
pub fn exhaustive(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = None;
    check(builder, f);
}

/// Runs the model and reports on stderr how many executions it took (`--nocapture` shows
/// it), also when an execution fails.
fn check(mut builder: loom::model::Builder, f: impl Fn() + Sync + Send + 'static) {
    // Scheduling decisions one execution may take before loom calls it a livelock (its
    // default is 1 000, or `LOOM_MAX_BRANCHES`). The longest executions of
    // `loom_submit` (four lists, two producers, a collector, then every thread's
    // thread-local destructors handing magazines back) take a little over 1 000 since the
    // recording threads keep record buffers in a thread-local stash; none spins. A model that
    // does spin still fails, at this bound.
    builder.max_branches = builder.max_branches.max(MIN_MAX_BRANCHES);
    let report = Report {
        executions: Arc::new(AtomicUsize::new(0)),
        bound: builder.preemption_bound,
        start: std::time::Instant::now(),
    };
    let counted = report.executions.clone();
    builder.check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        f();
    });
}

/// Prints the model's statistics when the model ends, passing or failing.
struct Report {
    executions: Arc<AtomicUsize>,
    bound: Option<usize>,
    start: std::time::Instant,
}

impl Drop for Report {
    fn drop(&mut self) {
        eprintln!(
            "loom: {} executions{}, preemption bound {:?}, {:.2?}",
            self.executions.load(Ordering::Relaxed),
            if std::thread::panicking() { " (the last one failed)" } else { "" },
            self.bound,
            self.start.elapsed()
        );
    }
}
