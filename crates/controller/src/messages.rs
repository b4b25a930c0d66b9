//! What brokers ask the active controller, and what it answers: Kafka's broker-to-controller
//! requests (BrokerRegistration, BrokerHeartbeat, AlterPartition, AllocateProducerIds) and the admin
//! requests every broker forwards to the controller (CreateTopics, DeleteTopics, CreatePartitions,
//! configs, ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments), in our own
//! serde encoding on the controller listener.
//!
//! The front end translates wire requests into these and [`ControllerError`] back into Kafka error
//! codes; nothing here knows the wire format.

use std::collections::BTreeMap;

use millrace_cluster::acl::{AclFilter, StandardAcl};
use millrace_cluster::config::{ConfigChange, ConfigOp, TopicConfigs};
use millrace_cluster::image::PartitionRegistration;
use millrace_cluster::listeners::ListenerAddress;
use millrace_cluster::records::EncodeError;
use millrace_cluster::remote_log::RemoteSegment;
use serde::{Deserialize, Serialize};

/// AlterPartitionReassignments' `allow_replication_factor_change` when a request leaves it out
/// (v0, and senders from before KIP-860): allowed, as Kafka's default.
fn allowed_by_default() -> bool {
    true
}

use crate::quorum::QuorumDescription;
use uuid::Uuid;

