//! The appender the coordinator writes `__consumer_offsets` through: [`GroupLog`], injected at
//! construction, so that the coordinator does not know whether a record is committed by one
//! broker's fdatasync or by the high watermark passing it on every ISR member.
//!
//! Where it sits: the group coordinator (`GroupCoordinator`) calls [`GroupLog::append`] under a
//! shard lock, with the leader epoch it loaded the partition with, and awaits the returned future
//! (without the lock) before answering. The broker implements it over the replica manager (`acks=all` append +
//! high-watermark wait); [`DurableGroupLog`] is the single-node implementation over store
//! `PartitionLog`s, where committed = durable (on one node the high watermark follows durability).
//!
//! Contract of an implementation:
//! - `append` refuses with [`GroupLogError::NotLeader`] unless this broker leads `partition` in
//!   exactly `leader_epoch` (the coordinator's state was loaded in that epoch; a record appended
//!   in another one would not match it);
//! - `append` is synchronous and never awaits: it is called under the coordinator's shard lock so
//!   that records reach the log in the order the state changed; it must not call back into the
//!   coordinator;
//! - the future resolves `Ok` only once the records are committed, and resolves (with an error)
//!   in bounded time otherwise; dropping it cancels only the wait, never the append.
//!
//! Not here: error codes (the front end maps [`GroupError`]), replication itself.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use millrace_store::PartitionLog;
use parking_lot::RwLock;

use crate::error::GroupError;
use crate::reply::Reply;

/// Why a `__consumer_offsets` append was refused or did not commit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupLogError {
    /// This broker does not lead the partition in the coordinator's leader epoch (Kafka's
    /// NOT_LEADER_OR_FOLLOWER; answered NOT_COORDINATOR).
    #[error("this broker does not lead the __consumer_offsets partition in the coordinator's leader epoch")]
    NotLeader,
    /// The ISR is below min.insync.replicas, before or after the append (Kafka's
    /// NOT_ENOUGH_REPLICAS and NOT_ENOUGH_REPLICAS_AFTER_APPEND; answered
    /// COORDINATOR_NOT_AVAILABLE).
    #[error(
        "the __consumer_offsets partition has fewer in-sync replicas than min.insync.replicas"
    )]
    NotEnoughReplicas,
    /// Not committed within the commit timeout (Kafka's REQUEST_TIMED_OUT; answered
    /// COORDINATOR_NOT_AVAILABLE). The records may still commit later.
    #[error("the __consumer_offsets records were not committed in time")]
    Timeout,
    /// The log could not take or keep the records (disk error, log offline or deleted).
    #[error("__consumer_offsets storage error: {0}")]
    Storage(String),
}

impl From<GroupLogError> for GroupError {
    /// Kafka's mapping of a failed coordinator append (GroupMetadataManager's and the new
    /// coordinator's): not the leader → NOT_COORDINATOR; too few replicas or a timeout →
    /// COORDINATOR_NOT_AVAILABLE. A storage error stays [`GroupError::Storage`], also answered
    /// COORDINATOR_NOT_AVAILABLE (see docs/decisions/0040).
    fn from(e: GroupLogError) -> Self {
        match e {
            GroupLogError::NotLeader => GroupError::NotCoordinator,
            GroupLogError::NotEnoughReplicas | GroupLogError::Timeout => {
                GroupError::CoordinatorNotAvailable
            }
            GroupLogError::Storage(reason) => GroupError::Storage(reason),
        }
    }
}

/// An accepted append: where it landed and when it counts.
pub struct GroupAppend {
    /// Offset of the last record appended.
    pub last_offset: i64,
    /// Resolves `Ok` once the records are committed (the high watermark passed them).
    pub committed: Reply<Result<(), GroupLogError>>,
}

/// Appends records to `__consumer_offsets` partitions as their leader. See the module comment for
/// the contract.
pub trait GroupLog: Send + Sync + 'static {
    /// Appends `records` (one v2 batch) to partition `partition` as its leader in `leader_epoch`.
    fn append(
        &self,
        partition: i32,
        leader_epoch: i32,
        records: BytesMut,
    ) -> Result<GroupAppend, GroupLogError>;
}

/// The single-node [`GroupLog`]: this broker leads the partitions registered with
/// [`DurableGroupLog::lead`], in the leader epoch given there, and a record is committed once it
/// is durable (`PartitionLog::wait_durable`), bounded by the commit timeout.
pub struct DurableGroupLog {
    led: RwLock<HashMap<i32, (Arc<PartitionLog>, i32)>>,
    commit_timeout: Duration,
}

impl DurableGroupLog {
    /// `commit_timeout`: how long a commit may wait for durability (Kafka's
    /// offsets.commit.timeout.ms, 5 s by default).
    pub fn new(commit_timeout: Duration) -> Self {
        Self {
            led: RwLock::new(HashMap::new()),
            commit_timeout,
        }
    }

    /// From now on this broker leads `partition` in `leader_epoch`, over `log`.
    pub fn lead(&self, partition: i32, log: Arc<PartitionLog>, leader_epoch: i32) {
        self.led.write().insert(partition, (log, leader_epoch));
    }

    /// From now on this broker does not lead `partition`.
    pub fn resign(&self, partition: i32) {
        self.led.write().remove(&partition);
    }
}

impl GroupLog for DurableGroupLog {
    fn append(
        &self,
        partition: i32,
        leader_epoch: i32,
        records: BytesMut,
    ) -> Result<GroupAppend, GroupLogError> {
        let log = match self.led.read().get(&partition) {
            Some((log, epoch)) if *epoch == leader_epoch => Arc::clone(log),
            _ => return Err(GroupLogError::NotLeader),
        };
        let info = log
            .append(records, leader_epoch)
            .map_err(|e| GroupLogError::Storage(e.to_string()))?;
        let end = info.last_offset.saturating_add(1);
        let timeout = self.commit_timeout;
        Ok(GroupAppend {
            last_offset: info.last_offset,
            committed: Box::pin(async move {
                match tokio::time::timeout(timeout, log.wait_durable(end)).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(GroupLogError::Storage(e.to_string())),
                    Err(_) => Err(GroupLogError::Timeout),
                }
            }),
        })
    }
}
