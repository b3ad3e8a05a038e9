//! A zone's complete event (`"ph":"X"`), written by hand into the output's buffer, and the
//! text of static locations, escaped once per location rather than once per zone. Of
//! `chrome/` it imports only `format.rs`.

use super::format::{write_field, write_int, write_micros, write_str};
use crate::location::{Location, SourceLocation};
use crate::sink::Zone;
use rustc_hash::FxHashMap;

/// The parts of a zone's event that come from its location alone, as JSON text: `head` from
/// the event's `{` to `"pid":`, `tail` from `,"args":` to `"list":`.
#[derive(Debug, Default)]
struct LocationText {
    text: Vec<u8>,
    /// Where `tail` starts in `text`.
    split: usize,
}

impl LocationText {
    /// Makes `self` the text of `location`, reusing its buffer.
    fn write(&mut self, location: &Location) {
        let text = &mut self.text;
        text.clear();
        text.extend_from_slice(b"{\"name\":");
        write_str(text, location.name());
        text.extend_from_slice(b",\"cat\":\"gpu\",\"ph\":\"X\",\"pid\":");
        self.split = text.len();
        text.extend_from_slice(b",\"args\":{\"file\":");
        write_str(text, location.file());
        text.extend_from_slice(b",\"line\":");
        write_int(text, location.line());
        text.extend_from_slice(b",\"function\":");
        write_str(text, location.function());
        text.extend_from_slice(b",\"list\":");
    }

    fn parts(&self) -> (&[u8], &[u8]) {
        self.text.split_at(self.split)
    }
}

/// The location texts of one sink's zones.
///
/// A static location's text is kept under its address: a `&'static SourceLocation` is
/// never freed, so no other location can ever have that address, and its fields cannot
/// change (its `function` is called once, as it returns the same path every time). A
/// dynamic location is written afresh every time: its `Arc` may be freed and its address
/// reused by another location, and the text of every name made at run time would grow
/// without bound.
#[derive(Debug, Default)]
pub(super) struct LocationTexts {
    statics: FxHashMap<usize, LocationText>,
    /// The text of the latest dynamic location, its buffer reused.
    dynamic: LocationText,
}

impl LocationTexts {
    /// The `head` and `tail` of `location`'s events (`LocationText`).
    fn parts(&mut self, location: &Location) -> (&[u8], &[u8]) {
        match location {
            Location::Static(source) => {
                let key = *source as *const SourceLocation as usize;
                self.statics
                    .entry(key)
                    .or_insert_with(|| {
                        let mut text = LocationText::default();
                        text.write(location);
                        text
                    })
                    .parts()
            }
            Location::Dynamic(_) => {
                self.dynamic.write(location);
                self.dynamic.parts()
            }
        }
    }
}

/// Where and when a zone's event is: the `pid` and `tid` of its track, its `ts` and end in
/// nanoseconds on the trace's clock, its list's id.
#[derive(Debug, Clone, Copy)]
pub(super) struct EventPlace {
    pub(super) pid: u32,
    pub(super) tid: u32,
    pub(super) begin: i64,
    pub(super) end: i64,
    pub(super) list: u64,
}

/// Appends `zone` as a complete ("X") event: `{"name", "cat": "gpu", "ph": "X", "pid",
/// "tid", "ts", "dur", "args": {"file", "line", "function", "list", "depth",
/// "gpu_begin_ns", "gpu_end_ns", "frame" (if it has one), and the zone's own arguments}}`. By hand, without
/// `core::fmt` or an allocation: the serializer this replaced cost four allocations a zone,
/// and `write!` most of what was left (a profile of the demo).
pub(super) fn complete_event(out: &mut Vec<u8>, texts: &mut LocationTexts, place: EventPlace, zone: &Zone) {
    let (head, tail) = texts.parts(&zone.location);
    out.extend_from_slice(head);
    write_int(out, place.pid);
    write_field(out, b",\"tid\":", place.tid);
    out.extend_from_slice(b",\"ts\":");
    write_micros(out, place.begin);
    out.extend_from_slice(b",\"dur\":");
    write_micros(out, place.end - place.begin);
    out.extend_from_slice(tail);
    write_int(out, place.list);
    write_field(out, b",\"depth\":", zone.depth);
    write_field(out, b",\"gpu_begin_ns\":", zone.gpu_begin_ns);
    write_field(out, b",\"gpu_end_ns\":", zone.gpu_end_ns);
    write_bound(out, b",\"bound_begin_ns\":", zone.host_begin_bound_ns);
    write_bound(out, b",\"bound_end_ns\":", zone.host_end_bound_ns);
    if let Some(frame) = zone.frame {
        write_field(out, b",\"frame\":", frame);
    }
    for (key, value) in zone.location.args() {
        out.push(b',');
        write_str(out, key);
        out.push(b':');
        // Writing into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, value);
    }
    out.extend_from_slice(b"}}");
}

