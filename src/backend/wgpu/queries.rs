//! Query chunks: a timestamp query set with the two buffers its results pass through on the
//! way to the host, and the queries an encoder took from it.

use super::event::{CellRef, TimestampEvent};

/// Queries of one chunk. An encoder takes a chunk at its first timestamp and another each
/// time one fills up; every chunk is resolved with one command when the encoder finishes.
pub(super) const CHUNK_QUERIES: u32 = 128;
/// Bytes of one resolved query (`wgpu::QUERY_SIZE`).
const QUERY_BYTES: u64 = wgpu::QUERY_SIZE as u64;

/// Which timestamp features the device has, and so how zones are timed
/// ([`Timestamps::of`], docs/wgpu.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timestamps {
    /// `Features::TIMESTAMP_QUERY`: a pass's `timestamp_writes`. Alone, a zone on an encoder
    /// is timed by an empty compute pass that writes one timestamp at its beginning.
    pub query: bool,
    /// `Features::TIMESTAMP_QUERY_INSIDE_ENCODERS`: `CommandEncoder::write_timestamp`.
    pub inside_encoders: bool,
    /// `Features::TIMESTAMP_QUERY_INSIDE_PASSES`: `ComputePass::write_timestamp` and
    /// `RenderPass::write_timestamp`, for zones inside a pass. wgpu asks for this feature
    /// alone there, not for `TIMESTAMP_QUERY_INSIDE_ENCODERS` too.
    pub inside_passes: bool,
}

impl Timestamps {
    /// What a device with `features` offers.
    pub fn of(features: wgpu::Features) -> Self {
        let query = features.contains(wgpu::Features::TIMESTAMP_QUERY);
        Self {
            query,
            inside_encoders: query && features.contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS),
            inside_passes: query && features.contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES),
        }
    }
}

/// A query set of [`CHUNK_QUERIES`] timestamps, the buffer it is resolved into and the buffer
/// that is copied to and mapped, with the event each used query stamps.
///
/// Owned by one encoder while it records (its queries are handed out in order, so a chunk's
/// used queries are `0..used`), then by its readback, then back in the pool.
#[derive(Debug)]
pub(super) struct QueryChunk {
    pub(super) set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    pub(super) readback: wgpu::Buffer,
    /// By query: the event's cell and the generation it was armed with; `None` for a query
    /// written with no event (a pass's end whose zone end was not recorded). Every cell is of
    /// the arena of the `Queries` the chunk belongs to (`WgpuStream::record` checks).
    pub(super) entries: Vec<Option<(CellRef, u64)>>,
}

impl QueryChunk {
    pub(super) fn new(device: &wgpu::Device) -> Self {
        let bytes = u64::from(CHUNK_QUERIES) * QUERY_BYTES;
        let set = device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("gpu-event-pool timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: CHUNK_QUERIES,
        });
        let buffer = |label, usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        };
        Self {
            set,
            resolve: buffer(
                "gpu-event-pool timestamp resolve",
                wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            ),
            readback: buffer(
                "gpu-event-pool timestamp readback",
                wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
            ),
            entries: Vec::with_capacity(CHUNK_QUERIES as usize),
        }
    }

    /// Queries not handed out yet.
    pub(super) fn room(&self) -> u32 {
        CHUNK_QUERIES - self.used()
    }

    /// Queries handed out.
    pub(super) fn used(&self) -> u32 {
        self.entries.len() as u32
    }

    /// The next query, for a new record of `event` (armed here).
    #[inline]
    pub(super) fn push(&mut self, event: &TimestampEvent) -> u32 {
        debug_assert!(self.room() > 0);
        let query = self.used();
        self.entries.push(Some(event.arm()));
        query
    }

    /// The next query, with its event to come ([`assign`](Self::assign)): a pass's end.
    pub(super) fn reserve(&mut self) -> u32 {
        debug_assert!(self.room() > 0);
        let query = self.used();
        self.entries.push(None);
        query
    }

    /// Gives the reserved `query` to a new record of `event`.
    pub(super) fn assign(&mut self, query: u32, event: &TimestampEvent) {
        self.entries[query as usize] = Some(event.arm());
    }

    /// Records the resolve of the used queries and their copy into the readback buffer,
    /// whose first `bytes` are mapped once the encoder's command buffer is submitted
    /// (`on_mapped` is told how that went, or dropped uncalled if it never is).
    pub(super) fn resolve_into(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        on_mapped: impl FnOnce(Result<(), wgpu::BufferAsyncError>) + Send + 'static,
    ) {
        let bytes = self.mapped_bytes();
        encoder.resolve_query_set(&self.set, 0..self.used(), &self.resolve, 0);
        encoder.copy_buffer_to_buffer(&self.resolve, 0, &self.readback, 0, bytes);
        encoder.map_buffer_on_submit(&self.readback, wgpu::MapMode::Read, 0..bytes, on_mapped);
    }

    /// The bytes of the readback buffer that hold the used queries.
    pub(super) fn mapped_bytes(&self) -> u64 {
        u64::from(self.used()) * QUERY_BYTES
    }
}
