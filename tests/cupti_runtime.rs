//! Work launched the way applications launch it, traced by CUPTI: kernels through the CUDA
//! runtime API (`cudaLaunchKernel` of a kernel loaded with `cudaLibraryLoadData`), a
//! runtime memset and a runtime host function, inside nested zones, on several threads and
//! streams. The runtime's `cudaLaunchKernel` calls the driver inside it, with a correlation id
//! of its own: both calls are one launch, so a list waits for one record per launch.
//!
//! Needs a CUDA device, libcupti and libcudart (the `nvidia-cuda-runtime` wheel's
//! `libcudart.so.13`, reachable under one of the names cudarc tries, e.g. as `libcudart.so` on
//! `LD_LIBRARY_PATH`). Without one, the test prints `SKIPPED: ...` and passes; with
//! `GPU_EVENT_POOL_REQUIRE_CUDA=1` a missing device or libcupti fails it, and with
//! `GPU_EVENT_POOL_REQUIRE_CUDART=1` a missing libcudart does.

use cudarc::driver::CudaStream;
use cudarc::runtime::sys as rt;
use gpu_event_pool::backend::cupti::{CuptiBackend, CuptiConfig};
use gpu_event_pool::sink::memory::MemorySink;
use gpu_event_pool::{location, Lane, TracingContext};
use std::ffi::c_void;
use std::io::Write;
use std::time::{Duration, Instant};

mod cupti_common;
use cupti_common::{assert_spun, gpu, US};

const THREADS: usize = 4;
const LISTS: usize = 25;

/// Whether libcudart opens under a name cudarc tries (cudarc panics when none does); says
/// why not on stderr.
fn cudart(test: &str) -> bool {
    let names = cudarc::get_lib_name_candidates("cudart");
    // Safety: opening libcudart runs its initializers, as cudarc's first call would; the
    // handle is closed at once (the loader keeps the library for cudarc's own open).
    if names.iter().any(|name| unsafe { libloading::Library::new(name) }.is_ok()) {
        return true;
    }
    assert!(
        std::env::var_os("GPU_EVENT_POOL_REQUIRE_CUDART").is_none(),
        "GPU_EVENT_POOL_REQUIRE_CUDART is set, but libcudart opens under none of {names:?}"
    );
    let _ = writeln!(std::io::stderr(), "SKIPPED: no libcudart (tried {names:?}): {test}");
    false
}

/// A runtime call's result, or a panic naming the call.
fn check(call: &str, result: rt::cudaError_t) {
    assert_eq!(result, rt::cudaError_t::cudaSuccess, "{call}");
}

/// The crate's spin kernel, loaded through the runtime API.
struct RuntimeSpin {
    library: rt::cudaLibrary_t,
    kernel: rt::cudaKernel_t,
}

// Safety: library and kernel handles may be used from any thread; the runtime synchronizes
// launches. The library is unloaded only on drop.
unsafe impl Send for RuntimeSpin {}
// Safety: as above; no interior state.
unsafe impl Sync for RuntimeSpin {}

