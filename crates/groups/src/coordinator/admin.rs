//! The coordinator's admin side: ListGroups, DescribeGroups, DeleteGroups, and the view the
//! metrics scrape ([`GroupCoordinator::metrics_snapshot`]).
//!
//! The reads take each shard's lock once, briefly, and change nothing. DeleteGroups deletes only
//! Empty groups: it appends tombstones for the group's offsets and metadata and answers once they
//! are committed. A share group's share state is deleted before, by the caller (the
//! share-partition state is not this crate's; `share_offsets.rs` says which partitions); the
//! answer still names them ([`DeletedGroup`]).
//!
//! Not here: ConsumerGroupDescribe (`consumer.rs`), OffsetDelete (`offsets.rs`).

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::encode::{encode_group_records, group_tombstones};
use super::shard::Leadership;
use super::share::not_a_classic_group;
use super::{
    now_ms, Committed, CoordinatorSnapshot, DeletedGroup, GroupCoordinator, GroupDescription,
    GroupListing, GroupSnapshot, MemberDescription,
};
use crate::consumer_group::{ConsumerGroup, ConsumerGroupState};
use crate::error::GroupError;
use crate::group::GroupState;
use crate::reply::Reply;
use crate::share_group::ShareGroupState;

impl GroupCoordinator {
    /// ListGroups over the partitions loaded here, filtered by state names (case-insensitive;
    /// empty = all). Fails with COORDINATOR_LOAD_IN_PROGRESS while any partition led here is
    /// loading, as Kafka does; partitions not led here contribute nothing.
    pub fn list_groups(&self, states: &[String]) -> Result<Vec<GroupListing>, GroupError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        let mut out = Vec::new();
        for shard in &self.shards {
            let shard = shard.lock();
            match shard.leadership {
                Leadership::Loaded(_) => {}
                Leadership::Loading(_) => return Err(GroupError::CoordinatorLoadInProgress),
                Leadership::NotLeader | Leadership::Failed { .. } => continue,
            }
            for entry in shard.groups.values() {
                let g = &entry.group;
                if g.state() == GroupState::Dead {
                    continue;
                }
                let listing = match (&entry.consumer, &entry.share) {
                    (_, Some(s)) => GroupListing {
                        group_id: g.id().to_string(),
                        protocol_type: "share".to_string(),
                        state: s.state().name(),
                        group_type: "Share",
                    },
                    (Some(c), None) => GroupListing {
                        group_id: g.id().to_string(),
                        protocol_type: "consumer".to_string(),
                        state: c.state().name(),
                        group_type: "Consumer",
                    },
                    (None, None) => GroupListing {
                        group_id: g.id().to_string(),
                        protocol_type: g.protocol_type().unwrap_or_default().to_string(),
                        state: g.state().name(),
                        group_type: "Classic",
                    },
                };
                if !states.is_empty()
                    && !states.iter().any(|s| s.eq_ignore_ascii_case(listing.state))
                {
                    continue;
                }
                out.push(listing);
            }
        }
        Ok(out)
    }

    pub fn describe_group(&self, group_id: &str) -> Result<GroupDescription, GroupError> {
        let shard = self.loaded_shard(group_id)?;
        let Some(entry) = shard.groups.get(group_id) else {
            return Ok(GroupDescription {
                group_id: group_id.to_string(),
                state: GroupState::Dead,
                protocol_type: String::new(),
                protocol_name: String::new(),
                members: Vec::new(),
            });
        };
        if entry.share.is_some() || entry.consumer.is_some() {
            // Kafka: "Group … is not a classic group." The front end answers v0-v5 with Dead and
            // no error, as Kafka does; the Java and librdkafka admin clients ask
            // ConsumerGroupDescribe first and only fall back to DescribeGroups on its
            // GROUP_ID_NOT_FOUND.
            return Err(not_a_classic_group(group_id));
        }
        let g = &entry.group;
        let stable = g.state() == GroupState::Stable;
        let protocol = g.protocol_name().unwrap_or_default().to_string();
        let value = g.metadata_value();
        let members = value
            .members
            .into_iter()
            .map(|m| MemberDescription {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                metadata: if stable { m.subscription } else { Bytes::new() },
                assignment: if stable { m.assignment } else { Bytes::new() },
            })
            .collect();
        Ok(GroupDescription {
            group_id: group_id.to_string(),
            state: g.state(),
            protocol_type: g.protocol_type().unwrap_or_default().to_string(),
            protocol_name: if stable { protocol } else { String::new() },
            members,
        })
    }

    /// DeleteGroups: each group must be Empty; its offsets and metadata get tombstones. A deleted
    /// share group's result names its share partitions with share state, for the caller to drop.
    pub fn delete_groups(
        &self,
        group_ids: Vec<String>,
    ) -> Reply<Vec<Result<DeletedGroup, GroupError>>> {
        let mut results = Vec::with_capacity(group_ids.len());
        let mut waits = Vec::new();
        for (i, group_id) in group_ids.iter().enumerate() {
            match self.delete_group(group_id) {
                Ok((wait, deleted)) => {
                    waits.push((i, wait));
                    results.push(Ok(deleted));
                }
                Err(e) => results.push(Err(e)),
            }
        }
        Box::pin(async move {
            for (i, committed) in waits {
                if let Err(e) = committed.await {
                    if let Some(r) = results.get_mut(i) {
                        *r = Err(e.into());
                    }
                }
            }
            results
        })
    }

    fn delete_group(&self, group_id: &str) -> Result<(Committed, DeletedGroup), GroupError> {
        let now = now_ms();
        let mut shard = self.loaded_shard(group_id)?;
        let entry = shard
            .groups
            .get(group_id)
            .ok_or(GroupError::GroupIdNotFound)?;
        if let Some(share) = &entry.share {
            // Kafka's `ShareGroup.validateDeleteGroup`: the group must be Empty.
            if !share.is_empty() {
                return Err(GroupError::NonEmptyGroup);
            }
            let deleted = DeletedGroup {
                share_partitions: share.initialized_partitions().clone(),
            };
            let mut tombstones = encode_group_records(share.tombstones());
            tombstones.extend(group_tombstones(&entry.group, true));
            let committed = self.append(&mut shard, &tombstones)?;
            if let Some(mut entry) = shard.groups.remove(group_id) {
                entry.group.mark_dead(now);
            }
            return Ok((committed, deleted));
        }
        if entry.active_consumer().is_some() {
            return Err(GroupError::NonEmptyGroup);
        }
        match entry.group.state() {
            GroupState::Empty => {}
            GroupState::Dead => return Err(GroupError::GroupIdNotFound),
            _ => return Err(GroupError::NonEmptyGroup),
        }
        let mut tombstones = group_tombstones(&entry.group, true);
        if let Some(c) = &entry.consumer {
            tombstones.extend(encode_group_records(c.tombstones()));
        }
        let committed = self.append(&mut shard, &tombstones)?;
        if let Some(mut entry) = shard.groups.remove(group_id) {
            entry.group.mark_dead(now);
        }
        Ok((committed, DeletedGroup::default()))
    }

    /// What the metrics read at scrape time: each group loaded here with its state and committed
    /// offsets, and how many `__consumer_offsets` partitions led here are still loading. Takes
    /// each shard's lock once, briefly.
    pub fn metrics_snapshot(&self) -> CoordinatorSnapshot {
        let mut out = CoordinatorSnapshot::default();
        for shard in &self.shards {
            let shard = shard.lock();
            match shard.leadership {
                Leadership::Loaded(_) => {}
                Leadership::Loading(_) => {
                    out.loading_partitions += 1;
                    continue;
                }
                Leadership::NotLeader | Leadership::Failed { .. } => continue,
            }
            for entry in shard.groups.values() {
                let g = &entry.group;
                // A consumer group is counted in the classic state closest to its own, so the
                // metric keeps one label set: Assigning and Reconciling are a rebalance.
                let state = match entry.consumer.as_ref().map(ConsumerGroup::state) {
                    None => match entry.share.as_ref().map(|s| s.state()) {
                        Some(ShareGroupState::Empty) => GroupState::Empty,
                        Some(ShareGroupState::Stable) => GroupState::Stable,
                        None => g.state(),
                    },
                    Some(ConsumerGroupState::Empty) => GroupState::Empty,
                    Some(ConsumerGroupState::Stable) => GroupState::Stable,
                    Some(ConsumerGroupState::Assigning | ConsumerGroupState::Reconciling) => {
                        GroupState::PreparingRebalance
                    }
                };
                out.groups.push(GroupSnapshot {
                    group_id: g.id().to_string(),
                    state,
                    offsets: g
                        .offsets
                        .iter()
                        .map(|((topic, partition), o)| (topic.clone(), *partition, o.offset))
                        .collect(),
                });
            }
        }
        out
    }
}
