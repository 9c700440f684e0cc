//! The records of a consumer group protocol group (KIP-848), as Kafka 4.x writes them: the
//! group epoch (type 3), each member's subscription (5), the target assignment's epoch (6)
//! and each member's part of it (7), and each member's current assignment (8). Keys are the
//! type then the group id (and member id); values are version 0 in the flexible encoding
//! (compact strings and arrays, tagged fields, which are skipped on read).

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;
use weir_codec::varint::put_uvarint;

use super::{malformed, FormatError, Reader};
use crate::assignors::TopicPartitions;

/// Which record of a consumer group a key names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConsumerKey {
    /// `ConsumerGroupMetadata`: the group epoch.
    Metadata,
    /// `ConsumerGroupMemberMetadata` of a member: its subscription and client.
    Member(String),
    /// `ConsumerGroupTargetAssignmentMetadata`: the target assignment's epoch.
    TargetMetadata,
    /// `ConsumerGroupTargetAssignmentMember`: a member's target partitions.
    TargetMember(String),
    /// `ConsumerGroupCurrentMemberAssignment`: a member's epochs and partitions.
    Assignment(String),
}

impl ConsumerKey {
    /// Kafka's record type, the key's first two bytes.
    pub fn record_type(&self) -> i16 {
        match self {
            ConsumerKey::Metadata => 3,
            ConsumerKey::Member(_) => 5,
            ConsumerKey::TargetMetadata => 6,
            ConsumerKey::TargetMember(_) => 7,
            ConsumerKey::Assignment(_) => 8,
        }
    }

    /// The member the record belongs to, if it is a member's.
    pub fn member(&self) -> Option<&str> {
        match self {
            ConsumerKey::Member(m) | ConsumerKey::TargetMember(m) | ConsumerKey::Assignment(m) => {
                Some(m)
            }
            ConsumerKey::Metadata | ConsumerKey::TargetMetadata => None,
        }
    }

    pub(crate) fn from_type(record_type: i16, member: Option<String>) -> Option<ConsumerKey> {
        Some(match (record_type, member) {
            (3, None) => ConsumerKey::Metadata,
            (5, Some(m)) => ConsumerKey::Member(m),
            (6, None) => ConsumerKey::TargetMetadata,
            (7, Some(m)) => ConsumerKey::TargetMember(m),
            (8, Some(m)) => ConsumerKey::Assignment(m),
            _ => return None,
        })
    }
}

/// A member's subscription and client as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberValue {
    /// `group.instance.id`.
    pub instance_id: Option<String>,
    /// `client.rack`.
    pub rack_id: Option<String>,
    /// `client.id`.
    pub client_id: String,
    /// Address.
    pub client_host: String,
    /// Subscribed names.
    pub topic_names: Vec<String>,
    /// Subscribed pattern.
    pub topic_regex: Option<String>,
    /// Rebalance timeout.
    pub rebalance_timeout_ms: i32,
    /// Preferred server assignor.
    pub server_assignor: Option<String>,
}

/// A member's epochs and partitions as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignmentValue {
    /// Its epoch (-2: a static member away for now).
    pub epoch: i32,
    /// The epoch before the last bump.
    pub previous_epoch: i32,
    /// Kafka's `MemberState`: 0 stable, 1 unrevoked partitions, 2 unreleased partitions.
    pub state: i8,
    /// What it holds.
    pub assigned: TopicPartitions,
    /// What it must give up.
    pub pending_revocation: TopicPartitions,
}

/// A consumer group record's value, decoded; which one a key takes is the key's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsumerValue {
    /// The group epoch ([`ConsumerKey::Metadata`]) or the target assignment's epoch
    /// ([`ConsumerKey::TargetMetadata`]).
    Epoch(i32),
    /// A member's subscription and client ([`ConsumerKey::Member`]).
    Member(MemberValue),
    /// A member's target partitions ([`ConsumerKey::TargetMember`]).
    Target(TopicPartitions),
    /// A member's epochs and partitions ([`ConsumerKey::Assignment`]).
    Assignment(AssignmentValue),
}

