//! The share-group admin side of the coordinator (KIP-932): which share partitions of a group
//! have share state, and the changes to that set that AlterShareGroupOffsets,
//! DeleteShareGroupOffsets and DeleteGroups make (Kafka's `alterShareGroupOffsets`,
//! `initiateDeleteShareGroupOffsets`/`completeDeleteShareGroupOffsets` and
//! `sharePartitionDeleteRequests` in `GroupCoordinatorShard`).
//!
//! Each admin operation comes in two steps around the share-state RPCs, which the front end sends
//! (the share-partition state is not this crate's): a check under the shard lock that answers
//! Kafka's group-level errors (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP) and says which partitions the
//! RPCs touch, then, once the state is initialized or deleted, a change of the group's
//! initialized partitions written as its ShareGroupStatePartitionMetadata record and answered
//! once committed. Kafka marks the partitions "initializing"/"deleting" in between; Millrace does
//! not (its replay keeps no such partitions either): a member that joins between the two steps
//! finds the group's partitions as they were.
//!
//! Not here: ShareGroupHeartbeat and ShareGroupDescribe (`share.rs`), deleting the group itself
//! (`admin.rs`).

use super::encode::encode_group_records;
use super::shard::GroupEntry;
use super::share::not_a_share_group;
use super::{now_ms, GroupCoordinator, ShareGroupDeletion};
use crate::error::GroupError;
use crate::group::Group;
use crate::reply::{ready, Reply};
use crate::share_group::{InitializedPartitions, ShareGroup};

/// Kafka's GROUP_ID_NOT_FOUND for a share group that does not exist.
fn share_group_not_found(group_id: &str) -> GroupError {
    GroupError::GroupIdNotFoundWith(format!("Group {group_id} not found."))
}

impl GroupCoordinator {
    /// AlterShareGroupOffsets' check: the share group `group_id` must be Empty; a missing group is
    /// created (Kafka's `getOrMaybeCreatePersistedShareGroup`), its records answered once
    /// committed. Answers the state epoch the share-state initializations carry (Kafka: the
    /// group epoch).
    pub fn share_offsets_alterable(&self, group_id: &str) -> Reply<Result<i32, GroupError>> {
        if group_id.is_empty() {
            return ready(Err(GroupError::InvalidGroupId));
        }
        let now = now_ms();
        let mut shard = match self.loaded_shard(group_id) {
            Ok(s) => s,
            Err(e) => return ready(Err(e)),
        };
        let config = &self.config;
        let entry = match shard.groups.get(group_id) {
            Some(e) if e.share.is_none() && !e.is_bare() => {
                return ready(Err(not_a_share_group(group_id)))
            }
            Some(e) => e,
            None => {
                shard.groups.insert(
                    group_id.to_string(),
                    GroupEntry::new(Group::new(group_id, &config.group, now)),
                );
                match shard.groups.get(group_id) {
                    Some(e) => e,
                    None => return ready(Err(GroupError::CoordinatorNotAvailable)),
                }
            }
        };
        if let Some(s) = &entry.share {
            if !s.is_empty() {
                return ready(Err(GroupError::NonEmptyGroup));
            }
            return ready(Ok(s.group_epoch()));
        }
        let Some(entry) = shard.groups.get_mut(group_id) else {
            return ready(Err(GroupError::CoordinatorNotAvailable));
        };
        let share = entry.share.insert(ShareGroup::new(group_id));
        share.mark_created();
        let epoch = share.group_epoch();
        let records = encode_group_records(share.take_records());
        let committed = match self.append(&mut shard, &records) {
            Ok(c) => c,
            Err(e) => {
                shard.groups.remove(group_id);
                return ready(Err(e));
            }
        };
        Box::pin(async move {
            committed.await?;
            Ok(epoch)
        })
    }

    /// AlterShareGroupOffsets' change: `partitions` (topic id → name and partitions) now have
    /// share state in share group `group_id`. Answered once the record is committed.
    pub fn share_partitions_initialized(
        &self,
        group_id: &str,
        partitions: InitializedPartitions,
    ) -> Reply<Result<(), GroupError>> {
        self.change_share_partitions(group_id, |share| {
            for (topic_id, (name, ps)) in partitions {
                share.add_initialized(topic_id, &name, ps);
            }
        })
    }

