//! The classic group protocol, Kafka's `ClassicGroup` handling in `GroupMetadataManager`:
//! JoinGroup, SyncGroup, Heartbeat and LeaveGroup.
//!
//! Each call locks the group's shard, steps the pure [`crate::group::Group`], carries out the
//! step's effects ([`GroupCoordinator::apply_effects`]: answers to parked requests, the group's
//! metadata record) and releases the lock; the answers go out once that record is committed
//! ([`Deliveries`]). A record that cannot be appended or does not commit answers the waiting
//! requests with the mapped error and puts the group back into rebalancing
//! (`metadata_not_durable`).
//!
//! Also here: [`log_transition`], the group state-change log line the timers share.
//!
//! Not here: session and rebalance deadlines (`timers.rs`), committed offsets (`offsets.rs`),
//! KIP-848 consumer groups (`consumer.rs`).

use std::sync::Weak;

use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use super::encode::encode_group_records;
use super::shard::{GroupEntry, Shard};
use super::share::not_a_classic_group;
use super::{now_ms, Committed, GroupCoordinator};
use crate::error::GroupError;
use crate::group::{
    Effect, Group, GroupState, JoinRequest, JoinResponse, LeaveResult, Outcome, SyncRequest,
    SyncResponse,
};
use crate::records::{self, RecordKey};
use crate::reply::{ready, Reply};

impl GroupCoordinator {
    pub fn join(&self, req: JoinRequest) -> Reply<JoinResponse> {
        let member_id = req.member_id.clone();
        let now = now_ms();
        let mut shard = match self.loaded_shard(&req.group_id) {
            Ok(s) => s,
            Err(e) => return ready(JoinResponse::error(e, &member_id)),
        };
        if !req.member_id.is_empty() && !shard.groups.contains_key(&req.group_id) {
            return ready(JoinResponse::error(GroupError::UnknownMemberId, &member_id));
        }
        if shard
            .groups
            .get(&req.group_id)
            .is_some_and(|e| e.share.is_some())
        {
            return ready(JoinResponse::error(
                not_a_classic_group(&req.group_id),
                &member_id,
            ));
        }
        let config = self.config.group.clone();
        let created = !shard.groups.contains_key(&req.group_id);
        let entry = shard
            .groups
            .entry(req.group_id.clone())
            .or_insert_with(|| GroupEntry::new(Group::new(&req.group_id, &config, now)));
        // A consumer group takes classic members only once it is empty (it then becomes a
        // classic group again): Kafka's rule with group.consumer.migration.policy=disabled.
        if entry.active_consumer().is_some() {
            return ready(JoinResponse::error(
                GroupError::InconsistentGroupProtocol,
                &member_id,
            ));
        }
        let converted = entry
            .consumer
            .take()
            .map(|c| encode_group_records(c.tombstones()));
        let new_member_id = format!("{}-{}", req.client_id, uuid::Uuid::new_v4());
        let before = (entry.group.state(), entry.group.generation());
        let (outcome, effects) = entry.group.join(&config, &req, new_member_id, now);
        log_transition(&entry.group, before);
        let (tx, rx) = oneshot::channel();
        let direct = match outcome {
            Outcome::Reply(r) => Some((tx, r)),
            Outcome::Await { member_id } => {
                if let Some(old) = entry.joins.insert(member_id.clone(), tx) {
                    let _ = old.send(JoinResponse::error(
                        GroupError::RebalanceInProgress,
                        &member_id,
                    ));
                }
                None
            }
        };
        // An empty consumer group that became classic: its consumer records go (nobody waits;
        // if they do not commit, a reload finds an empty consumer group, which a join converts
        // again).
        if let Some(tombstones) = converted {
            if let Err(e) = self.append(&mut shard, &tombstones) {
                warn!(group = %req.group_id, error = %e, "cannot write the tombstones of a converted consumer group");
            }
        }
        let mut deliveries = self.apply_effects(&mut shard, &req.group_id, effects);
        // An answer given now still waits for the record this step wrote, like the parked ones.
        deliveries.joins.extend(direct);
        // A refused first join leaves no group behind (Kafka validates before creating one).
        let leftover = shard.groups.get(&req.group_id).is_some_and(|e| {
            e.group.is_empty() && e.group.offsets.is_empty() && e.group.protocol_type().is_none()
        });
        if created && leftover {
            shard.groups.remove(&req.group_id);
        }
        drop(shard);
        deliveries.send();
        Box::pin(async move {
            rx.await.unwrap_or_else(|_| {
                JoinResponse::error(GroupError::CoordinatorNotAvailable, &member_id)
            })
        })
    }

