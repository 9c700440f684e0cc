//! The producer: per-partition batching with linger, compression, the Java-default partitioner,
//! acks, idempotence (producer id and per-partition sequence numbers) and safe retries with up
//! to five batches in flight per partition, in order.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use kafka_protocol::ResponseError;
use tokio::sync::{oneshot, Notify, Semaphore};
use weir_codec::header::ProducerFields;

use crate::cluster::{ClientConfig, Cluster};
use crate::connection::PendingResponse;
use crate::error::{ClientError, Result};
use crate::partitioner::partition_for_key;
use crate::records::{encode_batch, restamp_batch, OutgoingRecord};

/// Acknowledgement level of produced records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// Fire and forget: no response, offsets unknown.
    None,
    /// The leader wrote it.
    Leader,
    /// Every in-sync replica has it.
    All,
}

impl Acks {
    fn wire(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

/// Producer settings.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// Connection settings.
    pub client: ClientConfig,
    /// Acknowledgement level.
    pub acks: Acks,
    /// How long a batch waits for more records before it is sent.
    pub linger: Duration,
    /// A batch is sent once it holds this many bytes.
    pub batch_bytes: usize,
    /// Compression codec for batches.
    pub compression: Compression,
    /// Idempotence: retries never duplicate or reorder records (needs `acks=All`).
    pub idempotence: bool,
    /// Bytes of records buffered before `send` waits (or fails).
    pub buffer_bytes: usize,
    /// When the buffer is full: wait for room (true) or fail with `BufferFull` (false).
    pub block_when_full: bool,
    /// Give up on a record this long after `send`.
    pub delivery_timeout: Duration,
    /// Batches in flight per partition.
    pub max_in_flight: usize,
    /// Pause before retrying a failed batch.
    pub retry_backoff: Duration,
}

impl ProducerConfig {
    /// Defaults like the Java client's: acks=all, idempotent, 5 ms linger.
    pub fn new(bootstrap: &str) -> ProducerConfig {
        ProducerConfig {
            client: ClientConfig::new(bootstrap),
            acks: Acks::All,
            linger: Duration::from_millis(5),
            batch_bytes: 256 * 1024,
            compression: Compression::None,
            idempotence: true,
            buffer_bytes: 64 * 1024 * 1024,
            block_when_full: true,
            delivery_timeout: Duration::from_secs(120),
            max_in_flight: 5,
            retry_backoff: Duration::from_millis(100),
        }
    }
}

/// A record to send.
#[derive(Debug, Clone, Default)]
pub struct ProducerRecord {
    /// Topic.
    pub topic: String,
    /// Explicit partition; otherwise keyed records use murmur2 and keyless ones stick to a
    /// partition per batch.
    pub partition: Option<i32>,
    /// Key.
    pub key: Option<Bytes>,
    /// Value.
    pub value: Option<Bytes>,
    /// Headers, in order.
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Timestamp in ms; now when `None`.
    pub timestamp: Option<i64>,
}

impl ProducerRecord {
    /// A record with a value and no key.
    pub fn new(topic: impl Into<String>, value: impl Into<Bytes>) -> ProducerRecord {
        ProducerRecord {
            topic: topic.into(),
            value: Some(value.into()),
            ..ProducerRecord::default()
        }
    }

    /// Sets the key.
    pub fn key(mut self, key: impl Into<Bytes>) -> ProducerRecord {
        self.key = Some(key.into());
        self
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<Bytes>) -> ProducerRecord {
        self.headers.push((name.into(), Some(value.into())));
        self
    }
}

/// Where a record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Partition.
    pub partition: i32,
    /// Offset; -1 with `acks=None`.
    pub offset: i64,
}

/// Resolves when a record is acknowledged (or fails).
pub struct DeliveryFuture(oneshot::Receiver<Result<RecordMetadata>>);

impl std::future::Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(ClientError::Closed)))
    }
}

type Waiter = oneshot::Sender<Result<RecordMetadata>>;
type TopicPartition = (String, i32);

struct OpenBatch {
    records: Vec<OutgoingRecord>,
    waiters: Vec<Waiter>,
    bytes: usize,
    created: Instant,
}

/// An encoded batch: sent, or coming back to be sent again.
struct ReadyBatch {
    encoded: Bytes,
    waiters: Vec<Waiter>,
    base_sequence: i32,
    records: i32,
    /// The producer identity ([`Accumulator::generation`]) its sequence numbers belong to.
    generation: u64,
    bytes: usize,
    created: Instant,
}

