//! Followers copying their leaders' logs: one task per leader broker fetches every partition
//! this broker follows from it with the Kafka Fetch API (the replica state set: this broker's
//! id and the broker epoch of its registration, which the leader checks, KIP-903), appends what
//! comes back as the leader stored it, takes the leader's high watermark, and truncates a
//! divergent log at the point the leader names (KIP-320's diverging epoch) before fetching on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse,
    TopicName,
};
use kafka_protocol::ResponseError;
use tokio::sync::watch;
use weir_client::{ClientError, Connection};
use weir_metadata::MetadataImage;

use crate::endpoints::ClientEndpoint;
use crate::inter_broker::InterBroker;
use crate::partition::Partition;
use crate::shutdown::stopping;

/// Fetch version followers send: topic ids, `last_fetched_epoch`, `diverging_epoch`, and the
/// replica state with the broker epoch (v15+) that proves the fetch is this broker's.
const REPLICA_FETCH_VERSION: i16 = 16;
/// How long a leader holds a follower's fetch when there is nothing new.
const REPLICA_FETCH_WAIT_MS: i32 = 500;
/// Most bytes one replica fetch brings, and per partition.
const REPLICA_FETCH_BYTES_MAX: i32 = 16 * 1024 * 1024;
const REPLICA_FETCH_PARTITION_BYTES_MAX: i32 = 1024 * 1024;
/// Pause after a failed connection or a fetch every partition of which was refused.
const RETRY_BACKOFF_MS: u64 = 250;
/// Pause after the leader refused this broker's login or certificate.
const REFUSED_BACKOFF: Duration = Duration::from_secs(5);
/// Deadline of one fetch round trip (its long poll included).
const REQUEST_TIMEOUT_MS: u64 = 10_000;

/// One leader's fetcher: the partitions to copy from it, and its task.
struct LeaderFetcher {
    partitions: watch::Sender<Vec<Arc<Partition>>>,
    task: tokio::task::JoinHandle<()>,
}

/// The replica fetchers of this broker, one per leader it follows.
pub struct ReplicaFetchers {
    node_id: i32,
    leaders: Arc<InterBroker>,
    broker_epoch: Arc<AtomicU64>,
    by_leader: Mutex<HashMap<i32, LeaderFetcher>>,
}

impl ReplicaFetchers {
    /// No fetchers yet; `node_id` is this broker's id, sent as the replica id with the broker
    /// epoch of its current registration (`broker_epoch`, 0 until registered); leaders are
    /// reached as `leaders` says (their inter-broker listener, with its TLS and login).
    pub fn new(
        node_id: i32,
        leaders: &InterBroker,
        broker_epoch: Arc<AtomicU64>,
    ) -> ReplicaFetchers {
        ReplicaFetchers {
            node_id,
            leaders: Arc::new(leaders.clone()),
            broker_epoch,
            by_leader: Mutex::new(HashMap::new()),
        }
    }

    /// Fetches each partition of `followed` (by leader) from its leader from now on; a
    /// leader no longer followed for anything has its fetcher stopped.
    pub fn update(
        &self,
        followed: HashMap<i32, Vec<Arc<Partition>>>,
        images: &watch::Receiver<Arc<MetadataImage>>,
        shutdown: &watch::Receiver<bool>,
    ) {
        let mut by_leader = self.by_leader.lock().unwrap_or_else(|e| e.into_inner());
        by_leader.retain(|leader, fetcher| {
            let keep = followed.contains_key(leader) && !fetcher.task.is_finished();
            if !keep {
                fetcher.task.abort();
            }
            keep
        });
        for (leader, partitions) in followed {
            match by_leader.get(&leader) {
                Some(fetcher) => {
                    fetcher.partitions.send_if_modified(|current| {
                        let same = current.len() == partitions.len()
                            && current
                                .iter()
                                .zip(&partitions)
                                .all(|(a, b)| Arc::ptr_eq(a, b));
                        if !same {
                            *current = partitions;
                        }
                        !same
                    });
                }
                None => {
                    let (sender, receiver) = watch::channel(partitions);
                    let task = tokio::spawn(fetch_from(
                        Replica {
                            node_id: self.node_id,
                            leaders: self.leaders.clone(),
                            broker_epoch: self.broker_epoch.clone(),
                        },
                        leader,
                        receiver,
                        images.clone(),
                        shutdown.clone(),
                    ));
                    by_leader.insert(
                        leader,
                        LeaderFetcher {
                            partitions: sender,
                            task,
                        },
                    );
                }
            }
        }
    }

