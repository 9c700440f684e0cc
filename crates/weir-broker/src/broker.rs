//! The broker's shared state: what every request handler reads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::{watch, Semaphore};
use weir_coordinator::share_coordinator::ShareCoordinator;
use weir_coordinator::transaction::TransactionCoordinator;
use weir_coordinator::{GroupCoordinator, OFFSETS_TOPIC};
use weir_metadata::authorizer::{Access, AuthorizerSettings};
use weir_metadata::quota::QuotaKey;
use weir_metadata::requests::{AllocateProducerIds, RegisterBroker};
use weir_metadata::{
    BrokerListener, BrokerRegistration, ControllerError, MetadataControl, MetadataImage, Pending,
};
use weir_metadata::{SHARE_GROUP_STATE_TOPIC, TRANSACTION_STATE_TOPIC};

use crate::broker_links::{BrokerLinks, REMOTE_SHARE_STATE_TIMEOUT, REMOTE_VERIFY_TIMEOUT};
use crate::bulk_lane::{BulkLane, BULK_NICE};
use crate::config::{BrokerConfig, DynamicConfigs, RuntimeSettings};
use crate::coordinator_log::{InternalTopic, PartitionCoordinatorLog};
use crate::fetch_session::FetchSessions;
use crate::hot_partitions::{HotPartition, HotPartitions, Sampled, HOT_SAMPLE_INTERVAL};
use crate::inter_broker::InterBroker;
use crate::metrics::BrokerMetrics;
use crate::partition::storage_failure;
use crate::quotas::{ClientRates, ConnectionRates};
use crate::registry::PartitionRegistry;
use crate::replica_fetcher::ReplicaFetchers;
use crate::request_context::RequestContext;
use crate::share_state::ShareState;
use crate::shutdown::stopping;
use crate::txn_markers::{MarkersInFlight, REMOTE_MARKER_TIMEOUT};
use weir_sasl::logins::Logins;

/// Compressed batches validated at once, broker-wide. Decompressing is CPU work and its
/// buffers (a zstd window, a raw snappy block) are the only sizeable memory validation takes,
/// so more at once than cores would only queue on the CPU while holding memory.
const COMPRESSED_VALIDATIONS_MAX: usize = 2;
/// How long a metadata change the controller committed may take to be applied here before
/// the request that asked for it is answered REQUEST_TIMED_OUT (it is applied later).
const METADATA_APPLY_WAIT_MS: u64 = 30_000;
/// How often partitions that could not open (no space, no file descriptors) are tried again.
const PENDING_OPEN_RETRY_MS: u64 = 5_000;

/// Kafka's name of the listener a broker has by default.
pub const PLAINTEXT_LISTENER: &str = "PLAINTEXT";

/// Identity of this broker as clients see it.
#[derive(Debug, Clone)]
pub struct BrokerIdentity {
    /// `node.id`.
    pub node_id: i32,
    /// The cluster id written at first start.
    pub cluster_id: String,
    /// The Kafka listeners as clients are told to reach them (advertised), registered with
    /// the controller under their names.
    pub listeners: Vec<BrokerListener>,
    /// How this broker connects to the others (`inter.broker.listener.name`).
    pub inter_broker: InterBroker,
}

impl BrokerIdentity {
    /// A broker with one PLAINTEXT listener, advertised as `host:port`, which the other
    /// brokers reach it on too.
    pub fn plaintext(node_id: i32, cluster_id: &str, host: &str, port: u16) -> BrokerIdentity {
        BrokerIdentity {
            node_id,
            cluster_id: cluster_id.to_string(),
            listeners: vec![BrokerListener {
                name: PLAINTEXT_LISTENER.to_string(),
                host: host.to_string(),
                port,
            }],
            inter_broker: InterBroker::plaintext(PLAINTEXT_LISTENER),
        }
    }
}

/// Producer ids reserved from the controller and not yet handed out.
#[derive(Debug, Default)]
struct ProducerIdBlock {
    next: i64,
    end: i64,
}

