//! Which Kafka error codes a response carries, for the request-error metrics (Kafka's
//! `kafka.network:type=RequestMetrics,name=ErrorsPerSec,request=…,error=…`), and the one table of
//! Kafka error names those metrics are labelled with.
//!
//! [`ResponseErrors`] is implemented for every response type [`crate::dispatch`] encodes. Each
//! implementation visits the codes Kafka's `AbstractResponse.errorCounts()` for that response
//! would count, except that code 0 (NONE) is skipped here. [`error_name`] maps a code to Kafka's
//! `Errors` name without allocating.

use kafka_protocol::messages::{
    AddOffsetsToTxnResponse, AddPartitionsToTxnResponse, AlterClientQuotasResponse,
    AlterConfigsResponse, AlterPartitionReassignmentsResponse, AlterUserScramCredentialsResponse,
    ApiVersionsResponse, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatResponse,
    CreateAclsResponse, CreatePartitionsResponse, CreateTopicsResponse, DeleteAclsResponse,
    DeleteGroupsResponse, DeleteRecordsResponse, DeleteTopicsResponse, DescribeAclsResponse,
    DescribeClientQuotasResponse, DescribeClusterResponse, DescribeConfigsResponse,
    DescribeGroupsResponse, DescribeLogDirsResponse, DescribeProducersResponse,
    DescribeTopicPartitionsResponse, DescribeTransactionsResponse,
    DescribeUserScramCredentialsResponse, ElectLeadersResponse, EndTxnResponse, FetchResponse,
    FindCoordinatorResponse, HeartbeatResponse, IncrementalAlterConfigsResponse,
    InitProducerIdResponse, JoinGroupResponse, LeaveGroupResponse, ListConfigResourcesResponse,
    ListGroupsResponse, ListOffsetsResponse, ListPartitionReassignmentsResponse,
    ListTransactionsResponse, MetadataResponse, OffsetCommitResponse, OffsetDeleteResponse,
    OffsetFetchResponse, OffsetForLeaderEpochResponse, ProduceResponse, SaslAuthenticateResponse,
    SaslHandshakeResponse, SyncGroupResponse, TxnOffsetCommitResponse, WriteTxnMarkersResponse,
};

/// Every Kafka error code a response carries, for the request-error metrics (Kafka's ErrorsPerSec).
pub trait ResponseErrors {
    /// Calls `f` once per non-zero error code in the response: the top-level code and every
    /// per-topic / per-partition / per-group / per-member code, as Kafka's RequestChannel
    /// `errorCounts` would count them (Kafka counts every code including NONE; we skip 0).
    fn for_each_error(&self, f: &mut dyn FnMut(i16));
}

/// Passes `code` on unless it is NONE.
#[inline]
fn visit(code: i16, f: &mut dyn FnMut(i16)) {
    if code != 0 {
        f(code);
    }
}

impl ResponseErrors for ProduceResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for topic in &self.responses {
            for partition in &topic.partition_responses {
                visit(partition.error_code, f);
            }
        }
    }
}

impl ResponseErrors for FetchResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
        for topic in &self.responses {
            for partition in &topic.partitions {
                visit(partition.error_code, f);
            }
        }
    }
}

impl ResponseErrors for ListOffsetsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for topic in &self.topics {
            for partition in &topic.partitions {
                visit(partition.error_code, f);
            }
        }
    }
}

impl ResponseErrors for MetadataResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        // The top-level code exists from v13 (it is 0 below that).
        visit(self.error_code, f);
        for topic in &self.topics {
            visit(topic.error_code, f);
            for partition in &topic.partitions {
                visit(partition.error_code, f);
            }
        }
    }
}

impl ResponseErrors for FindCoordinatorResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        // As Kafka: v4+ carries one code per coordinator key and leaves the top level unused, so
        // the top-level code counts only when there are no per-key entries (v0-v3).
        if self.coordinators.is_empty() {
            visit(self.error_code, f);
        } else {
            for coordinator in &self.coordinators {
                visit(coordinator.error_code, f);
            }
        }
    }
}

impl ResponseErrors for ApiVersionsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
    }
}

impl ResponseErrors for SaslHandshakeResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
    }
}

impl ResponseErrors for AlterUserScramCredentialsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for r in &self.results {
            visit(r.error_code, f);
        }
    }
}

impl ResponseErrors for DescribeUserScramCredentialsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
        for r in &self.results {
            visit(r.error_code, f);
        }
    }
}

impl ResponseErrors for CreateAclsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for r in &self.results {
            visit(r.error_code, f);
        }
    }
}

impl ResponseErrors for DescribeAclsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
    }
}

impl ResponseErrors for DeleteAclsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for r in &self.filter_results {
            visit(r.error_code, f);
        }
    }
}

impl ResponseErrors for AlterClientQuotasResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for e in &self.entries {
            visit(e.error_code, f);
        }
    }
}

impl ResponseErrors for DescribeClientQuotasResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
    }
}

impl ResponseErrors for SaslAuthenticateResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
    }
}

