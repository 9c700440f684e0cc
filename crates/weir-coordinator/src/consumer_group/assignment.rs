//! A consumer group's target assignment: the subscribed topics resolved against the catalog,
//! the group epoch moved when they or the members change, and the assignor run at once, or
//! held back by `group.consumer.assignment.interval.ms`, or handed to the timer's thread when
//! it is large.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use uuid::Uuid;

use crate::assignors::{assign, MemberSpec, TopicPartitions, ASSIGNORS};
use crate::records::{ConsumerKey, ConsumerValue};

use super::reconcile::flatten;
use super::{ConsumerGroup, TopicCatalog};

/// What computing a group's target assignment needs, taken out of the group
/// ([`ConsumerGroup::take_assignment_job`]).
#[derive(Debug)]
pub struct AssignmentJob {
    epoch: i32,
    assignor: &'static str,
    /// Each member's id, subscribed topic ids and previous target, by member id.
    members: Vec<(String, BTreeSet<Uuid>, Option<TopicPartitions>)>,
    counts: BTreeMap<Uuid, i32>,
}

impl AssignmentJob {
    /// Computes the target assignment.
    pub fn run(mut self) -> ComputedTarget {
        let specs: Vec<MemberSpec<'_>> = self
            .members
            .iter_mut()
            .map(|(id, subscribed, previous)| MemberSpec {
                member_id: id,
                subscribed: std::mem::take(subscribed),
                previous: previous.as_ref(),
            })
            .collect();
        let target = assign(self.assignor, &specs, &self.counts)
            .into_iter()
            .collect();
        ComputedTarget {
            epoch: self.epoch,
            assignor: self.assignor,
            target,
        }
    }
}

/// A target assignment computed for a group epoch ([`AssignmentJob::run`]).
#[derive(Debug)]
pub struct ComputedTarget {
    epoch: i32,
    assignor: &'static str,
    target: HashMap<String, TopicPartitions>,
}

/// The largest target assignment (members plus partitions) computed where a heartbeat or
/// the timer decides it, under the coordinator's lock; a larger one is computed by the
/// timer's thread without the lock, so no request waits for it.
const INLINE_ASSIGNMENT_MAX: usize = 1_000;

impl ConsumerGroup {
    /// Resolves every subscription against the catalog. True when a subscribed topic
    /// appeared, went, was recreated or grew, which moves the group epoch.
    pub(super) fn refresh_topics(&mut self, catalog: &dyn TopicCatalog) -> bool {
        let version = catalog.version();
        let resolved_at = Some((version, self.subscriptions.generation));
        if !self.topics_unknown && self.resolved_at == resolved_at {
            return false; // neither the subscriptions nor the topics changed
        }
        self.resolved_at = resolved_at;
        let mut topics = BTreeMap::new();
        let patterns: Vec<String> = self.subscriptions.patterns.keys().cloned().collect();
        let mut names: BTreeSet<String> = self.subscriptions.names.keys().cloned().collect();
        if !patterns.is_empty() {
            let cached = self
                .pattern_matches
                .as_ref()
                .filter(|(v, p, _)| *v == version && *p == patterns);
            let matched = match cached {
                Some((_, _, matched)) => matched.clone(),
                None => {
                    let regexes: Vec<&regex::Regex> = self
                        .members
                        .values()
                        .filter_map(|m| m.topic_regex.as_ref().map(|(_, r)| r))
                        .collect();
                    let matched: BTreeSet<String> = catalog
                        .topic_names()
                        .into_iter()
                        .filter(|name| regexes.iter().any(|r| r.is_match(name)))
                        .collect();
                    self.pattern_matches = Some((version, patterns, matched.clone()));
                    matched
                }
            };
            names.extend(matched);
        }
        for name in names {
            if let Some(topic) = catalog.topic(&name) {
                topics.insert(name, topic);
            }
        }
        let restored = std::mem::take(&mut self.topics_unknown);
        if topics == self.topics {
            return false;
        }
        self.topics = topics;
        !restored || !self.target_covers_topics()
    }

    /// True when the target assignment holds exactly the partitions of the subscribed topics.
    pub(super) fn target_covers_topics(&self) -> bool {
        let targeted: BTreeSet<(Uuid, i32)> = self.target.values().flat_map(flatten).collect();
        let wanted: BTreeSet<(Uuid, i32)> = self
            .topics
            .values()
            .flat_map(|&(topic, n)| (0..n).map(move |p| (topic, p)))
            .collect();
        targeted == wanted
    }

