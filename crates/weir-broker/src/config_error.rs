//! The error of broker settings, apart so that the modules reading settings (`config`,
//! `listeners`) share it without importing each other.

/// A broker property that is unknown or has a bad value.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);
