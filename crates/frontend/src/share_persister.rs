//! The persister (Kafka's `DefaultStatePersister`): reads, initializes, writes, deletes and
//! summarizes a share partition's state through the share coordinator that owns its key — this
//! broker's own [`ShareCoordinator`] when it leads the key's `__share_group_state` partition,
//! else the share-state RPCs (keys 83–87) to that partition's leader. The share-partition leader
//! reads and writes; the group coordinator's admin side (AlterShareGroupOffsets,
//! DescribeShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups) initializes, summarizes and
//! deletes.
//!
//! Routing: the key's partition is `abs(javaHash("group:topicId:partition")) % N` (Kafka's
//! `SharePartitionKey.asCoordinatorKey`, the topic id in Kafka's base64 form), its coordinator
//! the partition's leader in the committed image. A missing `__share_group_state` is created
//! on first use (as FindCoordinator creates the other internal topics) and answers
//! COORDINATOR_NOT_AVAILABLE until it exists; callers retry the retriable answers
//! ([`StateError::is_retriable`]).
//!
//! Connections to other brokers are kept per broker (at most [`CONNECTIONS_IDLE_MAX`] idle), as
//! the transaction coordinator's marker channel keeps them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use kafka_protocol::messages::{
    delete_share_group_state_request, initialize_share_group_state_request,
    read_share_group_state_request, read_share_group_state_summary_request,
    write_share_group_state_request, ApiKey, DeleteShareGroupStateRequest,
    DeleteShareGroupStateResponse, InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse, ReadShareGroupStateRequest, ReadShareGroupStateResponse,
    ReadShareGroupStateSummaryRequest, ReadShareGroupStateSummaryResponse,
    WriteShareGroupStateRequest, WriteShareGroupStateResponse,
};
use kafka_protocol::protocol::StrBytes;
use millrace_cluster::image::NO_LEADER;
use millrace_cluster::Cluster;
use millrace_controller::ControllerClient;
use millrace_groups::partition_for;
use millrace_replication::client::BrokerConnection;
use millrace_replication::ReplicaManager;
use millrace_share::records::ShareStateKey;
use millrace_share::{
    PersistedState, StateBatch, StateSummary, StateWrite, SHARE_GROUP_STATE_TOPIC,
};
use parking_lot::Mutex;
use uuid::Uuid;

use crate::error_codes::{COORDINATOR_NOT_AVAILABLE, NONE, UNKNOWN_SERVER_ERROR};
use crate::internal_topics::{create_internal_topic, SHARE_GROUP_STATE};
use crate::share_coordinator::{ShareCoordinator, StateError};

/// Idle connections kept per broker for the share-state RPCs.
const CONNECTIONS_IDLE_MAX: usize = 4;
/// How long one share-state RPC to another broker may take (connect, send, answer); beyond the
/// coordinator's own commit wait (`share.coordinator.write.timeout.ms`).
const RPC_TIMEOUT: Duration = Duration::from_secs(15);
/// How long one admin request retries a share coordinator that is not available (the topic
/// being created, its leader loading or moving): [`Persister::retry_deadline`].
const RETRY_WAIT_MAX: Duration = Duration::from_secs(10);
/// Attempts [`Persister::retrying`] makes at most.
const RETRY_ATTEMPTS_MAX: u32 = 100;
/// First and longest pause between two attempts.
const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(20);
const RETRY_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// Kafka's coordinator key of a share partition: "group:topicId:partition".
pub fn coordinator_key(group_id: &str, topic_id: Uuid, partition: i32) -> String {
    format!(
        "{group_id}:{}:{partition}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(topic_id.as_bytes())
    )
}

/// A topic id in Kafka's string form (22 characters of URL-safe base64 without padding).
pub fn parse_topic_id(s: &str) -> Option<Uuid> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .ok()?;
    Uuid::from_slice(&bytes).ok()
}

/// The record key of a share partition.
pub fn state_key(group_id: &str, topic_id: Uuid, partition: i32) -> ShareStateKey {
    ShareStateKey {
        group_id: group_id.to_string(),
        topic_id: *topic_id.as_bytes(),
        partition,
    }
}

/// Where a key's state lives.
enum Route {
    Local(i32),
    Remote { node: i32, addr: String },
}

/// The persister. See the module comment.
pub struct Persister {
    cluster: Arc<Cluster>,
    replicas: Arc<ReplicaManager>,
    controller: Arc<ControllerClient>,
    coordinator: Arc<ShareCoordinator>,
    client_id: String,
    idle: Mutex<HashMap<i32, Vec<BrokerConnection>>>,
}

