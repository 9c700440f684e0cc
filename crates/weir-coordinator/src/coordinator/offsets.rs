//! Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete.

use crate::group::Group;
use crate::records::{OffsetValue, RecordKey};
use crate::state::GroupState;
use crate::GroupError;

use super::{offset_key, CommitEntry, GroupCoordinator};

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
        let commit_timestamp = self.runtime.now().wall_ms;
        let mut results: Vec<Result<(), GroupError>> = Vec::with_capacity(entries.len());
        let mut records = Vec::new();
        let mut accepted = Vec::new();
        let appended = {
            let mut partitions = self.runtime.lock();
            let (partition, shard) = partitions.served(group_id)?;
            match shard.groups.get(group_id) {
                Some(group) => group.check_commit(generation, member_id, instance_id, version)?,
                None if generation < 0 => {}
                // The handler answers ILLEGAL_GENERATION instead below OffsetCommit v9.
                None => return Err(GroupError::GroupIdNotFound),
            }
            for (index, entry) in entries.iter().enumerate() {
                if entry.metadata.len() > self.settings.offset_metadata_max_bytes {
                    results.push(Err(GroupError::OffsetMetadataTooLarge));
                    continue;
                }
                results.push(Ok(()));
                let value = OffsetValue {
                    offset: entry.offset,
                    leader_epoch: entry.leader_epoch,
                    metadata: entry.metadata.clone(),
                    commit_timestamp,
                };
                records.push((
                    RecordKey::Offset {
                        group: group_id.to_string(),
                        topic: entry.topic.clone(),
                        partition: entry.partition,
                    }
                    .encode(),
                    Some(value.encode()),
                ));
                accepted.push((index, value));
            }
            if records.is_empty() {
                return Ok(results);
            }
            let group = shard.group_or_new(group_id);
            let appended = self.runtime.log(partition).append(records);
            if appended.is_ok() {
                group.offsets.pending_commits += 1;
            }
            appended
        };
        let stored = match appended {
            Ok(appended) => {
                let durable = appended.durable.await.map(|()| appended.base_offset);
                let mut partitions = self.runtime.lock();
                if let Ok((_, shard)) = partitions.served(group_id) {
                    if let Some(group) = shard.groups.get_mut(group_id) {
                        group.offsets.pending_commits =
                            group.offsets.pending_commits.saturating_sub(1);
                        if let Ok(base_offset) = durable {
                            for (position, (index, value)) in accepted.iter().enumerate() {
                                let entry = &entries[*index];
                                let key = (entry.topic.clone(), entry.partition);
                                group.offsets.apply_commit(
                                    key,
                                    value.clone(),
                                    base_offset + position as i64,
                                );
                            }
                        }
                    }
                    shard.forget_if_untraced(group_id);
                }
                durable
            }
            Err(error) => Err(error),
        };
        if let Err(error) = stored {
            for (index, _) in accepted {
                results[index] = Err(error);
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
        let (results, tombstoned, appended) = {
            let served = self.runtime.lock();
            let (partition, shard) = served.served_ref(group_id)?;
            let group = shard
                .groups
                .get(group_id)
                .ok_or(GroupError::GroupIdNotFound)?;
            let subscribed = if group.state() == GroupState::Empty {
                Vec::new()
            } else {
                group.subscribed_topics()
            };
            let mut records = Vec::new();
            let mut tombstoned = Vec::new();
            let results: Vec<Result<(), GroupError>> = partitions
                .iter()
                .map(|(topic, p)| {
                    if subscribed.contains(topic) {
                        return Err(GroupError::GroupSubscribedToTopic);
                    }
                    if group.offsets.committed.contains_key(&(topic.clone(), *p)) {
                        records.push((offset_key(group_id, topic, *p), None));
                        tombstoned.push((topic.clone(), *p));
                    }
                    Ok(())
                })
                .collect();
            if records.is_empty() {
                return Ok(results);
            }
            let appended = self.runtime.log(partition).append(records)?;
            (results, tombstoned, appended)
        };
        appended.durable.await?;
        let mut served = self.runtime.lock();
        if let Ok((_, shard)) = served.served(group_id) {
            if let Some(group) = shard.groups.get_mut(group_id) {
                for (i, key) in tombstoned.into_iter().enumerate() {
                    group
                        .offsets
                        .apply_delete(key, appended.base_offset + i as i64);
                }
            }
            shard.forget_if_untraced(group_id);
        }
        Ok(results)
    }
}
