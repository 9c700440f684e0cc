//! What the broker's settings bound groups to: sessions, sizes and the member metadata they
//! hold, under either protocol.

use std::time::Duration;

/// Group limits from the broker's settings.
#[derive(Debug, Clone, Copy)]
pub struct GroupLimits {
    /// `group.min.session.timeout.ms`.
    pub session_timeout_min_ms: i32,
    /// `group.max.session.timeout.ms`.
    pub session_timeout_max_ms: i32,
    /// `group.initial.rebalance.delay.ms`: how long a rebalance of an empty group waits for
    /// more members, so a group starting up rebalances once, not once per member.
    pub initial_rebalance_delay_ms: i32,
    /// `group.max.size`.
    pub max_size: usize,
    /// Bytes of member metadata a group may hold.
    pub metadata: MetadataBounds,
}

/// How many bytes of member metadata a group holds at most (both protocols): what a member
/// sends to join (a classic member's protocols, a consumer-protocol member's subscription)
/// and the assignments a classic leader hands out. Without them a client can make the
/// coordinator keep whatever the request size allows, per member, for as long as it likes.
#[derive(Debug, Clone, Copy)]
pub struct MetadataBounds {
    /// `group.member.metadata.max.bytes`: one member's metadata, or one assignment.
    pub member_max_bytes: usize,
    /// `group.metadata.max.bytes`: all of one group's.
    pub group_max_bytes: usize,
    /// `group.coordinator.metadata.max.bytes`: all groups' on this coordinator together.
    pub coordinator_max_bytes: usize,
}

/// Broker settings of consumer-protocol groups.
#[derive(Debug, Clone, Copy)]
pub struct ConsumerGroupSettings {
    /// `group.consumer.session.timeout.ms`.
    pub session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms`: how often members heartbeat.
    pub heartbeat_interval_ms: i32,
    /// `group.consumer.max.size`.
    pub max_size: usize,
    /// `group.consumer.assignment.interval.ms` (KIP-1263): a group's target assignment is
    /// computed at most once per interval; changes within it wait for the next computation.
    pub assignment_interval_ms: i32,
    /// Bytes of subscriptions a member and a group may hold.
    pub metadata: MetadataBounds,
}

/// Broker settings of share groups.
#[derive(Debug, Clone, Copy)]
pub struct ShareGroupSettings {
    /// `group.share.session.timeout.ms`.
    pub session_timeout_ms: i32,
    /// `group.share.heartbeat.interval.ms`: how often members heartbeat.
    pub heartbeat_interval_ms: i32,
    /// `group.share.max.size`.
    pub max_size: usize,
}

impl Default for ShareGroupSettings {
    /// Kafka's defaults.
    fn default() -> ShareGroupSettings {
        ShareGroupSettings {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            max_size: 200,
        }
    }
}

/// A timeout in milliseconds from the wire, negatives as zero.
pub(crate) fn millis(ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}
