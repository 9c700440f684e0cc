//! The record formats of `__consumer_offsets`, as Apache Kafka writes them, so the topic's
//! contents mean the same to Kafka's tools and to a future Weir.
//!
//! Keys: version 0 or 1 is a committed offset (group, topic, partition); version 2 is a
//! classic group's metadata (group); versions 3 and 5–8 are the records of a consumer group
//! protocol group ([`consumer`]; 4, partition metadata Kafka no longer writes, is skipped).
//! Values: `OffsetCommitValue` (written at v3: offset, leader epoch, metadata, commit time)
//! and `GroupMetadataValue` (written at v3). A null value is a tombstone: the offset or the
//! group was deleted. Every decode is bounds-checked; a record that does not parse is
//! reported, never trusted.

pub mod consumer;

use bytes::Bytes;
use weir_codec::varint::{read_uvarint, VarintError};

pub use consumer::{AssignmentValue, ConsumerKey, ConsumerValue, MemberValue};

/// Key version of a committed offset (Kafka writes 1 today; 0 is the same layout).
const OFFSET_KEY_VERSION: i16 = 1;
/// Key version of a group's metadata.
const GROUP_KEY_VERSION: i16 = 2;
/// Value version written for committed offsets (with the leader epoch).
const OFFSET_VALUE_VERSION: i16 = 3;
/// Value version written for group metadata (with static member ids).
const GROUP_VALUE_VERSION: i16 = 3;

/// Why a stored record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed coordinator record: {0}")]
pub struct FormatError(pub String);

impl From<VarintError> for FormatError {
    fn from(error: VarintError) -> FormatError {
        malformed(error.to_string())
    }
}

pub(crate) fn malformed(what: impl Into<String>) -> FormatError {
    FormatError(what.into())
}

/// What a record's key names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordKey {
    /// A committed offset of `group` for `topic`-`partition`.
    Offset {
        /// Group id.
        group: String,
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: i32,
    },
    /// The membership and assignment of classic `group`.
    Group {
        /// Group id.
        group: String,
    },
    /// One record of consumer-protocol `group`.
    Consumer {
        /// Group id.
        group: String,
        /// Which record.
        key: ConsumerKey,
    },
}

impl RecordKey {
    /// The group the record belongs to.
    pub fn group(&self) -> &str {
        match self {
            RecordKey::Offset { group, .. }
            | RecordKey::Group { group }
            | RecordKey::Consumer { group, .. } => group,
        }
    }

    /// The key's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            RecordKey::Offset {
                group,
                topic,
                partition,
            } => {
                out.extend_from_slice(&OFFSET_KEY_VERSION.to_be_bytes());
                put_string(&mut out, group);
                put_string(&mut out, topic);
                out.extend_from_slice(&partition.to_be_bytes());
            }
            RecordKey::Group { group } => {
                out.extend_from_slice(&GROUP_KEY_VERSION.to_be_bytes());
                put_string(&mut out, group);
            }
            RecordKey::Consumer { group, key } => {
                out.extend_from_slice(&key.record_type().to_be_bytes());
                put_string(&mut out, group);
                if let Some(member) = key.member() {
                    put_string(&mut out, member);
                }
            }
        }
        out
    }

    /// Reads a key. `Ok(None)`: a key version this coordinator does not handle (Kafka's newer
    /// group types), skipped on load.
    pub fn decode(bytes: &[u8]) -> Result<Option<RecordKey>, FormatError> {
        let mut r = Reader::new(bytes);
        let key = match r.i16()? {
            0 | 1 => RecordKey::Offset {
                group: r.string()?,
                topic: r.string()?,
                partition: r.i32()?,
            },
            2 => RecordKey::Group { group: r.string()? },
            record_type @ (3 | 5..=8) => {
                let group = r.string()?;
                let member = match record_type {
                    5 | 7 | 8 => Some(r.string()?),
                    _ => None,
                };
                RecordKey::Consumer {
                    group,
                    key: ConsumerKey::from_type(record_type, member)
                        .ok_or_else(|| malformed("consumer group record type"))?,
                }
            }
            _ => return Ok(None),
        };
        r.finish()?;
        Ok(Some(key))
    }
}