/// Everything a request handler needs.
pub struct Broker {
    /// Broker settings.
    pub(crate) config: BrokerConfig,
    /// Who this broker is.
    pub(crate) identity: BrokerIdentity,
    /// The metadata controller, reached only through this interface (in this process on a
    /// single node).
    pub(crate) controller: Arc<dyn MetadataControl>,
    /// The latest image the hosted partitions and the coordinator were brought in line with:
    /// what request handlers read.
    applied: watch::Sender<Arc<MetadataImage>>,
    /// The broker-wide settings in force, resolved from the dynamic configs of the applied
    /// image whenever one of their levels changes.
    runtime: watch::Sender<Arc<RuntimeSettings>>,
    /// Hosted partitions.
    pub(crate) partitions: Arc<PartitionRegistry>,
    /// The consumer-group coordinator, keeping its state in `__consumer_offsets`.
    pub(crate) coordinator: Arc<GroupCoordinator>,
    /// `__consumer_offsets`, as the broker creates it and follows its leadership.
    pub(crate) offsets_topic: Arc<InternalTopic>,
    /// The transaction coordinator, keeping its state in `__transaction_state`.
    pub(crate) transactions: Arc<TransactionCoordinator>,
    /// `__transaction_state`, as the broker creates it and follows its leadership.
    pub(crate) transaction_topic: Arc<InternalTopic>,
    /// The share coordinator, keeping share-partitions' state in `__share_group_state`.
    pub(crate) share_coordinator: Arc<ShareCoordinator>,
    /// `__share_group_state`, as the broker creates it and follows its leadership.
    pub(crate) share_state_topic: Arc<InternalTopic>,
    /// Connections to the other brokers for the share-partition state their share
    /// coordinators keep.
    pub(crate) share_links: BrokerLinks,
    /// Connections to the other brokers for transaction markers.
    pub(crate) marker_links: BrokerLinks,
    /// Connections to the other brokers for verifications that a transaction holds a
    /// partition.
    pub(crate) verification_links: BrokerLinks,
    /// Prepared transactions whose markers are being written.
    pub(crate) markers_in_flight: MarkersInFlight,
    producer_ids: Mutex<ProducerIdBlock>,
    /// Becomes true when the server is shutting down; long polls answer at once.
    pub(crate) shutdown: watch::Receiver<bool>,
    /// `queued.max.request.bytes`: permits for request bytes held in memory, broker-wide.
    pub(crate) request_memory: Arc<Semaphore>,
    /// Permits to decompress and validate a compressed batch (see
    /// [`COMPRESSED_VALIDATIONS_MAX`]).
    pub(crate) compressed_validations: Semaphore,
    /// Incremental fetch sessions (KIP-227).
    pub(crate) fetch_sessions: FetchSessions,
    /// Share-partitions this broker leads and its members' share sessions (KIP-932).
    pub(crate) share_state: ShareState,
    /// The fetchers copying the logs of partitions this broker follows.
    pub(crate) replica_fetchers: ReplicaFetchers,
    /// The epoch of this broker's current registration (0 until registered); its replica
    /// fetches carry it.
    pub(crate) broker_epoch: Arc<AtomicU64>,
    /// Requests, bytes and connections served, for `/metrics`.
    pub(crate) metrics: BrokerMetrics,
    /// Failed SASL logins by address.
    pub(crate) logins: Arc<Logins>,
    /// What each client with a produce quota appended lately.
    pub(crate) produce_quotas: ClientRates,
    /// What each consumer with a fetch quota was sent lately.
    pub(crate) fetch_quotas: ClientRates,
    /// How long the requests of each client with a request quota took lately.
    pub(crate) request_quotas: ClientRates,
    /// The connections each address with a connection quota opened lately.
    pub(crate) connection_rates: ConnectionRates,
    /// The partitions producers flood, sampled every [`HOT_SAMPLE_INTERVAL`].
    hot_partitions: HotPartitions,
    /// Where hot partitions' appends run, started at the first.
    bulk_lane: OnceLock<BulkLane>,
}

