//! The demo on CUPTI (`--backend cupti`): CUDA device 0 timed by CUPTI's activity records
//! instead of CUDA events. The workload, the lists and the guards are the CUDA path's, line
//! for line (the generic `run`): only the backend differs. Each dispatch zone spans the spin
//! kernel launched inside it, which CUPTI reports as a kernel zone nested in the dispatch.
//! CUPTI is process-wide, so `--devices` must be 1.

use super::{Args, DemoGpu, DemoResult, Stream};
use gpu_event_pool::backend::cuda::{CudaBackend, SpinKernel};
use gpu_event_pool::backend::cupti::{CuptiBackend, CuptiConfig, TracerConfig};
use gpu_event_pool::TracingContext;

/// CUDA device 0 under CUPTI, with the spin kernel loaded in its context.
pub(super) struct CuptiGpu {
    cupti: CuptiBackend,
    spin: SpinKernel,
}

/// Device 0 under CUPTI, with `--cupti-buffers` and `--cupti-buffer-kib` (the defaults for
/// what is not given).
pub(super) fn open(args: &Args) -> DemoResult<Vec<CuptiGpu>> {
    if args.devices != 1 {
        return Err(format!(
            "--backend cupti runs on one device (CUDA device 0: CUPTI is process-wide), not --devices {}",
            args.devices
        )
        .into());
    }
    let cuda = CudaBackend::new(0).map_err(|e| format!("no CUDA device: {e}"))?;
    let spin =
        SpinKernel::load(&cuda).map_err(|e| format!("cannot load the spin kernel on CUDA device 0: {e}"))?;
    let default = CuptiConfig::default();
    let buffers = TracerConfig {
        buffer_size: args.cupti_buffer_kib.map_or(default.buffers.buffer_size, |kib| kib as usize * 1024),
        buffer_count: args.cupti_buffers.map_or(default.buffers.buffer_count, |n| n as usize),
    };
    let cupti = CuptiBackend::with_config(cuda, CuptiConfig { buffers, ..default })
        .map_err(|e| format!("cannot start CUPTI on CUDA device 0: {e}"))?;
    Ok(vec![CuptiGpu { cupti, spin }])
}

impl DemoGpu for CuptiGpu {
    type Backend = CuptiBackend;
    type Queue = std::sync::Arc<cudarc::driver::CudaStream>;
    fn backend(&self) -> &CuptiBackend {
        &self.cupti
    }
    fn new_queue(&self, ctx: &TracingContext<CuptiBackend>, name: String) -> DemoResult<Self::Queue> {
        let stream = self.cupti.new_stream()?;
        ctx.name_stream(&stream, name);
        Ok(stream)
    }
    crate::stream_is_queue!();
    fn kernel(&self, stream: &Stream<Self>, ns: i64) -> DemoResult<()> {
        Ok(self.spin.launch(stream, ns.max(0) as u64)?)
    }
}
