//! What topic and broker configs have in common in v3: Confluent's `AbstractConfigData` (name,
//! value, default/read-only/sensitive flags, source, synonyms) built from a DescribeConfigs
//! answer, and the two Kafka calls behind the config paths — DescribeConfigs (with synonyms) and
//! IncrementalAlterConfigs — made as the caller.
//!
//! Kafka's config sources keep their names, as Kafka's admin client names them
//! (`DYNAMIC_TOPIC_CONFIG`, `STATIC_BROKER_CONFIG`, `DEFAULT_CONFIG`, …); a config is "default"
//! exactly when its source is `DEFAULT_CONFIG`.

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResourceResult;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{DescribeConfigsRequest, IncrementalAlterConfigsRequest};
use kafka_protocol::protocol::StrBytes;
use millrace_frontend::api::alter_configs::IncrementalAlterConfigs;
use millrace_frontend::api::describe_configs::DescribeConfigs;
use millrace_frontend::error_codes as kafka;
use serde::Serialize;

use super::errors;
use super::resource::Metadata;
use crate::{Caller, RestApi, RestError};

const DESCRIBE_CONFIGS_VERSION: i16 = 4;
const INCREMENTAL_ALTER_CONFIGS_VERSION: i16 = 1;

/// Kafka's config resource types.
pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;

/// Kafka's config source `DEFAULT_CONFIG`.
const SOURCE_DEFAULT: i8 = 5;

/// An IncrementalAlterConfigs operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlterOp {
    Set,
    Delete,
}

impl AlterOp {
    /// Kafka's code for the operation.
    fn code(self) -> i8 {
        match self {
            AlterOp::Set => 0,
            AlterOp::Delete => 1,
        }
    }
}

/// One config change: its name, operation and (for SET) value.
#[derive(Debug, Clone)]
pub struct AlterCommand {
    pub name: String,
    pub op: AlterOp,
    pub value: Option<String>,
}

/// A config synonym (Confluent's `ConfigSynonymData`).
#[derive(Debug, Serialize)]
pub struct Synonym {
    name: String,
    value: Option<String>,
    source: &'static str,
}

/// Confluent's config data: the fields of `AbstractConfigData` and the owner's (`topic_name` or
/// `broker_id`), flattened.
#[derive(Debug, Serialize)]
pub struct ConfigData<O: Serialize> {
    kind: &'static str,
    metadata: Metadata,
    cluster_id: String,
    #[serde(flatten)]
    owner: O,
    name: String,
    value: Option<String>,
    is_default: bool,
    is_read_only: bool,
    is_sensitive: bool,
    source: &'static str,
    synonyms: Vec<Synonym>,
}

impl<O: Serialize> ConfigData<O> {
    /// The v3 form of one DescribeConfigs entry.
    pub fn new(
        kind: &'static str,
        metadata: Metadata,
        cluster_id: &str,
        owner: O,
        entry: &DescribeConfigsResourceResult,
    ) -> Self {
        Self {
            kind,
            metadata,
            cluster_id: cluster_id.to_string(),
            owner,
            name: entry.name.to_string(),
            value: entry.value.as_ref().map(|v| v.to_string()),
            is_default: entry.config_source == SOURCE_DEFAULT,
            is_read_only: entry.read_only,
            is_sensitive: entry.is_sensitive,
            source: source_name(entry.config_source),
            synonyms: entry
                .synonyms
                .iter()
                .map(|s| Synonym {
                    name: s.name.to_string(),
                    value: s.value.as_ref().map(|v| v.to_string()),
                    source: source_name(s.source),
                })
                .collect(),
        }
    }
}

/// Kafka's name of config source `source`.
fn source_name(source: i8) -> &'static str {
    match source {
        1 => "DYNAMIC_TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        5 => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        _ => "UNKNOWN",
    }
}

