//! FindCoordinator (key 10): the coordinator of group `g` is the leader of `__consumer_offsets`
//! partition `partition_for(g)` (Kafka's `abs(hashCode) % N`), as the committed image says; while
//! it has no leader, or the leader here has not yet taken up the group coordinator's role or is
//! still replaying the partition, COORDINATOR_NOT_AVAILABLE (the only error Kafka answers here;
//! every client retries it).
//!
//! `__consumer_offsets` is created on the first FindCoordinator, as Kafka does (compacted,
//! `offsets.topic.num.partitions`, replication factor `offsets.topic.replication.factor`, 1 on a
//! single-node broker): the creation goes to the controller in the background, and until it is
//! committed — in a cluster, until that many brokers are alive — the answer is
//! COORDINATOR_NOT_AVAILABLE and clients retry.
//!
//! Advertised from v0 because old librdkafka enables LZ4 only when FindCoordinator v0 is in range
//! (checklist §2.3). Transaction coordinators (key type 1) are not served yet.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use millrace_cluster::image::NO_LEADER;
use millrace_controller::messages::TopicSpec;
use millrace_controller::{ControllerRequest, ControllerResponse};
use millrace_groups::{partition_for, OFFSETS_TOPIC};
use tracing::{info, warn};

use super::str_bytes;
use crate::authz::Authz;
use crate::error_codes::{COORDINATOR_NOT_AVAILABLE, INVALID_REQUEST, NONE};
use crate::error_codes::{GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED};
use crate::BrokerContext;
use millrace_cluster::acl::AclOperation;

const KEY_TYPE_GROUP: i8 = 0;
/// `key_type` of a transactional id.
const KEY_TYPE_TRANSACTION: i8 = 1;
/// How long the background creation of `__consumer_offsets` may wait for the controller.
const CREATE_OFFSETS_TIMEOUT: Duration = Duration::from_secs(30);

/// At most one creation of `__consumer_offsets` in flight from this broker.
static CREATING: AtomicBool = AtomicBool::new(false);

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: FindCoordinatorRequest,
    version: i16,
    listener: &str,
) -> FindCoordinatorResponse {
    let image = ctx.cluster.image();
    let offsets = image.topic(OFFSETS_TOPIC).cloned();
    // Created on a group lookup the client may make (Kafka checks Describe first).
    let keys: Vec<&StrBytes> = if version < 4 {
        vec![&request.key]
    } else {
        request.coordinator_keys.iter().collect()
    };
    if offsets.is_none()
        && request.key_type == KEY_TYPE_GROUP
        && keys.iter().any(|k| authz.group(AclOperation::Describe, k))
    {
        create_offsets_topic(ctx);
    }
    // (code, message, node, host, port)
    let answer = |key: &StrBytes| -> (i16, Option<String>, i32, String, i32) {
        let refuse = |code: i16, message: Option<String>| (code, message, -1, String::new(), -1);
        // Finding a coordinator needs Describe on the group or transactional id.
        if request.key_type == KEY_TYPE_GROUP && !authz.group(AclOperation::Describe, key) {
            return refuse(GROUP_AUTHORIZATION_FAILED, None);
        }
        if request.key_type == KEY_TYPE_TRANSACTION
            && !authz.transactional_id(AclOperation::Describe, key)
        {
            return refuse(TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None);
        }
        if request.key_type != KEY_TYPE_GROUP {
            return refuse(
                COORDINATOR_NOT_AVAILABLE,
                Some("Transactions are not supported yet.".to_string()),
            );
        }
        if key.is_empty() {
            return refuse(INVALID_REQUEST, Some("Empty group id.".to_string()));
        }
        let Some(topic) = &offsets else {
            return refuse(COORDINATOR_NOT_AVAILABLE, None);
        };
        let partition = partition_for(key, topic.partition_count());
        let leader = topic.partition(partition).map_or(NO_LEADER, |p| p.leader);
        let Some(broker) = image.broker(leader).filter(|b| !b.fenced) else {
            return refuse(COORDINATOR_NOT_AVAILABLE, None);
        };
        let Some((host, port)) = broker.endpoint_for(listener) else {
            return refuse(COORDINATOR_NOT_AVAILABLE, None);
        };
        // Kafka answers FindCoordinator only with the partition's leader or
        // COORDINATOR_NOT_AVAILABLE. A coordinator here that is still loading, or has not taken
        // up the leadership yet, is "not available" until it serves: kafkajs retries
        // FindCoordinator only on that code, and crashes its consumer on a JoinGroup answered
        // COORDINATOR_LOAD_IN_PROGRESS.
        if leader == ctx.cluster.node_id() && ctx.groups.check_coordinator(key).is_err() {
            return refuse(COORDINATOR_NOT_AVAILABLE, None);
        }
        (
            NONE,
            None,
            broker.node_id,
            host.to_string(),
            i32::from(port),
        )
    };
    if version < 4 {
        let (code, message, node_id, host, port) = answer(&request.key);
        let mut response = FindCoordinatorResponse::default()
            .with_error_code(code)
            .with_node_id(BrokerId(node_id))
            .with_host(str_bytes(&host))
            .with_port(port);
        if version >= 1 {
            response.error_message = message.as_deref().map(str_bytes);
        }
        return response;
    }
    let coordinators = request
        .coordinator_keys
        .iter()
        .map(|key| {
            let (code, message, node_id, host, port) = answer(key);
            Coordinator::default()
                .with_key(key.clone())
                .with_error_code(code)
                .with_error_message(message.as_deref().map(str_bytes))
                .with_node_id(BrokerId(node_id))
                .with_host(str_bytes(&host))
                .with_port(port)
        })
        .collect();
    FindCoordinatorResponse::default().with_coordinators(coordinators)
}

