//! What the gateway reads of the node it runs in, through a port it owns: [`NodeView`], whose
//! answers are plain snapshots taken when asked. The binary implements it over its broker and
//! controller, so the gateway links neither and never takes a lock of theirs.

use std::sync::Arc;

use weir_metadata::authorizer::AuthorizerSettings;
use weir_metadata::MetadataImage;

/// This node as the gateway sees it: readiness, request and partition statistics, the groups
/// it coordinates, its view of the metadata quorum, and the metadata image.
pub trait NodeView: Send + Sync + 'static {
    /// This node's id.
    fn node_id(&self) -> i32;

    /// Whether the broker is registered with the metadata quorum and not shutting down.
    fn is_registered(&self) -> bool;

    /// The latest metadata image applied here.
    fn image(&self) -> Arc<MetadataImage>;

    /// Whether and how requests are authorized (the broker's `authorizer.class.name`,
    /// `super.users`, `allow.everyone.if.no.acl.found`).
    fn authorizer(&self) -> Arc<AuthorizerSettings>;

    /// The Kafka requests and connections this node served.
    fn broker_stats(&self) -> BrokerStats;

    /// Every partition this node hosts, as it stands.
    fn partitions(&self) -> Vec<PartitionStats>;

    /// Partition `index` of `topic` if this node hosts it.
    fn partition(&self, topic: &str, index: i32) -> Option<PartitionStats>;

    /// The ids of the groups this node coordinates.
    fn coordinated_groups(&self) -> Vec<String>;

    /// The metadata quorum as this node's controller sees it.
    fn raft(&self) -> RaftView;
}

/// Counters of the Kafka requests and connections a broker served.
#[derive(Debug, Clone, Default)]
pub struct BrokerStats {
    /// Each API served at least once.
    pub apis: Vec<ApiStats>,
    /// Bytes of requests read.
    pub bytes_in: u64,
    /// Bytes of responses written.
    pub bytes_out: u64,
    /// Connections open now.
    pub connections_open: i64,
    /// Connections accepted.
    pub connections_accepted: u64,
    /// Connections refused by a connection limit.
    pub connections_refused: u64,
    /// Connections closed unserved for their address's `connection_creation_rate`.
    pub connections_throttled: u64,
    /// Connections closed for a malformed, oversized or unsupported request.
    pub bad_requests: u64,
    /// Connections to SSL listeners whose TLS handshake failed or timed out.
    pub tls_handshakes_failed: u64,
    /// SASL logins refused.
    pub sasl_authentications_failed: u64,
    /// Responses that throttled clients above their quotas, by quota.
    pub throttling: Vec<ThrottleStats>,
    /// Partitions producers flood, whose appends run in the bulk lane, hottest first.
    pub hot_partitions: Vec<HotPartitionStats>,
    /// Produce requests appended in the bulk lane.
    pub bulk_lane_appends: u64,
    /// Share groups' records on this broker's share-partitions.
    pub share: ShareStats,
}

/// What share groups' records went through on a broker's share-partitions.
#[derive(Debug, Clone, Default)]
pub struct ShareStats {
    /// Deliveries (records acquired by members).
    pub acquired: u64,
    /// Deliveries after a record's first.
    pub redelivered: u64,
    /// Records acknowledged, by type (`accept`, `release`, `reject`, `gap`).
    pub acknowledged: Vec<(&'static str, u64)>,
    /// Records archived after the delivery-count limit.
    pub delivery_limit_archived: u64,
    /// Acquisition locks that expired.
    pub lock_expiries: u64,
}

/// A partition that took at least a quarter of what producers appended to its broker over
/// the last second (and at least a MiB).
#[derive(Debug, Clone)]
pub struct HotPartitionStats {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Bytes appended to it per second.
    pub bytes_per_second: u64,
}

/// The responses that throttled clients above one kind of quota.
#[derive(Debug, Clone)]
pub struct ThrottleStats {
    /// Which quota: `produce` (`producer_byte_rate`), `fetch` (`consumer_byte_rate`),
    /// `request` (`request_percentage`) or `controller_mutation` (`controller_mutation_rate`).
    pub quota: &'static str,
    /// Responses that asked their client to pause.
    pub responses: u64,
    /// Milliseconds of pauses they asked for, in total.
    pub ms: u64,
}

/// One API's requests.
#[derive(Debug, Clone)]
pub struct ApiStats {
    /// The API's name, as Kafka spells its key (`Produce`, `Fetch`, …).
    pub name: String,
    /// Requests served.
    pub requests: u64,
    /// Time from a request read to its response ready.
    pub latency: Histogram,
}

/// A histogram of durations in seconds.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    /// Each bucket's upper bound in seconds, and the observations at or below it.
    pub buckets: Vec<(f64, u64)>,
    /// Every observation.
    pub count: u64,
    /// Their sum in seconds.
    pub sum_seconds: f64,
}

/// One partition this node hosts.
#[derive(Debug, Clone)]
pub struct PartitionStats {
    /// Its topic.
    pub topic: String,
    /// Its index.
    pub index: i32,
    /// This node leads it.
    pub leader: bool,
    /// First offset kept here.
    pub log_start: i64,
    /// Offset the next record appended here gets.
    pub log_end: i64,
    /// Offset below which records are replicated to the ISR.
    pub high_watermark: i64,
    /// Offset below which read_committed consumers read: the first record of the oldest
    /// transaction open here, or the high watermark.
    pub last_stable_offset: i64,
    /// Transactions open here (records written, no marker yet).
    pub open_transactions: usize,
    /// Of those, the ones whose producer has not written here for longer than
    /// `transaction.max.timeout.ms`: hung, holding the last stable offset until aborted.
    pub hung_transactions: usize,
    /// Bytes of its segments here.
    pub size_bytes: u64,
    /// Its replica count.
    pub replicas: usize,
    /// Its in-sync replica count.
    pub isr: usize,
    /// Each follower and its log end as of its last fetch (on the leader; `None` before one).
    pub follower_log_ends: Vec<(i32, Option<i64>)>,
    /// Bytes producers appended here as leader.
    pub bytes_in: u64,
    /// Records producers appended here as leader.
    pub records_in: u64,
    /// Bytes of its records sent to consumers.
    pub bytes_out: u64,
}

/// The metadata quorum as one controller sees it.
#[derive(Debug, Clone, Copy, Default)]
pub struct RaftView {
    /// This node's controller leads the quorum.
    pub is_leader: bool,
    /// The current Raft term.
    pub term: u64,
    /// Index of the last entry known committed.
    pub committed_index: Option<u64>,
    /// Index of the last entry applied to the metadata image.
    pub applied_index: Option<u64>,
    /// Index of the last entry in this controller's log.
    pub last_log_index: Option<u64>,
}
