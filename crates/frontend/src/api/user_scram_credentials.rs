//! AlterUserScramCredentials (key 51) and DescribeUserScramCredentials (key 50): SCRAM users, as
//! `kafka-configs.sh --entity-type users --add-config 'SCRAM-SHA-256=[password=…]'` manages them.
//! An alteration is forwarded to the active controller with the keys derived here from the
//! salted password the client sent (the password itself never reaches the broker), and answered
//! once committed and visible in this broker's image. A description reads this broker's image.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use millrace_cluster::scram::ScramMechanism;
use millrace_controller::messages::ScramUpsertion;
use millrace_controller::{ControllerError, ControllerRequest, ControllerResponse};

use super::{forward, str_bytes};
use crate::authz::Authz;
use crate::error_codes::CLUSTER_AUTHORIZATION_FAILED;
use millrace_cluster::acl::AclOperation;

use crate::error_codes::{self, DUPLICATE_RESOURCE, RESOURCE_NOT_FOUND};
use crate::handler::{api_handler, response_fields, Reply};
use crate::scram::derive_keys;
use crate::BrokerContext;

api_handler! {
    /// DescribeUserScramCredentials: its key, versions, handler and error codes, for [`crate::registry`].
    DescribeUserScramCredentials, versions 0..=0, DescribeUserScramCredentialsRequest,
    |call, request| Reply::Now(describe(call.ctx, &call.authz, request)),
}

response_fields!(
    DescribeUserScramCredentialsResponse:
    errors[error_code, results[error_code]],
    throttle_time_ms
);

api_handler! {
    /// AlterUserScramCredentials: its key, versions, handler and error codes, for [`crate::registry`].
    AlterUserScramCredentials, versions 0..=0, AlterUserScramCredentialsRequest,
    |call, request| Reply::later(alter(call.ctx.clone(), call.authz, request)),
}

response_fields!(AlterUserScramCredentialsResponse: errors[results[error_code]], throttle_time_ms);

pub async fn alter(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    if !authz.cluster(AclOperation::Alter) {
        // Every user named, once, in order: CLUSTER_AUTHORIZATION_FAILED.
        let mut seen = BTreeSet::new();
        let results = request
            .deletions
            .iter()
            .map(|d| &d.name)
            .chain(request.upsertions.iter().map(|u| &u.name))
            .filter(|name| seen.insert(name.to_string()))
            .map(|name| {
                AlterUserScramCredentialsResult::default()
                    .with_user(name.clone())
                    .with_error_code(CLUSTER_AUTHORIZATION_FAILED)
            })
            .collect();
        return AlterUserScramCredentialsResponse::default().with_results(results);
    }
    let deletions: Vec<(String, i8)> = request
        .deletions
        .iter()
        .map(|d| (d.name.to_string(), d.mechanism))
        .collect();
    let upsertions: Vec<ScramUpsertion> = request
        .upsertions
        .iter()
        .map(|u| {
            // Keys only for a known mechanism and a non-empty salted password; the controller
            // refuses the rest with Kafka's codes.
            let (stored_key, server_key) = match ScramMechanism::from_kafka_type(u.mechanism) {
                Some(m) if !u.salted_password.is_empty() => derive_keys(m, &u.salted_password),
                _ => (Vec::new(), Vec::new()),
            };
            ScramUpsertion {
                name: u.name.to_string(),
                mechanism: u.mechanism,
                iterations: u.iterations,
                salt: u.salt.to_vec(),
                stored_key,
                server_key,
            }
        })
        .collect();
    let expected: Vec<(String, i8, Option<Vec<u8>>)> = deletions
        .iter()
        .map(|(n, m)| (n.clone(), *m, None))
        .chain(
            upsertions
                .iter()
                .map(|u| (u.name.clone(), u.mechanism, Some(u.stored_key.clone()))),
        )
        .collect();
    let mut users: Vec<String> = Vec::new();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for (name, _, _) in &expected {
        if seen.insert(name) {
            users.push(name.clone());
        }
    }
    let outcome = match forward::forward(
        &ctx,
        ControllerRequest::AlterUserScramCredentials {
            deletions,
            upsertions,
        },
        forward::timeout(0),
    )
    .await
    {
        Ok(ControllerResponse::AlterUserScramCredentials { results }) => {
            Ok(results.into_iter().collect::<BTreeMap<_, _>>())
        }
        Ok(other) => Err(ControllerError::Internal(format!(
            "unexpected answer {other:?}"
        ))),
        Err(e) => Err(e),
    };
    if let Ok(results) = &outcome {
        let done: Vec<&(String, i8, Option<Vec<u8>>)> = expected
            .iter()
            .filter(|(n, _, _)| results.get(n).is_some_and(Result::is_ok))
            .collect();
        forward::await_image(&ctx, |image| {
            done.iter().all(|(name, code, stored_key)| {
                let Some(m) = ScramMechanism::from_kafka_type(*code) else {
                    return true;
                };
                let now = image.scram_credential(name, m).map(|c| &c.stored_key);
                now == stored_key.as_ref()
            })
        })
        .await;
    }
    let results = users
        .into_iter()
        .map(|user| {
            let one = match &outcome {
                Ok(results) => results
                    .get(&user)
                    .cloned()
                    .unwrap_or_else(|| Err(ControllerError::Internal("no answer".into()))),
                Err(e) => Err(e.clone()),
            };
            let mut result = AlterUserScramCredentialsResult::default().with_user(str_bytes(&user));
            if let Err(e) = one {
                let err = error_codes::from_controller(&e, &user);
                result.error_code = err.code;
                result.error_message = err.message.as_deref().map(str_bytes);
            }
            result
        })
        .collect();
    AlterUserScramCredentialsResponse::default().with_results(results)
}

