//! One CUPTI activity record, read into plain Rust.
//!
//! CUPTI versions its record structs (`CUpti_ActivityKernel9` for CUDA 12.x,
//! `CUpti_ActivityKernel10` for 13.0, `..11`, `..12`, `..13` after), and a library delivers the
//! newest its version knows, whatever headers the application was built with. The crate is
//! built on cudarc's CUDA 12.8 bindings; every field read here lies in the prefix that the
//! 12.8 struct shares with each later one, at the same offset (checked against cudarc's
//! bindings for 13.0 to 13.4: `CUpti_ActivityKernel9`/`10`/`11`/`12`/`13`, `Memcpy6`,
//! `MemcpyPtoP4`, `Memset4`, `ExternalCorrelation`). Fields are read one at a time, unaligned (the structs
//! are `packed(8)`), and the kind as a bare `u32`: a newer library may send kinds the 12.8
//! enum has no variant for.

use cudarc::cupti::sys;
use std::ffi::CStr;
use std::ptr::addr_of;

/// What an [`ActivityRecord`] describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActivityKind {
    /// A kernel (`CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL`).
    Kernel,
    /// A memory copy (`CUPTI_ACTIVITY_KIND_MEMCPY`, and `CUPTI_ACTIVITY_KIND_MEMCPY2` for a
    /// copy between devices).
    Memcpy,
    /// A memory set (`CUPTI_ACTIVITY_KIND_MEMSET`).
    Memset,
    /// An external id pushed on the launching thread
    /// (`cuptiActivityPushExternalCorrelationId`), tied to a launch's `correlation_id`
    /// (`CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION`): only
    /// [`external_id`](ActivityRecord::external_id) and `correlation_id` are set.
    ExternalCorrelation,
}

/// One activity record, copied out of CUPTI's buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivityRecord {
    /// What it describes.
    pub kind: ActivityKind,
    /// The kernel's name as CUPTI gives it: mangled (no demangler is built in yet). `None`
    /// for copies, memsets and correlations.
    pub name: Option<String>,
    /// CUDA device ordinal.
    pub device_id: u32,
    /// CUPTI's id of the context.
    pub context_id: u32,
    /// CUPTI's id of the stream ([`stream_id`](super::stream_id) gives a stream's).
    pub stream_id: u32,
    /// The id CUPTI gives the launching API call; an external correlation record carries the
    /// same id as the launch it names.
    pub correlation_id: u32,
    /// The graph the work ran in, 0 when not in a graph.
    pub graph_id: u32,
    /// The graph node the work ran as, 0 when not in a graph.
    pub graph_node_id: u64,
    /// Start on the GPU, in CUPTI's time base: nanoseconds since the Unix epoch on the host's
    /// clock (`cuptiGetTimestamp`, [`timestamp_ns`](super::timestamp_ns)). 0 for correlations.
    pub start_ns: u64,
    /// End, in the same time base.
    pub end_ns: u64,
    /// The external id of an [`ActivityKind::ExternalCorrelation`] record.
    pub external_id: Option<u64>,
}

/// `CUPTI_ACTIVITY_KIND_*` values, the same in every CUPTI version.
const KIND_MEMCPY: u32 = 1;
const KIND_MEMSET: u32 = 2;
const KIND_MEMCPY2: u32 = 22;
const KIND_CONCURRENT_KERNEL: u32 = 10;
const KIND_EXTERNAL_CORRELATION: u32 = 39;

/// The fields shared by kernels, copies and memsets, wherever each struct puts them.
macro_rules! launch_fields {
    ($record:expr, $ty:ty, $kind:expr, $name:expr) => {{
        let r = $record.cast::<$ty>();
        ActivityRecord {
            kind: $kind,
            name: $name,
            device_id: addr_of!((*r).deviceId).read_unaligned(),
            context_id: addr_of!((*r).contextId).read_unaligned(),
            stream_id: addr_of!((*r).streamId).read_unaligned(),
            correlation_id: addr_of!((*r).correlationId).read_unaligned(),
            graph_id: addr_of!((*r).graphId).read_unaligned(),
            graph_node_id: addr_of!((*r).graphNodeId).read_unaligned(),
            start_ns: addr_of!((*r).start).read_unaligned(),
            end_ns: addr_of!((*r).end).read_unaligned(),
            external_id: None,
        }
    }};
}

