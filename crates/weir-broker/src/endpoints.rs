//! Where clients reach the brokers: the listener they connect to and each live broker's
//! advertised endpoint, as Metadata, DescribeCluster, FindCoordinator and the replica fetchers
//! read them from the metadata image.

use weir_metadata::{BrokerListener, BrokerRegistration, MetadataImage};

/// Name of the listener clients connect to, as registered with the controller.
pub const CLIENT_LISTENER: &str = "PLAINTEXT";

/// The listener of `broker` that clients connect to.
fn client_listener(broker: &BrokerRegistration) -> Option<&BrokerListener> {
    broker.listeners.iter().find(|l| l.name == CLIENT_LISTENER)
}

/// Where clients reach one broker: what Metadata, DescribeCluster and FindCoordinator name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientEndpoint {
    /// The broker id.
    pub node_id: i32,
    /// Advertised host.
    pub host: String,
    /// Advertised port.
    pub port: u16,
    /// The broker's rack, if it gave one.
    pub rack: Option<String>,
}

impl ClientEndpoint {
    /// The client endpoint of a registered broker; `None` without a client listener.
    pub fn of(broker: &BrokerRegistration) -> Option<ClientEndpoint> {
        let listener = client_listener(broker)?;
        Some(ClientEndpoint {
            node_id: broker.node_id,
            host: listener.host.clone(),
            port: listener.port,
            rack: broker.rack.clone(),
        })
    }
}

/// The client endpoints of every live (registered, unfenced) broker in `image`, by broker id,
/// as `answering` (this broker) tells clients: a fenced broker leads nothing, so clients are
/// not told of it, as in Kafka; the broker answering is listed whatever its state (it is
/// evidently up, and clients must never get an empty list, as while it shuts down).
pub fn client_endpoints(
    image: &MetadataImage,
    answering: i32,
) -> impl Iterator<Item = ClientEndpoint> + '_ {
    image
        .brokers()
        .filter(move |b| !b.fenced || b.node_id == answering)
        .filter_map(ClientEndpoint::of)
}
