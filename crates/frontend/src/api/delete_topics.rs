//! DeleteTopics (key 20): by name (v0-5) or by name or id (v6), forwarded to the active
//! controller; every broker then removes its replicas' logs from disk.

use std::sync::Arc;

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse};
use millrace_controller::{ControllerError, ControllerRequest, ControllerResponse};
use uuid::Uuid;

use super::{forward, str_bytes, topic_name};
use crate::authz::Authz;
use crate::error_codes::TOPIC_AUTHORIZATION_FAILED;
use millrace_cluster::acl::AclOperation;

use crate::error_codes::{self, INVALID_REQUEST, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// DeleteTopics: its key, versions, handler and error codes, for [`crate::registry`].
    DeleteTopics, versions 1..=6, DeleteTopicsRequest,
    |call, request| Reply::later(handle(call.ctx.clone(), call.authz, request, call.version)),
}

response_fields!(DeleteTopicsResponse: errors[responses[error_code]], throttle_time_ms);

const TOPIC_STATES_VERSION_MIN: i16 = 6;

/// (name asked, id asked, the name it resolved to or why not).
type Resolved = (Option<String>, Uuid, Result<String, (i16, String)>);
const ERROR_MESSAGE_VERSION_MIN: i16 = 5;

pub async fn handle(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let wanted: Vec<(Option<String>, Uuid)> = if version >= TOPIC_STATES_VERSION_MIN {
        request
            .topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id))
            .collect()
    } else {
        request
            .topic_names
            .iter()
            .map(|n| (Some(n.0.to_string()), Uuid::nil()))
            .collect()
    };
    // Resolve ids to names against this broker's image.
    let image = ctx.cluster.image();
    let resolved: Vec<Resolved> = wanted
        .into_iter()
        .map(|(name, id)| {
            let r = match (&name, id.is_nil()) {
                (Some(n), true) => Ok(n.clone()),
                (None, false) => image
                    .topic_by_id(id)
                    .map(|t| t.name.clone())
                    .ok_or((UNKNOWN_TOPIC_ID, "Topic id not found.".to_string())),
                _ => Err((
                    INVALID_REQUEST,
                    "Exactly one of topic name and topic id must be set.".to_string(),
                )),
            };
            // Deleting needs Delete on the topic; a topic named by id, Describe first (else its
            // name is not disclosed).
            let denied = || {
                (
                    TOPIC_AUTHORIZATION_FAILED,
                    "Authorization failed.".to_string(),
                )
            };
            let r = r.and_then(|n| {
                let described = id.is_nil() || authz.topic(AclOperation::Describe, &n);
                if described && authz.topic(AclOperation::Delete, &n) {
                    Ok(n)
                } else {
                    Err(denied())
                }
            });
            (name, id, r)
        })
        .collect();
    let names: Vec<String> = resolved
        .iter()
        .filter_map(|(_, _, r)| r.as_ref().ok().cloned())
        .collect();
    let outcome = if names.is_empty() {
        Ok(Vec::new())
    } else {
        match forward::forward(
            &ctx,
            ControllerRequest::DeleteTopics {
                names: names.clone(),
            },
            forward::timeout(request.timeout_ms),
        )
        .await
        {
            Ok(ControllerResponse::DeleteTopics { results }) => Ok(results),
            Ok(other) => Err(ControllerError::Internal(format!(
                "unexpected answer {other:?}"
            ))),
            Err(e) => Err(e),
        }
    };
    if let Ok(results) = &outcome {
        let deleted: Vec<Uuid> = results
            .iter()
            .filter_map(|(_, r)| r.as_ref().ok().copied())
            .collect();
        forward::await_image(&ctx, |image| {
            deleted.iter().all(|id| image.topic_by_id(*id).is_none())
        })
        .await;
    }

    let responses = resolved
        .into_iter()
        .map(|(name, id, r)| {
            let mut result = DeletableTopicResult::default();
            if version >= TOPIC_STATES_VERSION_MIN {
                result.topic_id = id;
            }
            let answer: Result<Uuid, (i16, String)> = r.and_then(|n| {
                result.name = Some(topic_name(&n));
                let one = match &outcome {
                    Ok(results) => results
                        .iter()
                        .find(|(rn, _)| *rn == n)
                        .map(|(_, r)| r.clone())
                        .unwrap_or_else(|| Err(ControllerError::Internal("no answer".into()))),
                    Err(e) => Err(e.clone()),
                };
                one.map_err(|e| {
                    let err = error_codes::from_controller(&e, &n);
                    let code = if err.code == UNKNOWN_TOPIC_OR_PARTITION && !id.is_nil() {
                        UNKNOWN_TOPIC_ID
                    } else {
                        err.code
                    };
                    (code, err.message.unwrap_or_default())
                })
            });
            match answer {
                Ok(deleted) => {
                    if version >= TOPIC_STATES_VERSION_MIN {
                        result.topic_id = deleted;
                    }
                }
                Err((code, message)) => {
                    result.error_code = code;
                    if version >= ERROR_MESSAGE_VERSION_MIN {
                        result.error_message = Some(str_bytes(&message));
                    }
                }
            }
            if result.name.is_none()
                && (version < TOPIC_STATES_VERSION_MIN
                    || result.error_code == TOPIC_AUTHORIZATION_FAILED)
            {
                result.name = name.as_deref().map(topic_name);
            }
            result
        })
        .collect();
    DeleteTopicsResponse::default().with_responses(responses)
}
