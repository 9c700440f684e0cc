//! Where clients reach the brokers: each live broker's advertised endpoint on a listener, as
//! Metadata, DescribeCluster and FindCoordinator name them to a client (on the listener its
//! request came in on, as Kafka answers) and the replica fetchers and inter-broker links read
//! them (on the inter-broker listener) from the metadata image.

use weir_metadata::{BrokerRegistration, MetadataImage};

/// Where a client reaches one broker: what Metadata, DescribeCluster and FindCoordinator name.
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
    /// The endpoint of a registered broker on listener `listener`; `None` when it has no
    /// listener of that name.
    pub fn on(broker: &BrokerRegistration, listener: &str) -> Option<ClientEndpoint> {
        let listener = broker.listeners.iter().find(|l| l.name == listener)?;
        Some(ClientEndpoint {
            node_id: broker.node_id,
            host: listener.host.clone(),
            port: listener.port,
            rack: broker.rack.clone(),
        })
    }
}

/// The endpoints on `listener` of every live (registered, unfenced) broker in `image`, by
/// broker id, as `answering` (this broker) tells clients: a fenced broker leads nothing, so
/// clients are not told of it, as in Kafka; the broker answering is listed whatever its state
/// (it is evidently up, and clients must never get an empty list, as while it shuts down). A
/// broker without that listener is left out, as Kafka leaves it out.
pub fn client_endpoints<'a>(
    image: &'a MetadataImage,
    answering: i32,
    listener: &'a str,
) -> impl Iterator<Item = ClientEndpoint> + 'a {
    image
        .brokers()
        .filter(move |b| !b.fenced || b.node_id == answering)
        .filter_map(move |b| ClientEndpoint::on(b, listener))
}
