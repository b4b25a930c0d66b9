//! Every limit the controller enforces, as a named constant.

/// Partitions: most partitions one topic may have (Kafka has no hard limit; this bounds what one
/// CreateTopics or CreatePartitions can ask for). Enforced by `controller::check_partition_count`.
pub const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;

/// Producer ids handed to a broker per AllocateProducerIds (Kafka's block size).
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;
