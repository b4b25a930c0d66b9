//! AlterConfigs (key 33, replaces a topic's or a group's whole override set) and
//! IncrementalAlterConfigs (key 44, SET/DELETE/APPEND/SUBTRACT per key), forwarded to the active
//! controller; every broker applies the committed configs to its replicas' logs.
//!
//! BROKER resources (type 4) hold the dynamic broker configs (`millrace_cluster::config_broker`):
//! resource name "" is the cluster-wide default, a broker id that broker's own set (only that
//! broker accepts it, as in Kafka, whose admin client sends it there). Only the keys Kafka lets a
//! broker reconfigure as topic defaults are accepted; the rest are refused by name.
//!
//! GROUP resources (type 32) hold a group's dynamic configs (`consumer.*`, `share.*`,
//! `streams.*`; `millrace_cluster::config_group`), checked by the controller against the broker's
//! bounds and stored in the metadata, whether the group exists or not, as in Kafka 4.4. Both APIs
//! serve them (Kafka 4.4's legacy AlterConfigs does too); ALTER_CONFIGS on the group is required.
//!
//! Replication throttles (KIP-73) are real configs: the broker rates are dynamic broker configs,
//! the replica lists topic configs. Only `replica.alter.log.dirs.io.max.bytes.per.second` does not
//! exist here: deleting it is a no-op that succeeds, because `kafka-reassign-partitions --verify`
//! clears it on every broker once a reassignment completes.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;
use millrace_cluster::config_broker;
use millrace_cluster::{GroupConfigs, TopicConfigs};
use millrace_controller::messages::ConfigChangeSpec;
use millrace_controller::{ControllerRequest, ControllerResponse};

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC};
use super::{forward, str_bytes};
use crate::authz::Authz;
use millrace_cluster::acl::AclOperation;

use crate::error_codes::{self, INVALID_CONFIG, INVALID_REQUEST, UNKNOWN_SERVER_ERROR};
use crate::handler::{api_handler, response_fields, Reply};
use crate::limits::ADMIN_TIMEOUT_MS_MAX;
use crate::BrokerContext;

api_handler! {
    /// AlterConfigs: its key, versions, handler and error codes, for [`crate::registry`].
    AlterConfigs, versions 0..=2, AlterConfigsRequest,
    |call, request| Reply::later(handle(call.ctx.clone(), call.authz, request, call.version)),
}

response_fields!(AlterConfigsResponse: errors[responses[error_code]], throttle_time_ms);

api_handler! {
    /// IncrementalAlterConfigs: its key, versions, handler and error codes, for [`crate::registry`].
    IncrementalAlterConfigs, versions 0..=1, IncrementalAlterConfigsRequest,
    |call, request| {
        Reply::later(handle_incremental(call.ctx.clone(), call.authz, request, call.version))
    },
}

response_fields!(IncrementalAlterConfigsResponse: errors[responses[error_code]], throttle_time_ms);

type Outcome = Result<(), (i16, String)>;

/// Kafka's throttle of moves between one broker's log dirs; not set here (deleting it, as
/// `kafka-reassign-partitions --verify` does on every broker, succeeds).
const THROTTLE_CONFIGS: &[&str] = &["replica.alter.log.dirs.io.max.bytes.per.second"];
/// IncrementalAlterConfigs' DELETE operation.
const OP_DELETE: i8 = 1;

fn deletes_a_throttle(name: &str, op: i8) -> bool {
    op == OP_DELETE && THROTTLE_CONFIGS.contains(&name)
}

