//! The cost of validating every record before an append, per codec: batches of 1000 records
//! of 100 bytes (the shape of a busy producer's batch), validated in a loop.
//!
//! `cargo bench -p weir-log --bench validate` (`WEIR_BENCH_SECONDS` per codec, default 2).
//! Prints records/s and MB/s of record bytes (after decompression) per codec.

use std::io::Write;
use std::time::{Duration, Instant};

use bytes::Bytes;
use weir_codec::layout::{
    put_i16_at, put_i32_at, put_u32_at, ATTRIBUTES_AT, BATCH_HEADER_BYTES, BATCH_LENGTH_AT, CRC_AT,
    LAST_OFFSET_DELTA_AT, LOG_OVERHEAD_BYTES, RECORD_COUNT_AT,
};
use weir_codec::varint::put_varlong;
use weir_log::batch::{batch_crc, build_batch, ProducerFields};
use weir_log::{validate, ValidationLimits};

const RECORDS: usize = 1000;
const VALUE_BYTES: usize = 100;

fn records() -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..RECORDS {
        // Values like log lines: compressible, not trivially.
        let value = format!(
            "{i:08} user=u{} action=click page=/items/{} ok",
            i % 97,
            i % 1013
        );
        let value = format!("{value:<width$}", width = VALUE_BYTES);
        let mut body = vec![0u8];
        put_varlong(&mut body, i as i64);
        put_varlong(&mut body, i as i64);
        put_varlong(&mut body, 8);
        body.extend_from_slice(&(i as u64).to_be_bytes());
        put_varlong(&mut body, value.len() as i64);
        body.extend_from_slice(value.as_bytes());
        put_varlong(&mut body, 0);
        put_varlong(&mut out, body.len() as i64);
        out.extend_from_slice(&body);
    }
    out
}

fn compress(codec: i16, plain: &[u8]) -> Vec<u8> {
    match codec {
        0 => plain.to_vec(),
        1 => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(plain).expect("gzip");
            e.finish().expect("gzip")
        }
        2 => snap::raw::Encoder::new()
            .compress_vec(plain)
            .expect("snappy"),
        3 | 5 => {
            let mut builder = lz4::EncoderBuilder::new();
            if codec == 3 {
                // Independent blocks without a content checksum, as the Java client and
                // librdkafka write them; codec 5 here is lz4's default linked blocks.
                builder
                    .block_mode(lz4::BlockMode::Independent)
                    .checksum(lz4::ContentChecksum::NoChecksum);
            }
            let mut e = builder.build(Vec::new()).expect("lz4");
            e.write_all(plain).expect("lz4");
            let (out, result) = e.finish();
            result.expect("lz4");
            out
        }
        _ => zstd::encode_all(plain, 3).expect("zstd"),
    }
}

fn batch(codec: i16, plain: &[u8]) -> Bytes {
    let mut out = build_batch(&[], 0, ProducerFields::NONE);
    out.truncate(BATCH_HEADER_BYTES);
    out.extend_from_slice(&compress(codec, plain));
    let length = (out.len() - LOG_OVERHEAD_BYTES) as i32;
    put_i32_at(&mut out, BATCH_LENGTH_AT, length);
    let attribute: i16 = if codec == 5 { 3 } else { codec };
    put_i16_at(&mut out, ATTRIBUTES_AT, attribute);
    put_i32_at(&mut out, LAST_OFFSET_DELTA_AT, RECORDS as i32 - 1);
    put_i32_at(&mut out, RECORD_COUNT_AT, RECORDS as i32);
    let crc = batch_crc(&out);
    put_u32_at(&mut out, CRC_AT, crc);
    Bytes::from(out)
}

fn main() {
    let seconds: f64 = std::env::var("WEIR_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let plain = records();
    let limits = ValidationLimits::unbounded_time(64 << 20);
    println!("| codec | batch bytes | records/s | MB/s (records) | µs per batch |");
    println!("|---|---:|---:|---:|---:|");
    for (codec, name) in [
        (0, "none"),
        (1, "gzip"),
        (2, "snappy"),
        (3, "lz4"),
        (4, "zstd"),
    ] {
        let bytes = batch(codec, &plain);
        validate(bytes.clone(), &limits).expect("valid");
        let started = Instant::now();
        let mut batches = 0u64;
        while started.elapsed() < Duration::from_secs_f64(seconds) {
            for _ in 0..16 {
                validate(bytes.clone(), &limits).expect("valid");
            }
            batches += 16;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let records_per_s = batches as f64 * RECORDS as f64 / elapsed;
        let mb_per_s = batches as f64 * plain.len() as f64 / elapsed / 1e6;
        println!(
            "| {name} | {} | {records_per_s:.0} | {mb_per_s:.0} | {:.1} |",
            bytes.len(),
            elapsed / batches as f64 * 1e6
        );
    }
}
