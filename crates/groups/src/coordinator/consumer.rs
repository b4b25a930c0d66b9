//! The KIP-848 consumer group protocol: ConsumerGroupHeartbeat and ConsumerGroupDescribe, Kafka's
//! `consumerGroupHeartbeat` in `GroupMetadataManager`.
//!
//! A heartbeat locks the group's shard, steps the group's [`crate::consumer_group::ConsumerGroup`]
//! (creating it, or converting an empty classic group, on a join) and appends the records the step
//! produced; its answer waits until they are committed. Records that do not commit get the whole
//! group written again with its next records (`consumer_records_not_durable`), so that the log
//! catches up with the state in memory.
//!
//! Not here: the state machine and assignors (`consumer_group.rs`, `assignor.rs`), session and
//! rebalance timeouts (`timers.rs`), a group's committed offsets (`offsets.rs`).

use tracing::debug;

use super::encode::{encode_group_records, Encoded};
use super::shard::{GroupEntry, Shard};
use super::share::not_a_consumer_group;
use super::{now_ms, GroupCoordinator};
use crate::consumer_group::{
    ConsumerGroup, ConsumerGroupConfig, ConsumerGroupDescription, HeartbeatRequest,
    HeartbeatResponse, TopicsView, JOIN_EPOCH,
};
use crate::error::GroupError;
use crate::group::{Group, GroupState};
use crate::reply::{ready, Reply};

impl GroupCoordinator {
    /// ConsumerGroupHeartbeat. A classic group becomes a consumer group on a join only while it
    /// has no members (GROUP_ID_NOT_FOUND otherwise, Kafka's answer with migration disabled);
    /// any other epoch for a group that is not a consumer group here gets UNKNOWN_MEMBER_ID, so
    /// that members whose group was lost (a restart, a coordinator move) rejoin.
    pub fn consumer_heartbeat(
        &self,
        req: &HeartbeatRequest,
        topics: &dyn TopicsView,
    ) -> Reply<Result<HeartbeatResponse, GroupError>> {
        let now = now_ms();
        let mut shard = match self.loaded_shard(&req.group_id) {
            Ok(s) => s,
            Err(e) => return ready(Err(e)),
        };
        let (result, writes) = self.consumer_heartbeat_locked(&mut shard, req, topics, now);
        if writes.is_empty() {
            return ready(result);
        }
        // The answer waits until what it reports is in the log, as in Kafka.
        let load_id = shard.load_id().unwrap_or(0);
        let committed = match self.append(&mut shard, &writes) {
            Ok(c) => c,
            Err(e) => {
                // The state moved on but its records are not in the log: write it all again.
                if let Some(c) = shard
                    .groups
                    .get_mut(&req.group_id)
                    .and_then(|e| e.consumer.as_mut())
                {
                    c.mark_all_dirty();
                }
                return ready(Err(e));
            }
        };
        drop(shard);
        let me = self.me.clone();
        let group_id = req.group_id.clone();
        Box::pin(async move {
            match committed.await {
                Ok(()) => result,
                Err(e) => {
                    if let Some(c) = me.upgrade() {
                        c.consumer_records_not_durable(&group_id, load_id);
                    }
                    Err(e.into())
                }
            }
        })
    }

    /// A consumer group's records did not commit (in load `load_id`): while the shard still holds
    /// that load, the whole group is written again with its next records, so the log catches up
    /// with the state in memory (Kafka reverts the state instead; either way no member is left
    /// with partitions the log would give to another).
    pub(super) fn consumer_records_not_durable(&self, group_id: &str, load_id: u64) {
        let Ok(shard) = self.shard(group_id) else {
            return;
        };
        let mut shard = shard.lock();
        if shard.leadership.loaded().map(|l| l.load_id) != Some(load_id) {
            return;
        }
        if let Some(c) = shard
            .groups
            .get_mut(group_id)
            .and_then(|e| e.consumer.as_mut())
        {
            c.mark_all_dirty();
        }
    }

    /// The heartbeat's step under the shard lock: its answer and the records to append.
    fn consumer_heartbeat_locked(
        &self,
        shard: &mut Shard,
        req: &HeartbeatRequest,
        topics: &dyn TopicsView,
        now: i64,
    ) -> (Result<HeartbeatResponse, GroupError>, Vec<Encoded>) {
        if shard
            .groups
            .get(&req.group_id)
            .is_some_and(|e| e.share.is_some())
        {
            return (Err(not_a_consumer_group(&req.group_id)), Vec::new());
        }
        let created = !shard.groups.contains_key(&req.group_id);
        let config = &self.config;
        if created && req.member_epoch != JOIN_EPOCH {
            return (Err(GroupError::UnknownMemberId), Vec::new());
        }
        let entry = shard
            .groups
            .entry(req.group_id.clone())
            .or_insert_with(|| GroupEntry::new(Group::new(&req.group_id, &config.group, now)));
        if entry.consumer.is_none() {
            if req.member_epoch != JOIN_EPOCH {
                return (Err(GroupError::UnknownMemberId), Vec::new());
            }
            if entry.has_members() || entry.group.state() == GroupState::Dead {
                return (Err(GroupError::GroupIdNotFound), Vec::new());
            }
        }
        let converted = entry.consumer.is_none();
        let consumer = entry.consumer.get_or_insert_with(|| {
            let mut c = ConsumerGroup::new(&req.group_id);
            c.set_empty_since_ms(now);
            c
        });
        let before = consumer.group_epoch();
        // The group's own session timeout and heartbeat interval, where it has them.
        let (session_timeout_ms, heartbeat_interval_ms) = req.timeouts.or((
            config.consumer.session_timeout_ms,
            config.consumer.heartbeat_interval_ms,
        ));
        let consumer_config = ConsumerGroupConfig {
            session_timeout_ms,
            heartbeat_interval_ms,
            ..config.consumer.clone()
        };
        let result = consumer.heartbeat(
            &consumer_config,
            req,
            topics,
            || uuid::Uuid::new_v4().to_string(),
            now,
        );
        if consumer.group_epoch() != before {
            debug!(group = %req.group_id, group_epoch = consumer.group_epoch(), state = consumer.state().name(), "consumer group epoch moved");
        }
        let writes = encode_group_records(consumer.take_records());
        // A refused first join leaves no group behind, and a classic group it would have
        // converted stays classic.
        if result.is_err() && consumer.is_empty() {
            if created && entry.group.offsets.is_empty() {
                shard.groups.remove(&req.group_id);
                return (result, Vec::new());
            }
            if converted {
                entry.consumer = None;
                return (result, Vec::new());
            }
        }
        (result, writes)
    }

    /// ConsumerGroupDescribe of one group: GROUP_ID_NOT_FOUND for a group that does not exist or
    /// is a classic group, as in Kafka.
    pub fn describe_consumer_group(
        &self,
        group_id: &str,
    ) -> Result<ConsumerGroupDescription, GroupError> {
        let shard = self.loaded_shard(group_id)?;
        shard
            .groups
            .get(group_id)
            .and_then(|e| e.consumer.as_ref())
            .map(|c| c.describe(&self.config.consumer))
            .ok_or(GroupError::GroupIdNotFound)
    }
}
