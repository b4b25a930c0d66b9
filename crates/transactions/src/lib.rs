//! Millrace's transaction coordinator ([`coordinator`]: Kafka's transactional-id state, fencing,
//! markers and timeouts over an I/O trait the broker implements) and its state, without I/O: the
//! record formats of the compacted
//! internal topic `__transaction_state` ([`records`], byte for byte as Apache Kafka 4.1 writes
//! them, so that either broker can read the other's log) and Kafka's transaction state machine
//! ([`state`]: the status ids stored in those records, the names DescribeTransactions and
//! ListTransactions return, and which transitions are valid). Hard ceilings on what a decoded
//! record may hold are in [`limits`].
//!
//! **Invariant:** decoding never panics and never allocates by a count read from the bytes before
//! the bytes it counts are there; bad input is a [`RecordError`].
//!
//! Types to read first: [`TransactionLogValue`], [`TxnStatus`].

pub mod coordinator;
pub mod limits;
pub mod records;
pub mod state;

pub use coordinator::{
    partition_for, IoFuture, TransactionCoordinator, TxnConfig, TxnDescription, TxnError, TxnIo,
    TxnIoError, TRANSACTION_STATE_TOPIC,
};
pub use records::{
    decode_key, decode_record, decode_value, encode_key, encode_value, encode_value_version,
    RecordError, TransactionLogValue, TxnPartitions, TxnRecord, TRANSACTION_LOG_KEY_VERSION,
    TRANSACTION_LOG_VALUE_VERSION,
};
pub use state::{can_transition, TxnStatus};