/// A record of `__consumer_offsets` as the group coordinator applies it: its key, and its
/// value decoded (`None`: a tombstone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupRecord {
    /// A committed offset of `group` for `topic`-`partition`.
    Offset {
        /// Group id.
        group: String,
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: i32,
        /// What was committed; `None` when the offset was deleted.
        value: Option<OffsetValue>,
    },
    /// The membership and assignment of classic `group`.
    Group {
        /// Group id.
        group: String,
        /// The stored group; `None` when the group was deleted.
        value: Option<GroupValue>,
    },
    /// One record of consumer-protocol `group`.
    Consumer {
        /// Group id.
        group: String,
        /// Which record.
        key: ConsumerKey,
        /// The record's value; `None` when it was deleted.
        value: Option<ConsumerValue>,
    },
}

impl GroupRecord {
    /// The tombstone of `group`'s committed offset for `topic`-`partition`.
    pub fn offset_tombstone(group: &str, topic: &str, partition: i32) -> GroupRecord {
        GroupRecord::Offset {
            group: group.to_string(),
            topic: topic.to_string(),
            partition,
            value: None,
        }
    }

    /// The group the record belongs to.
    pub fn group(&self) -> &str {
        match self {
            GroupRecord::Offset { group, .. }
            | GroupRecord::Group { group, .. }
            | GroupRecord::Consumer { group, .. } => group,
        }
    }

    /// True for a tombstone (the record deletes what its key names).
    pub fn is_tombstone(&self) -> bool {
        match self {
            GroupRecord::Offset { value, .. } => value.is_none(),
            GroupRecord::Group { value, .. } => value.is_none(),
            GroupRecord::Consumer { value, .. } => value.is_none(),
        }
    }

    /// True for a record that deletes a group's membership: the tombstone of a classic
    /// group's metadata or of a consumer group's epoch.
    pub fn deletes_membership(&self) -> bool {
        matches!(
            self,
            GroupRecord::Group { value: None, .. }
                | GroupRecord::Consumer {
                    key: ConsumerKey::Metadata,
                    value: None,
                    ..
                }
        )
    }

    /// About how many bytes the record takes stored.
    pub fn size(&self) -> usize {
        /// Versions, lengths and fixed-size fields, at most.
        const FIXED: usize = 64;
        FIXED
            + match self {
                GroupRecord::Offset {
                    group,
                    topic,
                    value,
                    ..
                } => group.len() + topic.len() + value.as_ref().map_or(0, |v| v.metadata.len()),
                GroupRecord::Group { group, value } => {
                    group.len()
                        + value.as_ref().map_or(0, |v| {
                            v.members
                                .iter()
                                .map(|m| {
                                    FIXED
                                        + m.member_id.len()
                                        + m.client_id.len()
                                        + m.client_host.len()
                                        + m.subscription.len()
                                        + m.assignment.len()
                                })
                                .sum()
                        })
                }
                GroupRecord::Consumer { group, key, value } => {
                    group.len()
                        + key.member().map_or(0, str::len)
                        + value.as_ref().map_or(0, ConsumerValue::size)
                }
            }
    }

    /// Reads a stored record. `Ok(None)`: a key version this coordinator does not handle
    /// (see [`RecordKey::decode`]).
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Option<GroupRecord>, FormatError> {
        let Some(key) = RecordKey::decode(key)? else {
            return Ok(None);
        };
        Ok(Some(match key {
            RecordKey::Offset {
                group,
                topic,
                partition,
            } => GroupRecord::Offset {
                group,
                topic,
                partition,
                value: value.map(OffsetValue::decode).transpose()?,
            },
            RecordKey::Group { group } => GroupRecord::Group {
                group,
                value: value.map(GroupValue::decode).transpose()?,
            },
            RecordKey::Consumer { group, key } => GroupRecord::Consumer {
                value: value
                    .map(|bytes| ConsumerValue::decode(&key, bytes))
                    .transpose()?,
                group,
                key,
            },
        }))
    }

