//! Kafka error codes and the one place that maps Millrace's internal errors onto them.
//!
//! Anything without a specific mapping becomes UNKNOWN_SERVER_ERROR with a `warn!` naming the
//! context, so that an unmapped case shows up in the logs instead of as a silent wrong answer.

use millrace_controller::ControllerError;
use millrace_groups::GroupError;
use millrace_replication::{AckError, PartitionError, ReplicaError};
use millrace_store::{AppendError, ReadError, StoreError};
use tracing::warn;

pub const NONE: i16 = 0;
pub const UNKNOWN_SERVER_ERROR: i16 = -1;
pub const OFFSET_OUT_OF_RANGE: i16 = 1;
pub const CORRUPT_MESSAGE: i16 = 2;
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
pub const LEADER_NOT_AVAILABLE: i16 = 5;
pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
pub const REQUEST_TIMED_OUT: i16 = 7;
pub const MESSAGE_TOO_LARGE: i16 = 10;
pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
pub const INVALID_REQUIRED_ACKS: i16 = 21;
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
pub const NOT_COORDINATOR: i16 = 16;
pub const NOT_ENOUGH_REPLICAS: i16 = 19;
pub const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;
pub const ILLEGAL_GENERATION: i16 = 22;
pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
pub const INVALID_GROUP_ID: i16 = 24;
pub const UNKNOWN_MEMBER_ID: i16 = 25;
pub const INVALID_SESSION_TIMEOUT: i16 = 26;
pub const REBALANCE_IN_PROGRESS: i16 = 27;
pub const UNSUPPORTED_VERSION: i16 = 35;
pub const TOPIC_ALREADY_EXISTS: i16 = 36;
pub const INVALID_PARTITIONS: i16 = 37;
pub const INVALID_REPLICATION_FACTOR: i16 = 38;
pub const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
pub const INVALID_CONFIG: i16 = 40;
pub const NOT_CONTROLLER: i16 = 41;
pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
pub const GROUP_AUTHORIZATION_FAILED: i16 = 30;
pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
pub const SECURITY_DISABLED: i16 = 54;
pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
pub const ILLEGAL_SASL_STATE: i16 = 34;
pub const SASL_AUTHENTICATION_FAILED: i16 = 58;
pub const RESOURCE_NOT_FOUND: i16 = 91;
pub const DUPLICATE_RESOURCE: i16 = 92;
pub const UNACCEPTABLE_CREDENTIAL: i16 = 93;
pub const INVALID_REQUEST: i16 = 42;
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
pub const INVALID_PRODUCER_EPOCH: i16 = 47;
pub const INVALID_TXN_STATE: i16 = 48;
pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
pub const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
pub const CONCURRENT_TRANSACTIONS: i16 = 51;
pub const TRANSACTION_COORDINATOR_FENCED: i16 = 52;
pub const PRODUCER_FENCED: i16 = 90;
pub const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;
pub const UNSTABLE_OFFSET_COMMIT: i16 = 88;
pub const KAFKA_STORAGE_ERROR: i16 = 56;
pub const FENCED_LEADER_EPOCH: i16 = 74;
pub const UNKNOWN_LEADER_EPOCH: i16 = 75;
pub const OFFSET_NOT_AVAILABLE: i16 = 78;
pub const PREFERRED_LEADER_NOT_AVAILABLE: i16 = 80;
pub const ELIGIBLE_LEADERS_NOT_AVAILABLE: i16 = 83;
pub const ELECTION_NOT_NEEDED: i16 = 84;
pub const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;
pub const POLICY_VIOLATION: i16 = 44;
pub const INVALID_UPDATE_VERSION: i16 = 95;
pub const STALE_BROKER_EPOCH: i16 = 77;
pub const INELIGIBLE_REPLICA: i16 = 107;
pub const DUPLICATE_BROKER_REGISTRATION: i16 = 101;
pub const UNSUPPORTED_COMPRESSION_TYPE: i16 = 76;
pub const INVALID_RECORD: i16 = 87;
pub const INVALID_TIMESTAMP: i16 = 32;
pub const TOPIC_DELETION_DISABLED: i16 = 73;
pub const UNKNOWN_TOPIC_ID: i16 = 100;
pub const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
pub const INVALID_FETCH_SESSION_EPOCH: i16 = 71;
pub const NON_EMPTY_GROUP: i16 = 68;
pub const GROUP_ID_NOT_FOUND: i16 = 69;
pub const MEMBER_ID_REQUIRED: i16 = 79;
pub const GROUP_MAX_SIZE_REACHED: i16 = 81;
pub const FENCED_INSTANCE_ID: i16 = 82;
pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
pub const FENCED_MEMBER_EPOCH: i16 = 110;
pub const UNRELEASED_INSTANCE_ID: i16 = 111;
pub const UNSUPPORTED_ASSIGNOR: i16 = 112;
pub const STALE_MEMBER_EPOCH: i16 = 113;
pub const INVALID_REGULAR_EXPRESSION: i16 = 128;

