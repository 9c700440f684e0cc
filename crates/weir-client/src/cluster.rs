//! What the client knows of the cluster: brokers, topic metadata, and one connection per broker.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::Mutex;
use uuid::Uuid;

use crate::connection::Connection;
use crate::error::{ClientError, Result};
use crate::security::Security;

/// Settings shared by producer, consumer and admin.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `host:port` addresses to bootstrap from.
    pub bootstrap: Vec<String>,
    /// Sent as the request header's client id.
    pub client_id: String,
    /// Deadline of each request (and of each connection attempt).
    pub request_timeout: Duration,
    /// TLS and the login of every connection, as the listener asks.
    pub security: Security,
}

impl ClientConfig {
    /// A config for `bootstrap`, a comma-separated list of `host:port`.
    pub fn new(bootstrap: &str) -> ClientConfig {
        ClientConfig {
            bootstrap: bootstrap
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            client_id: "weir-client".into(),
            request_timeout: Duration::from_secs(30),
            security: Security::default(),
        }
    }
}

/// One partition's placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Partition index.
    pub partition: i32,
    /// Leader broker id, -1 when none.
    pub leader: i32,
    /// The leader's epoch.
    pub leader_epoch: i32,
    /// Replica broker ids.
    pub replicas: Vec<i32>,
    /// In-sync replica broker ids.
    pub isr: Vec<i32>,
    /// Kafka error code for this partition (0 when healthy).
    pub error_code: i16,
}

/// One topic's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    /// Topic name.
    pub name: String,
    /// Topic id.
    pub topic_id: Uuid,
    /// Partitions, by index.
    pub partitions: Vec<PartitionInfo>,
}

/// A broker as the cluster advertises it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    /// Node id.
    pub node_id: i32,
    /// `host:port` to connect to.
    pub address: String,
}

#[derive(Default)]
struct State {
    brokers: HashMap<i32, BrokerInfo>,
    topics: HashMap<String, TopicInfo>,
    controller: i32,
    cluster_id: Option<String>,
    connections: HashMap<String, Arc<Connection>>,
}

/// The client's view of the cluster, shared by everything built from one config.
pub struct Cluster {
    config: ClientConfig,
    state: Mutex<State>,
}

impl Cluster {
    /// A cluster view; nothing is contacted until the first call.
    pub fn new(config: ClientConfig) -> Arc<Cluster> {
        Arc::new(Cluster {
            config,
            state: Mutex::new(State::default()),
        })
    }

    /// The config this cluster view was made with.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// A connection to `address`, reusing a live one.
    pub async fn connection_to(&self, address: &str) -> Result<Arc<Connection>> {
        {
            let state = self.state.lock().await;
            if let Some(connection) = state.connections.get(address).filter(|c| !c.is_closed()) {
                return Ok(connection.clone());
            }
        }
        let connection = self
            .config
            .security
            .connect(address, &self.config.client_id, self.config.request_timeout)
            .await?;
        self.state
            .lock()
            .await
            .connections
            .insert(address.to_string(), connection.clone());
        Ok(connection)
    }

    /// A connection to broker `node_id` (metadata must have been loaded).
    pub async fn broker(&self, node_id: i32) -> Result<Arc<Connection>> {
        let address = {
            let state = self.state.lock().await;
            state.brokers.get(&node_id).map(|b| b.address.clone())
        };
        match address {
            Some(address) => self.connection_to(&address).await,
            None => Err(ClientError::Unreachable(format!(
                "broker {node_id} (not in metadata)"
            ))),
        }
    }

    /// A connection to any reachable broker: known ones first, then the bootstrap list.
    pub async fn any_broker(&self) -> Result<Arc<Connection>> {
        let mut candidates: Vec<String> = {
            let state = self.state.lock().await;
            state.brokers.values().map(|b| b.address.clone()).collect()
        };
        candidates.extend(self.config.bootstrap.iter().cloned());
        let mut last_error = None;
        for address in candidates {
            match self.connection_to(&address).await {
                Ok(connection) => return Ok(connection),
                Err(error) => last_error = Some(error),
            }
        }
        Err(match last_error {
            Some(ClientError::Timeout(_)) | Some(ClientError::Connection { .. }) | None => {
                ClientError::Unreachable(self.config.bootstrap.join(","))
            }
            Some(other) => other,
        })
    }

