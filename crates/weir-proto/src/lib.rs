//! `weir-proto` owns the Kafka wire layer on top of the `kafka-protocol` crate: length-prefixed
//! framing with a size cap, request header decoding, the table of APIs and versions Weir
//! supports (what ApiVersions advertises), response encoding, and the client side of the same
//! wire (request encoding, response decoding) for `weir-client`; and the connection limits a
//! server holds its listeners to (`connection_limits`, shared by the Kafka listener and the
//! HTTP gateway).
//!
//! It never decides what a request means: handlers in `weir-broker` do. It knows nothing of
//! topics, logs or configuration files.

pub mod api;
pub mod client;
pub mod connection_limits;
pub mod frame;
pub mod request;
pub mod response;

pub use api::{supported_versions, SUPPORTED_APIS};
pub use client::{decode_response, encode_request, response_correlation_id, CodecError};
pub use frame::{read_frame_length, FrameError};
pub use request::{decode_request, DecodeError, Request};
pub use response::{encode_response, EncodeError};