impl std::fmt::Debug for Persister {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persister")
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

impl Persister {
    pub fn new(
        cluster: Arc<Cluster>,
        replicas: Arc<ReplicaManager>,
        controller: Arc<ControllerClient>,
        coordinator: Arc<ShareCoordinator>,
    ) -> Self {
        let client_id = format!("broker-{}-share-persister", replicas.node_id());
        Self {
            cluster,
            replicas,
            controller,
            coordinator,
            client_id,
            idle: Mutex::new(HashMap::new()),
        }
    }

    /// This broker's share coordinator.
    pub fn coordinator(&self) -> &Arc<ShareCoordinator> {
        &self.coordinator
    }

    /// The state of a share partition as its coordinator holds it, recording `leader_epoch`;
    /// `None` when it was never initialized.
    pub async fn read(
        &self,
        group_id: &str,
        topic_id: Uuid,
        partition: i32,
        leader_epoch: i32,
    ) -> Result<Option<PersistedState>, StateError> {
        let key = state_key(group_id, topic_id, partition);
        let answer = match self.route(group_id, topic_id, partition)? {
            Route::Local(p) => self.coordinator.read(p, &key, leader_epoch).await,
            Route::Remote { node, addr } => {
                let request = ReadShareGroupStateRequest::default()
                    .with_group_id(StrBytes::from_string(group_id.to_string()))
                    .with_topics(vec![
                        read_share_group_state_request::ReadStateData::default()
                            .with_topic_id(topic_id)
                            .with_partitions(vec![
                                read_share_group_state_request::PartitionData::default()
                                    .with_partition(partition)
                                    .with_leader_epoch(leader_epoch),
                            ]),
                    ]);
                let response: ReadShareGroupStateResponse = self
                    .send(node, &addr, ApiKey::ReadShareGroupState, 0, &request)
                    .await?;
                let p = response
                    .results
                    .first()
                    .and_then(|t| t.partitions.first())
                    .ok_or_else(|| no_partition(node))?;
                if p.error_code != NONE {
                    Err(StateError::new(
                        p.error_code,
                        p.error_message.as_deref().unwrap_or_default(),
                    ))
                } else {
                    Ok(PersistedState {
                        state_epoch: p.state_epoch,
                        leader_epoch,
                        start_offset: p.start_offset,
                        delivery_complete_count: -1,
                        batches: p
                            .state_batches
                            .iter()
                            .map(|b| StateBatch {
                                first: b.first_offset,
                                last: b.last_offset,
                                state: u8::try_from(b.delivery_state).unwrap_or(u8::MAX),
                                delivery_count: b.delivery_count,
                            })
                            .collect(),
                    })
                }
            }
        };
        match answer {
            Ok(state) => Ok(Some(state)),
            // The only INVALID_REQUEST a well-formed read gets: the key was never initialized.
            Err(e) if e.code == crate::error_codes::INVALID_REQUEST => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Initializes a share partition at `start_offset` in `state_epoch`.
    pub async fn initialize(
        &self,
        group_id: &str,
        topic_id: Uuid,
        partition: i32,
        state_epoch: i32,
        start_offset: i64,
    ) -> Result<(), StateError> {
        match self.route(group_id, topic_id, partition)? {
            Route::Local(p) => {
                let key = state_key(group_id, topic_id, partition);
                self.coordinator
                    .initialize(p, &key, state_epoch, start_offset)
                    .await
            }
            Route::Remote { node, addr } => {
                let request = InitializeShareGroupStateRequest::default()
                    .with_group_id(StrBytes::from_string(group_id.to_string()))
                    .with_topics(vec![
                        initialize_share_group_state_request::InitializeStateData::default()
                            .with_topic_id(topic_id)
                            .with_partitions(vec![
                                initialize_share_group_state_request::PartitionData::default()
                                    .with_partition(partition)
                                    .with_state_epoch(state_epoch)
                                    .with_start_offset(start_offset),
                            ]),
                    ]);
                let response: InitializeShareGroupStateResponse = self
                    .send(node, &addr, ApiKey::InitializeShareGroupState, 0, &request)
                    .await?;
                let p = response
                    .results
                    .first()
                    .and_then(|t| t.partitions.first())
                    .ok_or_else(|| no_partition(node))?;
                code_result(p.error_code, p.error_message.as_deref())
            }
        }
    }

    /// Writes a share partition's changed state; resolves once committed.
    pub async fn write(
        &self,
        group_id: &str,
        topic_id: Uuid,
        partition: i32,
        write: &StateWrite,
    ) -> Result<(), StateError> {
        match self.route(group_id, topic_id, partition)? {
            Route::Local(p) => {
                let key = state_key(group_id, topic_id, partition);
                self.coordinator.write(p, &key, write).await
            }
            Route::Remote { node, addr } => {
                let request = WriteShareGroupStateRequest::default()
                    .with_group_id(StrBytes::from_string(group_id.to_string()))
                    .with_topics(vec![
                        write_share_group_state_request::WriteStateData::default()
                            .with_topic_id(topic_id)
                            .with_partitions(vec![
                            write_share_group_state_request::PartitionData::default()
                                .with_partition(partition)
                                .with_state_epoch(write.state_epoch)
                                .with_leader_epoch(write.leader_epoch)
                                .with_start_offset(write.start_offset)
                                .with_delivery_complete_count(write.delivery_complete_count)
                                .with_state_batches(
                                    write
                                        .batches
                                        .iter()
                                        .map(|b| {
                                            write_share_group_state_request::StateBatch::default()
                                                .with_first_offset(b.first)
                                                .with_last_offset(b.last)
                                                .with_delivery_state(
                                                    i8::try_from(b.state).unwrap_or(i8::MAX),
                                                )
                                                .with_delivery_count(b.delivery_count)
                                        })
                                        .collect(),
                                ),
                        ]),
                    ]);
                let response: WriteShareGroupStateResponse = self
                    .send(node, &addr, ApiKey::WriteShareGroupState, 1, &request)
                    .await?;
                let p = response
                    .results
                    .first()
                    .and_then(|t| t.partitions.first())
                    .ok_or_else(|| no_partition(node))?;
                code_result(p.error_code, p.error_message.as_deref())
            }
        }
    }

    /// Deletes a share partition's state (a tombstone; a key never initialized is no error);
    /// resolves once committed.
    pub async fn delete(
        &self,
        group_id: &str,
        topic_id: Uuid,
        partition: i32,
    ) -> Result<(), StateError> {
        match self.route(group_id, topic_id, partition)? {
            Route::Local(p) => {
                let key = state_key(group_id, topic_id, partition);
                self.coordinator.delete(p, &key).await
            }
            Route::Remote { node, addr } => {
                let request = DeleteShareGroupStateRequest::default()
                    .with_group_id(StrBytes::from_string(group_id.to_string()))
                    .with_topics(vec![
                        delete_share_group_state_request::DeleteStateData::default()
                            .with_topic_id(topic_id)
                            .with_partitions(vec![
                                delete_share_group_state_request::PartitionData::default()
                                    .with_partition(partition),
                            ]),
                    ]);
                let response: DeleteShareGroupStateResponse = self
                    .send(node, &addr, ApiKey::DeleteShareGroupState, 0, &request)
                    .await?;
                let p = response
                    .results
                    .first()
                    .and_then(|t| t.partitions.first())
                    .ok_or_else(|| no_partition(node))?;
                code_result(p.error_code, p.error_message.as_deref())
            }
        }
    }

    /// A share partition's summary (start offset, state and leader epochs, delivery-complete
    /// count); a key never initialized answers start offset -1, as Kafka's coordinator does.
    pub async fn read_summary(
        &self,
        group_id: &str,
        topic_id: Uuid,
        partition: i32,
    ) -> Result<StateSummary, StateError> {
        match self.route(group_id, topic_id, partition)? {
            Route::Local(p) => {
                let key = state_key(group_id, topic_id, partition);
                self.coordinator.read_summary(p, &key).await
            }
            Route::Remote { node, addr } => {
                let request = ReadShareGroupStateSummaryRequest::default()
                    .with_group_id(StrBytes::from_string(group_id.to_string()))
                    .with_topics(vec![
                        read_share_group_state_summary_request::ReadStateSummaryData::default()
                            .with_topic_id(topic_id)
                            .with_partitions(vec![
                                read_share_group_state_summary_request::PartitionData::default()
                                    .with_partition(partition),
                            ]),
                    ]);
                let response: ReadShareGroupStateSummaryResponse = self
                    .send(node, &addr, ApiKey::ReadShareGroupStateSummary, 1, &request)
                    .await?;
                let p = response
                    .results
                    .first()
                    .and_then(|t| t.partitions.first())
                    .ok_or_else(|| no_partition(node))?;
                code_result(p.error_code, p.error_message.as_deref())?;
                Ok(StateSummary {
                    state_epoch: p.state_epoch,
                    leader_epoch: p.leader_epoch,
                    start_offset: p.start_offset,
                    delivery_complete_count: p.delivery_complete_count,
                })
            }
        }
    }

    /// The deadline of one admin request's retries ([`Persister::retrying`]): [`RETRY_WAIT_MAX`]
    /// from now, shared by every partition the request touches, so a request waits that long at
    /// most whatever its size.
    pub fn retry_deadline() -> tokio::time::Instant {
        tokio::time::Instant::now() + RETRY_WAIT_MAX
    }

    /// Runs `op` until it succeeds, fails for good, or `deadline` passes, pausing between
    /// attempts while the answer is retriable ([`StateError::is_retriable`]), as Kafka's persister
    /// retries finding the share coordinator. For the admin APIs, whose callers wait.
    pub async fn retrying<T, F, Fut>(
        &self,
        deadline: tokio::time::Instant,
        mut op: F,
    ) -> Result<T, StateError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, StateError>>,
    {
        let mut backoff = RETRY_BACKOFF_MIN;
        let mut last = None;
        for _ in 0..RETRY_ATTEMPTS_MAX {
            match op().await {
                Err(e) if e.is_retriable() && tokio::time::Instant::now() + backoff < deadline => {
                    last = Some(e);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
                }
                other => return other,
            }
        }
        Err(last.unwrap_or_else(|| {
            StateError::new(
                COORDINATOR_NOT_AVAILABLE,
                "The share coordinator is not available",
            )
        }))
    }

    /// The coordinator of a key: here, another broker, or not available (the topic is created
    /// when missing).
    fn route(&self, group_id: &str, topic_id: Uuid, partition: i32) -> Result<Route, StateError> {
        let unavailable = || {
            StateError::new(
                COORDINATOR_NOT_AVAILABLE,
                "The share coordinator is not available",
            )
        };
        let image = self.cluster.image();
        let Some(topic) = image.topic(SHARE_GROUP_STATE_TOPIC) else {
            create_internal_topic(&self.cluster, &self.controller, &SHARE_GROUP_STATE);
            return Err(unavailable());
        };
        let key = coordinator_key(group_id, topic_id, partition);
        let state_partition = partition_for(&key, topic.partition_count());
        let leader = topic
            .partition(state_partition)
            .map_or(NO_LEADER, |p| p.leader);
        if leader == NO_LEADER {
            return Err(unavailable());
        }
        if leader == self.cluster.node_id() {
            return Ok(Route::Local(state_partition));
        }
        let addr = self
            .replicas
            .broker_address(leader)
            .ok_or_else(unavailable)?;
        Ok(Route::Remote { node: leader, addr })
    }

    /// One RPC to `node`, over a kept connection when there is one.
    async fn send<Req, Resp>(
        &self,
        node: i32,
        addr: &str,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, StateError>
    where
        Req: kafka_protocol::protocol::Encodable,
        Resp: kafka_protocol::protocol::Decodable,
    {
        let failed = |e: String| StateError::new(COORDINATOR_NOT_AVAILABLE, e);
        let kept = self.idle.lock().get_mut(&node).and_then(Vec::pop);
        let mut conn = match kept {
            Some(c) if c.addr() == addr => c,
            _ => self
                .replicas
                .connect_to(addr, &self.client_id, RPC_TIMEOUT)
                .await
                .map_err(|e| failed(e.to_string()))?,
        };
        let response: Resp = conn
            .send(key, version, request, RPC_TIMEOUT)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let mut idle = self.idle.lock();
        let kept = idle.entry(node).or_default();
        if kept.len() < CONNECTIONS_IDLE_MAX {
            kept.push(conn);
        }
        Ok(response)
    }
}

fn no_partition(node: i32) -> StateError {
    StateError::new(
        UNKNOWN_SERVER_ERROR,
        format!("node {node} answered no partition"),
    )
}

fn code_result(code: i16, message: Option<&str>) -> Result<(), StateError> {
    if code == NONE {
        Ok(())
    } else {
        Err(StateError::new(code, message.unwrap_or_default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinator_key_is_kafkas() {
        // Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, no padding.
        let id = Uuid::from_bytes([0xfb; 16]);
        let key = coordinator_key("g:1", id, 7);
        assert_eq!(key, "g:1:-_v7-_v7-_v7-_v7-_v7-w:7");
        assert_eq!(parse_topic_id("-_v7-_v7-_v7-_v7-_v7-w"), Some(id));
        assert_eq!(parse_topic_id("not-an-id"), None);
    }
}
