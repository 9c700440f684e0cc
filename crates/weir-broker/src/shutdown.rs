//! The broker's shutdown signal, as its tasks wait for it.

use tokio::sync::watch;

/// Resolves once shutdown has been signalled on `shutdown`.
pub async fn stopping(shutdown: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped here, so callers' futures stay `Send`.
    let _ = shutdown.wait_for(|stop| *stop).await;
}
