//! What brokers ask the active controller, and what it answers: Kafka's broker-to-controller
//! requests (BrokerRegistration, BrokerHeartbeat, AlterPartition, AllocateProducerIds) and the admin
//! requests every broker forwards to the controller (CreateTopics, DeleteTopics, CreatePartitions,
//! configs, ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments), in our own
//! serde encoding on the controller listener.
//!
//! The front end translates wire requests into these and [`ControllerError`] back into Kafka error
//! codes; nothing here knows the wire format.

use std::collections::BTreeMap;

use millrace_cluster::config::{ConfigChange, ConfigOp, TopicConfigs};
use millrace_cluster::image::PartitionRegistration;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A request to the active controller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ControllerRequest {
    /// [BrokerRegistration] A broker process announces itself (a new incarnation per start).
    RegisterBroker {
        node_id: i32,
        incarnation_id: Uuid,
        host: String,
        port: u16,
        rack: Option<String>,
        /// The previous run ended cleanly, or every acknowledged write was fsynced before its
        /// acknowledgement (KIP-966's unclean-shutdown rule protects unflushed data only).
        clean_shutdown: bool,
    },
    /// [BrokerHeartbeat]
    BrokerHeartbeat {
        node_id: i32,
        broker_epoch: i64,
        /// The highest metadata offset the broker has applied.
        metadata_offset: u64,
        /// The broker is not ready to be unfenced (still loading).
        want_fence: bool,
        /// Controlled shutdown: move my leaderships away, then tell me to stop.
        want_shutdown: bool,
    },
    /// [CreateTopics]
    CreateTopics {
        topics: Vec<TopicSpec>,
        validate_only: bool,
    },
    /// [DeleteTopics] by name.
    DeleteTopics { names: Vec<String> },
    /// [CreatePartitions]
    CreatePartitions {
        topics: Vec<PartitionsSpec>,
        validate_only: bool,
    },
    /// [AlterConfigs] (full replace) for one topic.
    SetTopicConfigs {
        name: String,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    },
    /// [IncrementalAlterConfigs] for one topic.
    AlterTopicConfigs {
        name: String,
        changes: Vec<ConfigChangeSpec>,
        validate_only: bool,
    },
    /// [AllocateProducerIds]
    AllocateProducerIds { node_id: i32, broker_epoch: i64 },
    /// [AlterPartition] A leader proposes a new ISR (KIP-497, KIP-903 broker epochs).
    AlterPartition {
        node_id: i32,
        broker_epoch: i64,
        topic_id: Uuid,
        partition: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        /// (broker id, broker epoch or -1) of each proposed ISR member.
        new_isr: Vec<(i32, i64)>,
    },
    /// [ElectLeaders] `None` = every partition.
    ElectLeaders {
        election: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
    },
    /// [AlterPartitionReassignments] (KIP-455) Start, replace or cancel reassignments.
    AlterPartitionReassignments { topics: Vec<ReassignTopicSpec> },
    /// [ListPartitionReassignments] `None` = every reassignment in progress; otherwise the given
    /// partitions of the given topics (unknown ones are left out, as Kafka does).
    ListPartitionReassignments {
        topics: Option<Vec<(String, Vec<i32>)>>,
    },
}

/// AlterPartitionReassignments for one topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReassignTopicSpec {
    pub name: String,
    /// (partition, target replicas); `None` cancels the reassignment in progress.
    pub partitions: Vec<(i32, Option<Vec<i32>>)>,
}

/// One partition's reassignment in progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OngoingReassignment {
    pub partition: i32,
    /// The target followed by the replicas being removed.
    pub replicas: Vec<i32>,
    pub adding_replicas: Vec<i32>,
    pub removing_replicas: Vec<i32>,
}

/// A topic as CreateTopics asks for it; `None` = the broker default (Kafka's -1).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: Option<i32>,
    pub replication_factor: Option<i16>,
    /// Manual assignment: partition index → broker ids. Empty = let the controller place.
    pub assignments: BTreeMap<i32, Vec<i32>>,
    pub configs: BTreeMap<String, String>,
}

/// CreatePartitions for one topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionsSpec {
    pub name: String,
    pub count: i32,
    /// Assignments of the new partitions, in order (None = let the controller place).
    pub assignments: Option<Vec<Vec<i32>>>,
}

/// One IncrementalAlterConfigs change (Kafka's operation codes 0..=3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigChangeSpec {
    pub name: String,
    pub op: i8,
    pub value: Option<String>,
}

impl ConfigChangeSpec {
    pub fn to_change(&self) -> Option<ConfigChange> {
        Some(ConfigChange {
            name: self.name.clone(),
            op: ConfigOp::from_code(self.op)?,
            value: self.value.clone(),
        })
    }
}

