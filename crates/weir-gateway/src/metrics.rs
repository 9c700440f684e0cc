//! `/metrics` in the Prometheus text format (version 0.0.4): this node's broker (requests by
//! API with latency histograms, bytes, connections), the partitions it hosts (offsets, size,
//! replication, bytes in and out), the groups it coordinates (lag), and its controller (Raft
//! term and indexes; cluster-wide partition health from the active controller only, so a
//! cluster's series are not counted once per node).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use weir_metadata::acl::AclOperation;

use crate::auth::Caller;
use crate::node::{Histogram, PartitionStats, ShareStats, ThrottleStats};
use crate::Gateway;

/// Groups whose lag one scrape reports at most (each costs a describe).
const GROUPS_MAX: usize = 200;
/// Longest the group lag part of a scrape may take; the rest is reported without it.
const GROUPS_DEADLINE: Duration = Duration::from_secs(5);

/// The text being built: families with their HELP and TYPE lines, then samples.
struct Exposition {
    out: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Into<f64>) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (label, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{label}=\"");
                escape_label_value(&mut self.out, value);
                self.out.push('"');
            }
            self.out.push('}');
        }
        let value: f64 = value.into();
        let _ = writeln!(self.out, " {}", format_value(value));
    }

    /// One family with a single unlabelled sample.
    fn single(&mut self, name: &str, kind: &str, help: &str, value: impl Into<f64>) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    fn histogram(&mut self, name: &str, labels: &[(&str, &str)], snapshot: &Histogram) {
        let bucket = format!("{name}_bucket");
        for (bound, count) in &snapshot.buckets {
            let le = format_value(*bound);
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.sample(&bucket, &with_le, *count as f64);
        }
        let mut with_le = labels.to_vec();
        with_le.push(("le", "+Inf"));
        self.sample(&bucket, &with_le, snapshot.count as f64);
        self.sample(&format!("{name}_sum"), labels, snapshot.sum_seconds);
        self.sample(&format!("{name}_count"), labels, snapshot.count as f64);
    }
}

fn escape_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn format_value(value: f64) -> String {
    if value.is_infinite() {
        return if value > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if value.fract() == 0.0 && value.abs() < 1e15 {
        return format!("{}", value as i64);
    }
    format!("{value}")
}

/// `GET /metrics`.
pub async fn scrape(State(gateway): State<Arc<Gateway>>, caller: Caller) -> Response {
    // Off the open paths, for who may describe the cluster.
    if let Err(refusal) = caller.require_cluster(AclOperation::Describe) {
        return refusal.into_response();
    }
    let mut text = Exposition {
        out: String::with_capacity(16 * 1024),
    };
    broker_metrics(&gateway, &mut text);
    partition_metrics(&gateway, &mut text);
    controller_metrics(&gateway, &mut text);
    let _ = tokio::time::timeout(GROUPS_DEADLINE, group_metrics(&gateway, &mut text)).await;
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text.out,
    )
        .into_response()
}

