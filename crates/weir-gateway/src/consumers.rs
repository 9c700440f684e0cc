//! Consumer groups over HTTP, for clients that cannot speak Kafka. Each HTTP consumer instance
//! is a member of its group held by the gateway: a task owning a `weir-client` group consumer
//! that keeps polling into a bounded buffer, so the member takes part in every rebalance at
//! once (the classic protocol waits for every member to rejoin) however rarely its HTTP
//! client polls. HTTP polls take records from that buffer; the instance is closed (leaving
//! the group) when deleted or idle for [`INSTANCE_IDLE_TIMEOUT`].
//!
//! Commits are of what was handed out: an instance remembers, per partition, the offset after
//! the last record it returned over HTTP, and commits that (never a record buffered but not
//! yet returned), so a client that dies between polls loses nothing it did not see.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};
use weir_client::{
    ClientError, ConsumerConfig, ConsumerRecord, GroupConsumer, GroupConsumerConfig, OffsetSpec,
};
use weir_metadata::acl::{AclOperation, ResourceType};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{JsonBody, Object, PathParams, QueryParams};
use crate::records::{read_max, read_wait_ms, RecordOut};
use crate::Gateway;

/// An instance not polled or committed for this long is closed and leaves its group.
pub const INSTANCE_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// HTTP consumer instances one gateway holds at most.
pub const INSTANCES_MAX: usize = 256;
/// Records an instance buffers ahead of its HTTP polls at most.
const BUFFER_RECORDS_MAX: usize = 1000;
/// Bytes of records an instance fetches at once (bounds its buffer's memory).
const FETCH_BYTES_MAX: i32 = 512 * 1024;
/// How long one fetch of the instance's task waits, and so how soon it sees a request.
const FETCH_WAIT: Duration = Duration::from_millis(100);
/// How often idle instances are looked for.
const REAP_INTERVAL: Duration = Duration::from_secs(5);
/// Requests queued to one instance at most.
const REQUESTS_QUEUED_MAX: usize = 16;

type TopicPartition = (String, i32);

/// What an HTTP request asks of an instance's task.
enum Request {
    /// Up to `max` records, waiting until `deadline` for some.
    Poll {
        max: usize,
        deadline: tokio::time::Instant,
        reply: oneshot::Sender<Result<Polled, ClientError>>,
    },
    /// Commit these offsets, or (`None`) what was handed out.
    Commit {
        offsets: Option<Vec<(TopicPartition, i64)>>,
        reply: oneshot::Sender<Result<Vec<(TopicPartition, i64)>, ClientError>>,
    },
}

/// Records handed out by one poll, with the assignment then.
struct Polled {
    records: Vec<ConsumerRecord>,
    assignment: Vec<TopicPartition>,
}

/// A poll waiting for records: at most how many, until when, and where the answer goes.
type WaitingPoll = (
    usize,
    tokio::time::Instant,
    oneshot::Sender<Result<Polled, ClientError>>,
);

/// The task that owns one instance's group consumer.
struct Member {
    consumer: GroupConsumer,
    buffer: VecDeque<ConsumerRecord>,
    /// Per partition, the offset after the last record handed out: what a commit commits.
    delivered: BTreeMap<TopicPartition, i64>,
    auto_commit: bool,
    /// A poll waiting for records.
    waiting: Option<WaitingPoll>,
    /// Dropped when the task ends (the member has left its group).
    _done: watch::Sender<()>,
    /// The last fetch failed.
    failing: bool,
}