/// A Kafka error code with an optional message for the response's `error_message` and, for
/// Produce, the records of the batch it refers to (`record_errors`, KIP-467).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaError {
    pub code: i16,
    pub message: Option<String>,
    /// (record index in its batch, why) — empty unless particular records were refused.
    pub record_errors: Vec<(i32, String)>,
}

impl KafkaError {
    pub fn new(code: i16, message: impl Into<String>) -> Self {
        Self {
            code,
            message: Some(message.into()),
            record_errors: Vec::new(),
        }
    }

    pub fn code(code: i16) -> Self {
        Self {
            code,
            message: None,
            record_errors: Vec::new(),
        }
    }
}

/// Maps an append failure on `context` (a topic-partition) to its Kafka code.
pub fn from_append(err: &AppendError, context: &str) -> KafkaError {
    match err {
        AppendError::CorruptMessage(m) => KafkaError::new(CORRUPT_MESSAGE, m.clone()),
        AppendError::InvalidRecord(m) => KafkaError::new(INVALID_RECORD, m.clone()),
        AppendError::InvalidRecords {
            invalid_timestamp,
            record_errors,
            total,
        } => {
            // Kafka's wording (LogValidator): the timestamp case names no count; the other lists
            // the first three.
            let (code, message) = if *invalid_timestamp {
                (
                    INVALID_TIMESTAMP,
                    "One or more records have been rejected due to invalid timestamp".to_string(),
                )
            } else {
                let first: Vec<String> = record_errors
                    .iter()
                    .take(3)
                    .map(|(i, m)| format!("{{batchIndex={i}, message={m}}}"))
                    .collect();
                (
                    INVALID_RECORD,
                    format!(
                        "One or more records have been rejected due to {total} record errors in \
                         total, and only showing the first three errors at most: [{}]",
                        first.join(", ")
                    ),
                )
            };
            KafkaError {
                record_errors: record_errors.clone(),
                ..KafkaError::new(code, message)
            }
        }
        AppendError::MessageTooLarge { .. } => KafkaError::new(MESSAGE_TOO_LARGE, err.to_string()),
        AppendError::OutOfOrderSequence(m) => {
            KafkaError::new(OUT_OF_ORDER_SEQUENCE_NUMBER, m.clone())
        }
        AppendError::InvalidProducerEpoch(m) => KafkaError::new(INVALID_PRODUCER_EPOCH, m.clone()),
        AppendError::InvalidTxnState(m) => KafkaError::new(INVALID_TXN_STATE, m.clone()),
        AppendError::CoordinatorFenced(m) => {
            KafkaError::new(TRANSACTION_COORDINATOR_FENCED, m.clone())
        }
        // Only follower appends return it; a client's append reaching it is a bug worth a warning.
        AppendError::UnexpectedOffset { .. } => unknown(err, context),
        AppendError::Store(e) => from_store(e, context),
    }
}

/// Maps a read failure on `context` to its Kafka code.
pub fn from_read(err: &ReadError, context: &str) -> KafkaError {
    match err {
        ReadError::OffsetOutOfRange { .. } => KafkaError::new(OFFSET_OUT_OF_RANGE, err.to_string()),
        ReadError::Store(e) => from_store(e, context),
    }
}