impl ResponseErrors for CreateTopicsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        // `topic_config_error_code` (a v5+ tagged field explaining why `configs` is missing) is
        // not counted, as in Kafka's CreateTopicsResponse.errorCounts.
        for topic in &self.topics {
            visit(topic.error_code, f);
        }
    }
}

impl ResponseErrors for DeleteTopicsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for topic in &self.responses {
            visit(topic.error_code, f);
        }
    }
}

impl ResponseErrors for CreatePartitionsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for topic in &self.results {
            visit(topic.error_code, f);
        }
    }
}

impl ResponseErrors for DescribeClusterResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
    }
}

impl ResponseErrors for ListConfigResourcesResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
    }
}

impl ResponseErrors for InitProducerIdResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
    }
}

impl ResponseErrors for DescribeConfigsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for resource in &self.results {
            visit(resource.error_code, f);
        }
    }
}

impl ResponseErrors for AlterConfigsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for resource in &self.responses {
            visit(resource.error_code, f);
        }
    }
}

impl ResponseErrors for IncrementalAlterConfigsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for resource in &self.responses {
            visit(resource.error_code, f);
        }
    }
}

impl ResponseErrors for DeleteRecordsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for topic in &self.topics {
            for partition in &topic.partitions {
                visit(partition.error_code, f);
            }
        }
    }
}

impl ResponseErrors for OffsetForLeaderEpochResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for topic in &self.topics {
            for partition in &topic.partitions {
                visit(partition.error_code, f);
            }
        }
    }
}

impl ResponseErrors for DescribeLogDirsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        // The top-level code exists from v3 (it is 0 below that).
        visit(self.error_code, f);
        for dir in &self.results {
            visit(dir.error_code, f);
        }
    }
}

impl ResponseErrors for AddPartitionsToTxnResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
        for topic in &self.results_by_topic_v3_and_below {
            for partition in &topic.results_by_partition {
                visit(partition.partition_error_code, f);
            }
        }
    }
}

impl ResponseErrors for AddOffsetsToTxnResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
    }
}

impl ResponseErrors for TxnOffsetCommitResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for topic in &self.topics {
            for partition in &topic.partitions {
                visit(partition.error_code, f);
            }
        }
    }
}

impl ResponseErrors for EndTxnResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
    }
}

impl ResponseErrors for DescribeTransactionsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for state in &self.transaction_states {
            visit(state.error_code, f);
        }
    }
}

impl ResponseErrors for WriteTxnMarkersResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for marker in &self.markers {
            for topic in &marker.topics {
                for partition in &topic.partitions {
                    visit(partition.error_code, f);
                }
            }
        }
    }
}

impl ResponseErrors for ListTransactionsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
    }
}

impl ResponseErrors for DescribeProducersResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for topic in &self.topics {
            for partition in &topic.partitions {
                visit(partition.error_code, f);
            }
        }
    }
}

impl ResponseErrors for DescribeTopicPartitionsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for topic in &self.topics {
            visit(topic.error_code, f);
            for partition in &topic.partitions {
                visit(partition.error_code, f);
            }
        }
    }
}

impl ResponseErrors for JoinGroupResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        // Members carry no code of their own.
        visit(self.error_code, f);
    }
}

impl ResponseErrors for SyncGroupResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
    }
}

impl ResponseErrors for HeartbeatResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
    }
}

impl ResponseErrors for LeaveGroupResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
        // Per-member codes exist from v3 (batch leave).
        for member in &self.members {
            visit(member.error_code, f);
        }
    }
}

impl ResponseErrors for OffsetCommitResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for topic in &self.topics {
            for partition in &topic.partitions {
                visit(partition.error_code, f);
            }
        }
    }
}

impl ResponseErrors for OffsetFetchResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        // v0-v7: one group, top-level code (v2+) and `topics`; v8+: `groups`, each with its own
        // code and topics. A response fills one shape and leaves the other empty/zero.
        visit(self.error_code, f);
        for topic in &self.topics {
            for partition in &topic.partitions {
                visit(partition.error_code, f);
            }
        }
        for group in &self.groups {
            visit(group.error_code, f);
            for topic in &group.topics {
                for partition in &topic.partitions {
                    visit(partition.error_code, f);
                }
            }
        }
    }
}

impl ResponseErrors for ListGroupsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
    }
}

impl ResponseErrors for ConsumerGroupHeartbeatResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
    }
}

impl ResponseErrors for ConsumerGroupDescribeResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for group in &self.groups {
            visit(group.error_code, f);
        }
    }
}

impl ResponseErrors for DescribeGroupsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        // Members carry no code of their own.
        for group in &self.groups {
            visit(group.error_code, f);
        }
    }
}

impl ResponseErrors for DeleteGroupsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        for group in &self.results {
            visit(group.error_code, f);
        }
    }
}

impl ResponseErrors for OffsetDeleteResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
        for topic in &self.topics {
            for partition in &topic.partitions {
                visit(partition.error_code, f);
            }
        }
    }
}

impl ResponseErrors for ElectLeadersResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        // The top-level code exists from v1 (it is 0 in v0).
        visit(self.error_code, f);
        for topic in &self.replica_election_results {
            for partition in &topic.partition_result {
                visit(partition.error_code, f);
            }
        }
    }
}

