//! Timestamp queries: the pool's events, made in query pools created on demand as pages.

use super::errors::vk_error;
use super::handles::DeviceShared;
use crate::backend::ticks::TickScale;
use crate::backend::BackendError;
use ash::vk;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Queries in the first query pool; each later pool doubles, up to [`MAX_PAGE`].
const FIRST_PAGE: u32 = 64;
/// Queries in the largest query pool.
const MAX_PAGE: u32 = 4096;

/// One `VkQueryPool` of timestamp queries, destroyed when its last query is dropped.
#[derive(Debug)]
pub(super) struct QueryPage {
    pub(super) raw: vk::QueryPool,
    device: Arc<DeviceShared>,
}

impl Drop for QueryPage {
    fn drop(&mut self) {
        // Safety: every query of this pool is dropped (each holds an Arc to the page), so no
        // command buffer the pool recorded into is read by the crate again; the device
        // outlives the page (the page holds an Arc to it).
        unsafe { self.device.device.destroy_query_pool(self.raw, None) };
    }
}

/// Hands out queries from the newest page, creating the next page (twice as large) when it is
/// used up. Behind a mutex in the backend: events are created when the pool grows, not while
/// recording.
#[derive(Debug, Default)]
pub(super) struct PageAllocator {
    page: Option<Arc<QueryPage>>,
    used: u32,
    size: u32,
}

impl PageAllocator {
    pub(super) fn next(&mut self, device: &Arc<DeviceShared>) -> Result<TimestampQuery, BackendError> {
        let page = match &self.page {
            Some(page) if self.used < self.size => Arc::clone(page),
            _ => {
                let size = if self.size == 0 { FIRST_PAGE } else { (self.size * 2).min(MAX_PAGE) };
                let info =
                    vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(size);
                // Safety: a valid create info; the device is live (held by the Arc).
                let raw = unsafe { device.device.create_query_pool(&info, None) }
                    .map_err(vk_error("vkCreateQueryPool"))?;
                // Safety: a new pool, used by no command buffer and read by no thread yet;
                // `hostQueryReset` is enabled on every device the crate opens or accepts.
                unsafe { device.device.reset_query_pool(raw, 0, size) };
                let page = Arc::new(QueryPage { raw, device: Arc::clone(device) });
                self.page = Some(Arc::clone(&page));
                self.used = 0;
                self.size = size;
                page
            }
        };
        let index = self.used;
        self.used += 1;
        Ok(TimestampQuery {
            page,
            index,
            host_stamped: AtomicBool::new(false),
            host_ticks: AtomicU64::new(0),
        })
    }
}

/// What recording a query calls, copied out of the device: its handle, `vkResetQueryPool` and
/// `vkCmdWriteTimestamp`. The backend keeps it in itself, beside its `Arc`, so a recording
/// step reads the three from the context's own line; through `ash::Device` they were three
/// loads deep (the backend's `Arc`, the device's `Arc`, then the handle and two function
/// tables on other lines: measured with perf on lavapipe).
///
/// Valid while the device it was made from lives: its holder keeps an `Arc` to that device.
#[derive(Debug, Clone, Copy)]
pub(super) struct QueryWriter {
    device: vk::Device,
    reset_query_pool: vk::PFN_vkResetQueryPool,
    cmd_write_timestamp: vk::PFN_vkCmdWriteTimestamp,
}

impl QueryWriter {
    /// The writer of `device`'s queries (`hostQueryReset` is enabled on every device the
    /// crate opens or accepts, so `vkResetQueryPool` is loaded).
    pub(super) fn new(device: &ash::Device) -> Self {
        Self {
            device: device.handle(),
            reset_query_pool: device.fp_v1_2().reset_query_pool,
            cmd_write_timestamp: device.fp_v1_0().cmd_write_timestamp,
        }
    }

