//! Writing transaction markers: the control batch that ends a transaction on each of its
//! partitions. The leader of a partition appends it (for a WriteTxnMarkers request, or for the
//! transaction coordinator on the same broker) as durably as an `acks=all` produce; the
//! coordinator's broker sends each marker to its partition's leader until every one is
//! written, across leader changes, then tells the coordinator the transaction is complete.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    ApiKey, ProducerId, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::ResponseError;
use weir_coordinator::transaction::TxnMarkers;
use weir_coordinator::{GroupError, ProducerIdAndEpoch, OFFSETS_TOPIC};
use weir_log::batch::TxnResult;
use weir_log::ValidBatch;
use weir_metadata::NO_LEADER;

use crate::broker::Broker;
use crate::endpoints::ClientEndpoint;
use crate::handlers::errors::ErrorReply;
use crate::shutdown::stopping;
use crate::txn_markers::{AppendedMarker, Marker};

/// First pause before markers that could not be written are tried again; it doubles up to
/// [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(50);
/// Longest pause between tries.
const RETRY_MAX: Duration = Duration::from_secs(1);
/// How often prepared transactions nobody writes markers for are looked for.
const PREPARED_SWEEP: Duration = Duration::from_secs(1);
/// The WriteTxnMarkers version brokers send.
const WRITE_TXN_MARKERS_VERSION: i16 = 1;

impl Broker {
    /// Appends `marker` to `topic`-`index`, which this broker must lead; the returned marker
    /// is acknowledged once it is as safe as an `acks=all` write.
    fn append_marker(
        &self,
        topic: &str,
        index: i32,
        marker: Marker,
    ) -> Result<AppendedMarker, ResponseError> {
        let partition = crate::handlers::led_partition(self, topic, index)?;
        if partition.too_few_in_sync().is_some() {
            return Err(ResponseError::NotEnoughReplicas);
        }
        let batch = ValidBatch::marker(
            marker.producer_id,
            marker.producer_epoch,
            marker.result,
            marker.coordinator_epoch,
            self.partitions.clock().now_ms(),
        );
        let info = partition
            .append(&batch)
            .map_err(|error| ErrorReply::from(&error).error)?;
        let settings = partition.settings();
        Ok(AppendedMarker {
            sync: settings.flush_policy.sync_before_ack(-1),
            min_insync_replicas: partition.min_insync_replicas(),
            appended: info,
            partition,
        })
    }

    /// Writes the markers of a prepared transaction on every one of its partitions, in a task
    /// of its own, then completes the transaction in the coordinator; nothing when a task
    /// writes them already.
    pub(crate) fn write_markers(self: &Arc<Self>, markers: TxnMarkers) {
        if !self.markers_in_flight.claim(&markers) {
            return;
        }
        let broker = self.clone();
        tokio::spawn(async move {
            broker.mark_until_done(&markers).await;
            broker.markers_in_flight.release(&markers);
        });
    }

