//! The records of a v2 batch, walked once for every reader: the broker validating a produce,
//! finding a record by time, loading a compacted topic, and the client reading a fetch. Each
//! record's framing is checked (lengths, offset deltas, the record count, nothing after the
//! last record), compressed records are decompressed as a stream through a small buffer, and
//! nothing is allocated per record.
//!
//! Record layout (varints are zigzag): length varint | attributes i8 | timestampDelta varlong |
//! offsetDelta varint | keyLength varint | key | valueLength varint | value | headerCount varint
//! | per header: keyLength varint | key | valueLength varint | value.

use std::cell::RefCell;
use std::io::Read;
use std::ops::ControlFlow;

use crate::compression::{decompress, DecompressError, Records};
use crate::header::BatchHeader;
use crate::layout::BATCH_HEADER_BYTES;
use crate::varint::{next_in, read_varint, read_varlong, VarintError};

/// Why a batch's records cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordsError {
    /// Damaged bytes: compressed records that do not decompress (Kafka's CORRUPT_MESSAGE).
    Corrupt(String),
    /// Intact bytes that break the format's rules: framing, offset deltas, counts, a codec
    /// or a size past the bound (Kafka's INVALID_RECORD).
    Invalid(String),
}

impl std::fmt::Display for RecordsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordsError::Corrupt(reason) | RecordsError::Invalid(reason) => f.write_str(reason),
        }
    }
}

impl std::error::Error for RecordsError {}

impl From<VarintError> for RecordsError {
    fn from(error: VarintError) -> RecordsError {
        RecordsError::Invalid(error.to_string())
    }
}

/// Compressed records are decompressed into a buffer of this size, reused per thread: four
/// lz4 blocks, so a linked-block lz4 frame decompresses without copying its history around
/// (a 64 KiB buffer halves lz4's speed), and small enough to keep validation's memory low.
const STREAM_BUFFER_BYTES: usize = 256 * 1024;

fn invalid(message: impl Into<String>) -> RecordsError {
    RecordsError::Invalid(message.into())
}

fn premature_end() -> RecordsError {
    invalid("records end before the record count is reached")
}

/// A forward-only source of record bytes.
trait Source {
    fn byte(&mut self) -> Result<u8, RecordsError>;
    fn skip(&mut self, n: u64) -> Result<(), RecordsError>;
    /// The next `n` bytes: in place when the source holds them whole, else read into
    /// `scratch` (growing with the bytes actually read, so a lying length allocates nothing it
    /// cannot fill).
    fn take<'s>(&'s mut self, n: u64, scratch: &'s mut Vec<u8>) -> Result<&'s [u8], RecordsError>;
    /// Bytes consumed so far.
    fn consumed(&self) -> u64;
    /// True when no byte remains.
    fn at_end(&mut self) -> Result<bool, RecordsError>;
}

/// Uncompressed records, read in place.
struct SliceSource<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl Source for SliceSource<'_> {
    #[inline]
    fn byte(&mut self) -> Result<u8, RecordsError> {
        let b = *self.bytes.get(self.position).ok_or_else(premature_end)?;
        self.position += 1;
        Ok(b)
    }

    #[inline]
    fn skip(&mut self, n: u64) -> Result<(), RecordsError> {
        let left = (self.bytes.len() - self.position) as u64;
        if n > left {
            return Err(premature_end());
        }
        self.position += n as usize;
        Ok(())
    }

    #[inline]
    fn take<'s>(&'s mut self, n: u64, _: &'s mut Vec<u8>) -> Result<&'s [u8], RecordsError> {
        let start = self.position;
        self.skip(n)?;
        Ok(&self.bytes[start..self.position])
    }

    #[inline]
    fn consumed(&self) -> u64 {
        self.position as u64
    }

    #[inline]
    fn at_end(&mut self) -> Result<bool, RecordsError> {
        Ok(self.position == self.bytes.len())
    }
}

