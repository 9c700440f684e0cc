//! `weir-codec` is the Kafka record batch format v2 as one codec below the log, the client and
//! the coordinator: the header's layout with each field's position named ([`layout`]), the
//! header decoded ([`header::BatchHeader`]), the walk over a batch's records every reader uses
//! ([`records`]), the varints every record and flexible-version field is built of
//! ([`varint`]), the codecs that compress a batch's records ([`compression`]), and the one
//! encoder of batches ([`encode`]).
//! It does no I/O and knows no broker.

pub mod compression;
pub mod encode;
pub mod header;
pub mod layout;
pub mod records;
pub mod varint;
