//! Committed offsets: OffsetCommit, TxnOffsetCommit (and the transaction markers that settle
//! its offsets), OffsetFetch, OffsetDelete.

use crate::group::Group;
use crate::records::{GroupRecord, OffsetValue};
use crate::runtime::{Decision, ProducerIdAndEpoch, TxnAppend, Written};
use crate::state::GroupState;
use crate::GroupError;
use weir_clock::Now;

use super::{CommitEntry, GroupCoordinator};

/// One result per entry of a request, or an error for the whole request.
type EntryResults = Result<Vec<Result<(), GroupError>>, GroupError>;

/// One partition as OffsetFetch answers it: its committed offset (`None`: nothing
/// committed), or why it cannot be told (UNSTABLE_OFFSET_COMMIT).
pub type FetchedOffset = (String, i32, Result<Option<OffsetValue>, GroupError>);

/// A TxnOffsetCommit: offsets a transactional producer commits for a group in its open
/// transaction.
#[derive(Debug, Clone, Copy)]
pub struct TxnCommit<'a> {
    /// The group.
    pub group_id: &'a str,
    /// The producer and its epoch: an epoch older than the partition knows is fenced.
    pub producer: ProducerIdAndEpoch,
    /// The member's generation (or consumer-protocol epoch), -1 when it names none.
    pub generation: i32,
    /// The member id, empty when it names none.
    pub member_id: &'a str,
    /// The static member's instance id.
    pub instance_id: Option<&'a str>,
    /// The guard of the verification that the producer's transaction holds the group's
    /// partition of the offsets topic, when the transaction is not open there yet.
    pub verification: Option<u64>,
}

/// The records storing `entries` for `group_id` at `now`, with one result per entry (metadata
/// longer than `metadata_max_bytes` is refused and not stored).
fn commit_records(
    group_id: &str,
    entries: &[CommitEntry],
    metadata_max_bytes: usize,
    now: Now,
) -> Decision<Vec<Result<(), GroupError>>, GroupRecord> {
    let mut records = Vec::new();
    let answer = entries
        .iter()
        .map(|entry| {
            if entry.metadata.len() > metadata_max_bytes {
                return Err(GroupError::OffsetMetadataTooLarge);
            }
            records.push(GroupRecord::Offset {
                group: group_id.to_string(),
                topic: entry.topic.clone(),
                partition: entry.partition,
                value: Some(OffsetValue {
                    offset: entry.offset,
                    leader_epoch: entry.leader_epoch,
                    metadata: entry.metadata.clone(),
                    commit_timestamp: now.wall_ms,
                }),
            });
            Ok(())
        })
        .collect();
    Decision { answer, records }
}

/// Each entry that was to be stored failed with `stored`'s error, if any.
fn entry_results(
    written: Written<Vec<Result<(), GroupError>>, GroupError>,
) -> Vec<Result<(), GroupError>> {
    let Written {
        answer: mut results,
        stored,
    } = written;
    if let Err(error) = stored {
        for result in results.iter_mut().filter(|result| result.is_ok()) {
            *result = Err(error);
        }
    }
    results
}

impl GroupCoordinator {
    /// OffsetCommit: one result per entry, after the records are appended and durable.
    pub async fn commit_offsets(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        entries: &[CommitEntry],
        version: i16,
    ) -> EntryResults {
        let metadata_max_bytes = self.settings.offset_metadata_max_bytes;
        let written = self
            .runtime
            .write(group_id, |shard, now| {
                match shard.groups.get(group_id) {
                    Some(group) => {
                        group.check_commit(generation, member_id, instance_id, version)?
                    }
                    None if generation < 0 => {}
                    // The handler answers ILLEGAL_GENERATION instead below OffsetCommit v9.
                    None => return Err(GroupError::GroupIdNotFound),
                }
                Ok(commit_records(group_id, entries, metadata_max_bytes, now))
            })
            .await?;
        Ok(entry_results(written))
    }