thread_local! {
    /// The decompression buffer of this thread, taken by a [`StreamSource`] and given back.
    static STREAM_BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Decompressed records, pulled through a fixed buffer from a decoder.
struct StreamSource<R> {
    reader: R,
    buffer: Vec<u8>,
    start: usize,
    end: usize,
    consumed: u64,
    /// Bytes pulled from the decoder so far, checked against `limit`.
    pulled: u64,
    limit: u64,
}

impl<R: Read> StreamSource<R> {
    fn new(reader: R, limit: u64) -> StreamSource<R> {
        let mut buffer = STREAM_BUFFER.with(|b| std::mem::take(&mut *b.borrow_mut()));
        buffer.resize(STREAM_BUFFER_BYTES, 0);
        StreamSource {
            reader,
            buffer,
            start: 0,
            end: 0,
            consumed: 0,
            pulled: 0,
            limit,
        }
    }

    /// Refills the buffer; false at the end of the stream.
    fn fill(&mut self) -> Result<bool, RecordsError> {
        loop {
            match self.reader.read(&mut self.buffer) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.pulled += n as u64;
                    if self.pulled > self.limit {
                        return Err(invalid(format!(
                            "records decompress to more than {} bytes",
                            self.limit
                        )));
                    }
                    self.start = 0;
                    self.end = n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(RecordsError::Corrupt(format!(
                        "compressed records do not decompress: {e}"
                    )))
                }
            }
        }
    }
}

impl<R> Drop for StreamSource<R> {
    fn drop(&mut self) {
        let buffer = std::mem::take(&mut self.buffer);
        STREAM_BUFFER.with(|b| *b.borrow_mut() = buffer);
    }
}

impl<R: Read> Source for StreamSource<R> {
    #[inline]
    fn byte(&mut self) -> Result<u8, RecordsError> {
        if self.start == self.end && !self.fill()? {
            return Err(premature_end());
        }
        let b = self.buffer[self.start];
        self.start += 1;
        self.consumed += 1;
        Ok(b)
    }

    fn skip(&mut self, mut n: u64) -> Result<(), RecordsError> {
        while n > 0 {
            if self.start == self.end && !self.fill()? {
                return Err(premature_end());
            }
            let take = ((self.end - self.start) as u64).min(n);
            self.start += take as usize;
            self.consumed += take;
            n -= take;
        }
        Ok(())
    }

    fn take<'s>(&'s mut self, mut n: u64, out: &'s mut Vec<u8>) -> Result<&'s [u8], RecordsError> {
        out.clear();
        while n > 0 {
            if self.start == self.end && !self.fill()? {
                return Err(premature_end());
            }
            let take = ((self.end - self.start) as u64).min(n) as usize;
            out.extend_from_slice(&self.buffer[self.start..self.start + take]);
            self.start += take;
            self.consumed += take as u64;
            n -= take as u64;
        }
        Ok(out)
    }

    fn consumed(&self) -> u64 {
        self.consumed
    }

    fn at_end(&mut self) -> Result<bool, RecordsError> {
        Ok(self.start == self.end && !self.fill()?)
    }
}

/// A zigzag varint of at most 5 bytes, as Kafka reads it.
#[inline]
fn varint(source: &mut impl Source) -> Result<i32, RecordsError> {
    read_varint(|| source.byte())
}

/// A zigzag varlong of at most 10 bytes.
#[inline]
fn varlong(source: &mut impl Source) -> Result<i64, RecordsError> {
    read_varlong(|| source.byte())
}

/// Skips a length-prefixed field; `-1` (null) is allowed only where `nullable`.
#[inline]
fn skip_field(source: &mut impl Source, nullable: bool, what: &str) -> Result<(), RecordsError> {
    let length = varint(source)?;
    match length {
        0.. => source.skip(length as u64),
        -1 if nullable => Ok(()),
        _ => Err(invalid(format!("{what} length {length} is invalid"))),
    }
}

/// A nullable length-prefixed field: where its bytes start (as counted by
/// [`Source::consumed`]) and how many there are; `None` when null.
fn field_range(source: &mut impl Source, what: &str) -> Result<Option<(u64, u64)>, RecordsError> {
    let length = varint(source)?;
    match length {
        0.. => {
            let at = source.consumed();
            source.skip(length as u64)?;
            Ok(Some((at, length as u64)))
        }
        -1 => Ok(None),
        _ => Err(invalid(format!("{what} length {length} is invalid"))),
    }
}

