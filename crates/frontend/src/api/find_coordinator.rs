//! FindCoordinator (key 10): the coordinator of group `g` is the leader of `__consumer_offsets`
//! partition `partition_for(g)` (Kafka's `abs(hashCode) % N`); on a single node that is always this
//! broker. While that partition is being replayed the answer is COORDINATOR_LOAD_IN_PROGRESS.
//!
//! Advertised from v0 because old librdkafka enables LZ4 only when FindCoordinator v0 is in range
//! (checklist §2.3). Transaction coordinators (key type 1) are not served yet.

use std::sync::Arc;

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use super::str_bytes;
use crate::error_codes::{self, COORDINATOR_NOT_AVAILABLE, INVALID_REQUEST, NONE};
use crate::BrokerContext;

const KEY_TYPE_GROUP: i8 = 0;

pub fn handle(
    ctx: &Arc<BrokerContext>,
    request: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let broker = ctx.cluster.brokers().into_iter().next();
    let have_broker = broker.is_some();
    let answer = |key: &StrBytes| -> (i16, Option<String>) {
        if request.key_type != KEY_TYPE_GROUP {
            (
                COORDINATOR_NOT_AVAILABLE,
                Some("Transactions are not supported yet.".to_string()),
            )
        } else if key.is_empty() {
            (INVALID_REQUEST, Some("Empty group id.".to_string()))
        } else if !have_broker {
            (COORDINATOR_NOT_AVAILABLE, None)
        } else if let Err(e) = ctx.groups.check_coordinator(key) {
            let e = error_codes::from_group(&e, "FindCoordinator");
            (e.code, e.message)
        } else {
            (NONE, None)
        }
    };
    let (node_id, host, port) = broker
        .map(|b| (b.node_id, b.host, i32::from(b.port)))
        .unwrap_or((-1, String::new(), -1));
    if version < 4 {
        let (code, message) = answer(&request.key);
        let mut response = FindCoordinatorResponse::default().with_error_code(code);
        if code == NONE {
            response = response
                .with_node_id(BrokerId(node_id))
                .with_host(str_bytes(&host))
                .with_port(port);
        } else {
            response = response.with_node_id(BrokerId(-1)).with_port(-1);
        }
        if version >= 1 {
            response.error_message = message.as_deref().map(str_bytes);
        }
        return response;
    }
    let coordinators = request
        .coordinator_keys
        .iter()
        .map(|key| {
            let (code, message) = answer(key);
            let c = Coordinator::default()
                .with_key(key.clone())
                .with_error_code(code)
                .with_error_message(message.as_deref().map(str_bytes));
            if code == NONE {
                c.with_node_id(BrokerId(node_id))
                    .with_host(str_bytes(&host))
                    .with_port(port)
            } else {
                c.with_node_id(BrokerId(-1)).with_port(-1)
            }
        })
        .collect();
    FindCoordinatorResponse::default().with_coordinators(coordinators)
}
