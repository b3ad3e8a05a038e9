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

/// The hold limit of [`traced`]'s context.
const HOLD: Duration = Duration::from_secs(2);

/// A context on CUPTI with the hold limit [`HOLD`], and its memory sink.
fn traced(gpu: &cupti_common::Gpu) -> (TracingContext<CuptiBackend>, MemorySink) {
    let memory = MemorySink::new();
    let cupti = CuptiBackend::with_config(gpu.cuda.clone(), CuptiConfig::default()).unwrap();
    let ctx = TracingContext::builder(cupti).hold_limit(HOLD).sink(memory.clone()).build().unwrap();
    (ctx, memory)
}

/// No list came out partial, empty or late, nothing was lost, and the run, recorded and
/// flushed in `elapsed`, never waited for the hold limit.
fn assert_nothing_held(stats: &gpu_event_pool::Stats, elapsed: Duration) {
    let activity = &stats.activity;
    assert_eq!((activity.lists_partial, activity.empty_zones, activity.late), (0, 0, 0), "{stats:?}");
    assert_eq!(activity.losses, Default::default(), "{stats:?}");
    assert!(elapsed < HOLD, "a list waited for the hold limit: {elapsed:?}");
}

#[test]
fn runtime_launches_are_each_a_zone_in_their_zone_and_nothing_waits_for_the_inner_driver_call() {
    let test = "runtime_launches_are_each_a_zone_in_their_zone_and_nothing_waits_for_the_inner_driver_call";
    let Some(gpu) = gpu(test) else { return };
    if !cudart(test) {
        return;
    }
    let spin = RuntimeSpin::load();
    let (ctx, memory) = traced(&gpu);
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
    assert_nothing_held(&stats, elapsed);
}

/// cuBLAS's entry points this test calls, from libcublas opened at run time.
struct Cublas {
    _library: libloading::Library,
    create: unsafe extern "C" fn(*mut *mut c_void) -> i32,
    set_stream: unsafe extern "C" fn(*mut c_void, *mut c_void) -> i32,
    #[allow(clippy::type_complexity)]
    sgemm: unsafe extern "C" fn(
        *mut c_void,
        i32,
        i32,
        i32,
        i32,
        i32,
        *const f32,
        *const f32,
        i32,
        *const f32,
        i32,
        *const f32,
        *mut f32,
        i32,
    ) -> i32,
    destroy: unsafe extern "C" fn(*mut c_void) -> i32,
}

impl Cublas {
    /// libcublas (`libcublas.so.13`, or `libcublas.so`), or `None` after saying why on stderr
    /// (a failure with `GPU_EVENT_POOL_REQUIRE_CUBLAS=1`).
    fn open(test: &str) -> Option<Self> {
        let names = ["libcublas.so.13", "libcublas.so.12", "libcublas.so"];
        // Safety: opening libcublas runs its initializers; the symbols are cuBLAS's v2 API
        // with these C signatures (cublas_api.h), kept alive with the library.
        let found = names.iter().find_map(|name| unsafe {
            let library = libloading::Library::new(name).ok()?;
            Some(Self {
                create: *library.get(b"cublasCreate_v2\0").ok()?,
                set_stream: *library.get(b"cublasSetStream_v2\0").ok()?,
                sgemm: *library.get(b"cublasSgemm_v2\0").ok()?,
                destroy: *library.get(b"cublasDestroy_v2\0").ok()?,
                _library: library,
            })
        });
        if found.is_none() {
            assert!(
                std::env::var_os("GPU_EVENT_POOL_REQUIRE_CUBLAS").is_none(),
                "GPU_EVENT_POOL_REQUIRE_CUBLAS is set, but libcublas opens under none of {names:?}"
            );
            let _ = writeln!(std::io::stderr(), "SKIPPED: no libcublas (tried {names:?}): {test}");
        }
        found
    }
}