impl Broker {
    /// Assembles the broker, opens every partition of the current metadata, and starts
    /// following the controller's committed images (which needs a Tokio runtime).
    pub fn new(
        config: BrokerConfig,
        identity: BrokerIdentity,
        controller: Arc<dyn MetadataControl>,
        partitions: PartitionRegistry,
        shutdown: watch::Receiver<bool>,
    ) -> Arc<Broker> {
        let identity_node_id = identity.node_id;
        let inter_broker = identity.inter_broker.clone();
        let images = controller.images();
        let image = images.borrow().clone();
        partitions.sync(&image);
        let partitions = Arc::new(partitions);
        let coordinator = Arc::new(GroupCoordinator::with_clock(
            config.coordinator,
            Arc::new(PartitionCoordinatorLog::new(
                partitions.clone(),
                OFFSETS_TOPIC,
            )),
            partitions.clock().clone(),
        ));
        let transactions = Arc::new(TransactionCoordinator::with_clock(
            config.transactions,
            Arc::new(PartitionCoordinatorLog::new(
                partitions.clone(),
                TRANSACTION_STATE_TOPIC,
            )),
            partitions.clock().clone(),
        ));
        let share_coordinator = Arc::new(ShareCoordinator::with_clock(
            Arc::new(PartitionCoordinatorLog::new(
                partitions.clone(),
                SHARE_GROUP_STATE_TOPIC,
            )),
            partitions.clock().clone(),
        ));
        let offsets_topic = Arc::new(InternalTopic::new(
            coordinator.topic_runtime(),
            config.offsets_topic,
        ));
        let transaction_topic = Arc::new(InternalTopic::new(
            transactions.topic_runtime(),
            config.transaction_topic,
        ));
        let share_state_topic = Arc::new(InternalTopic::new(
            share_coordinator.topic_runtime(),
            config.share_state_topic,
        ));
        let request_memory = Arc::new(Semaphore::new(
            usize::try_from(config.queued_max_request_bytes)
                .unwrap_or(usize::MAX)
                .min(Semaphore::MAX_PERMITS),
        ));
        let broker_epoch = Arc::new(AtomicU64::new(0));
        let runtime = config.runtime_settings(DynamicConfigs::of(&image, identity_node_id));
        let broker = Arc::new(Broker {
            identity,
            controller,
            applied: watch::Sender::new(image),
            runtime: watch::Sender::new(Arc::new(runtime)),
            partitions,
            coordinator,
            offsets_topic,
            transactions,
            transaction_topic,
            share_coordinator,
            share_state_topic,
            share_links: BrokerLinks::new(REMOTE_SHARE_STATE_TIMEOUT, &inter_broker.security),
            marker_links: BrokerLinks::new(REMOTE_MARKER_TIMEOUT, &inter_broker.security),
            verification_links: BrokerLinks::new(REMOTE_VERIFY_TIMEOUT, &inter_broker.security),
            markers_in_flight: MarkersInFlight::default(),
            producer_ids: Mutex::new(ProducerIdBlock::default()),
            shutdown,
            request_memory,
            compressed_validations: Semaphore::new(COMPRESSED_VALIDATIONS_MAX),
            fetch_sessions: FetchSessions::new(config.fetch_session_cache_slots),
            share_state: ShareState::new(config.share_partitions, config.share_sessions_max),
            replica_fetchers: ReplicaFetchers::new(
                identity_node_id,
                &inter_broker,
                broker_epoch.clone(),
            ),
            broker_epoch,
            metrics: BrokerMetrics::default(),
            logins: Arc::default(),
            produce_quotas: ClientRates::new(QuotaKey::ProducerByteRate),
            fetch_quotas: ClientRates::new(QuotaKey::ConsumerByteRate),
            request_quotas: ClientRates::new(QuotaKey::RequestPercentage),
            connection_rates: ConnectionRates::default(),
            hot_partitions: HotPartitions::default(),
            bulk_lane: OnceLock::new(),
            config,
        });
        tokio::spawn(broker.clone().follow_metadata(images));
        tokio::spawn(broker.clone().sample_hot_partitions());
        broker
    }

