//! What the broker counts as it serves: requests by API with their latency, bytes in and out,
//! connections. Plain atomics on the request path (no lock, no allocation); the HTTP
//! gateway reads them when `/metrics` is scraped and renders them for Prometheus.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use kafka_protocol::messages::ApiKey;

/// Upper bounds (seconds) of the request latency histogram's buckets; `+Inf` is implied.
pub const LATENCY_BUCKETS_SECONDS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Api keys counted one by one; a request with a higher key is counted under the last.
const API_KEYS: usize = 96;

/// A cumulative latency histogram with fixed buckets ([`LATENCY_BUCKETS_SECONDS`]).
#[derive(Default)]
pub struct LatencyHistogram {
    /// Observations at or below each bucket's bound (not cumulative; summed when read).
    buckets: [AtomicU64; LATENCY_BUCKETS_SECONDS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

/// A histogram as read: cumulative bucket counts, total count, sum in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// Observations at or below each of [`LATENCY_BUCKETS_SECONDS`], cumulative.
    pub cumulative: Vec<u64>,
    /// Every observation (the `+Inf` bucket).
    pub count: u64,
    /// The observations' sum, in seconds.
    pub sum_seconds: f64,
}

impl LatencyHistogram {
    /// Counts one observation.
    pub fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        if let Some(bucket) = LATENCY_BUCKETS_SECONDS.iter().position(|b| seconds <= *b) {
            self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        }
        self.sum_nanos.fetch_add(
            u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// The histogram now. Counts are read one by one, so a bucket may trail the count by the
    /// observations made meanwhile; the cumulative counts never exceed the total.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let count = self.count.load(Ordering::Relaxed);
        let mut running = 0u64;
        let cumulative = self
            .buckets
            .iter()
            .map(|b| {
                running += b.load(Ordering::Relaxed);
                running.min(count)
            })
            .collect();
        HistogramSnapshot {
            cumulative,
            count,
            sum_seconds: self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

/// One API's counters.
#[derive(Default)]
pub struct ApiMetrics {
    /// Requests answered (or dropped: acks=0, closed connections).
    pub requests: AtomicU64,
    /// Time from a request decoded to its reply ready.
    pub latency: LatencyHistogram,
}

/// The broker's counters.
pub struct BrokerMetrics {
    apis: Vec<ApiMetrics>,
    /// Request bytes read, length prefixes included.
    pub bytes_in: AtomicU64,
    /// Response bytes written, length prefixes included.
    pub bytes_out: AtomicU64,
    /// Connections open now.
    pub connections_open: AtomicI64,
    /// Connections accepted since start.
    pub connections_accepted: AtomicU64,
    /// Connections refused by a connection limit since start.
    pub connections_refused: AtomicU64,
    /// Connections closed unserved because their address was above its
    /// `connection_creation_rate`.
    pub connections_throttled: AtomicU64,
    /// Connections closed for bad input (a malformed or oversized frame, an unknown API).
    pub bad_requests: AtomicU64,
    /// Connections to SSL listeners closed because their TLS handshake failed or timed out.
    pub tls_handshakes_failed: AtomicU64,
    /// SASL logins refused (wrong credentials, broken exchanges, addresses locked out).
    pub sasl_authentications_failed: AtomicU64,
    /// Produce responses that throttled a client above its `producer_byte_rate`.
    pub produce_throttling: Throttling,
    /// Fetch responses that throttled a consumer above its `consumer_byte_rate`.
    pub fetch_throttling: Throttling,
    /// Responses that throttled a client above its `request_percentage`.
    pub request_throttling: Throttling,
    /// CreateTopics, DeleteTopics and CreatePartitions responses that throttled a client above
    /// its `controller_mutation_rate`.
    pub mutation_throttling: Throttling,
    /// Produce requests appended in the bulk lane, for writing to a hot partition.
    pub bulk_lane_appends: AtomicU64,
    /// What share groups' records went through on the share-partitions led here.
    pub share: ShareMetrics,
}

/// What share groups' records went through on this broker's share-partitions.
#[derive(Debug, Default)]
pub struct ShareMetrics {
    /// Deliveries: records acquired by members.
    pub acquired: AtomicU64,
    /// Of those, deliveries after a record's first.
    pub redelivered: AtomicU64,
    /// Records acknowledged, by type: accept, release, reject, gap.
    pub acknowledged: [AtomicU64; 4],
    /// Records archived after `group.share.delivery.count.limit` deliveries.
    pub delivery_limit_archived: AtomicU64,
    /// Acquisition locks that expired.
    pub lock_expiries: AtomicU64,
}

/// The acknowledgement types [`ShareMetrics::acknowledged`] counts, in its order.
pub const SHARE_ACKNOWLEDGE_TYPES: [&str; 4] = ["accept", "release", "reject", "gap"];

/// Responses that throttled a client above one of its quotas.
#[derive(Debug, Default)]
pub struct Throttling {
    /// Responses that asked their client to pause.
    pub responses: AtomicU64,
    /// Milliseconds of pauses they asked for, in total.
    pub ms: AtomicU64,
}

impl Throttling {
    /// Counts one response that asked its client to pause for `pause`.
    pub fn count(&self, pause: Duration) {
        self.responses.fetch_add(1, Ordering::Relaxed);
        let ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX);
        self.ms.fetch_add(ms, Ordering::Relaxed);
    }
}

impl Default for BrokerMetrics {
    fn default() -> BrokerMetrics {
        BrokerMetrics {
            apis: (0..API_KEYS).map(|_| ApiMetrics::default()).collect(),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            connections_open: AtomicI64::new(0),
            connections_accepted: AtomicU64::new(0),
            connections_refused: AtomicU64::new(0),
            connections_throttled: AtomicU64::new(0),
            bad_requests: AtomicU64::new(0),
            tls_handshakes_failed: AtomicU64::new(0),
            sasl_authentications_failed: AtomicU64::new(0),
            produce_throttling: Throttling::default(),
            fetch_throttling: Throttling::default(),
            request_throttling: Throttling::default(),
            mutation_throttling: Throttling::default(),
            bulk_lane_appends: AtomicU64::new(0),
            share: ShareMetrics::default(),
        }
    }
}

impl BrokerMetrics {
    /// The counters of `api`.
    pub fn api(&self, api: ApiKey) -> &ApiMetrics {
        let index = usize::try_from(api as i16).unwrap_or(0).min(API_KEYS - 1);
        &self.apis[index]
    }

    /// Every API that has served a request, with its counters.
    pub fn served_apis(&self) -> Vec<(ApiKey, &ApiMetrics)> {
        self.apis
            .iter()
            .enumerate()
            .filter(|(_, m)| m.requests.load(Ordering::Relaxed) > 0)
            .filter_map(|(key, m)| Some((ApiKey::try_from(i16::try_from(key).ok()?).ok()?, m)))
            .collect()
    }
}

/// Counters of one partition hosted here.
#[derive(Default)]
pub struct PartitionCounters {
    /// Bytes of batches producers appended (as the leader).
    pub bytes_in: AtomicU64,
    /// Records producers appended (as the leader).
    pub records_in: AtomicU64,
    /// Bytes of records sent to consumers (replica fetches not counted).
    pub bytes_out: AtomicU64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let histogram = LatencyHistogram::default();
        histogram.observe(Duration::from_micros(100));
        histogram.observe(Duration::from_millis(3));
        histogram.observe(Duration::from_secs(60));
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.count, 3);
        assert_eq!(snapshot.cumulative[0], 1, "≤ 0.5 ms");
        assert_eq!(snapshot.cumulative[3], 2, "≤ 5 ms");
        assert_eq!(
            *snapshot.cumulative.last().expect("a +Inf bucket"),
            2,
            "60 s is only in +Inf"
        );
        assert!((snapshot.sum_seconds - 60.0031).abs() < 1e-6);
    }

    #[test]
    fn only_served_apis_are_listed() {
        let metrics = BrokerMetrics::default();
        metrics
            .api(ApiKey::Produce)
            .requests
            .fetch_add(2, Ordering::Relaxed);
        let served = metrics.served_apis();
        assert_eq!(served.len(), 1);
        assert_eq!(served[0].0, ApiKey::Produce);
    }
}
