//! Verification that a transaction holds a partition (KIP-890, Kafka's
//! `transaction.partition.verification.enable`): before a transactional batch opens its
//! producer's transaction on a partition led here, the leader asks the transactional id's
//! coordinator (in this process, or on its broker with AddPartitionsToTxn v4 `verify_only`)
//! whether the transaction holds that partition. A producer that never added the partition,
//! or whose transaction ended meanwhile, cannot leave a transaction open there that no marker
//! would ever end (which would hold the last stable offset back for good).
//!
//! Under transaction protocol version 2 (Produce v12, TxnOffsetCommit v5) the client does not
//! add partitions itself: the leader asks the coordinator to add the partition instead
//! (AddPartitionsToTxn v5, not `verify_only`), which begins the transaction if need be.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, ProducerId, TopicName,
    TransactionalId,
};
use kafka_protocol::ResponseError;
use weir_coordinator::transaction::records::TxnPartitions;
use weir_coordinator::ProducerIdAndEpoch;
use weir_log::VerificationGuard;
use weir_metadata::TRANSACTION_STATE_TOPIC;

use crate::broker::Broker;
use crate::endpoints::ClientEndpoint;
use crate::handlers::errors::txn_error;
use crate::handlers::groups::key_leader;
use crate::handlers::str_bytes;
use crate::partition::Partition;

/// The AddPartitionsToTxn version brokers send (batched, with `verify_only`).
const BROKER_VERSION: i16 = 5;

/// First pause before an add refused CONCURRENT_TRANSACTIONS is tried again (Kafka's
/// `add.partitions.to.txn.retry.backoff.ms`); it doubles up to [`ADD_RETRY_MAX`].
const ADD_RETRY_FIRST: Duration = Duration::from_millis(20);
/// Longest pause between such tries (Kafka's `add.partitions.to.txn.retry.backoff.max.ms`).
const ADD_RETRY_MAX: Duration = Duration::from_millis(100);
/// How long a leader goes on trying before it answers the producer's write with the retriable
/// error.
const ADD_RETRY_BUDGET: Duration = Duration::from_secs(1);

/// What a leader asks of a transaction's coordinator about its partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxnCheck {
    /// Whether the transaction holds them (transaction protocol version 1).
    Verify,
    /// Add them to it, beginning it if need be (version 2: the client adds none itself).
    Add,
}

/// Where a transactional batch's verification guard comes from ([`guard_before`]).
pub(crate) enum GuardBefore {
    /// Taken before the coordinator is asked (version 1): a marker of the producer that lands
    /// in between withdraws it, so a transaction that ended meanwhile is not reopened.
    Taken(VerificationGuard),
    /// To take once the coordinator added the partition ([`guard_after`]; version 2): its
    /// previous transaction is complete by then, every marker of it written, so none of those
    /// can withdraw it (taken before, the previous transaction's last marker, which carries
    /// the same bumped epoch, would).
    After,
    /// The producer's transaction is open on the partition: nothing to verify.
    InTransaction,
}

/// The guard a transactional batch of `producer` on `partition` needs, before the coordinator
/// is asked as `check` says.
pub(crate) fn guard_before(
    partition: &Partition,
    producer: ProducerIdAndEpoch,
    check: TxnCheck,
) -> GuardBefore {
    match check {
        TxnCheck::Verify => partition
            .log_mut()
            .start_txn_verification(producer.producer_id, producer.epoch)
            .map_or(GuardBefore::InTransaction, GuardBefore::Taken),
        TxnCheck::Add
            if partition
                .log()
                .in_transaction(producer.producer_id, producer.epoch) =>
        {
            GuardBefore::InTransaction
        }
        TxnCheck::Add => GuardBefore::After,
    }
}

/// The guard [`GuardBefore::After`] names, taken now; `None` once the transaction is open on
/// the partition (another write opened it meanwhile).
pub(crate) fn guard_after(
    partition: &Partition,
    producer: ProducerIdAndEpoch,
) -> Option<VerificationGuard> {
    partition
        .log_mut()
        .start_txn_verification(producer.producer_id, producer.epoch)
}

