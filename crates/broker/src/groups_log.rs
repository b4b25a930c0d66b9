//! The group coordinator's `GroupLog` over the replica manager: a `__consumer_offsets` append is
//! an acks=all append by this broker as the partition's leader in the coordinator's leader epoch,
//! committed once the high watermark passed it (on every in-sync replica).

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use millrace_groups::{GroupAppend, GroupLog, GroupLogError, OFFSETS_TOPIC};
use millrace_replication::{AckError, PartitionError, ReplicaError, ReplicaManager};
use millrace_store::TopicPartition;

/// `GroupLog` over replication.
pub struct ReplicatedGroupLog {
    replicas: Arc<ReplicaManager>,
    /// offsets.commit.timeout.ms
    commit_timeout: Duration,
}

impl ReplicatedGroupLog {
    pub fn new(replicas: Arc<ReplicaManager>, commit_timeout: Duration) -> Self {
        Self {
            replicas,
            commit_timeout,
        }
    }
}

impl GroupLog for ReplicatedGroupLog {
    fn append(
        &self,
        partition: i32,
        leader_epoch: i32,
        records: BytesMut,
    ) -> Result<GroupAppend, GroupLogError> {
        let tp = TopicPartition::new(OFFSETS_TOPIC, partition);
        let (info, wait) = self
            .replicas
            .append_in_epoch(&tp, records, -1, Some(leader_epoch))
            .map_err(|e| match e {
                ReplicaError::UnknownPartition(_)
                | ReplicaError::Partition(
                    PartitionError::NotLeader { .. }
                    | PartitionError::FencedLeaderEpoch
                    | PartitionError::UnknownLeaderEpoch,
                ) => GroupLogError::NotLeader,
                ReplicaError::Partition(PartitionError::NotEnoughReplicas) => {
                    GroupLogError::NotEnoughReplicas
                }
                other => GroupLogError::Storage(other.to_string()),
            })?;
        let timeout = self.commit_timeout;
        Ok(GroupAppend {
            last_offset: info.last_offset,
            committed: Box::pin(async move {
                let Some(wait) = wait else {
                    return Ok(());
                };
                wait.wait(timeout).await.map_err(|e| match e {
                    AckError::NotLeader => GroupLogError::NotLeader,
                    AckError::NotEnoughReplicasAfterAppend => GroupLogError::NotEnoughReplicas,
                    AckError::Timeout => GroupLogError::Timeout,
                    AckError::Storage => {
                        GroupLogError::Storage("the log went offline or was deleted".into())
                    }
                })
            }),
        })
    }
}