    pub fn sync(&self, req: SyncRequest) -> Reply<SyncResponse> {
        let now = now_ms();
        let mut shard = match self.loaded_shard(&req.group_id) {
            Ok(s) => s,
            Err(e) => return ready(SyncResponse::error(e)),
        };
        let Some(entry) = shard.groups.get_mut(&req.group_id) else {
            return ready(SyncResponse::error(GroupError::UnknownMemberId));
        };
        if entry.share.is_some() {
            return ready(SyncResponse::error(not_a_classic_group(&req.group_id)));
        }
        let before = (entry.group.state(), entry.group.generation());
        let (outcome, effects) = entry.group.sync(&req, now);
        log_transition(&entry.group, before);
        let (tx, rx) = oneshot::channel();
        let direct = match outcome {
            Outcome::Reply(r) => Some((tx, r)),
            Outcome::Await { member_id } => {
                if let Some(old) = entry.syncs.insert(member_id, tx) {
                    let _ = old.send(SyncResponse::error(GroupError::RebalanceInProgress));
                }
                None
            }
        };
        let mut deliveries = self.apply_effects(&mut shard, &req.group_id, effects);
        deliveries.syncs.extend(direct);
        drop(shard);
        deliveries.send();
        Box::pin(async move {
            rx.await
                .unwrap_or_else(|_| SyncResponse::error(GroupError::CoordinatorNotAvailable))
        })
    }

    /// The group's metadata record of `generation`, written in load `load_id`, did not commit: if
    /// the shard still holds that load and the group is still in that generation, it forgets the
    /// assignment and rebalances (Kafka's resetAndPropagateAssignmentError + prepareRebalance),
    /// answering what it must.
    fn metadata_not_durable(&self, group_id: &str, generation: i32, load_id: u64) {
        let now = now_ms();
        let Ok(shard) = self.shard(group_id) else {
            return;
        };
        let mut shard = shard.lock();
        if shard.leadership.loaded().map(|l| l.load_id) != Some(load_id) {
            return;
        }
        let Some(entry) = shard.groups.get_mut(group_id) else {
            return;
        };
        let before = (entry.group.state(), entry.group.generation());
        let effects = entry.group.metadata_not_durable(generation, now);
        log_transition(&entry.group, before);
        let deliveries = self.apply_effects(&mut shard, group_id, effects);
        drop(shard);
        deliveries.send();
    }

    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), GroupError> {
        let mut shard = self.loaded_shard(group_id)?;
        let entry = shard
            .groups
            .get_mut(group_id)
            .ok_or(GroupError::UnknownMemberId)?;
        if entry.share.is_some() {
            return Err(not_a_classic_group(group_id));
        }
        entry
            .group
            .heartbeat(member_id, group_instance_id, generation_id, now_ms())
    }

    /// LeaveGroup: one result per (member id, instance id), or a group-level error.
    pub fn leave(&self, group_id: &str, members: &[(String, Option<String>)]) -> LeaveResult {
        let mut shard = self.loaded_shard(group_id)?;
        let Some(entry) = shard.groups.get_mut(group_id) else {
            return Ok(members
                .iter()
                .map(|_| Err(GroupError::UnknownMemberId))
                .collect());
        };
        if entry.share.is_some() {
            return Err(not_a_classic_group(group_id));
        }
        let before = (entry.group.state(), entry.group.generation());
        let (result, effects) = entry.group.leave(members, now_ms());
        log_transition(&entry.group, before);
        let deliveries = self.apply_effects(&mut shard, group_id, effects);
        drop(shard);
        deliveries.send();
        result
    }

    /// Carries out a step's effects for `group_id`: takes parked responders, writes the group's
    /// metadata record, and returns the replies to send (after the commit if a record was written).
    pub(super) fn apply_effects(
        &self,
        shard: &mut Shard,
        group_id: &str,
        effects: Vec<Effect>,
    ) -> Deliveries {
        let mut out = Deliveries::default();
        let mut persist = false;
        if let Some(entry) = shard.groups.get_mut(group_id) {
            for effect in effects {
                match effect {
                    Effect::JoinReply {
                        member_id,
                        response,
                    } => {
                        if let Some(tx) = entry.joins.remove(&member_id) {
                            out.joins.push((tx, response));
                        }
                    }
                    Effect::SyncReply {
                        member_id,
                        response,
                    } => {
                        if let Some(tx) = entry.syncs.remove(&member_id) {
                            out.syncs.push((tx, response));
                        }
                    }
                    Effect::PersistGroup => persist = true,
                }
            }
        }
        if persist {
            let value = shard
                .groups
                .get(group_id)
                .map(|e| records::encode_group_value(&e.group.metadata_value()));
            if let Some(value) = value {
                let key = records::encode_key(&RecordKey::Group {
                    group: group_id.to_string(),
                });
                match self.append(shard, &[(key, Some(value))]) {
                    Ok(committed) => out.committed = Some(committed),
                    Err(e) => out.append_failed = Some(e),
                }
                let generation = shard
                    .groups
                    .get(group_id)
                    .map_or(0, |e| e.group.generation());
                let load_id = shard.load_id().unwrap_or(0);
                out.owner = Some((self.me.clone(), group_id.to_string(), generation, load_id));
            }
        }
        out
    }
}