    /// Every [`PREPARED_SWEEP`], writes the markers of every prepared transaction nobody is
    /// writing: those a timeout aborted, and those a coordinator that took a partition over
    /// found prepared. Ends at shutdown.
    pub(crate) async fn sweep_prepared_transactions(self: Arc<Self>) {
        let mut shutdown = self.shutdown.clone();
        let mut tick = tokio::time::interval(PREPARED_SWEEP);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stopping(&mut shutdown) => return,
            }
            for markers in self.transactions.prepared() {
                self.write_markers(markers);
            }
        }
    }

    /// Sends each partition's marker to its current leader until every one is written (a
    /// partition whose topic was deleted needs none), then completes the transaction. Gives
    /// up at shutdown or once this broker no longer coordinates the transactional id: the
    /// coordinator that loads it next finishes the job.
    async fn mark_until_done(&self, markers: &TxnMarkers) {
        let Ok(coordinator_epoch) = self
            .transactions
            .coordinator_epoch(&markers.transactional_id)
        else {
            tracing::info!(target: "weir::transactions", transactional_id = markers.transactional_id, "no longer the transaction's coordinator; its next coordinator writes its markers");
            return;
        };
        let marker = Marker {
            producer_id: markers.producer_id,
            producer_epoch: markers.producer_epoch,
            result: TxnResult::of_commit(markers.commit),
            coordinator_epoch,
        };
        let mut pending: Vec<(String, i32)> = markers
            .partitions
            .iter()
            .flat_map(|(topic, partitions)| partitions.iter().map(move |p| (topic.clone(), *p)))
            .collect();
        let mut retry = Retry::new(self, &markers.transactional_id);
        loop {
            let round = self.mark_once(&pending, marker).await;
            if round.fenced {
                tracing::warn!(target: "weir::transactions", transactional_id = markers.transactional_id, coordinator_epoch, "a partition has a marker of this producer from a newer transaction coordinator: this broker no longer coordinates the transaction, and its next coordinator finishes it");
                return;
            }
            pending = round.partitions;
            if pending.is_empty() {
                break;
            }
            tracing::debug!(target: "weir::transactions", transactional_id = markers.transactional_id, partitions = pending.len(), "transaction markers not written yet; trying again");
            if !retry.pause().await {
                return;
            }
        }
        loop {
            match self.transactions.complete(markers).await {
                Ok(_) => return,
                Err(error) => {
                    tracing::warn!(target: "weir::transactions", transactional_id = markers.transactional_id, %error, "could not store the transaction as complete; trying again");
                }
            }
            if !retry.pause().await {
                return;
            }
        }
    }

    /// One round: each pending partition's marker to its leader (appended here when it is
    /// this broker). Returns the partitions still without their marker.
    async fn mark_once(&self, pending: &[(String, i32)], marker: Marker) -> Unwritten {
        let image = self.image();
        let mut by_leader: BTreeMap<i32, Vec<(String, i32)>> = BTreeMap::new();
        let mut left = Unwritten::default();
        for (topic, index) in pending {
            match image.topic(topic).and_then(|t| t.partition(*index)) {
                // Deleted with its topic: nothing to mark.
                None => {}
                Some(state) if state.leader == NO_LEADER => {
                    left.partitions.push((topic.clone(), *index))
                }
                Some(state) => by_leader
                    .entry(state.leader)
                    .or_default()
                    .push((topic.clone(), *index)),
            }
        }
        for (leader, partitions) in by_leader {
            let failed = if leader == self.identity.node_id {
                self.mark_here(&partitions, marker).await
            } else {
                let listener = &self.identity.inter_broker.listener;
                match image
                    .broker(leader)
                    .and_then(|b| ClientEndpoint::on(b, listener))
                {
                    Some(endpoint) => self.mark_at(&endpoint, &partitions, marker).await,
                    None => Unwritten {
                        partitions,
                        fenced: false,
                    },
                }
            };
            left.partitions.extend(failed.partitions);
            left.fenced |= failed.fenced;
        }
        left
    }

    /// Writes `marker` on `partitions`, led here; returns those where it failed.
    async fn mark_here(&self, partitions: &[(String, i32)], marker: Marker) -> Unwritten {
        let results = self.write_marker_batch(partitions, marker).await;
        let mut failed = Unwritten::default();
        for (partition, result) in partitions.iter().zip(results) {
            if let Err(error) = result {
                failed.fenced |= error == ResponseError::TransactionCoordinatorFenced;
                failed.partitions.push(partition.clone());
            }
        }
        failed
    }

    /// Sends `marker` for `partitions` to their leader at `endpoint` in a WriteTxnMarkers
    /// request; returns those it did not write.
    async fn mark_at(
        &self,
        endpoint: &ClientEndpoint,
        partitions: &[(String, i32)],
        marker: Marker,
    ) -> Unwritten {
        let address = format!("{}:{}", endpoint.host, endpoint.port);
        let client_id = format!("weir-txn-markers-{}", self.identity.node_id);
        let mut request = WriteTxnMarkersRequest::default();
        let mut writable = WritableTxnMarker::default();
        writable.producer_id = ProducerId(marker.producer_id);
        writable.producer_epoch = marker.producer_epoch;
        writable.transaction_result = marker.result == TxnResult::Commit;
        writable.coordinator_epoch = marker.coordinator_epoch;
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (topic, index) in partitions {
            topics.entry(topic).or_default().push(*index);
        }
        writable.topics = topics
            .into_iter()
            .map(|(topic, indexes)| {
                let mut t = WritableTxnMarkerTopic::default();
                t.name = TopicName(crate::handlers::str_bytes(topic));
                t.partition_indexes = indexes;
                t
            })
            .collect();
        request.markers = vec![writable];
        let answer: Result<WriteTxnMarkersResponse, _> = async {
            let connection = self.marker_links.to(&address, &client_id).await?;
            connection
                .call_at(ApiKey::WriteTxnMarkers, WRITE_TXN_MARKERS_VERSION, &request)
                .await
        }
        .await;
        let Ok(response) = answer else {
            return Unwritten {
                partitions: partitions.to_vec(),
                fenced: false,
            };
        };
        let mut written = BTreeSet::new();
        let mut fenced = false;
        for result in &response.markers {
            for topic in &result.topics {
                for partition in &topic.partitions {
                    if partition.error_code == 0 {
                        written.insert((topic.name.0.to_string(), partition.partition_index));
                    }
                    fenced |=
                        partition.error_code == ResponseError::TransactionCoordinatorFenced.code();
                }
            }
        }
        Unwritten {
            partitions: partitions
                .iter()
                .filter(|partition| !written.contains(*partition))
                .cloned()
                .collect(),
            fenced,
        }
    }

    /// Appends `marker` on each of `partitions` (led here), then waits for them all; one
    /// result per partition, in order. A partition of `__consumer_offsets` gets its marker
    /// through the group coordinator, which settles the offsets the transaction committed
    /// there; while it does not serve the partition the marker is refused as
    /// NOT_LEADER_OR_FOLLOWER, so the coordinator's broker tries again, as Kafka answers.
    pub(crate) async fn write_marker_batch(
        &self,
        partitions: &[(String, i32)],
        marker: Marker,
    ) -> Vec<Result<(), ResponseError>> {
        // Every append happens at the first poll, in order; then each waits for its replicas.
        let writes = partitions.iter().map(|(topic, index)| async move {
            if topic == OFFSETS_TOPIC {
                return self.mark_offsets_partition(*index, marker).await;
            }
            match self.append_marker(topic, *index, marker) {
                Ok(appended) => appended.acknowledged().await,
                Err(error) => Err(error),
            }
        });
        futures_util::future::join_all(writes).await
    }

    /// Ends the transaction of `marker` on partition `index` of `__consumer_offsets`.
    async fn mark_offsets_partition(
        &self,
        index: i32,
        marker: Marker,
    ) -> Result<(), ResponseError> {
        let producer = ProducerIdAndEpoch {
            producer_id: marker.producer_id,
            epoch: marker.producer_epoch,
        };
        let commit = marker.result == TxnResult::Commit;
        self.coordinator
            .complete_transaction(index, producer, commit, marker.coordinator_epoch)
            .await
            .map_err(|error| match error {
                GroupError::InvalidProducerEpoch => ResponseError::InvalidProducerEpoch,
                GroupError::TransactionCoordinatorFenced => {
                    ResponseError::TransactionCoordinatorFenced
                }
                GroupError::InvalidCommitOffsetSize => ResponseError::RecordListTooLarge,
                _ => ResponseError::NotLeaderOrFollower,
            })
    }
}

