//! AlterPartitionReassignments (key 45, v0-1; KIP-455): start, replace or cancel (null replicas)
//! partition reassignments, forwarded to the active controller (`kafka-reassign-partitions
//! --execute` / `--cancel`). The controller decides per partition (decision 0046); this module
//! translates, answers per topic and partition in request order, and waits (bounded) until this
//! broker's image shows every accepted change, so a `--verify` or a describe right after it here
//! sees the reassignment.
//!
//! v1 (KIP-860): with `allow_replication_factor_change` false, a partition whose target has
//! another size than its current assignment gets INVALID_REPLICATION_FACTOR, decided by the
//! controller against the committed registration; the response echoes the flag.
//!
//! A request the controller refuses as a whole gets its error at the top level and on every
//! partition (Kafka's `getErrorResponse`).

use std::sync::Arc;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
};
use millrace_controller::messages::{PartitionResults, ReassignTopicSpec};
use millrace_controller::{ControllerError, ControllerRequest, ControllerResponse};

use super::{forward, str_bytes};
use crate::authz::Authz;
use crate::error_codes::CLUSTER_AUTHORIZATION_FAILED;
use millrace_cluster::acl::AclOperation;

use crate::error_codes::{self, KafkaError};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// AlterPartitionReassignments: its key, versions, handler and error codes, for [`crate::registry`].
    AlterPartitionReassignments, versions 0..=1, AlterPartitionReassignmentsRequest,
    |call, request| Reply::later(handle(call.ctx.clone(), call.authz, request, call.version)),
}

response_fields!(
    AlterPartitionReassignmentsResponse:
    errors[error_code, responses[partitions[error_code]]],
    throttle_time_ms
);

/// First version with `allow_replication_factor_change` (KIP-860).
const ALLOW_RF_CHANGE_VERSION_MIN: i16 = 1;

/// The request's `allow_replication_factor_change`; v0 allows (Kafka's default).
fn allows_rf_change(request: &AlterPartitionReassignmentsRequest, version: i16) -> bool {
    version < ALLOW_RF_CHANGE_VERSION_MIN || request.allow_replication_factor_change
}

pub async fn handle(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: AlterPartitionReassignmentsRequest,
    version: i16,
) -> AlterPartitionReassignmentsResponse {
    if !authz.cluster(AclOperation::Alter) {
        return refused(&request, &KafkaError::code(CLUSTER_AUTHORIZATION_FAILED));
    }
    let specs: Vec<ReassignTopicSpec> = request
        .topics
        .iter()
        .map(|t| ReassignTopicSpec {
            name: t.name.0.to_string(),
            partitions: t
                .partitions
                .iter()
                .map(|p| {
                    let target = p
                        .replicas
                        .as_ref()
                        .map(|list| list.iter().map(|b| b.0).collect());
                    (p.partition_index, target)
                })
                .collect(),
        })
        .collect();
    let outcome = forward::forward(
        &ctx,
        ControllerRequest::AlterPartitionReassignments {
            topics: specs.clone(),
            allow_replication_factor_change: allows_rf_change(&request, version),
        },
        forward::timeout(request.timeout_ms),
    )
    .await;
    let results = match outcome {
        Ok(ControllerResponse::AlterPartitionReassignments { results })
            if results.len() == specs.len() =>
        {
            results
        }
        Ok(other) => {
            let e = ControllerError::Internal(format!("unexpected answer {other:?}"));
            return refused(&request, &from(&e));
        }
        Err(e) => return refused(&request, &from(&e)),
    };
    // What the image shows once an accepted change is applied: the target leads the replica
    // list (in progress: target + removing; complete: the target); a cancel leaves nothing
    // being added.
    let accepted: Vec<(String, i32, Option<Vec<i32>>)> = specs
        .iter()
        .zip(&results)
        .flat_map(|(spec, (_, answers))| {
            spec.partitions
                .iter()
                .zip(answers)
                .filter(|(_, (_, r))| r.is_ok())
                .map(|((p, target), _)| (spec.name.clone(), *p, target.clone()))
        })
        .collect();
    if !accepted.is_empty() {
        forward::await_image(&ctx, |image| {
            accepted.iter().all(|(t, p, target)| {
                image.partition(t, *p).is_none_or(|reg| match target {
                    Some(target) => reg.replicas.starts_with(target),
                    None => reg.adding_replicas.is_empty(),
                })
            })
        })
        .await;
    }
    let responses = request
        .topics
        .iter()
        .zip(results)
        .map(|(topic, (_, answers))| {
            ReassignableTopicResponse::default()
                .with_name(topic.name.clone())
                .with_partitions(partition_responses(answers))
        })
        .collect();
    AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(allows_rf_change(&request, version))
        .with_responses(responses)
}

fn from(e: &ControllerError) -> KafkaError {
    error_codes::from_controller(e, "AlterPartitionReassignments")
}

fn partition_responses(answers: PartitionResults) -> Vec<ReassignablePartitionResponse> {
    answers
        .into_iter()
        .map(|(p, r)| {
            let mut out = ReassignablePartitionResponse::default().with_partition_index(p);
            if let Err(e) = r {
                let err = from(&e);
                out.error_code = err.code;
                out.error_message = err.message.as_deref().map(str_bytes);
            }
            out
        })
        .collect()
}

fn refused(
    request: &AlterPartitionReassignmentsRequest,
    err: &KafkaError,
) -> AlterPartitionReassignmentsResponse {
    let responses = request
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    ReassignablePartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(err.code)
                        .with_error_message(err.message.as_deref().map(str_bytes))
                })
                .collect();
            ReassignableTopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(request.allow_replication_factor_change)
        .with_error_code(err.code)
        .with_error_message(err.message.as_deref().map(str_bytes))
        .with_responses(responses)
}
