//! Compression of a batch's records as Kafka's codecs write and read them: [`compress`] for a
//! batch being written (snappy in the xerial framing the Java client writes, which every
//! client reads), and [`decompress`] for one being read, bounded: a stream for gzip, lz4, zstd
//! and xerial snappy (pulled through whatever buffer the reader keeps), raw snappy (librdkafka's)
//! checked against the bound before it is decompressed whole.

use std::io::{Read, Write};

/// Codec ids in the batch attributes.
pub const CODEC_NONE: i16 = 0;
/// gzip.
pub const CODEC_GZIP: i16 = 1;
/// snappy, raw or in the xerial framing.
pub const CODEC_SNAPPY: i16 = 2;
/// lz4 frames.
pub const CODEC_LZ4: i16 = 3;
/// zstd frames.
pub const CODEC_ZSTD: i16 = 4;

/// Largest zstd window accepted, as a power of two (32 MiB). Every non-"ultra" zstd level
/// (1–19) and level 20 fit; a frame asking for more would make the decoder allocate it.
const ZSTD_WINDOW_LOG_MAX: u32 = 25;
/// Snappy framing used by the Java client (xerial): this magic, then version fields.
pub const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
/// Size of the xerial header: magic (8), version (4), compatible version (4).
const XERIAL_HEADER_BYTES: usize = 16;
/// Most bytes a raw snappy block may decompress to, whatever the caller's bound: raw snappy
/// is decompressed whole into memory, unlike the streamed codecs.
const RAW_SNAPPY_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// Bytes of input per xerial snappy block, as the Java client writes them.
const XERIAL_BLOCK_BYTES: usize = 32 * 1024;

/// Compression levels, as the topic configs `compression.gzip.level`, `compression.lz4.level`
/// and `compression.zstd.level` give them (Kafka's defaults in [`Levels::DEFAULT`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Levels {
    /// 1–9, or -1 for zlib's default.
    pub gzip: i32,
    /// 1–17.
    pub lz4: i32,
    /// zstd's levels, negative ones included.
    pub zstd: i32,
}

impl Levels {
    /// Kafka's defaults (and the Java client's).
    pub const DEFAULT: Levels = Levels {
        gzip: -1,
        lz4: 9,
        zstd: 3,
    };
}

/// `plain` records compressed with `codec` at `levels` (0 leaves them as they are; an unknown
/// codec cannot occur: stored batches passed validation).
pub fn compress(codec: i16, plain: &[u8], levels: Levels) -> Vec<u8> {
    // Writing into memory cannot fail; the encoders only report I/O errors of their sink.
    match codec {
        CODEC_GZIP => {
            let level = u32::try_from(levels.gzip)
                .map(flate2::Compression::new)
                .unwrap_or_default();
            let mut encoder = flate2::write::GzEncoder::new(Vec::new(), level);
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
            // Independent blocks: Kafka and the Java client read only those ("Dependent block
            // stream is unsupported"), and the lz4 crate links blocks by default.
            let mut encoder = lz4::EncoderBuilder::new()
                .block_mode(lz4::BlockMode::Independent)
                .level(u32::try_from(levels.lz4).unwrap_or(0))
                .build(Vec::new())
                .expect("in-memory lz4");
            encoder.write_all(plain).expect("in-memory lz4");
            let (out, result) = encoder.finish();
            result.expect("in-memory lz4");
            out
        }
        CODEC_ZSTD => zstd::encode_all(plain, levels.zstd).expect("in-memory zstd"),
        _ => plain.to_vec(),
    }
}

/// Why compressed records could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecompressError {
    /// The payload is not what its codec writes.
    Corrupt {
        /// The codec's name.
        codec: &'static str,
        /// What its decoder said.
        reason: String,
    },
    /// The records would decompress to more than the bound.
    TooLarge {
        /// The bound.
        limit: u64,
    },
    /// A codec id no Kafka client writes.
    UnknownCodec(i16),
}