impl Member {
    async fn run(mut self, mut requests: mpsc::Receiver<Request>) {
        loop {
            loop {
                match requests.try_recv() {
                    Ok(request) => self.handle(request).await,
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        if let Some((_, _, reply)) = self.waiting.take() {
                            let _ = reply.send(Err(ClientError::Closed));
                        }
                        let _ = self.consumer.close().await;
                        return;
                    }
                }
            }
            let fetched = if self.buffer.len() < BUFFER_RECORDS_MAX {
                self.consumer.poll(FETCH_WAIT).await
            } else {
                let kept = self.consumer.keep_membership().await;
                tokio::time::sleep(FETCH_WAIT).await;
                kept.map(|()| Vec::new())
            };
            match fetched {
                Ok(records) => {
                    self.failing = false;
                    self.buffer.extend(records);
                }
                Err(error) => {
                    if let Some((_, _, reply)) = self.waiting.take() {
                        let _ = reply.send(Err(error.clone()));
                    }
                    // The first of a run of failures is worth a warning; the rest are not.
                    if !std::mem::replace(&mut self.failing, true) {
                        tracing::warn!(target: "weir::http", %error, "HTTP consumer instance cannot fetch; retrying");
                    }
                    tokio::time::sleep(FETCH_WAIT).await;
                }
            }
            self.forget_revoked();
            if let Some((max, deadline, _)) = &self.waiting {
                if !self.buffer.is_empty() || tokio::time::Instant::now() >= *deadline {
                    let max = *max;
                    if let Some((_, _, reply)) = self.waiting.take() {
                        self.answer(reply, max);
                    }
                }
            }
        }
    }

    async fn handle(&mut self, request: Request) {
        match request {
            Request::Poll {
                max,
                deadline,
                reply,
            } => {
                if self.auto_commit {
                    if let Err(error) = self.commit(None).await {
                        let _ = reply.send(Err(error));
                        return;
                    }
                }
                if let Some((_, _, earlier)) = self.waiting.take() {
                    self.answer(earlier, 0);
                }
                if !self.buffer.is_empty() || tokio::time::Instant::now() >= deadline {
                    self.answer(reply, max);
                } else {
                    self.waiting = Some((max, deadline, reply));
                }
            }
            Request::Commit { offsets, reply } => {
                let _ = reply.send(self.commit(offsets).await);
            }
        }
    }

    /// After a rebalance, records buffered for partitions no longer assigned are not this
    /// member's to hand out or commit.
    fn forget_revoked(&mut self) {
        let assignment = self.consumer.assignment();
        self.buffer.retain(|r| {
            assignment
                .iter()
                .any(|(t, p)| *t == r.topic && *p == r.partition)
        });
        self.delivered.retain(|tp, _| assignment.contains(tp));
    }

    /// Answers a poll with up to `max` buffered records. Only records the poll's request
    /// received count as handed out (and so are committed); when it is gone (its client gave
    /// up, or its deadline passed) they stay buffered for the next poll.
    fn answer(&mut self, reply: oneshot::Sender<Result<Polled, ClientError>>, max: usize) {
        let take = max.min(self.buffer.len());
        let records: Vec<ConsumerRecord> = self.buffer.drain(..take).collect();
        let handed: Vec<(TopicPartition, i64)> = records
            .iter()
            .map(|r| ((r.topic.clone(), r.partition), r.offset + 1))
            .collect();
        let polled = Polled {
            records,
            assignment: self.consumer.assignment(),
        };
        match reply.send(Ok(polled)) {
            Ok(()) => self.delivered.extend(handed),
            Err(unsent) => {
                if let Ok(unsent) = unsent {
                    for record in unsent.records.into_iter().rev() {
                        self.buffer.push_front(record);
                    }
                }
            }
        }
    }

    async fn commit(
        &mut self,
        offsets: Option<Vec<(TopicPartition, i64)>>,
    ) -> Result<Vec<(TopicPartition, i64)>, ClientError> {
        let offsets = offsets.unwrap_or_else(|| {
            self.delivered
                .iter()
                .map(|(tp, offset)| (tp.clone(), *offset))
                .collect()
        });
        self.consumer.commit_offsets(&offsets).await?;
        Ok(offsets)
    }
}

/// One instance as the gateway holds it: the way to its task, and when it was last used.
struct Slot {
    /// Who created it: only they may use it.
    owner: Arc<str>,
    requests: mpsc::Sender<Request>,
    /// Closes when the instance's task has ended.
    done: watch::Receiver<()>,
    last_used: Mutex<Instant>,
    /// The instance's place among [`INSTANCES_MAX`], given back when the slot goes.
    _place: OwnedSemaphorePermit,
}