/// Every config of resource (`resource_type`, `name`), sorted by name, described by broker `node`
/// (a broker's configs are only known to that broker) as `caller`.
pub async fn describe(
    api: &RestApi,
    caller: &Caller,
    node: i32,
    resource_type: i8,
    name: &str,
) -> Result<Vec<DescribeConfigsResourceResult>, RestError> {
    let request = DescribeConfigsRequest::default()
        .with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(StrBytes::from_string(name.to_string()))
            .with_configuration_keys(None)])
        .with_include_synonyms(true);
    let response = api
        .gateway
        .call_on::<DescribeConfigs>(node, caller, DESCRIBE_CONFIGS_VERSION, request)
        .await?;
    let what = what(resource_type, name);
    let result =
        response.results.into_iter().next().ok_or_else(|| {
            RestError::internal(format!("{what}: DescribeConfigs answered nothing"))
        })?;
    if result.error_code != kafka::NONE {
        return Err(errors::kafka(
            result.error_code,
            result.error_message.as_deref(),
            &what,
        ));
    }
    let mut configs = result.configs;
    configs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(configs)
}

/// 404 naming the first of `names` that resource (`resource_type`, `name`) has no config of.
pub fn check_known<'a>(
    configs: &[DescribeConfigsResourceResult],
    names: impl IntoIterator<Item = &'a str>,
    resource_type: i8,
    name: &str,
    cluster_id: &str,
) -> Result<(), RestError> {
    for wanted in names {
        if !configs.iter().any(|c| c.name.as_str() == wanted) {
            return Err(config_not_found(wanted, resource_type, name, cluster_id));
        }
    }
    Ok(())
}

/// 404: resource (`resource_type`, `name`) has no config `config`.
pub fn config_not_found(
    config: &str,
    resource_type: i8,
    name: &str,
    cluster_id: &str,
) -> RestError {
    let kind = if resource_type == RESOURCE_TOPIC {
        "TOPIC"
    } else {
        "BROKER"
    };
    errors::not_found(format!(
        "Config {config} cannot be found for {kind} {name} in cluster {cluster_id}."
    ))
}

/// Applies `commands` to resource (`resource_type`, `name`) in one IncrementalAlterConfigs as
/// `caller` (all or none); with `validate_only`, only checks them.
pub async fn alter(
    api: &RestApi,
    caller: &Caller,
    resource_type: i8,
    name: &str,
    commands: &[AlterCommand],
    validate_only: bool,
) -> Result<(), RestError> {
    let request = IncrementalAlterConfigsRequest::default()
        .with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(StrBytes::from_string(name.to_string()))
            .with_configs(
                commands
                    .iter()
                    .map(|c| {
                        AlterableConfig::default()
                            .with_name(StrBytes::from_string(c.name.clone()))
                            .with_config_operation(c.op.code())
                            .with_value(c.value.clone().map(StrBytes::from_string))
                    })
                    .collect(),
            )])
        .with_validate_only(validate_only);
    let response = api
        .gateway
        .call::<IncrementalAlterConfigs>(caller, INCREMENTAL_ALTER_CONFIGS_VERSION, request)
        .await?;
    match response.responses.into_iter().next() {
        Some(r) if r.error_code == kafka::NONE => Ok(()),
        Some(r) => Err(errors::kafka(
            r.error_code,
            r.error_message.as_deref(),
            &what(resource_type, name),
        )),
        None => Err(RestError::internal(format!(
            "{}: IncrementalAlterConfigs answered nothing",
            what(resource_type, name)
        ))),
    }
}

fn what(resource_type: i8, name: &str) -> String {
    if resource_type == RESOURCE_TOPIC {
        format!("topic {name}")
    } else {
        format!("broker {name}")
    }
}

#[cfg(test)]
mod tests {
    use super::source_name;

    #[test]
    fn sources_keep_kafkas_names() {
        assert_eq!(source_name(1), "DYNAMIC_TOPIC_CONFIG");
        assert_eq!(source_name(4), "STATIC_BROKER_CONFIG");
        assert_eq!(source_name(5), "DEFAULT_CONFIG");
        assert_eq!(source_name(0), "UNKNOWN");
        assert_eq!(source_name(-3), "UNKNOWN");
    }
}