fn broker_metrics(gateway: &Gateway, text: &mut Exposition) {
    let node = &gateway.node;
    let stats = node.broker_stats();
    text.single(
        "weir_broker_ready",
        "gauge",
        "1 when the broker is registered with the metadata quorum and serving",
        u8::from(node.is_registered() && *gateway.serving.borrow()),
    );
    text.family(
        "weir_requests_total",
        "counter",
        "Kafka requests served, by API",
    );
    for api in &stats.apis {
        text.sample(
            "weir_requests_total",
            &[("api", &api.name)],
            api.requests as f64,
        );
    }
    text.family(
        "weir_request_duration_seconds",
        "histogram",
        "Time from a Kafka request read to its response ready, by API",
    );
    for api in &stats.apis {
        text.histogram(
            "weir_request_duration_seconds",
            &[("api", &api.name)],
            &api.latency,
        );
    }
    text.single(
        "weir_received_bytes_total",
        "counter",
        "Bytes of Kafka requests read",
        stats.bytes_in as f64,
    );
    text.single(
        "weir_sent_bytes_total",
        "counter",
        "Bytes of Kafka responses written",
        stats.bytes_out as f64,
    );
    text.single(
        "weir_connections",
        "gauge",
        "Kafka client connections open",
        stats.connections_open as f64,
    );
    text.single(
        "weir_connections_accepted_total",
        "counter",
        "Kafka client connections accepted",
        stats.connections_accepted as f64,
    );
    text.single(
        "weir_connections_refused_total",
        "counter",
        "Kafka client connections refused by a connection limit",
        stats.connections_refused as f64,
    );
    text.single(
        "weir_connections_throttled_total",
        "counter",
        "Kafka client connections held and closed unserved because their address was above its connection_creation_rate",
        stats.connections_throttled as f64,
    );
    text.single(
        "weir_bad_requests_total",
        "counter",
        "Connections closed for a malformed, oversized or unsupported request",
        stats.bad_requests as f64,
    );
    text.single(
        "weir_tls_handshakes_failed_total",
        "counter",
        "Connections to SSL listeners closed because their TLS handshake failed or timed out",
        stats.tls_handshakes_failed as f64,
    );
    text.single(
        "weir_sasl_authentications_failed_total",
        "counter",
        "SASL logins refused: wrong credentials, broken exchanges, addresses locked out",
        stats.sasl_authentications_failed as f64,
    );
    type Pick = fn(&ThrottleStats) -> f64;
    let throttling: [(&str, &str, Pick); 2] = [
        (
            "weir_throttled_responses_total",
            "Responses that throttled a client above its quota (produce: producer_byte_rate, fetch: consumer_byte_rate, request: request_percentage, controller_mutation: controller_mutation_rate)",
            |t| t.responses as f64,
        ),
        (
            "weir_throttle_seconds_total",
            "Time those responses throttled their clients for, in total",
            |t| t.ms as f64 / 1000.0,
        ),
    ];
    for (name, help, pick) in throttling {
        text.family(name, "counter", help);
        for throttle in &stats.throttling {
            text.sample(name, &[("quota", throttle.quota)], pick(throttle));
        }
    }
    text.family(
        "weir_hot_partition_bytes_per_second",
        "gauge",
        "Bytes appended per second to each hot partition (a quarter or more of what producers appended to this node over the last second): its appends run at a lower priority",
    );
    for hot in &stats.hot_partitions {
        text.sample(
            "weir_hot_partition_bytes_per_second",
            &[
                ("topic", &hot.topic),
                ("partition", &hot.partition.to_string()),
            ],
            hot.bytes_per_second as f64,
        );
    }
    text.single(
        "weir_bulk_lane_appends_total",
        "counter",
        "Produce requests appended at a lower priority, for writing to a hot partition",
        stats.bulk_lane_appends as f64,
    );
    share_metrics(&stats.share, text);
}

/// Share groups' records on this broker's share-partitions.
fn share_metrics(share: &ShareStats, text: &mut Exposition) {
    text.single(
        "weir_share_acquired_records_total",
        "counter",
        "Share groups: records delivered to members (each delivery counts)",
        share.acquired as f64,
    );
    text.single(
        "weir_share_redelivered_records_total",
        "counter",
        "Share groups: deliveries of records delivered before (released, lock expired, member gone)",
        share.redelivered as f64,
    );
    text.family(
        "weir_share_acknowledged_records_total",
        "counter",
        "Share groups: records acknowledged by members, by type (accept, release, reject, gap)",
    );
    for (kind, count) in &share.acknowledged {
        text.sample(
            "weir_share_acknowledged_records_total",
            &[("type", kind)],
            *count as f64,
        );
    }
    text.single(
        "weir_share_delivery_limit_archived_records_total",
        "counter",
        "Share groups: records archived after group.share.delivery.count.limit deliveries",
        share.delivery_limit_archived as f64,
    );
    text.single(
        "weir_share_lock_expiries_total",
        "counter",
        "Share groups: acquisition locks that expired before their member acknowledged",
        share.lock_expiries as f64,
    );
}

