//! The records of `__transaction_state`, as Apache Kafka writes them, so the topic means the
//! same to Kafka's tools: the key is `TransactionLogKey` v0 (the transactional id), the value
//! `TransactionLogValue`, written at v1 (the flexible version, whose tagged fields carry the
//! previous and next producer ids and the client's transaction version) and read at v0 or
//! v1. A null value is a tombstone: the transactional id expired.

use std::collections::{BTreeMap, BTreeSet};

use weir_codec::varint::put_uvarint;

use super::state::TxnState;
use crate::records::{malformed, put_string, FormatError, Reader};

/// Key version Kafka writes.
const KEY_VERSION: i16 = 0;
/// Value version written: the first flexible one.
const VALUE_VERSION: i16 = 1;
/// Tag of the previous producer id (v1).
const TAG_PREVIOUS_PRODUCER_ID: u32 = 0;
/// Tag of the next producer id (v1).
const TAG_NEXT_PRODUCER_ID: u32 = 1;
/// Tag of the client's transaction version (v1).
const TAG_CLIENT_TRANSACTION_VERSION: u32 = 2;

/// Partitions by topic.
pub type TxnPartitions = BTreeMap<String, BTreeSet<i32>>;

/// What the log holds of one transactional id: its producer, and its transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnValue {
    /// The producer id in use.
    pub producer_id: i64,
    /// The producer id the last committed transaction used, when the id changed since; -1.
    pub previous_producer_id: i64,
    /// The producer id handed to the producer next, during an id rotation; -1.
    pub next_producer_id: i64,
    /// The epoch of the producer id in use.
    pub producer_epoch: i16,
    /// `transaction.timeout.ms` the producer asked for.
    pub timeout_ms: i32,
    /// Where the transaction is.
    pub state: TxnState,
    /// Partitions in the transaction.
    pub partitions: TxnPartitions,
    /// When it last changed (ms since the epoch).
    pub last_update_ms: i64,
    /// When the transaction began, or -1.
    pub start_ms: i64,
    /// The transaction protocol version the client uses (0–2).
    pub client_transaction_version: i16,
}

/// The key's bytes for `transactional_id`.
pub fn encode_key(transactional_id: &str) -> Vec<u8> {
    let mut out = KEY_VERSION.to_be_bytes().to_vec();
    put_string(&mut out, transactional_id);
    out
}

/// Reads a key: the transactional id.
pub fn decode_key(bytes: &[u8]) -> Result<String, FormatError> {
    let mut r = Reader::new(bytes);
    match r.i16()? {
        KEY_VERSION => {}
        other => return Err(malformed(format!("transaction log key version {other}"))),
    }
    let id = r.string()?;
    r.finish()?;
    Ok(id)
}

impl TxnValue {
    /// The value's bytes, at v1.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = VALUE_VERSION.to_be_bytes().to_vec();
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.extend_from_slice(&self.timeout_ms.to_be_bytes());
        out.push(self.state.code());
        put_uvarint(&mut out, self.partitions.len() as u32 + 1);
        for (topic, partitions) in &self.partitions {
            put_uvarint(&mut out, topic.len() as u32 + 1);
            out.extend_from_slice(topic.as_bytes());
            put_uvarint(&mut out, partitions.len() as u32 + 1);
            for partition in partitions {
                out.extend_from_slice(&partition.to_be_bytes());
            }
            put_uvarint(&mut out, 0);
        }
        out.extend_from_slice(&self.last_update_ms.to_be_bytes());
        out.extend_from_slice(&self.start_ms.to_be_bytes());
        let mut tags: Vec<(u32, Vec<u8>)> = Vec::new();
        if self.previous_producer_id != -1 {
            let bytes = self.previous_producer_id.to_be_bytes().to_vec();
            tags.push((TAG_PREVIOUS_PRODUCER_ID, bytes));
        }
        if self.next_producer_id != -1 {
            let bytes = self.next_producer_id.to_be_bytes().to_vec();
            tags.push((TAG_NEXT_PRODUCER_ID, bytes));
        }
        if self.client_transaction_version != 0 {
            let bytes = self.client_transaction_version.to_be_bytes().to_vec();
            tags.push((TAG_CLIENT_TRANSACTION_VERSION, bytes));
        }
        put_uvarint(&mut out, tags.len() as u32);
        for (tag, bytes) in tags {
            put_uvarint(&mut out, tag);
            put_uvarint(&mut out, bytes.len() as u32);
            out.extend_from_slice(&bytes);
        }
        out
    }

    /// Reads a value of version 0 or 1.
    pub fn decode(bytes: &[u8]) -> Result<TxnValue, FormatError> {
        let mut r = Reader::new(bytes);
        let version = r.i16()?;
        if !matches!(version, 0 | 1) {
            return Err(malformed(format!(
                "transaction log value version {version}"
            )));
        }
        let flexible = version >= 1;
        let producer_id = r.i64()?;
        let producer_epoch = r.i16()?;
        let timeout_ms = r.i32()?;
        let code = r.take(1)?[0];
        let state = TxnState::from_code(code)
            .ok_or_else(|| malformed(format!("transaction state {code}")))?;
        let partitions = if flexible {
            compact_partitions(&mut r)?
        } else {
            classic_partitions(&mut r)?
        };
        let mut value = TxnValue {
            producer_id,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch,
            timeout_ms,
            state,
            partitions,
            last_update_ms: r.i64()?,
            start_ms: r.i64()?,
            client_transaction_version: 0,
        };
        if flexible {
            for _ in 0..r.unsigned_varint()? {
                let tag = r.unsigned_varint()?;
                let size = r.unsigned_varint()? as usize;
                let mut field = Reader::new(r.take(size)?);
                match tag {
                    TAG_PREVIOUS_PRODUCER_ID => value.previous_producer_id = field.i64()?,
                    TAG_NEXT_PRODUCER_ID => value.next_producer_id = field.i64()?,
                    TAG_CLIENT_TRANSACTION_VERSION => {
                        value.client_transaction_version = field.i16()?;
                    }
                    _ => continue,
                }
                field.finish()?;
            }
        }
        r.finish()?;
        Ok(value)
    }
}