    /// Writes `query`'s timestamp into `command_buffer` at `stage`.
    ///
    /// # Safety
    ///
    /// `command_buffer` is a command buffer of the writer's device in the recording state,
    /// recorded by the calling thread only, and `query` (of the same device) is owned by the
    /// caller and reset since it was last written (made reset, or retired:
    /// `Backend::retire`).
    #[inline]
    pub(super) unsafe fn write(
        &self,
        query: &TimestampQuery,
        command_buffer: vk::CommandBuffer,
        stage: vk::PipelineStageFlags,
    ) {
        // Safety: the caller's command buffer (recording, this thread only) and query, reset
        // (unavailable) as `vkCmdWriteTimestamp` needs; its pool is alive (held by the
        // query's `page`).
        unsafe { (self.cmd_write_timestamp)(command_buffer, stage, query.page.raw, query.index) };
    }
}

/// A timestamp query: one slot of the pool, or one of the collector's anchors.
///
/// An anchor taken with calibrated timestamps is *host-stamped*: its ticks are the device
/// clock read by `vkGetCalibratedTimestampsEXT`, kept here, and the query is not used. Both
/// fields are written only by the event's owner (a list, or the collector); the pool's
/// Release/Acquire hand-offs order them for the next owner.
#[derive(Debug)]
pub struct TimestampQuery {
    /// The query pool, destroyed with its last query.
    page: Arc<QueryPage>,
    index: u32,
    host_stamped: AtomicBool,
    host_ticks: AtomicU64,
}

impl TimestampQuery {
    /// The query pool (do not destroy or reset it).
    pub fn pool(&self) -> vk::QueryPool {
        self.page.raw
    }

    /// The query's index in [`pool`](Self::pool).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Resets the query from the host, for a new write by a command buffer: when its slot
    /// goes back to the pool (`Backend::retire`), or before an anchor's submission.
    #[inline]
    pub(super) fn reset(&self, writer: &QueryWriter) {
        // Only an anchor is ever host-stamped: a slot's query reads the flag (on the line it
        // reads anyway) and leaves the line clean for the collector that reads it next.
        if self.host_stamped.load(Ordering::Relaxed) {
            self.host_stamped.store(false, Ordering::Relaxed);
        }
        // Safety: the query is owned by the caller (the collector retiring the slot of a
        // list it collected once the query was available, or the collector's anchor), so no
        // submitted command that refers to it is still pending and no other thread reads or
        // resets it now
        // (VUID-vkResetQueryPool-firstQuery-02741/02742);
        // its pool is alive (held by `page`) and of the writer's device (`QueryWriter::new`).
        unsafe { (writer.reset_query_pool)(writer.device, self.page.raw, self.index, 1) };
    }

    /// Stores ticks read by the host (a calibrated anchor).
    pub(super) fn stamp(&self, ticks: u64) {
        self.host_ticks.store(ticks, Ordering::Relaxed);
        self.host_stamped.store(true, Ordering::Relaxed);
    }

    /// The query's ticks (masked to the valid bits of `scale`), read through `device` (the
    /// backend's), or `None` while it is not available. Never waits.
    pub(super) fn ticks(&self, device: &ash::Device, scale: &TickScale) -> Result<Option<u64>, BackendError> {
        if self.host_stamped.load(Ordering::Relaxed) {
            return Ok(Some(self.host_ticks.load(Ordering::Relaxed)));
        }
        let mut data = [[0u64; 2]];
        let flags = vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WITH_AVAILABILITY;
        // Safety: one query of a live pool; `data` holds its value and availability words
        // (the stride is their size); without WAIT the call returns at once.
        let result = unsafe { device.get_query_pool_results(self.page.raw, self.index, &mut data, flags) };
        match result {
            Ok(()) | Err(vk::Result::NOT_READY) if data[0][1] != 0 => Ok(Some(data[0][0] & scale.mask)),
            Ok(()) | Err(vk::Result::NOT_READY) => Ok(None),
            Err(e) => Err(vk_error("vkGetQueryPoolResults")(e)),
        }
    }
}
