//! DescribeClientQuotas (key 48, v0–1): quotas are not served yet, so there are none to describe
//! and every valid filter matches nothing. `kafka-configs.sh --describe --entity-type users`
//! asks for them beside the SCRAM credentials. Filters are checked as Kafka checks them.

use kafka_protocol::messages::{DescribeClientQuotasRequest, DescribeClientQuotasResponse};

use super::str_bytes;
use crate::authz::Authz;
use crate::error_codes::CLUSTER_AUTHORIZATION_FAILED;
use millrace_cluster::acl::AclOperation;

use crate::error_codes::INVALID_REQUEST;

/// Kafka's entity types.
const ENTITY_TYPES: &[&str] = &["user", "client-id", "ip"];
/// `match_type`: exact name, default entity, any entity.
const MATCH_EXACT: i8 = 0;
const MATCH_ANY: i8 = 2;

pub fn handle(authz: &Authz, request: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse {
    if !authz.cluster(AclOperation::DescribeConfigs) {
        return DescribeClientQuotasResponse::default()
            .with_error_code(CLUSTER_AUTHORIZATION_FAILED)
            .with_entries(None);
    }
    let mut seen: Vec<&str> = Vec::new();
    for component in &request.components {
        let entity = component.entity_type.as_str();
        let problem = if !ENTITY_TYPES.contains(&entity) {
            Some(format!("Custom entity type '{entity}' not supported"))
        } else if seen.contains(&entity) {
            Some(format!("Duplicate {entity} filter component entity type"))
        } else if !(MATCH_EXACT..=MATCH_ANY).contains(&component.match_type) {
            Some(format!("Unexpected match type {}", component.match_type))
        } else if component.match_type == MATCH_EXACT && component._match.is_none() {
            Some(format!("Missing match for {entity} filter component"))
        } else {
            None
        };
        if let Some(message) = problem {
            return DescribeClientQuotasResponse::default()
                .with_error_code(INVALID_REQUEST)
                .with_error_message(Some(str_bytes(&message)))
                .with_entries(None);
        }
        seen.push(entity);
    }
    DescribeClientQuotasResponse::default().with_entries(Some(Vec::new()))
}