/// Replies to send once the group's metadata record (if one was written) is committed.
#[derive(Default)]
pub(super) struct Deliveries {
    joins: Vec<(oneshot::Sender<JoinResponse>, JoinResponse)>,
    syncs: Vec<(oneshot::Sender<SyncResponse>, SyncResponse)>,
    /// The record's commit, if one was appended.
    committed: Option<Committed>,
    /// Why the record could not be appended at all, if it could not.
    append_failed: Option<GroupError>,
    /// Whose record it is (coordinator, group id, generation, load id), to put the group back
    /// into rebalancing if the record does not commit.
    owner: Option<(Weak<GroupCoordinator>, String, i32, u64)>,
}

impl Deliveries {
    /// Sends now if no record was written; once it is committed if one was; and if it cannot be
    /// committed, answers every reply with the mapped error and returns the group to rebalancing.
    pub(super) fn send(mut self) {
        if let Some(e) = self.append_failed.take() {
            self.fail(e);
            return;
        }
        match self.committed.take() {
            None => self.send_now(),
            Some(committed) => {
                tokio::spawn(async move {
                    match committed.await {
                        Ok(()) => self.send_now(),
                        Err(e) => self.fail(e.into()),
                    }
                });
            }
        }
    }

    fn send_now(self) {
        for (tx, r) in self.joins {
            let _ = tx.send(r);
        }
        for (tx, r) in self.syncs {
            let _ = tx.send(r);
        }
    }

    fn fail(self, error: GroupError) {
        warn!(group = ?self.owner.as_ref().map(|o| &o.1), %error, "group metadata did not become durable (not committed); answering with the error");
        for (tx, r) in self.joins {
            let _ = tx.send(JoinResponse::error(error.clone(), &r.member_id));
        }
        for (tx, _) in self.syncs {
            let _ = tx.send(SyncResponse::error(error.clone()));
        }
        if let Some((coordinator, group_id, generation, load_id)) = self.owner {
            if let Some(c) = coordinator.upgrade() {
                c.metadata_not_durable(&group_id, generation, load_id);
            }
        }
    }
}

/// Logs a group's state changes, as Kafka's coordinator does ("Preparing to rebalance group",
/// "Stabilized group"): info for a new generation, debug otherwise.
pub(super) fn log_transition(g: &Group, before: (GroupState, i32)) {
    let after = (g.state(), g.generation());
    if after == before {
        return;
    }
    if after.1 != before.1 || after.0 == GroupState::Stable {
        info!(
            group = %g.id(),
            from = before.0.name(),
            to = after.0.name(),
            generation = after.1,
            members = g.member_count(),
            "group state change"
        );
    } else {
        debug!(
            group = %g.id(),
            from = before.0.name(),
            to = after.0.name(),
            generation = after.1,
            members = g.member_count(),
            "group state change"
        );
    }
}
