//! CreateAcls (key 30), DescribeAcls (key 29) and DeleteAcls (key 31), as `kafka-acls.sh` and the
//! admin clients use them. ACLs live in the metadata log: a creation or deletion is forwarded to
//! the active controller and answered once committed and visible in this broker's image; a
//! description reads this broker's image. Creating and deleting needs Alter on the cluster,
//! describing needs Describe (CLUSTER_AUTHORIZATION_FAILED for the whole request otherwise);
//! without an authorizer every request gets SECURITY_DISABLED, as in Kafka.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use millrace_cluster::acl::{
    AclFilter, AclOperation, AclPermission, PatternType, ResourceType, StandardAcl,
};
use millrace_controller::{ControllerError, ControllerRequest, ControllerResponse};

use super::{forward, str_bytes};
use crate::authz::Authz;
use crate::error_codes::{self, CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, SECURITY_DISABLED};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// DescribeAcls: its key, versions, handler and error codes, for [`crate::registry`].
    DescribeAcls, versions 1..=3, DescribeAclsRequest,
    |call, request| Reply::Now(describe(call.ctx, &call.authz, request)),
}

response_fields!(DescribeAclsResponse: errors[error_code], throttle_time_ms);

api_handler! {
    /// CreateAcls: its key, versions, handler and error codes, for [`crate::registry`].
    CreateAcls, versions 1..=3, CreateAclsRequest,
    |call, request| Reply::later(create(call.ctx.clone(), call.authz, request)),
}

response_fields!(CreateAclsResponse: errors[results[error_code]], throttle_time_ms);

api_handler! {
    /// DeleteAcls: its key, versions, handler and error codes, for [`crate::registry`].
    DeleteAcls, versions 1..=3, DeleteAclsRequest,
    |call, request| Reply::later(delete(call.ctx.clone(), call.authz, request)),
}

response_fields!(DeleteAclsResponse: errors[filter_results[error_code]], throttle_time_ms);

const NO_AUTHORIZER: &str = "No Authorizer is configured on the broker";

/// The request as a whole: `operation` on the cluster, then an authorizer to ask.
fn admitted(authz: &Authz, operation: AclOperation) -> Result<(), (i16, &'static str)> {
    if !authz.cluster(operation) {
        return Err((
            CLUSTER_AUTHORIZATION_FAILED,
            "Cluster authorization failed.",
        ));
    }
    if !authz.enabled() {
        return Err((SECURITY_DISABLED, NO_AUTHORIZER));
    }
    Ok(())
}