impl Slot {
    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }

    async fn ask<T>(
        &self,
        request: impl FnOnce(oneshot::Sender<Result<T, ClientError>>) -> Request,
    ) -> Result<T, ApiError> {
        let (reply, answer) = oneshot::channel();
        let closed = || ApiError::not_found("unknown_consumer", "the consumer instance was closed");
        self.requests
            .send(request(reply))
            .await
            .map_err(|_| closed())?;
        let answer = answer.await.map_err(|_| closed())?;
        self.touch();
        Ok(answer?)
    }
}

/// The gateway's consumer instances, by group and instance id.
pub struct Instances {
    slots: Mutex<HashMap<(String, String), Arc<Slot>>>,
    /// A permit per instance held or joining, so no more than [`INSTANCES_MAX`] exist even
    /// while many join at once.
    capacity: Arc<Semaphore>,
}

impl Default for Instances {
    fn default() -> Instances {
        Instances {
            slots: Mutex::default(),
            capacity: Arc::new(Semaphore::new(INSTANCES_MAX)),
        }
    }
}

impl Instances {
    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The instance `id` of `group`, if `caller` created it (another's is unknown to them).
    fn get(&self, group: &str, id: &str, caller: &Caller) -> Result<Arc<Slot>, ApiError> {
        let slot = self
            .slots()
            .get(&(group.to_string(), id.to_string()))
            .filter(|slot| &*slot.owner == caller.principal())
            .cloned()
            .ok_or_else(|| {
                ApiError::not_found(
                    "unknown_consumer",
                    format!("no consumer instance {id} in group {group} (deleted, or closed after being idle for {} s)", INSTANCE_IDLE_TIMEOUT.as_secs()),
                )
            })?;
        slot.touch();
        Ok(slot)
    }

    /// Closes every instance (each task leaves its group as its requests end), as the node
    /// shuts down.
    pub fn close_all(&self) {
        self.slots().clear();
    }

    /// Closes instances idle longer than [`INSTANCE_IDLE_TIMEOUT`], every few seconds, for as
    /// long as the gateway lives.
    pub async fn reap_idle(instances: Weak<Instances>) {
        loop {
            tokio::time::sleep(REAP_INTERVAL).await;
            let Some(instances) = instances.upgrade() else {
                return;
            };
            instances.slots().retain(|(group, id), slot| {
                let idle = slot.idle_for() >= INSTANCE_IDLE_TIMEOUT;
                if idle {
                    tracing::info!(target: "weir::http", group, instance = id, "closing an idle HTTP consumer instance");
                }
                !idle
            });
        }
    }
}

/// Kafka's rule for topic names.
fn legal_topic_name(name: &str) -> bool {
    (1..=249).contains(&name.len())
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

/// The body of `POST /groups/{group}/consumers`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewConsumer {
    /// Topics to subscribe to.
    topics: Vec<String>,
    /// Where a partition with no committed offset starts: `latest` (the default) or
    /// `earliest`.
    #[serde(default)]
    auto_offset_reset: Option<String>,
    /// Commit what the previous poll returned at each poll.
    #[serde(default)]
    auto_commit: bool,
}

/// A created instance.
#[derive(Serialize)]
pub struct CreatedConsumer {
    group: String,
    instance_id: String,
    /// The instance is closed after this long without a request.
    idle_timeout_ms: u64,
}

/// `POST /groups/{group}/consumers`: joins the group as a new member subscribed to
/// `topics`; 201 once it has its first assignment.
pub async fn create(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    PathParams(group): PathParams<String>,
    JsonBody(Object(body)): JsonBody<Object<NewConsumer>>,
) -> Result<(StatusCode, Json<CreatedConsumer>), ApiError> {
    if body.topics.is_empty() {
        return Err(ApiError::invalid("topics must name at least one topic"));
    }
    // As a Kafka consumer of the group: READ on the group and on each topic.
    caller.require(AclOperation::Read, ResourceType::Group, &group)?;
    for topic in &body.topics {
        caller.require(AclOperation::Read, ResourceType::Topic, topic)?;
    }
    if let Some(bad) = body.topics.iter().find(|t| !legal_topic_name(t)) {
        return Err(ApiError::invalid(format!(
            "{bad:?} is not a topic name: 1 to 249 of ASCII letters, digits, '.', '_' and '-' (not . or ..)"
        )));
    }
    let reset = match body.auto_offset_reset.as_deref().unwrap_or("latest") {
        "latest" => OffsetSpec::Latest,
        "earliest" => OffsetSpec::Earliest,
        other => {
            return Err(ApiError::invalid(format!(
                "auto_offset_reset={other:?}: use earliest or latest"
            )))
        }
    };
    let Ok(place) = gateway.consumers.capacity.clone().try_acquire_owned() else {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_consumers",
            format!("this node already holds {INSTANCES_MAX} HTTP consumer instances; delete some"),
        ));
    };
    let mut config = GroupConsumerConfig::new("", &group);
    config.consumer = ConsumerConfig::new("");
    config.consumer.client = gateway.admin.cluster().config().clone();
    config.consumer.fetch_max_bytes = FETCH_BYTES_MAX;
    config.consumer.partition_max_bytes = FETCH_BYTES_MAX;
    config.consumer.fetch_max_wait = FETCH_WAIT;
    config.auto_commit_interval = None;
    config.auto_offset_reset = reset;
    let topics: Vec<&str> = body.topics.iter().map(String::as_str).collect();
    let consumer = GroupConsumer::subscribe(config, &topics).await?;
    let instance_id = consumer.membership().0;
    let (requests, receiver) = mpsc::channel(REQUESTS_QUEUED_MAX);
    let (done_tx, done) = watch::channel(());
    let member = Member {
        _done: done_tx,
        failing: false,
        consumer,
        buffer: VecDeque::new(),
        delivered: BTreeMap::new(),
        auto_commit: body.auto_commit,
        waiting: None,
    };
    tokio::spawn(member.run(receiver));
    let slot = Arc::new(Slot {
        owner: Arc::from(caller.principal()),
        requests,
        done,
        last_used: Mutex::new(Instant::now()),
        _place: place,
    });
    gateway
        .consumers
        .slots()
        .insert((group.clone(), instance_id.clone()), slot);
    tracing::info!(target: "weir::http", group, instance = instance_id, "HTTP consumer instance joined its group");
    Ok((
        StatusCode::CREATED,
        Json(CreatedConsumer {
            group,
            instance_id,
            idle_timeout_ms: INSTANCE_IDLE_TIMEOUT.as_millis() as u64,
        }),
    ))
}

