//! What a request handler knows of the connection a request came on.

use std::net::IpAddr;
use std::sync::Arc;

use weir_metadata::authorizer::ANONYMOUS;

use crate::quotas::Mute;

/// What a request handler knows of the connection a request came on.
#[derive(Debug, Clone)]
pub struct RequestContext {
    /// The client's address.
    pub peer: IpAddr,
    /// The name of the listener the connection came in on.
    pub listener: Arc<str>,
    /// Who the client is, `User:name` (`User:ANONYMOUS` until it authenticates).
    pub principal: Arc<str>,
    /// Until when the connection is not read, after a response that throttled its client.
    pub mute: Arc<Mute>,
}

impl RequestContext {
    /// A connection from `peer` on `listener`, not authenticated.
    pub fn anonymous(peer: IpAddr, listener: Arc<str>) -> RequestContext {
        RequestContext {
            peer,
            listener,
            principal: Arc::from(ANONYMOUS),
            mute: Arc::default(),
        }
    }
}