pub async fn handle(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: AlterConfigsRequest,
    _version: i16,
) -> AlterConfigsResponse {
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in request.resources {
        let refused = denied(&authz, resource.resource_type, &resource.resource_name);
        let outcome = match check_resource(resource.resource_type) {
            _ if refused.is_some() => Err((refused.unwrap_or_default(), String::new())),
            Err(e) => Err(e),
            Ok(()) if resource.resource_type == RESOURCE_GROUP => {
                let group_id = resource.resource_name.to_string();
                let configs = legacy_entries(&resource.configs);
                let wait = group_wait(
                    request.validate_only,
                    GroupConfigs::new(configs.clone()).ok(),
                );
                apply(
                    &ctx,
                    Target::Group(&group_id),
                    ControllerRequest::SetGroupConfigs {
                        group_id: group_id.clone(),
                        configs,
                        validate_only: request.validate_only,
                    },
                    wait,
                )
                .await
            }
            Ok(()) if resource.resource_type == RESOURCE_BROKER => {
                match broker_resource(&ctx, resource.resource_name.as_str()) {
                    Err(e) => Err(e),
                    Ok(broker) => {
                        let configs = legacy_entries(&resource.configs);
                        let expected = config_broker::check(configs.clone()).ok();
                        apply(
                            &ctx,
                            Target::Broker(broker),
                            ControllerRequest::SetBrokerConfigs {
                                broker,
                                configs,
                                validate_only: request.validate_only,
                            },
                            broker_wait(request.validate_only, broker, expected),
                        )
                        .await
                    }
                }
            }
            Ok(()) => {
                let entries = legacy_entries(&resource.configs);
                match TopicConfigs::new(entries.clone()) {
                    Err(e) => Err((INVALID_CONFIG, e.to_string())),
                    Ok(_) => {
                        apply(
                            &ctx,
                            Target::Topic(resource.resource_name.as_str()),
                            ControllerRequest::SetTopicConfigs {
                                name: resource.resource_name.to_string(),
                                configs: entries,
                                validate_only: request.validate_only,
                            },
                            topic_wait(request.validate_only),
                        )
                        .await
                    }
                }
            }
        };
        let (code, message) = split(outcome);
        responses.push(
            alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name)
                .with_error_code(code)
                .with_error_message(message),
        );
    }
    AlterConfigsResponse::default().with_responses(responses)
}

