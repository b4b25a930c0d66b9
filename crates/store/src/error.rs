//! Error types of the store, one enum per operation family.
//!
//! `StoreError` is what any store operation can fail with; `AppendError` and `ReadError` add the
//! per-operation outcomes the front end maps to Kafka error codes (see `API.md`).

use crate::config::TopicPartition;

/// A store-level failure: I/O, missing or duplicate partitions, an offline data dir.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An operating system I/O error; the message carries the file and operation.
    #[error("I/O error: {0}")]
    Io(std::io::Error),
    /// `create_partition` on a partition that exists.
    #[error("partition {0} already exists")]
    AlreadyExists(TopicPartition),
    /// The partition is not hosted by this store.
    #[error("unknown partition {0}")]
    UnknownPartition(TopicPartition),
    /// The data dir was taken offline after an I/O error whose outcome is unknown (failed fsync,
    /// failed rollback of a torn append). Nothing is written to it until the broker restarts.
    #[error("log directory offline: {0}")]
    Offline(String),
    /// The file system holding the log dir has less free space than
    /// `millrace.log.dir.min.free.bytes` (or none at all): the write was refused before it
    /// started, or failed with ENOSPC and was cut back, so nothing of it is in the log. Retriable:
    /// produce succeeds again once space is freed → KAFKA_STORAGE_ERROR.
    #[error("disk full ({dir}): {free} bytes free, {min_free} kept free")]
    DiskFull {
        /// The directory whose file system is full.
        dir: String,
        /// Free bytes when it was refused.
        free: u64,
        /// The low-water mark (0 when the disk was really full).
        min_free: u64,
    },
    /// Tiered storage: more bytes of closed segments wait for upload than
    /// `millrace.remote.storage.max.pending.bytes` allows (the object store is down or slow).
    /// Retriable: produce succeeds again once uploads catch up → KAFKA_STORAGE_ERROR.
    #[error("{pending} bytes wait for upload to the object store, above the bound of {bound}")]
    UploadBacklog { pending: u64, bound: u64 },
    /// The store was shut down.
    /// The same partition is live in two log dirs: the store refuses to open (as Kafka refuses
    /// to start) rather than guess which copy is current.
    #[error("partition {partition} found in two log dirs: {first} and {second}")]
    DuplicateLog {
        /// The partition.
        partition: TopicPartition,
        /// Its directory in one dir.
        first: String,
        /// Its directory in another.
        second: String,
    },
    #[error("store is shut down")]
    ShutDown,
    /// A file on disk failed validation and could not be repaired.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// The partition directory records another topic id than the one asked for.
    #[error("partition {partition} belongs to topic id {on_disk}, not {expected}")]
    TopicIdMismatch {
        /// The partition.
        partition: TopicPartition,
        /// The topic id in its `partition.metadata`.
        on_disk: String,
        /// The topic id the caller expected.
        expected: String,
    },
}

impl StoreError {
    /// Wraps an I/O error with what was being done to which file.
    ///
    /// ENOSPC (or EDQUOT) becomes `DiskFull`: every store path that writes puts its file back
    /// (or writes through a temporary) before it reports one, so the outcome is known and the
    /// write may be retried once space returns. Errors of unknown outcome (a failed fsync) reach
    /// here wrapped (`checkpoint::unknown_outcome`) or are taken offline by their caller first.
    pub(crate) fn io(context: impl std::fmt::Display, err: std::io::Error) -> StoreError {
        if is_no_space(&err) {
            return StoreError::DiskFull {
                dir: context.to_string(),
                free: 0,
                min_free: 0,
            };
        }
        StoreError::Io(std::io::Error::new(err.kind(), format!("{context}: {err}")))
    }

    /// Whether this is the disk being full (retriable once space is freed; never a reason to
    /// take the log dir offline).
    pub fn is_no_space(&self) -> bool {
        matches!(self, StoreError::DiskFull { .. })
    }
}

/// Whether `e` is the file system being out of space (ENOSPC, or EDQUOT: a quota counts the
/// same). Only errors that carry the OS error number count: errors of unknown outcome are
/// wrapped without it (`checkpoint::unknown_outcome`).
pub fn is_no_space(e: &std::io::Error) -> bool {
    let code = e.raw_os_error();
    code == Some(rustix::io::Errno::NOSPC.raw_os_error())
        || code == Some(rustix::io::Errno::DQUOT.raw_os_error())
}

/// Why `PartitionLog::append` refused or failed a request. Nothing was appended in any case.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// CRC mismatch or impossible lengths → Kafka CORRUPT_MESSAGE (2).
    #[error("corrupt message: {0}")]
    CorruptMessage(String),
    /// magic != 2, record count mismatch, … → Kafka INVALID_RECORD (87).
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// Particular records of the batch are refused (a keyless record on a compacted topic, a
    /// timestamp outside the topic's window) → Kafka INVALID_TIMESTAMP (32) when any timestamp
    /// is refused, else INVALID_RECORD (87), with `record_errors` naming them (KIP-467), so that
    /// a client fails only those records.
    #[error("{total} records refused, first ones {record_errors:?}")]
    InvalidRecords {
        /// Some record's timestamp is outside the topic's window.
        invalid_timestamp: bool,
        /// (position of the record in its batch, 0-based; why it was refused), at most
        /// `limits::RECORD_ERRORS_MAX` of them.
        record_errors: Vec<(i32, String)>,
        /// How many records were refused in all.
        total: usize,
    },
    /// One batch is larger than `max.message.bytes` → Kafka MESSAGE_TOO_LARGE (10).
    #[error("batch of {size} bytes exceeds max.message.bytes {max}")]
    MessageTooLarge {
        /// Bytes of the offending batch, including its 12-byte prefix.
        size: usize,
        /// The topic's `max.message.bytes`.
        max: usize,
    },
    /// A follower append whose first new batch does not start at the log end → the replica
    /// restarts its log at `base_offset` (never reaches a client).
    #[error(
        "replicated batch at offset {base_offset} does not continue the log end {log_end_offset}"
    )]
    UnexpectedOffset {
        base_offset: i64,
        log_end_offset: i64,
    },
    /// Sequence gap or new producer epoch not starting at 0 → OUT_OF_ORDER_SEQUENCE_NUMBER (45).
    #[error("out of order sequence: {0}")]
    OutOfOrderSequence(String),
    /// Producer epoch older than the stored one → INVALID_PRODUCER_EPOCH (47).
    #[error("invalid producer epoch: {0}")]
    InvalidProducerEpoch(String),
    /// A non-transactional batch from a producer with an ongoing transaction → INVALID_TXN_STATE
    /// (48).
    #[error("invalid transaction state: {0}")]
    InvalidTxnState(String),
    /// A marker from a coordinator older than the one that wrote the producer's last marker →
    /// TRANSACTION_COORDINATOR_FENCED (52).
    #[error("transaction coordinator fenced: {0}")]
    CoordinatorFenced(String),
    /// I/O failure, offline dir, shut down → KAFKA_STORAGE_ERROR (56).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why `PartitionLog::read` failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// `fetch_offset` is below the log start offset or above the read's upper bound.
    #[error("offset {fetch_offset} out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        /// The requested offset.
        fetch_offset: i64,
        /// The log start offset at the time of the read.
        log_start_offset: i64,
        /// The log end offset at the time of the read.
        log_end_offset: i64,
    },
    /// I/O failure or offline dir.
    #[error(transparent)]
    Store(#[from] StoreError),
}