impl ConsumerValue {
    /// The value's bytes.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            ConsumerValue::Epoch(epoch) => encode_epoch(*epoch),
            ConsumerValue::Member(member) => encode_member(member),
            ConsumerValue::Target(partitions) => encode_target(partitions),
            ConsumerValue::Assignment(assignment) => encode_assignment(assignment),
        }
    }

    /// Reads the value of a record with key `key`.
    pub fn decode(key: &ConsumerKey, bytes: &[u8]) -> Result<ConsumerValue, FormatError> {
        Ok(match key {
            ConsumerKey::Metadata | ConsumerKey::TargetMetadata => {
                ConsumerValue::Epoch(decode_epoch(bytes)?)
            }
            ConsumerKey::Member(_) => ConsumerValue::Member(decode_member(bytes)?),
            ConsumerKey::TargetMember(_) => ConsumerValue::Target(decode_target(bytes)?),
            ConsumerKey::Assignment(_) => ConsumerValue::Assignment(decode_assignment(bytes)?),
        })
    }

    /// About how many bytes the value takes stored.
    pub fn size(&self) -> usize {
        /// A topic id and the lengths around its partitions.
        const TOPIC: usize = 20;
        let partitions =
            |tp: &TopicPartitions| -> usize { tp.values().map(|ps| TOPIC + 4 * ps.len()).sum() };
        match self {
            ConsumerValue::Epoch(_) => 4,
            ConsumerValue::Member(m) => {
                m.instance_id.as_ref().map_or(0, String::len)
                    + m.rack_id.as_ref().map_or(0, String::len)
                    + m.client_id.len()
                    + m.client_host.len()
                    + m.topic_names.iter().map(|n| n.len() + 1).sum::<usize>()
                    + m.topic_regex.as_ref().map_or(0, String::len)
                    + m.server_assignor.as_ref().map_or(0, String::len)
            }
            ConsumerValue::Target(tp) => partitions(tp),
            ConsumerValue::Assignment(a) => {
                partitions(&a.assigned) + partitions(&a.pending_revocation)
            }
        }
    }
}

const VALUE_VERSION: i16 = 0;

fn start() -> Vec<u8> {
    VALUE_VERSION.to_be_bytes().to_vec()
}

fn put_compact_string(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        None => put_uvarint(out, 0),
        Some(s) => {
            put_uvarint(out, s.len() as u32 + 1);
            out.extend_from_slice(s.as_bytes());
        }
    }
}

fn put_partitions(out: &mut Vec<u8>, partitions: &TopicPartitions) {
    put_uvarint(out, partitions.len() as u32 + 1);
    for (topic, ps) in partitions {
        out.extend_from_slice(topic.as_bytes());
        put_uvarint(out, ps.len() as u32 + 1);
        for p in ps {
            out.extend_from_slice(&p.to_be_bytes());
        }
        put_uvarint(out, 0);
    }
}

fn finish(mut out: Vec<u8>) -> Vec<u8> {
    put_uvarint(&mut out, 0);
    out
}

/// A group epoch or target assignment epoch value (types 3 and 6).
fn encode_epoch(epoch: i32) -> Vec<u8> {
    let mut out = start();
    out.extend_from_slice(&epoch.to_be_bytes());
    finish(out)
}

/// Encodes a member's subscription (type 5).
fn encode_member(m: &MemberValue) -> Vec<u8> {
    let mut out = start();
    put_compact_string(&mut out, m.instance_id.as_deref());
    put_compact_string(&mut out, m.rack_id.as_deref());
    put_compact_string(&mut out, Some(&m.client_id));
    put_compact_string(&mut out, Some(&m.client_host));
    put_uvarint(&mut out, m.topic_names.len() as u32 + 1);
    for name in &m.topic_names {
        put_compact_string(&mut out, Some(name));
    }
    put_compact_string(&mut out, m.topic_regex.as_deref());
    out.extend_from_slice(&m.rebalance_timeout_ms.to_be_bytes());
    put_compact_string(&mut out, m.server_assignor.as_deref());
    finish(out)
}

/// Encodes a member's target partitions (type 7).
fn encode_target(partitions: &TopicPartitions) -> Vec<u8> {
    let mut out = start();
    put_partitions(&mut out, partitions);
    finish(out)
}

/// Encodes a member's current assignment (type 8).
fn encode_assignment(a: &AssignmentValue) -> Vec<u8> {
    let mut out = start();
    out.extend_from_slice(&a.epoch.to_be_bytes());
    out.extend_from_slice(&a.previous_epoch.to_be_bytes());
    out.push(a.state as u8);
    put_partitions(&mut out, &a.assigned);
    put_partitions(&mut out, &a.pending_revocation);
    finish(out)
}

impl<'a> Reader<'a> {
    fn version_zero(&mut self) -> Result<(), FormatError> {
        match self.i16()? {
            VALUE_VERSION => Ok(()),
            other => Err(malformed(format!("consumer group value version {other}"))),
        }
    }

    fn compact_nullable_string(&mut self) -> Result<Option<String>, FormatError> {
        let length = self.unsigned_varint()?;
        if length == 0 {
            return Ok(None);
        }
        let bytes = self.take(length as usize - 1)?;
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|_| malformed("string is not UTF-8"))
    }

    /// A compact array's length; every element takes at least `min_size` bytes, so a length
    /// beyond what is left is refused before anything is allocated.
    pub(crate) fn compact_len(&mut self, min_size: usize) -> Result<usize, FormatError> {
        let n = self.unsigned_varint()?;
        if n == 0 {
            return Err(malformed("null where an array is required"));
        }
        let n = n as usize - 1;
        if n.saturating_mul(min_size) > self.remaining() {
            return Err(malformed("array longer than the record"));
        }
        Ok(n)
    }

    fn partitions(&mut self) -> Result<TopicPartitions, FormatError> {
        let mut out = BTreeMap::new();
        for _ in 0..self.compact_len(18)? {
            let topic = Uuid::from_bytes(self.array()?);
            let mut ps = BTreeSet::new();
            for _ in 0..self.compact_len(4)? {
                ps.insert(self.i32()?);
            }
            self.tagged_fields()?;
            out.insert(topic, ps);
        }
        Ok(out)
    }
}

