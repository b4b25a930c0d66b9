//! Client quotas as Kafka keeps them in the metadata log (`ClientQuotaRecord`): per entity (a
//! user, a client id, both, or an IP address, each named or the `<default>`), a value per quota
//! key (`producer_byte_rate`, `consumer_byte_rate`, `request_percentage`,
//! `controller_mutation_rate`; `connection_creation_rate` for an IP). The controller checks an
//! alteration with Kafka's rules ([`validate`]); brokers find the quota that applies to a
//! (user, client id) with Kafka's precedence ([`quota_for`]) and enforce it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
pub const REQUEST_PERCENTAGE: &str = "request_percentage";
pub const CONTROLLER_MUTATION_RATE: &str = "controller_mutation_rate";
pub const CONNECTION_CREATION_RATE: &str = "connection_creation_rate";

/// Kafka's entity types.
pub const ENTITY_USER: &str = "user";
pub const ENTITY_CLIENT_ID: &str = "client-id";
pub const ENTITY_IP: &str = "ip";

/// Whether a key's value must be integral (Kafka's LONG and INT quota configs).
fn integral(key: &str) -> Option<bool> {
    match key {
        PRODUCER_BYTE_RATE | CONSUMER_BYTE_RATE => Some(true),
        REQUEST_PERCENTAGE | CONTROLLER_MUTATION_RATE => Some(false),
        _ => None,
    }
}

/// One entity name: a name, or the default for its type (`<default>`, null on the wire).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EntityName {
    Default,
    Named(String),
}

impl EntityName {
    /// From the wire: null is the default.
    pub fn from_wire(name: Option<&str>) -> Self {
        match name {
            None => EntityName::Default,
            Some(n) => EntityName::Named(n.to_string()),
        }
    }

    pub fn to_wire(&self) -> Option<&str> {
        match self {
            EntityName::Default => None,
            EntityName::Named(n) => Some(n),
        }
    }
}

/// A quota entity: entity type → name, as Kafka's `ClientQuotaEntity`.
pub type QuotaEntity = BTreeMap<String, EntityName>;

/// Every quota in force: entity → key → value.
pub type ClientQuotas = BTreeMap<QuotaEntity, BTreeMap<String, f64>>;

/// Why an alteration of one entity is refused (Kafka answers INVALID_REQUEST with this message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidQuota(pub String);

/// Kafka's checks (`ClientQuotaControlManager`) on an alteration of one entity: the entity's
/// types and names, their combination, and each key and value set (`None` = remove).
pub fn validate(
    entity: &[(String, Option<String>)],
    changes: &[(String, Option<f64>)],
) -> Result<QuotaEntity, InvalidQuota> {
    let invalid = |m: String| Err(InvalidQuota(m));
    if entity.is_empty() {
        return invalid("Invalid empty client quota entity".into());
    }
    let mut out = QuotaEntity::new();
    for (entity_type, name) in entity {
        if out.contains_key(entity_type) {
            return invalid(format!(
                "Invalid client quota entity, duplicate entity entry {entity_type}"
            ));
        }
        if ![ENTITY_USER, ENTITY_CLIENT_ID, ENTITY_IP].contains(&entity_type.as_str()) {
            return invalid(format!("Unhandled client quota entity type: {entity_type}"));
        }
        if name.as_deref() == Some("") {
            return invalid(format!("Empty {entity_type} not supported"));
        }
        out.insert(entity_type.clone(), EntityName::from_wire(name.as_deref()));
    }
    let ip = out.contains_key(ENTITY_IP);
    if ip && out.len() > 1 {
        return invalid(
            "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
                .into(),
        );
    }
    if let Some(EntityName::Named(address)) = out.get(ENTITY_IP) {
        if address.parse::<std::net::IpAddr>().is_err() {
            return invalid(format!("{address} is not a valid IP or resolvable host."));
        }
    }
    for (key, value) in changes {
        let Some(value) = value else { continue };
        let known = if ip {
            (key == CONNECTION_CREATION_RATE).then_some(true)
        } else {
            integral(key)
        };
        let Some(integral) = known else {
            return invalid(format!("Invalid configuration key {key}"));
        };
        if *value <= 0.0 || value.is_nan() {
            return invalid(format!("Quota {key} must be greater than 0"));
        }
        if integral {
            let limit = if key == CONNECTION_CREATION_RATE {
                f64::from(i32::MAX)
            } else {
                i64::MAX as f64
            };
            if *value > limit {
                let kind = if key == CONNECTION_CREATION_RATE {
                    "an INT"
                } else {
                    "a LONG"
                };
                return invalid(format!("Proposed value for {key} is too large for {kind}."));
            }
            if (value % 1.0).abs() > 1e-6 {
                return invalid(format!("{key} cannot be a fractional value."));
            }
        }
    }
    Ok(out)
}

