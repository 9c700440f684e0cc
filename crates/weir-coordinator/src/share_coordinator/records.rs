//! The records of `__share_group_state`, as Apache Kafka 4.4 writes them: the key is
//! `ShareSnapshotKey` (type 0) or `ShareUpdateKey` (type 1), each the group, the topic's id and
//! the partition; the values are `ShareSnapshotValue` (a share-partition's whole state) and
//! `ShareUpdateValue` (state batches changed since the snapshot), both at the flexible version
//! 0. A null value is a tombstone: the share-partition's state was deleted.

use uuid::Uuid;
use weir_codec::varint::put_uvarint;

use crate::records::{malformed, put_string, FormatError, Reader};

/// Record type (key version) of a snapshot.
const SNAPSHOT_TYPE: i16 = 0;
/// Record type (key version) of an update.
const UPDATE_TYPE: i16 = 1;
/// Value version of both.
const VALUE_VERSION: i16 = 0;
/// Tag of `DeliveryCompleteCount`.
const TAG_DELIVERY_COMPLETE_COUNT: u32 = 0;
/// Bytes one state batch takes: two offsets, a state, a count, no tagged fields.
const BATCH_BYTES: usize = 8 + 8 + 1 + 2 + 1;

/// A share-partition: a share group's view of one partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SharePartitionKey {
    /// The share group.
    pub group: String,
    /// The topic's id.
    pub topic_id: Uuid,
    /// The partition.
    pub partition: i32,
}

impl SharePartitionKey {
    /// The key that places it on `__share_group_state` (Kafka's `asCoordinatorKey`:
    /// `group:topicId:partition`, the id in Kafka's base64 form).
    pub fn coordinator_key(&self) -> String {
        use base64::Engine;
        let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.topic_id.as_bytes());
        format!("{}:{id}:{}", self.group, self.partition)
    }
}

/// Consecutive offsets with one delivery state and count, as stored and sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PersistedBatch {
    /// First offset.
    pub first_offset: i64,
    /// Last offset.
    pub last_offset: i64,
    /// 0 available, 2 acknowledged, 4 archived.
    pub delivery_state: i8,
    /// Deliveries so far.
    pub delivery_count: i16,
}

/// A share-partition's whole state (`ShareSnapshotValue`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareSnapshot {
    /// Counts the snapshots of the share-partition.
    pub snapshot_epoch: i32,
    /// The state's epoch: raised when its offsets are reset or it is initialized again.
    pub state_epoch: i32,
    /// The partition leader epoch of the last leader to read or write it.
    pub leader_epoch: i32,
    /// The share-partition start offset (SPSO).
    pub start_offset: i64,
    /// Offsets from the start whose delivery is complete, or -1.
    pub delivery_complete_count: i32,
    /// When the state was created (ms since the epoch).
    pub create_ms: i64,
    /// When it was written last.
    pub write_ms: i64,
    /// The records in flight, in offset order.
    pub batches: Vec<PersistedBatch>,
}

/// State batches changed since a snapshot (`ShareUpdateValue`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareUpdate {
    /// The snapshot it follows.
    pub snapshot_epoch: i32,
    /// The leader epoch of its writer.
    pub leader_epoch: i32,
    /// The new start offset, or -1 (unchanged).
    pub start_offset: i64,
    /// As [`ShareSnapshot::delivery_complete_count`].
    pub delivery_complete_count: i32,
    /// The batches that changed.
    pub batches: Vec<PersistedBatch>,
}

/// A record's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShareValue {
    /// A snapshot.
    Snapshot(ShareSnapshot),
    /// An update.
    Update(ShareUpdate),
}

/// One record of `__share_group_state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareRecord {
    /// Whose state.
    pub key: SharePartitionKey,
    /// Whether its key is the snapshot key (else the update key).
    pub snapshot_key: bool,
    /// `None`: a tombstone.
    pub value: Option<ShareValue>,
}

impl ShareRecord {
    /// The key's bytes.
    pub fn encode_key(&self) -> Vec<u8> {
        let kind = if self.snapshot_key {
            SNAPSHOT_TYPE
        } else {
            UPDATE_TYPE
        };
        let mut out = kind.to_be_bytes().to_vec();
        put_string(&mut out, &self.key.group);
        out.extend_from_slice(self.key.topic_id.as_bytes());
        out.extend_from_slice(&self.key.partition.to_be_bytes());
        out
    }