/// The partitions of a v1 value (a compact, nullable array; each topic with tagged fields).
fn compact_partitions(r: &mut Reader<'_>) -> Result<TxnPartitions, FormatError> {
    let mut out = TxnPartitions::new();
    let topics = r.unsigned_varint()? as usize;
    // Null (0) holds nothing; each topic takes at least 3 bytes.
    let topics = bounded(r, topics.saturating_sub(1), 3)?;
    for _ in 0..topics {
        let topic = r.compact_string()?;
        let count = r.compact_len(4)?;
        let partitions = out.entry(topic).or_default();
        for _ in 0..count {
            partitions.insert(r.i32()?);
        }
        r.tagged_fields()?;
    }
    Ok(out)
}

/// The partitions of a v0 value (a nullable array with an `i32` length).
fn classic_partitions(r: &mut Reader<'_>) -> Result<TxnPartitions, FormatError> {
    let mut out = TxnPartitions::new();
    let topics = usize::try_from(r.i32()?).unwrap_or(0);
    // Each topic takes at least 6 bytes.
    for _ in 0..bounded(r, topics, 6)? {
        let topic = r.string()?;
        let count = usize::try_from(r.i32()?).unwrap_or(0);
        let partitions = out.entry(topic).or_default();
        for _ in 0..bounded(r, count, 4)? {
            partitions.insert(r.i32()?);
        }
    }
    Ok(out)
}

/// `count` elements of at least `min_size` bytes each must fit in what is left.
fn bounded(r: &Reader<'_>, count: usize, min_size: usize) -> Result<usize, FormatError> {
    if count.saturating_mul(min_size) > r.remaining() {
        return Err(malformed("array longer than the record"));
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn state() -> impl Strategy<Value = TxnState> {
        (0u8..=7).prop_map(|code| TxnState::from_code(code).expect("a state"))
    }

    fn value() -> impl Strategy<Value = TxnValue> {
        (
            (any::<i64>(), -1i64..3, -1i64..3, any::<i16>(), any::<i32>()),
            state(),
            proptest::collection::btree_map(
                "[a-z]{1,5}",
                proptest::collection::btree_set(0i32..100, 0..4),
                0..3,
            ),
            (any::<i64>(), any::<i64>(), 0i16..3),
        )
            .prop_map(
                |(
                    (
                        producer_id,
                        previous_producer_id,
                        next_producer_id,
                        producer_epoch,
                        timeout_ms,
                    ),
                    state,
                    partitions,
                    (last_update_ms, start_ms, client_transaction_version),
                )| TxnValue {
                    producer_id,
                    previous_producer_id,
                    next_producer_id,
                    producer_epoch,
                    timeout_ms,
                    state,
                    partitions,
                    last_update_ms,
                    start_ms,
                    client_transaction_version,
                },
            )
    }

    proptest! {
        #[test]
        fn a_value_reads_back_as_written(value in value()) {
            prop_assert_eq!(TxnValue::decode(&value.encode()), Ok(value));
        }

        #[test]
        fn a_key_reads_back_as_written(id in "\\PC{0,40}") {
            prop_assert_eq!(decode_key(&encode_key(&id)), Ok(id));
        }

        #[test]
        fn any_bytes_decode_or_fail_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = TxnValue::decode(&bytes);
            let _ = decode_key(&bytes);
        }
    }

    /// A v0 value as Kafka 2.x–3.x wrote it (no tagged fields, `i32` lengths).
    #[test]
    fn a_version_zero_value_is_read() {
        let mut bytes = 0i16.to_be_bytes().to_vec();
        bytes.extend_from_slice(&42i64.to_be_bytes());
        bytes.extend_from_slice(&3i16.to_be_bytes());
        bytes.extend_from_slice(&60_000i32.to_be_bytes());
        bytes.push(1); // Ongoing
        bytes.extend_from_slice(&1i32.to_be_bytes());
        put_string(&mut bytes, "orders");
        bytes.extend_from_slice(&2i32.to_be_bytes());
        bytes.extend_from_slice(&0i32.to_be_bytes());
        bytes.extend_from_slice(&5i32.to_be_bytes());
        bytes.extend_from_slice(&1_000i64.to_be_bytes());
        bytes.extend_from_slice(&900i64.to_be_bytes());
        let value = TxnValue::decode(&bytes).expect("a v0 value");
        assert_eq!(value.producer_id, 42);
        assert_eq!(value.producer_epoch, 3);
        assert_eq!(value.state, TxnState::Ongoing);
        assert_eq!(
            value.partitions,
            TxnPartitions::from([("orders".to_string(), BTreeSet::from([0, 5]))])
        );
        assert_eq!((value.last_update_ms, value.start_ms), (1_000, 900));
        assert_eq!(value.previous_producer_id, -1);
    }
}