    /// The record's key and value as stored.
    pub fn encode(&self) -> (Vec<u8>, Option<Vec<u8>>) {
        match self {
            GroupRecord::Offset {
                group,
                topic,
                partition,
                value,
            } => (
                RecordKey::Offset {
                    group: group.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                }
                .encode(),
                value.as_ref().map(OffsetValue::encode),
            ),
            GroupRecord::Group { group, value } => (
                RecordKey::Group {
                    group: group.clone(),
                }
                .encode(),
                value.as_ref().map(GroupValue::encode),
            ),
            GroupRecord::Consumer { group, key, value } => (
                RecordKey::Consumer {
                    group: group.clone(),
                    key: key.clone(),
                }
                .encode(),
                value.as_ref().map(ConsumerValue::encode),
            ),
        }
    }
}

/// A committed offset as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetValue {
    /// The next offset the group will read.
    pub offset: i64,
    /// Leader epoch of the committed record, or -1.
    pub leader_epoch: i32,
    /// Free-form client metadata (bounded by `offset.metadata.max.bytes`).
    pub metadata: String,
    /// When the commit was made (ms since the epoch).
    pub commit_timestamp: i64,
}

impl OffsetValue {
    /// The value's bytes (version 3).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(26 + self.metadata.len());
        out.extend_from_slice(&OFFSET_VALUE_VERSION.to_be_bytes());
        out.extend_from_slice(&self.offset.to_be_bytes());
        out.extend_from_slice(&self.leader_epoch.to_be_bytes());
        put_string(&mut out, &self.metadata);
        out.extend_from_slice(&self.commit_timestamp.to_be_bytes());
        out
    }

    /// Reads any version Kafka has written (0–4).
    pub fn decode(bytes: &[u8]) -> Result<OffsetValue, FormatError> {
        let mut r = Reader::new(bytes);
        let version = r.i16()?;
        let value = match version {
            0..=3 => {
                let offset = r.i64()?;
                let leader_epoch = if version >= 3 { r.i32()? } else { -1 };
                let metadata = r.string()?;
                let commit_timestamp = r.i64()?;
                if version == 1 {
                    r.i64()?; // expire timestamp, no longer used
                }
                OffsetValue {
                    offset,
                    leader_epoch,
                    metadata,
                    commit_timestamp,
                }
            }
            4 => {
                let offset = r.i64()?;
                let leader_epoch = r.i32()?;
                let metadata = r.compact_string()?;
                let commit_timestamp = r.i64()?;
                r.tagged_fields()?;
                OffsetValue {
                    offset,
                    leader_epoch,
                    metadata,
                    commit_timestamp,
                }
            }
            other => return Err(malformed(format!("offset value version {other}"))),
        };
        r.finish()?;
        Ok(value)
    }
}

/// One member as stored in the group's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMember {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub group_instance_id: Option<String>,
    /// The client's `client.id`.
    pub client_id: String,
    /// The client's address.
    pub client_host: String,
    /// How long a rebalance waits for this member to rejoin.
    pub rebalance_timeout_ms: i32,
    /// How long without a heartbeat before the member is removed.
    pub session_timeout_ms: i32,
    /// The member's metadata for the chosen protocol.
    pub subscription: Bytes,
    /// What the leader assigned it.
    pub assignment: Bytes,
}

/// A group's membership and assignment as stored after each completed rebalance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupValue {
    /// `consumer`, `connect`, … ; empty for a group that only commits offsets.
    pub protocol_type: String,
    /// Generation of the last completed rebalance.
    pub generation: i32,
    /// The chosen protocol (assignor).
    pub protocol: Option<String>,
    /// Member id of the leader.
    pub leader: Option<String>,
    /// When the group last changed state (ms since the epoch).
    pub current_state_timestamp: i64,
    /// The members and their assignments.
    pub members: Vec<StoredMember>,
}