pub async fn handle_incremental(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: IncrementalAlterConfigsRequest,
    _version: i16,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in request.resources {
        let name = resource.resource_name.to_string();
        let only_throttle_deletes = resource
            .configs
            .iter()
            .all(|c| deletes_a_throttle(c.name.as_str(), c.config_operation));
        let refused = denied(&authz, resource.resource_type, &name);
        let outcome = match check_resource(resource.resource_type) {
            _ if refused.is_some() => Err((refused.unwrap_or_default(), String::new())),
            _ if only_throttle_deletes
                && matches!(resource.resource_type, RESOURCE_BROKER | RESOURCE_TOPIC)
                && (resource.resource_type == RESOURCE_BROKER
                    || ctx.cluster.image().topic(&name).is_some()) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
            Ok(()) => {
                let changes: Vec<ConfigChangeSpec> = resource
                    .configs
                    .iter()
                    .filter(|c| !deletes_a_throttle(c.name.as_str(), c.config_operation))
                    .map(|c| ConfigChangeSpec {
                        name: c.name.to_string(),
                        op: c.config_operation,
                        value: c.value.as_ref().map(|v| v.to_string()),
                    })
                    .collect();
                let broker = if resource.resource_type == RESOURCE_BROKER {
                    match broker_resource(&ctx, &name) {
                        Ok(b) => Some(b),
                        Err(e) => {
                            responses.push(incremental_response(
                                &resource.resource_name,
                                resource.resource_type,
                                Err(e),
                            ));
                            continue;
                        }
                    }
                } else {
                    None
                };
                let (target, wait, request) = if let Some(broker) = broker {
                    let expected = changes
                        .iter()
                        .map(ConfigChangeSpec::to_change)
                        .collect::<Option<Vec<_>>>()
                        .and_then(|parsed| {
                            let image = ctx.cluster.image();
                            let current =
                                image.broker_configs.of(broker).cloned().unwrap_or_default();
                            let effective = image.broker_configs.layer_over(&ctx.cluster.config);
                            config_broker::with_changes(&current, &parsed, |key| {
                                effective.get(key).map(str::to_string)
                            })
                            .ok()
                        });
                    (
                        Target::Broker(broker),
                        broker_wait(request.validate_only, broker, expected),
                        ControllerRequest::AlterBrokerConfigs {
                            broker,
                            changes,
                            validate_only: request.validate_only,
                        },
                    )
                } else if resource.resource_type == RESOURCE_GROUP {
                    let expected = changes
                        .iter()
                        .map(ConfigChangeSpec::to_change)
                        .collect::<Option<Vec<_>>>()
                        .and_then(|parsed| {
                            let image = ctx.cluster.image();
                            let current = image.group_configs(&name).cloned().unwrap_or_default();
                            current.with_changes(&parsed).ok()
                        });
                    (
                        Target::Group(&name),
                        group_wait(request.validate_only, expected),
                        ControllerRequest::AlterGroupConfigs {
                            group_id: name.clone(),
                            changes,
                            validate_only: request.validate_only,
                        },
                    )
                } else {
                    (
                        Target::Topic(&name),
                        topic_wait(request.validate_only),
                        ControllerRequest::AlterTopicConfigs {
                            name: name.clone(),
                            changes,
                            validate_only: request.validate_only,
                        },
                    )
                };
                apply(&ctx, target, request, wait).await
            }
        };
        responses.push(incremental_response(
            &resource.resource_name,
            resource.resource_type,
            outcome,
        ));
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

fn incremental_response(
    name: &StrBytes,
    resource_type: i8,
    outcome: Outcome,
) -> incremental_alter_configs_response::AlterConfigsResourceResponse {
    let (code, message) = split(outcome);
    incremental_alter_configs_response::AlterConfigsResourceResponse::default()
        .with_resource_type(resource_type)
        .with_resource_name(name.clone())
        .with_error_code(code)
        .with_error_message(message)
}

/// The BROKER resource a request names: the cluster default (""), or this broker's id — another
/// broker's configs are altered through that broker, as Kafka's admin client does.
fn broker_resource(ctx: &BrokerContext, name: &str) -> Result<Option<i32>, (i16, String)> {
    let broker =
        config_broker::parse_resource(name).map_err(|e| (INVALID_REQUEST, e.to_string()))?;
    let local = ctx.cluster.node_id();
    match broker {
        Some(id) if id != local => Err((
            INVALID_REQUEST,
            format!("Unexpected broker id, expected {local}, but received {id}"),
        )),
        other => Ok(other),
    }
}

fn check_resource(resource_type: i8) -> Outcome {
    match resource_type {
        RESOURCE_TOPIC | RESOURCE_GROUP | RESOURCE_BROKER => Ok(()),
        other => Err((
            INVALID_REQUEST,
            format!("Unsupported resource type {other}."),
        )),
    }
}

/// The resource a change alters, so its answer can wait until this broker's image shows it.
#[derive(Clone, Copy)]
enum Target<'a> {
    Topic(&'a str),
    Group(&'a str),
    /// `None`: the cluster default.
    Broker(Option<i32>),
}

/// A resource's configs as this broker's image holds them.
#[derive(PartialEq)]
enum Held {
    Topic(Option<TopicConfigs>),
    Group(Option<GroupConfigs>),
    Broker(Option<BTreeMap<String, String>>),
}

impl Target<'_> {
    fn name(self) -> &'static str {
        match self {
            Target::Topic(_) => "topic",
            Target::Group(_) => "group",
            Target::Broker(_) => "broker",
        }
    }

    fn held(self, image: &millrace_cluster::image::MetadataImage) -> Held {
        match self {
            Target::Topic(t) => Held::Topic(image.topic(t).map(|t| t.configs.clone())),
            Target::Group(g) => Held::Group(image.group_configs(g).cloned()),
            Target::Broker(b) => Held::Broker(image.broker_configs.of(b).cloned()),
        }
    }

    fn resource(self) -> String {
        match self {
            Target::Topic(n) | Target::Group(n) => n.to_string(),
            Target::Broker(None) => "default".to_string(),
            Target::Broker(Some(id)) => id.to_string(),
        }
    }
}

/// What a successful change waits for in this broker's image before it is answered.
enum Wait {
    /// Nothing (validate_only).
    Nothing,
    /// The resource's configs to differ from what they were before.
    Changed,
    /// The resource's configs to be these (a group's set, known before it is sent).
    Becomes(Held),
}

async fn apply(
    ctx: &Arc<BrokerContext>,
    target: Target<'_>,
    request: ControllerRequest,
    wait: Wait,
) -> Outcome {
    let timeout = std::time::Duration::from_millis(ADMIN_TIMEOUT_MS_MAX);
    let before = target.held(&ctx.cluster.image());
    match forward::forward(ctx, request, timeout).await {
        Ok(ControllerResponse::Configs { result: Ok(()) }) => {
            // Let this broker's image (and so DescribeConfigs here) catch up with the change.
            match wait {
                Wait::Nothing => {}
                Wait::Changed => {
                    forward::await_image(ctx, |image| target.held(image) != before).await;
                }
                Wait::Becomes(after) => {
                    forward::await_image(ctx, |image| target.held(image) == after).await;
                }
            }
            Ok(())
        }
        Ok(ControllerResponse::Configs { result: Err(e) }) | Err(e) => {
            let context = format!("{} {}", target.name(), target.resource());
            let err = error_codes::from_controller(&e, &context);
            Err((err.code, err.message.unwrap_or_default()))
        }
        Ok(other) => Err((UNKNOWN_SERVER_ERROR, format!("unexpected answer {other:?}"))),
    }
}

fn topic_wait(validate_only: bool) -> Wait {
    if validate_only {
        Wait::Nothing
    } else {
        Wait::Changed
    }
}

/// A group's change waits for the set it should produce (an empty set is no entry); one whose
/// outcome is unknown here waits for any change.
fn group_wait(validate_only: bool, expected: Option<GroupConfigs>) -> Wait {
    match expected {
        _ if validate_only => Wait::Nothing,
        Some(set) => Wait::Becomes(Held::Group((!set.is_empty()).then_some(set))),
        None => Wait::Changed,
    }
}

/// A BROKER resource's change waits for the set it should produce (the default always has a
/// set, possibly empty; a broker's empty set is no entry).
fn broker_wait(
    validate_only: bool,
    broker: Option<i32>,
    expected: Option<BTreeMap<String, String>>,
) -> Wait {
    match expected {
        _ if validate_only => Wait::Nothing,
        Some(set) if broker.is_none() => Wait::Becomes(Held::Broker(Some(set))),
        Some(set) => Wait::Becomes(Held::Broker((!set.is_empty()).then_some(set))),
        None => Wait::Changed,
    }
}

/// AlterConfigs' entries: the keys with a value (a null value leaves the key out, as Kafka does).
fn legacy_entries(
    configs: &[kafka_protocol::messages::alter_configs_request::AlterableConfig],
) -> BTreeMap<String, String> {
    configs
        .iter()
        .filter_map(|c| {
            c.value
                .as_ref()
                .map(|v| (c.name.to_string(), v.to_string()))
        })
        .collect()
}

fn split(outcome: Outcome) -> (i16, Option<StrBytes>) {
    match outcome {
        Ok(()) => (0, None),
        // An authorization failure carries no message, as in Kafka.
        Err((code, message)) if message.is_empty() => (code, None),
        Err((code, message)) => (code, Some(str_bytes(&message))),
    }
}

/// The authorization error for altering a config resource (AlterConfigs on it, on the cluster
/// for a broker), if any.
fn denied(authz: &Authz, resource_type: i8, name: &str) -> Option<i16> {
    authz
        .config_resource(AclOperation::AlterConfigs, resource_type, name)
        .err()
}