    /// The value's bytes, `None` for a tombstone.
    pub fn encode_value(&self) -> Option<Vec<u8>> {
        let value = self.value.as_ref()?;
        let mut out = VALUE_VERSION.to_be_bytes().to_vec();
        let (count, batches) = match value {
            ShareValue::Snapshot(snapshot) => {
                out.extend_from_slice(&snapshot.snapshot_epoch.to_be_bytes());
                out.extend_from_slice(&snapshot.state_epoch.to_be_bytes());
                out.extend_from_slice(&snapshot.leader_epoch.to_be_bytes());
                out.extend_from_slice(&snapshot.start_offset.to_be_bytes());
                out.extend_from_slice(&snapshot.create_ms.to_be_bytes());
                out.extend_from_slice(&snapshot.write_ms.to_be_bytes());
                (snapshot.delivery_complete_count, &snapshot.batches)
            }
            ShareValue::Update(update) => {
                out.extend_from_slice(&update.snapshot_epoch.to_be_bytes());
                out.extend_from_slice(&update.leader_epoch.to_be_bytes());
                out.extend_from_slice(&update.start_offset.to_be_bytes());
                (update.delivery_complete_count, &update.batches)
            }
        };
        put_uvarint(&mut out, batches.len() as u32 + 1);
        for batch in batches {
            out.extend_from_slice(&batch.first_offset.to_be_bytes());
            out.extend_from_slice(&batch.last_offset.to_be_bytes());
            out.push(batch.delivery_state as u8);
            out.extend_from_slice(&batch.delivery_count.to_be_bytes());
            put_uvarint(&mut out, 0);
        }
        if count == -1 {
            put_uvarint(&mut out, 0);
        } else {
            put_uvarint(&mut out, 1);
            put_uvarint(&mut out, TAG_DELIVERY_COMPLETE_COUNT);
            put_uvarint(&mut out, 4);
            out.extend_from_slice(&count.to_be_bytes());
        }
        Some(out)
    }

    /// Reads a record; `Ok(None)` for a record type this topic does not hold.
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Option<ShareRecord>, FormatError> {
        let mut r = Reader::new(key);
        let snapshot_key = match r.i16()? {
            SNAPSHOT_TYPE => true,
            UPDATE_TYPE => false,
            _ => return Ok(None),
        };
        let group = r.string()?;
        let topic_id = Uuid::from_bytes(r.array()?);
        let partition = r.i32()?;
        r.finish()?;
        let key = SharePartitionKey {
            group,
            topic_id,
            partition,
        };
        let value = value
            .map(|bytes| decode_value(bytes, snapshot_key))
            .transpose()?;
        Ok(Some(ShareRecord {
            key,
            snapshot_key,
            value,
        }))
    }
}

/// Reads a snapshot's or an update's value.
fn decode_value(bytes: &[u8], snapshot: bool) -> Result<ShareValue, FormatError> {
    let mut r = Reader::new(bytes);
    let version = r.i16()?;
    if version != VALUE_VERSION {
        return Err(malformed(format!("share state value version {version}")));
    }
    let value = if snapshot {
        let snapshot_epoch = r.i32()?;
        let state_epoch = r.i32()?;
        let leader_epoch = r.i32()?;
        let start_offset = r.i64()?;
        let create_ms = r.i64()?;
        let write_ms = r.i64()?;
        ShareValue::Snapshot(ShareSnapshot {
            snapshot_epoch,
            state_epoch,
            leader_epoch,
            start_offset,
            delivery_complete_count: -1,
            create_ms,
            write_ms,
            batches: batches(&mut r)?,
        })
    } else {
        let snapshot_epoch = r.i32()?;
        let leader_epoch = r.i32()?;
        let start_offset = r.i64()?;
        ShareValue::Update(ShareUpdate {
            snapshot_epoch,
            leader_epoch,
            start_offset,
            delivery_complete_count: -1,
            batches: batches(&mut r)?,
        })
    };
    let mut count = -1;
    for _ in 0..r.unsigned_varint()? {
        let tag = r.unsigned_varint()?;
        let size = r.unsigned_varint()? as usize;
        let mut field = Reader::new(r.take(size)?);
        if tag == TAG_DELIVERY_COMPLETE_COUNT {
            count = field.i32()?;
            field.finish()?;
        }
    }
    r.finish()?;
    Ok(match value {
        ShareValue::Snapshot(snapshot) => ShareValue::Snapshot(ShareSnapshot {
            delivery_complete_count: count,
            ..snapshot
        }),
        ShareValue::Update(update) => ShareValue::Update(ShareUpdate {
            delivery_complete_count: count,
            ..update
        }),
    })
}