/// A request to the active controller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ControllerRequest {
    /// \[BrokerRegistration\] A broker process announces itself (a new incarnation per start).
    RegisterBroker {
        node_id: i32,
        incarnation_id: Uuid,
        host: String,
        port: u16,
        rack: Option<String>,
        /// The previous run ended cleanly, or every acknowledged write was fsynced before its
        /// acknowledgement (KIP-966's unclean-shutdown rule protects unflushed data only).
        clean_shutdown: bool,
        /// Every client listener (`host`/`port` are the inter-broker one).
        #[serde(default)]
        listeners: Vec<ListenerAddress>,
    },
    /// \[BrokerHeartbeat\]
    BrokerHeartbeat {
        node_id: i32,
        broker_epoch: i64,
        /// The highest metadata offset the broker has applied.
        metadata_offset: u64,
        /// The broker is not ready to be unfenced (still loading).
        want_fence: bool,
        /// Controlled shutdown: move my leaderships away, then tell me to stop.
        want_shutdown: bool,
        /// This broker's replicas on a log dir that failed (Kafka's `OfflineLogDirs`, KIP-858,
        /// given by partition since the image holds no directory assignments): (topic id,
        /// partition). Every heartbeat carries the whole set; at most
        /// `OFFLINE_REPLICAS_PER_HEARTBEAT_MAX`.
        #[serde(default)]
        offline_replicas: Vec<(Uuid, i32)>,
    },
    /// \[CreateTopics\]
    CreateTopics {
        topics: Vec<TopicSpec>,
        validate_only: bool,
    },
    /// \[DeleteTopics\] by name.
    DeleteTopics { names: Vec<String> },
    /// \[CreatePartitions\]
    CreatePartitions {
        topics: Vec<PartitionsSpec>,
        validate_only: bool,
    },
    /// \[AlterUserScramCredentials\] Deletions (user, Kafka mechanism code) and upsertions, whose
    /// keys the forwarding broker derived from the salted password.
    AlterUserScramCredentials {
        deletions: Vec<(String, i8)>,
        upsertions: Vec<ScramUpsertion>,
    },
    /// \[CreateAcls\] The ACLs to add, each already checked by the broker.
    CreateAcls { acls: Vec<StandardAcl> },
    /// \[DeleteAcls\] The filters whose matching ACLs to remove.
    DeleteAcls { filters: Vec<AclFilter> },
    /// \[AlterClientQuotas\] Per entity (type, name; `None` = default) its key changes
    /// (`None` = remove).
    AlterClientQuotas {
        entries: Vec<QuotaAlteration>,
        validate_only: bool,
    },
    /// \[AlterConfigs\] (full replace) for one topic.
    SetTopicConfigs {
        name: String,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    },
    /// \[IncrementalAlterConfigs\] for one topic.
    AlterTopicConfigs {
        name: String,
        changes: Vec<ConfigChangeSpec>,
        validate_only: bool,
    },
    /// \[AlterConfigs\] (full replace) for one GROUP resource.
    SetGroupConfigs {
        group_id: String,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    },
    /// \[IncrementalAlterConfigs\] for one GROUP resource (the group need not exist).
    AlterGroupConfigs {
        group_id: String,
        changes: Vec<ConfigChangeSpec>,
        validate_only: bool,
    },
    /// \[AlterConfigs\] (full replace) for one BROKER resource: `broker` `None` is the
    /// cluster default (resource name "").
    SetBrokerConfigs {
        broker: Option<i32>,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    },
    /// \[IncrementalAlterConfigs\] for one BROKER resource.
    AlterBrokerConfigs {
        broker: Option<i32>,
        changes: Vec<ConfigChangeSpec>,
        validate_only: bool,
    },
    /// \[AllocateProducerIds\]
    AllocateProducerIds { node_id: i32, broker_epoch: i64 },
    /// \[AlterPartition\] A leader proposes a new ISR (KIP-497, KIP-903 broker epochs).
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
    /// \[AlterPartition\] ISR changes of several partitions the broker leads, each decided as
    /// `AlterPartition` is, committed together (Kafka's AlterPartitionManager sends every pending
    /// change in one request). At most `ISR_CHANGES_PER_REQUEST_MAX`.
    AlterPartitions {
        node_id: i32,
        broker_epoch: i64,
        changes: Vec<IsrChange>,
    },
    /// Tiered storage (decision 0073): a leader commits an uploaded remote segment, or lets go
    /// of remote segments past total retention, fenced by its broker epoch and leader epoch.
    RemoteLog {
        node_id: i32,
        broker_epoch: i64,
        change: RemoteLogChange,
    },
    /// \[ElectLeaders\] `None` = every partition.
    ElectLeaders {
        election: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
    },
    /// \[AlterPartitionReassignments\] (KIP-455) Start, replace or cancel reassignments;
    /// `allow_replication_factor_change` false (v1, KIP-860) refuses a target of another size.
    AlterPartitionReassignments {
        topics: Vec<ReassignTopicSpec>,
        #[serde(default = "allowed_by_default")]
        allow_replication_factor_change: bool,
    },
    /// \[DescribeQuorum\] The quorum leader's view of every voter and observer; answered by the
    /// service of the node that leads, from its quorum, not by the decision loop.
    DescribeQuorum,
    /// \[UnregisterBroker\] Removes a broker's registration (a broker taken out of the cluster);
    /// a live one registers again at its next heartbeat.
    UnregisterBroker { node_id: i32 },
    /// \[ListPartitionReassignments\] `None` = every reassignment in progress; otherwise the given
    /// partitions of the given topics (unknown ones are left out, as Kafka does).
    ListPartitionReassignments {
        topics: Option<Vec<(String, Vec<i32>)>>,
    },
}

/// One partition's proposed ISR in an `AlterPartitions` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IsrChange {
    pub topic_id: Uuid,
    pub partition: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// (broker id, broker epoch or -1) of each proposed ISR member.
    pub new_isr: Vec<(i32, i64)>,
}

