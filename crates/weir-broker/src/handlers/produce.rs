//! Produce (key 0), v3–12: check and validate each partition's batch, verify with the
//! transaction coordinator each transactional batch that would open its producer's
//! transaction on its partition (`txn_verification`; from v12 the coordinator adds the
//! partition to the transaction instead), append them in request order (on a
//! blocking thread unless the request is small and uncompressed), then answer once the writes
//! are as durable as `acks` and the topic's `flush.policy` require. A request's bytes count first
//! against its client's `producer_byte_rate` (`throttle`, measured in `quotas.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::ResponseError;
use weir_coordinator::ProducerIdAndEpoch;
use weir_log::batch::BatchHeader;
use weir_log::compress::recompress;
use weir_log::{validate, AppendInfo, LogError, ValidationLimits, VerificationGuard};
use weir_metadata::acl::AclOperation;
use weir_metadata::authorizer::Access;
use weir_metadata::is_internal_topic;

use crate::broker::Broker;
use crate::config::TopicSettings;
use crate::handlers::errors::ErrorReply;
use crate::handlers::str_bytes;
use crate::partition::{Partition, ReplicationWait};
use crate::rate_limit::warn_bad_input;
use crate::reply::Reply;
use crate::request_context::RequestContext;
use crate::txn_verification::{guard_after, guard_before, GuardBefore, TxnCheck};

/// A request whose batches are uncompressed and total at most this is validated and appended
/// on the connection's task: that is microseconds of CPU and a write into the page cache, less
/// than the trip to a blocking thread costs. Larger or compressed ones go to a blocking thread.
const INLINE_APPEND_BYTES_MAX: usize = 64 * 1024;
/// Longest an `acks=all` write waits for its in-sync replicas, whatever `timeout_ms` asks.
const PRODUCE_TIMEOUT_MS_MAX: u64 = 300_000;
/// Codec id of zstd, which Produce only allows from version 7 on.
const CODEC_ZSTD: i16 = 4;

/// Records a produce request's bytes against the quota of its client, if it has one; answered
/// with how long the client must pause, for which its connection is read no further.
pub(crate) fn throttle(
    broker: &Broker,
    context: &RequestContext,
    client_id: Option<&str>,
    request: &ProduceRequest,
) -> Duration {
    let image = broker.image();
    if image.client_quotas().is_empty() {
        return Duration::ZERO;
    }
    let bytes: usize = request
        .topic_data
        .iter()
        .flat_map(|topic| &topic.partition_data)
        .map(|partition| partition.records.as_ref().map_or(0, |r| r.len()))
        .sum();
    let throttle = broker.produce_quotas.record(
        image.client_quotas(),
        (&context.principal, client_id.unwrap_or("")),
        bytes as f64,
    );
    if !throttle.is_zero() {
        broker.metrics.produce_throttling.count(throttle);
        context.mute.extend(throttle);
    }
    throttle
}

/// Appends done, answers pending: what [`append`] hands to the connection's response queue.
pub struct PendingProduce {
    acks: i16,
    response: ProduceResponse,
    /// Partitions that must be fsynced up to an offset before the answer.
    durable: Vec<(Arc<Partition>, i64)>,
    /// `acks=all` writes that every in-sync replica must hold before the answer.
    replicated: Vec<ReplicatedWrite>,
    /// The produce request's `timeout_ms`: how long replication may take.
    timeout: std::time::Duration,
    any_error: bool,
}

/// An `acks=all` write waiting for its in-sync replicas.
struct ReplicatedWrite {
    partition: Arc<Partition>,
    /// Where, and at which leader epoch, the write was appended: the high watermark must
    /// pass it while that epoch leads.
    appended: AppendInfo,
    /// The topic's `min.insync.replicas` when the write was appended.
    min_insync_replicas: usize,
    /// Where its result is in the response: topic and partition index.
    slot: (usize, usize),
}