impl std::fmt::Display for DecompressError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecompressError::Corrupt { codec, reason } => {
                write!(f, "{codec} payload does not decompress: {reason}")
            }
            DecompressError::TooLarge { limit } => {
                write!(f, "records decompress to more than {limit} bytes")
            }
            DecompressError::UnknownCodec(codec) => write!(f, "unknown compression codec {codec}"),
        }
    }
}

impl std::error::Error for DecompressError {}

fn corrupt(codec: &'static str, error: impl std::fmt::Display) -> DecompressError {
    DecompressError::Corrupt {
        codec,
        reason: error.to_string(),
    }
}

/// A batch's records, as [`decompress`] gives them.
pub enum Records<'a> {
    /// Stored as they are (no codec).
    Plain(&'a [u8]),
    /// Decompressed whole (raw snappy), within the bound.
    Decompressed(Vec<u8>),
    /// Decompressing as they are read; the reader counts what it pulls against the bound.
    Stream(Decoder<'a>),
}

/// A streaming decoder of one codec.
pub enum Decoder<'a> {
    /// gzip (members one after another, as Kafka reads them).
    Gzip(flate2::read::MultiGzDecoder<&'a [u8]>),
    /// xerial-framed snappy.
    Xerial(XerialReader<'a>),
    /// lz4 frames.
    Lz4(lz4::Decoder<&'a [u8]>),
    /// zstd frames, their window bounded.
    Zstd(zstd::stream::read::Decoder<'a, &'a [u8]>),
}

impl Read for Decoder<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Decoder::Gzip(decoder) => decoder.read(out),
            Decoder::Xerial(decoder) => decoder.read(out),
            Decoder::Lz4(decoder) => decoder.read(out),
            Decoder::Zstd(decoder) => decoder.read(out),
        }
    }
}

/// The records of a batch whose attributes name `codec`, from its `payload`: nothing is
/// decompressed beyond `limit` bytes (a stream's reader checks what it pulls; xerial blocks
/// and raw snappy are checked before they are decompressed).
pub fn decompress(codec: i16, payload: &[u8], limit: u64) -> Result<Records<'_>, DecompressError> {
    let stream = match codec {
        CODEC_NONE => return Ok(Records::Plain(payload)),
        CODEC_GZIP => Decoder::Gzip(flate2::read::MultiGzDecoder::new(payload)),
        CODEC_SNAPPY if payload.starts_with(XERIAL_MAGIC) => {
            let blocks = payload
                .get(XERIAL_HEADER_BYTES..)
                .ok_or_else(|| corrupt("snappy", "shorter than its header"))?;
            Decoder::Xerial(XerialReader {
                input: blocks,
                block: Vec::new(),
                position: 0,
                budget: limit,
            })
        }
        CODEC_SNAPPY => {
            // Raw snappy (librdkafka): one block; its decompressed size is in its preamble.
            let size = snap::raw::decompress_len(payload).map_err(|e| corrupt("snappy", e))?;
            let limit = limit.min(RAW_SNAPPY_BYTES_MAX);
            if size as u64 > limit {
                return Err(DecompressError::TooLarge { limit });
            }
            let plain = snap::raw::Decoder::new()
                .decompress_vec(payload)
                .map_err(|e| corrupt("snappy", e))?;
            return Ok(Records::Decompressed(plain));
        }
        CODEC_LZ4 => Decoder::Lz4(lz4::Decoder::new(payload).map_err(|e| corrupt("lz4", e))?),
        CODEC_ZSTD => {
            let mut decoder = zstd::stream::read::Decoder::with_buffer(payload)
                .map_err(|e| corrupt("zstd", e))?;
            decoder
                .window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(|e| corrupt("zstd", e))?;
            Decoder::Zstd(decoder)
        }
        other => return Err(DecompressError::UnknownCodec(other)),
    };
    Ok(Records::Stream(stream))
}

/// The xerial framing the Java client writes: a header, then blocks of
/// `[u32 compressed length][raw snappy block]`, decompressed one block at a time.
pub struct XerialReader<'a> {
    input: &'a [u8],
    block: Vec<u8>,
    position: usize,
    budget: u64,
}

