//! `weir-proto` owns the Kafka wire layer on top of the `kafka-protocol` crate: length-prefixed
//! framing with a size cap, request header decoding, the table of APIs and versions Weir
//! supports (what ApiVersions advertises), and response encoding.
//!
//! It never decides what a request means: handlers in `weir-broker` do. It knows nothing of
//! topics, logs or configuration files.

pub mod api;
pub mod frame;
pub mod request;
pub mod response;

pub use api::{supported_versions, SUPPORTED_APIS};
pub use frame::{read_frame, FrameError};
pub use request::{decode_request, DecodeError, Request};
pub use response::{encode_response, EncodeError};
