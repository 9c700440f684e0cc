//! Connections from this broker to the others' client listeners, for the requests brokers
//! send one another as clients (WriteTxnMarkers, AddPartitionsToTxn verification, the
//! share-group state APIs): one per address, shared by pipelined requests, made on first use
//! and again once closed, secured as the inter-broker listener asks.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use weir_client::{ClientError, Connection, Security};

/// How long a verification that a transaction holds a partition may take at another broker.
pub(crate) const REMOTE_VERIFY_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a share-state request may take at another broker (a share coordinator).
pub(crate) const REMOTE_SHARE_STATE_TIMEOUT: Duration = Duration::from_secs(15);

/// A pool of links to the other brokers, as many as brokers, with one request timeout.
pub(crate) struct BrokerLinks {
    /// How long a request on these links may take, its wait at the other broker included.
    timeout: Duration,
    /// TLS and the login of each link.
    security: Security,
    links: std::sync::Mutex<HashMap<String, Arc<Connection>>>,
}

impl BrokerLinks {
    /// A pool whose requests each take at most `timeout`, its links secured by `security`.
    pub(crate) fn new(timeout: Duration, security: &Security) -> BrokerLinks {
        BrokerLinks {
            timeout,
            security: security.clone(),
            links: std::sync::Mutex::default(),
        }
    }

    /// The open connection to `address`, made now if there is none.
    pub(crate) async fn to(
        &self,
        address: &str,
        client_id: &str,
    ) -> Result<Arc<Connection>, ClientError> {
        let open = self
            .lock()
            .get(address)
            .filter(|link| !link.is_closed())
            .cloned();
        if let Some(link) = open {
            return Ok(link);
        }
        let link = self
            .security
            .connect(address, client_id, self.timeout)
            .await?;
        let mut links = self.lock();
        links.retain(|_, link| !link.is_closed());
        links.insert(address.to_string(), link.clone());
        Ok(link)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Connection>>> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }
}
