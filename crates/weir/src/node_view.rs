//! This node as the HTTP gateway reads it: the gateway's [`NodeView`] port over the broker and
//! the controller of the process, each answer a snapshot taken when asked.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use weir_broker::metrics::{LATENCY_BUCKETS_SECONDS, SHARE_ACKNOWLEDGE_TYPES};
use weir_broker::partition::Partition;
use weir_broker::Broker;
use weir_controller::RaftQuorum;
use weir_gateway::{
    ApiStats, BrokerStats, Histogram, HotPartitionStats, NodeView, PartitionStats, RaftView,
    ShareStats, ThrottleStats,
};
use weir_metadata::authorizer::AuthorizerSettings;
use weir_metadata::MetadataImage;

/// The broker and the controller of this process, as the gateway sees them.
pub struct ServerNode {
    /// This node's broker.
    pub broker: Arc<Broker>,
    /// This node's controller's view of the metadata quorum.
    pub quorum: Arc<RaftQuorum>,
}

impl NodeView for ServerNode {
    fn node_id(&self) -> i32 {
        self.broker.node_id()
    }

    fn is_registered(&self) -> bool {
        self.broker.is_registered()
    }

    fn image(&self) -> Arc<MetadataImage> {
        self.broker.image()
    }

    fn authorizer(&self) -> Arc<AuthorizerSettings> {
        self.broker.authorizer()
    }

    fn broker_stats(&self) -> BrokerStats {
        let metrics = &self.broker.metrics();
        let apis = metrics
            .served_apis()
            .into_iter()
            .map(|(api, counters)| {
                let latency = counters.latency.snapshot();
                ApiStats {
                    name: format!("{api:?}"),
                    requests: counters.requests.load(Ordering::Relaxed),
                    latency: Histogram {
                        buckets: LATENCY_BUCKETS_SECONDS
                            .iter()
                            .copied()
                            .zip(latency.cumulative)
                            .collect(),
                        count: latency.count,
                        sum_seconds: latency.sum_seconds,
                    },
                }
            })
            .collect();
        BrokerStats {
            apis,
            bytes_in: metrics.bytes_in.load(Ordering::Relaxed),
            bytes_out: metrics.bytes_out.load(Ordering::Relaxed),
            connections_open: metrics.connections_open.load(Ordering::Relaxed),
            connections_accepted: metrics.connections_accepted.load(Ordering::Relaxed),
            connections_refused: metrics.connections_refused.load(Ordering::Relaxed),
            connections_throttled: metrics.connections_throttled.load(Ordering::Relaxed),
            bad_requests: metrics.bad_requests.load(Ordering::Relaxed),
            tls_handshakes_failed: metrics.tls_handshakes_failed.load(Ordering::Relaxed),
            sasl_authentications_failed: metrics
                .sasl_authentications_failed
                .load(Ordering::Relaxed),
            throttling: [
                ("produce", &metrics.produce_throttling),
                ("fetch", &metrics.fetch_throttling),
                ("request", &metrics.request_throttling),
                ("controller_mutation", &metrics.mutation_throttling),
            ]
            .into_iter()
            .map(|(quota, throttling)| ThrottleStats {
                quota,
                responses: throttling.responses.load(Ordering::Relaxed),
                ms: throttling.ms.load(Ordering::Relaxed),
            })
            .collect(),
            share: {
                let share = &metrics.share;
                let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
                ShareStats {
                    acquired: load(&share.acquired),
                    redelivered: load(&share.redelivered),
                    acknowledged: SHARE_ACKNOWLEDGE_TYPES
                        .into_iter()
                        .zip(&share.acknowledged)
                        .map(|(kind, count)| (kind, load(count)))
                        .collect(),
                    delivery_limit_archived: load(&share.delivery_limit_archived),
                    lock_expiries: load(&share.lock_expiries),
                }
            },
            hot_partitions: self
                .broker
                .hot_partitions()
                .into_iter()
                .map(|hot| HotPartitionStats {
                    topic: hot.topic,
                    partition: hot.partition,
                    bytes_per_second: hot.bytes_per_second,
                })
                .collect(),
            bulk_lane_appends: metrics.bulk_lane_appends.load(Ordering::Relaxed),
        }
    }

    fn partitions(&self) -> Vec<PartitionStats> {
        let hosted = self.broker.partitions().all();
        let max_timeout_ms = self.broker.transaction_max_timeout_ms();
        hosted
            .iter()
            .map(|p| partition_stats(p, max_timeout_ms))
            .collect()
    }

    fn partition(&self, topic: &str, index: i32) -> Option<PartitionStats> {
        let hosted = self.broker.partitions().get(topic, index)?;
        Some(partition_stats(
            &hosted,
            self.broker.transaction_max_timeout_ms(),
        ))
    }

    fn coordinated_groups(&self) -> Vec<String> {
        let listing = self.broker.coordinator().list_groups();
        listing.into_iter().map(|g| g.group_id).collect()
    }

    fn raft(&self) -> RaftView {
        let status = self.quorum.raft_status();
        RaftView {
            is_leader: status.is_leader,
            term: status.term,
            committed_index: status.committed_index,
            applied_index: status.applied_index,
            last_log_index: status.last_log_index,
        }
    }
}

/// One hosted partition now: its log's offsets, size and transactions (read under its log
/// lock, released before anything else; a transaction idle past `max_timeout_ms` is hung),
/// its replication state and its traffic.
fn partition_stats(partition: &Partition, max_timeout_ms: i64) -> PartitionStats {
    let (log_start, log_end, high_watermark, size_bytes, transactions) = {
        let log = partition.log();
        (
            log.log_start_offset(),
            log.log_end_offset(),
            log.high_watermark(),
            log.size_bytes(),
            (
                log.last_stable_offset(),
                log.open_transactions(),
                log.hung_transactions(max_timeout_ms),
            ),
        )
    };
    let (last_stable_offset, open_transactions, hung_transactions) = transactions;
    let state = partition.state();
    let counters = &partition.counters;
    PartitionStats {
        topic: partition.topic.clone(),
        index: partition.index,
        leader: partition.is_leader(),
        log_start,
        log_end,
        high_watermark,
        last_stable_offset,
        open_transactions,
        hung_transactions,
        size_bytes,
        replicas: state.replicas.len(),
        isr: state.isr.len(),
        follower_log_ends: partition.follower_log_ends(),
        bytes_in: counters.bytes_in.load(Ordering::Relaxed),
        records_in: counters.records_in.load(Ordering::Relaxed),
        bytes_out: counters.bytes_out.load(Ordering::Relaxed),
    }
}