impl Read for XerialReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.position == self.block.len() {
            if self.input.is_empty() {
                return Ok(0);
            }
            let (length, rest) = self
                .input
                .split_first_chunk::<4>()
                .ok_or_else(|| std::io::Error::other("truncated snappy block length"))?;
            let length = u32::from_be_bytes(*length) as usize;
            if rest.len() < length {
                return Err(std::io::Error::other("truncated snappy block"));
            }
            let (compressed, rest) = rest.split_at(length);
            self.input = rest;
            let size = snap::raw::decompress_len(compressed).map_err(std::io::Error::other)?;
            if size as u64 > self.budget {
                return Err(std::io::Error::other("snappy block larger than allowed"));
            }
            self.budget -= size as u64;
            self.block.resize(size, 0);
            snap::raw::Decoder::new()
                .decompress(compressed, &mut self.block)
                .map_err(std::io::Error::other)?;
            self.position = 0;
        }
        let n = out.len().min(self.block.len() - self.position);
        out[..n].copy_from_slice(&self.block[self.position..self.position + n]);
        self.position += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The records of a batch decompressed whole into memory, at most `limit` bytes.
    fn decompress_all(codec: i16, payload: &[u8], limit: u64) -> Result<Vec<u8>, DecompressError> {
        match decompress(codec, payload, limit)? {
            Records::Plain(bytes) => Ok(bytes.to_vec()),
            Records::Decompressed(plain) => Ok(plain),
            Records::Stream(decoder) => {
                let mut plain = Vec::new();
                decoder
                    .take(limit.saturating_add(1))
                    .read_to_end(&mut plain)
                    .map_err(|e| corrupt("compressed records", e))?;
                if plain.len() as u64 > limit {
                    return Err(DecompressError::TooLarge { limit });
                }
                Ok(plain)
            }
        }
    }

    #[test]
    fn lz4_frames_have_independent_blocks_as_kafka_requires() {
        let framed = compress(CODEC_LZ4, &[7u8; 200_000], Levels::DEFAULT);
        assert_eq!(framed[..4], [0x04, 0x22, 0x4d, 0x18], "the lz4 frame magic");
        // FLG: version 01, block independence (bit 5) set, as Kafka's reader demands.
        assert_eq!(framed[4] & 0xc0, 0x40);
        assert_ne!(framed[4] & 0x20, 0, "blocks must not be linked");
    }

    #[test]
    fn every_codec_reads_back_what_it_wrote_within_its_bound() {
        let plain: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_be_bytes())
            .collect();
        for codec in [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD] {
            let compressed = compress(codec, &plain, Levels::DEFAULT);
            let limit = plain.len() as u64;
            assert_eq!(
                decompress_all(codec, &compressed, limit).as_deref(),
                Ok(plain.as_slice()),
                "codec {codec}"
            );
            if codec != CODEC_NONE {
                // xerial snappy refuses the block that would pass the bound as it reads it.
                let refused = decompress_all(codec, &compressed, limit - 1);
                assert!(
                    matches!(
                        refused,
                        Err(DecompressError::TooLarge { limit: l }) if l == limit - 1
                    ) || (codec == CODEC_SNAPPY && refused.is_err()),
                    "codec {codec}: {refused:?}"
                );
            }
        }
        let raw_snappy = snap::raw::Encoder::new()
            .compress_vec(&plain)
            .expect("snappy");
        assert_eq!(
            decompress_all(CODEC_SNAPPY, &raw_snappy, plain.len() as u64).as_deref(),
            Ok(plain.as_slice())
        );
        assert!(matches!(
            decompress_all(CODEC_GZIP, b"not gzip", 100),
            Err(DecompressError::Corrupt {
                codec: "compressed records",
                ..
            })
        ));
        assert_eq!(
            decompress_all(6, b"", 100),
            Err(DecompressError::UnknownCodec(6))
        );
    }
}
