//! Transactions on [`Admin`]: list the transactional ids every broker coordinates, describe
//! one (state, producer, partitions, age), and abort one's open transaction by fencing its
//! producer (an InitProducerId of the transactional id, as Kafka's `fenceProducers` does).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    ApiKey, DescribeTransactionsRequest, DescribeTransactionsResponse, InitProducerIdRequest,
    InitProducerIdResponse, ListTransactionsRequest, ListTransactionsResponse, ProducerId,
    TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::admin::{check, Admin};
use crate::error::Result;

/// FindCoordinator's key type of a transactional id.
const KEY_TYPE_TRANSACTION: i8 = 1;
/// Wait between InitProducerIds while the coordinator finishes the transaction it aborts.
const FENCE_RETRY: Duration = Duration::from_millis(100);

/// A transactional id as ListTransactions reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionListing {
    /// The transactional id.
    pub transactional_id: String,
    /// Its producer id.
    pub producer_id: i64,
    /// `Empty`, `Ongoing`, `PrepareCommit`, `CompleteAbort`, …
    pub state: String,
}

/// A transactional id as its coordinator describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionDescription {
    /// The transactional id.
    pub transactional_id: String,
    /// Its state.
    pub state: String,
    /// Its producer id and epoch.
    pub producer_id: i64,
    /// The producer's epoch.
    pub producer_epoch: i16,
    /// `transaction.timeout.ms` of its producer.
    pub timeout_ms: i32,
    /// When its open transaction began (ms since the epoch), or -1.
    pub start_ms: i64,
    /// The partitions in its transaction, by topic.
    pub partitions: BTreeMap<String, Vec<i32>>,
}

/// What aborting a transactional id's transaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fenced {
    /// The producer id now.
    pub producer_id: i64,
    /// The epoch it was fenced to: every producer of an older one is refused.
    pub producer_epoch: i16,
}

impl Admin {
    /// Every transactional id the brokers coordinate, sorted.
    pub async fn list_transactions(&self) -> Result<Vec<TransactionListing>> {
        self.cluster.refresh(None, false).await?;
        let (brokers, _, _) = self.cluster.brokers().await;
        let mut listed = BTreeMap::new();
        for broker in brokers {
            let connection = self.cluster.broker(broker.node_id).await?;
            let response: ListTransactionsResponse = connection
                .call(
                    ApiKey::ListTransactions,
                    0,
                    &ListTransactionsRequest::default(),
                )
                .await?;
            check(response.error_code, None)?;
            for t in response.transaction_states {
                listed.insert(
                    t.transactional_id.to_string(),
                    TransactionListing {
                        transactional_id: t.transactional_id.to_string(),
                        producer_id: t.producer_id.0,
                        state: t.transaction_state.to_string(),
                    },
                );
            }
        }
        Ok(listed.into_values().collect())
    }

    /// `transactional_id` as its coordinator holds it (TRANSACTIONAL_ID_NOT_FOUND when it
    /// knows none).
    pub async fn describe_transaction(
        &self,
        transactional_id: &str,
    ) -> Result<TransactionDescription> {
        let connection = self
            .coordinator(transactional_id, KEY_TYPE_TRANSACTION)
            .await?;
        let mut request = DescribeTransactionsRequest::default();
        request.transactional_ids = vec![TransactionalId(StrBytes::from_string(
            transactional_id.to_string(),
        ))];
        let response: DescribeTransactionsResponse = connection
            .call(ApiKey::DescribeTransactions, 0, &request)
            .await?;
        let described = response
            .transaction_states
            .into_iter()
            .next()
            .ok_or_else(|| {
                crate::ClientError::Protocol("DescribeTransactions answered nothing".into())
            })?;
        check(described.error_code, None)?;
        Ok(TransactionDescription {
            transactional_id: described.transactional_id.to_string(),
            state: described.transaction_state.to_string(),
            producer_id: described.producer_id.0,
            producer_epoch: described.producer_epoch,
            timeout_ms: described.transaction_timeout_ms,
            start_ms: described.transaction_start_time_ms,
            partitions: described
                .topics
                .into_iter()
                .map(|t| (t.topic.to_string(), t.partitions))
                .collect(),
        })
    }

    /// Aborts `transactional_id`'s open transaction, if any, by fencing its producer: an
    /// InitProducerId of the id (with its producer's timeout) gives it the next epoch, and
    /// the coordinator aborts what the older epoch left open before it answers. Its producer
    /// gets PRODUCER_FENCED from then on, as when a new instance of it starts.
    pub async fn abort_transaction(&self, transactional_id: &str) -> Result<Fenced> {
        let timeout_ms = self
            .describe_transaction(transactional_id)
            .await?
            .timeout_ms;
        let deadline = Instant::now() + self.cluster.config().request_timeout;
        let mut request = InitProducerIdRequest::default();
        request.transactional_id = Some(TransactionalId(StrBytes::from_string(
            transactional_id.to_string(),
        )));
        request.transaction_timeout_ms = timeout_ms;
        request.producer_id = ProducerId(-1);
        request.producer_epoch = -1;
        loop {
            let connection = self
                .coordinator(transactional_id, KEY_TYPE_TRANSACTION)
                .await?;
            let response: InitProducerIdResponse =
                connection.call(ApiKey::InitProducerId, 4, &request).await?;
            // The older epoch's transaction is being aborted: asked again once it is.
            let retry = matches!(
                ResponseError::try_from_code(response.error_code),
                Some(ResponseError::ConcurrentTransactions | ResponseError::NotCoordinator)
            );
            if retry && Instant::now() + FENCE_RETRY < deadline {
                tokio::time::sleep(FENCE_RETRY).await;
                continue;
            }
            check(response.error_code, None)?;
            return Ok(Fenced {
                producer_id: response.producer_id.0,
                producer_epoch: response.producer_epoch,
            });
        }
    }
}
