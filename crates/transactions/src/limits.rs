//! Limits of the `__transaction_state` record codec. Each is a named constant with its unit, why
//! it exists and what enforces it. They bound what decoding untrusted bytes (a corrupt or hostile
//! log segment, a replica's fetch) may make Millrace hold; they are sized well above anything a
//! Kafka client can create, so no record Kafka writes is refused.

/// Longest transactional id (bytes). Kafka's strings are at most i16::MAX bytes on the wire (the
/// key's i16 length cannot say more). Enforced in `records::decode_key`.
pub const TRANSACTIONAL_ID_BYTES_MAX: usize = i16::MAX as usize;

/// Longest topic name in a value's partition list (bytes). Kafka's topic names are at most 249
/// bytes, but its generated reader accepts any string up to i16::MAX, and so does this one.
/// Enforced in `records::decode_value`.
pub const TOPIC_NAME_BYTES_MAX: usize = i16::MAX as usize;

/// Topics in one value's partition list (count). Enforced in `records::decode_value`
/// (`RecordError::BadLength`).
pub const VALUE_TOPICS_MAX: usize = 1 << 20;

/// Partitions in one value, summed over its topics (count). A transaction lists every partition
/// it wrote to; Kafka sets no bound, and a million is far beyond any cluster's partition count.
/// Enforced in `records::decode_value` (`RecordError::BadLength`).
pub const VALUE_PARTITIONS_MAX: usize = 1 << 20;

/// Tagged fields in one tagged-field section (count). Kafka 4.1 defines four on the value
/// (tags 0-3) and none on the partition entries. Enforced in `records::decode_value`.
pub const TAGGED_FIELDS_MAX: usize = 1024;

/// Bytes of one record key or value accepted by the decoders; anything longer is refused as
/// corrupt. A value listing [`VALUE_PARTITIONS_MAX`] partitions of one topic is about 4 MiB.
/// Enforced in `records::decode_key` and `records::decode_value`.
pub const RECORD_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Bytes read per step when a coordinator replays a `__transaction_state` partition (at least
/// one whole batch is read however large). Bounds the replay's buffer.
pub const LOAD_READ_BYTES: usize = 1 << 20;

/// Wait before a marker that could not be written (no leader, too few replicas) is tried again.
pub const MARKER_RETRY_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);
