//! Who a request is from, for client quotas ([`QuotaClient`]), and `request_percentage`
//! quotas: the time a client's requests occupy the broker's threads, as a percentage of one
//! thread over Kafka's quota window (Kafka's request quota, KIP-124).
//! A [`RequestMeter`] times one request of a client such a quota applies to: the part of its
//! handling done before the connection reads on, and every poll of the rest (a wait for
//! replication or a long poll costs nothing). When the response is built the time is
//! recorded; a client above its quota gets `throttle_time_ms` (at most a second, as Kafka
//! bounds it) and its connection is read no further for that time. Followers' fetches are
//! exempt, as Kafka exempts cluster actions.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use kafka_protocol::messages::ResponseKind;

use crate::broker::Broker;
use crate::quotas::Mute;
use crate::reply::{PendingReply, Reply};
use crate::request_context::RequestContext;

/// Who a request is from, when client quotas are set: what its quotas are looked up by, and
/// the connection to mute when it is throttled.
pub struct QuotaClient {
    principal: Arc<str>,
    client_id: String,
    /// The connection's mute.
    pub mute: Arc<Mute>,
}

impl QuotaClient {
    /// The client of `context`, or `None` when no quota is set (nothing to measure).
    pub fn of(
        broker: &Broker,
        context: &RequestContext,
        client_id: Option<&str>,
    ) -> Option<QuotaClient> {
        if broker.image().client_quotas().is_empty() {
            return None;
        }
        Some(QuotaClient::new(context, client_id))
    }

    fn new(context: &RequestContext, client_id: Option<&str>) -> QuotaClient {
        QuotaClient {
            principal: context.principal.clone(),
            client_id: client_id.unwrap_or("").to_owned(),
            mute: context.mute.clone(),
        }
    }

    /// The principal and client id quotas are looked up by.
    pub fn who(&self) -> (&str, &str) {
        (&self.principal, &self.client_id)
    }
}

/// Percent of one thread that a second of request time is, per second of the window.
const PERCENT_PER_SECOND: f64 = 100.0;

/// The time one request has taken so far.
#[derive(Debug)]
struct Spent {
    /// Time of the handling that is over.
    done: Duration,
    /// When the handling under way (the first part, or a poll) began.
    since: Option<Instant>,
    /// Recorded already (or exempt): nothing more is counted.
    finished: bool,
}

/// Times one request of a client with a `request_percentage` quota.
pub struct RequestMeter {
    broker: Arc<Broker>,
    client: QuotaClient,
    spent: Mutex<Spent>,
}

