//! The KIP-932 share group protocol: ShareGroupHeartbeat and ShareGroupDescribe (Kafka's
//! `shareGroupHeartbeat` and `shareGroupDescribe` in `GroupMetadataManager`), and the questions
//! the share-partition side asks about a group ([`GroupCoordinator::share_group_partitions`]).
//!
//! A heartbeat is validated first (as Kafka's `throwIfShareGroupHeartbeatRequestIsInvalid`, before
//! the coordinator is looked at), then locks the group's shard, steps the group's
//! [`crate::share_group::ShareGroup`] (creating it on a join) and appends the records the step
//! produced; its answer waits until they are committed. Records that do not commit get the whole
//! group written again with its next records (`share_records_not_durable`).
//!
//! A group id of another type answers GROUP_ID_NOT_FOUND ("Group X is not a share group."), as a
//! missing group does for any epoch but 0 ("Share group X not found.").
//!
//! Not here: the state machine and the assignor (`share_group.rs`, `share_assignor.rs`), session
//! timeouts (`timers.rs`), ListGroups/DescribeGroups/DeleteGroups (`admin.rs`), the share
//! partitions' own state (records acquired and acknowledged), which another crate owns.

use tracing::debug;

use super::encode::{encode_group_records, Encoded};
use super::shard::{GroupEntry, Shard};
use super::{now_ms, GroupCoordinator};
use crate::consumer_group::TopicsView;
use crate::error::GroupError;
use crate::group::Group;
use crate::reply::{ready, Reply};
use crate::share_group::{
    InitializedPartitions, ShareGroup, ShareGroupConfig, ShareGroupDescription,
    ShareHeartbeatRequest, ShareHeartbeatResponse, SHARE_JOIN_EPOCH, SHARE_LEAVE_EPOCH,
};

/// Kafka's GROUP_ID_NOT_FOUND for a group id that is not a share group.
pub(super) fn not_a_share_group(group_id: &str) -> GroupError {
    GroupError::GroupIdNotFoundWith(format!("Group {group_id} is not a share group."))
}

/// Kafka's GROUP_ID_NOT_FOUND for a share group id used by a consumer group request (OffsetCommit,
/// OffsetFetch, OffsetDelete, ConsumerGroupHeartbeat).
pub(super) fn not_a_consumer_group(group_id: &str) -> GroupError {
    GroupError::GroupIdNotFoundWith(format!("Group {group_id} is not a consumer group."))
}

/// Kafka's GROUP_ID_NOT_FOUND for a share group id used by a classic group request (JoinGroup,
/// SyncGroup, Heartbeat, LeaveGroup, DescribeGroups).
pub(super) fn not_a_classic_group(group_id: &str) -> GroupError {
    GroupError::GroupIdNotFoundWith(format!("Group {group_id} is not a classic group."))
}

