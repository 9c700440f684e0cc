//! Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete.

use crate::group::Group;
use crate::records::{GroupRecord, OffsetValue};
use crate::runtime::{Decision, Written};
use crate::state::GroupState;
use crate::GroupError;

use super::{CommitEntry, GroupCoordinator};

/// One result per entry of a request, or an error for the whole request.
type EntryResults = Result<Vec<Result<(), GroupError>>, GroupError>;

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
                let mut records = Vec::new();
                let results: Vec<Result<(), GroupError>> = entries
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
                Ok(Decision {
                    answer: results,
                    records,
                })
            })
            .await?;
        let Written {
            answer: mut results,
            stored,
        } = written;
        if let Err(error) = stored {
            // Each entry that was to be stored failed with it.
            for result in results.iter_mut().filter(|result| result.is_ok()) {
                *result = Err(error);
            }
        }
        Ok(results)
    }

    /// OffsetFetch: the committed offset of each requested partition (`None`: nothing
    /// committed), or of every partition with one when `topics` is `None`.
    /// A fetch that names a member (`member`: id and epoch, OffsetFetch v9) of a
    /// consumer-protocol group is checked against its membership.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        topics: Option<&[(String, Vec<i32>)]>,
        member: Option<(&str, i32)>,
    ) -> Result<Vec<(String, i32, Option<OffsetValue>)>, GroupError> {
        let partitions = self.runtime.lock();
        let (_, shard) = partitions.served_ref(group_id)?;
        let group = shard.groups.get(group_id);
        if let (Some(consumer), Some((member_id, epoch))) =
            (group.and_then(Group::consumer), member)
        {
            consumer.check_fetch(member_id, epoch)?;
        }
        let committed = |topic: &str, partition: i32| {
            group.and_then(|g| {
                g.offsets
                    .committed
                    .get(&(topic.to_string(), partition))
                    .map(|c| c.value.clone())
            })
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
                            .iter()
                            .map(|((topic, p), c)| (topic.clone(), *p, Some(c.value.clone())))
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