impl RequestMeter {
    /// Starts timing a request from the client of `context`, if a `request_percentage`
    /// quota applies to it.
    pub fn start(
        broker: &Arc<Broker>,
        context: &RequestContext,
        client_id: Option<&str>,
    ) -> Option<Arc<RequestMeter>> {
        let image = broker.image();
        let quotas = image.client_quotas();
        let who = (&*context.principal, client_id.unwrap_or(""));
        if quotas.is_empty() || !broker.request_quotas.applies(quotas, who) {
            return None;
        }
        let client = QuotaClient::new(context, client_id);
        Some(Arc::new(RequestMeter {
            broker: broker.clone(),
            client,
            spent: Mutex::new(Spent {
                done: Duration::ZERO,
                since: Some(Instant::now()),
                finished: false,
            }),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Spent> {
        self.spent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ends the part of the handling under way.
    fn pause(&self) {
        let mut spent = self.lock();
        if let Some(since) = spent.since.take() {
            spent.done += since.elapsed();
        }
    }

    /// Begins a part of the handling (a poll).
    fn resume(&self) {
        self.lock().since = Some(Instant::now());
    }

    /// Leaves the request uncounted (a follower's fetch).
    pub fn exempt(&self) {
        self.lock().finished = true;
    }

    /// Records the request's time against the client's quota (once; later calls answer
    /// zero) and answers how long the client must pause, for which its connection is muted.
    pub fn finish(&self) -> Duration {
        let taken = {
            let mut spent = self.lock();
            if spent.finished {
                return Duration::ZERO;
            }
            spent.finished = true;
            spent.done + spent.since.map_or(Duration::ZERO, |since| since.elapsed())
        };
        let image = self.broker.image();
        let pause = self.broker.request_quotas.record(
            image.client_quotas(),
            self.client.who(),
            taken.as_secs_f64() * PERCENT_PER_SECOND,
        );
        if !pause.is_zero() {
            self.broker.metrics.request_throttling.count(pause);
            self.client.mute.extend(pause);
        }
        pause
    }

    /// Records the request's time and raises the response's `throttle_time_ms` to the pause
    /// it calls for (responses without the field are left as they are).
    pub fn throttle(&self, body: &mut ResponseKind) {
        let pause = self.finish();
        if !pause.is_zero() {
            raise_throttle(body, pause);
        }
    }

    /// `pending` with each of its polls timed; when it completes without having built its
    /// response through [`RequestMeter::throttle`], its time is recorded then.
    pub fn timed(self: Arc<RequestMeter>, pending: PendingReply) -> PendingReply {
        self.pause();
        Box::pin(Timed {
            meter: self,
            pending,
        })
    }
}

/// A pending reply whose polls its meter times.
struct Timed {
    meter: Arc<RequestMeter>,
    pending: PendingReply,
}

impl Future for Timed {
    type Output = Reply;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Reply> {
        self.meter.resume();
        let polled = self.pending.as_mut().poll(cx);
        self.meter.pause();
        if polled.is_ready() {
            self.meter.finish();
        }
        polled
    }
}

/// Raises the `throttle_time_ms` of `body` to `pause`; a response without the field (at any
/// version) is left as it is.
fn raise_throttle(body: &mut ResponseKind, pause: Duration) {
    let ms = i32::try_from(pause.as_millis()).unwrap_or(i32::MAX);
    macro_rules! raise {
        ($($kind:ident),* $(,)?) => {
            match body {
                $(ResponseKind::$kind(r) => r.throttle_time_ms = r.throttle_time_ms.max(ms),)*
                _ => {}
            }
        };
    }
    raise!(
        AddOffsetsToTxn,
        AddPartitionsToTxn,
        AlterClientQuotas,
        AlterConfigs,
        AlterPartitionReassignments,
        AlterUserScramCredentials,
        ApiVersions,
        ConsumerGroupDescribe,
        ConsumerGroupHeartbeat,
        CreateAcls,
        CreatePartitions,
        CreateTopics,
        DeleteAcls,
        DeleteGroups,
        DeleteRecords,
        DeleteTopics,
        DescribeAcls,
        DescribeClientQuotas,
        DescribeCluster,
        DescribeConfigs,
        DescribeGroups,
        DescribeLogDirs,
        DescribeProducers,
        DescribeShareGroupOffsets,
        DescribeTransactions,
        DescribeUserScramCredentials,
        ElectLeaders,
        EndTxn,
        Fetch,
        FindCoordinator,
        Heartbeat,
        ShareAcknowledge,
        ShareFetch,
        ShareGroupDescribe,
        ShareGroupHeartbeat,
        IncrementalAlterConfigs,
        InitProducerId,
        JoinGroup,
        LeaveGroup,
        ListGroups,
        ListOffsets,
        ListPartitionReassignments,
        ListTransactions,
        Metadata,
        OffsetCommit,
        OffsetDelete,
        OffsetFetch,
        OffsetForLeaderEpoch,
        Produce,
        SyncGroup,
        TxnOffsetCommit,
    );
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{MetadataResponse, SaslHandshakeResponse};

    use super::*;

    #[test]
    fn a_pause_raises_the_throttle_of_responses_that_have_one() {
        let mut metadata = ResponseKind::Metadata(MetadataResponse::default());
        raise_throttle(&mut metadata, Duration::from_millis(250));
        let ResponseKind::Metadata(r) = &metadata else {
            unreachable!()
        };
        assert_eq!(r.throttle_time_ms, 250);
        raise_throttle(&mut metadata, Duration::from_millis(100));
        let ResponseKind::Metadata(r) = &metadata else {
            unreachable!()
        };
        assert_eq!(r.throttle_time_ms, 250, "never lowered");
        let mut handshake = ResponseKind::SaslHandshake(SaslHandshakeResponse::default());
        raise_throttle(&mut handshake, Duration::from_millis(250));
    }
}