/// The quota for `key` that applies to a client of `user` with `client_id`, and the entity it is
/// set on (clients matched by the same entity share one rate), with Kafka's precedence: user and
/// client id, user and default client, user, default user and client id, default user and
/// default client, default user, client id, default client.
pub fn quota_for<'a>(
    quotas: &'a ClientQuotas,
    user: &str,
    client_id: &str,
    key: &str,
) -> Option<(&'a QuotaEntity, f64)> {
    let named = |s: &str| EntityName::Named(s.to_string());
    let user_levels = [named(user), EntityName::Default];
    let client_levels = [named(client_id), EntityName::Default];
    let mut candidates: Vec<QuotaEntity> = Vec::with_capacity(8);
    for u in &user_levels {
        for c in &client_levels {
            candidates.push(entity(Some(u.clone()), Some(c.clone())));
        }
        candidates.push(entity(Some(u.clone()), None));
    }
    for c in &client_levels {
        candidates.push(entity(None, Some(c.clone())));
    }
    candidates.iter().find_map(|candidate| {
        let (found, keys) = quotas.get_key_value(candidate)?;
        keys.get(key).map(|v| (found, *v))
    })
}

fn entity(user: Option<EntityName>, client_id: Option<EntityName>) -> QuotaEntity {
    let mut out = QuotaEntity::new();
    if let Some(u) = user {
        out.insert(ENTITY_USER.to_string(), u);
    }
    if let Some(c) = client_id {
        out.insert(ENTITY_CLIENT_ID.to_string(), c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(quotas: &mut ClientQuotas, e: &[(&str, Option<&str>)], key: &str, value: f64) {
        let e: Vec<(String, Option<String>)> = e
            .iter()
            .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
            .collect();
        let entity = validate(&e, &[(key.to_string(), Some(value))]).expect("valid");
        quotas
            .entry(entity)
            .or_default()
            .insert(key.to_string(), value);
    }

    #[test]
    fn the_most_specific_entity_wins() {
        let mut q = ClientQuotas::new();
        let rate = |q: &ClientQuotas, u: &str, c: &str| {
            quota_for(q, u, c, PRODUCER_BYTE_RATE).map(|(_, v)| v)
        };
        assert_eq!(rate(&q, "alice", "app"), None);
        set(&mut q, &[("client-id", None)], PRODUCER_BYTE_RATE, 8.0);
        assert_eq!(rate(&q, "alice", "app"), Some(8.0));
        set(
            &mut q,
            &[("client-id", Some("app"))],
            PRODUCER_BYTE_RATE,
            7.0,
        );
        assert_eq!(rate(&q, "alice", "app"), Some(7.0));
        set(&mut q, &[("user", None)], PRODUCER_BYTE_RATE, 6.0);
        assert_eq!(rate(&q, "alice", "app"), Some(6.0));
        set(&mut q, &[("user", Some("alice"))], PRODUCER_BYTE_RATE, 3.0);
        assert_eq!(rate(&q, "alice", "app"), Some(3.0));
        assert_eq!(rate(&q, "bob", "app"), Some(6.0));
        set(
            &mut q,
            &[("user", Some("alice")), ("client-id", Some("app"))],
            PRODUCER_BYTE_RATE,
            1.0,
        );
        assert_eq!(rate(&q, "alice", "app"), Some(1.0));
        assert_eq!(rate(&q, "alice", "other"), Some(3.0));
        // Another key is looked up on its own.
        assert_eq!(quota_for(&q, "alice", "app", CONSUMER_BYTE_RATE), None);
    }

    #[test]
    fn alterations_are_checked_as_kafka_checks_them() {
        let e = |t: &str, n: Option<&str>| vec![(t.to_string(), n.map(str::to_string))];
        let change = |k: &str, v: f64| vec![(k.to_string(), Some(v))];
        let err = |e: Vec<(String, Option<String>)>, c: Vec<(String, Option<f64>)>| {
            validate(&e, &c).expect_err("refused").0
        };
        assert_eq!(err(vec![], vec![]), "Invalid empty client quota entity");
        assert_eq!(
            err(e("group", Some("g")), vec![]),
            "Unhandled client quota entity type: group"
        );
        assert_eq!(err(e("user", Some("")), vec![]), "Empty user not supported");
        assert_eq!(
            err(e("user", Some("a")), change("foo", 1.0)),
            "Invalid configuration key foo"
        );
        assert_eq!(
            err(e("user", Some("a")), change(PRODUCER_BYTE_RATE, 0.0)),
            "Quota producer_byte_rate must be greater than 0"
        );
        assert_eq!(
            err(e("user", Some("a")), change(PRODUCER_BYTE_RATE, 1.5)),
            "producer_byte_rate cannot be a fractional value."
        );
        assert!(validate(&e("user", Some("a")), &change(REQUEST_PERCENTAGE, 1.5)).is_ok());
        assert_eq!(
            err(e("ip", Some("not an ip")), vec![]),
            "not an ip is not a valid IP or resolvable host."
        );
        assert_eq!(
            err(e("ip", Some("10.0.0.1")), change(PRODUCER_BYTE_RATE, 1.0)),
            "Invalid configuration key producer_byte_rate"
        );
        let mut both = e("user", Some("a"));
        both.extend(e("user", Some("b")));
        assert!(err(both, vec![]).contains("duplicate entity entry user"));
    }
}
