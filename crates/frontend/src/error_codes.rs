//! Kafka error codes, their names ([`error_name`], the labels of the request-error metrics), and
//! the one place that maps Millrace's internal errors onto them.
//!
//! Anything without a specific mapping becomes UNKNOWN_SERVER_ERROR with a `warn!` naming the
//! context, so that an unmapped case shows up in the logs instead of as a silent wrong answer.

use millrace_controller::ControllerError;
use millrace_groups::GroupError;
use millrace_replication::{AckError, PartitionError, ReplicaError};
use millrace_store::{AppendError, ReadError, StoreError};
use tracing::{debug, warn};

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
pub const LOG_DIR_NOT_FOUND: i16 = 57;
pub const REPLICA_NOT_AVAILABLE: i16 = 9;
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
pub const BROKER_ID_NOT_REGISTERED: i16 = 102;
pub const UNSUPPORTED_COMPRESSION_TYPE: i16 = 76;
pub const INVALID_RECORD: i16 = 87;
pub const INVALID_TIMESTAMP: i16 = 32;
pub const TOPIC_DELETION_DISABLED: i16 = 73;
pub const PRINCIPAL_DESERIALIZATION_FAILURE: i16 = 97;
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
pub const REBOOTSTRAP_REQUIRED: i16 = 129;

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
        // A full disk refuses every produce until space is freed: no warning per request (it
        // would flood the log); `/ready`, the free-space gauges and the per-code error counter
        // show it.
        StoreError::DiskFull { .. } | StoreError::UploadBacklog { .. } => {
            debug!(%context, error = %err, "disk full or upload backlog full");
            KafkaError::new(KAFKA_STORAGE_ERROR, err.to_string())
        }
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
        ControllerError::BrokerIdNotRegistered(_) => BROKER_ID_NOT_REGISTERED,
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
        GroupError::GroupIdNotFound | GroupError::GroupIdNotFoundWith(_) => GROUP_ID_NOT_FOUND,
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

