//! DescribeClientQuotas (key 48) and AlterClientQuotas (key 49), v0–1, as `kafka-configs.sh
//! --entity-type users|clients` uses them. Quotas live in the metadata log: an alteration is
//! forwarded to the active controller (which checks it with Kafka's rules) and answered once this
//! broker's image has it; a description reads this broker's image with Kafka's filter rules.
//! DescribeConfigs / AlterConfigs on the cluster are needed (CLUSTER_AUTHORIZATION_FAILED).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kafka_protocol::messages::alter_client_quotas_response::{
    EntityData as AlteredEntity, EntryData as AlteredEntry,
};
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};
use millrace_cluster::acl::AclOperation;
use millrace_cluster::quota::{EntityName, QuotaEntity, ENTITY_CLIENT_ID, ENTITY_IP, ENTITY_USER};
use millrace_controller::messages::QuotaAlteration;
use millrace_controller::{ControllerError, ControllerRequest, ControllerResponse};

use super::{forward, str_bytes};
use crate::authz::Authz;
use crate::error_codes::{
    self, CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, UNSUPPORTED_VERSION,
};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// DescribeClientQuotas: its key, versions, handler and error codes, for [`crate::registry`].
    DescribeClientQuotas, versions 0..=1, DescribeClientQuotasRequest,
    |call, request| Reply::Now(describe(call.ctx, &call.authz, request)),
}

response_fields!(DescribeClientQuotasResponse: errors[error_code], throttle_time_ms);

api_handler! {
    /// AlterClientQuotas: its key, versions, handler and error codes, for [`crate::registry`].
    AlterClientQuotas, versions 0..=1, AlterClientQuotasRequest,
    |call, request| Reply::later(alter(call.ctx.clone(), call.authz, request)),
}

response_fields!(AlterClientQuotasResponse: errors[entries[error_code]], throttle_time_ms);

/// Kafka's entity types.
const ENTITY_TYPES: &[&str] = &[ENTITY_USER, ENTITY_CLIENT_ID, ENTITY_IP];
/// `match_type`: exact name, default entity, any entity.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_ANY: i8 = 2;

/// An entity as the request names it: (type, name; `None` = the default), sorted by type.
type EntityKey = Vec<(String, Option<String>)>;

/// One filter component, checked.
struct Component<'a> {
    entity_type: &'a str,
    match_type: i8,
    name: Option<&'a str>,
}

pub fn describe(
    ctx: &BrokerContext,
    authz: &Authz,
    request: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let refuse = |code: i16, message: Option<String>| {
        DescribeClientQuotasResponse::default()
            .with_error_code(code)
            .with_error_message(message.as_deref().map(str_bytes))
            .with_entries(None)
    };
    if !authz.cluster(AclOperation::DescribeConfigs) {
        return refuse(CLUSTER_AUTHORIZATION_FAILED, None);
    }
    let mut components: Vec<Component> = Vec::new();
    for component in &request.components {
        let entity = component.entity_type.as_str();
        let name = component._match.as_deref();
        // Kafka 4.1's checks and messages, in its order.
        let problem = if !ENTITY_TYPES.contains(&entity) {
            Some((
                UNSUPPORTED_VERSION,
                format!("Unsupported entity type {entity}"),
            ))
        } else if components.iter().any(|c| c.entity_type == entity) {
            Some((
                INVALID_REQUEST,
                format!("Entity type {entity} cannot appear more than once in the filter."),
            ))
        } else {
            match (component.match_type, name) {
                (MATCH_EXACT, None) => Some((
                    INVALID_REQUEST,
                    "Request specified MATCH_TYPE_EXACT, but set match string to null.".to_string(),
                )),
                (MATCH_DEFAULT, Some(_)) => Some((
                    INVALID_REQUEST,
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                        .to_string(),
                )),
                (MATCH_ANY, Some(_)) => Some((
                    INVALID_REQUEST,
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                        .to_string(),
                )),
                (MATCH_EXACT..=MATCH_ANY, _) => None,
                (other, _) => Some((INVALID_REQUEST, format!("Unknown match type {other}"))),
            }
        };
        if let Some((code, message)) = problem {
            return refuse(code, Some(message));
        }
        components.push(Component {
            entity_type: entity,
            match_type: component.match_type,
            name,
        });
    }
    let ip = components.iter().any(|c| c.entity_type == ENTITY_IP);
    if ip && components.len() > 1 {
        return refuse(
            INVALID_REQUEST,
            Some(
                "Invalid entity filter component combination, IP filter component should not be \
                 used with user or clientId filter component."
                    .to_string(),
            ),
        );
    }
    let image = ctx.cluster.image();
    let entries = image
        .client_quotas
        .iter()
        .filter(|(entity, _)| matches(entity, &components, request.strict))
        .map(|(entity, values)| {
            EntryData::default()
                .with_entity(
                    entity
                        .iter()
                        .map(|(t, n)| {
                            EntityData::default()
                                .with_entity_type(str_bytes(t))
                                .with_entity_name(n.to_wire().map(str_bytes))
                        })
                        .collect(),
                )
                .with_values({
                    let mut values: Vec<(&String, &f64)> = values.iter().collect();
                    values.sort_by_key(|(k, _)| kafka_key_rank(k));
                    values
                        .into_iter()
                        .map(|(k, v)| ValueData::default().with_key(str_bytes(k)).with_value(*v))
                        .collect()
                })
        })
        .collect();
    // Kafka answers an empty (not null) message on success.
    DescribeClientQuotasResponse::default()
        .with_error_message(Some(str_bytes("")))
        .with_entries(Some(entries))
}

