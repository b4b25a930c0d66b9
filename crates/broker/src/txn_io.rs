//! The transaction coordinator's I/O over the replica manager: a `__transaction_state` record is
//! an acks=all append by this broker as the partition's leader in the coordinator's epoch; a
//! marker is an acks=all marker append on the data partition — here when this broker leads it,
//! else a WriteTxnMarkers request to its leader in the committed image (Kafka's marker channel,
//! one marker per request, connections kept per broker); producer ids come from the controller's
//! blocks. A committed marker on `__consumer_offsets` ends the producer's pending transactional
//! offsets there (the group coordinator's `complete_txn`, on whichever broker wrote it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    ApiKey, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::StrBytes;
use millrace_cluster::image::NO_LEADER;
use millrace_controller::ProducerIdAllocator;
use millrace_frontend::api::write_txn_markers::MARKER_COMMIT_TIMEOUT;
use millrace_frontend::error_codes::{
    FENCED_LEADER_EPOCH, INVALID_PRODUCER_EPOCH, KAFKA_STORAGE_ERROR, NONE, NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER, PRODUCER_FENCED, REQUEST_TIMED_OUT,
    TRANSACTION_COORDINATOR_FENCED, UNKNOWN_TOPIC_OR_PARTITION,
};
use millrace_groups::{GroupCoordinator, OFFSETS_TOPIC};
use millrace_replication::client::BrokerConnection;
use millrace_replication::client_security::InterBrokerSecurity;
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
    markers: Arc<MarkerChannel>,
}

/// Idle connections kept per broker for WriteTxnMarkers (more are opened while markers to one
/// broker are in flight at once, and closed after use).
const MARKER_CONNECTIONS_IDLE_MAX: usize = 4;
/// How long a WriteTxnMarkers answer may take beyond the longest the receiving leader waits for its
/// in-sync replicas (`MARKER_COMMIT_TIMEOUT`): the leader answers before the channel gives up, so
/// a retried marker never races a late append of the request it replaces.
const MARKER_REQUEST_SLACK: Duration = Duration::from_secs(5);

/// WriteTxnMarkers requests to the leaders of partitions on other brokers.
struct MarkerChannel {
    client_id: String,
    security: InterBrokerSecurity,
    timeout: Duration,
    idle: Mutex<HashMap<i32, Vec<BrokerConnection>>>,
}

impl MarkerChannel {
    /// Sends one marker for one partition to `node` at `addr`; the partition's error code.
    async fn send(
        &self,
        node: i32,
        addr: &str,
        request: &WriteTxnMarkersRequest,
    ) -> Result<i16, TxnIoError> {
        let kept = self
            .idle
            .lock()
            .ok()
            .and_then(|mut idle| idle.get_mut(&node).and_then(Vec::pop));
        let mut conn = match kept {
            Some(c) if c.addr() == addr => c,
            _ => BrokerConnection::connect(addr, &self.client_id, self.timeout, &self.security)
                .await
                .map_err(|e| TxnIoError::Other(e.to_string()))?,
        };
        let response: WriteTxnMarkersResponse = conn
            .send(ApiKey::WriteTxnMarkers, 1, request, self.timeout)
            .await
            .map_err(|e| TxnIoError::Other(e.to_string()))?;
        if let Ok(mut idle) = self.idle.lock() {
            let kept = idle.entry(node).or_default();
            if kept.len() < MARKER_CONNECTIONS_IDLE_MAX {
                kept.push(conn);
            }
        }
        response
            .markers
            .first()
            .and_then(|m| m.topics.first())
            .and_then(|t| t.partitions.first())
            .map(|p| p.error_code)
            .ok_or_else(|| TxnIoError::Other(format!("node {node} answered no partition")))
    }
}