    /// This broker's node id.
    pub fn node_id(&self) -> i32 {
        self.identity.node_id
    }

    /// `transaction.max.timeout.ms`: no transaction runs longer, so one open at a partition
    /// whose producer has been idle there longer is hung.
    pub fn transaction_max_timeout_ms(&self) -> i64 {
        i64::from(self.config.transactions.max_timeout_ms)
    }

    /// The partitions hosted here.
    pub fn partitions(&self) -> &PartitionRegistry {
        &self.partitions
    }

    /// The controller, as this broker reaches it.
    pub fn controller(&self) -> &(dyn MetadataControl + 'static) {
        self.controller.as_ref()
    }

    /// The consumer-group coordinator of this broker.
    pub fn coordinator(&self) -> &GroupCoordinator {
        &self.coordinator
    }

    /// The share coordinator of this broker (share-partitions' durable state).
    pub fn share_coordinator(&self) -> &ShareCoordinator {
        &self.share_coordinator
    }

    /// Requests, bytes and connections served here.
    pub fn metrics(&self) -> &BrokerMetrics {
        &self.metrics
    }

    /// The partitions hot at the last sample, hottest first.
    pub fn hot_partitions(&self) -> Vec<HotPartition> {
        self.hot_partitions.list()
    }

    /// The lane hot partitions' appends run in, started at the first call.
    pub(crate) fn bulk_lane(&self) -> &BulkLane {
        self.bulk_lane.get_or_init(|| {
            let lane = BulkLane::start(tokio::runtime::Handle::current());
            tracing::info!(target: "weir::server", threads = lane.threads(), nice = BULK_NICE, "bulk lane started for the appends of hot partitions");
            lane
        })
    }

    /// Samples which partitions are hot every [`HOT_SAMPLE_INTERVAL`] until shutdown.
    async fn sample_hot_partitions(self: Arc<Self>) {
        let mut every = tokio::time::interval(HOT_SAMPLE_INTERVAL);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shutdown = self.shutdown.clone();
        let mut last = std::time::Instant::now();
        loop {
            tokio::select! {
                _ = every.tick() => {
                    let now = std::time::Instant::now();
                    self.partitions.visit(|hosted| {
                        let sampled = hosted.map(|p| Sampled {
                            topic: &p.topic,
                            partition: p.index,
                            load: &p.load,
                            bytes_in: p.counters.bytes_in.load(Ordering::Relaxed),
                        });
                        self.hot_partitions.sample(sampled, now - last);
                    });
                    last = now;
                }
                _ = stopping(&mut shutdown) => return,
            }
        }
    }

    /// True once the broker is registered with the controller (and not yet shut down): what
    /// readiness means.
    pub fn is_registered(&self) -> bool {
        self.broker_epoch.load(Ordering::Acquire) > 0 && !*self.shutdown.borrow()
    }