/// Reads a group epoch or target assignment epoch value.
fn decode_epoch(bytes: &[u8]) -> Result<i32, FormatError> {
    let mut r = Reader::new(bytes);
    r.version_zero()?;
    let epoch = r.i32()?;
    r.tagged_fields()?;
    r.finish()?;
    Ok(epoch)
}

/// Reads a member's subscription.
fn decode_member(bytes: &[u8]) -> Result<MemberValue, FormatError> {
    let mut r = Reader::new(bytes);
    r.version_zero()?;
    let instance_id = r.compact_nullable_string()?;
    let rack_id = r.compact_nullable_string()?;
    let client_id = r.compact_string()?;
    let client_host = r.compact_string()?;
    let mut topic_names = Vec::new();
    for _ in 0..r.compact_len(1)? {
        topic_names.push(r.compact_string()?);
    }
    let topic_regex = r.compact_nullable_string()?;
    let rebalance_timeout_ms = r.i32()?;
    let server_assignor = r.compact_nullable_string()?;
    r.tagged_fields()?;
    r.finish()?;
    Ok(MemberValue {
        instance_id,
        rack_id,
        client_id,
        client_host,
        topic_names,
        topic_regex,
        rebalance_timeout_ms,
        server_assignor,
    })
}

/// Reads a member's target partitions.
fn decode_target(bytes: &[u8]) -> Result<TopicPartitions, FormatError> {
    let mut r = Reader::new(bytes);
    r.version_zero()?;
    let partitions = r.partitions()?;
    r.tagged_fields()?;
    r.finish()?;
    Ok(partitions)
}

/// Reads a member's current assignment.
fn decode_assignment(bytes: &[u8]) -> Result<AssignmentValue, FormatError> {
    let mut r = Reader::new(bytes);
    r.version_zero()?;
    let epoch = r.i32()?;
    let previous_epoch = r.i32()?;
    let state = r.array::<1>()?[0] as i8;
    let assigned = r.partitions()?;
    let pending_revocation = r.partitions()?;
    r.tagged_fields()?;
    r.finish()?;
    Ok(AssignmentValue {
        epoch,
        previous_epoch,
        state,
        assigned,
        pending_revocation,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::RecordKey;
    use super::*;

    #[test]
    fn keys_and_values_round_trip_in_kafkas_layout() {
        let key = RecordKey::Consumer {
            group: "g".into(),
            key: ConsumerKey::Assignment("m".into()),
        };
        assert_eq!(key.encode(), [0, 8, 0, 1, b'g', 0, 1, b'm']);
        assert_eq!(RecordKey::decode(&key.encode()), Ok(Some(key)));
        let metadata = RecordKey::Consumer {
            group: "g".into(),
            key: ConsumerKey::Metadata,
        };
        assert_eq!(metadata.encode(), [0, 3, 0, 1, b'g']);
        // Partition metadata (type 4), which Kafka 4.1 stopped writing, is skipped.
        assert_eq!(RecordKey::decode(&[0, 4, 0, 1, b'g']), Ok(None));
        assert_eq!(encode_epoch(7), [0, 0, 0, 0, 0, 7, 0]);
        assert_eq!(decode_epoch(&encode_epoch(7)), Ok(7));

        let member = MemberValue {
            instance_id: Some("i".into()),
            rack_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            topic_names: vec!["a".into(), "b".into()],
            topic_regex: None,
            rebalance_timeout_ms: 300_000,
            server_assignor: Some("range".into()),
        };
        assert_eq!(decode_member(&encode_member(&member)), Ok(member));
        let topic = Uuid::from_bytes([9; 16]);
        let assignment = AssignmentValue {
            epoch: 4,
            previous_epoch: 3,
            state: 1,
            assigned: BTreeMap::from([(topic, BTreeSet::from([0, 2]))]),
            pending_revocation: BTreeMap::from([(topic, BTreeSet::from([1]))]),
        };
        assert_eq!(
            decode_assignment(&encode_assignment(&assignment)),
            Ok(assignment)
        );
        let target = BTreeMap::from([(topic, BTreeSet::from([5]))]);
        assert_eq!(decode_target(&encode_target(&target)), Ok(target));
    }

    proptest! {
        /// Whatever the bytes, decoding answers without panicking or allocating past them.
        #[test]
        fn arbitrary_values_never_panic(bytes in any::<Vec<u8>>()) {
            let _ = decode_epoch(&bytes);
            let _ = decode_member(&bytes);
            let _ = decode_target(&bytes);
            let _ = decode_assignment(&bytes);
        }
    }
}