    /// TxnOffsetCommit: `entries` are stored in the producer's open transaction, one result
    /// per entry once durable; they count (OffsetFetch shows them) only once the transaction
    /// commits, and a fetch that requires stable offsets waits for it. A member is checked
    /// against the group (KIP-447: a zombie of an older generation is refused); a group
    /// nobody joined takes commits that name no generation.
    pub async fn commit_transactional_offsets(
        &self,
        commit: TxnCommit<'_>,
        entries: &[CommitEntry],
    ) -> EntryResults {
        let metadata_max_bytes = self.settings.offset_metadata_max_bytes;
        let group_id = commit.group_id;
        let transactional = TxnAppend {
            producer: commit.producer,
            verification: commit.verification,
        };
        let written = self
            .runtime
            .write_transactional(group_id, transactional, |shard, now| {
                match shard.groups.get(group_id) {
                    Some(group) => group.check_txn_commit(
                        commit.generation,
                        commit.member_id,
                        commit.instance_id,
                    )?,
                    None if commit.generation < 0 => {}
                    None => return Err(GroupError::IllegalGeneration),
                }
                Ok(commit_records(group_id, entries, metadata_max_bytes, now))
            })
            .await?;
        Ok(entry_results(written))
    }

    /// A transaction marker on `partition` of `__consumer_offsets` (WriteTxnMarkers): ends
    /// `producer`'s transaction there, so the offsets it committed count (`commit`) or are
    /// dropped, once the marker is durable. Refused while the partition is not served here.
    pub async fn complete_transaction(
        &self,
        partition: i32,
        producer: ProducerIdAndEpoch,
        commit: bool,
        coordinator_epoch: i32,
    ) -> Result<(), GroupError> {
        self.runtime
            .complete_transaction(partition, producer, commit, coordinator_epoch)
            .await?;
        Ok(())
    }

    /// OffsetFetch: the committed offset of each requested partition (`None`: nothing
    /// committed), or of every partition with one when `topics` is `None`; with
    /// `require_stable`, UNSTABLE_OFFSET_COMMIT for a partition an open transaction committed
    /// an offset of. A fetch that names a member (`member`: id and epoch, OffsetFetch v9) of
    /// a consumer-protocol group is checked against its membership.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        topics: Option<&[(String, Vec<i32>)]>,
        member: Option<(&str, i32)>,
        require_stable: bool,
    ) -> Result<Vec<FetchedOffset>, GroupError> {
        let partitions = self.runtime.lock();
        let (_, shard) = partitions.served_ref(group_id)?;
        let group = shard.groups.get(group_id);
        if let (Some(consumer), Some((member_id, epoch))) =
            (group.and_then(Group::consumer), member)
        {
            consumer.check_fetch(member_id, epoch)?;
        }
        let committed = |topic: &str, partition: i32| {
            let Some(group) = group else {
                return Ok(None);
            };
            let key = (topic.to_string(), partition);
            if require_stable && group.offsets.has_transactional(&key) {
                return Err(GroupError::UnstableOffsetCommit);
            }
            Ok(group.offsets.committed.get(&key).map(|c| c.value.clone()))
        };
        Ok(match topics {
            Some(topics) => topics
                .iter()
                .flat_map(|(topic, partitions)| {
                    partitions
                        .iter()
                        .map(|&p| (topic.clone(), p, committed(topic, p)))
                })
                .collect(),
            None => {
                let mut all: Vec<_> = group
                    .map(|g| {
                        g.offsets
                            .committed
                            .keys()
                            .map(|(topic, p)| (topic.clone(), *p, committed(topic, *p)))
                            .collect()
                    })
                    .unwrap_or_default();
                all.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
                all
            }
        })
    }

    /// OffsetDelete: removes the committed offsets of `partitions` unless the group's members
    /// subscribe to the topic (GROUP_SUBSCRIBED_TO_TOPIC for those). One result per entry.
    pub async fn delete_offsets(
        &self,
        group_id: &str,
        partitions: &[(String, i32)],
    ) -> EntryResults {
        let written = self
            .runtime
            .write(group_id, |shard, _| {
                let group = shard.group(group_id)?;
                let subscribed = if group.state() == GroupState::Empty {
                    Vec::new()
                } else {
                    group.subscribed_topics()
                };
                let mut records = Vec::new();
                let results = partitions
                    .iter()
                    .map(|(topic, p)| {
                        if subscribed.contains(topic) {
                            return Err(GroupError::GroupSubscribedToTopic);
                        }
                        if group.offsets.committed.contains_key(&(topic.clone(), *p)) {
                            records.push(GroupRecord::offset_tombstone(group_id, topic, *p));
                        }
                        Ok(())
                    })
                    .collect();
                Ok(Decision {
                    answer: results,
                    records,
                })
            })
            .await?;
        written.stored?;
        Ok(written.answer)
    }
}