/// Asks the controller to create `__consumer_offsets`, once at a time, in the background.
fn create_offsets_topic(ctx: &Arc<BrokerContext>) {
    if CREATING.swap(true, Ordering::SeqCst) {
        return;
    }
    let long = |key: &str, fallback: i64| {
        ctx.cluster
            .config
            .get(key)
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or(fallback)
    };
    let partitions =
        i32::try_from(long("offsets.topic.num.partitions", 50).clamp(1, 10_000)).unwrap_or(50);
    let mut rf =
        i16::try_from(long("offsets.topic.replication.factor", 3).clamp(1, 32)).unwrap_or(3);
    if ctx.cluster.is_single_node() {
        rf = 1;
    }
    let configs: BTreeMap<String, String> = [
        ("cleanup.policy".to_string(), "compact".to_string()),
        ("segment.bytes".to_string(), "104857600".to_string()),
    ]
    .into_iter()
    .collect();
    let request = ControllerRequest::CreateTopics {
        topics: vec![TopicSpec {
            name: OFFSETS_TOPIC.to_string(),
            partitions: Some(partitions),
            replication_factor: Some(rf),
            assignments: BTreeMap::new(),
            configs,
        }],
        validate_only: false,
    };
    let controller = Arc::clone(&ctx.controller);
    tokio::spawn(async move {
        match controller.request(request, CREATE_OFFSETS_TIMEOUT).await {
            ControllerResponse::CreateTopics { results } => match results.first() {
                Some((_, Ok(created))) => {
                    info!(
                        partitions = created.partitions,
                        replication_factor = created.replication_factor,
                        "created {OFFSETS_TOPIC}"
                    );
                }
                Some((_, Err(e))) => {
                    info!(error = %e, "{OFFSETS_TOPIC} not created yet");
                }
                None => {}
            },
            other => warn!(answer = ?other, "creating {OFFSETS_TOPIC} failed"),
        }
        CREATING.store(false, Ordering::SeqCst);
    });
}