impl PendingProduce {
    /// Waits for durability and, for `acks=all`, for the in-sync replicas, then answers; with
    /// `acks=0` there is no answer, and a failed write closes the connection (as in Kafka: the
    /// only way such a client learns of it). A write the ISR does not confirm within the
    /// request's timeout is answered REQUEST_TIMED_OUT, and one whose leader moved meanwhile
    /// NOT_LEADER_OR_FOLLOWER (an idempotent producer's retry is deduplicated). A write the
    /// high watermark passed only because the ISR shrank below `min.insync.replicas` (a
    /// follower fell behind or was fenced while it waited) is answered
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND, as in Kafka: it is in the log, but on fewer replicas
    /// than the producer asked for, so it is not acknowledged.
    pub async fn finish(mut self, respond: impl FnOnce(ProduceResponse) -> Reply) -> Reply {
        for (partition, end_offset) in &self.durable {
            partition.wait_durable(*end_offset).await;
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        for write in &self.replicated {
            let partition = &write.partition;
            let wait =
                partition.wait_replicated(&write.appended, write.min_insync_replicas, deadline);
            let (error, message) = match wait.await {
                ReplicationWait::Replicated => continue,
                ReplicationWait::BelowMinIsr { in_sync } => (
                    ResponseError::NotEnoughReplicasAfterAppend,
                    Some(format!(
                        "the write is in the log of {}-{} but reached only {in_sync} in-sync replica(s); min.insync.replicas is {}",
                        partition.topic, partition.index, write.min_insync_replicas
                    )),
                ),
                ReplicationWait::NotLeader => (ResponseError::NotLeaderOrFollower, None),
                ReplicationWait::TimedOut => (ResponseError::RequestTimedOut, None),
            };
            let (topic, slot) = write.slot;
            let result = &mut self.response.responses[topic].partition_responses[slot];
            result.error_code = error.code();
            result.error_message = message.map(str_bytes);
            result.base_offset = -1;
            self.any_error = true;
        }
        match (self.acks, self.any_error) {
            (0, true) => Reply::Close,
            (0, false) => Reply::NoResponse,
            _ => respond(self.response),
        }
    }
}

/// One partition's batch, checked against what needs no disk or CPU, ready to validate.
struct Job {
    topic: usize,
    slot: usize,
    partition: Arc<Partition>,
    records: Bytes,
    settings: TopicSettings,
    /// When the request was taken up, by the broker's clock (what timestamps are checked
    /// against).
    now_ms: i64,
    /// The guard of the verification that the producer's transaction holds the partition.
    verification: Option<VerificationGuard>,
}

type Outcome = Result<AppendInfo, ErrorReply>;

/// Checks every partition's batch, then validates and appends them on a blocking thread, in
/// request order. Returns once the appends are done.
pub async fn append(
    broker: &Arc<Broker>,
    request: ProduceRequest,
    version: i16,
    access: &Access,
) -> PendingProduce {
    let acks = request.acks;
    let timeout = std::time::Duration::from_millis(
        u64::try_from(request.timeout_ms)
            .unwrap_or(0)
            .clamp(1, PRODUCE_TIMEOUT_MS_MAX),
    );
    let mut response = ProduceResponse::default();
    let mut jobs = Vec::new();
    let mut any_error = false;
    let now_ms = broker.partitions.clock().now_ms();
    let transactional_id = request.transactional_id.as_ref().map(|id| id.as_str());
    let txn_denied = transactional_id
        .filter(|id| !access.transactional_id(AclOperation::Write, id))
        .map(|id| {
            ErrorReply::new(
                ResponseError::TransactionalIdAuthorizationFailed,
                format!("Not authorized to write with transactional id {id}"),
            )
        });
    for (topic_index, topic) in request.topic_data.into_iter().enumerate() {
        let mut topic_response = TopicProduceResponse::default();
        let name = topic.name.0.as_str();
        let denied = txn_denied.clone().or_else(|| {
            (!access.topic(AclOperation::Write, name)).then(|| {
                ErrorReply::new(
                    ResponseError::TopicAuthorizationFailed,
                    format!("Not authorized to write to topic {name}"),
                )
            })
        });
        for data in topic.partition_data {
            let mut result = PartitionProduceResponse::default();
            result.index = data.index;
            result.base_offset = -1;
            result.log_append_time_ms = -1;
            result.log_start_offset = -1;
            let checked = match &denied {
                Some(error) => Err(error.clone()),
                None => check_partition(broker, name, data.index, acks, version, data.records),
            };
            match checked {
                Ok((partition, records)) => jobs.push(Job {
                    topic: topic_index,
                    slot: topic_response.partition_responses.len(),
                    settings: partition.settings(),
                    partition,
                    records,
                    now_ms,
                    verification: None,
                }),
                Err(error) => {
                    any_error = true;
                    set_error(&mut result, &error, version);
                }
            }
            topic_response.partition_responses.push(result);
        }
        topic_response.name = topic.name;
        response.responses.push(topic_response);
    }
    for (job, error) in verify_transactional(broker, transactional_id, &mut jobs, version).await {
        any_error = true;
        set_error(
            &mut response.responses[job.topic].partition_responses[job.slot],
            &error,
            version,
        );
    }
    // Decompressing or recompressing is CPU work, done off the connection's task.
    let compressed = jobs.iter().any(|j| {
        BatchHeader::parse(&j.records)
            .is_some_and(|h| h.compression() != 0 || recompresses(&j.settings, &h))
    });
    let request_bytes: usize = jobs.iter().map(|j| j.records.len()).sum();
    // Decompression is CPU and memory: a bounded number at once, broker-wide.
    let _permit = match compressed {
        true => broker.compressed_validations.acquire().await.ok(),
        false => None,
    };
    // A hot partition's appends wait for what the others leave (see hot_partitions.rs).
    let hot = jobs.iter().any(|j| j.partition.load.is_hot());
    let run = move || -> Vec<(Job, Outcome)> {
        jobs.into_iter()
            .map(|job| {
                let outcome = validate_and_append(&job);
                (job, outcome)
            })
            .collect()
    };
    let outcomes = if hot {
        broker
            .metrics
            .bulk_lane_appends
            .fetch_add(1, Ordering::Relaxed);
        broker.bulk_lane().run(run).await.map_err(|e| e.to_string())
    } else if !compressed && request_bytes <= INLINE_APPEND_BYTES_MAX {
        Ok(run())
    } else {
        tokio::task::spawn_blocking(run)
            .await
            .map_err(|e| e.to_string())
    };
    let outcomes = outcomes.unwrap_or_else(|error| {
        // The append panicked: the binary's panic hook aborts the process.
        tracing::error!(target: "weir::server", %error, "produce append task failed");
        Vec::new()
    });
    let mut durable = Vec::new();
    let mut replicated = Vec::new();
    for (job, outcome) in outcomes {
        let result = &mut response.responses[job.topic].partition_responses[job.slot];
        match outcome {
            Ok(info) => {
                result.base_offset = info.base_offset;
                result.log_start_offset = info.log_start_offset;
                result.log_append_time_ms = info.log_append_time_ms;
                if job.settings.flush_policy.sync_before_ack(acks) {
                    durable.push((job.partition.clone(), info.last_offset + 1));
                }
                if acks == -1 {
                    replicated.push(ReplicatedWrite {
                        min_insync_replicas: job.partition.min_insync_replicas(),
                        partition: job.partition,
                        appended: info,
                        slot: (job.topic, job.slot),
                    });
                }
            }
            Err(error) => {
                any_error = true;
                set_error(result, &error, version);
                // A batch refused for its records still names the partition's start, as
                // Kafka answers record validation errors.
                if !error.records.is_empty() {
                    result.log_start_offset = job.partition.log().log_start_offset();
                }
            }
        }
    }
    PendingProduce {
        acks,
        response,
        durable,
        replicated,
        timeout,
        any_error,
    }
}

/// Verifies with the transaction coordinator every transactional batch of `jobs` that would
/// open its producer's transaction on its partition, and gives each its guard; returns the
/// jobs refused (taken out of `jobs`) with their errors, worded as Kafka words them to a
/// producer of `version`: a partition the transaction does not hold is TRANSACTION_ABORTABLE
/// (INVALID_TXN_STATE before v11), a fenced producer INVALID_PRODUCER_EPOCH, and a coordinator
/// that could not answer NOT_ENOUGH_REPLICAS, which every client retries.
async fn verify_transactional(
    broker: &Arc<Broker>,
    transactional_id: Option<&str>,
    jobs: &mut Vec<Job>,
    version: i16,
) -> Vec<(Job, ErrorReply)> {
    let producers: Vec<ProducerIdAndEpoch> = jobs
        .iter()
        .filter_map(|job| BatchHeader::parse(&job.records))
        .filter(|h| h.is_transactional() && h.has_producer_id())
        .map(|h| ProducerIdAndEpoch {
            producer_id: h.producer_id,
            epoch: h.producer_epoch,
        })
        .collect();
    let Some(producer) = producers.first().copied() else {
        return Vec::new();
    };
    let refuse_all = |jobs: &mut Vec<Job>, error: ErrorReply| {
        jobs.drain(..).map(|job| (job, error.clone())).collect()
    };
    let Some(transactional_id) = transactional_id.filter(|id| !id.is_empty()) else {
        return refuse_all(
            jobs,
            ErrorReply::new(
                ResponseError::TransactionalIdAuthorizationFailed,
                "transactional records need the request's transactional id",
            ),
        );
    };
    if producers.iter().any(|p| *p != producer) {
        return refuse_all(
            jobs,
            ErrorReply::new(
                ResponseError::InvalidProducerIdMapping,
                "transactional records of more than one producer id or epoch in one request",
            ),
        );
    }
    // Produce v12 (transaction protocol version 2): the client added no partition itself.
    let check = match version {
        12.. => TxnCheck::Add,
        _ => TxnCheck::Verify,
    };
    let mut unverified: Vec<(usize, Option<VerificationGuard>)> = Vec::new();
    for (at, job) in jobs.iter().enumerate() {
        if !BatchHeader::parse(&job.records).is_some_and(|h| h.is_transactional()) {
            continue;
        }
        match guard_before(&job.partition, producer, check) {
            GuardBefore::Taken(guard) => unverified.push((at, Some(guard))),
            GuardBefore::After => unverified.push((at, None)),
            GuardBefore::InTransaction => {}
        }
    }
    if unverified.is_empty() {
        return Vec::new();
    }
    if !broker.config.transaction_partition_verification_enable {
        for (at, guard) in unverified {
            jobs[at].verification = guard.or_else(|| guard_after(&jobs[at].partition, producer));
        }
        return Vec::new();
    }
    let partitions: Vec<(&str, i32)> = unverified
        .iter()
        .map(|(at, _)| {
            (
                jobs[*at].partition.topic.as_str(),
                jobs[*at].partition.index,
            )
        })
        .collect();
    let results = broker
        .check_in_transaction(transactional_id, producer, &partitions, check)
        .await;
    let mut refused = Vec::new();
    for ((at, guard), result) in unverified.iter().zip(results).rev() {
        match result {
            Ok(()) => {
                jobs[*at].verification =
                    guard.or_else(|| guard_after(&jobs[*at].partition, producer))
            }
            Err(error) => refused.push((jobs.remove(*at), verification_error(error, version))),
        }
    }
    refused
}

/// A verification's failure as Kafka answers it to a producer of `version`.
fn verification_error(error: ResponseError, version: i16) -> ErrorReply {
    match error {
        ResponseError::TransactionAbortable if version < 11 => ErrorReply::new(
            ResponseError::InvalidTxnState,
            "the partition was not added to the transaction",
        ),
        ResponseError::TransactionAbortable => ErrorReply::new(
            error,
            "the partition was not added to the transaction",
        ),
        ResponseError::ProducerFenced => ErrorReply::new(
            ResponseError::InvalidProducerEpoch,
            "a newer producer with the same transactional id fenced this one",
        ),
        ResponseError::ConcurrentTransactions
        | ResponseError::NetworkException
        | ResponseError::CoordinatorLoadInProgress
        | ResponseError::CoordinatorNotAvailable
        | ResponseError::NotCoordinator => ErrorReply::new(
            ResponseError::NotEnoughReplicas,
            format!("unable to verify the partition has been added to the transaction; underlying error: {error:?}"),
        ),
        error => ErrorReply::new(error, "the transaction coordinator refused the verification"),
    }
}

fn set_error(result: &mut PartitionProduceResponse, error: &ErrorReply, version: i16) {
    result.error_code = error.code();
    if version >= 8 {
        result.error_message = Some(str_bytes(error.message.clone()));
        result.record_errors = error
            .records
            .iter()
            .map(|record| {
                let mut e = BatchIndexAndErrorMessage::default();
                e.batch_index = record.index;
                e.batch_index_error_message = Some(str_bytes(record.message.clone()));
                e
            })
            .collect();
    }
}

/// What can be refused from memory alone: acks, the partition, framing, codec by version,
/// `min.insync.replicas`.
fn check_partition(
    broker: &Arc<Broker>,
    topic: &str,
    index: i32,
    acks: i16,
    version: i16,
    records: Option<Bytes>,
) -> Result<(Arc<Partition>, Bytes), ErrorReply> {
    if !matches!(acks, -1..=1) {
        return Err(ErrorReply::new(
            ResponseError::InvalidRequiredAcks,
            format!("acks must be -1, 0 or 1, got {acks}"),
        ));
    }
    if is_internal_topic(topic) {
        return Err(ErrorReply::new(
            ResponseError::InvalidTopicException,
            format!("cannot append to internal topic {topic}"),
        ));
    }
    let partition = super::led_partition(broker, topic, index).map_err(|error| {
        let message = match error {
            ResponseError::NotLeaderOrFollower => {
                format!("this broker is not the leader of {topic}-{index}")
            }
            _ => format!("unknown topic-partition {topic}-{index}"),
        };
        ErrorReply::new(error, message)
    })?;
    let records = records.unwrap_or_default();
    if records.is_empty() {
        return Err(ErrorReply::new(
            ResponseError::InvalidRecord,
            format!("Produce v{version} needs exactly one record batch per partition, got none"),
        ));
    }
    let Some(header) = BatchHeader::parse(&records) else {
        return Err(ErrorReply::new(
            ResponseError::CorruptMessage,
            "record batch shorter than its header",
        ));
    };
    if header.compression() == CODEC_ZSTD && version < 7 {
        return Err(ErrorReply::new(
            ResponseError::UnsupportedCompressionType,
            format!("Produce v{version} may not use zstd; it needs v7 or later"),
        ));
    }
    // Only acks=all asks for the ISR (a lock), so other writes skip the check.
    let too_few = if acks == -1 {
        partition.too_few_in_sync()
    } else {
        None
    };
    if let Some(in_sync) = too_few {
        return Err(ErrorReply::new(
            ResponseError::NotEnoughReplicas,
            format!(
                "min.insync.replicas is {} but only {in_sync} replica(s) of {topic}-{index} are in sync",
                partition.min_insync_replicas()
            ),
        ));
    }
    Ok((partition, records))
}

/// Validates every record of the batch and appends it.
fn validate_and_append(job: &Job) -> Outcome {
    let settings = &job.settings;
    let limits = ValidationLimits {
        decompressed_bytes_max: settings.decompressed_bytes_max(),
        now_ms: job.now_ms,
        timestamp_before_max_ms: settings.timestamp_before_max_ms,
        timestamp_after_max_ms: settings.timestamp_after_max_ms,
        keys_required: settings.log.compaction.is_some(),
        log_append_time: settings.log_append_time,
    };
    let refused = |error: LogError| {
        if matches!(error, LogError::Batch(_)) {
            warn_bad_input(
                &format!("{}-{}", job.partition.topic, job.partition.index),
                &format!("refused batch: {error}"),
            );
        }
        ErrorReply::from(&error)
    };
    let mut batch = validate(job.records.clone(), &limits).map_err(|e| refused(e.into()))?;
    if let Some(codec) = settings
        .compression
        .filter(|_| recompresses(settings, batch.header()))
    {
        let recompressed = recompress(
            &batch,
            codec,
            settings.compression_levels,
            limits.decompressed_bytes_max,
        )
        .map_err(|e| refused(e.into()))?;
        batch = validate(recompressed, &limits).map_err(|e| refused(e.into()))?;
    }
    job.partition
        .append(&batch.verified(job.verification))
        .map_err(refused)
}

/// Whether a topic's `compression.type` asks for another codec than the batch's.
fn recompresses(settings: &TopicSettings, header: &BatchHeader) -> bool {
    settings
        .compression
        .is_some_and(|codec| codec != header.compression())
}