/// One change of a tiered partition's remote log (`ControllerRequest::RemoteLog`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum RemoteLogChange {
    /// The leader in `leader_epoch` uploaded `segment`; commit it if it follows the remote log.
    Commit {
        topic_id: Uuid,
        partition: i32,
        leader_epoch: i32,
        segment: RemoteSegment,
    },
    /// The leader in `leader_epoch` lets go of the remote segments ending at or below
    /// `through_end_offset`; the remote log then starts at `log_start_offset`.
    Delete {
        topic_id: Uuid,
        partition: i32,
        leader_epoch: i32,
        through_end_offset: i64,
        log_start_offset: i64,
    },
    /// A deleted topic's remote objects are gone.
    Purged { topic_id: Uuid },
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
    #[serde(deserialize_with = "int_keyed")]
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
    /// Per change of an `AlterPartitions` request, in order.
    AlterPartitions {
        results: Vec<Result<PartitionRegistration, ControllerError>>,
    },
    ElectLeaders {
        results: Vec<((String, i32), Result<(), ControllerError>)>,
    },
    /// Per topic of the request, in order: (partition, result) in request order.
    AlterPartitionReassignments {
        results: Vec<(String, PartitionResults)>,
    },
    /// UnregisterBroker's answer: the registration is gone from the committed image.
    Unregistered,
    /// DescribeQuorum's answer.
    Quorum {
        description: QuorumDescription,
    },
    /// Topics with reassignments in progress, by name.
    ListPartitionReassignments {
        topics: Vec<(String, Vec<OngoingReassignment>)>,
    },
    /// Per user, in the order users first appear in the request.
    AlterUserScramCredentials {
        results: Vec<(String, Result<(), ControllerError>)>,
    },
    /// Per ACL of the request, in order.
    CreateAcls {
        results: Vec<Result<(), ControllerError>>,
    },
    /// Per filter of the request, in order: the ACLs it removed, or why it removed none.
    DeleteAcls {
        results: Vec<Result<Vec<StandardAcl>, ControllerError>>,
    },
    /// A `RemoteLog` change was committed (or refused).
    RemoteLog {
        result: Result<(), ControllerError>,
    },
    /// Per entry of the request, in order.
    AlterClientQuotas {
        results: Vec<Result<(), ControllerError>>,
    },
    /// The request as a whole was refused.
    Error {
        error: ControllerError,
    },
}

/// One credential to add or replace: Kafka's mechanism code (checked by the controller), and the
/// keys derived from the salted password (empty when it was empty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramUpsertion {
    pub name: String,
    pub mechanism: i8,
    pub iterations: i32,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

/// One entity's quota changes in AlterClientQuotas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaAlteration {
    pub entity: Vec<(String, Option<String>)>,
    pub changes: Vec<(String, Option<f64>)>,
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
    /// BROKER_ID_NOT_REGISTERED (102)
    #[error("Broker ID {0} is not currently registered")]
    BrokerIdNotRegistered(i32),
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
    /// RESOURCE_NOT_FOUND (91)
    #[error("{0}")]
    ResourceNotFound(String),
    /// DUPLICATE_RESOURCE (92)
    #[error("{0}")]
    DuplicateResource(String),
    /// UNACCEPTABLE_CREDENTIAL (93)
    #[error("{0}")]
    UnacceptableCredential(String),
    /// UNSUPPORTED_SASL_MECHANISM (33)
    #[error("{0}")]
    UnsupportedSaslMechanism(String),
    /// UNKNOWN_SERVER_ERROR (-1)
    #[error("{0}")]
    Internal(String),
}

/// Reads a `BTreeMap<i32, V>` that JSON holds as an object. serde_json writes the keys as strings
/// and reads them back as integers, except inside an internally tagged enum such as
/// [`ControllerRequest`]: serde buffers the variant before typing it, and the buffered key "0" is
/// no longer accepted as an `i32` (every forwarded CreateTopics with a manual assignment was
/// refused as undecodable). So the keys are read as strings and parsed here.
fn int_keyed<'de, D, V>(deserializer: D) -> Result<BTreeMap<i32, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    V: Deserialize<'de>,
{
    use serde::de::Error;
    let by_text = BTreeMap::<String, V>::deserialize(deserializer)?;
    let mut out = BTreeMap::new();
    for (key, value) in by_text {
        let index: i32 = key
            .parse()
            .map_err(|_| D::Error::custom(format!("map key {key:?} is not an i32")))?;
        if out.insert(index, value).is_some() {
            return Err(D::Error::custom(format!("map key {index} appears twice")));
        }
    }
    Ok(out)
}

impl ControllerRequest {
    /// Encodes for the controller listener.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        Ok(serde_json::to_vec(self)?)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("undecodable controller request: {e}"))
    }
}