/// A host-time bound as an argument: `null` when nothing bounds it.
fn write_bound(out: &mut Vec<u8>, key: &[u8], bound: u64) {
    out.extend_from_slice(key);
    if bound == u64::MAX {
        out.extend_from_slice(b"null");
    } else {
        write_int(out, bound);
    }
}

#[cfg(test)]
mod tests {

    use super::{complete_event, EventPlace, LocationTexts};
    use crate::backend::Lane;
    use crate::location::{DynamicLocation, Location, SourceLocation, Verbosity};
    use crate::sink::Zone;

    static FIRST: SourceLocation = SourceLocation {
        name: "first \"quoted\"",
        function: || "crate::first",
        file: "src\\first.rs",
        line: 7,
        level: Verbosity::Fine,
    };
    static SECOND: SourceLocation = SourceLocation {
        name: "second",
        function: || "crate::second",
        file: "src/second.rs",
        line: 1234,
        level: Verbosity::Coarse,
    };

    /// The event as the sink wrote it before it kept location texts: `write!` for numbers,
    /// serde_json for strings.
    fn expected(place: EventPlace, zone: &Zone) -> String {
        let s = |text: &str| serde_json::to_string(text).expect("a string");
        let micros = |ns: i64| {
            let sign = if ns < 0 { "-" } else { "" };
            format!("{sign}{}.{:03}", ns.unsigned_abs() / 1000, ns.unsigned_abs() % 1000)
        };
        let l = &zone.location;
        let mut text = format!(
            "{{\"name\":{},\"cat\":\"gpu\",\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{},\
             \"args\":{{\"file\":{},\"line\":{},\"function\":{},\"list\":{},\"depth\":{},\
             \"gpu_begin_ns\":{},\"gpu_end_ns\":{}",
            s(l.name()),
            place.pid,
            place.tid,
            micros(place.begin),
            micros(place.end - place.begin),
            s(l.file()),
            l.line(),
            s(l.function()),
            place.list,
            zone.depth,
            zone.gpu_begin_ns,
            zone.gpu_end_ns
        );
        let bound = |b: u64| if b == u64::MAX { "null".to_owned() } else { b.to_string() };
        text += &format!(
            ",\"bound_begin_ns\":{},\"bound_end_ns\":{}",
            bound(zone.host_begin_bound_ns),
            bound(zone.host_end_bound_ns)
        );
        if let Some(frame) = zone.frame {
            text += &format!(",\"frame\":{frame}");
        }

        for (key, value) in l.args() {
            text += &format!(",{}:{}", s(key), serde_json::to_string(value).expect("a value"));
        }
        text + "}}"
    }

    #[test]
    fn each_location_keeps_its_own_text() {
        let dynamic = DynamicLocation::new("layer\t3")
            .with_source("crate::dynamic", "src/dynamic.rs", 99)
            .arg("m", 1024)
            .arg("scale", -0.5)
            .arg("dtype \"f16\"", "half\n")
            .arg("fused", true)
            .arg("big", u64::MAX)
            .arg("small", i64::MIN);
        let other = DynamicLocation::new("other").arg("k", 1);
        let locations: [Location; 6] = [
            (&FIRST).into(),
            (&SECOND).into(),
            dynamic.into(),
            (&FIRST).into(),
            other.into(),
            (&SECOND).into(),
        ];
        let mut texts = LocationTexts::default();
        let mut out = Vec::new();
        for (i, location) in locations.into_iter().enumerate() {
            let i = i as i64;
            let mut zone = Zone {
                gpu_end_ns: i64::MAX - i,
                ..Zone::new(location, Lane::Stream(1), i as u32, -1_500 * i, 1_000_001 * i)
            };
            if i % 2 == 1 {
                zone = zone.with_frame(u64::MAX - 1 - i as u64);
            }
            let place = EventPlace {
                pid: u32::MAX - i as u32,
                tid: 1 + i as u32,
                begin: i64::MIN / (i + 1) + 1,
                end: 7 * i,
                list: u64::MAX - i as u64,
            };
            out.clear();
            complete_event(&mut out, &mut texts, place, &zone);
            let text = String::from_utf8(out.clone()).expect("UTF-8");
            assert_eq!(text, expected(place, &zone), "zone {i}");
            serde_json::from_str::<serde_json::Value>(&text).expect("one JSON object");
        }
        assert_eq!(texts.statics.len(), 2, "one text per static location");
    }
}
