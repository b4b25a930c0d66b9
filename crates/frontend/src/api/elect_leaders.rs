//! ElectLeaders (key 43, v0-2): preferred (v0+) or unclean (v1+) leader elections, forwarded to
//! the active controller (`kafka-leader-election`). The controller decides per partition as
//! Kafka's `ReplicationControlManager.electLeaders` does; this module translates the request,
//! groups the answers by topic in request order, and waits (bounded) until this broker's image
//! shows the elections before answering, so the client's next Metadata here sees the new leaders.
//!
//! A request for every partition (`topic_partitions` null) is answered only for the partitions
//! that needed an election, as Kafka does. A request the controller refuses as a whole gets its
//! error on every named partition and, from v1, at the top level (Kafka's `getErrorResponse`).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse};
use millrace_controller::messages::ElectionType;
use millrace_controller::{ControllerError, ControllerRequest, ControllerResponse};

use super::{forward, str_bytes, topic_name};
use crate::authz::Authz;
use crate::error_codes::CLUSTER_AUTHORIZATION_FAILED;
use millrace_cluster::acl::AclOperation;

use crate::error_codes::{self, KafkaError, INVALID_REQUEST, NONE};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// ElectLeaders: its key, versions, handler and error codes, for [`crate::registry`].
    ElectLeaders, versions 0..=2, ElectLeadersRequest,
    |call, request| Reply::later(handle(call.ctx.clone(), call.authz, request, call.version)),
}

// The top-level code exists from v1 (it is 0 in v0).
response_fields!(
    ElectLeadersResponse:
    errors[error_code, replica_election_results[partition_result[error_code]]],
    throttle_time_ms
);

/// First version with `election_type` and the top-level `error_code`.
const ELECTION_TYPE_VERSION_MIN: i16 = 1;

/// Kafka's election type codes.
const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

pub async fn handle(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: ElectLeadersRequest,
    version: i16,
) -> ElectLeadersResponse {
    if !authz.cluster(AclOperation::Alter) {
        return refused(
            &request,
            &KafkaError::code(CLUSTER_AUTHORIZATION_FAILED),
            version,
        );
    }
    let election_type = if version >= ELECTION_TYPE_VERSION_MIN {
        request.election_type
    } else {
        PREFERRED
    };
    let election = match election_type {
        PREFERRED => ElectionType::Preferred,
        UNCLEAN => ElectionType::Unclean,
        other => {
            let err = KafkaError::new(INVALID_REQUEST, format!("Unknown election type {other}"));
            return refused(&request, &err, version);
        }
    };
    let named: Option<Vec<(String, i32)>> = request.topic_partitions.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|t| {
                let name = t.topic.0.to_string();
                t.partitions.iter().map(move |&p| (name.clone(), p))
            })
            .collect()
    });
    // Partition epochs as this broker knows them: an election's record raises them.
    let image = ctx.cluster.image();
    let epochs_before = |tp: &(String, i32)| {
        image
            .partition(&tp.0, tp.1)
            .map_or(-1, |p| p.partition_epoch)
    };
    let outcome = forward::forward(
        &ctx,
        ControllerRequest::ElectLeaders {
            election,
            partitions: named.clone(),
        },
        forward::timeout(request.timeout_ms),
    )
    .await;
    let results = match outcome {
        Ok(ControllerResponse::ElectLeaders { results }) => results,
        Ok(other) => {
            let e = ControllerError::Internal(format!("unexpected answer {other:?}"));
            return refused(
                &request,
                &error_codes::from_controller(&e, "ElectLeaders"),
                version,
            );
        }
        Err(e) => {
            return refused(
                &request,
                &error_codes::from_controller(&e, "ElectLeaders"),
                version,
            );
        }
    };
    if let Some(named) = &named {
        if named.len() != results.len() {
            let e = ControllerError::Internal(format!(
                "{} answers for {} partitions",
                results.len(),
                named.len()
            ));
            return refused(
                &request,
                &error_codes::from_controller(&e, "ElectLeaders"),
                version,
            );
        }
    }
    let elected: Vec<((String, i32), i32)> = results
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(tp, _)| (tp.clone(), epochs_before(tp)))
        .collect();
    if !elected.is_empty() {
        forward::await_image(&ctx, |image| {
            elected.iter().all(|((t, p), before)| {
                image
                    .partition(t, *p)
                    .is_none_or(|reg| reg.partition_epoch > *before)
            })
        })
        .await;
    }
    let by_topic = match &request.topic_partitions {
        // One entry per request topic, in request order (the controller answered in that order).
        Some(topics) => {
            let mut answers = results.into_iter();
            topics
                .iter()
                .map(|t| {
                    let partitions = t
                        .partitions
                        .iter()
                        .filter_map(|_| answers.next())
                        .map(|((_, p), r)| partition_result(p, &r))
                        .collect();
                    ReplicaElectionResult::default()
                        .with_topic(t.topic.clone())
                        .with_partition_result(partitions)
                })
                .collect()
        }
        None => {
            let mut grouped: BTreeMap<String, Vec<PartitionResult>> = BTreeMap::new();
            for ((t, p), r) in results {
                grouped.entry(t).or_default().push(partition_result(p, &r));
            }
            grouped
                .into_iter()
                .map(|(t, partitions)| {
                    ReplicaElectionResult::default()
                        .with_topic(topic_name(&t))
                        .with_partition_result(partitions)
                })
                .collect()
        }
    };
    ElectLeadersResponse::default()
        .with_error_code(NONE)
        .with_replica_election_results(by_topic)
}

fn partition_result(partition: i32, result: &Result<(), ControllerError>) -> PartitionResult {
    let mut out = PartitionResult::default().with_partition_id(partition);
    if let Err(e) = result {
        let err = error_codes::from_controller(e, &format!("ElectLeaders partition {partition}"));
        out.error_code = err.code;
        out.error_message = err.message.as_deref().map(str_bytes);
    }
    out
}

/// The answer to a request refused as a whole: the error on every named partition, and at the
/// top level from v1.
fn refused(request: &ElectLeadersRequest, err: &KafkaError, version: i16) -> ElectLeadersResponse {
    let results = request
        .topic_partitions
        .iter()
        .flatten()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|&p| {
                    PartitionResult::default()
                        .with_partition_id(p)
                        .with_error_code(err.code)
                        .with_error_message(err.message.as_deref().map(str_bytes))
                })
                .collect();
            ReplicaElectionResult::default()
                .with_topic(t.topic.clone())
                .with_partition_result(partitions)
        })
        .collect();
    let code = if version >= ELECTION_TYPE_VERSION_MIN {
        err.code
    } else {
        NONE
    };
    ElectLeadersResponse::default()
        .with_error_code(code)
        .with_replica_election_results(results)
}
