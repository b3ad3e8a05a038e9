//! Times in a Chrome trace: nanoseconds written as microseconds with exactly three
//! decimals, and signed distances between `Instant`s. A leaf: imports nothing of the crate.

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
    use std::io::Write;
    let sign = if ns < 0 { "-" } else { "" };
    let abs = ns.unsigned_abs();
    // Writing into a Vec cannot fail.
    let _ = write!(out, "{sign}{}.{:03}", abs / 1000, abs % 1000);
}

/// Appends `text` as a JSON string (quoted and escaped).
pub(crate) fn write_str(out: &mut Vec<u8>, text: &str) {
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
    use super::{micros, signed_ns};
    use std::time::{Duration, Instant};

    #[test]
    fn micros_keep_every_nanosecond() {
        assert_eq!(micros(0), "0.000");
        assert_eq!(micros(1), "0.001");
        assert_eq!(micros(1_234_567), "1234.567");
        assert_eq!(micros(-1_500), "-1.500");
    }

    #[test]
    fn signed_ns_is_negative_when_the_origin_is_later() {
        let a = Instant::now();
        let b = a + Duration::from_nanos(1_500);
        assert_eq!(signed_ns(b, a), 1_500);
        assert_eq!(signed_ns(a, b), -1_500);
    }
}
