//! What a request handler knows of the connection a request came on.

use std::net::IpAddr;
use std::sync::Arc;

use weir_metadata::authorizer::ANONYMOUS;

use crate::quotas::Mute;
use crate::share_state::ConnectionShares;

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
    /// The share sessions whose last request came on this connection (closed with it).
    pub share_sessions: Arc<ConnectionShares>,
}

impl RequestContext {
    /// A connection from `peer` on `listener`, not authenticated.
    pub fn anonymous(peer: IpAddr, listener: Arc<str>) -> RequestContext {
        RequestContext {
            peer,
            listener,
            principal: Arc::from(ANONYMOUS),
            mute: Arc::default(),
            share_sessions: Arc::default(),
        }
    }
}