/// Maps a store failure on `context` to its Kafka code.
pub fn from_store(err: &StoreError, context: &str) -> KafkaError {
    match err {
        StoreError::UnknownPartition(_) => KafkaError::code(UNKNOWN_TOPIC_OR_PARTITION),
        StoreError::Io(_)
        | StoreError::Offline(_)
        | StoreError::Corrupt(_)
        | StoreError::ShutDown => {
            warn!(%context, error = %err, "storage error");
            KafkaError::new(KAFKA_STORAGE_ERROR, err.to_string())
        }
        #[allow(unreachable_patterns)]
        _ => unknown(err, context),
    }
}

/// Maps a controller refusal (forwarded admin requests) to its Kafka code.
pub fn from_controller(err: &ControllerError, context: &str) -> KafkaError {
    let message = err.to_string();
    let code = match err {
        ControllerError::NotController { .. } => NOT_CONTROLLER,
        ControllerError::InvalidTopic(_) => INVALID_TOPIC_EXCEPTION,
        ControllerError::TopicAlreadyExists(_) => TOPIC_ALREADY_EXISTS,
        ControllerError::UnknownTopicOrPartition(_) => UNKNOWN_TOPIC_OR_PARTITION,
        ControllerError::InvalidPartitions(_) => INVALID_PARTITIONS,
        ControllerError::InvalidReplicationFactor(_) => INVALID_REPLICATION_FACTOR,
        ControllerError::InvalidReplicaAssignment(_) => INVALID_REPLICA_ASSIGNMENT,
        ControllerError::InvalidConfig(_) => INVALID_CONFIG,
        ControllerError::TopicDeletionDisabled => TOPIC_DELETION_DISABLED,
        ControllerError::StaleBrokerEpoch => STALE_BROKER_EPOCH,
        ControllerError::DuplicateBrokerRegistration(_) => DUPLICATE_BROKER_REGISTRATION,
        ControllerError::FencedLeaderEpoch => FENCED_LEADER_EPOCH,
        ControllerError::InvalidUpdateVersion => INVALID_UPDATE_VERSION,
        ControllerError::IneligibleReplica(_) => INELIGIBLE_REPLICA,
        ControllerError::NotLeaderOrFollower => NOT_LEADER_OR_FOLLOWER,
        ControllerError::InvalidRequest(_) => INVALID_REQUEST,
        ControllerError::ElectionNotNeeded => ELECTION_NOT_NEEDED,
        ControllerError::PreferredLeaderNotAvailable => PREFERRED_LEADER_NOT_AVAILABLE,
        ControllerError::EligibleLeadersNotAvailable => ELIGIBLE_LEADERS_NOT_AVAILABLE,
        ControllerError::NoReassignmentInProgress => NO_REASSIGNMENT_IN_PROGRESS,
        ControllerError::PolicyViolation(_) => POLICY_VIOLATION,
        ControllerError::Timeout(_) => REQUEST_TIMED_OUT,
        ControllerError::ResourceNotFound(_) => RESOURCE_NOT_FOUND,
        ControllerError::DuplicateResource(_) => DUPLICATE_RESOURCE,
        ControllerError::UnacceptableCredential(_) => UNACCEPTABLE_CREDENTIAL,
        ControllerError::UnsupportedSaslMechanism(_) => UNSUPPORTED_SASL_MECHANISM,
        ControllerError::Internal(_) => return unknown(err, context),
    };
    KafkaError::new(code, message)
}

/// Maps a refusal of a partition operation (leadership, leader epochs, min ISR).
pub fn from_partition(err: &PartitionError) -> KafkaError {
    let code = match err {
        PartitionError::NotLeader { .. } => NOT_LEADER_OR_FOLLOWER,
        PartitionError::FencedLeaderEpoch => FENCED_LEADER_EPOCH,
        PartitionError::UnknownLeaderEpoch => UNKNOWN_LEADER_EPOCH,
        PartitionError::NotEnoughReplicas => NOT_ENOUGH_REPLICAS,
        PartitionError::OffsetOutOfRange => OFFSET_OUT_OF_RANGE,
        PartitionError::Storage => KAFKA_STORAGE_ERROR,
    };
    KafkaError::code(code)
}