#[test]
fn cublas_gemms_are_each_kernels_named_and_nested_in_their_zones() {
    const N: i32 = 256;
    const GEMM_THREADS: usize = 2;
    const GEMM_LISTS: usize = 10;
    let test = "cublas_gemms_are_each_kernels_named_and_nested_in_their_zones";
    let Some(gpu) = gpu(test) else { return };
    if !cudart(test) {
        return;
    }
    let Some(blas) = Cublas::open(test) else { return };
    let ok = |call: &str, status: i32| assert_eq!(status, 0, "{call}");
    // Each thread: a stream, a cuBLAS handle on it, three N x N matrices, one GEMM done
    // before tracing (cuBLAS loads its kernels then).
    let workers: Vec<_> = (0..GEMM_THREADS)
        .map(|_| {
            let stream = gpu.cuda.new_stream().unwrap();
            let mut handle = std::ptr::null_mut();
            let mut matrices = [std::ptr::null_mut(); 3];
            // Safety: valid out-pointers; a live stream of the primary context (the
            // runtime's, which cuBLAS uses).
            unsafe {
                check("cudaSetDevice", rt::cudaSetDevice(0));
                for m in &mut matrices {
                    check("cudaMalloc", rt::cudaMalloc(m, (N * N) as usize * 4));
                    check("cudaMemset", rt::cudaMemset(*m, 0, (N * N) as usize * 4));
                }
                ok("cublasCreate", (blas.create)(&mut handle));
                ok("cublasSetStream", (blas.set_stream)(handle, stream.cu_stream().cast()));
            }
            (stream, handle as usize, matrices.map(|m| m as usize))
        })
        .collect();
    let gemm = |handle: usize, m: [usize; 3]| {
        let (alpha, beta) = (1.0f32, 0.0f32);
        // Safety: a live handle on this thread's stream; three live N x N allocations.
        let status = unsafe {
            (blas.sgemm)(
                handle as *mut c_void,
                0,
                0,
                N,
                N,
                N,
                &alpha,
                m[0] as *const f32,
                N,
                m[1] as *const f32,
                N,
                &beta,
                m[2] as *mut f32,
                N,
            )
        };
        ok("cublasSgemm", status);
    };
    for (stream, handle, m) in &workers {
        gemm(*handle, *m);
        stream.synchronize().unwrap();
    }
    let (ctx, memory) = traced(&gpu);
    let started = Instant::now();
    std::thread::scope(|s| {
        for (stream, handle, m) in &workers {
            let (ctx, gemm) = (&ctx, &gemm);
            s.spawn(move || {
                for _ in 0..GEMM_LISTS {
                    let mut list = ctx.list();
                    {
                        let mut outer = list.zone(stream, location!("layer"));
                        gemm(*handle, *m);
                        let _inner = outer.zone(stream, location!("projection"));
                        gemm(*handle, *m);
                    }
                    ctx.submit(list).unwrap();
                }
                stream.synchronize().unwrap();
            });
        }
    });
    ctx.flush().unwrap();
    let elapsed = started.elapsed();
    let stats = ctx.stats();
    let _ = writeln!(std::io::stderr(), "{stats:?}, recorded and flushed in {elapsed:?}");
    let batches = memory.batches();
    assert_eq!(batches.len(), GEMM_THREADS * GEMM_LISTS, "{stats:?}");
    let mut kernels = 0;
    for (_, zones) in &batches {
        let (layer, projection) = (&zones[0], zones.iter().find(|z| z.location.name() == "projection"));
        assert_eq!((layer.location.name(), layer.depth), ("layer", 0), "{zones:?}");
        let projection = projection.unwrap_or_else(|| panic!("no projection zone: {zones:?}"));
        assert_eq!(projection.depth, 1, "{zones:?}");
        let work: Vec<_> =
            zones.iter().filter(|z| !["layer", "projection"].contains(&z.location.name())).collect();
        // Each GEMM one kernel or more: at least one in "layer" itself, one in "projection".
        assert!(work.iter().any(|z| z.depth == 1) && work.iter().any(|z| z.depth == 2), "{zones:?}");
        for z in &work {
            let name = z.location.name();
            assert!(!name.is_empty() && !name.starts_with("_Z"), "a readable kernel name: {name:?}");
            assert!(z.gpu_begin_ns >= layer.gpu_begin_ns && z.gpu_end_ns <= layer.gpu_end_ns, "{zones:?}");
            if z.depth == 2 {
                assert!(z.gpu_begin_ns >= projection.gpu_begin_ns && z.gpu_end_ns <= projection.gpu_end_ns);
            }
        }
        kernels += work.len();
    }
    let activity = stats.activity;
    // Every kernel cuBLAS launched is in a list, once, and nothing waited for the hold limit.
    assert_eq!(activity.activities, kernels, "{stats:?}");
    assert_nothing_held(&stats, elapsed);
    drop(ctx);
    for (_, handle, m) in workers {
        // Safety: every stream is synchronized: nothing uses the handle or the allocations.
        unsafe {
            (blas.destroy)(handle as *mut c_void);
            for p in m {
                rt::cudaFree(p as *mut c_void);
            }
        }
    }
}

