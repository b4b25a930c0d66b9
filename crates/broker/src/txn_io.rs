//! The transaction coordinator's I/O over the replica manager: a `__transaction_state` record is
//! an acks=all append by this broker as the partition's leader in the coordinator's epoch; a
//! marker is an acks=all marker append on the data partition, which this broker must lead (markers
//! to other brokers, WriteTxnMarkers, come with transactions across brokers); producer ids come
//! from the controller's blocks. A committed marker on `__consumer_offsets` ends the producer's
//! pending transactional offsets there (the group coordinator's `complete_txn`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use millrace_controller::ProducerIdAllocator;
use millrace_groups::{GroupCoordinator, OFFSETS_TOPIC};
use millrace_replication::{AckError, AckWait, PartitionError, ReplicaError, ReplicaManager};
use millrace_store::records::{encode_records, BatchFields, Record};
use millrace_store::{AppendError, Marker, TopicPartition};
use millrace_transactions::{IoFuture, TxnIo, TxnIoError, TRANSACTION_STATE_TOPIC};

/// `TxnIo` over replication.
pub struct ReplicatedTxnIo {
    replicas: Arc<ReplicaManager>,
    /// Whether a topic is in the committed metadata image.
    topic_exists: Box<dyn Fn(&str) -> bool + Send + Sync>,
    groups: Arc<GroupCoordinator>,
    producer_ids: Arc<ProducerIdAllocator>,
    /// How long a record or marker may take to commit.
    commit_timeout: Duration,
}

impl ReplicatedTxnIo {
    pub fn new(
        replicas: Arc<ReplicaManager>,
        topic_exists: Box<dyn Fn(&str) -> bool + Send + Sync>,
        groups: Arc<GroupCoordinator>,
        producer_ids: Arc<ProducerIdAllocator>,
        commit_timeout: Duration,
    ) -> Self {
        Self {
            replicas,
            topic_exists,
            groups,
            producer_ids,
            commit_timeout,
        }
    }
}

/// `hosted_elsewhere`: what a partition this broker hosts no replica of means to the caller.
fn from_replica(e: ReplicaError, hosted_elsewhere: TxnIoError) -> TxnIoError {
    match e {
        ReplicaError::UnknownPartition(_) => hosted_elsewhere,
        ReplicaError::Partition(
            PartitionError::NotLeader { .. }
            | PartitionError::FencedLeaderEpoch
            | PartitionError::UnknownLeaderEpoch,
        ) => TxnIoError::NotLeader,
        ReplicaError::Partition(PartitionError::NotEnoughReplicas) => TxnIoError::NotEnoughReplicas,
        ReplicaError::Append(
            e @ (AppendError::InvalidProducerEpoch(_) | AppendError::CoordinatorFenced(_)),
        ) => TxnIoError::Fenced(e.to_string()),
        other => TxnIoError::Other(other.to_string()),
    }
}

fn committed(wait: Option<AckWait>, timeout: Duration) -> IoFuture<()> {
    Box::pin(async move {
        let Some(wait) = wait else {
            return Ok(());
        };
        wait.wait(timeout).await.map_err(|e| match e {
            AckError::NotLeader => TxnIoError::NotLeader,
            AckError::NotEnoughReplicasAfterAppend | AckError::Timeout => {
                TxnIoError::NotEnoughReplicas
            }
            AckError::Storage => TxnIoError::Other("the log went offline or was deleted".into()),
        })
    })
}

impl TxnIo for ReplicatedTxnIo {
    fn append_state(
        &self,
        partition: i32,
        leader_epoch: i32,
        key: Bytes,
        value: Option<Bytes>,
    ) -> IoFuture<()> {
        let tp = TopicPartition::new(TRANSACTION_STATE_TOPIC, partition);
        let now = crate::now_ms();
        let batch = encode_records(
            &BatchFields {
                base_offset: 0,
                partition_leader_epoch: -1,
                attributes: 0,
                last_offset_delta: 0,
                base_timestamp: now,
                max_timestamp: now,
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
            },
            &[Record {
                offset: 0,
                timestamp: now,
                key: Some(key),
                value,
                headers: Vec::new(),
            }],
        );
        match self
            .replicas
            .append_in_epoch(&tp, batch, -1, Some(leader_epoch))
        {
            Ok((_, wait)) => committed(wait, self.commit_timeout),
            Err(e) => {
                let e = from_replica(e, TxnIoError::NotLeader);
                Box::pin(async move { Err(e) })
            }
        }
    }

    fn write_marker(
        &self,
        topic: &str,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        marker: Marker,
    ) -> IoFuture<()> {
        let tp = TopicPartition::new(topic, partition);
        match self
            .replicas
            .append_marker(&tp, producer_id, producer_epoch, marker)
        {
            Ok((_, wait)) if topic == OFFSETS_TOPIC => {
                let committed = committed(wait, self.commit_timeout);
                let groups = Arc::clone(&self.groups);
                Box::pin(async move {
                    committed.await?;
                    groups.complete_txn(partition, producer_id, marker.commit);
                    Ok(())
                })
            }
            Ok((_, wait)) => committed(wait, self.commit_timeout),
            // A deleted topic needs no marker; a partition not hosted here for another reason
            // (its log dir failed) is retried, as Kafka retries KAFKA_STORAGE_ERROR.
            Err(e) => {
                let gone = if (self.topic_exists)(topic) {
                    TxnIoError::NotLeader
                } else {
                    TxnIoError::UnknownPartition
                };
                let e = from_replica(e, gone);
                Box::pin(async move { Err(e) })
            }
        }
    }

    fn next_producer_id(&self) -> IoFuture<i64> {
        let ids = Arc::clone(&self.producer_ids);
        Box::pin(async move {
            ids.next()
                .await
                .map_err(|e| TxnIoError::Other(e.to_string()))
        })
    }
}