impl ControllerResponse {
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        Ok(serde_json::to_vec(self)?)
    }

    /// The bytes of this answer for the controller listener; one that cannot be encoded (a bug)
    /// is logged and answered as an internal error instead of as nothing.
    pub fn to_wire(&self) -> Vec<u8> {
        match self.encode() {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::error!(error = %e, "controller response not encodable; answering an internal error");
                let error = ControllerError::Internal(e.to_string());
                // An error carrying a string always encodes; empty bytes only if serde broke.
                serde_json::to_vec(&ControllerResponse::Error { error }).unwrap_or_default()
            }
        }
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("undecodable controller response: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every forwarded request must decode on the controller as it was encoded on the broker.
    fn check_round_trip(request: ControllerRequest) {
        let decoded = ControllerRequest::decode(&request.encode().expect("encodes"));
        assert_eq!(decoded.as_ref(), Ok(&request), "{request:?}");
    }

    #[test]
    fn forwarded_requests_round_trip() {
        check_round_trip(ControllerRequest::CreateTopics {
            topics: vec![TopicSpec {
                name: "t".into(),
                assignments: BTreeMap::from([(0, vec![1, 2]), (1, vec![2, 3]), (-7, vec![])]),
                configs: BTreeMap::from([("cleanup.policy".into(), "compact".into())]),
                ..TopicSpec::default()
            }],
            validate_only: false,
        });
        check_round_trip(ControllerRequest::ElectLeaders {
            election: ElectionType::Unclean,
            partitions: Some(vec![("t".into(), 0), ("u".into(), 3)]),
        });
        check_round_trip(ControllerRequest::AlterPartitions {
            node_id: 2,
            broker_epoch: 40,
            changes: vec![IsrChange {
                topic_id: Uuid::from_u128(9),
                partition: 3,
                leader_epoch: 1,
                partition_epoch: 4,
                new_isr: vec![(2, -1), (3, 17)],
            }],
        });
        check_round_trip(ControllerRequest::AlterPartitionReassignments {
            topics: vec![ReassignTopicSpec {
                name: "t".into(),
                partitions: vec![(0, Some(vec![2, 3])), (1, None)],
            }],
            allow_replication_factor_change: false,
        });
        check_round_trip(ControllerRequest::ListPartitionReassignments {
            topics: Some(vec![("t".into(), vec![0, 9])]),
        });
        check_round_trip(ControllerRequest::ListPartitionReassignments { topics: None });
    }

    #[test]
    fn a_partition_index_that_is_no_i32_is_refused() {
        for key in ["x", "2147483648", "1.5"] {
            let json = format!(
                r#"{{"type":"CreateTopics","validate_only":false,"topics":[{{"name":"t","partitions":null,"replication_factor":null,"assignments":{{"{key}":[1]}},"configs":{{}}}}]}}"#
            );
            let decoded = ControllerRequest::decode(json.as_bytes());
            assert!(
                matches!(&decoded, Err(e) if e.contains("is not an i32")),
                "{key}: {decoded:?}"
            );
        }
    }

    #[test]
    fn answers_round_trip() {
        let responses = [
            ControllerResponse::ElectLeaders {
                results: vec![
                    (("t".into(), 0), Ok(())),
                    (("t".into(), 1), Err(ControllerError::ElectionNotNeeded)),
                ],
            },
            ControllerResponse::AlterPartitionReassignments {
                results: vec![(
                    "t".into(),
                    vec![
                        (0, Ok(())),
                        (1, Err(ControllerError::NoReassignmentInProgress)),
                    ],
                )],
            },
            ControllerResponse::ListPartitionReassignments {
                topics: vec![(
                    "t".into(),
                    vec![OngoingReassignment {
                        partition: 0,
                        replicas: vec![2, 3, 1],
                        adding_replicas: vec![2, 3],
                        removing_replicas: vec![1],
                    }],
                )],
            },
        ];
        for response in responses {
            let decoded = ControllerResponse::decode(&response.encode().expect("encodes"));
            assert_eq!(decoded.as_ref(), Ok(&response));
        }
    }
}
