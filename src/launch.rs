//! Launch to execution: where and when the host recorded a zone (opt in).
//!
//! With [`Builder::record_launches`](crate::Builder::record_launches) on, each zone's begin
//! event keeps the host times around the backend's record call and the number of the
//! recording thread ([`Launch`], on [`Zone::launch`](crate::sink::Zone::launch)). The Chrome
//! sink draws them as a short slice on that thread's track and a flow arrow from it to the
//! GPU zone, as Nsight Systems links a CUDA launch to its kernel; the `tracing` layer
//! (feature `tracing`) writes the thread's CPU spans on the same track, because both number
//! threads with [`thread_number`].
//!
//! Off (the default), recording reads no clock and no thread-local: the switch is one bit of
//! the byte every recording call already loads.

// Thread numbers are outside the pool's modelled concurrency (nothing orders slots through
// them): plain std.
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Where and when the host recorded a zone's begin event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Launch {
    /// The backend's host clock just before its record call (the clock of
    /// [`Zone::host_begin_ns`](crate::sink::Zone::host_begin_ns)).
    pub host_begin_ns: i64,
    /// The backend's host clock just after its record call returned.
    pub host_end_ns: i64,
    /// The recording thread ([`thread_number`]).
    pub thread: u64,
}

impl Launch {
    /// A launch on `thread` between these host times (tests and other backends' sinks).
    pub fn new(host_begin_ns: i64, host_end_ns: i64, thread: u64) -> Self {
        Self { host_begin_ns, host_end_ns, thread }
    }
}

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

/// Names of numbered threads, registered when a thread takes its number (once per thread).
static NAMES: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::new());

thread_local! {
    static NUMBER: Cell<u64> = const { Cell::new(0) };
}

/// The calling thread's number, unique in the process and never reused, from 1: the track
/// (Chrome `tid`) of the thread's CPU spans and launches. The first call on a thread
/// registers its name ([`thread_name`]); later calls read a thread-local.
#[inline]
pub fn thread_number() -> u64 {
    NUMBER.with(|number| match number.get() {
        0 => {
            let new = register();
            number.set(new);
            new
        }
        known => known,
    })
}

#[cold]
fn register() -> u64 {
    // Relaxed: the number only has to be unique.
    let number = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
    let name = match std::thread::current().name() {
        Some(name) => name.to_owned(),
        None => format!("thread {number}"),
    };
    NAMES.lock().unwrap_or_else(PoisonError::into_inner).push((number, name));
    number
}

/// The name of thread `number` (its `std::thread` name, else `thread <number>`), once it has
/// taken a number.
pub fn thread_name(number: u64) -> Option<String> {
    let names = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    names.iter().find(|(n, _)| *n == number).map(|(_, name)| name.clone())
}

#[cfg(test)]
mod tests {
    use super::{thread_name, thread_number};

    #[test]
    fn each_thread_keeps_one_number_and_its_name() {
        let here = thread_number();
        assert_eq!(thread_number(), here);
        let there = std::thread::Builder::new()
            .name("numbered".to_owned())
            .spawn(thread_number)
            .unwrap()
            .join()
            .unwrap();
        assert_ne!(here, there);
        assert_eq!(thread_name(there).as_deref(), Some("numbered"));
    }
}