#[derive(Default)]
struct PartitionQueue {
    open: Option<OpenBatch>,
    /// Batches due to be sent, not yet encoded: each is given its sequence numbers when it
    /// goes out, so a change of producer id never leaves a batch numbered under the old one.
    closed: VecDeque<OpenBatch>,
    /// Batches to send again (a retriable error), in sequence order; they go before `closed`.
    ready: VecDeque<ReadyBatch>,
    in_flight: usize,
    /// A batch failed: send nothing new until everything in flight has come back, so the
    /// retried batches go out first and in sequence order.
    draining: bool,
}

impl PartitionQueue {
    /// Nothing buffered, due or in flight: the queue can go.
    fn is_idle(&self) -> bool {
        self.open.is_none()
            && self.closed.is_empty()
            && self.ready.is_empty()
            && self.in_flight == 0
    }
}

/// Takes the batches created `timeout` ago or earlier out of `queue`, keeping the others in order.
fn take_expired<T>(
    queue: &mut VecDeque<T>,
    timeout: Duration,
    created: impl Fn(&T) -> Instant,
) -> Vec<T> {
    let (expired, kept): (Vec<T>, Vec<T>) = queue
        .drain(..)
        .partition(|b| created(b).elapsed() >= timeout);
    *queue = kept.into();
    expired
}

#[derive(Default)]
struct Accumulator {
    partitions: HashMap<TopicPartition, PartitionQueue>,
    /// Next sequence number per partition. Kept while queues come and go: the broker expects
    /// each producer's sequence to continue where it left off.
    sequences: HashMap<TopicPartition, i32>,
    /// Producer id and epoch of an idempotent producer; `None` until InitProducerId answers,
    /// and again after a batch failed for good.
    identity: Option<(i64, i16)>,
    /// Counts producer identities. A batch that fails for good leaves a gap in its partition's
    /// sequence the broker would wait on forever (every later batch OUT_OF_ORDER_SEQUENCE):
    /// the producer then takes a new producer id, and batches numbered under the old one are
    /// numbered again when they are sent.
    generation: u64,
    sticky: HashMap<String, i32>,
    /// Partition counts by topic and when they were looked up, so `send` does not consult the
    /// metadata cache (an async lock and a clone) for every record.
    partition_counts: HashMap<String, (i32, Instant)>,
    flushing: bool,
}

struct Inner {
    cluster: Arc<Cluster>,
    config: ProducerConfig,
    accumulator: Mutex<Accumulator>,
    wake: Notify,
    idle: Notify,
    memory: Arc<Semaphore>,
    closed: AtomicBool,
}

/// An async producer. Cheap to clone; all clones share batches and connections.
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

