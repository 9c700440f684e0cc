//! Where a change request meets the controller: each request of `weir_metadata::requests` is
//! decided by one [`Decide`] implementation, whose answer type the compiler holds to the
//! request's own; the request is decided here or forwarded to the controller leading the quorum
//! ([`Controller::decide`]); and [`LocalControl`] serves it all to the broker of this process.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use weir_metadata::acl::AclBinding;
use weir_metadata::requests::{
    AddObserver, AllocateProducerIds, AlterBrokerConfig, AlterClientQuotas,
    AlterPartitionReassignments, AlterScramCredentials, AlterTopicConfig, ControlCall,
    ControlRequest, ControlledShutdown, CreateAcls, CreatePartitions, CreateTopic, DeleteAcls,
    DeleteTopic, DescribeQuorum, ElectLeaders, EncodedAnswer, Heartbeat, Mutated, RegisterBroker,
};
use weir_metadata::{
    AlterPartition, BrokerRegistration, Committed, ControllerError, MetadataControl, MetadataImage,
    PartitionImage, PartitionOutcome, Pending, QuorumStatus, ScramDeletion, TopicImage,
};

use crate::controller::Controller;
use crate::quorum::{ControlFuture, ControlHandler};

/// How long a change waits for a controller to lead the quorum (an election) before it is
/// answered NOT_CONTROLLER.
const LEADERSHIP_WAIT_MS: u64 = 15_000;
/// Pause between tries while leadership moves.
const LEADERSHIP_RETRY_MS: u64 = 200;

/// How this controller decides a request of one kind.
trait Decide: ControlCall {
    /// Decides the request here (NOT_CONTROLLER when this controller does not lead).
    fn decide(
        self,
        controller: &Controller,
    ) -> impl Future<Output = Result<Self::Answer, ControllerError>> + Send;
}

impl Decide for CreateTopic {
    async fn decide(self, controller: &Controller) -> Result<Mutated<TopicImage>, ControllerError> {
        controller
            .create_topic(self.topic, self.validate_only, self.quota.as_ref())
            .await
    }
}

impl Decide for DeleteTopic {
    async fn decide(self, controller: &Controller) -> Result<Mutated<TopicImage>, ControllerError> {
        controller
            .delete_topic(&self.name, self.quota.as_ref())
            .await
    }
}

impl Decide for CreatePartitions {
    async fn decide(self, controller: &Controller) -> Result<Mutated<()>, ControllerError> {
        let checks = (self.validate_only, self.quota.as_ref());
        controller
            .create_partitions(&self.name, self.total, self.assignments, checks)
            .await
    }
}

impl Decide for AlterTopicConfig {
    async fn decide(self, controller: &Controller) -> Result<(), ControllerError> {
        controller
            .alter_topic_config(&self.name, self.change, self.validate_only)
            .await
    }
}

impl Decide for AlterBrokerConfig {
    async fn decide(self, controller: &Controller) -> Result<(), ControllerError> {
        controller
            .alter_broker_config(self.node_id, self.change, self.validate_only)
            .await
    }
}

impl Decide for RegisterBroker {
    async fn decide(self, controller: &Controller) -> Result<BrokerRegistration, ControllerError> {
        controller
            .register_broker(self.node_id, self.listeners, self.rack)
            .await
    }
}

impl Decide for Heartbeat {
    async fn decide(self, controller: &Controller) -> Result<bool, ControllerError> {
        controller.heartbeat(self.node_id, self.broker_epoch).await
    }
}

impl Decide for AlterPartition {
    async fn decide(self, controller: &Controller) -> Result<PartitionImage, ControllerError> {
        controller.alter_partition(self).await
    }
}

impl Decide for ControlledShutdown {
    async fn decide(self, controller: &Controller) -> Result<(), ControllerError> {
        controller
            .controlled_shutdown(self.node_id, self.broker_epoch)
            .await
    }
}

impl Decide for AlterPartitionReassignments {
    async fn decide(
        self,
        controller: &Controller,
    ) -> Result<Vec<PartitionOutcome>, ControllerError> {
        controller
            .alter_partition_reassignments(self.reassignments, self.allow_replication_factor_change)
            .await
    }
}

impl Decide for ElectLeaders {
    async fn decide(
        self,
        controller: &Controller,
    ) -> Result<Vec<PartitionOutcome>, ControllerError> {
        controller
            .elect_leaders(self.election, self.partitions)
            .await
    }
}

impl Decide for AllocateProducerIds {
    async fn decide(self, controller: &Controller) -> Result<(i64, i64), ControllerError> {
        controller.allocate_producer_ids().await
    }
}

impl Decide for AlterScramCredentials {
    async fn decide(self, controller: &Controller) -> Result<Vec<ScramDeletion>, ControllerError> {
        controller
            .alter_scram_credentials(self.upserts, self.deletions)
            .await
    }
}