pub async fn create(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: CreateAclsRequest,
) -> CreateAclsResponse {
    if let Err((code, message)) = admitted(&authz, AclOperation::Alter) {
        let result = AclCreationResult::default()
            .with_error_code(code)
            .with_error_message(Some(str_bytes(message)));
        return CreateAclsResponse::default().with_results(vec![result; request.creations.len()]);
    }
    // The broker's own checks first; the rest go to the controller, which checks them again.
    let acls: Vec<Result<StandardAcl, String>> = request
        .creations
        .iter()
        .map(|c| {
            let acl = from_creation(c);
            acl.validate().map(|()| acl).map_err(|e| e.0)
        })
        .collect();
    let valid: Vec<StandardAcl> = acls
        .iter()
        .filter_map(|a| a.as_ref().ok())
        .cloned()
        .collect();
    let outcome = if valid.is_empty() {
        Ok(Vec::new())
    } else {
        match forward::forward(
            &ctx,
            ControllerRequest::CreateAcls {
                acls: valid.clone(),
            },
            forward::timeout(0),
        )
        .await
        {
            Ok(ControllerResponse::CreateAcls { results }) => Ok(results),
            Ok(other) => Err(ControllerError::Internal(format!(
                "unexpected answer {other:?}"
            ))),
            Err(e) => Err(e),
        }
    };
    if let Ok(results) = &outcome {
        let created: Vec<&StandardAcl> = valid
            .iter()
            .zip(results)
            .filter(|(_, r)| r.is_ok())
            .map(|(a, _)| a)
            .collect();
        forward::await_image(&ctx, |image| {
            created.iter().all(|a| image.acls.contains(*a))
        })
        .await;
    }
    let mut controller_results = match &outcome {
        Ok(results) => results.iter().cloned().map(Some).collect::<Vec<_>>(),
        Err(_) => Vec::new(),
    }
    .into_iter();
    let results = acls
        .iter()
        .map(|acl| {
            let result = match acl {
                Err(message) => Err((INVALID_REQUEST, message.clone())),
                Ok(_) => match &outcome {
                    Err(e) => Err(controller_error(e)),
                    Ok(_) => match controller_results.next().flatten() {
                        Some(Ok(())) => Ok(()),
                        Some(Err(e)) => Err(controller_error(&e)),
                        None => Err(controller_error(&ControllerError::Internal(
                            "no answer".into(),
                        ))),
                    },
                },
            };
            match result {
                Ok(()) => AclCreationResult::default().with_error_message(None),
                Err((code, message)) => AclCreationResult::default()
                    .with_error_code(code)
                    .with_error_message(Some(str_bytes(&message))),
            }
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}

pub fn describe(
    ctx: &BrokerContext,
    authz: &Authz,
    request: DescribeAclsRequest,
) -> DescribeAclsResponse {
    let refuse = |code: i16, message: &str| {
        DescribeAclsResponse::default()
            .with_error_code(code)
            .with_error_message(Some(str_bytes(message)))
    };
    if let Err((code, message)) = admitted(authz, AclOperation::Describe) {
        return refuse(code, message);
    }
    let filter = AclFilter {
        resource_type: ResourceType::from_code(request.resource_type_filter),
        resource_name: request.resource_name_filter.as_ref().map(|s| s.to_string()),
        pattern_type: PatternType::from_code(request.pattern_type_filter),
        principal: request.principal_filter.as_ref().map(|s| s.to_string()),
        host: request.host_filter.as_ref().map(|s| s.to_string()),
        operation: AclOperation::from_code(request.operation),
        permission: AclPermission::from_code(request.permission_type),
    };
    if let Err(e) = filter.validate() {
        return refuse(INVALID_REQUEST, &e.0);
    }
    let image = ctx.cluster.image();
    // One resource per pattern, its entries in the image's order.
    let mut resources: BTreeMap<(ResourceType, &str, PatternType), Vec<AclDescription>> =
        BTreeMap::new();
    for acl in image.acls.iter().filter(|a| filter.matches(a)) {
        resources
            .entry((
                acl.resource_type,
                acl.resource_name.as_str(),
                acl.pattern_type,
            ))
            .or_default()
            .push(
                AclDescription::default()
                    .with_principal(str_bytes(&acl.principal))
                    .with_host(str_bytes(&acl.host))
                    .with_operation(acl.operation.code())
                    .with_permission_type(acl.permission.code()),
            );
    }
    DescribeAclsResponse::default()
        .with_error_message(None)
        .with_resources(
            resources
                .into_iter()
                .map(|((rt, name, pt), acls)| {
                    DescribeAclsResource::default()
                        .with_resource_type(rt.code())
                        .with_resource_name(str_bytes(name))
                        .with_pattern_type(pt.code())
                        .with_acls(acls)
                })
                .collect(),
        )
}

pub async fn delete(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: DeleteAclsRequest,
) -> DeleteAclsResponse {
    let refuse = |code: i16, message: &str| {
        let result = DeleteAclsFilterResult::default()
            .with_error_code(code)
            .with_error_message(Some(str_bytes(message)));
        DeleteAclsResponse::default().with_filter_results(vec![result; request.filters.len()])
    };
    if let Err((code, message)) = admitted(&authz, AclOperation::Alter) {
        return refuse(code, message);
    }
    let filters: Vec<AclFilter> = request.filters.iter().map(from_filter).collect();
    let outcome = match forward::forward(
        &ctx,
        ControllerRequest::DeleteAcls {
            filters: filters.clone(),
        },
        forward::timeout(0),
    )
    .await
    {
        Ok(ControllerResponse::DeleteAcls { results }) if results.len() == filters.len() => {
            Ok(results)
        }
        Ok(other) => Err(ControllerError::Internal(format!(
            "unexpected answer {other:?}"
        ))),
        Err(e) => Err(e),
    };
    let results = match outcome {
        Err(e) => {
            let (code, message) = controller_error(&e);
            return refuse(code, &message);
        }
        Ok(results) => results,
    };
    let removed: Vec<&StandardAcl> = results.iter().flatten().flatten().collect();
    forward::await_image(&ctx, |image| {
        removed.iter().all(|a| !image.acls.contains(*a))
    })
    .await;
    DeleteAclsResponse::default().with_filter_results(
        results
            .iter()
            .map(|result| match result {
                Ok(acls) => DeleteAclsFilterResult::default()
                    .with_error_message(None)
                    .with_matching_acls(acls.iter().map(matching_acl).collect()),
                Err(e) => {
                    let (code, message) = controller_error(e);
                    DeleteAclsFilterResult::default()
                        .with_error_code(code)
                        .with_error_message(Some(str_bytes(&message)))
                }
            })
            .collect(),
    )
}

fn from_creation(c: &AclCreation) -> StandardAcl {
    StandardAcl {
        resource_type: ResourceType::from_code(c.resource_type),
        resource_name: c.resource_name.to_string(),
        pattern_type: PatternType::from_code(c.resource_pattern_type),
        principal: c.principal.to_string(),
        host: c.host.to_string(),
        operation: AclOperation::from_code(c.operation),
        permission: AclPermission::from_code(c.permission_type),
    }
}

fn from_filter(f: &DeleteAclsFilter) -> AclFilter {
    let text = |s: &Option<StrBytes>| s.as_ref().map(|s| s.to_string());
    AclFilter {
        resource_type: ResourceType::from_code(f.resource_type_filter),
        resource_name: text(&f.resource_name_filter),
        pattern_type: PatternType::from_code(f.pattern_type_filter),
        principal: text(&f.principal_filter),
        host: text(&f.host_filter),
        operation: AclOperation::from_code(f.operation),
        permission: AclPermission::from_code(f.permission_type),
    }
}

fn matching_acl(acl: &StandardAcl) -> DeleteAclsMatchingAcl {
    // Kafka's nulls: no error, no message.
    DeleteAclsMatchingAcl::default()
        .with_error_message(None)
        .with_resource_type(acl.resource_type.code())
        .with_resource_name(str_bytes(&acl.resource_name))
        .with_pattern_type(acl.pattern_type.code())
        .with_principal(str_bytes(&acl.principal))
        .with_host(str_bytes(&acl.host))
        .with_operation(acl.operation.code())
        .with_permission_type(acl.permission.code())
}

fn controller_error(e: &ControllerError) -> (i16, String) {
    let err = error_codes::from_controller(e, "acls");
    (err.code, err.message.unwrap_or_default())
}
