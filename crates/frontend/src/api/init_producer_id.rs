//! InitProducerId (key 22): a fresh producer id for idempotent producers, or a transactional
//! id's producer id and (bumped) epoch from the transaction coordinator.
//!
//! Without a transactional id Kafka hands out a new producer id with producer epoch 0 on every
//! call, including the KIP-360 "bump" call that names the old id; Millrace does the same. Ids come
//! from blocks the active controller committed to the metadata log, so they are never reused,
//! even after a crash. With one, the coordinator decides (fencing an earlier instance; see
//! `millrace_transactions::coordinator`); an empty id is INVALID_REQUEST, and versions before
//! KIP-588 (v4) hear INVALID_PRODUCER_EPOCH for PRODUCER_FENCED.

use std::sync::Arc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::authz::Authz;
use crate::error_codes::{CLUSTER_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED};
use millrace_cluster::acl::AclOperation;
use millrace_cluster::acl::ResourceType;

use super::transactions;
use crate::error_codes::{self, INVALID_REQUEST};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// InitProducerId: its key, versions, handler and error codes, for [`crate::registry`].
    InitProducerId, versions 0..=5, InitProducerIdRequest,
    |call, request| Reply::later(handle(call.ctx.clone(), call.authz, request, call.version)),
}

response_fields!(InitProducerIdResponse: errors[error_code], throttle_time_ms);

/// First version that hears PRODUCER_FENCED (KIP-588).
const FENCED_VERSION_MIN: i16 = 4;

pub async fn handle(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    let response = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    // Kafka's rules: a transactional producer needs Write on its transactional id; an idempotent
    // one IdempotentWrite on the cluster or Write on some topic (KIP-679).
    if let Some(id) = &request.transactional_id {
        if !authz.transactional_id(AclOperation::Write, id) {
            return response.with_error_code(TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
        }
    } else if !authz.cluster(AclOperation::IdempotentWrite)
        && !authz.any(AclOperation::Write, ResourceType::Topic)
    {
        return response.with_error_code(CLUSTER_AUTHORIZATION_FAILED);
    }
    if let Some(id) = &request.transactional_id {
        if id.is_empty() {
            return response.with_error_code(INVALID_REQUEST);
        }
        return match ctx
            .transactions
            .init_producer_id(
                id,
                request.transaction_timeout_ms,
                (request.producer_id.0, request.producer_epoch),
            )
            .await
        {
            Ok((pid, epoch)) => response
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch),
            Err(e) => response.with_error_code(transactions::error_code(
                e,
                transactions::fenced_code(version, FENCED_VERSION_MIN),
            )),
        };
    }
    match ctx.producer_ids.next().await {
        Ok(id) => response
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(0),
        Err(e) => response.with_error_code(error_codes::from_controller(&e, "InitProducerId").code),
    }
}