impl GroupValue {
    /// The value's bytes (version 3).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&GROUP_VALUE_VERSION.to_be_bytes());
        put_string(&mut out, &self.protocol_type);
        out.extend_from_slice(&self.generation.to_be_bytes());
        put_nullable_string(&mut out, self.protocol.as_deref());
        put_nullable_string(&mut out, self.leader.as_deref());
        out.extend_from_slice(&self.current_state_timestamp.to_be_bytes());
        out.extend_from_slice(&(self.members.len() as i32).to_be_bytes());
        for m in &self.members {
            put_string(&mut out, &m.member_id);
            put_nullable_string(&mut out, m.group_instance_id.as_deref());
            put_string(&mut out, &m.client_id);
            put_string(&mut out, &m.client_host);
            out.extend_from_slice(&m.rebalance_timeout_ms.to_be_bytes());
            out.extend_from_slice(&m.session_timeout_ms.to_be_bytes());
            put_bytes(&mut out, &m.subscription);
            put_bytes(&mut out, &m.assignment);
        }
        out
    }

    /// Reads versions 0–3 (the non-flexible ones Kafka has written).
    pub fn decode(bytes: &[u8]) -> Result<GroupValue, FormatError> {
        let mut r = Reader::new(bytes);
        let version = r.i16()?;
        if !(0..=3).contains(&version) {
            return Err(malformed(format!("group value version {version}")));
        }
        let protocol_type = r.string()?;
        let generation = r.i32()?;
        let protocol = r.nullable_string()?;
        let leader = r.nullable_string()?;
        let current_state_timestamp = if version >= 2 { r.i64()? } else { -1 };
        let count = r.i32()?;
        if count < 0 {
            return Err(malformed(format!("{count} members")));
        }
        let mut members = Vec::new();
        for _ in 0..count {
            let member_id = r.string()?;
            let group_instance_id = if version >= 3 {
                r.nullable_string()?
            } else {
                None
            };
            let client_id = r.string()?;
            let client_host = r.string()?;
            let rebalance_timeout_ms = if version >= 1 { r.i32()? } else { -1 };
            let session_timeout_ms = r.i32()?;
            let subscription = r.bytes()?;
            let assignment = r.bytes()?;
            members.push(StoredMember {
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms: if rebalance_timeout_ms < 0 {
                    session_timeout_ms
                } else {
                    rebalance_timeout_ms
                },
                session_timeout_ms,
                subscription,
                assignment,
            });
        }
        r.finish()?;
        Ok(GroupValue {
            protocol_type,
            generation,
            protocol,
            leader,
            current_state_timestamp,
            members,
        })
    }
}

pub(crate) fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as i16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_nullable_string(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => put_string(out, s),
        None => out.extend_from_slice(&(-1i16).to_be_bytes()),
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as i32).to_be_bytes());
    out.extend_from_slice(b);
}