impl RuntimeSpin {
    fn load() -> Self {
        let ptx = concat!(include_str!("../src/backend/cuda/spin_kernel.ptx"), "\0");
        let mut library = std::ptr::null_mut();
        let mut kernel = std::ptr::null_mut();
        // Safety: valid out-pointers; NUL-terminated PTX text; no options (null arrays of
        // length 0); the name is NUL-terminated.
        unsafe {
            check("cudaSetDevice", rt::cudaSetDevice(0));
            check(
                "cudaLibraryLoadData",
                rt::cudaLibraryLoadData(
                    &mut library,
                    ptx.as_ptr().cast::<c_void>(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                ),
            );
            check(
                "cudaLibraryGetKernel",
                rt::cudaLibraryGetKernel(&mut kernel, library, c"spin_ns".as_ptr()),
            );
        }
        Self { library, kernel }
    }

    /// `cudaLaunchKernel`: one thread spinning `ns` on `stream`.
    fn launch(&self, stream: &CudaStream, ns: u64) {
        let mut duration = ns;
        let mut params = [(&mut duration as *mut u64).cast::<c_void>()];
        let one = rt::dim3 { x: 1, y: 1, z: 1 };
        // Safety: a live kernel handle (a `cudaKernel_t` is accepted as the function) taking
        // one u64, which `params` points to (copied before the call returns); a live stream
        // of the device's primary context, the runtime's.
        let result = unsafe {
            rt::cudaLaunchKernel(
                self.kernel as *const c_void,
                one,
                one,
                params.as_mut_ptr(),
                0,
                stream.cu_stream() as rt::cudaStream_t,
            )
        };
        check("cudaLaunchKernel", result);
    }
}

impl Drop for RuntimeSpin {
    fn drop(&mut self) {
        // Safety: every launch of the kernel has completed (the streams were synchronized).
        let _ = unsafe { rt::cudaLibraryUnload(self.library) };
    }
}

unsafe extern "C" fn nothing(_: *mut c_void) {}

#[test]
fn runtime_launches_are_each_a_zone_in_their_zone_and_nothing_waits_for_the_inner_driver_call() {
    let test = "runtime_launches_are_each_a_zone_in_their_zone_and_nothing_waits_for_the_inner_driver_call";
    let Some(gpu) = gpu(test) else { return };
    if !cudart(test) {
        return;
    }
    let spin = RuntimeSpin::load();
    let hold = Duration::from_secs(2);
    let memory = MemorySink::new();
    let cupti = CuptiBackend::with_config(gpu.cuda.clone(), CuptiConfig::default()).unwrap();
    let ctx = TracingContext::builder(cupti).hold_limit(hold).sink(memory.clone()).build().unwrap();
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            let (ctx, spin, cuda) = (&ctx, &spin, &gpu.cuda);
            s.spawn(move || {
                let stream = cuda.new_stream().unwrap();
                let mut buffer = std::ptr::null_mut();
                // Safety: the runtime's device is this thread's to set; a valid out-pointer
                // (an allocation makes no record).
                unsafe {
                    check("cudaSetDevice", rt::cudaSetDevice(0));
                    check("cudaMalloc", rt::cudaMalloc(&mut buffer, 4096));
                }
                let raw = stream.cu_stream() as rt::cudaStream_t;
                for _ in 0..LISTS {
                    let mut list = ctx.list();
                    {
                        let mut outer = list.zone(&stream, location!("outer"));
                        spin.launch(&stream, 10 * US);
                        {
                            let _inner = outer.zone(&stream, location!("inner"));
                            spin.launch(&stream, 20 * US);
                        }
                        // Safety: a live 4,096-byte allocation and stream; a plain function
                        // with no state (it makes no record, and no zone waits for it).
                        unsafe {
                            check("cudaMemsetAsync", rt::cudaMemsetAsync(buffer, 0, 4096, raw));
                            check(
                                "cudaLaunchHostFunc",
                                rt::cudaLaunchHostFunc(raw, Some(nothing), std::ptr::null_mut()),
                            );
                        }
                    }
                    ctx.submit(list).unwrap();
                }
                stream.synchronize().unwrap();
                // Safety: the stream is synchronized: nothing uses the allocation.
                unsafe { check("cudaFree", rt::cudaFree(buffer)) };
            });
        }
    });
    ctx.flush().unwrap();
    let elapsed = started.elapsed();
    let stats = ctx.stats();
    let _ = writeln!(std::io::stderr(), "{stats:?}, recorded and flushed in {elapsed:?}");
    let batches = memory.batches();
    assert_eq!(batches.len(), THREADS * LISTS, "{stats:?}");
    for (_, zones) in &batches {
        let shape: Vec<(&str, u32)> = zones.iter().map(|z| (z.location.name(), z.depth)).collect();
        assert_eq!(
            shape,
            [("outer", 0), ("spin_ns", 1), ("inner", 1), ("spin_ns", 2), ("memset", 1)],
            "{zones:?}"
        );
        assert_spun(&zones[1], 10 * US);
        assert_spun(&zones[3], 20 * US);
        assert!(
            zones.iter().all(|z| z.lane == zones[0].lane && matches!(z.lane, Lane::Stream(_))),
            "{zones:?}"
        );
        assert!(zones[2].gpu_begin_ns <= zones[3].gpu_begin_ns && zones[3].gpu_end_ns <= zones[2].gpu_end_ns);
    }
    let activity = stats.activity;
    // Every kernel and memset a zone, once: a runtime launch counted twice (its inner driver
    // call as a launch of its own) would leave each list waiting, partial after the hold.
    assert_eq!(activity.activities, THREADS * LISTS * 3, "{stats:?}");
    assert_eq!((activity.lists_partial, activity.empty_zones, activity.late), (0, 0, 0), "{stats:?}");
    assert_eq!(activity.losses, Default::default(), "{stats:?}");
    assert!(elapsed < hold, "a list waited for the hold limit: {elapsed:?}");
}
