//! What a request handler knows of the connection a request came on.

use std::net::IpAddr;
use std::sync::Arc;

/// What a request handler knows of the connection a request came on.
#[derive(Debug, Clone)]
pub struct RequestContext {
    /// The client's address.
    pub peer: IpAddr,
    /// The name of the listener the connection came in on.
    pub listener: Arc<str>,
}