/// A bounds-checked reader over a record's key or value.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes }
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len()
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        if n > self.bytes.len() {
            return Err(malformed("field runs past the end"));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], FormatError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub(crate) fn i16(&mut self) -> Result<i16, FormatError> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    pub(crate) fn i32(&mut self) -> Result<i32, FormatError> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    pub(crate) fn i64(&mut self) -> Result<i64, FormatError> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    fn utf8(bytes: &[u8]) -> Result<String, FormatError> {
        String::from_utf8(bytes.to_vec()).map_err(|_| malformed("string is not UTF-8"))
    }

    pub(crate) fn string(&mut self) -> Result<String, FormatError> {
        self.nullable_string()?
            .ok_or_else(|| malformed("null where a string is required"))
    }

    fn nullable_string(&mut self) -> Result<Option<String>, FormatError> {
        let length = self.i16()?;
        if length < 0 {
            return Ok(None);
        }
        let bytes = self.take(length as usize)?;
        Reader::utf8(bytes).map(Some)
    }

    fn bytes(&mut self) -> Result<Bytes, FormatError> {
        let length = self.i32()?;
        if length < 0 {
            return Ok(Bytes::new());
        }
        Ok(Bytes::copy_from_slice(self.take(length as usize)?))
    }

    pub(crate) fn unsigned_varint(&mut self) -> Result<u32, FormatError> {
        read_uvarint(|| Ok(self.take(1)?[0]))
    }

    pub(crate) fn compact_string(&mut self) -> Result<String, FormatError> {
        let length = self.unsigned_varint()?;
        if length == 0 {
            return Err(malformed("null where a string is required"));
        }
        let bytes = self.take(length as usize - 1)?;
        Reader::utf8(bytes)
    }

    pub(crate) fn tagged_fields(&mut self) -> Result<(), FormatError> {
        for _ in 0..self.unsigned_varint()? {
            self.unsigned_varint()?;
            let size = self.unsigned_varint()?;
            self.take(size as usize)?;
        }
        Ok(())
    }

    /// Nothing may follow the last field.
    pub(crate) fn finish(&self) -> Result<(), FormatError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(malformed(format!("{} bytes left over", self.bytes.len())))
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn keys_round_trip_and_match_kafkas_layout() {
        let key = RecordKey::Offset {
            group: "g".into(),
            topic: "t".into(),
            partition: 7,
        };
        let bytes = key.encode();
        assert_eq!(bytes, [0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 7]);
        assert_eq!(RecordKey::decode(&bytes), Ok(Some(key)));
        let group = RecordKey::Group { group: "g".into() };
        assert_eq!(group.encode(), [0, 2, 0, 1, b'g']);
        // Share groups' records (type 9 and up) are not this coordinator's.
        assert_eq!(RecordKey::decode(&[0, 9, 0, 1, b'g']), Ok(None));
    }

    #[test]
    fn an_offset_value_written_by_kafka_at_v1_reads() {
        let mut v1 = vec![0, 1];
        v1.extend_from_slice(&42i64.to_be_bytes());
        v1.extend_from_slice(&[0, 2, b'm', b'd']);
        v1.extend_from_slice(&1000i64.to_be_bytes());
        v1.extend_from_slice(&2000i64.to_be_bytes());
        let value = OffsetValue::decode(&v1).expect("v1");
        assert_eq!((value.offset, value.leader_epoch), (42, -1));
        assert_eq!(value.metadata, "md");
        assert_eq!(value.commit_timestamp, 1000);
    }

    #[test]
    fn truncated_or_padded_records_are_refused() {
        let value = OffsetValue {
            offset: 1,
            leader_epoch: 0,
            metadata: "x".into(),
            commit_timestamp: 5,
        }
        .encode();
        assert!(OffsetValue::decode(&value[..value.len() - 1]).is_err());
        let mut padded = value.clone();
        padded.push(0);
        assert!(OffsetValue::decode(&padded).is_err());
        assert!(RecordKey::decode(&[0, 1, 0x7f, 0xff]).is_err());
    }

    proptest! {
        #[test]
        fn group_values_round_trip(
            generation in any::<i32>(),
            protocol in proptest::option::of("[a-z-]{0,12}"),
            members in proptest::collection::vec(("[a-z0-9-]{1,20}", proptest::option::of("[a-z]{1,5}"), any::<Vec<u8>>(), any::<Vec<u8>>()), 0..5),
        ) {
            let value = GroupValue {
                protocol_type: "consumer".into(),
                generation,
                protocol: protocol.clone(),
                leader: members.first().map(|m| m.0.clone()),
                current_state_timestamp: 123,
                members: members.into_iter().map(|(id, instance, sub, asg)| StoredMember {
                    member_id: id,
                    group_instance_id: instance,
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    rebalance_timeout_ms: 300_000,
                    session_timeout_ms: 45_000,
                    subscription: Bytes::from(sub),
                    assignment: Bytes::from(asg),
                }).collect(),
            };
            prop_assert_eq!(GroupValue::decode(&value.encode()), Ok(value));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in any::<Vec<u8>>()) {
            let _ = RecordKey::decode(&bytes);
            let _ = OffsetValue::decode(&bytes);
            let _ = GroupValue::decode(&bytes);
        }
    }
}
