//! The controller port's framing: every message is one frame of `[u32 length][JSON]`. A frame
//! is read as its bytes arrive, so a length prefix alone reserves nothing beyond a first chunk
//! and a half-sent frame holds only what was sent; every frame has a size bound.

use std::io;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest frame accepted: a snapshot of the whole image travels as one (an image of 10,000
/// partitions is a few MiB).
pub(super) const FRAME_BYTES_MAX: usize = 64 * 1024 * 1024;
/// What a frame's buffer holds before its bytes arrive; it grows with them.
const FIRST_CHUNK_BYTES: usize = 64 * 1024;

/// Writes `value` as one frame.
pub(super) async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    value: &impl Serialize,
) -> io::Result<()> {
    let body = serde_json::to_vec(value).map_err(io::Error::other)?;
    if body.len() > FRAME_BYTES_MAX {
        return Err(io::Error::other("frame too large"));
    }
    writer.write_all(&(body.len() as u32).to_be_bytes()).await?;
    writer.write_all(&body).await?;
    writer.flush().await
}

/// Reads one frame's body: a length over [`FRAME_BYTES_MAX`] is refused before anything else
/// is read, and the buffer grows with the bytes that arrive, never from the length alone.
/// `UnexpectedEof` when the peer closes, even mid-frame.
pub(super) async fn read_frame_body<R: AsyncRead + Unpin>(reader: &mut R) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    read_frame_into(reader, &mut body).await?;
    Ok(body)
}

/// [`read_frame_body`] into `body` (emptied first), which holds what arrived even when the
/// frame is cut short; its capacity stays within [`buffer_bound`] of that.
pub(super) async fn read_frame_into<R: AsyncRead + Unpin>(
    reader: &mut R,
    body: &mut Vec<u8>,
) -> io::Result<()> {
    body.clear();
    let length = reader.read_u32().await? as usize;
    if length > FRAME_BYTES_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {length} bytes is larger than {FRAME_BYTES_MAX}"),
        ));
    }
    body.reserve(length.min(FIRST_CHUNK_BYTES));
    let read = (&mut *reader).take(length as u64).read_to_end(body).await?;
    if read < length {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the peer closed after {read} of a frame's {length} bytes"),
        ));
    }
    Ok(())
}

/// Reads one frame and decodes its JSON.
pub(super) async fn read_frame<R: AsyncRead + Unpin, T: DeserializeOwned>(
    reader: &mut R,
) -> io::Result<T> {
    let body = read_frame_body(reader).await?;
    serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The most a frame's buffer may hold for `received` bytes: its first chunk, or twice what
/// arrived.
pub(super) fn buffer_bound(received: usize) -> usize {
    FIRST_CHUNK_BYTES.max(2 * received)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_length_prefix_alone_reserves_only_a_first_chunk() {
        let (mut client, mut server) = tokio::io::duplex(1024 * 1024);
        let sent = vec![b'x'; 100_000];
        client
            .write_all(&(FRAME_BYTES_MAX as u32).to_be_bytes())
            .await
            .expect("written");
        client.write_all(&sent).await.expect("ok");
        drop(client);
        let mut body = Vec::new();
        let error = read_frame_into(&mut server, &mut body)
            .await
            .expect_err("refused");
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof, "{error}");
        assert_eq!(body, sent);
        assert!(
            body.capacity() <= buffer_bound(sent.len()),
            "{} bytes reserved for {} received",
            body.capacity(),
            sent.len()
        );
    }

    #[tokio::test]
    async fn frames_round_trip_and_oversized_ones_are_refused() {
        let (mut client, mut server) = tokio::io::duplex(1024);
        let writer = tokio::spawn(async move {
            write_frame(&mut client, &vec![7u32; 1000])
                .await
                .expect("ok");
            client
                .write_all(&(FRAME_BYTES_MAX as u32 + 1).to_be_bytes())
                .await
                .expect("written");
        });
        let read: Vec<u32> = read_frame(&mut server).await.expect("ok");
        assert_eq!(read, vec![7u32; 1000]);
        let error = read_frame_body(&mut server).await.expect_err("refused");
        assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
        writer.await.expect("ok");
    }
}