    /// A connection to the controller, for admin requests.
    pub async fn controller(&self) -> Result<Arc<Connection>> {
        let controller = self.state.lock().await.controller;
        if controller >= 0 {
            if let Ok(connection) = self.broker(controller).await {
                return Ok(connection);
            }
        }
        self.any_broker().await
    }

    /// Fetches metadata for `topics` (every topic when `None`), updating the cache.
    pub async fn refresh(
        &self,
        topics: Option<&[String]>,
        allow_auto_create: bool,
    ) -> Result<MetadataResponse> {
        let connection = self.any_broker().await?;
        let mut request = MetadataRequest::default();
        request.allow_auto_topic_creation = allow_auto_create;
        request.topics = topics.map(|names| {
            names
                .iter()
                .map(|n| {
                    let mut t = MetadataRequestTopic::default();
                    t.name = Some(TopicName(StrBytes::from_string(n.clone())));
                    t
                })
                .collect()
        });
        let response: MetadataResponse = connection.call(ApiKey::Metadata, 12, &request).await?;
        let mut state = self.state.lock().await;
        state.brokers = response
            .brokers
            .iter()
            .map(|b| {
                (
                    b.node_id.0,
                    BrokerInfo {
                        node_id: b.node_id.0,
                        address: format!("{}:{}", b.host.as_str(), b.port),
                    },
                )
            })
            .collect();
        state.controller = response.controller_id.0;
        state.cluster_id = response.cluster_id.as_ref().map(|c| c.as_str().to_string());
        for topic in &response.topics {
            let Some(name) = topic.name.as_ref().map(|n| n.0.as_str().to_string()) else {
                continue;
            };
            if topic.error_code != 0 {
                state.topics.remove(&name);
                continue;
            }
            let mut partitions: Vec<PartitionInfo> = topic
                .partitions
                .iter()
                .map(|p| PartitionInfo {
                    partition: p.partition_index,
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                    isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                    error_code: p.error_code,
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            state.topics.insert(
                name.clone(),
                TopicInfo {
                    name,
                    topic_id: topic.topic_id,
                    partitions,
                },
            );
        }
        Ok(response)
    }

    /// Cached metadata for `topic`, fetched when missing. `auto_create` asks the broker to create
    /// it if it is allowed to.
    pub async fn topic(&self, topic: &str, auto_create: bool) -> Result<TopicInfo> {
        if let Some(info) = self.state.lock().await.topics.get(topic).cloned() {
            return Ok(info);
        }
        let response = self
            .refresh(Some(&[topic.to_string()]), auto_create)
            .await?;
        if let Some(t) = response
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        {
            if t.error_code == 3 {
                return Err(ClientError::UnknownTopic(topic.to_string()));
            }
            if let Some(error) = ClientError::from_code(t.error_code, None) {
                return Err(error);
            }
        }
        self.state
            .lock()
            .await
            .topics
            .get(topic)
            .cloned()
            .ok_or_else(|| ClientError::UnknownTopic(topic.to_string()))
    }

    /// Forgets cached metadata for `topic`, so the next use fetches it again.
    pub async fn invalidate(&self, topic: &str) {
        self.state.lock().await.topics.remove(topic);
    }

    /// Known brokers and the controller id, from the last refresh.
    pub async fn brokers(&self) -> (Vec<BrokerInfo>, i32, Option<String>) {
        let state = self.state.lock().await;
        let mut brokers: Vec<BrokerInfo> = state.brokers.values().cloned().collect();
        brokers.sort_by_key(|b| b.node_id);
        (brokers, state.controller, state.cluster_id.clone())
    }
}