    /// DeleteShareGroupOffsets' check: the share group `group_id` must exist (GROUP_ID_NOT_FOUND,
    /// "Group X not found.") and be Empty (NON_EMPTY_GROUP). Answers its initialized partitions.
    pub fn share_offsets_deletable(
        &self,
        group_id: &str,
    ) -> Result<InitializedPartitions, GroupError> {
        if group_id.is_empty() {
            return Err(GroupError::InvalidGroupId);
        }
        let shard = self.loaded_shard(group_id)?;
        let share = match shard.groups.get(group_id) {
            None => return Err(share_group_not_found(group_id)),
            Some(e) => e
                .share
                .as_ref()
                .ok_or_else(|| not_a_share_group(group_id))?,
        };
        if !share.is_empty() {
            return Err(GroupError::NonEmptyGroup);
        }
        Ok(share.initialized_partitions().clone())
    }

    /// DeleteShareGroupOffsets' change: the share state of `topic_ids` is deleted, the group
    /// forgets their partitions. Answered once the record is committed.
    pub fn share_topics_deleted(
        &self,
        group_id: &str,
        topic_ids: Vec<uuid::Uuid>,
    ) -> Reply<Result<(), GroupError>> {
        self.change_share_partitions(group_id, |share| {
            for id in topic_ids {
                share.remove_initialized(id);
            }
        })
    }

    /// DeleteGroups' first step (Kafka's `sharePartitionDeleteRequests`): for each group, whether
    /// it is a share group and, if it is Empty, the partitions whose share state goes first.
    /// A group whose coordinator is not here answers its error.
    pub fn share_groups_to_delete(
        &self,
        group_ids: &[String],
    ) -> Vec<Result<ShareGroupDeletion, GroupError>> {
        group_ids
            .iter()
            .map(|group_id| {
                let shard = self.loaded_shard(group_id)?;
                Ok(
                    match shard.groups.get(group_id).and_then(|e| e.share.as_ref()) {
                        None => ShareGroupDeletion::NotShare,
                        Some(s) if !s.is_empty() => ShareGroupDeletion::NotEmpty,
                        Some(s) => ShareGroupDeletion::Delete(s.initialized_partitions().clone()),
                    },
                )
            })
            .collect()
    }

    /// Steps share group `group_id` with `change` and appends the records it made; answered once
    /// committed. GROUP_ID_NOT_FOUND when the group went meanwhile.
    fn change_share_partitions(
        &self,
        group_id: &str,
        change: impl FnOnce(&mut ShareGroup),
    ) -> Reply<Result<(), GroupError>> {
        let mut shard = match self.loaded_shard(group_id) {
            Ok(s) => s,
            Err(e) => return ready(Err(e)),
        };
        let Some(share) = shard
            .groups
            .get_mut(group_id)
            .and_then(|e| e.share.as_mut())
        else {
            return ready(Err(share_group_not_found(group_id)));
        };
        change(share);
        let records = encode_group_records(share.take_records());
        if records.is_empty() {
            return ready(Ok(()));
        }
        let load_id = shard.load_id().unwrap_or(0);
        let committed = match self.append(&mut shard, &records) {
            Ok(c) => c,
            Err(e) => {
                if let Some(s) = shard
                    .groups
                    .get_mut(group_id)
                    .and_then(|e| e.share.as_mut())
                {
                    s.mark_all_dirty();
                }
                return ready(Err(e));
            }
        };
        drop(shard);
        let me = self.me.clone();
        let group_id = group_id.to_string();
        Box::pin(async move {
            match committed.await {
                Ok(()) => Ok(()),
                Err(e) => {
                    if let Some(c) = me.upgrade() {
                        c.share_records_not_durable(&group_id, load_id);
                    }
                    Err(e.into())
                }
            }
        })
    }
}