/// One record as the walk hands it over: its offset delta, its timestamp, and — when the walk
/// was asked to read them — its key, value, headers and whole body (`None` when null or not
/// read).
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    /// Offset delta from the batch's base offset (its index in a batch as produced; larger
    /// once compaction removed earlier records).
    pub index: i32,
    /// Absolute timestamp.
    pub timestamp: i64,
    /// The key.
    pub key: Option<&'a [u8]>,
    /// The value.
    pub value: Option<&'a [u8]>,
    /// The record's bytes after its length prefix, as stored.
    pub raw: Option<&'a [u8]>,
    /// Its headers as stored (their count, then each header), read with
    /// [`RecordRef::headers`].
    pub header_section: Option<&'a [u8]>,
    /// The record has a key (known whether or not the key was read).
    pub keyed: bool,
}

impl<'a> RecordRef<'a> {
    /// The record's headers in order (names may repeat), when the walk read them.
    pub fn headers(&self) -> Headers<'a> {
        let section = self.header_section.unwrap_or_default();
        let mut position = 0;
        let count = read_varint(|| next_in(section, &mut position)).unwrap_or(0);
        Headers {
            section,
            position,
            left: count.max(0),
        }
    }
}

/// The headers of one record, each a name and a nullable value ([`RecordRef::headers`]).
#[derive(Debug, Clone)]
pub struct Headers<'a> {
    section: &'a [u8],
    position: usize,
    left: i32,
}

impl<'a> Iterator for Headers<'a> {
    type Item = (&'a [u8], Option<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // The walk checked the framing; a section that does not parse ends the headers.
        let name = self.field()??;
        let value = self.field()?;
        Some((name, value))
    }
}

impl<'a> Headers<'a> {
    /// The next nullable length-prefixed field: `Some(None)` when null, `None` when the
    /// section does not hold one.
    fn field(&mut self) -> Option<Option<&'a [u8]>> {
        let length = read_varint(|| next_in(self.section, &mut self.position)).ok()?;
        if length < 0 {
            return Some(None);
        }
        let end = self.position.checked_add(length as usize)?;
        let field = self.section.get(self.position..end)?;
        self.position = end;
        Some(Some(field))
    }
}

/// The fields of one record body.
struct RecordFields {
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<(u64, u64)>,
    value: Option<(u64, u64)>,
    /// Where the header count starts.
    headers_at: u64,
}

/// Reads a record body of `length` bytes: every field's framing, and nothing more or less.
fn record_fields(
    source: &mut impl Source,
    index: i32,
    length: i32,
) -> Result<RecordFields, RecordsError> {
    let start = source.consumed();
    let _attributes = source.byte()?;
    let timestamp_delta = varlong(source)?;
    let offset_delta = varint(source)?;
    let key = field_range(source, "key")?;
    let value = field_range(source, "value")?;
    let headers_at = source.consumed();
    let header_count = varint(source)?;
    if header_count < 0 {
        return Err(invalid(format!(
            "record {index} has {header_count} headers"
        )));
    }
    for _ in 0..header_count {
        skip_field(source, false, "header key")?;
        skip_field(source, true, "header value")?;
        // A lying header count is caught here, not after billions of iterations.
        if source.consumed() - start > length as u64 {
            break;
        }
    }
    let read = source.consumed() - start;
    if read != length as u64 {
        return Err(invalid(format!(
            "record {index} declares {length} bytes but holds {read}"
        )));
    }
    Ok(RecordFields {
        timestamp_delta,
        offset_delta,
        key,
        value,
        headers_at,
    })
}