impl GroupCoordinator {
    /// ShareGroupHeartbeat: join (epoch 0, creating the group), heartbeat, or leave (epoch -1).
    pub fn share_heartbeat(
        &self,
        req: &ShareHeartbeatRequest,
        topics: &dyn TopicsView,
    ) -> Reply<Result<ShareHeartbeatResponse, GroupError>> {
        if let Err(e) = ShareGroup::validate(req) {
            return ready(Err(e));
        }
        let now = now_ms();
        let mut shard = match self.loaded_shard(&req.group_id) {
            Ok(s) => s,
            Err(e) => return ready(Err(e)),
        };
        let (result, writes) = self.share_heartbeat_locked(&mut shard, req, topics, now);
        if writes.is_empty() {
            return ready(result);
        }
        // The answer waits until what it reports is in the log, as in Kafka.
        let load_id = shard.load_id().unwrap_or(0);
        let committed = match self.append(&mut shard, &writes) {
            Ok(c) => c,
            Err(e) => {
                if let Some(s) = shard
                    .groups
                    .get_mut(&req.group_id)
                    .and_then(|e| e.share.as_mut())
                {
                    s.mark_all_dirty();
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
                        c.share_records_not_durable(&group_id, load_id);
                    }
                    Err(e.into())
                }
            }
        })
    }

    /// A share group's records did not commit (in load `load_id`): while the shard still holds
    /// that load, the whole group is written again with its next records.
    pub(super) fn share_records_not_durable(&self, group_id: &str, load_id: u64) {
        let Ok(shard) = self.shard(group_id) else {
            return;
        };
        let mut shard = shard.lock();
        if shard.leadership.loaded().map(|l| l.load_id) != Some(load_id) {
            return;
        }
        if let Some(s) = shard
            .groups
            .get_mut(group_id)
            .and_then(|e| e.share.as_mut())
        {
            s.mark_all_dirty();
        }
    }

    /// The heartbeat's step under the shard lock: its answer and the records to append.
    fn share_heartbeat_locked(
        &self,
        shard: &mut Shard,
        req: &ShareHeartbeatRequest,
        topics: &dyn TopicsView,
        now: i64,
    ) -> (Result<ShareHeartbeatResponse, GroupError>, Vec<Encoded>) {
        let group_id = &req.group_id;
        let existing = shard.groups.get(group_id);
        let refusal = match existing {
            None if req.member_epoch == SHARE_LEAVE_EPOCH => Some(GroupError::GroupIdNotFoundWith(
                format!("Group {group_id} not found."),
            )),
            None if req.member_epoch != SHARE_JOIN_EPOCH => Some(GroupError::GroupIdNotFoundWith(
                format!("Share group {group_id} not found."),
            )),
            // A bare leftover of a refused request may become a share group on a join.
            Some(e)
                if e.share.is_none() && !(e.is_bare() && req.member_epoch == SHARE_JOIN_EPOCH) =>
            {
                Some(not_a_share_group(group_id))
            }
            _ => None,
        };
        if let Some(e) = refusal {
            return (Err(e), Vec::new());
        }
        let created = existing.is_none_or(|e| e.share.is_none());
        let config = &self.config;
        let entry = shard
            .groups
            .entry(group_id.clone())
            .or_insert_with(|| GroupEntry::new(Group::new(group_id, &config.group, now)));
        let share = entry.share.get_or_insert_with(|| ShareGroup::new(group_id));
        let before = share.group_epoch();
        // The group's own session timeout and heartbeat interval, where it has them.
        let (session_timeout_ms, heartbeat_interval_ms) = req.timeouts.or((
            config.share.session_timeout_ms,
            config.share.heartbeat_interval_ms,
        ));
        let share_config = ShareGroupConfig {
            session_timeout_ms,
            heartbeat_interval_ms,
            ..config.share.clone()
        };
        let result = share.heartbeat(&share_config, req, topics, now);
        if share.group_epoch() != before {
            debug!(group = %group_id, group_epoch = share.group_epoch(), "share group epoch moved");
        }
        if result.is_err() && created && share.is_empty() {
            // A refused first join leaves no group behind.
            shard.groups.remove(group_id);
            return (result, Vec::new());
        }
        let writes = encode_group_records(share.take_records());
        (result, writes)
    }

    /// ShareGroupDescribe of one group: GROUP_ID_NOT_FOUND for a group that does not exist or is
    /// of another type, as in Kafka.
    pub fn describe_share_group(
        &self,
        group_id: &str,
    ) -> Result<ShareGroupDescription, GroupError> {
        let shard = self.loaded_shard(group_id)?;
        match shard.groups.get(group_id) {
            None => Err(GroupError::GroupIdNotFoundWith(format!(
                "Group {group_id} not found."
            ))),
            Some(e) => e
                .share
                .as_ref()
                .map(ShareGroup::describe)
                .ok_or_else(|| not_a_share_group(group_id)),
        }
    }

    /// The share partitions of share group `group_id` that have share state (Kafka's
    /// `initializedShareGroupPartitions`): what DescribeShareGroupOffsets lists when it names no
    /// topic, and what deleting the group must drop. GROUP_ID_NOT_FOUND as
    /// [`GroupCoordinator::describe_share_group`].
    pub fn share_group_partitions(
        &self,
        group_id: &str,
    ) -> Result<InitializedPartitions, GroupError> {
        let shard = self.loaded_shard(group_id)?;
        match shard.groups.get(group_id) {
            None => Err(GroupError::GroupIdNotFoundWith(format!(
                "Group {group_id} not found."
            ))),
            Some(e) => e
                .share
                .as_ref()
                .map(|s| s.initialized_partitions().clone())
                .ok_or_else(|| not_a_share_group(group_id)),
        }
    }
}
