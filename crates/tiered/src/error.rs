//! `TieredError`: what can go wrong between the broker and the object store, in words an
//! operator can act on. The broker maps it to Kafka codes at the edge (a remote read that fails is
//! KAFKA_STORAGE_ERROR; an upload that fails is retried, never reported to a producer).

use thiserror::Error;

/// A tiered-storage failure.
#[derive(Debug, Error)]
pub enum TieredError {
    /// `millrace.remote.storage.url` or the AWS environment is unusable; the message says exactly
    /// what is missing or wrong.
    #[error("remote storage is misconfigured: {0}")]
    Config(String),
    /// The object does not exist (deleted behind our back, or never uploaded).
    #[error("remote object {key} is missing")]
    Missing { key: String },
    /// The object exists but its bytes are not what the metadata says (wrong size, bad CRC).
    #[error("remote object {key} is corrupt: {detail}")]
    Corrupt { key: String, detail: String },
    /// The object store answered with an error or did not answer in time.
    #[error("object store error on {key}: {detail}")]
    Store { key: String, detail: String },
    /// A local file could not be read for an upload.
    #[error("local file {path}: {source}")]
    Local {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl TieredError {
    /// True for failures a later retry may cure (the store is down or slow); false for missing
    /// or corrupt objects and configuration errors.
    pub fn is_transient(&self) -> bool {
        matches!(self, TieredError::Store { .. } | TieredError::Local { .. })
    }
}
