//! Limits and defaults of share partitions. Each is a named constant with its unit, why it exists
//! and what enforces it. Operator-tunable values (`group.share.*` broker configs and the group's
//! `share.*` configs) reach the state machine through `SharePartitionConfig`; these are Kafka's
//! defaults and the codec's hard bounds.

/// Kafka's `group.share.delivery.count.limit` default (count): a record is delivered at most
/// this many times, then archived. Used by `SharePartitionConfig::default`.
pub const DELIVERY_COUNT_LIMIT_DEFAULT: i16 = 5;

/// Kafka's `group.share.partition.max.record.locks` default (records): the in-flight window
/// (SPEO − SPSO + 1) a share partition may grow to, exceeded by at most one log batch. Used by
/// `SharePartitionConfig::default`; enforced in `SharePartition::acquire`.
pub const MAX_RECORD_LOCKS_DEFAULT: u32 = 2000;

/// Kafka's `group.share.record.lock.duration.ms` default (ms): how long an acquired record stays
/// locked to its member before it returns to AVAILABLE. Used by `SharePartitionConfig::default`.
pub const RECORD_LOCK_DURATION_MS_DEFAULT: i64 = 30_000;

/// Smallest delivery-count limit the state machine accepts (count). Kafka's bound on
/// `group.share.delivery.count.limit` and `share.delivery.count.limit` is [2, 10]; below 2 the
/// poison-record throttle would be meaningless. `SharePartitionConfig` values below are raised to it.
pub const DELIVERY_COUNT_LIMIT_MIN: i16 = 2;

/// Bytes of one `StateBatch` in a `__share_group_state` value, without tagged fields:
/// FirstOffset i64 + LastOffset i64 + DeliveryState i8 + DeliveryCount i16 + tagged-field count.
/// The decoder bounds an array's count by the bytes left divided by this before allocating.
pub const STATE_BATCH_BYTES_MIN: usize = 8 + 8 + 1 + 2 + 1;

/// Longest group id in a `__share_group_state` key (bytes): Kafka's strings carry an int16
/// length. Enforced by the key encoder (error) and decoder (a negative length is corrupt).
pub const GROUP_ID_BYTES_MAX: usize = i16::MAX as usize;

/// Tagged fields one struct of a `__share_group_state` value may carry (count). Kafka writes at
/// most one (DeliveryCompleteCount); this bounds a corrupt count before the decoder loops on it.
pub const TAGGED_FIELDS_MAX: u32 = 64;

const _: () = assert!(DELIVERY_COUNT_LIMIT_DEFAULT >= DELIVERY_COUNT_LIMIT_MIN);