/// Kafka answers an entity's values in its `HashMap`'s order (bucket of the key's hash in a
/// 16-slot table), and `kafka-configs.sh --describe` prints them in the order they arrive: the
/// same order here gives the same lines.
fn kafka_key_rank(key: &str) -> (u8, &str) {
    let bucket = match key {
        "connection_creation_rate" => 0,
        "request_percentage" => 7,
        "producer_byte_rate" => 11,
        "consumer_byte_rate" => 12,
        "controller_mutation_rate" => 14,
        _ => u8::MAX,
    };
    (bucket, key)
}

/// Kafka's rule: every component names a type the entity has, with a matching name; strict
/// filters also want no other type in the entity.
fn matches(entity: &QuotaEntity, components: &[Component], strict: bool) -> bool {
    if strict && entity.len() != components.len() {
        return false;
    }
    components.iter().all(|c| match entity.get(c.entity_type) {
        None => false,
        Some(name) => match c.match_type {
            MATCH_EXACT => name.to_wire() == c.name,
            MATCH_DEFAULT => *name == EntityName::Default,
            _ => true,
        },
    })
}

pub async fn alter(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    if !authz.cluster(AclOperation::AlterConfigs) {
        return AlterClientQuotasResponse::default().with_entries(
            request
                .entries
                .iter()
                .map(|entry| {
                    AlteredEntry::default()
                        .with_error_code(CLUSTER_AUTHORIZATION_FAILED)
                        .with_error_message(None)
                        .with_entity(
                            entry
                                .entity
                                .iter()
                                .map(|e| {
                                    AlteredEntity::default()
                                        .with_entity_type(e.entity_type.clone())
                                        .with_entity_name(e.entity_name.clone())
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
    }
    // Kafka answers once per entity: an entity named twice gets one answer, the refusal of its
    // second entry (its first is applied), and an entry naming a key twice is refused whole.
    let mut order: Vec<EntityKey> = Vec::new();
    let mut seen: BTreeSet<EntityKey> = BTreeSet::new();
    let mut refused: BTreeMap<EntityKey, String> = BTreeMap::new();
    let mut entries: Vec<QuotaAlteration> = Vec::new();
    for entry in &request.entries {
        let entity: EntityKey = entry
            .entity
            .iter()
            .map(|e| {
                (
                    e.entity_type.to_string(),
                    e.entity_name.as_ref().map(|n| n.to_string()),
                )
            })
            .collect();
        let mut key = entity.clone();
        key.sort();
        let duplicate = || format!("Ignoring duplicate entity {}", kafka_entity_text(&entity));
        if !seen.insert(key.clone()) {
            refused.insert(key, duplicate());
            continue;
        }
        order.push(key.clone());
        let mut keys = BTreeSet::new();
        if !entry.ops.iter().all(|op| keys.insert(op.key.as_str())) {
            refused.insert(key, duplicate());
            continue;
        }
        entries.push(QuotaAlteration {
            entity,
            changes: entry
                .ops
                .iter()
                .map(|op| (op.key.to_string(), (!op.remove).then_some(op.value)))
                .collect(),
        });
    }
    let outcome: Result<Vec<Result<(), ControllerError>>, ControllerError> = if entries.is_empty() {
        Ok(Vec::new())
    } else {
        match forward::forward(
            &ctx,
            ControllerRequest::AlterClientQuotas {
                entries: entries.clone(),
                validate_only: request.validate_only,
            },
            forward::timeout(0),
        )
        .await
        {
            Ok(ControllerResponse::AlterClientQuotas { results })
                if results.len() == entries.len() =>
            {
                Ok(results)
            }
            Ok(other) => Err(ControllerError::Internal(format!(
                "unexpected answer {other:?}"
            ))),
            Err(e) => Err(e),
        }
    };
    let mut answers: BTreeMap<EntityKey, (i16, Option<String>)> = BTreeMap::new();
    match &outcome {
        Ok(results) => {
            if !request.validate_only {
                let applied: Vec<&QuotaAlteration> = entries
                    .iter()
                    .zip(results)
                    .filter(|(_, r)| r.is_ok())
                    .map(|(e, _)| e)
                    .collect();
                forward::await_image(&ctx, |image| applied.iter().all(|a| visible(image, a))).await;
            }
            for (entry, result) in entries.iter().zip(results) {
                let mut key = entry.entity.clone();
                key.sort();
                let answer = match result {
                    Ok(()) => (0, None),
                    Err(e) => {
                        let err = error_codes::from_controller(e, "AlterClientQuotas");
                        (err.code, err.message)
                    }
                };
                answers.insert(key, answer);
            }
        }
        Err(e) => {
            let err = error_codes::from_controller(e, "AlterClientQuotas");
            let answer = (err.code, err.message);
            for key in &order {
                answers.insert(key.clone(), answer.clone());
            }
        }
    }
    for (key, message) in refused {
        answers.insert(key, (INVALID_REQUEST, Some(message)));
    }
    AlterClientQuotasResponse::default().with_entries(
        order
            .iter()
            .map(|key| {
                let (code, message) = answers.get(key).cloned().unwrap_or((0, None));
                AlteredEntry::default()
                    .with_error_code(code)
                    .with_error_message(message.as_deref().map(str_bytes))
                    .with_entity(
                        key.iter()
                            .map(|(t, n)| {
                                AlteredEntity::default()
                                    .with_entity_type(str_bytes(t))
                                    .with_entity_name(n.as_deref().map(str_bytes))
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

/// Kafka's `ClientQuotaEntity.toString()`: `ClientQuotaEntity(entries={client-id=app})`.
fn kafka_entity_text(entity: &[(String, Option<String>)]) -> String {
    let entries: Vec<String> = entity
        .iter()
        .map(|(t, n)| format!("{t}={}", n.as_deref().unwrap_or("null")))
        .collect();
    format!("ClientQuotaEntity(entries={{{}}})", entries.join(", "))
}

/// Whether the image shows an alteration's changes.
fn visible(image: &millrace_cluster::image::MetadataImage, alteration: &QuotaAlteration) -> bool {
    let entity: QuotaEntity = alteration
        .entity
        .iter()
        .map(|(t, n)| (t.clone(), EntityName::from_wire(n.as_deref())))
        .collect();
    let values = image.client_quotas.get(&entity);
    alteration
        .changes
        .iter()
        .all(|(key, value)| values.and_then(|v| v.get(key)).copied() == *value)
}
