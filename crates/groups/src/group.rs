//! One classic group's state machine, as Kafka's (`ClassicGroup` + the classic parts of
//! `GroupMetadataManager`): Empty → PreparingRebalance → CompletingRebalance → Stable, and Dead.
//!
//! It is pure: every call takes `now_ms` and returns what to answer and which [`Effect`]s follow
//! (replies to members parked in JoinGroup/SyncGroup, a group metadata record to write). Nothing
//! here sleeps, locks, or does I/O; the coordinator owns the parked responders and timers and
//! calls [`Group::tick`] when [`Group::next_deadline_ms`] has passed, so tests step it by hand.
//!
//! Invariants kept:
//! - a member is in at most one of: pending (got MEMBER_ID_REQUIRED), awaiting join, awaiting sync;
//! - `static_members` maps each group.instance.id to exactly one current member id;
//! - a rebalance always ends: PreparingRebalance by all members rejoining, by the rebalance
//!   timeout (the longest member's) or by sessions expiring; CompletingRebalance by the leader's
//!   SyncGroup or by the sync timeout (members that never synced are removed); no input parks
//!   the group forever;
//! - protocol type, protocol metadata and assignments are opaque bytes, passed through.
//!
//! Not here: committed offsets' storage format and persistence (the coordinator writes records),
//! KIP-848 consumer groups.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::error::GroupError;
use crate::limits::{
    ASSIGNMENT_BYTES_MAX, MEMBERS_PER_GROUP_MAX, MEMBER_METADATA_BYTES_MAX,
    PENDING_MEMBERS_PER_GROUP_MAX, PROTOCOLS_PER_MEMBER_MAX, REBALANCE_TIMEOUT_MS_MAX,
};
use crate::records::{GroupValue, MemberValue, OffsetValue};

/// Kafka's classic group states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The name Kafka uses in ListGroups/DescribeGroups.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// Broker settings the state machine honours.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// group.min.session.timeout.ms
    pub min_session_timeout_ms: i32,
    /// group.max.session.timeout.ms
    pub max_session_timeout_ms: i32,
    /// group.initial.rebalance.delay.ms
    pub initial_rebalance_delay_ms: i32,
    /// group.max.size (capped by [`MEMBERS_PER_GROUP_MAX`])
    pub max_size: usize,
}

impl Default for GroupConfig {
    fn default() -> Self {
        Self {
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 3_000,
            max_size: MEMBERS_PER_GROUP_MAX,
        }
    }
}

/// One protocol a member supports, with its opaque metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protocol {
    pub name: String,
    pub metadata: Bytes,
}

/// JoinGroup, in the coordinator's words.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub group_id: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub protocol_type: String,
    pub protocols: Vec<Protocol>,
    pub client_id: String,
    pub client_host: String,
    /// JoinGroup v4+: an empty member id gets MEMBER_ID_REQUIRED first.
    pub require_known_member_id: bool,
}

/// A member as the leader sees it in the JoinGroup response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

/// JoinGroup's answer. With `error` set, only `member_id` may be meaningful (MEMBER_ID_REQUIRED).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinResponse {
    pub error: Option<GroupError>,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub skip_assignment: bool,
    pub member_id: String,
    pub members: Vec<JoinMember>,
}

impl JoinResponse {
    pub fn error(error: GroupError, member_id: &str) -> Self {
        Self {
            error: Some(error),
            generation_id: -1,
            member_id: member_id.to_string(),
            ..Default::default()
        }
    }
}

/// SyncGroup, in the coordinator's words.
#[derive(Debug, Clone)]
pub struct SyncRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignments: Vec<(String, Bytes)>,
}

/// SyncGroup's answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncResponse {
    pub error: Option<GroupError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResponse {
    pub fn error(error: GroupError) -> Self {
        Self {
            error: Some(error),
            ..Default::default()
        }
    }
}

/// What a JoinGroup or SyncGroup call leads to for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<R> {
    /// Answer now.
    Reply(R),
    /// The member is parked; an [`Effect`] for `member_id` will answer it.
    Await { member_id: String },
}

/// LeaveGroup's answer: one result per member, or a group-level error.
pub type LeaveResult = Result<Vec<Result<(), GroupError>>, GroupError>;

/// Consequences of a step, for the coordinator to carry out in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Answer the JoinGroup parked for `member_id`.
    JoinReply {
        member_id: String,
        response: JoinResponse,
    },
    /// Answer the SyncGroup parked for `member_id`.
    SyncReply {
        member_id: String,
        response: SyncResponse,
    },
    /// Write the group's metadata record ([`Group::metadata_value`]); replies in the same step are
    /// sent once it is durable.
    PersistGroup,
}

/// One member of a classic group.
#[derive(Debug, Clone)]
pub struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocols: Vec<Protocol>,
    pub assignment: Bytes,
    awaiting_join: bool,
    awaiting_sync: bool,
    /// Joined the current generation but has not sent its SyncGroup yet (Kafka's pending-sync
    /// members); removed when the sync timeout passes.
    pending_sync: bool,
    heartbeat_deadline_ms: i64,
}

impl Member {
    fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|p| p.name == protocol)
            .map(|p| p.metadata.clone())
            .unwrap_or_default()
    }

    fn same_protocols(&self, protocols: &[Protocol]) -> bool {
        self.protocols == protocols
    }
}

/// Kafka's InitialDelayedJoin: the first rebalance of an empty group waits
/// group.initial.rebalance.delay.ms for more members, extending while they keep arriving, up to
/// the rebalance timeout.
#[derive(Debug, Clone, Copy)]
struct InitialDelay {
    delay_ms: i64,
    remaining_ms: i64,
}

/// A committed offset as the coordinator keeps it.
pub type CommittedOffset = OffsetValue;

/// A classic group: membership, generation, and its committed offsets.
#[derive(Debug, Clone)]
pub struct Group {
    id: String,
    state: GroupState,
    state_timestamp_ms: i64,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    generation: i32,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    static_members: BTreeMap<String, String>,
    pending_members: BTreeMap<String, i64>,
    rebalance_deadline_ms: Option<i64>,
    /// After a join completes: members that have not sent SyncGroup by then are removed, so a
    /// leader that heartbeats but never assigns cannot park the group (Kafka's sync timeout =
    /// the rebalance timeout).
    sync_deadline_ms: Option<i64>,
    initial_delay: Option<InitialDelay>,
    new_member_added: bool,
    /// group.initial.rebalance.delay.ms, fixed when the group is created.
    initial_delay_config: i32,
    /// Committed offsets by (topic, partition).
    pub offsets: BTreeMap<(String, i32), CommittedOffset>,
}

impl Group {
    pub fn new(id: &str, config: &GroupConfig, now_ms: i64) -> Self {
        Self {
            id: id.to_string(),
            state: GroupState::Empty,
            state_timestamp_ms: now_ms,
            protocol_type: None,
            protocol_name: None,
            generation: 0,
            leader: None,
            members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            pending_members: BTreeMap::new(),
            rebalance_deadline_ms: None,
            sync_deadline_ms: None,
            initial_delay: None,
            new_member_added: false,
            initial_delay_config: config.initial_rebalance_delay_ms,
            offsets: BTreeMap::new(),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }
    pub fn state(&self) -> GroupState {
        self.state
    }
    pub fn generation(&self) -> i32 {
        self.generation
    }
    pub fn protocol_type(&self) -> Option<&str> {
        self.protocol_type.as_deref()
    }
    pub fn protocol_name(&self) -> Option<&str> {
        self.protocol_name.as_deref()
    }
    pub fn leader(&self) -> Option<&str> {
        self.leader.as_deref()
    }
    pub fn members(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }
    pub fn member_count(&self) -> usize {
        self.members.len()
    }
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.pending_members.is_empty()
    }

    fn set_state(&mut self, state: GroupState, now_ms: i64) {
        self.state = state;
        self.state_timestamp_ms = now_ms;
    }