/// What a round of marker writes left: the partitions without their marker, and whether one
/// was refused because a newer transaction coordinator wrote a marker there.
#[derive(Default)]
struct Unwritten {
    partitions: Vec<(String, i32)>,
    fenced: bool,
}

/// The pause between a marker writer's tries: doubling from [`RETRY_FIRST`] to [`RETRY_MAX`],
/// and over at shutdown or once this broker no longer coordinates the transactional id.
struct Retry<'a> {
    broker: &'a Broker,
    transactional_id: &'a str,
    shutdown: tokio::sync::watch::Receiver<bool>,
    next: Duration,
}

impl<'a> Retry<'a> {
    fn new(broker: &'a Broker, transactional_id: &'a str) -> Retry<'a> {
        Retry {
            broker,
            transactional_id,
            shutdown: broker.shutdown.clone(),
            next: RETRY_FIRST,
        }
    }

    /// Waits before the next try; false when there is none to make.
    async fn pause(&mut self) -> bool {
        if self
            .broker
            .transactions
            .check_served(self.transactional_id)
            .is_err()
        {
            tracing::info!(target: "weir::transactions", transactional_id = self.transactional_id, "no longer the transaction's coordinator; its next coordinator finishes it");
            return false;
        }
        tokio::select! {
            _ = tokio::time::sleep(self.next) => {}
            _ = stopping(&mut self.shutdown) => return false,
        }
        self.next = (self.next * 2).min(RETRY_MAX);
        true
    }
}
