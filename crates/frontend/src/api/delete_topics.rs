//! DeleteTopics (key 20): by name (v0-5) or by name or id (v6); the logs are removed from disk.

use std::sync::Arc;

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse};
use uuid::Uuid;

use super::{str_bytes, topic_name};
use crate::error_codes::{self, INVALID_REQUEST, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION};
use crate::BrokerContext;

const TOPIC_STATES_VERSION_MIN: i16 = 6;
const ERROR_MESSAGE_VERSION_MIN: i16 = 5;

pub fn handle(
    ctx: &Arc<BrokerContext>,
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
    let responses = wanted
        .into_iter()
        .map(|(name, id)| delete_one(ctx, name, id, version))
        .collect();
    DeleteTopicsResponse::default().with_responses(responses)
}

fn delete_one(
    ctx: &Arc<BrokerContext>,
    name: Option<String>,
    id: Uuid,
    version: i16,
) -> DeletableTopicResult {
    let cluster = &ctx.cluster;
    let mut result = DeletableTopicResult::default();
    if version >= TOPIC_STATES_VERSION_MIN {
        result.topic_id = id;
    }
    let resolved = match (&name, id.is_nil()) {
        (Some(n), true) => Ok(n.clone()),
        (None, false) => cluster
            .metadata
            .topic_by_id(id)
            .map(|t| t.name)
            .ok_or((UNKNOWN_TOPIC_ID, "Topic id not found.".to_string())),
        _ => Err((
            INVALID_REQUEST,
            "Exactly one of topic name and topic id must be set.".to_string(),
        )),
    };
    let outcome = resolved.and_then(|n| {
        result.name = Some(topic_name(&n));
        match cluster.delete_topic(&n) {
            Ok(deleted) => {
                if version >= TOPIC_STATES_VERSION_MIN {
                    result.topic_id = deleted.topic_id;
                }
                Ok(())
            }
            Err(e) => {
                let err = error_codes::from_admin(&e, &n);
                let code = if err.code == UNKNOWN_TOPIC_OR_PARTITION && !id.is_nil() {
                    UNKNOWN_TOPIC_ID
                } else {
                    err.code
                };
                Err((code, err.message.unwrap_or_default()))
            }
        }
    });
    if let Err((code, message)) = outcome {
        result.error_code = code;
        if version >= ERROR_MESSAGE_VERSION_MIN {
            result.error_message = Some(str_bytes(&message));
        }
    }
    if result.name.is_none() && version < TOPIC_STATES_VERSION_MIN {
        result.name = name.as_deref().map(topic_name);
    }
    result
}
