//! AlterReplicaLogDirs (key 34, KIP-113): moves replicas hosted here between this broker's log
//! dirs. The store checks each move and starts it (`Store::alter_replica_log_dir`); the copy
//! runs in the background, as in Kafka, and DescribeLogDirs shows it as a future replica until
//! the swap. Answers per partition: NONE (accepted, or already in that dir), LOG_DIR_NOT_FOUND
//! (not one of `log.dirs`), REPLICA_NOT_AVAILABLE (not hosted here), KAFKA_STORAGE_ERROR (the
//! source or target dir is offline), CLUSTER_AUTHORIZATION_FAILED (no ALTER on the cluster).

use std::sync::Arc;

use kafka_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use kafka_protocol::messages::{AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse};
use millrace_cluster::acl::AclOperation;
use millrace_store::{MoveError, TopicPartition};

use crate::authz::Authz;
use crate::error_codes::{
    self, CLUSTER_AUTHORIZATION_FAILED, LOG_DIR_NOT_FOUND, NONE, REPLICA_NOT_AVAILABLE,
};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// AlterReplicaLogDirs: its key, versions, handler and error codes, for [`crate::registry`].
    AlterReplicaLogDirs, versions 1..=2, AlterReplicaLogDirsRequest,
    |call, request| Reply::Now(handle(call.ctx, &call.authz, request)),
}

response_fields!(
    AlterReplicaLogDirsResponse: errors[results[partitions[error_code]]],
    throttle_time_ms
);

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: AlterReplicaLogDirsRequest,
) -> AlterReplicaLogDirsResponse {
    let allowed = authz.cluster(AclOperation::Alter);
    let store = ctx.replicas.store();
    let mut results: Vec<AlterReplicaLogDirTopicResult> = Vec::new();
    for dir in request.dirs {
        let path = dir.path.to_string();
        for topic in dir.topics {
            let name = topic.name.0.to_string();
            let partitions = topic
                .partitions
                .iter()
                .map(|&p| {
                    let code = if allowed {
                        move_code(store, &TopicPartition::new(name.as_str(), p), &path)
                    } else {
                        CLUSTER_AUTHORIZATION_FAILED
                    };
                    AlterReplicaLogDirPartitionResult::default()
                        .with_partition_index(p)
                        .with_error_code(code)
                })
                .collect();
            results.push(
                AlterReplicaLogDirTopicResult::default()
                    .with_topic_name(topic.name)
                    .with_partitions(partitions),
            );
        }
    }
    AlterReplicaLogDirsResponse::default().with_results(results)
}

fn move_code(store: &Arc<millrace_store::Store>, tp: &TopicPartition, path: &str) -> i16 {
    match store.alter_replica_log_dir(tp, path) {
        Ok(()) => NONE,
        Err(MoveError::LogDirNotFound(_)) => LOG_DIR_NOT_FOUND,
        Err(MoveError::ReplicaNotAvailable(_)) => REPLICA_NOT_AVAILABLE,
        Err(MoveError::Store(e)) => {
            error_codes::from_store(&e, &format!("AlterReplicaLogDirs {tp}")).code
        }
    }
}