/// Record bytes counted against the buffer; the estimate of a record's size in a batch.
fn record_bytes(record: &ProducerRecord) -> usize {
    let headers: usize = record
        .headers
        .iter()
        .map(|(k, v)| k.len() + v.as_ref().map_or(0, Bytes::len) + 4)
        .sum();
    record.key.as_ref().map_or(0, Bytes::len)
        + record.value.as_ref().map_or(0, Bytes::len)
        + headers
        + 16
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Producer {
    /// Creates a producer and its background sender.
    ///
    /// ```no_run
    /// # async fn example() -> weir_client::Result<()> {
    /// use weir_client::{Producer, ProducerConfig, ProducerRecord};
    /// let producer = Producer::new(ProducerConfig::new("127.0.0.1:9092"));
    /// let landed = producer.send(ProducerRecord::new("orders", "hello").key("customer-7")).await?.await?;
    /// println!("partition {} offset {}", landed.partition, landed.offset);
    /// producer.close().await?;
    /// # Ok(()) }
    /// ```
    pub fn new(config: ProducerConfig) -> Producer {
        let memory = Arc::new(Semaphore::new(
            config.buffer_bytes.min(Semaphore::MAX_PERMITS),
        ));
        let inner = Arc::new(Inner {
            cluster: Cluster::new(config.client.clone()),
            config,
            accumulator: Mutex::new(Accumulator::default()),
            wake: Notify::new(),
            idle: Notify::new(),
            memory,
            closed: AtomicBool::new(false),
        });
        tokio::spawn(run_sender(inner.clone()));
        Producer { inner }
    }

    /// Queues a record; the returned future resolves when it is acknowledged.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(ClientError::Closed);
        }
        let partitions = inner.partition_count(&record.topic).await?;
        let size = record_bytes(&record);
        let permits = u32::try_from(size.min(inner.config.buffer_bytes))
            .map_err(|_| ClientError::InvalidArgument("record too large".into()))?;
        let permit = if inner.config.block_when_full {
            inner
                .memory
                .clone()
                .acquire_many_owned(permits)
                .await
                .map_err(|_| ClientError::Closed)?
        } else {
            inner
                .memory
                .clone()
                .try_acquire_many_owned(permits)
                .map_err(|_| ClientError::BufferFull)?
        };
        // Released when the record's batch completes (`fail_all` or success in `send_batch`).
        permit.forget();
        let (tx, rx) = oneshot::channel();
        let mut acc = inner.lock();
        let partition = match (record.partition, &record.key) {
            (Some(p), _) if p < 0 || p >= partitions => {
                drop(acc);
                inner.memory.add_permits(permits as usize);
                return Err(ClientError::UnknownPartition {
                    topic: record.topic,
                    partition: p,
                });
            }
            (Some(p), _) => p,
            (None, Some(key)) => partition_for_key(key, partitions),
            (None, None) => *acc
                .sticky
                .entry(record.topic.clone())
                .or_insert_with(|| (now_ms() % i64::from(partitions)) as i32),
        };
        let sticky = record.partition.is_none() && record.key.is_none();
        let queue = acc
            .partitions
            .entry((record.topic.clone(), partition))
            .or_default();
        if queue
            .open
            .as_ref()
            .is_some_and(|b| b.bytes + permits as usize > inner.config.batch_bytes)
        {
            // Full: close it so no batch outgrows `batch_bytes` while it waits for the sender.
            if let Some(full) = queue.open.take() {
                queue.closed.push_back(full);
            }
        }
        let new_batch = queue.open.is_none();
        let batch = queue.open.get_or_insert_with(|| OpenBatch {
            records: Vec::new(),
            waiters: Vec::new(),
            bytes: 0,
            created: Instant::now(),
        });
        batch.records.push(OutgoingRecord {
            key: record.key,
            value: record.value,
            headers: record.headers,
            timestamp: record.timestamp.unwrap_or_else(now_ms),
        });
        batch.waiters.push(tx);
        batch.bytes += permits as usize;
        // Full when another record of this size would not fit.
        let full = batch.bytes + permits as usize > inner.config.batch_bytes;
        if full && sticky && partitions > 1 {
            // Sticky partitioning: the next keyless record starts a batch elsewhere.
            let next = (partition + 1) % partitions;
            acc.sticky.insert(record.topic.clone(), next);
        }
        drop(acc);
        if full || new_batch {
            // A new batch: the sender must learn its linger deadline; a full one: send it now.
            inner.wake.notify_one();
        }
        Ok(DeliveryFuture(rx))
    }

    /// Sends every buffered record now and waits until all are acknowledged or failed.
    pub async fn flush(&self) -> Result<()> {
        let inner = &self.inner;
        loop {
            let idle = inner.idle.notified();
            {
                let mut acc = inner.lock();
                if acc.partitions.values().all(PartitionQueue::is_idle) {
                    acc.flushing = false;
                    return Ok(());
                }
                acc.flushing = true;
            }
            inner.wake.notify_one();
            let _ = tokio::time::timeout(Duration::from_millis(50), idle).await;
        }
    }

    /// Flushes, then stops the sender. Further sends fail with `Closed`.
    pub async fn close(&self) -> Result<()> {
        self.flush().await?;
        self.inner.closed.store(true, Ordering::Release);
        self.inner.wake.notify_one();
        Ok(())
    }
}

