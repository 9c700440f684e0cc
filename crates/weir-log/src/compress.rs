//! Compressing records with a batch's codec, for the batches the cleaner rewrites. Snappy is
//! written in the xerial framing the Java client uses (every Kafka client reads it).

use std::io::Write;

use crate::records::{CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD, XERIAL_MAGIC};

/// Bytes of input per xerial snappy block, as the Java client writes them.
const XERIAL_BLOCK_BYTES: usize = 32 * 1024;
/// zstd level of rewritten batches (the Java client's default).
const ZSTD_LEVEL: i32 = 3;

/// `plain` records compressed with `codec` (0 leaves them as they are; an unknown codec
/// cannot occur: stored batches passed validation).
pub fn compress(codec: i16, plain: &[u8]) -> Vec<u8> {
    // Writing into memory cannot fail; the encoders only report I/O errors of their sink.
    match codec {
        CODEC_GZIP => {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(plain).expect("in-memory gzip");
            encoder.finish().expect("in-memory gzip")
        }
        CODEC_SNAPPY => {
            let mut out = Vec::with_capacity(plain.len() / 2 + 16);
            out.extend_from_slice(XERIAL_MAGIC);
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            let mut encoder = snap::raw::Encoder::new();
            for block in plain.chunks(XERIAL_BLOCK_BYTES) {
                let compressed = encoder.compress_vec(block).expect("in-memory snappy");
                out.extend_from_slice(&(compressed.len() as i32).to_be_bytes());
                out.extend_from_slice(&compressed);
            }
            out
        }
        CODEC_LZ4 => {
            let mut encoder = lz4::EncoderBuilder::new()
                .build(Vec::new())
                .expect("in-memory lz4");
            encoder.write_all(plain).expect("in-memory lz4");
            let (out, result) = encoder.finish();
            result.expect("in-memory lz4");
            out
        }
        CODEC_ZSTD => zstd::encode_all(plain, ZSTD_LEVEL).expect("in-memory zstd"),
        _ => plain.to_vec(),
    }
}