/// Reads the record at `record`, or `None` for a kind this crate does not enable.
///
/// # Safety
/// `record` points at a whole record CUPTI wrote (from `cuptiActivityGetNextRecord`): at
/// least as many bytes as the 12.8 struct of its kind, with a kernel's `name` null or a
/// NUL-terminated string that lives while the record does.
pub(crate) unsafe fn read(record: *const sys::CUpti_Activity) -> Option<ActivityRecord> {
    // Safety (for every read below): the caller's contract; each field's offset lies in the
    // prefix shared by every version of its struct (module doc).
    unsafe {
        let kind = record.cast::<u32>().read_unaligned();
        Some(match kind {
            KIND_CONCURRENT_KERNEL => {
                let name = addr_of!((*record.cast::<sys::CUpti_ActivityKernel9>()).name).read_unaligned();
                let name = (!name.is_null()).then(|| CStr::from_ptr(name).to_string_lossy().into_owned());
                launch_fields!(record, sys::CUpti_ActivityKernel9, ActivityKind::Kernel, name)
            }
            KIND_MEMCPY => launch_fields!(record, sys::CUpti_ActivityMemcpy6, ActivityKind::Memcpy, None),
            KIND_MEMCPY2 => {
                launch_fields!(record, sys::CUpti_ActivityMemcpyPtoP4, ActivityKind::Memcpy, None)
            }
            KIND_MEMSET => launch_fields!(record, sys::CUpti_ActivityMemset4, ActivityKind::Memset, None),
            KIND_EXTERNAL_CORRELATION => {
                let r = record.cast::<sys::CUpti_ActivityExternalCorrelation>();
                ActivityRecord {
                    kind: ActivityKind::ExternalCorrelation,
                    name: None,
                    device_id: 0,
                    context_id: 0,
                    stream_id: 0,
                    correlation_id: addr_of!((*r).correlationId).read_unaligned(),
                    graph_id: 0,
                    graph_node_id: 0,
                    start_ns: 0,
                    end_ns: 0,
                    external_id: Some(addr_of!((*r).externalId).read_unaligned()),
                }
            }
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::MaybeUninit;

    /// A zeroed record of type `T` (every CUPTI record is plain data; zero is kind INVALID).
    fn zeroed<T>() -> T {
        // Safety: the record structs hold integers, raw pointers and C enums whose 0 is a
        // variant (`*_INVALID` or the first value).
        unsafe { MaybeUninit::<T>::zeroed().assume_init() }
    }

    #[test]
    fn a_kernel_record_gives_its_name_ids_graph_and_times() {
        let mut k: sys::CUpti_ActivityKernel9 = zeroed();
        k.kind = sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        (k.deviceId, k.contextId, k.streamId, k.correlationId) = (1, 2, 13, 77);
        (k.graphId, k.graphNodeId, k.start, k.end) = (5, 6, 1_000, 3_500);
        k.name = c"_Z7spin_nsy".as_ptr();
        // Safety: a whole kernel record, its name a static C string.
        let r = unsafe { read(addr_of!(k).cast()) }.unwrap();
        assert_eq!(
            r,
            ActivityRecord {
                kind: ActivityKind::Kernel,
                name: Some("_Z7spin_nsy".into()),
                device_id: 1,
                context_id: 2,
                stream_id: 13,
                correlation_id: 77,
                graph_id: 5,
                graph_node_id: 6,
                start_ns: 1_000,
                end_ns: 3_500,
                external_id: None,
            }
        );
    }

    #[test]
    fn copies_and_memsets_have_no_name() {
        let mut c: sys::CUpti_ActivityMemcpy6 = zeroed();
        c.kind = sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY;
        (c.streamId, c.start, c.end) = (4, 10, 20);
        // Safety: a whole memcpy record.
        let r = unsafe { read(addr_of!(c).cast()) }.unwrap();
        assert_eq!(
            (r.kind, r.name, r.stream_id, r.start_ns, r.end_ns),
            (ActivityKind::Memcpy, None, 4, 10, 20)
        );

        let mut s: sys::CUpti_ActivityMemset4 = zeroed();
        s.kind = sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET;
        (s.correlationId, s.graphId) = (9, 3);
        // Safety: a whole memset record.
        let r = unsafe { read(addr_of!(s).cast()) }.unwrap();
        assert_eq!((r.kind, r.correlation_id, r.graph_id), (ActivityKind::Memset, 9, 3));
    }

    #[test]
    fn a_copy_between_devices_is_a_copy_on_its_stream() {
        let mut c: sys::CUpti_ActivityMemcpyPtoP4 = zeroed();
        c.kind = sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY2;
        (c.contextId, c.streamId, c.correlationId, c.start, c.end) = (2, 5, 41, 100, 250);
        (c.srcDeviceId, c.dstDeviceId) = (0, 1);
        // Safety: a whole peer-to-peer memcpy record.
        let r = unsafe { read(addr_of!(c).cast()) }.unwrap();
        assert_eq!(
            (r.kind, r.context_id, r.stream_id, r.correlation_id, r.start_ns, r.end_ns),
            (ActivityKind::Memcpy, 2, 5, 41, 100, 250)
        );
    }

    #[test]
    fn an_external_correlation_names_its_launch() {
        let mut e: sys::CUpti_ActivityExternalCorrelation = zeroed();
        e.kind = sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
        (e.externalId, e.correlationId) = (0xfeed, 77);
        // Safety: a whole external correlation record.
        let r = unsafe { read(addr_of!(e).cast()) }.unwrap();
        assert_eq!(
            (r.kind, r.external_id, r.correlation_id),
            (ActivityKind::ExternalCorrelation, Some(0xfeed), 77)
        );
    }

    #[test]
    fn kinds_not_enabled_are_skipped() {
        let mut k: sys::CUpti_ActivityKernel9 = zeroed();
        k.kind = sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_DRIVER;
        // Safety: a record at least as large as a driver record.
        assert!(unsafe { read(addr_of!(k).cast()) }.is_none());
    }
}
