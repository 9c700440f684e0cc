//! The classic group protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.

use std::time::Duration;

use crate::group::{Group, JoinOutcome, JoinRequest, Step, SyncOutcome, SyncRequest};
use crate::records::GroupRecord;
use crate::runtime::Decision;
use crate::GroupError;

use super::{admit_metadata, member_group, member_shard, GroupCoordinator, WAIT_GRACE};

impl GroupCoordinator {
    /// JoinGroup: waits until the rebalance completes (or fails) for this member.
    pub async fn join_group(&self, group_id: &str, request: JoinRequest) -> JoinOutcome {
        let limits = self.settings.limits;
        let wait = Duration::from_millis(request.rebalance_timeout_ms.max(0) as u64).max(
            Duration::from_millis(limits.initial_rebalance_delay_ms.max(0) as u64),
        ) + WAIT_GRACE;
        let member_id = request.member_id.clone();
        let written = self
            .runtime
            .write_applied(group_id, |partitions, now| {
                let (_, shard) = member_shard(partitions, group_id)?;
                // A join the group's own bounds refuse is refused there and adds nothing.
                let adds = Group::join_adds_bytes(shard.groups.get(group_id), &request, &limits);
                if let Some(more) = adds {
                    admit_metadata(partitions, &limits.metadata, group_id, more)?;
                }
                let (_, shard) = member_shard(partitions, group_id)?;
                let created = !shard.groups.contains_key(group_id);
                let group = shard.group_or_new(group_id);
                let step = group.join(request, &limits, now.instant, now.wall_ms);
                // A join refused before it could create the group (a session timeout out of
                // range, a member id the group never gave, metadata over its bounds) leaves no
                // group behind, as in Kafka; other refusals of a new member keep the group it
                // made.
                let refused_early = matches!(
                    &step,
                    Step::Done(JoinOutcome {
                        error: Some(
                            GroupError::InvalidSessionTimeout
                                | GroupError::UnknownMemberId
                                | GroupError::InvalidRequest
                                | GroupError::GroupMaxSizeReached
                        ),
                        ..
                    })
                );
                if created && refused_early && group.has_no_members() {
                    shard.groups.remove(group_id);
                    return Ok(Decision {
                        answer: (step, None),
                        records: Vec::new(),
                    });
                }
                Ok(Decision {
                    answer: (step, group.next_deadline()),
                    // An empty consumer group that became classic: its records go.
                    records: group.consumer_changes(),
                })
            })
            .await;
        let ((step, deadline), stored) = match written {
            Ok(written) => (written.answer, written.stored),
            Err(error) => return JoinOutcome::failed(error, &member_id),
        };
        if let Err(error) = stored {
            tracing::warn!(target: "weir::groups", group = group_id, %error, "consumer group records of a group turned classic not tombstoned; the next change tries again");
        }
        self.runtime.wake_by(deadline);
        match step {
            Step::Done(outcome) => outcome,
            Step::Wait(rx) | Step::Store(_, rx) => match tokio::time::timeout(wait, rx).await {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(_)) => JoinOutcome::failed(GroupError::UnknownMemberId, &member_id),
                Err(_) => JoinOutcome::failed(GroupError::RebalanceInProgress, &member_id),
            },
        }
    }

    /// SyncGroup: the leader's assignment is stored, then every member gets its part.
    pub async fn sync_group(&self, group_id: &str, request: SyncRequest<'_>) -> SyncOutcome {
        let limits = self.settings.limits;
        let written = self
            .runtime
            .write_applied(group_id, |partitions, now| {
                // Assignments the group's bounds refuse are refused there and add nothing.
                let assigned = partitions
                    .served_ref(group_id)
                    .ok()
                    .and_then(|(_, shard)| shard.groups.get(group_id))
                    .and_then(|g| g.assignment_bytes(&request.assignments, &limits));
                if let Some(more) = assigned.filter(|more| *more > 0) {
                    admit_metadata(partitions, &limits.metadata, group_id, more)?;
                }
                let (_, group) = member_group(partitions, group_id)?;
                let wait = group.rebalance_timeout() + WAIT_GRACE;
                let step = group.sync(request, &limits, now.instant);
                let records = match &step {
                    Step::Store(value, _) => vec![GroupRecord::Group {
                        group: group_id.to_string(),
                        value: Some(value.clone()),
                    }],
                    Step::Done(_) | Step::Wait(_) => Vec::new(),
                };
                Ok(Decision {
                    answer: (step, wait),
                    records,
                })
            })
            .await?;
        let (step, wait) = written.answer;
        let rx = match step {
            Step::Done(outcome) => return outcome,
            Step::Wait(rx) => rx,
            Step::Store(value, rx) => {
                let stored = written.stored;
                if let Err(error) = &stored {
                    tracing::warn!(target: "weir::groups", group = group_id, %error, "group assignment not stored; the group rebalances");
                }
                let now = self.runtime.now();
                let mut partitions = self.runtime.lock();
                let mut deadline = None;
                if let Ok((_, group)) = member_group(&mut partitions, group_id) {
                    group.finish_sync(
                        value.generation,
                        stored.map(|()| &value),
                        now.instant,
                        now.wall_ms,
                    );
                    deadline = group.next_deadline();
                }
                drop(partitions);
                self.runtime.wake_by(deadline);
                rx
            }
        };
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(GroupError::UnknownMemberId),
            Err(_) => Err(GroupError::RebalanceInProgress),
        }
    }

    /// Heartbeat.
    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), GroupError> {
        let now = self.runtime.now();
        let mut partitions = self.runtime.lock();
        member_group(&mut partitions, group_id)?.1.heartbeat(
            member_id,
            instance_id,
            generation,
            now.instant,
        )
    }

    /// LeaveGroup for each `(member id, instance id)`: one result per member, once the
    /// group's metadata is stored when the last member left.
    pub async fn leave_group(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        let written = self
            .runtime
            .write_applied(group_id, |partitions, now| {
                let (_, group) = member_group(partitions, group_id)?;
                let mut became_empty = false;
                let results = members
                    .iter()
                    .map(|(member_id, instance_id)| {
                        group
                            .leave(member_id, instance_id.as_deref(), now.instant, now.wall_ms)
                            .map(|empty| became_empty |= empty)
                    })
                    .collect();
                let records = if became_empty {
                    group.classic_record().into_iter().collect()
                } else {
                    Vec::new()
                };
                Ok(Decision {
                    answer: (results, group.next_deadline()),
                    records,
                })
            })
            .await?;
        let (results, deadline) = written.answer;
        self.runtime.wake_by(deadline);
        if let Err(error) = written.stored {
            tracing::warn!(target: "weir::groups", group = group_id, %error, "group metadata not stored; the next change stores it");
        }
        Ok(results)
    }
}