/// How long a topic's partition count is reused before metadata is asked again (new
/// partitions are picked up after at most this long).
const PARTITION_COUNT_TTL: Duration = Duration::from_secs(5);

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Accumulator> {
        self.accumulator.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn partition_count(&self, topic: &str) -> Result<i32> {
        if let Some((count, at)) = self.lock().partition_counts.get(topic) {
            if at.elapsed() < PARTITION_COUNT_TTL {
                return Ok(*count);
            }
        }
        self.cluster.invalidate(topic).await;
        let count = self.cluster.topic(topic, true).await?.partitions.len() as i32;
        self.lock()
            .partition_counts
            .insert(topic.to_string(), (count, Instant::now()));
        Ok(count)
    }

    /// Makes sure an idempotent producer has a producer id (asks for a new one after a reset).
    async fn ensure_identity(&self) -> Result<()> {
        if !self.config.idempotence || self.lock().identity.is_some() {
            return Ok(());
        }
        let connection = self.cluster.any_broker().await?;
        let mut request = InitProducerIdRequest::default();
        request.transactional_id = None;
        request.transaction_timeout_ms = 60_000;
        let response: kafka_protocol::messages::InitProducerIdResponse =
            connection.call(ApiKey::InitProducerId, 4, &request).await?;
        if let Some(error) = ClientError::from_code(response.error_code, None) {
            return Err(error);
        }
        self.lock().identity = Some((response.producer_id.0, response.producer_epoch));
        Ok(())
    }

    /// Fails the batches not sent (or waiting to be sent again) that are past their delivery
    /// timeout: while there is no producer id nothing is sent, so nothing else expires them.
    fn expire_waiting(&self) {
        let timeout = self.config.delivery_timeout;
        let error = ClientError::Timeout(timeout.as_millis() as u64);
        let mut acc = self.lock();
        for queue in acc.partitions.values_mut() {
            if queue
                .open
                .as_ref()
                .is_some_and(|b| b.created.elapsed() >= timeout)
            {
                queue.closed.extend(queue.open.take());
            }
            let expired_closed = take_expired(&mut queue.closed, timeout, |b| b.created);
            for batch in expired_closed {
                fail_all(batch.waiters, &error, &self.memory, batch.bytes);
            }
            for batch in take_expired(&mut queue.ready, timeout, |b| b.created) {
                fail_all(batch.waiters, &error, &self.memory, batch.bytes);
            }
        }
        acc.partitions.retain(|_, q| !q.is_idle());
        drop(acc);
        self.idle.notify_waiters();
    }

    /// After a batch numbered under `generation` failed for good: forget the producer id and
    /// every sequence, so what is sent next starts afresh under a new producer id.
    fn reset_identity(&self, generation: u64, tp: &TopicPartition) {
        let mut acc = self.lock();
        if !self.config.idempotence || acc.generation != generation {
            return;
        }
        acc.generation += 1;
        acc.identity = None;
        acc.sequences.clear();
        // Nothing new goes out on a partition until its batches in flight under the old id
        // are back: those to send again are renumbered first, so they keep their order.
        for queue in acc.partitions.values_mut() {
            if queue.in_flight > 0 {
                queue.draining = true;
            }
        }
        tracing::debug!(target: "weir::client", topic = %tp.0, partition = tp.1, "a batch failed for good; taking a new producer id");
    }

    /// Closes batches that are due and picks what may be sent now, grouped by topic-partition,
    /// giving each its sequence numbers as it goes out.
    fn drain(&self) -> (Vec<(TopicPartition, ReadyBatch)>, Option<Duration>) {
        let mut acc = self.lock();
        let flushing = acc.flushing || self.closed.load(Ordering::Acquire);
        let mut next_deadline: Option<Duration> = None;
        let mut sendable = Vec::new();
        let config = &self.config;
        let Accumulator {
            partitions,
            sequences,
            identity,
            generation,
            ..
        } = &mut *acc;
        // Without a producer id yet, batches wait (they are numbered when they go out).
        let producer = match (config.idempotence, *identity) {
            (false, _) => Some((-1, -1)),
            (true, identity) => identity,
        };
        for (tp, queue) in partitions.iter_mut() {
            if let Some(open) = &queue.open {
                let age = open.created.elapsed();
                if flushing || open.bytes >= config.batch_bytes || age >= config.linger {
                    queue.closed.extend(queue.open.take());
                } else {
                    let left = config.linger - age;
                    next_deadline = Some(next_deadline.map_or(left, |d| d.min(left)));
                }
            }
            let Some(producer) = producer else {
                continue;
            };
            if queue.draining && queue.in_flight == 0 {
                queue.draining = false;
            }
            let next_sequence = sequences.entry(tp.clone()).or_insert(0);
            while !queue.draining && queue.in_flight < config.max_in_flight {
                let batch = if let Some(mut batch) = queue.ready.pop_front() {
                    if batch.generation != *generation {
                        let stamp = stamp(producer, *next_sequence);
                        batch.encoded = restamp_batch(&batch.encoded, stamp);
                        batch.base_sequence = stamp.base_sequence;
                        batch.generation = *generation;
                        advance(next_sequence, producer, batch.records);
                    }
                    batch
                } else if let Some(open) = queue.closed.pop_front() {
                    let records = open.records.len() as i32;
                    let stamp = stamp(producer, *next_sequence);
                    match encode_batch(&open.records, stamp, config.compression) {
                        Ok(encoded) => {
                            advance(next_sequence, producer, records);
                            ReadyBatch {
                                encoded,
                                waiters: open.waiters,
                                base_sequence: stamp.base_sequence,
                                records,
                                generation: *generation,
                                bytes: open.bytes,
                                created: open.created,
                            }
                        }
                        Err(error) => {
                            fail_all(open.waiters, &error, &self.memory, open.bytes);
                            continue;
                        }
                    }
                } else {
                    break;
                };
                queue.in_flight += 1;
                sendable.push((tp.clone(), batch));
            }
        }
        (sendable, next_deadline)
    }

    fn finish(&self, tp: &TopicPartition, outcome: Outcome) {
        let mut acc = self.lock();
        let queue = acc.partitions.entry(tp.clone()).or_default();
        queue.in_flight = queue.in_flight.saturating_sub(1);
        match outcome {
            Outcome::Done => {}
            Outcome::Retry(batch) => {
                queue.draining = true;
                let at = queue
                    .ready
                    .iter()
                    .position(|b| {
                        (b.generation, b.base_sequence) > (batch.generation, batch.base_sequence)
                    })
                    .unwrap_or(queue.ready.len());
                queue.ready.insert(at, batch);
            }
            Outcome::Failed => {
                // Later batches in flight come back OUT_OF_ORDER_SEQUENCE, to be numbered
                // again under the new producer id before anything newer goes out.
                queue.draining = true;
            }
        }
        if queue.is_idle() {
            acc.partitions.retain(|_, q| !q.is_idle());
        }
        drop(acc);
        self.idle.notify_waiters();
        self.wake.notify_one();
    }
}

