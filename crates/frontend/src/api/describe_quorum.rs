//! DescribeQuorum (key 55, v0-2; KIP-595, KIP-836, KIP-853): the metadata quorum as its leader
//! sees it, for `kafka-metadata-quorum.sh describe --status / --replication` and
//! `Admin.describeMetadataQuorum`. As in Kafka, a broker forwards it to the active controller,
//! whose quorum answers; CLUSTER Describe is required (CLUSTER_AUTHORIZATION_FAILED).
//!
//! Only `__cluster_metadata` partition 0 exists: a request naming anything else answers
//! UNKNOWN_TOPIC_OR_PARTITION at the top level, as Kafka's raft client does. Offsets are Raft
//! indexes made exclusive (`millrace_quorum::QuorumDescription`); a replica whose times the leader
//! has not seen answers -1. v2's directory ids are zero (Millrace's voters are numbered, not
//! directory-identified) and its `nodes` name each controller's listener `CONTROLLER` where the
//! node has one (a single node without a controller listener lists none).

use std::sync::Arc;

use kafka_protocol::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use kafka_protocol::messages::{BrokerId, DescribeQuorumRequest, DescribeQuorumResponse};
use millrace_cluster::acl::AclOperation;
use millrace_controller::{ControllerError, ControllerRequest, ControllerResponse, QuorumReplica};

use super::{forward, str_bytes, topic_name};
use crate::authz::Authz;
use crate::error_codes::{self, CLUSTER_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

/// The metadata log's topic, as Kafka names it.
pub const METADATA_TOPIC: &str = "__cluster_metadata";
/// How long a forwarded DescribeQuorum waits for the active controller (the request has no
/// timeout of its own).
const DESCRIBE_QUORUM_TIMEOUT_MS: i32 = 30_000;
/// The listener name given to controller endpoints in v2's `nodes`.
const CONTROLLER_LISTENER: &str = "CONTROLLER";

api_handler! {
    /// DescribeQuorum: its key, versions, handler and error codes, for [`crate::registry`].
    DescribeQuorum, versions 0..=2, DescribeQuorumRequest,
    |call, request| Reply::later(handle(call.ctx.clone(), call.authz, request, call.version)),
}

response_fields!(
    DescribeQuorumResponse:
    errors[error_code, topics[partitions[error_code]]],
    no throttle_time_ms
);

fn refused(code: i16, message: Option<String>) -> DescribeQuorumResponse {
    DescribeQuorumResponse::default()
        .with_error_code(code)
        .with_error_message(message.as_deref().map(str_bytes))
}

pub async fn handle(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: DescribeQuorumRequest,
    version: i16,
) -> DescribeQuorumResponse {
    if !authz.cluster(AclOperation::Describe) {
        return refused(CLUSTER_AUTHORIZATION_FAILED, None);
    }
    let metadata_partition_only = matches!(
        &request.topics[..],
        [t] if t.topic_name.0.as_str() == METADATA_TOPIC
            && matches!(&t.partitions[..], [p] if p.partition_index == 0)
    );
    if !metadata_partition_only {
        return refused(UNKNOWN_TOPIC_OR_PARTITION, None);
    }
    let answer = forward::forward(
        &ctx,
        ControllerRequest::DescribeQuorum,
        forward::timeout(DESCRIBE_QUORUM_TIMEOUT_MS),
    )
    .await;
    let d = match answer {
        Ok(ControllerResponse::Quorum { description }) => description,
        Ok(other) => {
            let e = ControllerError::Internal(format!("unexpected answer {other:?}"));
            let err = error_codes::from_controller(&e, "DescribeQuorum");
            return refused(err.code, err.message);
        }
        Err(e) => {
            let err = error_codes::from_controller(&e, "DescribeQuorum");
            return refused(err.code, err.message);
        }
    };
    let replica = |r: &QuorumReplica| {
        let mut s = ReplicaState::default()
            .with_replica_id(BrokerId(r.node_id))
            .with_log_end_offset(r.log_end_offset);
        if version >= 1 {
            s.last_fetch_timestamp = r.last_fetch_timestamp;
            s.last_caught_up_timestamp = r.last_caught_up_timestamp;
        }
        s
    };
    let partition = PartitionData::default()
        .with_partition_index(0)
        .with_leader_id(BrokerId(d.leader_id))
        .with_leader_epoch(d.leader_epoch)
        .with_high_watermark(d.high_watermark)
        .with_current_voters(d.voters.iter().map(replica).collect())
        .with_observers(d.observers.iter().map(replica).collect());
    let mut response = DescribeQuorumResponse::default().with_topics(vec![TopicData::default()
        .with_topic_name(topic_name(METADATA_TOPIC))
        .with_partitions(vec![partition])]);
    if version >= 2 {
        response.nodes = d
            .endpoints
            .iter()
            .filter_map(|(id, addr)| {
                let (host, port) = addr.rsplit_once(':')?;
                let port = port.parse::<u16>().ok()?;
                Some(Node::default().with_node_id(BrokerId(*id)).with_listeners(
                    vec![Listener::default()
                            .with_name(str_bytes(CONTROLLER_LISTENER))
                            .with_host(str_bytes(
                                host.trim_start_matches('[').trim_end_matches(']'),
                            ))
                            .with_port(port)],
                ))
            })
            .collect();
    }
    response
}