impl Broker {
    /// Whether the open transaction of `producer` (of `transactional_id`) holds each of
    /// `partitions` (or, with [`TxnCheck::Add`], whether each is added to it now): one
    /// result per partition, in order. The errors are the coordinator's
    /// (TRANSACTION_ABORTABLE for a partition not in the transaction, PRODUCER_FENCED,
    /// INVALID_PRODUCER_ID_MAPPING, CONCURRENT_TRANSACTIONS while it ends), its lookup's
    /// (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS), or
    /// NETWORK_EXCEPTION when its broker did not answer; the caller words them for its client.
    pub(crate) async fn check_in_transaction(
        &self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        partitions: &[(&str, i32)],
        check: TxnCheck,
    ) -> Vec<Result<(), ResponseError>> {
        // Under version 2 the producer begins its next transaction as soon as EndTxn answers,
        // while the last one's markers may still be written (CONCURRENT_TRANSACTIONS): the
        // leader waits a little for them, as Kafka's leader retries, rather than send the
        // producer into a retry that waits for its next metadata refresh.
        let deadline = tokio::time::Instant::now() + ADD_RETRY_BUDGET;
        let mut pause = ADD_RETRY_FIRST;
        loop {
            let results = self
                .check_once(transactional_id, producer, partitions, check)
                .await;
            let concurrent = results.contains(&Err(ResponseError::ConcurrentTransactions));
            if !concurrent
                || check != TxnCheck::Add
                || tokio::time::Instant::now() + pause > deadline
            {
                return results;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(ADD_RETRY_MAX);
        }
    }

    /// One round of [`Broker::check_in_transaction`].
    async fn check_once(
        &self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        partitions: &[(&str, i32)],
        check: TxnCheck,
    ) -> Vec<Result<(), ResponseError>> {
        let image = self.image();
        let all = |error: ResponseError| vec![Err(error); partitions.len()];
        let Some(coordinator) = key_leader(&image, TRANSACTION_STATE_TOPIC, transactional_id)
        else {
            return all(ResponseError::CoordinatorNotAvailable);
        };
        if coordinator == self.identity.node_id && check == TxnCheck::Add {
            let mut added = TxnPartitions::new();
            for (topic, index) in partitions {
                added.entry(topic.to_string()).or_default().insert(*index);
            }
            return match self
                .transactions
                .add_partitions(transactional_id, producer, &added)
                .await
            {
                Ok(()) => vec![Ok(()); partitions.len()],
                Err(error) => all(txn_error(error)),
            };
        }
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
        let listener = &self.identity.inter_broker.listener;
        let endpoint = image
            .broker(coordinator)
            .and_then(|b| ClientEndpoint::on(b, listener));
        let Some(endpoint) = endpoint else {
            return all(ResponseError::CoordinatorNotAvailable);
        };
        let address = format!("{}:{}", endpoint.host, endpoint.port);
        let client_id = format!("weir-txn-verification-{}", self.identity.node_id);
        let request = check_request(transactional_id, producer, partitions, check);
        let answer: Result<AddPartitionsToTxnResponse, _> = async {
            let connection = self.verification_links.to(&address, &client_id).await?;
            connection
                .call_at(ApiKey::AddPartitionsToTxn, BROKER_VERSION, &request)
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

/// AddPartitionsToTxn v5 asking whether the transaction holds `partitions` (changing nothing),
/// or adding them.
fn check_request(
    transactional_id: &str,
    producer: ProducerIdAndEpoch,
    partitions: &[(&str, i32)],
    check: TxnCheck,
) -> AddPartitionsToTxnRequest {
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, index) in partitions {
        topics.entry(topic).or_default().push(*index);
    }
    let mut transaction = AddPartitionsToTxnTransaction::default();
    transaction.transactional_id = TransactionalId(str_bytes(transactional_id));
    transaction.producer_id = ProducerId(producer.producer_id);
    transaction.producer_epoch = producer.epoch;
    transaction.verify_only = check == TxnCheck::Verify;
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
