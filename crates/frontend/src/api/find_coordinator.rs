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
//! Transaction coordinators (key type 1) are found the same way in `__transaction_state`
//! (`transaction.state.log.*`, created on the first lookup; replication factor
//! `transaction.state.log.replication.factor`, so in a cluster once that many brokers are alive).
//!
//! Share-partition keys (key type 2, v6, KIP-932: "group:topicId:partition", broker to broker,
//! ClusterAction) are found the same way in `__share_group_state`
//! (`share.coordinator.state.topic.*`, created on the first lookup).
//!
//! Advertised from v0 because old librdkafka enables LZ4 only when FindCoordinator v0 is in range
//! (checklist §2.3).

use std::sync::Arc;

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use millrace_cluster::image::NO_LEADER;
use millrace_groups::partition_for;

use super::str_bytes;
use crate::authz::Authz;
use crate::error_codes::{
    CLUSTER_AUTHORIZATION_FAILED, COORDINATOR_NOT_AVAILABLE, INVALID_REQUEST, NONE,
};
use crate::error_codes::{GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED};
use crate::handler::{api_handler, Reply, ResponseFields};
use crate::internal_topics::{
    create_internal_topic, OFFSETS, SHARE_GROUP_STATE, TRANSACTION_STATE,
};
use crate::BrokerContext;
use millrace_cluster::acl::AclOperation;

api_handler! {
    /// FindCoordinator: its key, versions, handler and error codes, for [`crate::registry`].
    FindCoordinator, versions 0..=6, FindCoordinatorRequest,
    |call, request| {
        Reply::Now(handle(call.ctx, &call.authz, request, call.version, &call.session.listener))
    },
}

impl ResponseFields for FindCoordinatorResponse {
    fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
        // As Kafka: v4+ carries one code per coordinator key and leaves the top level unused, so
        // the top-level code counts only when there are no per-key entries (v0-v3).
        if self.coordinators.is_empty() {
            f(self.error_code);
        } else {
            for coordinator in &self.coordinators {
                f(coordinator.error_code);
            }
        }
    }

    fn throttle_time_ms(&mut self) -> Option<&mut i32> {
        Some(&mut self.throttle_time_ms)
    }
}

const KEY_TYPE_GROUP: i8 = 0;
/// `key_type` of a transactional id.
const KEY_TYPE_TRANSACTION: i8 = 1;
/// `key_type` of a share-partition key ("group:topicId:partition", KIP-932).
const KEY_TYPE_SHARE: i8 = 2;
/// First version that knows share-partition keys.
const SHARE_VERSION_MIN: i16 = 6;
pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: FindCoordinatorRequest,
    version: i16,
    listener: &str,
) -> FindCoordinatorResponse {
    let image = ctx.cluster.image();
    let internal = match request.key_type {
        KEY_TYPE_TRANSACTION => &TRANSACTION_STATE,
        KEY_TYPE_SHARE => &SHARE_GROUP_STATE,
        _ => &OFFSETS,
    };
    let coordinator_topic = image.topic(internal.name).cloned();
    // Created on a lookup the client may make (Kafka checks Describe first).
    let keys: Vec<&StrBytes> = if version < 4 {
        vec![&request.key]
    } else {
        request.coordinator_keys.iter().collect()
    };
    let describable = |k: &StrBytes| match request.key_type {
        KEY_TYPE_GROUP => authz.group(AclOperation::Describe, k),
        KEY_TYPE_TRANSACTION => authz.transactional_id(AclOperation::Describe, k),
        KEY_TYPE_SHARE => {
            version >= SHARE_VERSION_MIN && authz.cluster(AclOperation::ClusterAction)
        }
        _ => false,
    };
    if coordinator_topic.is_none() && keys.iter().any(|k| describable(k)) {
        create_internal_topic(&ctx.cluster, &ctx.controller, internal);
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
        // Share-partition keys (v6): broker to broker, ClusterAction on the cluster.
        if request.key_type == KEY_TYPE_SHARE {
            if version < SHARE_VERSION_MIN {
                return refuse(
                    INVALID_REQUEST,
                    Some(format!("Unknown coordinator type {}", request.key_type)),
                );
            }
            if !authz.cluster(AclOperation::ClusterAction) {
                return refuse(CLUSTER_AUTHORIZATION_FAILED, None);
            }
            if !is_share_partition_key(key) {
                return refuse(
                    INVALID_REQUEST,
                    Some(format!("Invalid share partition key {key}")),
                );
            }
        } else if request.key_type != KEY_TYPE_GROUP && request.key_type != KEY_TYPE_TRANSACTION {
            return refuse(
                INVALID_REQUEST,
                Some(format!("Unknown coordinator type {}", request.key_type)),
            );
        }
        if key.is_empty() {
            let what = if request.key_type == KEY_TYPE_GROUP {
                "Empty group id."
            } else {
                "Empty transactional id."
            };
            return refuse(INVALID_REQUEST, Some(what.to_string()));
        }
        let Some(topic) = &coordinator_topic else {
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
        let loading = match request.key_type {
            KEY_TYPE_GROUP => ctx.groups.check_coordinator(key).is_err(),
            KEY_TYPE_SHARE => ctx
                .shares
                .coordinator()
                .is_none_or(|c| !c.is_serving(partition)),
            _ => ctx.transactions.check_coordinator(key).is_err(),
        };
        if leader == ctx.cluster.node_id() && loading {
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

/// Whether `key` has the form of Kafka's `SharePartitionKey` ("group:topicId:partition", the
/// topic id in its 22-character base64 form; the group id may itself hold colons).
fn is_share_partition_key(key: &str) -> bool {
    let mut parts = key.rsplitn(3, ':');
    let (Some(partition), Some(topic_id), Some(group)) = (parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    !group.is_empty()
        && crate::share_persister::parse_topic_id(topic_id).is_some()
        && partition.parse::<i32>().is_ok_and(|p| p >= 0)
}
