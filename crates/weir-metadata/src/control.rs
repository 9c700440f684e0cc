//! How the broker reaches the controller: it asks for a change and is answered once the change
//! is committed, and it follows the committed images in order. The controller in the same
//! process implements this today; a Raft quorum will implement it without the broker changing.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::watch;

use crate::requests::{ControlCall, ControlRequest, EncodedAnswer};
use crate::{ControllerError, MetadataImage};

/// A change the controller accepted: its outcome, and where it is in the metadata log.
#[derive(Debug, Clone)]
pub struct Committed<T> {
    /// What the change produced (the new topic, a block of producer ids, …).
    pub value: T,
    /// The `applied_count` of the first committed image that holds the change (for a
    /// validate-only request, of the image it was checked against).
    pub applied_count: u64,
}

/// The controller's answer to a change request, once it has decided.
pub type Pending<T> = Pin<Box<dyn Future<Output = Result<Committed<T>, ControllerError>> + Send>>;

/// What the broker asks of the controller: metadata changes, each answered once it is
/// committed (or refused, changing nothing), and the stream of committed images.
pub trait MetadataControl: Send + Sync {
    /// Decides `request`, here or at the active controller; answered once it is committed
    /// with what it produced. Callers use [`ask`](#method.ask), which types the answer.
    fn decide(&self, request: ControlRequest) -> Pending<EncodedAnswer>;

    /// The committed images, newest first available: a receiver sees each change at least as
    /// its latest image (intermediate images may be skipped).
    fn images(&self) -> watch::Receiver<Arc<MetadataImage>>;
}

impl dyn MetadataControl {
    /// Asks the controller for `call`; answered once the change is committed with what it
    /// produced, as the request's own answer type.
    pub fn ask<C: ControlCall>(&self, call: C) -> Pending<C::Answer> {
        let pending = self.decide(call.into());
        Box::pin(async move {
            let Committed {
                value,
                applied_count,
            } = pending.await?;
            Ok(Committed {
                value: value.decode::<C::Answer>()?,
                applied_count,
            })
        })
    }
}
