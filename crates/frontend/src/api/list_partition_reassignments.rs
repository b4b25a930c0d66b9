//! ListPartitionReassignments (key 46, v0; KIP-455): the reassignments in progress, forwarded to
//! the active controller so the answer reflects every committed change (`kafka-reassign-partitions
//! --verify`, `kafka-topics --describe`). Null topics = every partition being reassigned; named
//! topics and partitions that do not exist or are not being reassigned are left out, as Kafka
//! does. A refusal (no controller, timeout) is the top-level error.

use std::sync::Arc;

use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    BrokerId, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};
use millrace_controller::{ControllerError, ControllerRequest, ControllerResponse};

use super::{forward, str_bytes, topic_name};
use crate::authz::Authz;
use crate::error_codes::CLUSTER_AUTHORIZATION_FAILED;
use millrace_cluster::acl::AclOperation;

use crate::error_codes;
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// ListPartitionReassignments: its key, versions, handler and error codes, for [`crate::registry`].
    ListPartitionReassignments, versions 0..=0, ListPartitionReassignmentsRequest,
    |call, request| Reply::later(handle(call.ctx.clone(), call.authz, request, call.version)),
}

// Ongoing reassignments carry no code of their own.
response_fields!(ListPartitionReassignmentsResponse: errors[error_code], throttle_time_ms);

pub async fn handle(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: ListPartitionReassignmentsRequest,
    _version: i16,
) -> ListPartitionReassignmentsResponse {
    if !authz.cluster(AclOperation::Describe) {
        return ListPartitionReassignmentsResponse::default()
            .with_error_code(CLUSTER_AUTHORIZATION_FAILED);
    }
    let topics = request.topics.as_ref().map(|list| {
        list.iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
            .collect()
    });
    let outcome = match forward::forward(
        &ctx,
        ControllerRequest::ListPartitionReassignments { topics },
        forward::timeout(request.timeout_ms),
    )
    .await
    {
        Ok(ControllerResponse::ListPartitionReassignments { topics }) => Ok(topics),
        Ok(other) => Err(ControllerError::Internal(format!(
            "unexpected answer {other:?}"
        ))),
        Err(e) => Err(e),
    };
    let topics = match outcome {
        Ok(topics) => topics,
        Err(e) => {
            let err = error_codes::from_controller(&e, "ListPartitionReassignments");
            return ListPartitionReassignmentsResponse::default()
                .with_error_code(err.code)
                .with_error_message(err.message.as_deref().map(str_bytes));
        }
    };
    let brokers = |list: &[i32]| list.iter().map(|&b| BrokerId(b)).collect::<Vec<_>>();
    let topics = topics
        .into_iter()
        .map(|(name, partitions)| {
            OngoingTopicReassignment::default()
                .with_name(topic_name(&name))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|p| {
                            OngoingPartitionReassignment::default()
                                .with_partition_index(p.partition)
                                .with_replicas(brokers(&p.replicas))
                                .with_adding_replicas(brokers(&p.adding_replicas))
                                .with_removing_replicas(brokers(&p.removing_replicas))
                        })
                        .collect(),
                )
        })
        .collect();
    ListPartitionReassignmentsResponse::default().with_topics(topics)
}
