//! The controller port's connections, in TLS when the controller listener speaks SSL: both
//! sides then show a certificate the other's truststore vouches for, so a process without one
//! cannot vote, append to the metadata log or forward a change ([`QuorumTls`]).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use weir_tls::{ClientTls, ServerTls};

/// Longest a TLS handshake on the controller port may take, either side.
const HANDSHAKE_MS: u64 = 10_000;

/// TLS on the controller port: the server side (which requires a client certificate) and the
/// client side (which checks the peer's certificate against the address's host and shows this
/// node's).
#[derive(Clone)]
pub struct QuorumTls {
    /// Accepts peers' connections.
    pub server: Arc<ServerTls>,
    /// Connects to peers.
    pub client: Arc<ClientTls>,
}

/// One connection of the controller port, either side.
pub(super) enum QuorumStream {
    Plain(TcpStream),
    Client(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    Server(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl QuorumStream {
    /// The TCP connection underneath.
    pub(super) fn tcp(&self) -> &TcpStream {
        match self {
            QuorumStream::Plain(stream) => stream,
            QuorumStream::Client(stream) => stream.get_ref().0,
            QuorumStream::Server(stream) => stream.get_ref().0,
        }
    }

    /// Whether the peer sent something unasked (or closed) on this idle connection, which is
    /// then unfit to reuse.
    pub(super) fn heard_from_peer(&self) -> bool {
        let mut probe = [0u8; 1];
        !matches!(self.tcp().try_read(&mut probe), Err(error) if error.kind() == io::ErrorKind::WouldBlock)
    }
}

/// Opens connections to peers' controller ports, in TLS when the quorum has it.
#[derive(Clone, Default)]
pub(super) struct Dialer {
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Dialer {
    /// Connects in TLS with `tls` when given.
    pub(super) fn new(tls: Option<&QuorumTls>) -> Dialer {
        Dialer {
            tls: tls.map(|tls| tls.client.config()),
        }
    }

    /// A connection to the controller port at `addr` (`host:port`; over TLS the peer's
    /// certificate must name the host).
    pub(super) async fn connect(&self, addr: &str) -> io::Result<QuorumStream> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let Some(config) = &self.tls else {
            return Ok(QuorumStream::Plain(stream));
        };
        let deadline = Duration::from_millis(HANDSHAKE_MS);
        match weir_tls::connect(config, addr, stream, deadline).await {
            Ok(stream) => Ok(QuorumStream::Client(Box::new(stream))),
            Err(error) => Err(io::Error::new(
                error.kind(),
                format!("TLS with the controller at {addr}: {error}"),
            )),
        }
    }
}

/// Takes an accepted connection's TLS handshake when `tls` is given.
pub(super) async fn accept(stream: TcpStream, tls: Option<&QuorumTls>) -> io::Result<QuorumStream> {
    stream.set_nodelay(true)?;
    match tls {
        None => Ok(QuorumStream::Plain(stream)),
        Some(tls) => {
            let stream = tls
                .server
                .accept(stream, Duration::from_millis(HANDSHAKE_MS))
                .await?;
            Ok(QuorumStream::Server(Box::new(stream)))
        }
    }
}

impl AsyncRead for QuorumStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            QuorumStream::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            QuorumStream::Client(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
            QuorumStream::Server(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for QuorumStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            QuorumStream::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            QuorumStream::Client(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
            QuorumStream::Server(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            QuorumStream::Plain(stream) => Pin::new(stream).poll_flush(cx),
            QuorumStream::Client(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
            QuorumStream::Server(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            QuorumStream::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            QuorumStream::Client(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
            QuorumStream::Server(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}
