//! The wgpu tests' device and workload: an adapter of wgpu's Vulkan backend (Mesa's lavapipe
//! in CI) with the timestamp features a test asks for, and a compute shader that spins for a
//! number of steps.
//!
//! Without an adapter every test prints `SKIPPED: ...` to stderr and returns;
//! `GPU_EVENT_POOL_REQUIRE_WGPU=1` (set by `.ci/run`) makes that a failure.

#![allow(dead_code)]

use std::io::Write;

/// Waits for one of wgpu's futures (the adapter, the device): on native wgpu they are ready
/// when made, so polling with a waker that does nothing is enough.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::yield_now();
    }
}

/// A device and its queue, with the adapter's name.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub adapter: wgpu::AdapterInfo,
}

/// Every timestamp feature.
pub const ALL_TIMESTAMPS: wgpu::Features = wgpu::Features::TIMESTAMP_QUERY
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS)
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES);

/// Says on stderr (past the harness's capture) that `test` is skipped, and why: a test that
/// does not apply to this driver.
pub fn skip(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}: {test}");
}

/// As [`skip`], for a missing adapter or feature: a failure where an adapter is required.
fn missing(test: &str, why: &str) {
    assert!(
        std::env::var_os("GPU_EVENT_POOL_REQUIRE_WGPU").is_none(),
        "GPU_EVENT_POOL_REQUIRE_WGPU is set, but {why}"
    );
    skip(test, why);
}

/// A device of the first Vulkan adapter with exactly `features` (of the timestamp ones), or
/// `None` (said on stderr) when there is no adapter or it lacks one of them.
pub fn gpu(test: &str, features: wgpu::Features) -> Option<Gpu> {
    let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle();
    descriptor.backends = wgpu::Backends::VULKAN;
    let instance = wgpu::Instance::new(descriptor);
    let Some(adapter) = block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN)).into_iter().next()
    else {
        missing(test, "no wgpu Vulkan adapter");
        return None;
    };
    if !adapter.features().contains(features) {
        missing(test, &format!("the adapter lacks {:?}", features - adapter.features()));
        return None;
    }
    let descriptor = wgpu::DeviceDescriptor { required_features: features, ..Default::default() };
    let (device, queue) = block_on(adapter.request_device(&descriptor)).expect("request_device");
    Some(Gpu { device, queue, adapter: adapter.get_info() })
}

/// Whether the adapter is Mesa's lavapipe (llvmpipe), whose debug groups crash.
pub fn is_lavapipe(gpu: &Gpu) -> bool {
    gpu.adapter.name.contains("llvmpipe")
}

/// A compute shader whose invocations each step a random-number generator a given number of
/// times (`Spin::set_steps`, before the submission; llvmpipe, lavapipe's compiler, ends a loop
/// after 65,535 iterations), dispatched as one workgroup or many: its time grows with both.
pub struct Spin {
    pipeline: wgpu::ComputePipeline,
    bind_group: wgpu::BindGroup,
    state: wgpu::Buffer,
}

const SPIN_WGSL: &str = r#"
@group(0) @binding(0) var<storage, read_write> state: array<u32>;

@compute @workgroup_size(1)
fn spin() {
    var x = state[0];
    for (var i = 0u; i < state[1]; i = i + 1u) {
        x = x * 1664525u + (x >> 7u) + 1013904223u;
    }
    state[0] = x;
}
"#;

impl Spin {
    pub fn new(device: &wgpu::Device) -> Self {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("spin"),
            source: wgpu::ShaderSource::Wgsl(SPIN_WGSL.into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("spin"),
            layout: None,
            module: &module,
            entry_point: Some("spin"),
            compilation_options: Default::default(),
            cache: None,
        });
        let state = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("spin state"),
            size: 8,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[wgpu::BindGroupEntry { binding: 0, resource: state.as_entire_binding() }],
        });
        Self { pipeline, bind_group, state }
    }

    /// Makes the spins of the next submission take `steps` steps per invocation (at most
    /// 65,535 on lavapipe).
    pub fn set_steps(&self, queue: &wgpu::Queue, steps: u32) {
        queue.write_buffer(&self.state, 4, &steps.to_le_bytes());
    }

    /// A spin of one invocation, recorded into `pass`.
    pub fn dispatch(&self, pass: &mut wgpu::ComputePass<'_>) {
        self.dispatch_groups(pass, 1);
    }

    /// A spin of `groups` invocations, recorded into `pass`.
    pub fn dispatch_groups(&self, pass: &mut wgpu::ComputePass<'_>, groups: u32) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &self.bind_group, &[]);
        pass.dispatch_workgroups(groups, 1, 1);
    }
}

/// Raw timestamps written by the test itself around a pass, read back with wgpu's own calls.
pub struct Reference {
    pub set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    readback: wgpu::Buffer,
}

impl Reference {
    pub fn new(device: &wgpu::Device) -> Self {
        let buffer = |usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: 16,
                usage,
                mapped_at_creation: false,
            })
        };
        Self {
            set: device.create_query_set(&wgpu::QuerySetDescriptor {
                label: None,
                ty: wgpu::QueryType::Timestamp,
                count: 2,
            }),
            resolve: buffer(wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC),
            readback: buffer(wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ),
        }
    }

    pub fn resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        encoder.resolve_query_set(&self.set, 0..2, &self.resolve, 0);
        encoder.copy_buffer_to_buffer(&self.resolve, 0, &self.readback, 0, 16);
    }

    /// The two raw ticks (waits for the device).
    pub fn read(&self, device: &wgpu::Device) -> [u64; 2] {
        self.readback.slice(..).map_async(wgpu::MapMode::Read, |r| r.unwrap());
        device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
        let view = self.readback.slice(..).get_mapped_range().unwrap();
        let ticks = [0, 1].map(|i| u64::from_le_bytes(view[i * 8..i * 8 + 8].try_into().unwrap()));
        drop(view);
        self.readback.unmap();
        ticks
    }
}