/// What CUPTI reports for one runtime launch of each kind (a diagnostic, run by hand with
/// `--ignored` on a GPU machine: it subscribes to CUPTI itself): every launching callback,
/// runtime and driver, with its site and correlation id, then the correlation id each work
/// record carries. Fails if no record carries the id of a call it saw.
#[test]
#[ignore = "a diagnostic for a GPU machine: prints CUPTI's callbacks and records"]
fn probe_what_cupti_reports_for_runtime_launches() {
    use cudarc::cupti::sys as cu;
    use std::sync::Mutex;
    static CALLS: Mutex<Vec<(String, bool, u32)>> = Mutex::new(Vec::new());
    static RECORDS: Mutex<Vec<(u32, u32)>> = Mutex::new(Vec::new());
    unsafe extern "C" fn on_call(_: *mut c_void, _: cu::CUpti_CallbackDomain, _: u32, data: *const c_void) {
        // Safety: for the API domains CUPTI passes a `CUpti_CallbackData`, valid during the
        // call, whose function name is a static NUL-terminated string.
        let (name, enter, id) = unsafe {
            let d = &*data.cast::<cu::CUpti_CallbackData>();
            let name = std::ffi::CStr::from_ptr(d.functionName).to_string_lossy().into_owned();
            (name, d.callbackSite == cu::CUpti_ApiCallbackSite::CUPTI_API_ENTER, d.correlationId)
        };
        CALLS.lock().unwrap().push((name, enter, id));
    }
    unsafe extern "C" fn requested(buffer: *mut *mut u8, size: *mut usize, max: *mut usize) {
        let layout = std::alloc::Layout::from_size_align(1 << 20, 8).unwrap();
        // Safety: valid out-pointers from CUPTI; a non-zero layout.
        unsafe { (*buffer, *size, *max) = (std::alloc::alloc(layout), 1 << 20, 0) };
    }
    unsafe extern "C" fn completed(
        _: cudarc::driver::sys::CUcontext,
        _: u32,
        buffer: *mut u8,
        _: usize,
        valid: usize,
    ) {
        let mut record = std::ptr::null_mut();
        // Safety: a buffer of ours that CUPTI filled with `valid` bytes of records; each record
        // starts with its kind, and kernels (9 and later) and memsets (4) keep the
        // correlation id where version 9 and 4 have it.
        unsafe {
            while cu::cuptiActivityGetNextRecord(buffer, valid, &mut record) == cu::CUptiResult::CUPTI_SUCCESS
            {
                let kind = (*record).kind;
                let id = match kind {
                    cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL => {
                        (*record.cast::<cu::CUpti_ActivityKernel9>()).correlationId
                    }
                    cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET => {
                        (*record.cast::<cu::CUpti_ActivityMemset4>()).correlationId
                    }
                    _ => continue,
                };
                RECORDS.lock().unwrap().push((kind as u32, id));
            }
            std::alloc::dealloc(buffer, std::alloc::Layout::from_size_align(1 << 20, 8).unwrap());
        }
    }
    let test = "probe_what_cupti_reports_for_runtime_launches";
    let Some(gpu) = gpu(test) else { return };
    if !cudart(test) {
        return;
    }
    let spin = RuntimeSpin::load();
    let stream = gpu.cuda.new_stream().unwrap();
    let raw = stream.cu_stream() as rt::cudaStream_t;
    let mut buffer = std::ptr::null_mut();
    let mut subscriber = std::ptr::null_mut();
    use cu::CUpti_ActivityKind::{
        CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL as KERNEL, CUPTI_ACTIVITY_KIND_MEMSET as MEMSET,
    };
    use cu::CUpti_CallbackDomain::{
        CUPTI_CB_DOMAIN_DRIVER_API as DRIVER, CUPTI_CB_DOMAIN_RUNTIME_API as RUNTIME,
    };
    // Safety: valid out-pointers and callbacks of the right types; the allocation is live
    // until freed after the stream is synchronized; CUPTI is this test's alone (`gpu`'s turn).
    unsafe {
        check("cudaMalloc", rt::cudaMalloc(&mut buffer, 4096));
        assert_eq!(
            cu::cuptiSubscribe(&mut subscriber, Some(on_call), std::ptr::null_mut()),
            cu::CUptiResult::CUPTI_SUCCESS
        );
        assert_eq!(
            cu::cuptiActivityRegisterCallbacks(Some(requested), Some(completed)),
            cu::CUptiResult::CUPTI_SUCCESS
        );
        for kind in [KERNEL, MEMSET] {
            assert_eq!(cu::cuptiActivityEnable(kind), cu::CUptiResult::CUPTI_SUCCESS);
        }
        for domain in [RUNTIME, DRIVER] {
            assert_eq!(cu::cuptiEnableDomain(1, subscriber, domain), cu::CUptiResult::CUPTI_SUCCESS);
        }
        spin.launch(&stream, 10 * US);
        check("cudaMemsetAsync", rt::cudaMemsetAsync(buffer, 0, 4096, raw));
        check("cudaLaunchHostFunc", rt::cudaLaunchHostFunc(raw, Some(nothing), std::ptr::null_mut()));
        for domain in [RUNTIME, DRIVER] {
            cu::cuptiEnableDomain(0, subscriber, domain);
        }
        stream.synchronize().unwrap();
        cu::cuptiActivityFlushAll(1);
        for kind in [KERNEL, MEMSET] {
            cu::cuptiActivityDisable(kind);
        }
        cu::cuptiUnsubscribe(subscriber);
        check("cudaFree", rt::cudaFree(buffer));
    }
    let calls = CALLS.lock().unwrap().clone();
    let records = RECORDS.lock().unwrap().clone();
    for (name, enter, id) in &calls {
        let _ = writeln!(
            std::io::stderr(),
            "PROBE call {name} {} id {id}",
            if *enter { "enter" } else { "exit" }
        );
    }
    for (kind, id) in &records {
        let _ = writeln!(std::io::stderr(), "PROBE record kind {kind} id {id}");
    }
    assert!(records.iter().any(|(_, id)| calls.iter().any(|(_, _, c)| c == id)), "{calls:?} {records:?}");
}
