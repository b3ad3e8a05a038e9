//! Protocol buffers' wire format, the little of it a trace needs: varints, keys, fixed64,
//! length-delimited fields, and nested messages whose length is written once they are done
//! (one byte kept for it; the rare message of 128 bytes or more moves over to make room). A
//! leaf: imports nothing of the crate.
//!
//! Written by hand rather than through a protobuf library's generated types: a zone is two
//! small packets written straight into the output buffer, with no message value built and no
//! allocation (docs/design.md, "The Perfetto sink": measured against `prost`).

/// Wire type 0: a varint.
const VARINT: u32 = 0;
/// Wire type 1: eight bytes, little-endian.
const FIXED64: u32 = 1;
/// Wire type 2: a length, then that many bytes.
const LEN: u32 = 2;

/// Appends `value` as a varint: seven bits a byte, low first, the top bit set on every byte
/// but the last.
#[inline]
pub(super) fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// How many bytes `value` takes as a varint.
fn varint_len(value: u64) -> usize {
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

#[inline]
fn key(out: &mut Vec<u8>, field: u32, wire_type: u32) {
    varint(out, u64::from(field << 3 | wire_type));
}

/// A `uint32`, `uint64`, `bool` or enum field.
#[inline]
pub(super) fn uint(out: &mut Vec<u8>, field: u32, value: u64) {
    key(out, field, VARINT);
    varint(out, value);
}

/// An `int32` or `int64` field: a negative value is its two's complement (ten bytes).
#[inline]
pub(super) fn int(out: &mut Vec<u8>, field: u32, value: i64) {
    uint(out, field, value as u64);
}

/// A `fixed64` field.
#[inline]
pub(super) fn fixed64(out: &mut Vec<u8>, field: u32, value: u64) {
    key(out, field, FIXED64);
    out.extend_from_slice(&value.to_le_bytes());
}

/// A `double` field.
#[inline]
pub(super) fn double(out: &mut Vec<u8>, field: u32, value: f64) {
    fixed64(out, field, value.to_bits());
}

/// A `string` or `bytes` field.
#[inline]
pub(super) fn bytes(out: &mut Vec<u8>, field: u32, value: &[u8]) {
    key(out, field, LEN);
    varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

/// A nested message being written: where its contents start. Close it with [`close`].
#[derive(Debug, Clone, Copy)]
#[must_use = "a nested message must be closed"]
pub(super) struct Nested(usize);

/// Starts nested message `field`: its key and one byte kept for its length.
#[inline]
pub(super) fn open(out: &mut Vec<u8>, field: u32) -> Nested {
    key(out, field, LEN);
    out.push(0);
    Nested(out.len())
}

/// Ends a nested message: writes its length, moving its contents over when the length takes
/// more than the one byte kept.
#[inline]
pub(super) fn close(out: &mut Vec<u8>, nested: Nested) {
    let Nested(start) = nested;
    let len = out.len() - start;
    if len < 0x80 {
        out[start - 1] = len as u8;
        return;
    }
    let extra = varint_len(len as u64) - 1;
    out.resize(out.len() + extra, 0);
    out.copy_within(start..start + len, start + extra);
    let mut at = start - 1;
    let mut value = len as u64;
    while value >= 0x80 {
        out[at] = value as u8 | 0x80;
        value >>= 7;
        at += 1;
    }
    out[at] = value as u8;
}

/// Reading written bytes back, for the tests of this folder.
#[cfg(test)]
pub(super) mod tests {
    use super::{bytes, close, open, uint, varint, varint_len, LEN, VARINT};

    /// Reads a varint back: (value, bytes read).
    fn read_varint(input: &[u8]) -> (u64, usize) {
        let mut value = 0;
        for (i, byte) in input.iter().enumerate() {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return (value, i + 1);
            }
        }
        panic!("a varint runs off the end");
    }

    /// A field's value read back: a varint's number, or a length-delimited field's bytes (a
    /// string, or a nested message to read with [`fields`]).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(in crate::sink::perfetto) enum Field<'a> {
        Number(u64),
        Bytes(&'a [u8]),
    }

    /// The fields of `message`, in order: (field number, value).
    pub(in crate::sink::perfetto) fn fields(mut message: &[u8]) -> Vec<(u32, Field<'_>)> {
        let mut fields = Vec::new();
        while !message.is_empty() {
            let (key, used) = read_varint(message);
            message = &message[used..];
            let value = match key as u32 & 7 {
                VARINT => {
                    let (value, used) = read_varint(message);
                    message = &message[used..];
                    Field::Number(value)
                }
                LEN => {
                    let (len, used) = read_varint(message);
                    let (value, rest) = message[used..].split_at(len as usize);
                    message = rest;
                    Field::Bytes(value)
                }
                other => panic!("wire type {other}: not read here"),
            };
            fields.push(((key >> 3) as u32, value));
        }
        fields
    }

    #[test]
    fn varints_read_back_and_take_the_bytes_they_say() {
        for value in [0, 1, 127, 128, 300, 16_383, 16_384, u64::from(u32::MAX), u64::MAX] {
            let mut out = Vec::new();
            varint(&mut out, value);
            assert_eq!(read_varint(&out), (value, out.len()), "{value}");
            assert_eq!(varint_len(value), out.len(), "{value}");
        }
    }

    #[test]
    fn a_nested_message_of_any_length_keeps_its_contents_after_its_length() {
        for len in [0usize, 1, 127, 128, 200, 16_383, 16_384, 70_000] {
            let mut out = vec![0xaa];
            let nested = open(&mut out, 5);
            let contents: Vec<u8> = (0..len).map(|i| i as u8).collect();
            out.extend_from_slice(&contents);
            close(&mut out, nested);
            uint(&mut out, 1, 7);
            assert_eq!(out[0], 0xaa);
            assert_eq!(out[1], 5 << 3 | 2, "key of field 5, length-delimited");
            let (read_len, used) = read_varint(&out[2..]);
            assert_eq!(read_len as usize, len);
            assert_eq!(&out[2 + used..2 + used + len], &contents[..], "{len}");
            assert_eq!(&out[2 + used + len..], &[1 << 3, 7], "the next field follows");
            assert_eq!(fields(&out[1..]), [(5, Field::Bytes(&contents)), (1, Field::Number(7))]);
            let mut direct = vec![0xaa];
            bytes(&mut direct, 5, &contents);
            uint(&mut direct, 1, 7);
            assert_eq!(out, direct, "same bytes as a bytes field: {len}");
        }
    }
}