/// Query parameters of a poll.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PollParams {
    /// Records at most (default 100).
    #[serde(default)]
    max: Option<usize>,
    /// Wait up to this long for records (default 1000).
    #[serde(default)]
    wait_ms: Option<u64>,
    /// `auto` (text when valid UTF-8, the default) or `base64`.
    #[serde(default)]
    encoding: Option<String>,
}

/// A record polled, with where it is from.
#[derive(Serialize)]
pub struct PolledRecord {
    topic: String,
    partition: i32,
    #[serde(flatten)]
    record: RecordOut,
}

/// The answer of a poll.
#[derive(Serialize)]
pub struct PollAnswer {
    records: Vec<PolledRecord>,
    /// The partitions assigned to this instance now.
    assignment: Vec<Assigned>,
}

/// Partitions of one topic assigned to an instance.
#[derive(Serialize)]
pub struct Assigned {
    topic: String,
    partitions: Vec<i32>,
}

/// `GET /groups/{group}/consumers/{instance}/records`: the next records of the instance's
/// partitions, waiting up to `wait_ms` for some.
pub async fn poll(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    PathParams((group, id)): PathParams<(String, String)>,
    QueryParams(params): QueryParams<PollParams>,
) -> Result<Json<PollAnswer>, ApiError> {
    let max = read_max(params.max)?;
    let wait_ms = read_wait_ms(params.wait_ms, 1000)?;
    let force_base64 = crate::records::force_base64(params.encoding.as_deref())?;
    caller.require(AclOperation::Read, ResourceType::Group, &group)?;
    let slot = gateway.consumers.get(&group, &id, &caller)?;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
    let polled = slot
        .ask(|reply| Request::Poll {
            max,
            deadline,
            reply,
        })
        .await?;
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in polled.assignment {
        by_topic.entry(topic).or_default().push(partition);
    }
    Ok(Json(PollAnswer {
        records: polled
            .records
            .into_iter()
            .map(|r| PolledRecord {
                topic: r.topic.clone(),
                partition: r.partition,
                record: RecordOut::of(r, force_base64),
            })
            .collect(),
        assignment: by_topic
            .into_iter()
            .map(|(topic, partitions)| Assigned { topic, partitions })
            .collect(),
    }))
}

