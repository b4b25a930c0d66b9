//! Errors of the share-partition state machine and of the `__share_group_state` codec.
//!
//! Each variant names the Kafka error the front end answers with; the mapping to wire codes lives
//! at the edge (the front end), not here.

use thiserror::Error;

/// What went wrong in a share-partition operation or while decoding persisted share state.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ShareError {
    /// The request is malformed: an acknowledgement batch with first > last, batches out of
    /// order, an empty or wrongly sized type list, RENEW without `IsRenewAck`, or offsets past
    /// the acquired records. Kafka's `INVALID_REQUEST` (42).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The records are not in a state that allows the operation: not acquired, acquired by
    /// another member, lock expired, not found in the cache, or RENEW while renewing is disabled.
    /// Kafka's `INVALID_RECORD_STATE` (121).
    #[error("invalid record state: {0}")]
    InvalidRecordState(String),
    /// The log batches handed to `acquire` are not ascending, non-overlapping ranges. A caller
    /// bug, never client input; Kafka's `UNKNOWN_SERVER_ERROR` (-1) if it reaches a client.
    #[error("invalid log batches: {0}")]
    InvalidLogBatches(String),
    /// Persisted share state that cannot be loaded (overlapping batches, an unknown delivery
    /// state, a negative start offset). Loading fails like a persister error in Kafka:
    /// `UNKNOWN_SERVER_ERROR` (-1) for the partition.
    #[error("invalid persisted share state: {0}")]
    InvalidPersistedState(String),
    /// A `__share_group_state` record that does not decode: truncated, an unknown record type or
    /// version, a length past the bytes present, trailing bytes. The coordinator's load fails
    /// for that key (Kafka: the share coordinator fails to load the partition).
    #[error("corrupt share state record: {0}")]
    CorruptRecord(String),
}