impl Decide for AlterClientQuotas {
    async fn decide(self, controller: &Controller) -> Result<(), ControllerError> {
        controller.alter_client_quotas(self.alterations).await
    }
}

impl Decide for CreateAcls {
    async fn decide(self, controller: &Controller) -> Result<(), ControllerError> {
        controller.create_acls(self.acls).await
    }
}

impl Decide for DeleteAcls {
    async fn decide(
        self,
        controller: &Controller,
    ) -> Result<Vec<Vec<AclBinding>>, ControllerError> {
        controller.delete_acls(self.filters).await
    }
}

impl Decide for DescribeQuorum {
    async fn decide(self, controller: &Controller) -> Result<QuorumStatus, ControllerError> {
        controller.quorum.status()
    }
}

impl Decide for AddObserver {
    async fn decide(self, controller: &Controller) -> Result<(), ControllerError> {
        controller
            .quorum
            .add_observer(self.node_id, self.address)
            .await
    }
}

/// Decides `call` here and encodes what it produced.
async fn answer<C: Decide>(
    controller: &Controller,
    call: C,
) -> Result<EncodedAnswer, ControllerError> {
    EncodedAnswer::encode(&call.decide(controller).await?)
}

impl Controller {
    /// Decides `request` here (committing it if this controller leads the quorum).
    pub async fn execute(&self, request: ControlRequest) -> Result<EncodedAnswer, ControllerError> {
        match request {
            ControlRequest::CreateTopic(call) => answer(self, call).await,
            ControlRequest::DeleteTopic(call) => answer(self, call).await,
            ControlRequest::CreatePartitions(call) => answer(self, call).await,
            ControlRequest::AlterTopicConfig(call) => answer(self, call).await,
            ControlRequest::AlterBrokerConfig(call) => answer(self, call).await,
            ControlRequest::RegisterBroker(call) => answer(self, call).await,
            ControlRequest::Heartbeat(call) => answer(self, call).await,
            ControlRequest::AlterPartition(call) => answer(self, call).await,
            ControlRequest::ControlledShutdown(call) => answer(self, call).await,
            ControlRequest::AlterPartitionReassignments(call) => answer(self, call).await,
            ControlRequest::ElectLeaders(call) => answer(self, call).await,
            ControlRequest::AllocateProducerIds(call) => answer(self, call).await,
            ControlRequest::DescribeQuorum(call) => answer(self, call).await,
            ControlRequest::AddObserver(call) => answer(self, call).await,
            ControlRequest::AlterScramCredentials(call) => answer(self, call).await,
            ControlRequest::AlterClientQuotas(call) => answer(self, call).await,
            ControlRequest::CreateAcls(call) => answer(self, call).await,
            ControlRequest::DeleteAcls(call) => answer(self, call).await,
        }
    }

    /// Decides `request` here or, when another controller leads the quorum, there; answered
    /// with what it produced and the `applied_count` of the image that holds it. While
    /// leadership moves (NOT_CONTROLLER), it is tried again for a while.
    pub async fn decide(
        &self,
        request: ControlRequest,
    ) -> Result<(EncodedAnswer, u64), ControllerError> {
        let until = Instant::now() + Duration::from_millis(LEADERSHIP_WAIT_MS);
        loop {
            let outcome = match self.execute(request.clone()).await {
                Ok(value) => Ok((value, self.image().applied_count)),
                Err(ControllerError::NotController(_)) => {
                    self.quorum.forward(request.clone()).await
                }
                Err(refused) => Err(refused),
            };
            match outcome {
                Err(ControllerError::NotController(why)) if Instant::now() < until => {
                    tracing::debug!(target: "weir::controller", request = request.name(), why, "no active controller to decide a change yet; retrying");
                    tokio::time::sleep(Duration::from_millis(LEADERSHIP_RETRY_MS)).await;
                }
                outcome => return outcome,
            }
        }
    }
}

impl ControlHandler for Controller {
    fn handle(&self, request: ControlRequest) -> ControlFuture<'_> {
        Box::pin(async move {
            let value = self.execute(request).await?;
            Ok((value, self.image().applied_count))
        })
    }
}

/// The controller as the broker of the same process reaches it: each change is decided here
/// or by the active controller, and answered once it is committed.
#[derive(Clone)]
pub struct LocalControl(Arc<Controller>);

impl LocalControl {
    /// Serves `controller` to a broker.
    pub fn new(controller: Arc<Controller>) -> LocalControl {
        LocalControl(controller)
    }
}

impl MetadataControl for LocalControl {
    fn decide(&self, request: ControlRequest) -> Pending<EncodedAnswer> {
        let controller = self.0.clone();
        Box::pin(async move {
            let (value, applied_count) = controller.decide(request).await?;
            Ok(Committed {
                value,
                applied_count,
            })
        })
    }

    fn images(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.0.quorum.images()
    }
}