impl ResponseErrors for AlterPartitionReassignmentsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        visit(self.error_code, f);
        for topic in &self.responses {
            for partition in &topic.partitions {
                visit(partition.error_code, f);
            }
        }
    }
}

impl ResponseErrors for ListPartitionReassignmentsResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        // Ongoing reassignments carry no code of their own.
        visit(self.error_code, f);
    }
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

/// A response that can carry `throttle_time_ms` (a client quota's throttle); the larger of two
/// throttles wins. SaslHandshake and SaslAuthenticate have no such field.
pub trait Throttled {
    fn throttle(&mut self, ms: i32);
}

macro_rules! throttled {
    ($($response:ty),+ $(,)?) => {
        $(impl Throttled for $response {
            fn throttle(&mut self, ms: i32) {
                self.throttle_time_ms = self.throttle_time_ms.max(ms);
            }
        })+
    };
}

throttled!(
    AlterClientQuotasResponse,
    AlterConfigsResponse,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    AlterPartitionReassignmentsResponse,
    AlterUserScramCredentialsResponse,
    ApiVersionsResponse,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
    CreateAclsResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteAclsResponse,
    DeleteGroupsResponse,
    DeleteRecordsResponse,
    DeleteTopicsResponse,
    DescribeAclsResponse,
    DescribeClientQuotasResponse,
    DescribeClusterResponse,
    DescribeConfigsResponse,
    DescribeGroupsResponse,
    DescribeLogDirsResponse,
    DescribeProducersResponse,
    DescribeTopicPartitionsResponse,
    DescribeTransactionsResponse,
    DescribeUserScramCredentialsResponse,
    ElectLeadersResponse,
    EndTxnResponse,
    FetchResponse,
    FindCoordinatorResponse,
    HeartbeatResponse,
    IncrementalAlterConfigsResponse,
    InitProducerIdResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListConfigResourcesResponse,
    ListGroupsResponse,
    ListOffsetsResponse,
    ListPartitionReassignmentsResponse,
    ListTransactionsResponse,
    MetadataResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    OffsetForLeaderEpochResponse,
    ProduceResponse,
    SyncGroupResponse,
    TxnOffsetCommitResponse,
);

impl Throttled for SaslHandshakeResponse {
    fn throttle(&mut self, _ms: i32) {}
}

impl Throttled for SaslAuthenticateResponse {
    fn throttle(&mut self, _ms: i32) {}
}

/// Inter-broker only, and Kafka exempts it from quotas.
impl Throttled for WriteTxnMarkersResponse {
    fn throttle(&mut self, _ms: i32) {}
}

#[cfg(test)]
mod tests {
    use kafka_protocol::error::ResponseError;
    use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::error_codes;

    fn codes(response: &dyn ResponseErrors) -> Vec<i16> {
        let mut seen = Vec::new();
        response.for_each_error(&mut |code| seen.push(code));
        seen
    }

    fn topic(name: &'static str) -> TopicName {
        TopicName(StrBytes::from_static_str(name))
    }

    #[test]
    fn produce_visits_only_the_failed_partition() {
        let response =
            ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
                .with_name(topic("t"))
                .with_partition_responses(vec![
                    PartitionProduceResponse::default()
                        .with_index(0)
                        .with_error_code(error_codes::NONE),
                    PartitionProduceResponse::default()
                        .with_index(1)
                        .with_error_code(error_codes::NOT_LEADER_OR_FOLLOWER),
                ])]);
        assert_eq!(codes(&response), vec![6]);
    }

    #[test]
    fn fetch_visits_top_level_then_partitions() {
        let response = FetchResponse::default()
            .with_error_code(error_codes::UNKNOWN_SERVER_ERROR)
            .with_responses(vec![FetchableTopicResponse::default()
                .with_topic(topic("t"))
                .with_partitions(vec![
                    PartitionData::default()
                        .with_partition_index(0)
                        .with_error_code(error_codes::OFFSET_OUT_OF_RANGE),
                    PartitionData::default().with_partition_index(1),
                ])]);
        assert_eq!(codes(&response), vec![-1, 1]);
    }

    #[test]
    fn join_group_visits_its_code() {
        let response = JoinGroupResponse::default().with_error_code(error_codes::UNKNOWN_MEMBER_ID);
        assert_eq!(codes(&response), vec![25]);
        assert!(codes(&JoinGroupResponse::default()).is_empty());
    }

    #[test]
    fn create_topics_visits_each_result_but_not_config_codes() {
        let response = CreateTopicsResponse::default().with_topics(vec![
            CreatableTopicResult::default()
                .with_name(topic("a"))
                .with_error_code(error_codes::TOPIC_ALREADY_EXISTS),
            CreatableTopicResult::default()
                .with_name(topic("b"))
                .with_topic_config_error_code(error_codes::UNKNOWN_SERVER_ERROR),
            CreatableTopicResult::default()
                .with_name(topic("c"))
                .with_error_code(error_codes::INVALID_REPLICATION_FACTOR),
        ]);
        assert_eq!(codes(&response), vec![36, 38]);
    }

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
