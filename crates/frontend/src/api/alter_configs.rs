//! AlterConfigs (key 33, replaces a topic's whole override set) and IncrementalAlterConfigs
//! (key 44, SET/DELETE/APPEND/SUBTRACT per key). Topic configs take effect on the partition logs at
//! once. Broker configs are static in Millrace: altering them is refused with INVALID_REQUEST.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;
use millrace_cluster::{AdminError, ConfigChange, ConfigOp, TopicConfigs};

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_TOPIC};
use super::str_bytes;
use crate::error_codes::{self, INVALID_CONFIG, INVALID_REQUEST};
use crate::BrokerContext;

type Outcome = Result<(), (i16, String)>;

pub fn handle(
    ctx: &Arc<BrokerContext>,
    request: AlterConfigsRequest,
    _version: i16,
) -> AlterConfigsResponse {
    let responses = request
        .resources
        .into_iter()
        .map(|resource| {
            let outcome = check_resource(resource.resource_type).and_then(|()| {
                let entries: BTreeMap<String, String> = resource
                    .configs
                    .iter()
                    .filter_map(|c| {
                        c.value
                            .as_ref()
                            .map(|v| (c.name.to_string(), v.to_string()))
                    })
                    .collect();
                let configs =
                    TopicConfigs::new(entries).map_err(|e| (INVALID_CONFIG, e.to_string()))?;
                apply(
                    ctx,
                    resource.resource_name.as_str(),
                    configs,
                    request.validate_only,
                )
            });
            let (code, message) = split(outcome);
            alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name)
                .with_error_code(code)
                .with_error_message(message)
        })
        .collect();
    AlterConfigsResponse::default().with_responses(responses)
}

pub fn handle_incremental(
    ctx: &Arc<BrokerContext>,
    request: IncrementalAlterConfigsRequest,
    _version: i16,
) -> IncrementalAlterConfigsResponse {
    let responses = request
        .resources
        .into_iter()
        .map(|resource| {
            let name = resource.resource_name.to_string();
            let outcome = check_resource(resource.resource_type).and_then(|()| {
                let changes = resource
                    .configs
                    .iter()
                    .map(|c| {
                        let op = ConfigOp::from_code(c.config_operation).ok_or_else(|| {
                            (
                                INVALID_REQUEST,
                                format!("Unknown config operation {}", c.config_operation),
                            )
                        })?;
                        Ok(ConfigChange {
                            name: c.name.to_string(),
                            op,
                            value: c.value.as_ref().map(|v| v.to_string()),
                        })
                    })
                    .collect::<Result<Vec<_>, (i16, String)>>()?;
                let current = ctx
                    .cluster
                    .metadata
                    .topic(&name)
                    .map(|t| t.configs)
                    .ok_or_else(|| admin_error(&AdminError::UnknownTopic(name.clone()), &name))?;
                let broker = &ctx.cluster.config;
                let configs = current
                    .with_changes(&changes, |key| broker.topic_default(key))
                    .map_err(|e| (INVALID_CONFIG, e.to_string()))?;
                apply(ctx, &name, configs, request.validate_only)
            });
            let (code, message) = split(outcome);
            incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name)
                .with_error_code(code)
                .with_error_message(message)
        })
        .collect();
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

fn check_resource(resource_type: i8) -> Outcome {
    match resource_type {
        RESOURCE_TOPIC => Ok(()),
        RESOURCE_BROKER => Err((
            INVALID_REQUEST,
            "Broker configs are static in Millrace; set them at start.".into(),
        )),
        other => Err((
            INVALID_REQUEST,
            format!("Unsupported resource type {other}."),
        )),
    }
}

fn apply(
    ctx: &Arc<BrokerContext>,
    topic: &str,
    configs: TopicConfigs,
    validate_only: bool,
) -> Outcome {
    ctx.cluster
        .set_topic_configs(topic, configs, validate_only)
        .map_err(|e| admin_error(&e, topic))
}

fn admin_error(e: &AdminError, context: &str) -> (i16, String) {
    let err = error_codes::from_admin(e, context);
    (err.code, err.message.unwrap_or_default())
}

fn split(outcome: Outcome) -> (i16, Option<StrBytes>) {
    match outcome {
        Ok(()) => (0, None),
        Err((code, message)) => (code, Some(str_bytes(&message))),
    }
}