/// An offset to commit: the next one to read of a partition.
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionOffset {
    topic: String,
    partition: i32,
    offset: i64,
}

/// The body of a commit: explicit offsets, or none to commit what the polls returned.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CommitBody {
    #[serde(default)]
    offsets: Option<Vec<Object<PartitionOffset>>>,
}

/// The answer of a commit.
#[derive(Serialize)]
pub struct Committed {
    committed: Vec<PartitionOffset>,
}

/// `POST /groups/{group}/consumers/{instance}/commit`: commits the given offsets, or, with
/// no body, the offset after the last record each partition's polls returned.
pub async fn commit(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    PathParams((group, id)): PathParams<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Committed>, ApiError> {
    let explicit = match body.is_empty() {
        true => None,
        false => {
            crate::extract::require_json(&headers)?;
            serde_json::from_slice::<Object<CommitBody>>(&body)
                .map_err(|e| {
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "bad_json",
                        format!("request body: {e}"),
                    )
                })?
                .0
                .offsets
                .map(|offsets| offsets.into_iter().map(|Object(o)| o).collect::<Vec<_>>())
        }
    };
    if let Some(offsets) = &explicit {
        if offsets.iter().any(|o| o.offset < 0 || o.partition < 0) {
            return Err(ApiError::invalid(
                "offsets and partitions must not be negative",
            ));
        }
    }
    let offsets = explicit.map(|offsets| {
        offsets
            .into_iter()
            .map(|o| ((o.topic, o.partition), o.offset))
            .collect()
    });
    caller.require(AclOperation::Read, ResourceType::Group, &group)?;
    let slot = gateway.consumers.get(&group, &id, &caller)?;
    let committed = slot.ask(|reply| Request::Commit { offsets, reply }).await?;
    Ok(Json(Committed {
        committed: committed
            .into_iter()
            .map(|((topic, partition), offset)| PartitionOffset {
                topic,
                partition,
                offset,
            })
            .collect(),
    }))
}

/// `DELETE /groups/{group}/consumers/{instance}`: leaves the group (the others rebalance at
/// once) and forgets the instance; 204.
pub async fn delete(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    PathParams((group, id)): PathParams<(String, String)>,
) -> Result<StatusCode, ApiError> {
    caller.require(AclOperation::Read, ResourceType::Group, &group)?;
    gateway.consumers.get(&group, &id, &caller)?;
    let slot = gateway
        .consumers
        .slots()
        .remove(&(group.clone(), id.clone()))
        .ok_or_else(|| {
            ApiError::not_found(
                "unknown_consumer",
                format!("no consumer instance {id} in group {group}"),
            )
        })?;
    // The task leaves the group once its last request is answered; wait for that, so the
    // group has rebalanced without this member when the answer comes.
    let mut done = slot.done.clone();
    drop(slot);
    let _ = tokio::time::timeout(Duration::from_secs(10), done.changed()).await;
    Ok(StatusCode::NO_CONTENT)
}