/// The state batches of a value.
fn batches(r: &mut Reader<'_>) -> Result<Vec<PersistedBatch>, FormatError> {
    let count = r.compact_len(BATCH_BYTES)?;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push(PersistedBatch {
            first_offset: r.i64()?,
            last_offset: r.i64()?,
            delivery_state: r.take(1)?[0] as i8,
            delivery_count: r.i16()?,
        });
        r.tagged_fields()?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn batch() -> impl Strategy<Value = PersistedBatch> {
        (any::<i64>(), any::<i64>(), any::<i8>(), any::<i16>()).prop_map(
            |(first_offset, last_offset, delivery_state, delivery_count)| PersistedBatch {
                first_offset,
                last_offset,
                delivery_state,
                delivery_count,
            },
        )
    }

    fn record() -> impl Strategy<Value = ShareRecord> {
        let value = prop_oneof![
            Just(None),
            (
                (any::<i32>(), any::<i32>(), any::<i32>(), any::<i64>()),
                (-1i32..3, any::<i64>(), any::<i64>()),
                proptest::collection::vec(batch(), 0..4)
            )
                .prop_map(
                    |(
                        (snapshot_epoch, state_epoch, leader_epoch, start_offset),
                        (delivery_complete_count, create_ms, write_ms),
                        batches,
                    )| Some(ShareValue::Snapshot(ShareSnapshot {
                        snapshot_epoch,
                        state_epoch,
                        leader_epoch,
                        start_offset,
                        delivery_complete_count,
                        create_ms,
                        write_ms,
                        batches,
                    }))
                ),
            (
                (any::<i32>(), any::<i32>(), any::<i64>(), -1i32..3),
                proptest::collection::vec(batch(), 0..4)
            )
                .prop_map(
                    |(
                        (snapshot_epoch, leader_epoch, start_offset, delivery_complete_count),
                        batches,
                    )| Some(ShareValue::Update(ShareUpdate {
                        snapshot_epoch,
                        leader_epoch,
                        start_offset,
                        delivery_complete_count,
                        batches,
                    }))
                ),
        ];
        ("\\PC{0,20}", any::<u128>(), any::<i32>(), value).prop_map(
            |(group, id, partition, value)| ShareRecord {
                key: SharePartitionKey {
                    group,
                    topic_id: Uuid::from_u128(id),
                    partition,
                },
                snapshot_key: !matches!(value, Some(ShareValue::Update(_))),
                value,
            },
        )
    }

    proptest! {
        #[test]
        fn a_record_reads_back_as_written(record in record()) {
            let value = record.encode_value();
            let read = ShareRecord::decode(&record.encode_key(), value.as_deref());
            prop_assert_eq!(read, Ok(Some(record)));
        }

        #[test]
        fn any_bytes_decode_or_fail_without_panic(
            key in proptest::collection::vec(any::<u8>(), 0..60),
            value in proptest::collection::vec(any::<u8>(), 0..80),
        ) {
            let _ = ShareRecord::decode(&key, Some(&value));
        }
    }

    /// The coordinator key is Kafka's: the topic id in URL-safe base64 without padding.
    #[test]
    fn the_coordinator_key_names_the_topic_id_as_kafka_does() {
        let key = SharePartitionKey {
            group: "g".to_string(),
            topic_id: Uuid::from_u128(0),
            partition: 3,
        };
        assert_eq!(key.coordinator_key(), "g:AAAAAAAAAAAAAAAAAAAAAA:3");
    }
}