fn partition_metrics(gateway: &Gateway, text: &mut Exposition) {
    let mut samples = gateway.node.partitions();
    samples.sort_by(|a, b| (&a.topic, a.index).cmp(&(&b.topic, b.index)));
    type Pick = fn(&PartitionStats) -> f64;
    let every_replica: [(&str, &str, &str, Pick); 5] = [
        (
            "weir_partition_log_start_offset",
            "gauge",
            "First offset kept in the partition's log on this node",
            |s| s.log_start as f64,
        ),
        (
            "weir_partition_log_end_offset",
            "gauge",
            "Offset the next record appended to the partition's log on this node gets",
            |s| s.log_end as f64,
        ),
        (
            "weir_partition_high_watermark",
            "gauge",
            "Offset below which records are replicated to the ISR and readable",
            |s| s.high_watermark as f64,
        ),
        (
            "weir_partition_size_bytes",
            "gauge",
            "Bytes of the partition's log segments on this node",
            |s| s.size_bytes as f64,
        ),
        (
            "weir_partition_leader",
            "gauge",
            "1 when this node leads the partition",
            |s| f64::from(u8::from(s.leader)),
        ),
    ];
    for (name, kind, help, pick) in every_replica {
        text.family(name, kind, help);
        for s in &samples {
            let partition = s.index.to_string();
            text.sample(
                name,
                &[("topic", &s.topic), ("partition", &partition)],
                pick(s),
            );
        }
    }
    // Replication state and traffic are the leader's to report, once per partition.
    let leaders: Vec<&PartitionStats> = samples.iter().filter(|s| s.leader).collect();
    let led: [(&str, &str, &str, Pick); 9] = [
        (
            "weir_partition_replicas",
            "gauge",
            "Replicas of the partition (reported by its leader)",
            |s| s.replicas as f64,
        ),
        (
            "weir_partition_isr_size",
            "gauge",
            "In-sync replicas of the partition (reported by its leader)",
            |s| s.isr as f64,
        ),
        (
            "weir_partition_under_replicated",
            "gauge",
            "1 when the partition's ISR is smaller than its replica set (reported by its leader)",
            |s| f64::from(u8::from(s.isr < s.replicas)),
        ),
        (
            "weir_partition_last_stable_offset",
            "gauge",
            "Offset below which read_committed consumers read: the first record of the oldest open transaction, or the high watermark (reported by its leader); one that stays below the high watermark for long is a hung transaction",
            |s| s.last_stable_offset as f64,
        ),
        (
            "weir_partition_open_transactions",
            "gauge",
            "Transactions open on the partition: records written, no commit or abort marker yet (reported by its leader)",
            |s| s.open_transactions as f64,
        ),
        (
            "weir_partition_hung_transactions",
            "gauge",
            "Transactions open on the partition whose producer has not written there for longer than transaction.max.timeout.ms: no coordinator will end them, and read_committed consumers stop at the first until it is aborted (kafka-transactions abort; reported by its leader)",
            |s| s.hung_transactions as f64,
        ),
        (
            "weir_partition_received_bytes_total",
            "counter",
            "Bytes producers appended to the partition (reported by its leader)",
            |s| s.bytes_in as f64,
        ),
        (
            "weir_partition_received_records_total",
            "counter",
            "Records producers appended to the partition (reported by its leader)",
            |s| s.records_in as f64,
        ),
        (
            "weir_partition_sent_bytes_total",
            "counter",
            "Bytes of the partition's records sent to consumers (reported by its leader)",
            |s| s.bytes_out as f64,
        ),
    ];
    for (name, kind, help, pick) in led {
        text.family(name, kind, help);
        for s in &leaders {
            let partition = s.index.to_string();
            text.sample(
                name,
                &[("topic", &s.topic), ("partition", &partition)],
                pick(s),
            );
        }
    }
    text.family(
        "weir_partition_follower_lag_records",
        "gauge",
        "Records a follower is behind the leader's log end, as of its last fetch (reported by the leader)",
    );
    for s in &leaders {
        let partition = s.index.to_string();
        for (follower, end) in &s.follower_log_ends {
            let Some(end) = end else { continue };
            text.sample(
                "weir_partition_follower_lag_records",
                &[
                    ("topic", &s.topic),
                    ("partition", &partition),
                    ("follower", &follower.to_string()),
                ],
                (s.log_end - end).max(0) as f64,
            );
        }
    }
}