/// Maps a replica manager failure on `context`. A partition this broker hosts no replica of is
/// NOT_LEADER_OR_FOLLOWER when the topic exists (the client's metadata is stale) — the caller
/// decides that; here it is UNKNOWN_TOPIC_OR_PARTITION.
pub fn from_replica(err: &ReplicaError, context: &str) -> KafkaError {
    match err {
        ReplicaError::UnknownPartition(_) => KafkaError::code(UNKNOWN_TOPIC_OR_PARTITION),
        ReplicaError::Partition(e) => from_partition(e),
        ReplicaError::Append(e) => from_append(e, context),
        ReplicaError::Read(e) => from_read(e, context),
        ReplicaError::Store(e) => from_store(e, context),
    }
}

/// Maps a failed wait for an acknowledgement.
pub fn from_ack(err: AckError) -> KafkaError {
    match err {
        AckError::Timeout => KafkaError::new(
            REQUEST_TIMED_OUT,
            "the records were not replicated to the in-sync replicas within timeout_ms",
        ),
        AckError::NotLeader => KafkaError::new(
            NOT_LEADER_OR_FOLLOWER,
            "leadership moved before the records were committed",
        ),
        AckError::NotEnoughReplicasAfterAppend => {
            KafkaError::code(NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        }
        AckError::Storage => KafkaError::code(KAFKA_STORAGE_ERROR),
    }
}

/// Maps a group coordinator refusal to its Kafka code. Storage failures become
/// COORDINATOR_NOT_AVAILABLE, which clients retry after finding the coordinator again (Kafka maps
/// failed `__consumer_offsets` appends the same way).
pub fn from_group(err: &GroupError, context: &str) -> KafkaError {
    let code = match err {
        GroupError::InvalidGroupId => INVALID_GROUP_ID,
        GroupError::CoordinatorLoadInProgress => COORDINATOR_LOAD_IN_PROGRESS,
        GroupError::CoordinatorNotAvailable => COORDINATOR_NOT_AVAILABLE,
        GroupError::NotCoordinator => NOT_COORDINATOR,
        GroupError::InvalidSessionTimeout => INVALID_SESSION_TIMEOUT,
        GroupError::IllegalGeneration => ILLEGAL_GENERATION,
        GroupError::UnknownMemberId => UNKNOWN_MEMBER_ID,
        GroupError::InconsistentGroupProtocol => INCONSISTENT_GROUP_PROTOCOL,
        GroupError::RebalanceInProgress => REBALANCE_IN_PROGRESS,
        GroupError::MemberIdRequired => MEMBER_ID_REQUIRED,
        GroupError::GroupMaxSizeReached => GROUP_MAX_SIZE_REACHED,
        GroupError::FencedInstanceId => FENCED_INSTANCE_ID,
        GroupError::GroupIdNotFound => GROUP_ID_NOT_FOUND,
        GroupError::NonEmptyGroup => NON_EMPTY_GROUP,
        GroupError::GroupSubscribedToTopic => GROUP_SUBSCRIBED_TO_TOPIC,
        GroupError::OffsetMetadataTooLarge => OFFSET_METADATA_TOO_LARGE,
        GroupError::FencedMemberEpoch => FENCED_MEMBER_EPOCH,
        GroupError::StaleMemberEpoch => STALE_MEMBER_EPOCH,
        GroupError::UnreleasedInstanceId => UNRELEASED_INSTANCE_ID,
        GroupError::UnsupportedAssignor => UNSUPPORTED_ASSIGNOR,
        GroupError::InvalidRegularExpression(_) => INVALID_REGULAR_EXPRESSION,
        GroupError::InvalidRequest(_) => INVALID_REQUEST,
        GroupError::Storage(_) => {
            warn!(%context, error = %err, "__consumer_offsets write failed");
            COORDINATOR_NOT_AVAILABLE
        }
    };
    KafkaError::new(code, err.to_string())
}

/// The fallback: UNKNOWN_SERVER_ERROR plus a warning with context.
pub fn unknown(err: &dyn std::fmt::Display, context: &str) -> KafkaError {
    warn!(%context, error = %err, "unmapped internal error");
    KafkaError::new(UNKNOWN_SERVER_ERROR, err.to_string())
}
