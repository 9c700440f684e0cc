//! Verification that a transaction holds a partition (KIP-890, Kafka's
//! `transaction.partition.verification.enable`): before a transactional batch opens its
//! producer's transaction on a partition led here, the leader asks the transactional id's
//! coordinator (in this process, or on its broker with AddPartitionsToTxn v4 `verify_only`)
//! whether the transaction holds that partition. A producer that never added the partition,
//! or whose transaction ended meanwhile, cannot leave a transaction open there that no marker
//! would ever end (which would hold the last stable offset back for good).

use std::collections::BTreeMap;

use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, ProducerId, TopicName,
    TransactionalId,
};
use kafka_protocol::ResponseError;
use weir_coordinator::ProducerIdAndEpoch;
use weir_metadata::TRANSACTION_STATE_TOPIC;

use crate::broker::Broker;
use crate::endpoints::ClientEndpoint;
use crate::handlers::errors::txn_error;
use crate::handlers::groups::key_leader;
use crate::handlers::str_bytes;

/// The AddPartitionsToTxn version brokers send to verify (the first with `verify_only`).
const VERIFY_VERSION: i16 = 4;

impl Broker {
    /// Whether the open transaction of `producer` (of `transactional_id`) holds each of
    /// `partitions`: one result per partition, in order. The errors are the coordinator's
    /// (TRANSACTION_ABORTABLE for a partition not in the transaction, PRODUCER_FENCED,
    /// INVALID_PRODUCER_ID_MAPPING, CONCURRENT_TRANSACTIONS while it ends), its lookup's
    /// (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS), or
    /// NETWORK_EXCEPTION when its broker did not answer; the caller words them for its client.
    pub(crate) async fn verify_in_transaction(
        &self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        partitions: &[(&str, i32)],
    ) -> Vec<Result<(), ResponseError>> {
        let image = self.image();
        let all = |error: ResponseError| vec![Err(error); partitions.len()];
        let Some(coordinator) = key_leader(&image, TRANSACTION_STATE_TOPIC, transactional_id)
        else {
            return all(ResponseError::CoordinatorNotAvailable);
        };
        if coordinator == self.identity.node_id {
            return match self
                .transactions
                .verify(transactional_id, producer, partitions)
            {
                Ok(held) => held
                    .into_iter()
                    .map(|held| match held {
                        true => Ok(()),
                        false => Err(ResponseError::TransactionAbortable),
                    })
                    .collect(),
                Err(error) => all(txn_error(error)),
            };
        }
        let Some(endpoint) = image.broker(coordinator).and_then(ClientEndpoint::of) else {
            return all(ResponseError::CoordinatorNotAvailable);
        };
        let address = format!("{}:{}", endpoint.host, endpoint.port);
        let client_id = format!("weir-txn-verification-{}", self.identity.node_id);
        let request = verify_request(transactional_id, producer, partitions);
        let answer: Result<AddPartitionsToTxnResponse, _> = async {
            let connection = self.verification_links.to(&address, &client_id).await?;
            connection
                .call_at(ApiKey::AddPartitionsToTxn, VERIFY_VERSION, &request)
                .await
        }
        .await;
        match answer {
            Ok(response) => verify_results(&response, partitions),
            Err(error) => {
                tracing::debug!(target: "weir::transactions", transactional_id, %error, coordinator, "verification at the transaction coordinator failed");
                all(ResponseError::NetworkException)
            }
        }
    }
}

/// AddPartitionsToTxn v4 asking, changing nothing, whether the transaction holds `partitions`.
fn verify_request(
    transactional_id: &str,
    producer: ProducerIdAndEpoch,
    partitions: &[(&str, i32)],
) -> AddPartitionsToTxnRequest {
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, index) in partitions {
        topics.entry(topic).or_default().push(*index);
    }
    let mut transaction = AddPartitionsToTxnTransaction::default();
    transaction.transactional_id = TransactionalId(str_bytes(transactional_id));
    transaction.producer_id = ProducerId(producer.producer_id);
    transaction.producer_epoch = producer.epoch;
    transaction.verify_only = true;
    transaction.topics = topics
        .into_iter()
        .map(|(name, indexes)| {
            let mut topic = AddPartitionsToTxnTopic::default();
            topic.name = TopicName(str_bytes(name));
            topic.partitions = indexes;
            topic
        })
        .collect();
    let mut request = AddPartitionsToTxnRequest::default();
    request.transactions = vec![transaction];
    request
}

/// Each partition's result in `response`; one the answer leaves out failed.
fn verify_results(
    response: &AddPartitionsToTxnResponse,
    partitions: &[(&str, i32)],
) -> Vec<Result<(), ResponseError>> {
    if let Some(error) = ResponseError::try_from_code(response.error_code) {
        return vec![Err(error); partitions.len()];
    }
    let code = |topic: &str, index: i32| {
        response
            .results_by_transaction
            .iter()
            .flat_map(|txn| &txn.topic_results)
            .filter(|t| t.name.0.as_str() == topic)
            .flat_map(|t| &t.results_by_partition)
            .find(|p| p.partition_index == index)
            .map(|p| p.partition_error_code)
    };
    partitions
        .iter()
        .map(|(topic, index)| match code(topic, *index) {
            Some(0) => Ok(()),
            Some(code) => {
                Err(ResponseError::try_from_code(code).unwrap_or(ResponseError::UnknownServerError))
            }
            None => Err(ResponseError::UnknownServerError),
        })
        .collect()
}
