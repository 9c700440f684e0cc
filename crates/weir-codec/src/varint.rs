//! Kafka's varints: zigzag `varint` (i32, at most 5 bytes) and `varlong` (i64, at most 10) in
//! records, and the unsigned varint (u32, at most 5) of flexible versions' lengths and tagged
//! fields. Each is written and read here only; readers take the next byte from any source (a
//! slice, `Bytes`, a decompressing stream) and pass its own errors through.

use bytes::BufMut;

/// Why a varint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarintError {
    /// The bytes ended inside it.
    Truncated,
    /// It runs on past the most bytes its type may take (5 or 10).
    TooLong {
        /// The most bytes its type may take.
        max_bytes: u8,
    },
}

impl std::fmt::Display for VarintError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VarintError::Truncated => write!(f, "varint cut short by the end of the bytes"),
            VarintError::TooLong { max_bytes } => {
                write!(f, "varint longer than {max_bytes} bytes")
            }
        }
    }
}

impl std::error::Error for VarintError {}

/// Appends `value` as an unsigned varint.
#[inline]
pub fn put_uvarint(out: &mut impl BufMut, value: u32) {
    put_unsigned(out, u64::from(value));
}

/// Appends `value` as a zigzag varint.
#[inline]
pub fn put_varint(out: &mut impl BufMut, value: i32) {
    put_unsigned(out, u64::from(((value << 1) ^ (value >> 31)) as u32));
}

/// Appends `value` as a zigzag varlong (for a value that fits an i32, the same bytes as
/// [`put_varint`]).
#[inline]
pub fn put_varlong(out: &mut impl BufMut, value: i64) {
    put_unsigned(out, ((value << 1) ^ (value >> 63)) as u64);
}

/// Bytes [`put_varlong`] writes for `value` (and [`put_varint`] for a value that fits an i32).
#[inline]
pub fn varlong_len(value: i64) -> usize {
    let zigzag = ((value << 1) ^ (value >> 63)) as u64;
    (64 - (zigzag | 1).leading_zeros() as usize).div_ceil(7)
}

#[inline]
fn put_unsigned(out: &mut impl BufMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

/// Reads an unsigned varint of at most 5 bytes, each from `next`.
#[inline]
pub fn read_uvarint<E: From<VarintError>>(next: impl FnMut() -> Result<u8, E>) -> Result<u32, E> {
    Ok(read_unsigned(next, 5)? as u32)
}

/// Reads a zigzag varint of at most 5 bytes, each from `next`.
#[inline]
pub fn read_varint<E: From<VarintError>>(next: impl FnMut() -> Result<u8, E>) -> Result<i32, E> {
    let value = read_unsigned(next, 5)? as u32;
    Ok(((value >> 1) as i32) ^ -((value & 1) as i32))
}

/// Reads a zigzag varlong of at most 10 bytes, each from `next`.
#[inline]
pub fn read_varlong<E: From<VarintError>>(next: impl FnMut() -> Result<u8, E>) -> Result<i64, E> {
    let value = read_unsigned(next, 10)?;
    Ok(((value >> 1) as i64) ^ -((value & 1) as i64))
}

/// The bits of a varint of at most `max_bytes` bytes, as Kafka reads them (bits beyond the
/// type's width in its last byte are dropped).
#[inline]
fn read_unsigned<E: From<VarintError>>(
    mut next: impl FnMut() -> Result<u8, E>,
    max_bytes: u8,
) -> Result<u64, E> {
    let mut value: u64 = 0;
    for i in 0..u32::from(max_bytes) {
        let b = next()?;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(VarintError::TooLong { max_bytes }.into())
}

/// The byte at `*position` of `bytes`, moving past it: a source for the readers above.
#[inline]
pub fn next_in(bytes: &[u8], position: &mut usize) -> Result<u8, VarintError> {
    let b = *bytes.get(*position).ok_or(VarintError::Truncated)?;
    *position += 1;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The next byte of some bytes.
    type Next<'a> = dyn FnMut() -> Result<u8, VarintError> + 'a;

    fn read_all<T>(
        bytes: &[u8],
        read: fn(&mut Next<'_>) -> Result<T, VarintError>,
    ) -> Result<(T, usize), VarintError> {
        let mut position = 0;
        let value = read(&mut || next_in(bytes, &mut position))?;
        Ok((value, position))
    }

    /// Kafka's ByteUtils.writeVarint/writeVarlong, as Java computes them.
    fn kafka_zigzag(value: i64) -> Vec<u8> {
        let mut v = ((value << 1) ^ (value >> 63)) as u64;
        let mut out = Vec::new();
        while v & !0x7f != 0 {
            out.push(((v & 0x7f) | 0x80) as u8);
            v >>= 7;
        }
        out.push(v as u8);
        out
    }

    proptest! {
        #[test]
        fn varints_round_trip_as_kafka_writes_them(value in any::<i32>()) {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            prop_assert_eq!(&out, &kafka_zigzag(i64::from(value)));
            let mut long = Vec::new();
            put_varlong(&mut long, i64::from(value));
            prop_assert_eq!(&long, &out);
            prop_assert_eq!(read_all(&out, |n| read_varint(n)), Ok((value, out.len())));
        }

        #[test]
        fn varlongs_round_trip_as_kafka_writes_them(value in any::<i64>()) {
            let mut out = Vec::new();
            put_varlong(&mut out, value);
            prop_assert_eq!(&out, &kafka_zigzag(value));
            prop_assert_eq!(read_all(&out, |n| read_varlong(n)), Ok((value, out.len())));
            prop_assert_eq!(varlong_len(value), out.len());
        }

        #[test]
        fn unsigned_varints_round_trip(value in any::<u32>()) {
            let mut out = Vec::new();
            put_uvarint(&mut out, value);
            prop_assert!(out.len() <= 5);
            prop_assert_eq!(read_all(&out, |n| read_uvarint(n)), Ok((value, out.len())));
        }
    }

    #[test]
    fn a_cut_or_endless_varint_is_refused() {
        let mut out = Vec::new();
        put_varlong(&mut out, i64::MIN);
        assert_eq!(
            read_all(&out[..out.len() - 1], |n| read_varlong(n)),
            Err(VarintError::Truncated)
        );
        let endless = [0xff; 11];
        assert_eq!(
            read_all(&endless, |n| read_varint(n)),
            Err(VarintError::TooLong { max_bytes: 5 })
        );
        assert_eq!(
            read_all(&endless, |n| read_varlong(n)),
            Err(VarintError::TooLong { max_bytes: 10 })
        );
        assert_eq!(
            read_all(&endless, |n| read_uvarint(n)),
            Err(VarintError::TooLong { max_bytes: 5 })
        );
    }
}
