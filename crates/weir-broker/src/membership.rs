//! The broker as a member of the cluster: it heartbeats to the active controller to keep its
//! lease, follows its leaders' logs, asks the controller to change the ISR of partitions it
//! leads, and moves its leaderships away before it stops.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_metadata::requests::{ControlledShutdown, Heartbeat};
use weir_metadata::{
    AlterPartition, BrokerRegistration, ControllerError, MetadataImage, NO_LEADER,
};

use crate::broker::Broker;
use crate::partition::Partition;
use crate::replication::{refusal_is_final, IsrRequest};
use crate::shutdown::stopping;

/// Longest wait at start for the controller to unfence this broker.
const UNFENCE_WAIT_MS: u64 = 15_000;
/// Longest wait at shutdown for the controller to move leaderships away.
const CONTROLLED_SHUTDOWN_WAIT_MS: u64 = 5_000;
/// Pause between heartbeats while waiting to be unfenced.
const UNFENCE_RETRY_MS: u64 = 100;

impl Broker {
    /// How long a request to the controller that keeps this broker live (a heartbeat, an ISR
    /// change) may go unanswered before it is given up and sent again: one stuck on a
    /// controller cut off from the others (and replaced by an election) must not hold the next
    /// one back past the broker's lease.
    fn controller_request_deadline(&self) -> Duration {
        let interval = Duration::from_millis(self.config.broker_heartbeat_interval_ms);
        Duration::from_millis(self.config.broker_session_timeout_ms / 3).max(interval)
    }

    /// This broker's current registration epoch.
    fn broker_epoch(&self) -> u64 {
        self.broker_epoch.load(Ordering::Acquire)
    }

    /// One heartbeat; a stale registration (the controller lost it or this broker was
    /// registered again) registers anew. Answered with whether this broker is fenced.
    async fn heartbeat(&self) -> Result<bool, ControllerError> {
        let node_id = self.identity.node_id;
        let heartbeat = Heartbeat {
            node_id,
            broker_epoch: self.broker_epoch(),
        };
        match self.controller.ask(heartbeat).await {
            Ok(committed) => Ok(committed.value),
            Err(ControllerError::StaleBrokerEpoch(why)) => {
                tracing::warn!(target: "weir::broker", node_id, why, "registration no longer current; registering again");
                self.register().await?;
                Ok(true)
            }
            Err(error) => Err(error),
        }
    }

