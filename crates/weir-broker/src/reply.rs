//! What a handled request sends back, typed: a response frame, nothing, or a closed
//! connection. A fetch's frame carries its records as slices of segment files that the
//! connection's writer streams in chunks, so a pending response holds no record bytes.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use weir_log::ReadSlice;

/// The answer to one request.
pub enum Reply {
    /// Send this frame.
    Frame(ResponseFrame),
    /// Send nothing (Produce with acks=0).
    NoResponse,
    /// Close the connection: an acks=0 produce failed (how such a client learns of an error,
    /// as in Kafka), or the response could not be encoded.
    Close,
}

/// A future resolving to a request's [`Reply`].
pub type PendingReply = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// One piece of a response frame.
pub enum FramePart {
    /// Bytes held in memory.
    Bytes(Bytes),
    /// Bytes streamed from a segment file when the frame is written.
    Slice(ReadSlice),
}

/// A complete response frame (length prefix included) as a sequence of parts.
pub struct ResponseFrame {
    parts: Vec<FramePart>,
}

impl ResponseFrame {
    /// A frame held entirely in memory.
    pub fn bytes(frame: Bytes) -> ResponseFrame {
        ResponseFrame {
            parts: vec![FramePart::Bytes(frame)],
        }
    }

    /// A frame of several parts, in order.
    pub fn from_parts(parts: Vec<FramePart>) -> ResponseFrame {
        ResponseFrame { parts }
    }

    /// The parts, in order.
    pub fn into_parts(self) -> Vec<FramePart> {
        self.parts
    }

    /// The frame's length on the wire, length prefix included.
    pub fn len(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                FramePart::Bytes(b) => b.len(),
                FramePart::Slice(s) => s.len() as usize,
            })
            .sum()
    }

    /// True for a frame of no bytes (never sent: a frame has at least its length prefix).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes this frame holds in memory (streamed slices excluded).
    pub fn memory_bytes(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                FramePart::Bytes(b) => b.len(),
                FramePart::Slice(_) => 0,
            })
            .sum()
    }
}