fn controller_metrics(gateway: &Gateway, text: &mut Exposition) {
    let raft = gateway.node.raft();
    text.single(
        "weir_controller_active",
        "gauge",
        "1 when this node's controller leads the metadata quorum",
        u8::from(raft.is_leader),
    );
    text.single(
        "weir_raft_term",
        "gauge",
        "The metadata quorum's current Raft term",
        raft.term as f64,
    );
    let index = |i: Option<u64>| i.map_or(-1.0, |i| i as f64);
    text.single(
        "weir_raft_commit_index",
        "gauge",
        "Index of the last metadata log entry known committed (-1 when none)",
        index(raft.committed_index),
    );
    text.single(
        "weir_raft_applied_index",
        "gauge",
        "Index of the last metadata log entry applied here (-1 when none)",
        index(raft.applied_index),
    );
    text.single(
        "weir_raft_last_log_index",
        "gauge",
        "Index of the last entry in this node's metadata log (-1 when empty)",
        index(raft.last_log_index),
    );
    if !raft.is_leader {
        return;
    }
    let image = gateway.node.image();
    let (mut alive, mut fenced) = (0u32, 0u32);
    for broker in image.brokers() {
        if broker.fenced {
            fenced += 1;
        } else {
            alive += 1;
        }
    }
    text.family(
        "weir_cluster_brokers",
        "gauge",
        "Registered brokers by state (reported by the active controller)",
    );
    text.sample("weir_cluster_brokers", &[("state", "alive")], alive);
    text.sample("weir_cluster_brokers", &[("state", "fenced")], fenced);
    let partitions: Vec<_> = image.topics().flat_map(|t| t.partitions.iter()).collect();
    text.single(
        "weir_cluster_partitions",
        "gauge",
        "Partitions of every topic (reported by the active controller)",
        partitions.len() as f64,
    );
    text.single(
        "weir_cluster_offline_partitions",
        "gauge",
        "Partitions with no leader (reported by the active controller)",
        partitions.iter().filter(|p| p.leader < 0).count() as f64,
    );
    text.single(
        "weir_cluster_under_replicated_partitions",
        "gauge",
        "Partitions whose ISR is smaller than their replica set (reported by the active controller)",
        partitions.iter().filter(|p| p.under_replicated()).count() as f64,
    );
}

async fn group_metrics(gateway: &Gateway, text: &mut Exposition) {
    let groups = gateway.node.coordinated_groups();
    let mut described = Vec::new();
    for group in groups.iter().take(GROUPS_MAX) {
        if let Ok(description) = gateway.admin.describe_group(group).await {
            described.push(description);
        }
    }
    text.family(
        "weir_group_members",
        "gauge",
        "Members of each group this node coordinates",
    );
    for group in &described {
        text.sample(
            "weir_group_members",
            &[("group", &group.group_id)],
            group.members.len() as f64,
        );
    }
    text.family(
        "weir_group_lag_records",
        "gauge",
        "Records between a group's committed offset and the partition's high watermark, per partition (groups this node coordinates)",
    );
    for group in &described {
        for p in &group.partitions {
            if let Some(lag) = p.lag {
                let partition = p.partition.to_string();
                text.sample(
                    "weir_group_lag_records",
                    &[
                        ("group", &group.group_id),
                        ("topic", &p.topic),
                        ("partition", &partition),
                    ],
                    lag as f64,
                );
            }
        }
    }
    text.family(
        "weir_group_lag_records_sum",
        "gauge",
        "A group's lag summed over its partitions (groups this node coordinates)",
    );
    for group in &described {
        let total: i64 = group.partitions.iter().filter_map(|p| p.lag).sum();
        text.sample(
            "weir_group_lag_records_sum",
            &[("group", &group.group_id)],
            total as f64,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_escape_label_values_and_format_numbers() {
        let mut text = Exposition { out: String::new() };
        text.family("weir_x", "gauge", "help");
        text.sample("weir_x", &[("topic", "a\"b\\c\nd")], 3u32);
        text.sample("weir_x", &[], 0.25);
        assert_eq!(
            text.out,
            "# HELP weir_x help\n# TYPE weir_x gauge\nweir_x{topic=\"a\\\"b\\\\c\\nd\"} 3\nweir_x 0.25\n"
        );
    }
}