    /// Joins the cluster at start, before serving: registers with the controller (a new
    /// broker epoch), heartbeats until the controller has unfenced this broker and the image
    /// applied here shows it (at most [`UNFENCE_WAIT_MS`]), so it serves as a leader from the
    /// start, then keeps heartbeating every `broker.heartbeat.interval.ms` until shutdown.
    pub async fn join_cluster(self: &Arc<Self>) -> Result<BrokerRegistration, ControllerError> {
        let registered = self.register().await?;
        let node_id = self.identity.node_id;
        let until = tokio::time::Instant::now() + Duration::from_millis(UNFENCE_WAIT_MS);
        loop {
            let unfenced = self.heartbeat().await.is_ok_and(|fenced| !fenced);
            let shown = self.image().broker(node_id).is_some_and(|b| !b.fenced);
            if unfenced && shown {
                break;
            }
            if tokio::time::Instant::now() >= until {
                tracing::warn!(target: "weir::broker", node_id, "not unfenced by the controller yet; serving and heartbeating on");
                break;
            }
            tokio::time::sleep(Duration::from_millis(UNFENCE_RETRY_MS)).await;
        }
        let broker = self.clone();
        tokio::spawn(async move {
            let mut shutdown = broker.shutdown.clone();
            let interval = Duration::from_millis(broker.config.broker_heartbeat_interval_ms);
            let deadline = broker.controller_request_deadline();
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopping(&mut shutdown) => return,
                }
                match tokio::time::timeout(deadline, broker.heartbeat()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => {
                        tracing::warn!(target: "weir::broker", node_id, %error, "heartbeat to the controller failed")
                    }
                    Err(_) => {
                        tracing::warn!(target: "weir::broker", node_id, deadline_ms = deadline.as_millis() as u64, "heartbeat not answered in time; sending the next")
                    }
                }
            }
        });
        Ok(registered)
    }

    /// Asks the controller to move this broker's leaderships to in-sync replicas and take it
    /// out of every ISR, then waits (at most [`CONTROLLED_SHUTDOWN_WAIT_MS`]) until the image
    /// here shows it, so clients move to the new leaders before this broker stops.
    pub async fn controlled_shutdown(&self) {
        let node_id = self.identity.node_id;
        let wait = Duration::from_millis(CONTROLLED_SHUTDOWN_WAIT_MS);
        let asked = self.controller.ask(ControlledShutdown {
            node_id,
            broker_epoch: self.broker_epoch(),
        });
        match tokio::time::timeout(wait, self.change_metadata(asked)).await {
            Ok(Ok(())) => {
                tracing::info!(target: "weir::broker", node_id, "leaderships moved away for shutdown")
            }
            Ok(Err(error)) => {
                tracing::warn!(target: "weir::broker", node_id, %error, "controlled shutdown refused; stopping anyway")
            }
            Err(_) => {
                tracing::warn!(target: "weir::broker", node_id, "controlled shutdown not answered in time; stopping anyway")
            }
        }
        self.replica_fetchers.stop();
    }

    /// Fetches, from its leader, every partition this broker follows in `image`.
    pub(crate) fn follow_leaders(&self, image: &MetadataImage) {
        let node_id = self.identity.node_id;
        let mut followed: HashMap<i32, Vec<Arc<Partition>>> = HashMap::new();
        for topic in image.topics() {
            for (index, state) in (0i32..).zip(&topic.partitions) {
                if state.leader == node_id || state.leader == NO_LEADER {
                    continue;
                }
                if let Some(partition) = self.partitions.get(&topic.name, index) {
                    followed.entry(state.leader).or_default().push(partition);
                }
            }
        }
        self.replica_fetchers
            .update(followed, &self.applied_images(), &self.shutdown);
    }

    /// Sends an ISR change the leader of `partition` decided to the controller. A refusal that
    /// certainly changed nothing lets the partition ask again later; an answer that leaves the
    /// outcome open (no reply in time, the controller unreachable or replaced) has the same
    /// request sent again until an answer or a new image settles it, as Kafka's leaders do.
    pub(crate) fn ask_isr_change(self: &Arc<Self>, partition: Arc<Partition>, request: IsrRequest) {
        let broker = self.clone();
        tokio::spawn(async move {
            let change = AlterPartition {
                topic_id: partition.topic_id,
                partition: partition.index,
                leader: broker.identity.node_id,
                broker_epoch: broker.broker_epoch(),
                leader_epoch: request.leader_epoch,
                partition_epoch: request.partition_epoch,
                isr: request.isr.clone(),
            };
            tracing::info!(target: "weir::replication", topic = %partition.topic, partition = partition.index, isr = ?request.isr, "asking the controller to change the ISR");
            let deadline = broker.controller_request_deadline();
            let retry = Duration::from_millis(broker.config.broker_heartbeat_interval_ms);
            let shutdown = broker.shutdown.clone();
            let mut attempt = 0u32;
            while !*shutdown.borrow() && partition.isr_request_pending(&request) {
                attempt += 1;
                let asked = broker.controller.ask(change.clone());
                match tokio::time::timeout(deadline, broker.change_metadata(asked)).await {
                    Ok(Ok(_)) => return,
                    Ok(Err(error)) if refusal_is_final(&error) => {
                        tracing::info!(target: "weir::replication", topic = %partition.topic, partition = partition.index, %error, "ISR change refused");
                        partition.isr_request_settled(&request);
                        return;
                    }
                    Ok(Err(error @ ControllerError::InvalidUpdateVersion(_))) => {
                        // The partition moved on; the image that shows it settles the request.
                        tracing::info!(target: "weir::replication", topic = %partition.topic, partition = partition.index, %error, "ISR change overtaken");
                        return;
                    }
                    // The first failure is worth a line; the retries that follow are not.
                    Ok(Err(error)) if attempt == 1 => {
                        tracing::warn!(target: "weir::replication", topic = %partition.topic, partition = partition.index, %error, "ISR change not answered; asking again until it is");
                    }
                    Err(_) if attempt == 1 => {
                        tracing::warn!(target: "weir::replication", topic = %partition.topic, partition = partition.index, deadline_ms = deadline.as_millis() as u64, "ISR change not answered in time; asking again until it is");
                    }
                    _ => {}
                }
                tokio::time::sleep(retry).await;
            }
        });
    }

    /// Takes followers that fell behind for `replica.lag.time.max.ms` out of the ISR of every
    /// partition led here, checking at a quarter of that interval, until shutdown.
    pub async fn run_isr_checks(self: Arc<Self>) {
        let lag_max = Duration::from_millis(self.config.replica_lag_time_max_ms);
        let mut tick = tokio::time::interval((lag_max / 4).max(Duration::from_millis(50)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shutdown = self.shutdown.clone();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stopping(&mut shutdown) => return,
            }
            for partition in self.partitions.all() {
                if !partition.is_leader() {
                    continue;
                }
                if let Some(request) = partition.lagging_followers(lag_max, Instant::now()) {
                    self.ask_isr_change(partition, request);
                }
            }
        }
    }
}