enum Outcome {
    Done,
    Retry(ReadyBatch),
    /// Failed for good: an idempotent producer takes a new producer id.
    Failed,
}

/// The producer fields of a batch whose first record takes sequence `next` (-1s without
/// idempotence).
fn stamp(producer: (i64, i16), next: i32) -> ProducerFields {
    ProducerFields {
        producer_id: producer.0,
        producer_epoch: producer.1,
        base_sequence: if producer.0 >= 0 { next } else { -1 },
    }
}

/// Moves a partition's next sequence past a batch of `records`; sequence numbers wrap from
/// i32::MAX to 0, as in Kafka.
fn advance(next: &mut i32, producer: (i64, i16), records: i32) {
    if producer.0 >= 0 {
        *next = ((i64::from(*next) + i64::from(records)) % (i64::from(i32::MAX) + 1)) as i32;
    }
}

fn fail_all(waiters: Vec<Waiter>, error: &ClientError, memory: &Semaphore, bytes: usize) {
    memory.add_permits(bytes);
    for waiter in waiters {
        let _ = waiter.send(Err(error.clone()));
    }
}

async fn run_sender(inner: Arc<Inner>) {
    loop {
        if let Err(error) = inner.ensure_identity().await {
            tracing::warn!(target: "weir::client", %error, "cannot get a producer id; retrying");
            // Batches waiting for it still give up at their delivery timeout.
            inner.expire_waiting();
            tokio::time::sleep(inner.config.retry_backoff).await;
            if inner.closed.load(Ordering::Acquire) {
                return;
            }
            continue;
        }
        let wake = inner.wake.notified();
        let (sendable, next_deadline) = inner.drain();
        for (tp, batch) in sendable {
            // Requests are put on the wire here, in order, so batches of one partition reach
            // the broker in sequence; only the wait for each response runs concurrently.
            let sent = send_request(&inner, &tp, &batch).await;
            tokio::spawn(settle_batch(inner.clone(), tp, batch, sent));
        }
        if inner.closed.load(Ordering::Acquire) && inner.lock().partitions.is_empty() {
            return;
        }
        match next_deadline {
            Some(wait) => {
                let _ = tokio::time::timeout(wait, wake).await;
            }
            None => {
                let _ = tokio::time::timeout(Duration::from_millis(100), wake).await;
            }
        }
    }
}

