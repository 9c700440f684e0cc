//! The broker's shared state: what every request handler reads.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Semaphore};
use weir_controller::{Controller, ControllerError, MetadataImage};
use weir_coordinator::{GroupCoordinator, OFFSETS_TOPIC};

use crate::config::BrokerConfig;
use crate::fetch_session::FetchSessions;
use crate::offsets_topic::PartitionOffsetsLog;
use crate::partition::storage_failure;
use crate::registry::PartitionRegistry;

/// Compressed batches validated at once, broker-wide. Decompressing is CPU work and its
/// buffers (a zstd window, a raw snappy block) are the only sizeable memory validation takes,
/// so more at once than cores would only queue on the CPU while holding memory.
const COMPRESSED_VALIDATIONS_MAX: usize = 2;
/// How often partitions that could not open (no space, no file descriptors) are tried again.
const PENDING_OPEN_RETRY_MS: u64 = 5_000;

/// Resolves once shutdown has been signalled on `shutdown`.
pub async fn stopping(shutdown: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped here, so callers' futures stay `Send`.
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// Identity of this broker as clients see it.
#[derive(Debug, Clone)]
pub struct BrokerIdentity {
    /// `node.id`.
    pub node_id: i32,
    /// The cluster id written at first start.
    pub cluster_id: String,
    /// Host clients are told to connect to.
    pub advertised_host: String,
    /// Port clients are told to connect to.
    pub advertised_port: u16,
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
    pub config: BrokerConfig,
    /// Who this broker is.
    pub identity: BrokerIdentity,
    /// The metadata controller (local on a single node).
    pub controller: Arc<Controller>,
    /// Hosted partitions.
    pub partitions: Arc<PartitionRegistry>,
    /// The consumer-group coordinator, keeping its state in `__consumer_offsets`.
    pub coordinator: Arc<GroupCoordinator>,
    /// Held while `__consumer_offsets` is created and loaded.
    pub(crate) offsets_topic_creation: tokio::sync::Mutex<()>,
    producer_ids: Mutex<ProducerIdBlock>,
    /// Becomes true when the server is shutting down; long polls answer at once.
    pub shutdown: watch::Receiver<bool>,
    /// `queued.max.request.bytes`: permits for request bytes held in memory, broker-wide.
    pub request_memory: Arc<Semaphore>,
    /// Permits to decompress and validate a compressed batch (see
    /// [`COMPRESSED_VALIDATIONS_MAX`]).
    pub compressed_validations: Semaphore,
    /// Incremental fetch sessions (KIP-227).
    pub fetch_sessions: FetchSessions,
}

impl Broker {
    /// Assembles the broker and opens every partition in the current metadata.
    pub fn new(
        config: BrokerConfig,
        identity: BrokerIdentity,
        controller: Arc<Controller>,
        partitions: PartitionRegistry,
        shutdown: watch::Receiver<bool>,
    ) -> Broker {
        partitions.sync(&controller.image());
        let partitions = Arc::new(partitions);
        let coordinator = Arc::new(GroupCoordinator::new(
            config.coordinator,
            Arc::new(PartitionOffsetsLog::new(partitions.clone())),
        ));
        let request_memory = Arc::new(Semaphore::new(
            usize::try_from(config.queued_max_request_bytes)
                .unwrap_or(usize::MAX)
                .min(Semaphore::MAX_PERMITS),
        ));
        Broker {
            identity,
            controller,
            partitions,
            coordinator,
            offsets_topic_creation: tokio::sync::Mutex::new(()),
            producer_ids: Mutex::new(ProducerIdBlock::default()),
            shutdown,
            request_memory,
            compressed_validations: Semaphore::new(COMPRESSED_VALIDATIONS_MAX),
            fetch_sessions: FetchSessions::new(config.fetch_session_cache_slots),
            config,
        }
    }

    /// The latest metadata image.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.controller.image()
    }

    /// Runs a controller operation off the async workers (it fsyncs), then brings the hosted
    /// partitions in line with the new image. A metadata log that failed beyond repair stops
    /// the process.
    pub async fn change_metadata<T, F>(self: &Arc<Self>, change: F) -> Result<T, ControllerError>
    where
        T: Send + 'static,
        F: FnOnce(&Controller) -> Result<T, ControllerError> + Send + 'static,
    {
        let broker = self.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let result = change(&broker.controller);
            if let Err(ControllerError::Fatal(error)) = &result {
                storage_failure(std::path::Path::new("metadata"), &error.to_string());
            }
            let image = broker.controller.image();
            broker.partitions.sync(&image);
            if image.topic(OFFSETS_TOPIC).is_none() && broker.coordinator.partitions() > 0 {
                tracing::warn!(target: "weir::groups", "{OFFSETS_TOPIC} was deleted: every group and committed offset is gone; it is created again on the next group request");
                broker.coordinator.reset();
            }
            result
        })
        .await;
        joined.unwrap_or_else(|e| {
            Err(ControllerError::Storage(std::io::Error::other(
                e.to_string(),
            )))
        })
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
        let (first, count) = self.change_metadata(|c| c.allocate_producer_ids()).await?;
        let mut block = self.producer_ids.lock().unwrap_or_else(|e| e.into_inner());
        *block = ProducerIdBlock {
            next: first + 1,
            end: first + count,
        };
        Ok(first)
    }

    /// The group coordinator's background work: loads an existing `__consumer_offsets`, then
    /// expires sessions and completes rebalances until shutdown.
    pub async fn run_group_coordinator(self: Arc<Self>) {
        self.load_offsets_topic().await;
        let mut shutdown = self.shutdown.clone();
        let stop = async move { stopping(&mut shutdown).await };
        self.coordinator.clone().run_timers(stop).await;
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
                    let _ = tokio::task::spawn_blocking(move || broker.partitions.run_retention()).await;
                }
                _ = reopen.tick() => {
                    let broker = self.clone();
                    let _ = tokio::task::spawn_blocking(move || broker.partitions.retry_pending()).await;
                }
                _ = checkpoint.tick() => {
                    let broker = self.clone();
                    let _ = tokio::task::spawn_blocking(move || broker.partitions.checkpoint()).await;
                }
                _ = crate::broker::stopping(&mut shutdown) => return,
            }
        }
    }
}