/// ElectLeaders' election type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ElectionType {
    Preferred,
    Unclean,
}

/// The controller's answer to one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ControllerResponse {
    Registered {
        broker_epoch: i64,
    },
    Heartbeat {
        is_caught_up: bool,
        is_fenced: bool,
        should_shut_down: bool,
    },
    CreateTopics {
        results: Vec<(String, Result<CreatedTopic, ControllerError>)>,
    },
    DeleteTopics {
        results: Vec<(String, Result<Uuid, ControllerError>)>,
    },
    CreatePartitions {
        results: Vec<(String, Result<(), ControllerError>)>,
    },
    Configs {
        result: Result<(), ControllerError>,
    },
    ProducerIds {
        first_producer_id: i64,
        count: i64,
    },
    AlterPartition {
        result: Result<PartitionRegistration, ControllerError>,
    },
    ElectLeaders {
        results: Vec<((String, i32), Result<(), ControllerError>)>,
    },
    /// Per topic of the request, in order: (partition, result) in request order.
    AlterPartitionReassignments {
        results: Vec<(String, PartitionResults)>,
    },
    /// Topics with reassignments in progress, by name.
    ListPartitionReassignments {
        topics: Vec<(String, Vec<OngoingReassignment>)>,
    },
    /// The request as a whole was refused.
    Error {
        error: ControllerError,
    },
}

/// (partition, result) per partition of one topic, in request order.
pub type PartitionResults = Vec<(i32, Result<(), ControllerError>)>;

/// A topic CreateTopics made (or would make, with validate_only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreatedTopic {
    pub topic_id: Uuid,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: TopicConfigs,
}

/// Why the controller refused something; each maps to one Kafka error code at the edge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ControllerError {
    /// This node is not the active controller (Kafka's NOT_CONTROLLER, 41).
    #[error("this node is not the active controller")]
    NotController { leader: Option<i32> },
    #[error("{0}")]
    InvalidTopic(String),
    #[error("Topic '{0}' already exists.")]
    TopicAlreadyExists(String),
    #[error("This server does not host this topic-partition: {0}")]
    UnknownTopicOrPartition(String),
    #[error("{0}")]
    InvalidPartitions(String),
    #[error("{0}")]
    InvalidReplicationFactor(String),
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    #[error("{0}")]
    InvalidConfig(String),
    #[error("Topic deletion is disabled.")]
    TopicDeletionDisabled,
    /// STALE_BROKER_EPOCH (77)
    #[error("stale broker epoch")]
    StaleBrokerEpoch,
    /// DUPLICATE_BROKER_REGISTRATION (101)
    #[error("{0}")]
    DuplicateBrokerRegistration(String),
    /// FENCED_LEADER_EPOCH (74)
    #[error("fenced leader epoch")]
    FencedLeaderEpoch,
    /// INVALID_UPDATE_VERSION (95): the partition epoch moved.
    #[error("partition epoch mismatch")]
    InvalidUpdateVersion,
    /// INELIGIBLE_REPLICA (107): a proposed ISR member is fenced, shutting down or stale.
    #[error("{0}")]
    IneligibleReplica(String),
    /// NOT_LEADER_OR_FOLLOWER (6)
    #[error("not the leader")]
    NotLeaderOrFollower,
    /// INVALID_REQUEST (42)
    #[error("{0}")]
    InvalidRequest(String),
    /// ELECTION_NOT_NEEDED (84)
    #[error("Leader election not needed for topic partition.")]
    ElectionNotNeeded,
    /// PREFERRED_LEADER_NOT_AVAILABLE (80)
    #[error("The preferred leader was not available.")]
    PreferredLeaderNotAvailable,
    /// ELIGIBLE_LEADERS_NOT_AVAILABLE (83)
    #[error("Eligible topic partition leaders are not available.")]
    EligibleLeadersNotAvailable,
    /// NO_REASSIGNMENT_IN_PROGRESS (85): a cancel of a partition that is not being reassigned.
    #[error("No partition reassignment is in progress.")]
    NoReassignmentInProgress,
    /// POLICY_VIOLATION (44): the request would write more records than one decision may.
    #[error("{0}")]
    PolicyViolation(String),
    /// REQUEST_TIMED_OUT (7): the decision was not committed in time (outcome unknown).
    #[error("{0}")]
    Timeout(String),
    /// UNKNOWN_SERVER_ERROR (-1)
    #[error("{0}")]
    Internal(String),
}

impl ControllerRequest {
    /// Encodes for the controller listener.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("undecodable controller request: {e}"))
    }
}

impl ControllerResponse {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("undecodable controller response: {e}"))
    }
}