    /// The target assignment for the current group epoch, with the assignor most members
    /// prefer (the default when none says).
    pub(super) fn compute_target(&mut self, now: Instant) {
        let computed = self.assignment_job().run();
        self.install_target(computed, now);
    }

    /// What computing the target assignment for the group epoch needs, taken out of the group
    /// so that it can be computed without it (outside the coordinator's lock).
    pub(super) fn assignment_job(&self) -> AssignmentJob {
        AssignmentJob {
            epoch: self.epoch,
            assignor: self.preferred_assignor(),
            members: self
                .members
                .iter()
                .map(|(id, m)| {
                    let subscribed = self
                        .topics
                        .iter()
                        .filter(|(name, _)| m.subscribes_to(name))
                        .map(|(_, (topic, _))| *topic)
                        .collect();
                    (id.clone(), subscribed, self.target.get(id).cloned())
                })
                .collect(),
            counts: self.topics.values().copied().collect(),
        }
    }

    /// Makes `computed` the target assignment: the members' targets that changed, then its
    /// epoch, as Kafka writes them.
    pub(super) fn install_target(&mut self, computed: ComputedTarget, now: Instant) {
        let ComputedTarget {
            epoch,
            assignor,
            target,
        } = computed;
        let gone: Vec<String> = self
            .target
            .keys()
            .filter(|id| !target.contains_key(*id))
            .cloned()
            .collect();
        let target: BTreeMap<String, TopicPartitions> = target.into_iter().collect();
        for (id, partitions) in target {
            if self.target.get(&id) != Some(&partitions) {
                self.write(
                    ConsumerKey::TargetMember(id),
                    Some(ConsumerValue::Target(partitions)),
                    now,
                );
            }
        }
        for id in gone {
            self.write(ConsumerKey::TargetMember(id), None, now);
        }
        self.assignor = assignor;
        self.write(
            ConsumerKey::TargetMetadata,
            Some(ConsumerValue::Epoch(epoch)),
            now,
        );
    }

    /// The work of computing a target assignment: its members and the partitions it hands
    /// out.
    pub(super) fn assignment_cost(&self) -> usize {
        let partitions: usize = self
            .topics
            .values()
            .map(|(_, count)| usize::try_from(*count).unwrap_or(0))
            .sum();
        self.members.len() + partitions
    }

    /// The target assignment the timer computes for this group now, if one is due and too
    /// large to compute under the coordinator's lock (see [`INLINE_ASSIGNMENT_MAX`]).
    pub fn take_assignment_job(&mut self, now: Instant) -> Option<AssignmentJob> {
        if self.topics_unknown
            || self.assignment_epoch >= self.epoch
            || self.assignment_due.is_none_or(|due| due > now)
        {
            return None;
        }
        self.assignment_due = None;
        Some(self.assignment_job())
    }

    /// Installs a target assignment computed away from the group, unless the group moved on
    /// meanwhile (then it is computed again).
    pub fn finish_assignment(&mut self, computed: ComputedTarget, now: Instant) {
        if self.assignment_epoch >= computed.epoch {
            return;
        }
        if computed.epoch != self.epoch {
            self.assignment_due = Some(now);
            self.note_deadline(now);
            return;
        }
        self.install_target(computed, now);
        self.assigned_at = Some(now);
    }

    /// The assignor most members name (the default when none does).
    pub(super) fn preferred_assignor(&self) -> &'static str {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for member in self.members.values() {
            if let Some(name) = member.server_assignor.as_deref() {
                *votes.entry(name).or_default() += 1;
            }
        }
        ASSIGNORS
            .iter()
            .copied()
            .max_by_key(|name| (votes.get(name).copied().unwrap_or(0), *name == ASSIGNORS[0]))
            .unwrap_or(ASSIGNORS[0])
    }

    /// Computes the target assignment for the group epoch now, unless one was computed less
    /// than the assignment interval ago: then once the interval has passed (the timer does
    /// it), so a storm of joins costs one computation per interval, not one per join.
    pub(super) fn update_target(&mut self, now: Instant) {
        if self.assignment_epoch >= self.epoch {
            self.assignment_due = None;
            return;
        }
        match self.assigned_at.map(|at| at + self.assignment_interval) {
            Some(allowed) if allowed > now => {
                self.assignment_due = Some(allowed);
                self.note_deadline(allowed);
            }
            _ if self.assignment_cost() <= INLINE_ASSIGNMENT_MAX => {
                self.compute_target(now);
                self.assigned_at = Some(now);
                self.assignment_due = None;
            }
            // Too large to compute on a request's worker: the timer's thread does it.
            _ => {
                self.assignment_due = Some(now);
                self.note_deadline(now);
            }
        }
    }
}