/// Walks the records, checking each one's framing and handing `visit` each record (with key,
/// value and body when `KEYS_AND_VALUES`); stops early when `visit` breaks, else checks that
/// nothing follows the last record. A batch as `PRODUCED` numbers its records 0, 1, 2, …; a
/// stored one may have gaps (compaction) but its offset deltas increase and stay within the
/// header's `lastOffsetDelta`.
fn walk_records<const KEYS_AND_VALUES: bool, const PRODUCED: bool, V>(
    source: &mut impl Source,
    header: &BatchHeader,
    visit: &mut V,
) -> Result<(), RecordsError>
where
    V: FnMut(RecordRef<'_>) -> Result<ControlFlow<()>, RecordsError>,
{
    let mut scratch = Vec::new();
    let mut previous_delta = -1;
    for index in 0..header.record_count {
        let length = varint(source)?;
        if length < 0 {
            return Err(invalid(format!("record {index} has length {length}")));
        }
        // The body, when asked for: in place in uncompressed records, else copied out of the
        // decompression buffer.
        let (fields, captured) = if KEYS_AND_VALUES {
            let body = source.take(length as u64, &mut scratch)?;
            let mut in_body = SliceSource {
                bytes: body,
                position: 0,
            };
            (record_fields(&mut in_body, index, length)?, Some(body))
        } else {
            (record_fields(source, index, length)?, None)
        };
        let delta = fields.offset_delta;
        let in_order = match PRODUCED {
            true => delta == index,
            false => delta > previous_delta && delta <= header.last_offset_delta,
        };
        if !in_order {
            return Err(invalid(format!("record {index} has offset delta {delta}")));
        }
        previous_delta = delta;
        let timestamp = header
            .base_timestamp
            .checked_add(fields.timestamp_delta)
            .ok_or_else(|| invalid(format!("record {index} timestamp overflows")))?;
        let slice = |range: Option<(u64, u64)>| {
            captured
                .zip(range)
                .map(|(b, (at, len))| &b[at as usize..(at + len) as usize])
        };
        let record = RecordRef {
            index: delta,
            timestamp,
            key: slice(fields.key),
            value: slice(fields.value),
            raw: captured,
            header_section: captured.map(|b| &b[fields.headers_at as usize..]),
            keyed: fields.key.is_some(),
        };
        if visit(record)?.is_break() {
            return Ok(());
        }
    }
    if !source.at_end()? {
        return Err(invalid(format!(
            "bytes remain after the {} records the batch declares",
            header.record_count
        )));
    }
    Ok(())
}

/// Walks every record of `batch` (whose header was checked against its bytes: its length,
/// CRC and counts), decompressing as a stream, no further than `limit` decompressed bytes, and
/// hands each to `visit`, which may stop the walk. `KEYS_AND_VALUES` reads each record's key,
/// value and headers (else only its offset and timestamp, and nothing is copied); a batch as
/// `PRODUCED` must number its records 0, 1, 2, …, a stored one (compacted) only in order.
pub fn each_record<const KEYS_AND_VALUES: bool, const PRODUCED: bool, V>(
    batch: &[u8],
    header: &BatchHeader,
    limit: u64,
    visit: &mut V,
) -> Result<(), RecordsError>
where
    V: FnMut(RecordRef<'_>) -> Result<ControlFlow<()>, RecordsError>,
{
    let payload = &batch[BATCH_HEADER_BYTES..];
    let records =
        decompress(header.compression(), payload, limit).map_err(|error| match error {
            DecompressError::Corrupt { .. } => RecordsError::Corrupt(error.to_string()),
            DecompressError::TooLarge { .. } | DecompressError::UnknownCodec(_) => {
                invalid(error.to_string())
            }
        })?;
    match records {
        Records::Plain(bytes) => walk_records::<KEYS_AND_VALUES, PRODUCED, _>(
            &mut SliceSource { bytes, position: 0 },
            header,
            visit,
        ),
        Records::Decompressed(plain) => walk_records::<KEYS_AND_VALUES, PRODUCED, _>(
            &mut SliceSource {
                bytes: &plain,
                position: 0,
            },
            header,
            visit,
        ),
        Records::Stream(decoder) => walk_records::<KEYS_AND_VALUES, PRODUCED, _>(
            &mut StreamSource::new(decoder, limit),
            header,
            visit,
        ),
    }
}
