//! Compressing records (with `weir_codec::compression`): for the batches the cleaner rewrites
//! (in their own codec) and for topics whose `compression.type` makes the broker recompress
//! what producers send.

use bytes::Bytes;
pub use weir_codec::compression::Levels;
use weir_codec::encode::{put_framed, seal};

use crate::batch::{BatchError, BatchHeader, ATTR_COMPRESSION_MASK};
use crate::records::for_each_stored_record;
use crate::validate::ValidBatch;

/// The batch whose header is `original` with `plain` (`count` framed records) compressed with
/// `codec` as its records: the codec bits, batch length, max timestamp, record count and CRC
/// are rewritten; base offset, leader epoch, other attributes, last offset delta, base
/// timestamp and producer fields stay as they were.
pub(crate) fn rebuilt_batch(
    original: &BatchHeader,
    codec: i16,
    levels: Levels,
    plain: &[u8],
    count: usize,
    max_timestamp: i64,
) -> Vec<u8> {
    let header = BatchHeader {
        attributes: (original.attributes & !ATTR_COMPRESSION_MASK) | codec,
        max_timestamp,
        record_count: count as i32,
        ..*original
    };
    seal(&header, plain, levels)
}

/// `batch` with its records recompressed with `codec` (0: uncompressed) at `levels`, as a
/// topic's `compression.type` asks; the records themselves are unchanged. The result must be
/// validated again before it is appended.
pub fn recompress(
    batch: &ValidBatch,
    codec: i16,
    levels: Levels,
    decompressed_bytes_max: u64,
) -> Result<Bytes, BatchError> {
    let mut plain = Vec::new();
    let mut count = 0usize;
    for_each_stored_record(batch.bytes(), decompressed_bytes_max, &mut |_, record| {
        put_framed(&mut plain, record.raw.unwrap_or_default());
        count += 1;
    })?;
    let header = batch.header();
    Ok(Bytes::from(rebuilt_batch(
        header,
        codec,
        levels,
        &plain,
        count,
        header.max_timestamp,
    )))
}

#[cfg(test)]
mod tests {
    use weir_codec::compression::{CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD};

    use super::*;
    use crate::batch::{build_keyed_batch, ProducerFields};
    use crate::records::ValidationLimits;
    use crate::validate::validate;

    /// A record's key and value.
    type Contents = (Option<Vec<u8>>, Option<Vec<u8>>);

    /// (key, value) of every record of a stored or produced batch.
    fn contents(batch: &[u8]) -> Vec<Contents> {
        let mut out = Vec::new();
        for_each_stored_record(batch, 1 << 20, &mut |_, r| {
            out.push((r.key.map(<[u8]>::to_vec), r.value.map(<[u8]>::to_vec)));
        })
        .expect("readable");
        out
    }

    #[test]
    fn recompressing_keeps_the_records_and_makes_a_valid_batch() {
        let limits = ValidationLimits::unbounded_time(1 << 20);
        let records = [
            (Some(b"k1".as_slice()), Some(b"one".as_slice())),
            (None, Some(b"two".as_slice())),
            (Some(b"k3".as_slice()), None),
        ];
        let plain = Bytes::from(build_keyed_batch(&records, 1000, ProducerFields::NONE));
        let mut batch = validate(plain.clone(), &limits).expect("valid");
        for codec in [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD, 0] {
            let bytes = recompress(&batch, codec, Levels::DEFAULT, 1 << 20).expect("recompressed");
            batch = validate(bytes, &limits).expect("a recompressed batch validates");
            assert_eq!(batch.header().compression(), codec);
            assert_eq!(contents(batch.bytes()), contents(&plain), "codec {codec}");
            assert_eq!(batch.header().max_timestamp, 1000);
        }
    }
}
