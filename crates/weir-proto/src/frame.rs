//! Kafka framing: a 4-byte big-endian length, then that many bytes.

use tokio::io::{AsyncRead, AsyncReadExt};

/// Why a frame could not be read; each closes the connection.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The length prefix is negative, zero or above the configured maximum.
    #[error("frame length {length} outside 1..={max_bytes}")]
    BadLength {
        /// The length the client sent.
        length: i32,
        /// `socket.request.max.bytes`.
        max_bytes: u32,
    },
    /// The peer closed the connection part-way through a frame.
    #[error("connection closed mid-frame")]
    Truncated,
    /// The peer stopped sending part-way through a frame that holds memory.
    #[error("no byte of the {length}-byte frame arrived for {stalled_ms} ms")]
    Stalled {
        /// The frame's length.
        length: u32,
        /// How long nothing arrived.
        stalled_ms: u64,
    },
    /// The socket failed.
    #[error("socket error: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads a frame's length prefix and checks it against `max_bytes` before anything is
/// allocated. `Ok(None)` when the peer closed between frames (for TLS, with or without
/// close_notify). The caller reads the
/// body, growing its buffer as bytes arrive, so a client that announces a large frame and sends
/// nothing costs no memory.
pub async fn read_frame_length<R: AsyncRead + Unpin>(
    reader: &mut R,
    max_bytes: u32,
) -> Result<Option<u32>, FrameError> {
    let mut prefix = [0u8; 4];
    let mut filled = 0;
    while filled < prefix.len() {
        let n = match reader.read(&mut prefix[filled..]).await {
            Ok(n) => n,
            // A TLS peer that closes without close_notify, between frames, has closed as
            // cleanly as a TCP peer (many clients do not send it).
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => 0,
            Err(error) => return Err(error.into()),
        };
        if n == 0 {
            return if filled == 0 {
                Ok(None)
            } else {
                Err(FrameError::Truncated)
            };
        }
        filled += n;
    }
    let length = i32::from_be_bytes(prefix);
    if length <= 0 || length as u32 > max_bytes {
        return Err(FrameError::BadLength { length, max_bytes });
    }
    Ok(Some(length as u32))
}

#[cfg(test)]
mod tests {
    use std::io::ErrorKind;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tokio::io::ReadBuf;

    use super::*;

    /// Gives `bytes`, then fails with `error` (as tokio-rustls reads a TLS peer that closed
    /// without close_notify).
    struct ThenFails {
        bytes: Vec<u8>,
        error: ErrorKind,
    }

    impl AsyncRead for ThenFails {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            if self.bytes.is_empty() {
                return Poll::Ready(Err(self.error.into()));
            }
            let n = self.bytes.len().min(buf.remaining());
            buf.put_slice(&self.bytes[..n]);
            self.bytes.drain(..n);
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_close_without_close_notify_between_frames_is_a_clean_end() {
        let mut closed = ThenFails {
            bytes: Vec::new(),
            error: ErrorKind::UnexpectedEof,
        };
        assert!(matches!(
            read_frame_length(&mut closed, 100).await,
            Ok(None)
        ));
        let mut mid_prefix = ThenFails {
            bytes: vec![0, 0],
            error: ErrorKind::UnexpectedEof,
        };
        assert!(matches!(
            read_frame_length(&mut mid_prefix, 100).await,
            Err(FrameError::Truncated)
        ));
        let mut reset = ThenFails {
            bytes: Vec::new(),
            error: ErrorKind::ConnectionReset,
        };
        assert!(matches!(
            read_frame_length(&mut reset, 100).await,
            Err(FrameError::Io(_))
        ));
    }
}