    /// The latest metadata image applied here.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.applied.borrow().clone()
    }

    /// Whether and how requests are authorized.
    pub fn authorizer(&self) -> Arc<AuthorizerSettings> {
        self.config.authorizer.clone()
    }

    /// What a request from `context` may do, decided from the latest image's ACLs.
    pub fn access(&self, context: &RequestContext) -> Access {
        Access::new(
            &self.config.authorizer,
            || self.image(),
            context.principal.clone(),
            context.peer,
        )
    }

    /// Each metadata image as it is applied here, for tasks that follow dynamic configs.
    pub fn applied_images(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.applied.subscribe()
    }

    /// The broker-wide settings in force, as they change at runtime.
    pub fn runtime_settings(&self) -> watch::Receiver<Arc<RuntimeSettings>> {
        self.runtime.subscribe()
    }

    /// Resolves the broker-wide settings again when `image`, newer than the one applied,
    /// changes a level of the dynamic configs this broker sees (most images change partitions
    /// only).
    fn follow_runtime_settings(&self, image: &MetadataImage) {
        let node_id = self.identity.node_id;
        let applied = self.applied.borrow().clone();
        let unchanged = image.applied_count <= applied.applied_count
            || (image.broker_configs(Some(node_id)) == applied.broker_configs(Some(node_id))
                && image.broker_configs(None) == applied.broker_configs(None));
        if unchanged {
            return;
        }
        let wanted = self.config.runtime_settings(self.dynamic_configs(image));
        self.runtime.send_if_modified(|in_force| {
            let changed = **in_force != wanted;
            if changed {
                *in_force = Arc::new(wanted);
            }
            changed
        });
    }

    /// The dynamic broker configs this broker sees in `image`.
    pub fn dynamic_configs<'a>(&self, image: &'a MetadataImage) -> DynamicConfigs<'a> {
        DynamicConfigs::of(image, self.identity.node_id)
    }

    /// Follows the committed images until shutdown: brings the hosted partitions in line with
    /// each (off the async workers: opening recovers logs), then publishes it as applied.
    async fn follow_metadata(self: Arc<Self>, mut images: watch::Receiver<Arc<MetadataImage>>) {
        let mut shutdown = self.shutdown.clone();
        loop {
            tokio::select! {
                changed = images.changed() => {
                    if changed.is_err() {
                        return; // the controller is gone
                    }
                }
                _ = stopping(&mut shutdown) => return,
            }
            let image = images.borrow_and_update().clone();
            let broker = self.clone();
            let _ = tokio::task::spawn_blocking(move || broker.apply_image(image)).await;
            // The coordinators follow their internal topics' leadership (created elsewhere,
            // or moved by a failover), so each key is served where its partition is led.
            self.follow_internal_topics().await;
        }
    }

    /// Brings partitions and the coordinator in line with `image`, then publishes it.
    fn apply_image(&self, image: Arc<MetadataImage>) {
        self.partitions.sync(&image);
        self.follow_leaders(&image);
        self.offsets_topic.forget_if_deleted(&image);
        self.transaction_topic.forget_if_deleted(&image);
        self.share_state_topic.forget_if_deleted(&image);
        self.follow_runtime_settings(&image);
        self.applied.send_if_modified(|applied| {
            let newer = image.applied_count > applied.applied_count;
            if newer {
                *applied = image;
            }
            newer
        });
    }

    /// Waits for the controller's answer to a change, then until the change is applied here,
    /// so that the request asking for it is answered in a state that shows it. A refusal is
    /// answered once the image it was decided against is applied here (a topic that "already
    /// exists" can then be described). A metadata log that failed beyond repair stops the
    /// process.
    pub async fn change_metadata<T>(&self, pending: Pending<T>) -> Result<T, ControllerError> {
        let outcome = match pending.await {
            Err(ControllerError::Fatal(error)) => {
                storage_failure(std::path::Path::new("metadata"), &error.to_string())
            }
            outcome => outcome,
        };
        let target = match &outcome {
            Ok(committed) => committed.applied_count,
            Err(_) => self.controller.images().borrow().applied_count,
        };
        let applied = self.applied_up_to(target).await;
        match outcome {
            Ok(committed) if applied => Ok(committed.value),
            Ok(_) => Err(ControllerError::NotAppliedInTime(METADATA_APPLY_WAIT_MS)),
            Err(refused) => Err(refused),
        }
    }

    /// Waits (at most [`METADATA_APPLY_WAIT_MS`]) until the image applied here holds the first
    /// `applied_count` commands; false if it does not by then.
    async fn applied_up_to(&self, applied_count: u64) -> bool {
        let mut applied = self.applied.subscribe();
        let wait = Duration::from_millis(METADATA_APPLY_WAIT_MS);
        let reached = tokio::time::timeout(wait, async {
            applied
                .wait_for(|image| image.applied_count >= applied_count)
                .await
                .is_ok()
        });
        reached.await.unwrap_or(false)
    }

    /// Registers this broker with the controller under its node id, with the address clients
    /// are told: done at every start before serving, so the cluster lists it and places
    /// replicas on it, and each start has a new broker epoch. When the metadata log cannot be
    /// written (a full disk), an earlier registration with the same address stands, so a
    /// broker short of space still starts and serves reads.
    pub(crate) async fn register(&self) -> Result<BrokerRegistration, ControllerError> {
        let node_id = self.identity.node_id;
        let listeners = self.identity.listeners.clone();
        let registration = self.controller.ask(RegisterBroker {
            node_id,
            listeners: listeners.clone(),
            rack: self.config.broker_rack.clone(),
        });
        match self.change_metadata(registration).await {
            Ok(registered) => {
                self.broker_epoch.store(registered.epoch, Ordering::Release);
                tracing::info!(target: "weir::broker", node_id, broker_epoch = registered.epoch, "registered with the controller");
                Ok(registered)
            }
            Err(ControllerError::Storage(error)) => {
                let earlier = self.image().broker(node_id).cloned();
                match earlier.filter(|b| b.listeners == listeners) {
                    Some(earlier) => {
                        self.broker_epoch.store(earlier.epoch, Ordering::Release);
                        tracing::warn!(target: "weir::broker", node_id, %error, broker_epoch = earlier.epoch, "could not register again; the earlier registration stands");
                        Ok(earlier)
                    }
                    None => Err(ControllerError::Storage(error)),
                }
            }
            Err(refused) => Err(refused),
        }
    }

    /// Hands out a producer id never used before, reserving a new block when needed.
    pub async fn next_producer_id(self: &Arc<Self>) -> Result<i64, ControllerError> {
        {
            let mut block = self.producer_ids.lock().unwrap_or_else(|e| e.into_inner());
            if block.next < block.end {
                block.next += 1;
                return Ok(block.next - 1);
            }
        }
        let (first, count) = self
            .change_metadata(self.controller.ask(AllocateProducerIds))
            .await?;
        let mut block = self.producer_ids.lock().unwrap_or_else(|e| e.into_inner());
        *block = ProducerIdBlock {
            next: first + 1,
            end: first + count,
        };
        Ok(first)
    }

    /// The coordinators' background work: loads the existing internal topics' partitions led
    /// here, then until shutdown expires group sessions and completes rebalances, aborts
    /// transactions past their timeouts, and writes the markers of prepared transactions.
    pub async fn run_coordinators(self: Arc<Self>) {
        self.follow_internal_topics().await;
        let (mut groups_stop, mut transactions_stop) =
            (self.shutdown.clone(), self.shutdown.clone());
        tokio::join!(
            self.coordinator
                .clone()
                .run_timers(async move { stopping(&mut groups_stop).await }),
            self.transactions
                .run_timers(async move { stopping(&mut transactions_stop).await }),
            self.clone().sweep_prepared_transactions(),
        );
    }

    /// Background upkeep: retention and segment age every `log.retention.check.interval.ms`,
    /// recovery checkpoints every `log.flush.offset.checkpoint.interval.ms`, and another try
    /// at opening partitions that could not open for lack of space. Ends at shutdown.
    pub async fn run_log_maintenance(self: Arc<Self>) {
        let mut retention = tokio::time::interval(Duration::from_millis(
            self.config.retention_check_interval_ms,
        ));
        let mut checkpoint =
            tokio::time::interval(Duration::from_millis(self.config.checkpoint_interval_ms));
        let mut reopen = tokio::time::interval(Duration::from_millis(PENDING_OPEN_RETRY_MS));
        retention.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        reopen.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        checkpoint.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shutdown = self.shutdown.clone();
        loop {
            tokio::select! {
                _ = retention.tick() => {
                    let broker = self.clone();
                    let expiration_ms = broker.runtime.borrow().producer_id_expiration_ms;
                    let _ = tokio::task::spawn_blocking(move || broker.partitions.run_retention(expiration_ms)).await;
                }
                _ = reopen.tick() => {
                    let broker = self.clone();
                    let _ = tokio::task::spawn_blocking(move || broker.partitions.retry_pending()).await;
                }
                _ = checkpoint.tick() => {
                    let broker = self.clone();
                    let _ = tokio::task::spawn_blocking(move || broker.partitions.checkpoint()).await;
                }
                _ = stopping(&mut shutdown) => return,
            }
        }
    }
}