/// The coordinator's view of a WriteTxnMarkers partition error (Kafka's
/// `TransactionMarkerRequestCompletionHandler`: retried, or the marker dropped once a newer
/// producer epoch or coordinator wrote there). `gone`: UNKNOWN_TOPIC_OR_PARTITION's meaning.
fn from_marker_code(code: i16, gone: TxnIoError) -> Result<(), TxnIoError> {
    match code {
        NONE => Ok(()),
        UNKNOWN_TOPIC_OR_PARTITION => Err(gone),
        NOT_LEADER_OR_FOLLOWER | FENCED_LEADER_EPOCH => Err(TxnIoError::NotLeader),
        NOT_ENOUGH_REPLICAS | NOT_ENOUGH_REPLICAS_AFTER_APPEND | REQUEST_TIMED_OUT => {
            Err(TxnIoError::NotEnoughReplicas)
        }
        INVALID_PRODUCER_EPOCH | PRODUCER_FENCED | TRANSACTION_COORDINATOR_FENCED => Err(
            TxnIoError::Fenced(format!("the leader answered error code {code}")),
        ),
        KAFKA_STORAGE_ERROR => Err(TxnIoError::Other("the leader's log is offline".into())),
        other => Err(TxnIoError::Other(format!(
            "the leader answered error code {other}"
        ))),
    }
}

impl ReplicatedTxnIo {
    pub fn new(
        replicas: Arc<ReplicaManager>,
        topic_exists: Box<dyn Fn(&str) -> bool + Send + Sync>,
        groups: Arc<GroupCoordinator>,
        producer_ids: Arc<ProducerIdAllocator>,
        commit_timeout: Duration,
    ) -> Self {
        let markers = Arc::new(MarkerChannel {
            client_id: format!("broker-{}-txn-markers", replicas.node_id()),
            security: replicas.config().inter_broker.clone(),
            timeout: commit_timeout.max(MARKER_COMMIT_TIMEOUT) + MARKER_REQUEST_SLACK,
            idle: Mutex::new(HashMap::new()),
        });
        Self {
            replicas,
            topic_exists,
            groups,
            producer_ids,
            commit_timeout,
            markers,
        }
    }

    /// Writes a marker through `leader`, the partition's leader on another broker.
    fn write_marker_remote(
        &self,
        tp: TopicPartition,
        leader: i32,
        producer_id: i64,
        producer_epoch: i16,
        marker: Marker,
    ) -> IoFuture<()> {
        let gone = self.gone(&tp.topic);
        let Some(addr) = self.replicas.broker_address(leader) else {
            return Box::pin(async move { Err(gone) });
        };
        let request =
            WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
                .with_producer_id(producer_id.into())
                .with_producer_epoch(producer_epoch)
                .with_transaction_result(marker.commit)
                .with_coordinator_epoch(marker.coordinator_epoch)
                .with_topics(vec![WritableTxnMarkerTopic::default()
                    .with_name(TopicName(StrBytes::from_string(tp.topic.to_string())))
                    .with_partition_indexes(vec![tp.partition])])]);
        let channel = Arc::clone(&self.markers);
        Box::pin(async move {
            let code = channel.send(leader, &addr, &request).await?;
            from_marker_code(code, gone)
        })
    }

    /// What a partition this broker cannot write means: retried (NotLeader) while its topic
    /// exists; a deleted topic needs no marker.
    fn gone(&self, topic: &str) -> TxnIoError {
        if (self.topic_exists)(topic) {
            TxnIoError::NotLeader
        } else {
            TxnIoError::UnknownPartition
        }
    }

    /// A marker append refused here, as the coordinator's error (Kafka retries
    /// KAFKA_STORAGE_ERROR and NOT_LEADER alike).
    fn refused(&self, e: ReplicaError, topic: &str) -> IoFuture<()> {
        let e = from_replica(e, self.gone(topic));
        Box::pin(async move { Err(e) })
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
            Err(
                e @ (ReplicaError::UnknownPartition(_)
                | ReplicaError::Partition(PartitionError::NotLeader { .. })),
            ) => match self.replicas.leader_of(&tp) {
                // Led by another broker (this one follows it, or hosts no replica).
                Some(leader) if leader != NO_LEADER && leader != self.replicas.node_id() => {
                    self.write_marker_remote(tp, leader, producer_id, producer_epoch, marker)
                }
                _ => self.refused(e, topic),
            },
            // A partition not hosted here for another reason (its log dir failed) is retried.
            Err(e) => self.refused(e, topic),
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