/// Kafka's name for an error code (`Errors.name()`, e.g. 6 → `NOT_LEADER_OR_FOLLOWER`), for every
/// code `kafka_protocol::error::ResponseError` knows, plus 0 → `NONE`; `UNKNOWN` for any other.
pub fn error_name(code: i16) -> &'static str {
    match code {
        0 => "NONE",
        -1 => "UNKNOWN_SERVER_ERROR",
        1 => "OFFSET_OUT_OF_RANGE",
        2 => "CORRUPT_MESSAGE",
        3 => "UNKNOWN_TOPIC_OR_PARTITION",
        4 => "INVALID_FETCH_SIZE",
        5 => "LEADER_NOT_AVAILABLE",
        6 => "NOT_LEADER_OR_FOLLOWER",
        7 => "REQUEST_TIMED_OUT",
        8 => "BROKER_NOT_AVAILABLE",
        9 => "REPLICA_NOT_AVAILABLE",
        10 => "MESSAGE_TOO_LARGE",
        11 => "STALE_CONTROLLER_EPOCH",
        12 => "OFFSET_METADATA_TOO_LARGE",
        13 => "NETWORK_EXCEPTION",
        14 => "COORDINATOR_LOAD_IN_PROGRESS",
        15 => "COORDINATOR_NOT_AVAILABLE",
        16 => "NOT_COORDINATOR",
        17 => "INVALID_TOPIC_EXCEPTION",
        18 => "RECORD_LIST_TOO_LARGE",
        19 => "NOT_ENOUGH_REPLICAS",
        20 => "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        21 => "INVALID_REQUIRED_ACKS",
        22 => "ILLEGAL_GENERATION",
        23 => "INCONSISTENT_GROUP_PROTOCOL",
        24 => "INVALID_GROUP_ID",
        25 => "UNKNOWN_MEMBER_ID",
        26 => "INVALID_SESSION_TIMEOUT",
        27 => "REBALANCE_IN_PROGRESS",
        28 => "INVALID_COMMIT_OFFSET_SIZE",
        29 => "TOPIC_AUTHORIZATION_FAILED",
        30 => "GROUP_AUTHORIZATION_FAILED",
        31 => "CLUSTER_AUTHORIZATION_FAILED",
        32 => "INVALID_TIMESTAMP",
        33 => "UNSUPPORTED_SASL_MECHANISM",
        34 => "ILLEGAL_SASL_STATE",
        35 => "UNSUPPORTED_VERSION",
        36 => "TOPIC_ALREADY_EXISTS",
        37 => "INVALID_PARTITIONS",
        38 => "INVALID_REPLICATION_FACTOR",
        39 => "INVALID_REPLICA_ASSIGNMENT",
        40 => "INVALID_CONFIG",
        41 => "NOT_CONTROLLER",
        42 => "INVALID_REQUEST",
        43 => "UNSUPPORTED_FOR_MESSAGE_FORMAT",
        44 => "POLICY_VIOLATION",
        45 => "OUT_OF_ORDER_SEQUENCE_NUMBER",
        46 => "DUPLICATE_SEQUENCE_NUMBER",
        47 => "INVALID_PRODUCER_EPOCH",
        48 => "INVALID_TXN_STATE",
        49 => "INVALID_PRODUCER_ID_MAPPING",
        50 => "INVALID_TRANSACTION_TIMEOUT",
        51 => "CONCURRENT_TRANSACTIONS",
        52 => "TRANSACTION_COORDINATOR_FENCED",
        53 => "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        54 => "SECURITY_DISABLED",
        55 => "OPERATION_NOT_ATTEMPTED",
        56 => "KAFKA_STORAGE_ERROR",
        57 => "LOG_DIR_NOT_FOUND",
        58 => "SASL_AUTHENTICATION_FAILED",
        59 => "UNKNOWN_PRODUCER_ID",
        60 => "REASSIGNMENT_IN_PROGRESS",
        61 => "DELEGATION_TOKEN_AUTH_DISABLED",
        62 => "DELEGATION_TOKEN_NOT_FOUND",
        63 => "DELEGATION_TOKEN_OWNER_MISMATCH",
        64 => "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED",
        65 => "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
        66 => "DELEGATION_TOKEN_EXPIRED",
        67 => "INVALID_PRINCIPAL_TYPE",
        68 => "NON_EMPTY_GROUP",
        69 => "GROUP_ID_NOT_FOUND",
        70 => "FETCH_SESSION_ID_NOT_FOUND",
        71 => "INVALID_FETCH_SESSION_EPOCH",
        72 => "LISTENER_NOT_FOUND",
        73 => "TOPIC_DELETION_DISABLED",
        74 => "FENCED_LEADER_EPOCH",
        75 => "UNKNOWN_LEADER_EPOCH",
        76 => "UNSUPPORTED_COMPRESSION_TYPE",
        77 => "STALE_BROKER_EPOCH",
        78 => "OFFSET_NOT_AVAILABLE",
        79 => "MEMBER_ID_REQUIRED",
        80 => "PREFERRED_LEADER_NOT_AVAILABLE",
        81 => "GROUP_MAX_SIZE_REACHED",
        82 => "FENCED_INSTANCE_ID",
        83 => "ELIGIBLE_LEADERS_NOT_AVAILABLE",
        84 => "ELECTION_NOT_NEEDED",
        85 => "NO_REASSIGNMENT_IN_PROGRESS",
        86 => "GROUP_SUBSCRIBED_TO_TOPIC",
        87 => "INVALID_RECORD",
        88 => "UNSTABLE_OFFSET_COMMIT",
        89 => "THROTTLING_QUOTA_EXCEEDED",
        90 => "PRODUCER_FENCED",
        91 => "RESOURCE_NOT_FOUND",
        92 => "DUPLICATE_RESOURCE",
        93 => "UNACCEPTABLE_CREDENTIAL",
        94 => "INCONSISTENT_VOTER_SET",
        95 => "INVALID_UPDATE_VERSION",
        96 => "FEATURE_UPDATE_FAILED",
        97 => "PRINCIPAL_DESERIALIZATION_FAILURE",
        98 => "SNAPSHOT_NOT_FOUND",
        99 => "POSITION_OUT_OF_RANGE",
        100 => "UNKNOWN_TOPIC_ID",
        101 => "DUPLICATE_BROKER_REGISTRATION",
        102 => "BROKER_ID_NOT_REGISTERED",
        103 => "INCONSISTENT_TOPIC_ID",
        104 => "INCONSISTENT_CLUSTER_ID",
        105 => "TRANSACTIONAL_ID_NOT_FOUND",
        106 => "FETCH_SESSION_TOPIC_ID_ERROR",
        107 => "INELIGIBLE_REPLICA",
        108 => "NEW_LEADER_ELECTED",
        109 => "OFFSET_MOVED_TO_TIERED_STORAGE",
        110 => "FENCED_MEMBER_EPOCH",
        111 => "UNRELEASED_INSTANCE_ID",
        112 => "UNSUPPORTED_ASSIGNOR",
        113 => "STALE_MEMBER_EPOCH",
        114 => "MISMATCHED_ENDPOINT_TYPE",
        115 => "UNSUPPORTED_ENDPOINT_TYPE",
        116 => "UNKNOWN_CONTROLLER_ID",
        117 => "UNKNOWN_SUBSCRIPTION_ID",
        118 => "TELEMETRY_TOO_LARGE",
        119 => "INVALID_REGISTRATION",
        120 => "TRANSACTION_ABORTABLE",
        121 => "INVALID_RECORD_STATE",
        122 => "SHARE_SESSION_NOT_FOUND",
        123 => "INVALID_SHARE_SESSION_EPOCH",
        124 => "FENCED_STATE_EPOCH",
        125 => "INVALID_VOTER_KEY",
        126 => "DUPLICATE_VOTER",
        127 => "VOTER_NOT_FOUND",
        128 => "INVALID_REGULAR_EXPRESSION",
        129 => "REBOOTSTRAP_REQUIRED",
        130 => "STREAMS_INVALID_TOPOLOGY",
        131 => "STREAMS_INVALID_TOPOLOGY_EPOCH",
        132 => "STREAMS_TOPOLOGY_FENCED",
        133 => "SHARE_SESSION_LIMIT_REACHED",
        _ => "UNKNOWN",
    }
}

