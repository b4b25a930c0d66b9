//! UnregisterBroker (key 64, v0; KIP-631): removes a broker's registration, for
//! `kafka-cluster.sh unregister --id N` and `Admin.unregisterBroker` once a broker is taken out of
//! the cluster. As in Kafka, a broker forwards it to the active controller, which takes the broker
//! out of every ISR and leadership as it does when fencing, then drops its registration; its
//! replicas stay assigned (offline) until a reassignment moves them. A broker still running
//! registers again at its next heartbeat (the controller no longer knows its epoch).
//!
//! Alter on the cluster is required (CLUSTER_AUTHORIZATION_FAILED); a broker id the controller
//! does not know is BROKER_ID_NOT_REGISTERED. Answered once this broker's image no longer lists
//! the broker, so a Metadata or DescribeCluster right after it here leaves it out.

use std::sync::Arc;

use kafka_protocol::messages::{UnregisterBrokerRequest, UnregisterBrokerResponse};
use millrace_cluster::acl::AclOperation;
use millrace_controller::{ControllerError, ControllerRequest, ControllerResponse};

use super::{forward, str_bytes};
use crate::authz::Authz;
use crate::error_codes::{self, KafkaError, CLUSTER_AUTHORIZATION_FAILED};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

/// How long a forwarded UnregisterBroker waits for the active controller (the request has no
/// timeout of its own).
const UNREGISTER_TIMEOUT_MS: i32 = 30_000;

api_handler! {
    /// UnregisterBroker: its key, versions, handler and error codes, for [`crate::registry`].
    UnregisterBroker, versions 0..=0, UnregisterBrokerRequest,
    |call, request| Reply::later(handle(call.ctx.clone(), call.authz, request)),
}

response_fields!(UnregisterBrokerResponse: errors[error_code], throttle_time_ms);

fn refused(error: &KafkaError) -> UnregisterBrokerResponse {
    UnregisterBrokerResponse::default()
        .with_error_code(error.code)
        .with_error_message(error.message.as_deref().map(str_bytes))
}

pub async fn handle(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: UnregisterBrokerRequest,
) -> UnregisterBrokerResponse {
    if !authz.cluster(AclOperation::Alter) {
        return refused(&KafkaError::code(CLUSTER_AUTHORIZATION_FAILED));
    }
    let node_id = request.broker_id.0;
    let outcome = forward::forward(
        &ctx,
        ControllerRequest::UnregisterBroker { node_id },
        forward::timeout(UNREGISTER_TIMEOUT_MS),
    )
    .await;
    match outcome {
        Ok(ControllerResponse::Unregistered) => {
            forward::await_image(&ctx, |image| image.broker(node_id).is_none()).await;
            UnregisterBrokerResponse::default().with_error_message(None)
        }
        Ok(other) => refused(&error_codes::from_controller(
            &ControllerError::Internal(format!("unexpected answer {other:?}")),
            "UnregisterBroker",
        )),
        Err(e) => refused(&error_codes::from_controller(&e, "UnregisterBroker")),
    }
}
