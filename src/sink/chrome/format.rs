//! The text of a Chrome trace's values: nanoseconds written as microseconds with exactly
//! three decimals, integers, JSON strings, and signed distances between `Instant`s. A leaf:
//! imports nothing of the crate.

use serde_json::value::RawValue;
use std::time::Instant;

/// Times in a trace: nanoseconds written as microseconds with exactly three decimals.
pub(crate) fn micros_raw(ns: i64) -> std::io::Result<Box<RawValue>> {
    Ok(RawValue::from_string(micros(ns))?)
}

/// Nanoseconds as microseconds with exactly three decimals.
fn micros(ns: i64) -> String {
    let mut out = Vec::with_capacity(24);
    write_micros(&mut out, ns);
    String::from_utf8(out).expect("digits, a sign and a point")
}

/// Appends `ns` as microseconds with exactly three decimals: a decimal literal, since an
/// `f64` could round nanoseconds away and make touching zones overlap.
pub(crate) fn write_micros(out: &mut Vec<u8>, ns: i64) {
    if ns < 0 {
        out.push(b'-');
    }
    let abs = ns.unsigned_abs();
    write_int(out, abs / 1000);
    let frac = (abs % 1000) as u16;
    let digit = |d: u16| b'0' + d as u8;
    out.extend_from_slice(&[b'.', digit(frac / 100), digit(frac / 10 % 10), digit(frac % 10)]);
}

/// Appends `value` in decimal, as `Display` writes it: `core::fmt` was most of a zone's
/// cost in the sink (a profile of the demo).
pub(crate) fn write_int(out: &mut Vec<u8>, value: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// Appends `key` (the JSON text before a value: `,"depth":`) and the integer `value`.
pub(crate) fn write_field(out: &mut Vec<u8>, key: &[u8], value: impl itoa::Integer) {
    out.extend_from_slice(key);
    write_int(out, value);
}

/// Appends `text` as a JSON string (quoted and escaped).
pub(crate) fn write_str(out: &mut Vec<u8>, text: &str) {
    // Most names and paths need no escaping: copied as they are, without serde_json's
    // serializer around its escaping loop.
    if !text.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
        return;
    }
    // Writing a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}

/// `later - earlier` in nanoseconds, negative when `later` is the earlier one.
pub(crate) fn signed_ns(later: Instant, earlier: Instant) -> i64 {
    let ns = |d: std::time::Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    match later.checked_duration_since(earlier) {
        Some(after) => ns(after),
        None => -ns(earlier - later),
    }
}

#[cfg(test)]
mod tests {
    use super::{micros, signed_ns, write_int, write_str};
    use proptest::prelude::*;
    use std::time::{Duration, Instant};

    #[test]
    fn micros_keep_every_nanosecond() {
        assert_eq!(micros(0), "0.000");
        assert_eq!(micros(1), "0.001");
        assert_eq!(micros(-1), "-0.001");
        assert_eq!(micros(1_234_567), "1234.567");
        assert_eq!(micros(-1_500), "-1.500");
        assert_eq!(micros(i64::MAX), "9223372036854775.807");
        assert_eq!(micros(i64::MIN), "-9223372036854775.808");
    }

    /// The digits `write_int` writes for `value`, next to what `format!` writes.
    fn both<T: itoa::Integer + std::fmt::Display + Copy>(value: T) -> (String, String) {
        let mut out = Vec::new();
        write_int(&mut out, value);
        (String::from_utf8(out).expect("digits"), format!("{value}"))
    }

    #[test]
    fn integers_are_written_as_display_writes_them() {
        for value in [0, 1, -1, 9, 10, 99, 100, 999, 1000, -1000, i64::MIN, i64::MAX, i64::MIN + 1] {
            let (ours, fmt) = both(value);
            assert_eq!(ours, fmt);
        }
        for value in [0, 1, 9, 10, u64::MAX, u64::MAX - 1, 10_u64.pow(19), 10_u64.pow(19) - 1] {
            let (ours, fmt) = both(value);
            assert_eq!(ours, fmt);
        }
        for value in [0, 1, u32::MAX] {
            let (ours, fmt) = both(value);
            assert_eq!(ours, fmt);
        }
        for (ours, fmt) in (0..64).map(|shift| both(1_u64 << shift)) {
            assert_eq!(ours, fmt);
        }
    }

    /// What `write_micros` wrote before it stopped using `core::fmt`.
    fn micros_by_fmt(ns: i64) -> String {
        let sign = if ns < 0 { "-" } else { "" };
        let abs = ns.unsigned_abs();
        format!("{sign}{}.{:03}", abs / 1000, abs % 1000)
    }

    proptest! {
        // Miri runs each case about a thousand times slower.
        #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 4 } else { 256 }, ..ProptestConfig::default() })]

        #[test]
        fn micros_are_written_as_format_wrote_them(ns in any::<i64>()) {
            prop_assert_eq!(micros(ns), micros_by_fmt(ns));
        }

        #[test]
        fn small_micros_are_written_as_format_wrote_them(ns in -3_000_000_i64..3_000_000) {
            prop_assert_eq!(micros(ns), micros_by_fmt(ns));
        }

        #[test]
        fn integers_are_written_as_display_writes_them_anywhere(i in any::<i64>(), u in any::<u64>()) {
            let (ours, fmt) = both(i);
            prop_assert_eq!(ours, fmt);
            let (ours, fmt) = both(u);
            prop_assert_eq!(ours, fmt);
        }

        #[test]
        fn strings_are_written_as_serde_json_writes_them(text in any::<String>()) {
            let mut ours = Vec::new();
            write_str(&mut ours, &text);
            prop_assert_eq!(ours, serde_json::to_vec(&text).expect("a string"));
        }
    }

    #[test]
    fn strings_needing_escapes_are_escaped() {
        for text in ["", "plain", "a\"b", "back\\slash", "tab\there", "\u{1}", "é ∑ 🚀"] {
            let mut ours = Vec::new();
            write_str(&mut ours, text);
            assert_eq!(ours, serde_json::to_vec(text).expect("a string"), "{text:?}");
        }
    }

    #[test]
    fn signed_ns_is_negative_when_the_origin_is_later() {
        let a = Instant::now();
        let b = a + Duration::from_nanos(1_500);
        assert_eq!(signed_ns(b, a), 1_500);
        assert_eq!(signed_ns(a, b), -1_500);
    }
}