    /// Stops every fetcher (shutdown).
    pub fn stop(&self) {
        let mut by_leader = self.by_leader.lock().unwrap_or_else(|e| e.into_inner());
        for (_, fetcher) in by_leader.drain() {
            fetcher.task.abort();
        }
    }
}

/// Who this broker is to its leaders.
struct Replica {
    node_id: i32,
    /// How leaders are reached: their listener fetched from, its TLS and login.
    leaders: Arc<InterBroker>,
    broker_epoch: Arc<AtomicU64>,
}

/// The fetch loop for one leader: connect, fetch, apply, until shutdown or aborted.
async fn fetch_from(
    replica: Replica,
    leader: i32,
    mut partitions: watch::Receiver<Vec<Arc<Partition>>>,
    images: watch::Receiver<Arc<MetadataImage>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let backoff = Duration::from_millis(RETRY_BACKOFF_MS);
    let node_id = replica.node_id;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let endpoint = images
            .borrow()
            .broker(leader)
            .and_then(|b| ClientEndpoint::on(b, &replica.leaders.listener));
        let Some(endpoint) = endpoint else {
            tokio::time::sleep(backoff).await;
            continue;
        };
        let address = format!("{}:{}", endpoint.host, endpoint.port);
        let client_id = format!("weir-replica-fetcher-{node_id}");
        let timeout = Duration::from_millis(REQUEST_TIMEOUT_MS);
        let connection = tokio::select! {
            connected = replica.leaders.security.connect(&address, &client_id, timeout) => connected,
            _ = stopping(&mut shutdown) => return,
        };
        let connection = match connection {
            Ok(connection) => connection,
            // A refused login or certificate is a setting to fix, not a passing outage: said
            // at warn, and tried again less often.
            Err(error @ (ClientError::Authentication { .. } | ClientError::Tls { .. })) => {
                tracing::warn!(target: "weir::replication", leader, %address, %error, "the leader refused this broker's inter-broker login or certificate; retrying in {} s", REFUSED_BACKOFF.as_secs());
                tokio::select! {
                    _ = tokio::time::sleep(REFUSED_BACKOFF) => continue,
                    _ = stopping(&mut shutdown) => return,
                }
            }
            Err(error) => {
                tracing::debug!(target: "weir::replication", leader, %address, %error, "cannot reach the leader to fetch from; retrying");
                tokio::time::sleep(backoff).await;
                continue;
            }
        };
        tracing::debug!(target: "weir::replication", leader, %address, "fetching from leader");
        loop {
            let followed = partitions.borrow_and_update().clone();
            if followed.is_empty() {
                if partitions.changed().await.is_err() {
                    return;
                }
                continue;
            }
            let broker_epoch = replica.broker_epoch.load(Ordering::Acquire);
            if broker_epoch == 0 {
                // Not registered yet: nothing would prove the fetch is this broker's.
                tokio::time::sleep(backoff).await;
                continue;
            }
            let request = fetch_request(node_id, broker_epoch, &followed);
            let response: FetchResponse = tokio::select! {
                response = connection.call_at(ApiKey::Fetch, REPLICA_FETCH_VERSION, &request) => match response {
                    Ok(response) => response,
                    Err(error) => {
                        tracing::debug!(target: "weir::replication", leader, %error, "replica fetch failed; reconnecting");
                        break;
                    }
                },
                _ = partitions.changed() => continue,
                _ = stopping(&mut shutdown) => return,
            };
            let applied = tokio::task::spawn_blocking(move || apply(&followed, response)).await;
            let Ok(Applied {
                progressed,
                out_of_range,
            }) = applied
            else {
                return;
            };
            for partition in out_of_range {
                if let Err(error) = start_over(node_id, &connection, partition).await {
                    tracing::debug!(target: "weir::replication", leader, %error, "cannot learn the leader's log start; retrying");
                }
            }
            if !progressed {
                tokio::time::sleep(backoff).await;
            }
        }
        tokio::time::sleep(backoff).await;
    }
}