pub fn describe(
    ctx: &BrokerContext,
    authz: &Authz,
    request: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    if !authz.cluster(AclOperation::Describe) {
        return DescribeUserScramCredentialsResponse::default()
            .with_error_code(CLUSTER_AUTHORIZATION_FAILED);
    }
    let image = ctx.cluster.image();
    let info = |name: &str| -> Vec<CredentialInfo> {
        image
            .scram_credentials
            .get(name)
            .map(|list| {
                list.iter()
                    .map(|c| {
                        CredentialInfo::default()
                            .with_mechanism(c.mechanism.kafka_type())
                            .with_iterations(c.iterations)
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let named: Vec<String> = request
        .users
        .iter()
        .flatten()
        .map(|u| u.name.to_string())
        .collect();
    let results = if named.is_empty() {
        // Null or empty: every user with a credential.
        image
            .scram_credentials
            .keys()
            .map(|name| {
                DescribeUserScramCredentialsResult::default()
                    .with_user(str_bytes(name))
                    .with_credential_infos(info(name))
            })
            .collect()
    } else {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for name in &named {
            *counts.entry(name.as_str()).or_default() += 1;
        }
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        named
            .iter()
            .filter(|n| seen.insert(n.as_str()))
            .map(|name| {
                let result = DescribeUserScramCredentialsResult::default().with_user(str_bytes(name));
                if counts.get(name.as_str()).copied().unwrap_or(0) > 1 {
                    return result.with_error_code(DUPLICATE_RESOURCE).with_error_message(Some(
                        str_bytes(&format!("Cannot describe SCRAM credentials for the same user twice in a single request: {name}")),
                    ));
                }
                let infos = info(name);
                if infos.is_empty() {
                    return result.with_error_code(RESOURCE_NOT_FOUND).with_error_message(Some(
                        str_bytes(&format!("Attempt to describe a user credential that does not exist: {name}")),
                    ));
                }
                result.with_credential_infos(infos)
            })
            .collect()
    };
    DescribeUserScramCredentialsResponse::default().with_results(results)
}