/// Whether Kafka marks `code` retriable (a client may try again: NOT_LEADER_OR_FOLLOWER,
/// REQUEST_TIMED_OUT, …).
pub fn is_retriable(code: i16) -> bool {
    kafka_protocol::error::ResponseError::try_from_code(code).is_some_and(|e| e.is_retriable())
}

#[cfg(test)]
mod tests {
    use kafka_protocol::error::ResponseError;

    use super::*;

    #[test]
    fn error_name_knows_kafka_names() {
        assert_eq!(error_name(6), "NOT_LEADER_OR_FOLLOWER");
        assert_eq!(error_name(3), "UNKNOWN_TOPIC_OR_PARTITION");
        assert_eq!(error_name(-1), "UNKNOWN_SERVER_ERROR");
        assert_eq!(error_name(87), "INVALID_RECORD");
        assert_eq!(error_name(17), "INVALID_TOPIC_EXCEPTION");
        assert_eq!(error_name(56), "KAFKA_STORAGE_ERROR");
        assert_eq!(error_name(0), "NONE");
        assert_eq!(error_name(9999), "UNKNOWN");
        assert_eq!(error_name(-2), "UNKNOWN");
        assert_eq!(error_name(i16::MIN), "UNKNOWN");
    }

    /// The table covers exactly the codes the vendored `ResponseError` knows, under the same names.
    #[test]
    fn error_name_matches_response_error() {
        for code in i16::MIN..=i16::MAX {
            let Some(error) = ResponseError::try_from_code(code) else {
                assert_eq!(error_name(code), "NONE");
                continue;
            };
            if let ResponseError::Unknown(_) = error {
                assert_eq!(error_name(code), "UNKNOWN", "code {code}");
                continue;
            }
            let mut expected = String::new();
            for (i, c) in error.to_string().chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    expected.push('_');
                }
                expected.push(c.to_ascii_uppercase());
            }
            assert_eq!(error_name(code), expected, "code {code}");
        }
    }
}