    /// The metadata record written at `generation` did not become durable (Kafka's
    /// resetAndPropagateAssignmentError, then prepareRebalance): if the group is still in that
    /// generation with members, every assignment is forgotten and the group rebalances, so that
    /// no member keeps working with an assignment a restart would not know. The caller has
    /// already answered the replies that waited for the record.
    pub fn metadata_not_durable(&mut self, generation: i32, now_ms: i64) -> Vec<Effect> {
        if generation != self.generation {
            return Vec::new();
        }
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                for m in self.members.values_mut() {
                    m.assignment = Bytes::new();
                }
                self.prepare_rebalance(now_ms)
            }
            GroupState::Empty | GroupState::PreparingRebalance | GroupState::Dead => Vec::new(),
        }
    }

    /// Marks the group removed (DeleteGroups, expiry); later requests see COORDINATOR_NOT_AVAILABLE.
    pub fn mark_dead(&mut self, now_ms: i64) {
        self.set_state(GroupState::Dead, now_ms);
    }

    // ----- JoinGroup -----

    /// JoinGroup. `new_member_id` is used if the member needs an id (the coordinator makes it).
    pub fn join(
        &mut self,
        config: &GroupConfig,
        req: &JoinRequest,
        new_member_id: String,
        now_ms: i64,
    ) -> (Outcome<JoinResponse>, Vec<Effect>) {
        let mut effects = Vec::new();
        let outcome = match self.join_inner(config, req, new_member_id, now_ms, &mut effects) {
            Ok(o) => o,
            Err((e, member_id)) => Outcome::Reply(JoinResponse::error(e, &member_id)),
        };
        (outcome, effects)
    }

    fn join_inner(
        &mut self,
        config: &GroupConfig,
        req: &JoinRequest,
        new_member_id: String,
        now_ms: i64,
        effects: &mut Vec<Effect>,
    ) -> Result<Outcome<JoinResponse>, (GroupError, String)> {
        let fail = |e: GroupError| Err((e, req.member_id.clone()));
        if req.session_timeout_ms < config.min_session_timeout_ms
            || req.session_timeout_ms > config.max_session_timeout_ms
        {
            return fail(GroupError::InvalidSessionTimeout);
        }
        if req.protocols.len() > PROTOCOLS_PER_MEMBER_MAX
            || req
                .protocols
                .iter()
                .map(|p| p.metadata.len())
                .sum::<usize>()
                > MEMBER_METADATA_BYTES_MAX
        {
            return fail(GroupError::InvalidRequest(format!(
                "JoinGroup protocols exceed {PROTOCOLS_PER_MEMBER_MAX} entries or {MEMBER_METADATA_BYTES_MAX} bytes of metadata"
            )));
        }
        if self.state == GroupState::Dead {
            return fail(GroupError::CoordinatorNotAvailable);
        }
        if !self.supports_protocols(&req.protocol_type, &req.protocols) {
            return fail(GroupError::InconsistentGroupProtocol);
        }
        let is_known = !req.member_id.is_empty()
            && (self.members.contains_key(&req.member_id)
                || self.pending_members.contains_key(&req.member_id));
        let is_static_known = req
            .group_instance_id
            .as_ref()
            .is_some_and(|i| self.static_members.contains_key(i));
        let max_size = config.max_size.min(MEMBERS_PER_GROUP_MAX);
        if !is_known && !is_static_known && self.members.len() >= max_size {
            return fail(GroupError::GroupMaxSizeReached);
        }
        if req.member_id.is_empty() {
            self.join_new_member(req, new_member_id, now_ms, effects)
        } else {
            self.join_existing_member(req, now_ms, effects)
        }
    }

    fn join_new_member(
        &mut self,
        req: &JoinRequest,
        new_member_id: String,
        now_ms: i64,
        effects: &mut Vec<Effect>,
    ) -> Result<Outcome<JoinResponse>, (GroupError, String)> {
        if let Some(instance) = &req.group_instance_id {
            if let Some(old) = self.static_members.get(instance).cloned() {
                return self.replace_static_member(req, old, new_member_id, now_ms, effects);
            }
            return Ok(self.add_member_and_rebalance(req, new_member_id, now_ms, effects));
        }
        if req.require_known_member_id {
            if self.pending_members.len() >= PENDING_MEMBERS_PER_GROUP_MAX {
                return Err((GroupError::GroupMaxSizeReached, String::new()));
            }
            let deadline = now_ms + i64::from(req.session_timeout_ms);
            self.pending_members.insert(new_member_id.clone(), deadline);
            return Err((GroupError::MemberIdRequired, new_member_id));
        }
        Ok(self.add_member_and_rebalance(req, new_member_id, now_ms, effects))
    }

    fn join_existing_member(
        &mut self,
        req: &JoinRequest,
        now_ms: i64,
        effects: &mut Vec<Effect>,
    ) -> Result<Outcome<JoinResponse>, (GroupError, String)> {
        let member_id = req.member_id.clone();
        if self.pending_members.contains_key(&member_id) {
            return Ok(self.add_member_and_rebalance(req, member_id.clone(), now_ms, effects));
        }
        if let Err(e) = self.validate_member(&member_id, req.group_instance_id.as_deref()) {
            return Err((e, member_id));
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => Err((GroupError::UnknownMemberId, member_id)),
            GroupState::PreparingRebalance => {
                self.update_member(&member_id, req, now_ms);
                effects.extend(self.try_complete_join(now_ms));
                Ok(Outcome::Await { member_id })
            }
            GroupState::CompletingRebalance => {
                let same = self
                    .members
                    .get(&member_id)
                    .is_some_and(|m| m.same_protocols(&req.protocols));
                if same {
                    // The member lost our JoinGroup answer and asks again: same answer.
                    Ok(Outcome::Reply(self.join_response_for(&member_id)))
                } else {
                    self.update_member(&member_id, req, now_ms);
                    effects.extend(self.prepare_rebalance(now_ms));
                    Ok(Outcome::Await { member_id })
                }
            }
            GroupState::Stable => {
                let same = self
                    .members
                    .get(&member_id)
                    .is_some_and(|m| m.same_protocols(&req.protocols));
                if self.leader.as_deref() == Some(member_id.as_str()) || !same {
                    // The leader rejoining (e.g. metadata changed) or new protocols: rebalance.
                    self.update_member(&member_id, req, now_ms);
                    effects.extend(self.prepare_rebalance(now_ms));
                    Ok(Outcome::Await { member_id })
                } else {
                    let mut response = self.join_response_for(&member_id);
                    response.members.clear();
                    Ok(Outcome::Reply(response))
                }
            }
        }
    }

    /// A known group.instance.id joins with an empty member id: the new id replaces the old one,
    /// whose parked requests are fenced. In Stable with unchanged protocols there is no rebalance:
    /// the member gets the current generation and, via SyncGroup, its old assignment back.
    fn replace_static_member(
        &mut self,
        req: &JoinRequest,
        old_id: String,
        new_id: String,
        now_ms: i64,
        effects: &mut Vec<Effect>,
    ) -> Result<Outcome<JoinResponse>, (GroupError, String)> {
        if matches!(self.state, GroupState::Empty | GroupState::Dead) {
            return Err((GroupError::UnknownMemberId, String::new()));
        }
        let Some(mut member) = self.members.remove(&old_id) else {
            return Err((GroupError::UnknownMemberId, String::new()));
        };
        if member.awaiting_join {
            effects.push(Effect::JoinReply {
                member_id: old_id.clone(),
                response: JoinResponse::error(GroupError::FencedInstanceId, &old_id),
            });
        }
        if member.awaiting_sync {
            effects.push(Effect::SyncReply {
                member_id: old_id.clone(),
                response: SyncResponse::error(GroupError::FencedInstanceId),
            });
        }
        let old_leader = self.leader.clone().unwrap_or_default();
        let selected_before = self.select_protocol();
        member.member_id = new_id.clone();
        member.awaiting_join = false;
        member.awaiting_sync = false;
        member.client_id = req.client_id.clone();
        member.client_host = req.client_host.clone();
        self.members.insert(new_id.clone(), member);
        if let Some(instance) = &req.group_instance_id {
            self.static_members.insert(instance.clone(), new_id.clone());
        }
        if self.leader.as_deref() == Some(old_id.as_str()) {
            self.leader = Some(new_id.clone());
        }
        self.update_member(&new_id, req, now_ms);
        match self.state {
            GroupState::Stable if self.select_protocol() == selected_before => {
                if let Some(m) = self.members.get_mut(&new_id) {
                    m.awaiting_join = false;
                }
                effects.push(Effect::PersistGroup);
                // Kafka answers with the old leader id, so a returning leader acts as a follower
                // and the others' assignments stay as they are.
                Ok(Outcome::Reply(JoinResponse {
                    error: None,
                    generation_id: self.generation,
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol_name.clone(),
                    leader: old_leader,
                    skip_assignment: false,
                    member_id: new_id,
                    members: Vec::new(),
                }))
            }
            GroupState::Stable | GroupState::CompletingRebalance => {
                effects.extend(self.prepare_rebalance(now_ms));
                Ok(Outcome::Await { member_id: new_id })
            }
            _ => {
                effects.extend(self.try_complete_join(now_ms));
                Ok(Outcome::Await { member_id: new_id })
            }
        }
    }

    fn add_member_and_rebalance(
        &mut self,
        req: &JoinRequest,
        member_id: String,
        now_ms: i64,
        effects: &mut Vec<Effect>,
    ) -> Outcome<JoinResponse> {
        self.pending_members.remove(&member_id);
        if self.members.is_empty() {
            self.protocol_type = Some(req.protocol_type.clone());
        }
        let member = Member {
            member_id: member_id.clone(),
            group_instance_id: req.group_instance_id.clone(),
            client_id: req.client_id.clone(),
            client_host: req.client_host.clone(),
            session_timeout_ms: req.session_timeout_ms,
            rebalance_timeout_ms: clamp_rebalance_timeout(req),
            protocols: req.protocols.clone(),
            assignment: Bytes::new(),
            awaiting_join: true,
            awaiting_sync: false,
            pending_sync: false,
            heartbeat_deadline_ms: now_ms + i64::from(req.session_timeout_ms),
        };
        if let Some(instance) = &req.group_instance_id {
            self.static_members
                .insert(instance.clone(), member_id.clone());
        }
        self.members.insert(member_id.clone(), member);
        if self.leader.is_none() {
            self.leader = Some(member_id.clone());
        }
        // Only a brand-new group's first rebalance is stretched by arriving members (Kafka:
        // PreparingRebalance at generation 0).
        if self.state == GroupState::PreparingRebalance && self.generation == 0 {
            self.new_member_added = true;
        }
        match self.state {
            GroupState::PreparingRebalance => effects.extend(self.try_complete_join(now_ms)),
            _ => effects.extend(self.prepare_rebalance(now_ms)),
        }
        Outcome::Await { member_id }
    }

    fn update_member(&mut self, member_id: &str, req: &JoinRequest, now_ms: i64) {
        let rebalance_timeout_ms = clamp_rebalance_timeout(req);
        if let Some(m) = self.members.get_mut(member_id) {
            m.protocols = req.protocols.clone();
            m.session_timeout_ms = req.session_timeout_ms;
            m.rebalance_timeout_ms = rebalance_timeout_ms;
            m.awaiting_join = true;
            m.heartbeat_deadline_ms = now_ms + i64::from(req.session_timeout_ms);
        }
    }

    /// Empty group: any non-empty type and protocol list. Otherwise: the same type and at least
    /// one protocol every member supports.
    fn supports_protocols(&self, protocol_type: &str, protocols: &[Protocol]) -> bool {
        if protocol_type.is_empty() || protocols.is_empty() {
            return false;
        }
        if self.members.is_empty() {
            return true;
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|p| self.supported_by_all(&p.name))
    }

    fn supported_by_all(&self, name: &str) -> bool {
        self.members
            .values()
            .all(|m| m.protocols.iter().any(|p| p.name == name))
    }

    /// Each member votes for its most preferred protocol that all members support; most votes
    /// wins, ties go to the earlier candidate in the first member's preference order.
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let candidates: Vec<&str> = first
            .protocols
            .iter()
            .map(|p| p.name.as_str())
            .filter(|n| self.supported_by_all(n))
            .collect();
        let mut votes = vec![0usize; candidates.len()];
        for m in self.members.values() {
            if let Some(i) = m
                .protocols
                .iter()
                .find_map(|p| candidates.iter().position(|c| *c == p.name))
            {
                votes[i] += 1;
            }
        }
        let mut best: Option<usize> = None;
        for i in 0..candidates.len() {
            if best.is_none_or(|b| votes[i] > votes[b]) {
                best = Some(i);
            }
        }
        best.map(|i| candidates[i].to_string())
    }

    fn prepare_rebalance(&mut self, now_ms: i64) -> Vec<Effect> {
        let mut effects = Vec::new();
        self.sync_deadline_ms = None;
        for m in self.members.values_mut() {
            m.pending_sync = false;
        }
        if self.state == GroupState::CompletingRebalance {
            for m in self.members.values_mut() {
                m.assignment = Bytes::new();
                if m.awaiting_sync {
                    m.awaiting_sync = false;
                    effects.push(Effect::SyncReply {
                        member_id: m.member_id.clone(),
                        response: SyncResponse::error(GroupError::RebalanceInProgress),
                    });
                }
            }
        }
        let rebalance_timeout = self.max_rebalance_timeout_ms();
        let initial = i64::from(self.initial_delay_config);
        if self.state == GroupState::Empty && initial > 0 {
            let delay = initial.min(rebalance_timeout);
            self.initial_delay = Some(InitialDelay {
                delay_ms: initial,
                remaining_ms: (rebalance_timeout - delay).max(0),
            });
            self.new_member_added = false;
            self.rebalance_deadline_ms = Some(now_ms + delay);
        } else {
            self.initial_delay = None;
            self.rebalance_deadline_ms = Some(now_ms + rebalance_timeout);
        }
        self.set_state(GroupState::PreparingRebalance, now_ms);
        effects.extend(self.try_complete_join(now_ms));
        effects
    }

    fn max_rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| i64::from(m.rebalance_timeout_ms))
            .max()
            .unwrap_or(0)
    }

    fn try_complete_join(&mut self, now_ms: i64) -> Vec<Effect> {
        let all_joined =
            self.members.values().all(|m| m.awaiting_join) && self.pending_members.is_empty();
        if self.state == GroupState::PreparingRebalance
            && self.initial_delay.is_none()
            && all_joined
        {
            self.complete_join(now_ms)
        } else {
            Vec::new()
        }
    }

    /// Ends PreparingRebalance: dynamic members that did not rejoin are removed, the generation
    /// advances, the protocol is chosen, and every parked JoinGroup is answered.
    fn complete_join(&mut self, now_ms: i64) -> Vec<Effect> {
        let mut effects = Vec::new();
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| !m.awaiting_join && m.group_instance_id.is_none())
            .map(|m| m.member_id.clone())
            .collect();
        for id in gone {
            self.members.remove(&id);
        }
        self.rebalance_deadline_ms = None;
        self.initial_delay = None;
        self.new_member_added = false;
        self.generation = self.generation.wrapping_add(1).max(1);
        millrace_metrics::global().group_rebalances.inc();
        if self.members.is_empty() {
            self.protocol_name = None;
            self.leader = None;
            self.set_state(GroupState::Empty, now_ms);
            effects.push(Effect::PersistGroup);
            return effects;
        }
        self.protocol_name = self.select_protocol();
        let leader_ok = self
            .leader
            .as_ref()
            .is_some_and(|l| self.members.get(l).is_some_and(|m| m.awaiting_join));
        if !leader_ok {
            self.leader = self
                .members
                .values()
                .find(|m| m.awaiting_join)
                .or_else(|| self.members.values().next())
                .map(|m| m.member_id.clone());
        }
        self.set_state(GroupState::CompletingRebalance, now_ms);
        self.sync_deadline_ms = Some(now_ms + self.max_rebalance_timeout_ms());
        for m in self.members.values_mut() {
            m.pending_sync = true;
        }
        let joined: Vec<String> = self
            .members
            .values()
            .filter(|m| m.awaiting_join)
            .map(|m| m.member_id.clone())
            .collect();
        for id in joined {
            let response = self.join_response_for(&id);
            if let Some(m) = self.members.get_mut(&id) {
                m.awaiting_join = false;
                m.heartbeat_deadline_ms = now_ms + i64::from(m.session_timeout_ms);
            }
            effects.push(Effect::JoinReply {
                member_id: id,
                response,
            });
        }
        effects
    }

    /// The JoinGroup answer of the current generation: the leader gets every member's metadata.
    fn join_response_for(&self, member_id: &str) -> JoinResponse {
        let protocol = self.protocol_name.clone().unwrap_or_default();
        let is_leader = self.leader.as_deref() == Some(member_id);
        let members = if is_leader {
            self.members
                .values()
                .map(|m| JoinMember {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    metadata: m.metadata(&protocol),
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinResponse {
            error: None,
            generation_id: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            skip_assignment: false,
            member_id: member_id.to_string(),
            members,
        }
    }

    // ----- SyncGroup, Heartbeat, LeaveGroup -----

    /// Checks that `member_id` is a current member and, for static members, still owns its
    /// group.instance.id.
    fn validate_member(
        &self,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        if let Some(instance) = group_instance_id {
            match self.static_members.get(instance) {
                Some(current) if current != member_id => return Err(GroupError::FencedInstanceId),
                None => return Err(GroupError::UnknownMemberId),
                _ => {}
            }
        }
        if self.members.contains_key(member_id) {
            Ok(())
        } else {
            Err(GroupError::UnknownMemberId)
        }
    }

    pub fn sync(&mut self, req: &SyncRequest, now_ms: i64) -> (Outcome<SyncResponse>, Vec<Effect>) {
        let mut effects = Vec::new();
        let outcome = match self.sync_inner(req, now_ms, &mut effects) {
            Ok(o) => o,
            Err(e) => Outcome::Reply(SyncResponse::error(e)),
        };
        (outcome, effects)
    }

    fn sync_inner(
        &mut self,
        req: &SyncRequest,
        now_ms: i64,
        effects: &mut Vec<Effect>,
    ) -> Result<Outcome<SyncResponse>, GroupError> {
        if self.state == GroupState::Dead {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        self.validate_member(&req.member_id, req.group_instance_id.as_deref())?;
        if req.generation_id != self.generation {
            return Err(GroupError::IllegalGeneration);
        }
        if req
            .protocol_type
            .as_ref()
            .is_some_and(|t| Some(t) != self.protocol_type.as_ref())
            || req
                .protocol_name
                .as_ref()
                .is_some_and(|n| Some(n) != self.protocol_name.as_ref())
        {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        if matches!(
            self.state,
            GroupState::Stable | GroupState::CompletingRebalance
        ) {
            if let Some(m) = self.members.get_mut(&req.member_id) {
                m.pending_sync = false;
            }
            if self.members.values().all(|m| !m.pending_sync) {
                self.sync_deadline_ms = None;
            }
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => Err(GroupError::UnknownMemberId),
            GroupState::PreparingRebalance => Err(GroupError::RebalanceInProgress),
            GroupState::Stable => {
                let m = self
                    .members
                    .get_mut(&req.member_id)
                    .ok_or(GroupError::UnknownMemberId)?;
                m.heartbeat_deadline_ms = now_ms + i64::from(m.session_timeout_ms);
                let assignment = m.assignment.clone();
                Ok(Outcome::Reply(self.sync_response(assignment)))
            }
            GroupState::CompletingRebalance => {
                if let Some(m) = self.members.get_mut(&req.member_id) {
                    m.awaiting_sync = true;
                    m.heartbeat_deadline_ms = now_ms + i64::from(m.session_timeout_ms);
                }
                if self.leader.as_deref() == Some(req.member_id.as_str()) {
                    if req
                        .assignments
                        .iter()
                        .any(|(_, a)| a.len() > ASSIGNMENT_BYTES_MAX)
                    {
                        if let Some(m) = self.members.get_mut(&req.member_id) {
                            m.awaiting_sync = false;
                        }
                        effects.extend(self.prepare_rebalance(now_ms));
                        return Err(GroupError::InvalidRequest(format!(
                            "an assignment is larger than {ASSIGNMENT_BYTES_MAX} bytes"
                        )));
                    }
                    for m in self.members.values_mut() {
                        m.assignment = req
                            .assignments
                            .iter()
                            .find(|(id, _)| *id == m.member_id)
                            .map(|(_, a)| a.clone())
                            .unwrap_or_default();
                    }
                    self.set_state(GroupState::Stable, now_ms);
                    effects.push(Effect::PersistGroup);
                    let waiting: Vec<(String, Bytes)> = self
                        .members
                        .values()
                        .filter(|m| m.awaiting_sync)
                        .map(|m| (m.member_id.clone(), m.assignment.clone()))
                        .collect();
                    for (id, assignment) in waiting {
                        if let Some(m) = self.members.get_mut(&id) {
                            m.awaiting_sync = false;
                        }
                        effects.push(Effect::SyncReply {
                            member_id: id,
                            response: self.sync_response(assignment),
                        });
                    }
                }
                Ok(Outcome::Await {
                    member_id: req.member_id.clone(),
                })
            }
        }
    }

    fn sync_response(&self, assignment: Bytes) -> SyncResponse {
        SyncResponse {
            error: None,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            assignment,
        }
    }

    pub fn heartbeat(
        &mut self,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
        now_ms: i64,
    ) -> Result<(), GroupError> {
        match self.state {
            GroupState::Dead => return Err(GroupError::CoordinatorNotAvailable),
            GroupState::Empty => return Err(GroupError::UnknownMemberId),
            _ => {}
        }
        self.validate_member(member_id, group_instance_id)?;
        if generation_id != self.generation {
            return Err(GroupError::IllegalGeneration);
        }
        if let Some(m) = self.members.get_mut(member_id) {
            m.heartbeat_deadline_ms = now_ms + i64::from(m.session_timeout_ms);
        }
        if self.state == GroupState::PreparingRebalance {
            return Err(GroupError::RebalanceInProgress);
        }
        Ok(())
    }

    /// LeaveGroup for each (member id, instance id); one result per member, in order.
    pub fn leave(
        &mut self,
        leaving: &[(String, Option<String>)],
        now_ms: i64,
    ) -> (LeaveResult, Vec<Effect>) {
        let mut effects = Vec::new();
        if self.state == GroupState::Dead {
            return (Err(GroupError::CoordinatorNotAvailable), effects);
        }
        let mut results = Vec::with_capacity(leaving.len());
        for (member_id, instance) in leaving {
            let resolved = match instance {
                Some(instance) => match self.static_members.get(instance) {
                    None => Err(GroupError::UnknownMemberId),
                    Some(current) if !member_id.is_empty() && current != member_id => {
                        Err(GroupError::FencedInstanceId)
                    }
                    Some(current) => Ok(current.clone()),
                },
                None => Ok(member_id.clone()),
            };
            let result = resolved.and_then(|id| {
                if self.pending_members.remove(&id).is_some() {
                    effects.extend(self.try_complete_join(now_ms));
                    Ok(())
                } else if self.members.contains_key(&id) {
                    effects.extend(self.remove_member(&id, GroupError::UnknownMemberId, now_ms));
                    Ok(())
                } else {
                    Err(GroupError::UnknownMemberId)
                }
            });
            results.push(result);
        }
        (Ok(results), effects)
    }

    /// Removes a member (left or expired) and rebalances the rest.
    fn remove_member(&mut self, member_id: &str, parked: GroupError, now_ms: i64) -> Vec<Effect> {
        let mut effects = Vec::new();
        let Some(m) = self.members.remove(member_id) else {
            return effects;
        };
        if let Some(instance) = &m.group_instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                self.static_members.remove(instance);
            }
        }
        if m.awaiting_join {
            effects.push(Effect::JoinReply {
                member_id: member_id.to_string(),
                response: JoinResponse::error(parked.clone(), member_id),
            });
        }
        if m.awaiting_sync {
            effects.push(Effect::SyncReply {
                member_id: member_id.to_string(),
                response: SyncResponse::error(parked),
            });
        }
        if self.leader.as_deref() == Some(member_id) {
            self.leader = self
                .members
                .values()
                .find(|m| m.awaiting_join)
                .or_else(|| self.members.values().next())
                .map(|m| m.member_id.clone());
        }
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                effects.extend(self.prepare_rebalance(now_ms))
            }
            GroupState::PreparingRebalance => effects.extend(self.try_complete_join(now_ms)),
            _ => {}
        }
        effects
    }

    // ----- timers -----

    /// The earliest time [`Group::tick`] has something to do.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        let heartbeats = self
            .members
            .values()
            .filter(|m| !m.awaiting_join && !m.awaiting_sync)
            .map(|m| m.heartbeat_deadline_ms);
        heartbeats
            .chain(self.pending_members.values().copied())
            .chain(self.rebalance_deadline_ms)
            .chain(self.sync_deadline_ms)
            .min()
    }

    /// Expires sessions and pending members, and ends rebalances whose time is up.
    pub fn tick(&mut self, now_ms: i64) -> Vec<Effect> {
        let mut effects = Vec::new();
        let expired_pending: Vec<String> = self
            .pending_members
            .iter()
            .filter(|(_, &d)| d <= now_ms)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired_pending {
            self.pending_members.remove(&id);
            effects.extend(self.try_complete_join(now_ms));
        }
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| !m.awaiting_join && !m.awaiting_sync && m.heartbeat_deadline_ms <= now_ms)
            .map(|m| m.member_id.clone())
            .collect();
        for id in expired {
            effects.extend(self.remove_member(&id, GroupError::UnknownMemberId, now_ms));
        }
        if self.sync_deadline_ms.is_some_and(|d| d <= now_ms) {
            self.sync_deadline_ms = None;
            let unsynced: Vec<String> = self
                .members
                .values()
                .filter(|m| m.pending_sync)
                .map(|m| m.member_id.clone())
                .collect();
            for id in unsynced {
                effects.extend(self.remove_member(&id, GroupError::UnknownMemberId, now_ms));
            }
        }
        if self.state == GroupState::PreparingRebalance
            && self.rebalance_deadline_ms.is_some_and(|d| d <= now_ms)
        {
            match self.initial_delay {
                Some(delay) if self.new_member_added && delay.remaining_ms > 0 => {
                    let next = delay.delay_ms.min(delay.remaining_ms);
                    self.initial_delay = Some(InitialDelay {
                        delay_ms: delay.delay_ms,
                        remaining_ms: delay.remaining_ms - next,
                    });
                    self.new_member_added = false;
                    self.rebalance_deadline_ms = Some(now_ms + next);
                }
                _ => effects.extend(self.complete_join(now_ms)),
            }
        }
        effects
    }

    // ----- offsets -----

    /// Kafka's checks before an OffsetCommit (`ClassicGroup.validateOffsetCommit`): a generation
    /// < 0 commits only while the group is Empty (standalone consumers, admin clients); otherwise
    /// the member and generation must be current, and not during CompletingRebalance.
    pub fn validate_commit(
        &mut self,
        generation_id: i32,
        member_id: &str,
        group_instance_id: Option<&str>,
        now_ms: i64,
    ) -> Result<(), GroupError> {
        if self.state == GroupState::Dead {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        if generation_id < 0 && self.state == GroupState::Empty {
            // An admin client or a consumer without group management: allowed while Empty.
            return Ok(());
        }
        if generation_id >= 0 || !member_id.is_empty() || group_instance_id.is_some() {
            self.validate_member(member_id, group_instance_id)?;
            if generation_id != self.generation {
                return Err(GroupError::IllegalGeneration);
            }
        } else {
            return Err(GroupError::UnknownMemberId);
        }
        if self.state == GroupState::CompletingRebalance {
            return Err(GroupError::RebalanceInProgress);
        }
        if let Some(m) = self.members.get_mut(member_id) {
            m.heartbeat_deadline_ms = now_ms + i64::from(m.session_timeout_ms);
        }
        Ok(())
    }

    /// Offsets that have outlived `retention_ms`: only Empty groups lose offsets, counted from
    /// when the group became Empty (or from the commit, for groups that never had members).
    pub fn expired_offsets(&self, now_ms: i64, retention_ms: i64) -> Vec<(String, i32)> {
        self.expired_offsets_since(now_ms, retention_ms, None)
    }

    /// [`Group::expired_offsets`], with `empty_since_ms` = when the KIP-848 consumer group that
    /// shares this id became empty (its offsets count from then, or from their commit if later).
    pub fn expired_offsets_since(
        &self,
        now_ms: i64,
        retention_ms: i64,
        empty_since_ms: Option<i64>,
    ) -> Vec<(String, i32)> {
        if self.state != GroupState::Empty {
            return Vec::new();
        }
        self.offsets
            .iter()
            .filter(|(_, o)| {
                if o.expire_timestamp_ms >= 0 {
                    return o.expire_timestamp_ms <= now_ms;
                }
                let base = if let Some(since) = empty_since_ms {
                    since.max(o.commit_timestamp_ms)
                } else if self.protocol_type.is_some() {
                    self.state_timestamp_ms.max(o.commit_timestamp_ms)
                } else {
                    o.commit_timestamp_ms
                };
                base.saturating_add(retention_ms) <= now_ms
            })
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    /// Whether a consumer-protocol member subscribes to `topic` (OffsetDelete). Metadata that
    /// does not parse as ConsumerProtocolSubscription counts as subscribed, to be safe.
    pub fn is_subscribed(&self, topic: &str) -> bool {
        let Some(protocol) = &self.protocol_name else {
            return false;
        };
        self.members.values().any(|m| {
            consumer_subscription(&m.metadata(protocol))
                .is_none_or(|t| t.iter().any(|s| s == topic))
        })
    }

    // ----- persistence -----

    /// The GroupMetadataValue for the current state.
    pub fn metadata_value(&self) -> GroupValue {
        let protocol = self.protocol_name.clone().unwrap_or_default();
        GroupValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol_name.clone(),
            leader: self.leader.clone(),
            current_state_timestamp_ms: self.state_timestamp_ms,
            members: self
                .members
                .values()
                .map(|m| MemberValue {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    subscription: m.metadata(&protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// Restores membership from a replayed GroupMetadataValue: members (if any) must heartbeat
    /// within their session timeout from `now_ms`, as after a coordinator failover in Kafka.
    pub fn restore(&mut self, value: GroupValue, now_ms: i64) {
        self.protocol_type = (!value.protocol_type.is_empty()).then_some(value.protocol_type);
        self.generation = value.generation;
        self.protocol_name = value.protocol.clone();
        self.leader = value.leader;
        self.members.clear();
        self.static_members.clear();
        self.pending_members.clear();
        self.rebalance_deadline_ms = None;
        self.initial_delay = None;
        let protocol = value.protocol.unwrap_or_default();
        for m in value.members {
            if let Some(instance) = &m.group_instance_id {
                self.static_members
                    .insert(instance.clone(), m.member_id.clone());
            }
            self.members.insert(
                m.member_id.clone(),
                Member {
                    member_id: m.member_id,
                    group_instance_id: m.group_instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout_ms: m.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    protocols: vec![Protocol {
                        name: protocol.clone(),
                        metadata: m.subscription,
                    }],
                    assignment: m.assignment,
                    awaiting_join: false,
                    awaiting_sync: false,
                    pending_sync: false,
                    heartbeat_deadline_ms: now_ms + i64::from(m.session_timeout_ms),
                },
            );
        }
        let state = if self.members.is_empty() {
            GroupState::Empty
        } else {
            GroupState::Stable
        };
        self.state = state;
        self.state_timestamp_ms = if value.current_state_timestamp_ms >= 0 {
            value.current_state_timestamp_ms
        } else {
            now_ms
        };
    }
}

fn clamp_rebalance_timeout(req: &JoinRequest) -> i32 {
    // JoinGroup v0 has no rebalance timeout; Kafka uses the session timeout then.
    let t = if req.rebalance_timeout_ms <= 0 {
        req.session_timeout_ms
    } else {
        req.rebalance_timeout_ms
    };
    t.min(REBALANCE_TIMEOUT_MS_MAX)
}

/// The topics of a ConsumerProtocolSubscription (i16 version, then an array of i16 strings), or
/// `None` if the bytes are not one.
fn consumer_subscription(metadata: &[u8]) -> Option<Vec<String>> {
    let mut r = metadata;
    let mut take = |n: usize| -> Option<&[u8]> {
        if n > r.len() {
            return None;
        }
        let (h, t) = r.split_at(n);
        r = t;
        Some(h)
    };
    let _version = take(2)?;
    let count = i32::from_be_bytes(take(4)?.try_into().ok()?);
    let mut topics = Vec::new();
    for _ in 0..count.clamp(0, 100_000) {
        let len = i16::from_be_bytes(take(2)?.try_into().ok()?);
        let s = take(usize::try_from(len).ok()?)?;
        topics.push(String::from_utf8(s.to_vec()).ok()?);
    }
    Some(topics)
}

#[cfg(test)]
mod tests {
    //! Steps the state machine by hand: no runtime, no clock.
    use super::*;

    fn config() -> GroupConfig {
        GroupConfig {
            initial_rebalance_delay_ms: 0,
            ..GroupConfig::default()
        }
    }

    fn join_req(member_id: &str, protocols: &[(&str, &[u8])]) -> JoinRequest {
        JoinRequest {
            group_id: "g".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            member_id: member_id.into(),
            group_instance_id: None,
            protocol_type: "consumer".into(),
            protocols: protocols
                .iter()
                .map(|(n, m)| Protocol {
                    name: n.to_string(),
                    metadata: Bytes::copy_from_slice(m),
                })
                .collect(),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            require_known_member_id: true,
        }
    }

    fn sync_req(member_id: &str, generation: i32, assignments: &[(&str, &[u8])]) -> SyncRequest {
        SyncRequest {
            group_id: "g".into(),
            generation_id: generation,
            member_id: member_id.into(),
            group_instance_id: None,
            protocol_type: None,
            protocol_name: None,
            assignments: assignments
                .iter()
                .map(|(m, a)| (m.to_string(), Bytes::copy_from_slice(a)))
                .collect(),
        }
    }

    fn join_replies(effects: &[Effect]) -> Vec<(String, JoinResponse)> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::JoinReply {
                    member_id,
                    response,
                } => Some((member_id.clone(), response.clone())),
                _ => None,
            })
            .collect()
    }

    fn sync_replies(effects: &[Effect]) -> Vec<(String, SyncResponse)> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::SyncReply {
                    member_id,
                    response,
                } => Some((member_id.clone(), response.clone())),
                _ => None,
            })
            .collect()
    }

    /// The v4+ handshake: MEMBER_ID_REQUIRED with an id, then the real join.
    fn join_with_handshake(
        g: &mut Group,
        id: &str,
        protocols: &[(&str, &[u8])],
        now: i64,
    ) -> (Outcome<JoinResponse>, Vec<Effect>) {
        let (outcome, effects) = g.join(&config(), &join_req("", protocols), id.into(), now);
        assert!(effects.is_empty());
        assert!(matches!(
            &outcome,
            Outcome::Reply(JoinResponse { error: Some(GroupError::MemberIdRequired), member_id, .. }) if member_id == id
        ));
        g.join(&config(), &join_req(id, protocols), "unused".into(), now)
    }

    /// Two members joined and synced: Stable at generation 1, m1 leads with "range".
    fn stable_pair() -> Group {
        let mut g = Group::new("g", &config(), 0);
        let (o1, e1) = join_with_handshake(&mut g, "m1", &[("range", b"r1")], 0);
        assert_eq!(
            o1,
            Outcome::Await {
                member_id: "m1".into()
            }
        );
        // m1 alone would complete at once; m2's pending handshake holds the rebalance open.
        let replies = join_replies(&e1);
        assert_eq!(replies.len(), 1);
        assert_eq!(g.generation(), 1);
        let (o2, _) = join_with_handshake(&mut g, "m2", &[("range", b"r2")], 1);
        assert_eq!(
            o2,
            Outcome::Await {
                member_id: "m2".into()
            }
        );
        assert_eq!(g.state(), GroupState::PreparingRebalance);
        // m1 learns of the rebalance by heartbeat and rejoins; the join completes.
        assert_eq!(
            g.heartbeat("m1", None, 1, 2),
            Err(GroupError::RebalanceInProgress)
        );
        let (o1, e1) = g.join(
            &config(),
            &join_req("m1", &[("range", b"r1")]),
            "x".into(),
            3,
        );
        assert_eq!(
            o1,
            Outcome::Await {
                member_id: "m1".into()
            }
        );
        let replies = join_replies(&e1);
        assert_eq!(replies.len(), 2);
        assert_eq!(g.state(), GroupState::CompletingRebalance);
        assert_eq!(g.generation(), 2);
        let leader = replies
            .iter()
            .find(|(id, _)| id == "m1")
            .map(|(_, r)| r.clone());
        let follower = replies
            .iter()
            .find(|(id, _)| id == "m2")
            .map(|(_, r)| r.clone());
        let (leader, follower) = (leader.expect("m1 answered"), follower.expect("m2 answered"));
        assert_eq!(leader.leader, "m1");
        assert_eq!(leader.protocol_name.as_deref(), Some("range"));
        assert_eq!(leader.members.len(), 2, "the leader sees every member");
        assert!(follower.members.is_empty());
        // Follower syncs first and waits; the leader's sync answers both.
        let (o, e) = g.sync(&sync_req("m2", 2, &[]), 4);
        assert_eq!(
            o,
            Outcome::Await {
                member_id: "m2".into()
            }
        );
        assert!(e.is_empty());
        let (o, e) = g.sync(&sync_req("m1", 2, &[("m1", b"A1"), ("m2", b"A2")]), 5);
        assert_eq!(
            o,
            Outcome::Await {
                member_id: "m1".into()
            }
        );
        assert!(e.contains(&Effect::PersistGroup));
        let syncs = sync_replies(&e);
        assert_eq!(syncs.len(), 2);
        assert!(syncs
            .iter()
            .any(|(id, r)| id == "m2" && r.assignment == Bytes::from_static(b"A2")));
        assert_eq!(g.state(), GroupState::Stable);
        g
    }

    #[test]
    fn two_members_join_sync_and_become_stable() {
        let g = stable_pair();
        assert_eq!(g.member_count(), 2);
    }

    #[test]
    fn metadata_not_durable_returns_the_group_to_rebalancing() {
        let mut g = stable_pair();
        let generation = g.generation();
        // A stale generation changes nothing.
        assert!(g.metadata_not_durable(generation - 1, 10).is_empty());
        assert_eq!(g.state(), GroupState::Stable);
        g.metadata_not_durable(generation, 10);
        assert_eq!(g.state(), GroupState::PreparingRebalance);
        assert!(g.members().all(|m| m.assignment.is_empty()));
        assert_eq!(
            g.heartbeat("m1", None, generation, 11),
            Err(GroupError::RebalanceInProgress)
        );
        // Idempotent: a second report for the same generation changes nothing more.
        assert!(g.metadata_not_durable(generation, 12).is_empty());
        assert_eq!(g.state(), GroupState::PreparingRebalance);
    }

    #[test]
    fn heartbeat_and_commit_errors_are_kafkas() {
        let mut g = stable_pair();
        assert_eq!(g.heartbeat("m1", None, 2, 10), Ok(()));
        assert_eq!(
            g.heartbeat("m1", None, 1, 10),
            Err(GroupError::IllegalGeneration)
        );
        assert_eq!(
            g.heartbeat("zz", None, 2, 10),
            Err(GroupError::UnknownMemberId)
        );
        assert_eq!(g.validate_commit(2, "m2", None, 10), Ok(()));
        assert_eq!(
            g.validate_commit(1, "m2", None, 10),
            Err(GroupError::IllegalGeneration)
        );
        assert_eq!(
            g.validate_commit(-1, "", None, 10),
            Err(GroupError::UnknownMemberId)
        );
        let (o, _) = g.sync(&sync_req("m1", 1, &[]), 10);
        assert_eq!(
            o,
            Outcome::Reply(SyncResponse::error(GroupError::IllegalGeneration))
        );
        let mut standalone = Group::new("s", &config(), 0);
        assert_eq!(standalone.validate_commit(-1, "", None, 0), Ok(()));
    }

    #[test]
    fn bad_joins_get_kafkas_answer() {
        let mut g = stable_pair();
        let mut req = join_req("", &[("range", b"")]);
        req.session_timeout_ms = 10;
        let (o, _) = g.join(&config(), &req, "n".into(), 10);
        assert!(matches!(
            o,
            Outcome::Reply(JoinResponse {
                error: Some(GroupError::InvalidSessionTimeout),
                ..
            })
        ));
        let mut req = join_req("", &[("range", b"")]);
        req.protocol_type = "connect".into();
        let (o, _) = g.join(&config(), &req, "n".into(), 10);
        assert!(matches!(
            o,
            Outcome::Reply(JoinResponse {
                error: Some(GroupError::InconsistentGroupProtocol),
                ..
            })
        ));
        let (o, _) = g.join(&config(), &join_req("", &[("sticky", b"")]), "n".into(), 10);
        assert!(matches!(
            o,
            Outcome::Reply(JoinResponse {
                error: Some(GroupError::InconsistentGroupProtocol),
                ..
            })
        ));
        let (o, _) = g.join(
            &config(),
            &join_req("ghost", &[("range", b"")]),
            "n".into(),
            10,
        );
        assert!(matches!(
            o,
            Outcome::Reply(JoinResponse {
                error: Some(GroupError::UnknownMemberId),
                ..
            })
        ));
        let big = vec![0u8; MEMBER_METADATA_BYTES_MAX + 1];
        let (o, _) = g.join(&config(), &join_req("", &[("range", &big)]), "n".into(), 10);
        assert!(matches!(
            o,
            Outcome::Reply(JoinResponse {
                error: Some(GroupError::InvalidRequest(_)),
                ..
            })
        ));
        let full = GroupConfig {
            max_size: 2,
            ..config()
        };
        let (o, _) = g.join(&full, &join_req("", &[("range", b"")]), "n".into(), 10);
        assert!(matches!(
            o,
            Outcome::Reply(JoinResponse {
                error: Some(GroupError::GroupMaxSizeReached),
                ..
            })
        ));
        assert_eq!(
            g.state(),
            GroupState::Stable,
            "refused joins leave the group alone"
        );
    }

    #[test]
    fn protocol_is_chosen_by_votes_among_shared_protocols() {
        let mut g = Group::new(
            "g",
            &GroupConfig {
                initial_rebalance_delay_ms: 100,
                ..config()
            },
            0,
        );
        for (id, protocols) in [
            ("a", vec![("roundrobin", &b""[..]), ("range", b"")]),
            ("b", vec![("range", b""), ("roundrobin", b"")]),
            (
                "c",
                vec![("range", b""), ("sticky", b""), ("roundrobin", b"")],
            ),
        ] {
            let mut r = join_req("", &protocols);
            r.require_known_member_id = false;
            let (o, _) = g.join(&config(), &r, id.into(), 0);
            assert!(matches!(o, Outcome::Await { .. }));
        }
        // The members arrived during the initial delay, so it is extended once.
        assert!(g.tick(100).is_empty());
        let replies = join_replies(&g.tick(200));
        assert_eq!(replies.len(), 3);
        assert_eq!(g.protocol_name(), Some("range"));
    }

    #[test]
    fn sessions_expire_and_rebalances_end_without_the_missing() {
        let mut g = stable_pair();
        // m2 stops heartbeating; m1 keeps going.
        assert_eq!(g.heartbeat("m1", None, 2, 9_000), Ok(()));
        let effects = g.tick(10_005);
        assert!(effects.is_empty());
        assert_eq!(g.state(), GroupState::PreparingRebalance);
        assert_eq!(g.member_count(), 1);
        // m1 rejoins alone; the rebalance completes with it.
        let (_, e) = g.join(
            &config(),
            &join_req("m1", &[("range", b"r1")]),
            "x".into(),
            10_010,
        );
        assert_eq!(join_replies(&e).len(), 1);
        assert_eq!(g.generation(), 3);

        // A member that does not rejoin within the rebalance timeout is dropped.
        let mut g = stable_pair();
        let (_, e) = g.join(
            &config(),
            &join_req("m1", &[("range", b"new")]),
            "x".into(),
            100,
        );
        assert!(e.is_empty());
        assert_eq!(g.state(), GroupState::PreparingRebalance);
        assert!(g.next_deadline_ms().is_some_and(|d| d <= 100 + 30_000));
        let e = g.tick(100 + 30_000);
        let replies = join_replies(&e);
        assert_eq!(replies.len(), 1);
        assert_eq!(g.member_count(), 1);
        assert_eq!(g.state(), GroupState::CompletingRebalance);
    }

    #[test]
    fn leader_vanishing_in_completing_rebalance_is_not_stuck() {
        let mut g = Group::new("g", &config(), 0);
        join_with_handshake(&mut g, "m1", &[("range", b"")], 0);
        join_with_handshake(&mut g, "m2", &[("range", b"")], 0);
        g.join(&config(), &join_req("m1", &[("range", b"")]), "x".into(), 0);
        assert_eq!(g.state(), GroupState::CompletingRebalance);
        let leader = g.leader().map(str::to_string).expect("leader");
        let follower = if leader == "m1" { "m2" } else { "m1" };
        let (o, _) = g.sync(&sync_req(follower, g.generation(), &[]), 1);
        assert!(matches!(o, Outcome::Await { .. }));
        // The leader never syncs and its session runs out: the follower is told to rejoin.
        let e = g.tick(20_000);
        let syncs = sync_replies(&e);
        assert_eq!(syncs.len(), 1);
        assert_eq!(syncs[0].1.error, Some(GroupError::RebalanceInProgress));
    }

    #[test]
    fn members_that_never_sync_are_removed_after_the_rebalance_timeout() {
        let mut g = Group::new("g", &config(), 0);
        join_with_handshake(&mut g, "m1", &[("range", b"")], 0);
        join_with_handshake(&mut g, "m2", &[("range", b"")], 0);
        g.join(&config(), &join_req("m1", &[("range", b"")]), "x".into(), 0);
        assert_eq!(g.state(), GroupState::CompletingRebalance);
        let generation = g.generation();
        let leader = g.leader().map(str::to_string).expect("leader");
        let follower = if leader == "m1" { "m2" } else { "m1" };
        let (o, _) = g.sync(&sync_req(follower, generation, &[]), 1);
        assert!(matches!(o, Outcome::Await { .. }));
        // The leader keeps heartbeating but never sends SyncGroup.
        for t in (5_000..30_000).step_by(5_000) {
            assert_eq!(g.heartbeat(&leader, None, generation, t), Ok(()));
            assert!(g.tick(t).is_empty());
        }
        let e = g.tick(30_000);
        assert_eq!(g.member_count(), 1, "the leader that never synced is gone");
        let syncs = sync_replies(&e);
        assert_eq!(syncs.len(), 1);
        assert_eq!(syncs[0].1.error, Some(GroupError::RebalanceInProgress));
        assert_eq!(g.state(), GroupState::PreparingRebalance);
    }

    #[test]
    fn leaving_last_member_empties_the_group() {
        let mut g = stable_pair();
        let (r, _) = g.leave(&[("m1".into(), None), ("nobody".into(), None)], 10);
        assert_eq!(r, Ok(vec![Ok(()), Err(GroupError::UnknownMemberId)]));
        assert_eq!(g.state(), GroupState::PreparingRebalance);
        let (r, e) = g.leave(&[("m2".into(), None)], 11);
        assert_eq!(r, Ok(vec![Ok(())]));
        assert!(e.contains(&Effect::PersistGroup));
        assert_eq!(g.state(), GroupState::Empty);
        assert_eq!(
            g.heartbeat("m2", None, 3, 12),
            Err(GroupError::UnknownMemberId)
        );
        assert_eq!(g.validate_commit(-1, "", None, 12), Ok(()));
    }

    #[test]
    fn static_member_rejoins_without_rebalance_and_fences_the_old_id() {
        let mut g = Group::new("g", &config(), 0);
        let statics = |id: &str| {
            let mut r = join_req("", &[("range", b"s")]);
            r.group_instance_id = Some(id.to_string());
            r
        };
        let (o, _) = g.join(&config(), &statics("a"), "a-1".into(), 0);
        assert_eq!(
            o,
            Outcome::Await {
                member_id: "a-1".into()
            }
        );
        let (_, e) = g.join(&config(), &statics("b"), "b-1".into(), 0);
        assert!(e.is_empty() || !join_replies(&e).is_empty());
        if g.state() == GroupState::PreparingRebalance {
            let mut r = statics("a");
            r.member_id = "a-1".into();
            g.join(&config(), &r, "x".into(), 1);
        }
        assert_eq!(g.state(), GroupState::CompletingRebalance);
        let generation = g.generation();
        let leader = g.leader().map(str::to_string).expect("leader");
        g.sync(
            &sync_req(&leader, generation, &[("a-1", b"PA"), ("b-1", b"PB")]),
            2,
        );
        let other = if leader == "a-1" { "b-1" } else { "a-1" };
        g.sync(&sync_req(other, generation, &[]), 2);
        assert_eq!(g.state(), GroupState::Stable);

        // a restarts: same instance id, empty member id, same protocols.
        let (o, e) = g.join(&config(), &statics("a"), "a-2".into(), 5);
        let Outcome::Reply(r) = o else {
            panic!("expected an immediate answer")
        };
        assert_eq!(
            (r.error, r.generation_id, r.member_id.as_str()),
            (None, generation, "a-2")
        );
        assert!(r.members.is_empty());
        assert_ne!(r.leader, "a-2", "a returning leader must act as a follower");
        assert_eq!(e, vec![Effect::PersistGroup]);
        assert_eq!(g.state(), GroupState::Stable);
        let mut s = sync_req("a-2", generation, &[]);
        s.group_instance_id = Some("a".into());
        let (o, _) = g.sync(&s, 6);
        assert!(
            matches!(o, Outcome::Reply(SyncResponse { error: None, ref assignment, .. }) if assignment == &Bytes::from_static(b"PA"))
        );
        assert_eq!(
            g.heartbeat("a-1", Some("a"), generation, 7),
            Err(GroupError::FencedInstanceId)
        );
        assert_eq!(g.heartbeat("b-1", None, generation, 7), Ok(()));
    }

    #[test]
    fn initial_delay_waits_for_more_members_then_completes() {
        let cfg = GroupConfig {
            initial_rebalance_delay_ms: 3_000,
            ..config()
        };
        let mut g = Group::new("g", &cfg, 0);
        let mut r = join_req("", &[("range", b"")]);
        r.require_known_member_id = false;
        let (_, e) = g.join(&cfg, &r, "a".into(), 0);
        assert!(e.is_empty());
        let (_, e) = g.join(&cfg, &r, "b".into(), 2_000);
        assert!(e.is_empty());
        assert!(g.tick(2_999).is_empty());
        // b arrived during the delay: it is extended once more.
        assert!(g.tick(3_000).is_empty());
        assert_eq!(g.state(), GroupState::PreparingRebalance);
        let e = g.tick(6_000);
        assert_eq!(join_replies(&e).len(), 2);
        assert_eq!(g.state(), GroupState::CompletingRebalance);
    }

    #[test]
    fn oversized_assignment_rebalances_instead_of_sticking() {
        let mut g = Group::new("g", &config(), 0);
        join_with_handshake(&mut g, "m1", &[("range", b"")], 0);
        assert_eq!(g.state(), GroupState::CompletingRebalance);
        let big = vec![0u8; ASSIGNMENT_BYTES_MAX + 1];
        let (o, _) = g.sync(&sync_req("m1", 1, &[("m1", &big)]), 1);
        assert!(matches!(
            o,
            Outcome::Reply(SyncResponse {
                error: Some(GroupError::InvalidRequest(_)),
                ..
            })
        ));
        assert_eq!(g.state(), GroupState::PreparingRebalance);
    }

    #[test]
    fn offsets_expire_only_for_empty_groups() {
        let mut g = stable_pair();
        let offset = |ts| CommittedOffset {
            offset: 1,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: ts,
            expire_timestamp_ms: -1,
        };
        g.offsets.insert(("t".into(), 0), offset(0));
        assert!(g.expired_offsets(1_000_000, 10).is_empty());
        let (left, _) = g.leave(&[("m1".into(), None), ("m2".into(), None)], 100);
        assert_eq!(left, Ok(vec![Ok(()), Ok(())]));
        assert_eq!(g.state(), GroupState::Empty);
        assert!(g.expired_offsets(105, 10).is_empty());
        assert_eq!(g.expired_offsets(110, 10), vec![("t".to_string(), 0)]);
    }

    #[test]
    fn consumer_group_offsets_count_from_when_it_became_empty() {
        // The classic half of a KIP-848 group never had members: without the consumer group's
        // time, an old commit would expire at once.
        let mut g = Group::new("g", &config(), 0);
        g.offsets.insert(
            ("t".into(), 0),
            CommittedOffset {
                offset: 1,
                leader_epoch: -1,
                metadata: String::new(),
                commit_timestamp_ms: 0,
                expire_timestamp_ms: -1,
            },
        );
        assert_eq!(g.expired_offsets(100, 10).len(), 1);
        assert!(g.expired_offsets_since(105, 10, Some(100)).is_empty());
        assert_eq!(g.expired_offsets_since(110, 10, Some(100)).len(), 1);
    }

    #[test]
    fn metadata_record_restores_membership() {
        let g = stable_pair();
        let value = g.metadata_value();
        let mut restored = Group::new("g", &config(), 0);
        restored.restore(value.clone(), 1_000);
        assert_eq!(restored.state(), GroupState::Stable);
        assert_eq!(restored.generation(), g.generation());
        assert_eq!(restored.metadata_value(), value);
        assert_eq!(
            restored.heartbeat("m1", None, g.generation(), 1_001),
            Ok(())
        );
    }

    #[test]
    fn consumer_subscription_parses_topics() {
        let mut b = vec![0u8, 1, 0, 0, 0, 2];
        for t in ["a", "bc"] {
            b.extend_from_slice(&(t.len() as i16).to_be_bytes());
            b.extend_from_slice(t.as_bytes());
        }
        assert_eq!(
            consumer_subscription(&b),
            Some(vec!["a".into(), "bc".into()])
        );
        assert_eq!(consumer_subscription(&b[..5]), None);
    }
}
