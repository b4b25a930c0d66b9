//! CreatePartitions (key 37): grow a topic's partition count, optionally with manual assignments,
//! forwarded to the active controller.

use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};
use millrace_controller::messages::PartitionsSpec;
use millrace_controller::{ControllerError, ControllerRequest, ControllerResponse};

use super::{forward, str_bytes};
use crate::authz::Authz;
use crate::error_codes::TOPIC_AUTHORIZATION_FAILED;
use millrace_cluster::acl::AclOperation;

use crate::error_codes;
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// CreatePartitions: its key, versions, handler and error codes, for [`crate::registry`].
    CreatePartitions, versions 0..=3, CreatePartitionsRequest,
    |call, request| Reply::later(handle(call.ctx.clone(), call.authz, request, call.version)),
}

response_fields!(CreatePartitionsResponse: errors[results[error_code]], throttle_time_ms);

pub async fn handle(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: CreatePartitionsRequest,
    _version: i16,
) -> CreatePartitionsResponse {
    // Growing a topic needs Alter on it; a refused topic is not sent to the controller.
    let allowed = |name: &str| authz.topic(AclOperation::Alter, name);
    let specs: Vec<PartitionsSpec> = request
        .topics
        .iter()
        .filter(|topic| allowed(&topic.name.0))
        .map(|topic| PartitionsSpec {
            name: topic.name.0.to_string(),
            count: topic.count,
            assignments: topic.assignments.as_ref().map(|list| {
                list.iter()
                    .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
                    .collect()
            }),
        })
        .collect();
    let wanted: Vec<(String, i32)> = specs.iter().map(|s| (s.name.clone(), s.count)).collect();
    let outcome = match if specs.is_empty() {
        Ok(ControllerResponse::CreatePartitions {
            results: Vec::new(),
        })
    } else {
        forward::forward(
            &ctx,
            ControllerRequest::CreatePartitions {
                topics: specs,
                validate_only: request.validate_only,
            },
            forward::timeout(request.timeout_ms),
        )
        .await
    } {
        Ok(ControllerResponse::CreatePartitions { results }) => Ok(results),
        Ok(other) => Err(ControllerError::Internal(format!(
            "unexpected answer {other:?}"
        ))),
        Err(e) => Err(e),
    };
    if let (Ok(results), false) = (&outcome, request.validate_only) {
        let grown: Vec<(String, i32)> = wanted
            .iter()
            .filter(|(n, _)| results.iter().any(|(rn, r)| rn == n && r.is_ok()))
            .cloned()
            .collect();
        forward::await_image(&ctx, |image| {
            grown
                .iter()
                .all(|(n, c)| image.topic(n).is_some_and(|t| t.partition_count() >= *c))
        })
        .await;
    }
    let results = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.name.0.to_string();
            let mut result = CreatePartitionsTopicResult::default().with_name(topic.name);
            if !allowed(&name) {
                result.error_code = TOPIC_AUTHORIZATION_FAILED;
                result.error_message = Some(str_bytes("The topic authorization is failed."));
                return result;
            }
            let one = match &outcome {
                Ok(results) => results
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, r)| r.clone())
                    .unwrap_or_else(|| Err(ControllerError::Internal("no answer".into()))),
                Err(e) => Err(e.clone()),
            };
            if let Err(e) = one {
                let err = error_codes::from_controller(&e, &name);
                result.error_code = err.code;
                result.error_message = err.message.as_deref().map(str_bytes);
            }
            result
        })
        .collect();
    CreatePartitionsResponse::default().with_results(results)
}
