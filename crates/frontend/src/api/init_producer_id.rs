//! InitProducerId (key 22): a fresh producer id for idempotent producers.
//!
//! Without a transactional id Kafka hands out a new producer id with producer epoch 0 on every
//! call, including the KIP-360 "bump" call that names the old id; Millrace does the same. Ids come
//! from blocks the active controller committed to the metadata log, so they are never reused, even after a crash.
//! Transactional ids are refused until transactions exist.

use std::sync::Arc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::error_codes::{self, INVALID_REQUEST};
use crate::BrokerContext;

pub async fn handle(
    ctx: Arc<BrokerContext>,
    request: InitProducerIdRequest,
    _version: i16,
) -> InitProducerIdResponse {
    let response = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if request.transactional_id.is_some() {
        return response.with_error_code(INVALID_REQUEST);
    }
    match ctx.producer_ids.next().await {
        Ok(id) => response
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(0),
        Err(e) => response.with_error_code(error_codes::from_controller(&e, "InitProducerId").code),
    }
}
