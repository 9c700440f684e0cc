//! A connection's socket whose writes fail once its peer has taken nothing for a while: a
//! client that sends requests and never reads the answers would otherwise hold its
//! connection, and the responses waiting on it, for ever.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

/// How long a write may wait for the peer to read before the connection is dropped.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A TCP stream whose writes give up after [`WRITE_STALL_TIMEOUT`] without progress.
pub struct StallGuard {
    stream: TcpStream,
    /// Running while a write waits for room in the socket.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl StallGuard {
    /// Wraps an accepted connection.
    pub fn new(stream: TcpStream) -> StallGuard {
        StallGuard {
            stream,
            stalled: None,
        }
    }

    /// What a write that made no progress answers: wait, or fail once stalled too long.
    fn waited<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(WRITE_STALL_TIMEOUT)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the client read nothing for {} s",
                    WRITE_STALL_TIMEOUT.as_secs()
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Passes a write's outcome on, keeping the stall clock for writes that wait.
    fn guard<T>(
        &mut self,
        cx: &mut Context<'_>,
        outcome: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match outcome {
            Poll::Pending => self.waited(cx),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl AsyncRead for StallGuard {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for StallGuard {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let outcome = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.guard(cx, outcome)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let outcome = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.guard(cx, outcome)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let outcome = Pin::new(&mut self.stream).poll_flush(cx);
        self.guard(cx, outcome)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