/// A fetch of every followed partition from its log end.
fn fetch_request(node_id: i32, broker_epoch: u64, followed: &[Arc<Partition>]) -> FetchRequest {
    let mut request = FetchRequest::default();
    request.replica_state.replica_id = BrokerId(node_id);
    request.replica_state.replica_epoch = i64::try_from(broker_epoch).unwrap_or(i64::MAX);
    request.max_wait_ms = REPLICA_FETCH_WAIT_MS;
    request.min_bytes = 1;
    request.max_bytes = REPLICA_FETCH_BYTES_MAX;
    request.session_id = 0;
    request.session_epoch = -1;
    for partition in followed {
        let (fetch_offset, last_fetched_epoch, log_start_offset) = {
            let log = partition.log();
            (
                log.log_end_offset(),
                log.last_fetched_epoch(),
                log.log_start_offset(),
            )
        };
        let mut wanted = FetchPartition::default();
        wanted.partition = partition.index;
        wanted.current_leader_epoch = partition.state().leader_epoch;
        wanted.fetch_offset = fetch_offset;
        wanted.last_fetched_epoch = last_fetched_epoch;
        wanted.log_start_offset = log_start_offset;
        wanted.partition_max_bytes = REPLICA_FETCH_PARTITION_BYTES_MAX;
        match request.topics.last_mut() {
            Some(topic) if topic.topic_id == partition.topic_id => topic.partitions.push(wanted),
            _ => {
                let mut topic = FetchTopic::default();
                topic.topic_id = partition.topic_id;
                topic.partitions.push(wanted);
                request.topics.push(topic);
            }
        }
    }
    request
}

/// What applying a fetch response did.
#[derive(Default)]
struct Applied {
    /// Some partition was served (else the caller backs off).
    progressed: bool,
    /// Partitions whose fetch offset the leader no longer has (OFFSET_OUT_OF_RANGE).
    out_of_range: Vec<Arc<Partition>>,
}

/// Applies a fetch response to the followed partitions. Blocking (appends and truncations
/// write the log).
fn apply(followed: &[Arc<Partition>], response: FetchResponse) -> Applied {
    let mut applied = Applied::default();
    if response.error_code != 0 {
        tracing::debug!(target: "weir::replication", error_code = response.error_code, "replica fetch refused");
        return applied;
    }
    for topic in response.responses {
        for data in topic.partitions {
            let found = followed
                .iter()
                .find(|p| p.topic_id == topic.topic_id && p.index == data.partition_index);
            let Some(partition) = found else { continue };
            if data.error_code == ResponseError::OffsetOutOfRange.code() {
                applied.out_of_range.push(partition.clone());
                continue;
            }
            applied.progressed |= apply_partition(partition, data);
        }
    }
    applied
}

/// A follower whose fetch offset the leader no longer has: it asks the leader for its log
/// start (ListOffsets, earliest) and, when its own log ends below it (retention deleted what
/// it needs while it was behind, or it is a new replica of an old topic), empties its log and
/// starts over there, as Kafka's followers do.
async fn start_over(
    node_id: i32,
    connection: &Connection,
    partition: Arc<Partition>,
) -> Result<(), weir_client::ClientError> {
    let mut wanted = ListOffsetsPartition::default();
    wanted.partition_index = partition.index;
    wanted.timestamp = -2;
    wanted.current_leader_epoch = partition.state().leader_epoch;
    let mut topic = ListOffsetsTopic::default();
    topic.name = TopicName(partition.topic.clone().into());
    topic.partitions = vec![wanted];
    let mut request = ListOffsetsRequest::default();
    request.replica_id = BrokerId(node_id);
    request.topics = vec![topic];
    let response: ListOffsetsResponse =
        connection.call_at(ApiKey::ListOffsets, 4, &request).await?;
    let Some(answer) = response.topics.first().and_then(|t| t.partitions.first()) else {
        return Ok(());
    };
    let start = answer.offset;
    if answer.error_code != 0 || start < 0 || start <= partition.log().log_end_offset() {
        return Ok(());
    }
    let _ = tokio::task::spawn_blocking(move || partition.start_over_at(start)).await;
    Ok(())
}

fn apply_partition(partition: &Partition, data: PartitionData) -> bool {
    if data.error_code != 0 {
        let error = ResponseError::try_from_code(data.error_code);
        tracing::debug!(target: "weir::replication", topic = %partition.topic, partition = partition.index, ?error, "leader refused a replica fetch");
        return false;
    }
    if data.diverging_epoch.epoch >= 0 {
        let diverging = &data.diverging_epoch;
        return partition
            .truncate_diverging(diverging.epoch, diverging.end_offset)
            .is_ok();
    }
    let records = data.records.unwrap_or_default();
    match partition.append_replicated(&records, (data.high_watermark, data.log_start_offset)) {
        Ok(_) => true,
        Err(error) => {
            tracing::warn!(target: "weir::replication", topic = %partition.topic, partition = partition.index, %error, "could not append what the leader sent");
            false
        }
    }
}