/// Waits for one batch's Produce response and settles its records.
async fn settle_batch(
    inner: Arc<Inner>,
    tp: TopicPartition,
    batch: ReadyBatch,
    sent: Result<Option<PendingResponse>>,
) {
    let result = match sent {
        Ok(Some(pending)) => produce_result(pending).await,
        Ok(None) => Ok(-1),
        Err(error) => Err(error),
    };
    let outcome = match result {
        Ok(base_offset) => {
            inner.memory.add_permits(batch.bytes);
            for (i, waiter) in batch.waiters.into_iter().enumerate() {
                let offset = if base_offset >= 0 {
                    base_offset + i as i64
                } else {
                    -1
                };
                let _ = waiter.send(Ok(RecordMetadata {
                    partition: tp.1,
                    offset,
                }));
            }
            Outcome::Done
        }
        Err(error) => {
            let expired = batch.created.elapsed() >= inner.config.delivery_timeout;
            let out_of_order = error.code() == Some(ResponseError::OutOfOrderSequenceNumber.code());
            if (error.is_retriable() || out_of_order) && !expired {
                tracing::debug!(target: "weir::client", topic = %tp.0, partition = tp.1, %error, "retrying batch");
                inner.cluster.invalidate(&tp.0).await;
                tokio::time::sleep(inner.config.retry_backoff).await;
                Outcome::Retry(batch)
            } else {
                let error = if expired {
                    ClientError::Timeout(inner.config.delivery_timeout.as_millis() as u64)
                } else {
                    error
                };
                fail_all(batch.waiters, &error, &inner.memory, batch.bytes);
                if batch.base_sequence >= 0 {
                    inner.reset_identity(batch.generation, &tp);
                    Outcome::Failed
                } else {
                    Outcome::Done
                }
            }
        }
    };
    inner.finish(&tp, outcome);
}

/// Puts one batch's Produce request on the wire; `None` with acks=0 (no response comes).
async fn send_request(
    inner: &Inner,
    tp: &TopicPartition,
    batch: &ReadyBatch,
) -> Result<Option<PendingResponse>> {
    let topic = inner.cluster.topic(&tp.0, true).await?;
    let leader = topic.partitions.get(tp.1 as usize).map_or(-1, |p| p.leader);
    if leader < 0 {
        return Err(
            ClientError::from_code(ResponseError::LeaderNotAvailable.code(), None)
                .unwrap_or(ClientError::Closed),
        );
    }
    let connection = inner.cluster.broker(leader).await?;
    let mut data = PartitionProduceData::default();
    data.index = tp.1;
    data.records = Some(batch.encoded.clone());
    let mut topic_data = TopicProduceData::default();
    topic_data.name = TopicName(StrBytes::from_string(tp.0.clone()));
    topic_data.partition_data = vec![data];
    let mut request = ProduceRequest::default();
    request.acks = inner.config.acks.wire();
    request.timeout_ms = inner
        .config
        .client
        .request_timeout
        .as_millis()
        .min(i32::MAX as u128) as i32;
    request.transactional_id = None;
    request.topic_data = vec![topic_data];
    let version = connection.version_for(ApiKey::Produce, 3, 11)?;
    if inner.config.acks == Acks::None {
        connection
            .send_only(ApiKey::Produce, version, &request)
            .await?;
        return Ok(None);
    }
    connection
        .begin(ApiKey::Produce, version, &request)
        .await
        .map(Some)
}

/// The base offset from a Produce response, or its error.
async fn produce_result(pending: PendingResponse) -> Result<i64> {
    let response: ProduceResponse = pending.response().await?;
    let partition = response
        .responses
        .first()
        .and_then(|t| t.partition_responses.first())
        .ok_or_else(|| ClientError::Protocol("produce response without the partition".into()))?;
    match ClientError::from_code(
        partition.error_code,
        partition
            .error_message
            .as_ref()
            .map(|m| m.as_str().to_string()),
    ) {
        Some(error) => Err(error),
        None => Ok(partition.base_offset),
    }
}
