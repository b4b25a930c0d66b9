//! One KIP-932 share group's membership state machine (Kafka's `ShareGroup`, `ShareGroupMember`,
//! the share parts of `GroupMetadataManager` and `ShareGroupAssignmentBuilder`): members join,
//! stay and leave by ShareGroupHeartbeat alone; the coordinator computes the target assignment
//! with the `simple` assignor ([`crate::share_assignor`]), where a partition may go to several
//! members, and each member moves to its target at once.
//!
//! Epochs, as in a consumer group: the **group epoch** moves when a member joins or leaves, a
//! subscription changes, or a subscribed topic appears, goes or gains partitions; the
//! **assignment epoch** is the group epoch the target was computed at; each member's **member
//! epoch** is the assignment epoch of the target it was last given. There is no revocation
//! phase (records are acquired one by one, so two members on a partition are harmless): a member
//! jumps to its target epoch and partitions on its next heartbeat, and the group is only ever
//! `Empty` or `Stable`.
//!
//! Member ids are made by the client (a UUID, kept for the client's lifetime). Epoch 0 joins,
//! or rejoins a member the client lost track of (it gets its current epoch and full assignment);
//! -1 leaves; any other epoch must be the member's, or its previous one (the response that carried
//! the bump may have been lost). Members that send no heartbeat for `share.session.timeout.ms`
//! are removed ([`ShareGroup::tick`]).
//!
//! Share-partition initialization: Kafka initializes the share state of newly subscribed
//! partitions asynchronously and assigns them a heartbeat later. Millrace records them as
//! initialized when the target is computed and assigns them at once (clients accept either);
//! the group keeps which partitions have share state ([`ShareGroup::initialized_partitions`]) in
//! the ShareGroupStatePartitionMetadata record, so that deleting the group can drop that state.
//!
//! It is pure, like the other group state machines: every call takes `now_ms`; the coordinator
//! owns locks and timers. Persistence: every step records what it changed
//! ([`ShareGroup::take_records`]) as Kafka's share group records (`records.rs`); a new coordinator
//! rebuilds the group from them ([`ShareGroupRecords`]), members keep their epochs, and each
//! member's session starts afresh at load.
//!
//! Not here: committed offsets (share groups have none: their progress is the share-partition
//! state, which another crate owns), the wire format, locks.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::assignor::{Assignment, AssignorMember};
use crate::consumer_group::{topics_hash, TopicInfo, TopicsView};
use crate::error::GroupError;
use crate::limits::{MEMBERS_PER_GROUP_MAX, MEMBER_METADATA_BYTES_MAX};
use crate::records::{
    RecordKey, RecordValue, ShareCurrentValue, ShareMemberValue, SharePartitionsInfo,
    ShareStatePartitionsValue, TopicPartitions,
};
use crate::share_assignor::{self, SIMPLE_ASSIGNOR_NAME};

/// The member epoch of a heartbeat that joins.
pub const SHARE_JOIN_EPOCH: i32 = 0;
/// The member epoch of a heartbeat that leaves.
pub const SHARE_LEAVE_EPOCH: i32 = -1;

/// Longest member id a share group accepts (characters): a Java client's UUID is 36,
/// librdkafka's base64 UUID 22. Kafka's `KafkaApis.isMemberIdValid`; enforced in the front end
/// (INVALID_REQUEST) and again in [`ShareGroup::heartbeat`].
pub const SHARE_MEMBER_ID_CHARS_MAX: usize = 36;

/// The only member state of a share group member (Kafka's `MemberState.STABLE`).
const MEMBER_STATE_STABLE: i8 = 0;

/// Kafka's share group states (ListGroups, ShareGroupDescribe).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareGroupState {
    Empty,
    Stable,
}

impl ShareGroupState {
    pub fn name(self) -> &'static str {
        match self {
            ShareGroupState::Empty => "Empty",
            ShareGroupState::Stable => "Stable",
        }
    }
}

/// Broker settings of share groups (`group.share.*`).
#[derive(Debug, Clone)]
pub struct ShareGroupConfig {
    /// group.share.session.timeout.ms
    pub session_timeout_ms: i32,
    /// group.share.heartbeat.interval.ms
    pub heartbeat_interval_ms: i32,
    /// group.share.max.size (capped by [`MEMBERS_PER_GROUP_MAX`])
    pub max_size: usize,
}

impl Default for ShareGroupConfig {
    fn default() -> Self {
        Self {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            max_size: 200,
        }
    }
}

/// ShareGroupHeartbeat, in the coordinator's words.
#[derive(Debug, Clone, Default)]
pub struct ShareHeartbeatRequest {
    pub group_id: String,
    pub member_id: String,
    pub member_epoch: i32,
    /// `None` = unchanged.
    pub rack_id: Option<String>,
    /// `None` = unchanged.
    pub subscribed_topic_names: Option<Vec<String>>,
    pub client_id: String,
    pub client_host: String,
    /// The group's `share.session.timeout.ms` / `share.heartbeat.interval.ms`.
    pub timeouts: crate::consumer_group::GroupTimeouts,
}

/// ShareGroupHeartbeat's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareHeartbeatResponse {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The member's assignment, when it must hear it.
    pub assignment: Option<Assignment>,
}

/// One member of a share group.
#[derive(Debug, Clone)]
pub struct ShareMember {
    pub member_id: String,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: BTreeSet<String>,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    /// The partitions it is assigned (its target, reached at once).
    pub assigned: Assignment,
    session_deadline_ms: i64,
    /// The assignment last sent to it.
    last_sent: Option<Assignment>,
}

impl ShareMember {
    fn metadata_value(&self) -> ShareMemberValue {
        ShareMemberValue {
            rack_id: self.rack_id.clone(),
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
            subscribed_topic_names: self.subscribed_topic_names.iter().cloned().collect(),
        }
    }

    fn current_value(&self) -> ShareCurrentValue {
        ShareCurrentValue {
            member_epoch: self.member_epoch,
            previous_member_epoch: self.previous_member_epoch,
            state: MEMBER_STATE_STABLE,
            assigned: to_topic_partitions(&self.assigned),
        }
    }
}

/// ShareGroupDescribe's view of a group.
#[derive(Debug, Clone)]
pub struct ShareGroupDescription {
    pub group_id: String,
    pub state: ShareGroupState,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: &'static str,
    pub members: Vec<ShareMember>,
}

/// The share partitions of a group that have share state: topic id → (topic name, partitions).
pub type InitializedPartitions = BTreeMap<Uuid, (String, BTreeSet<i32>)>;

/// A record of a share group: key and value (`None` = tombstone).
pub type ShareGroupRecord = (RecordKey, Option<RecordValue>);

/// What a step changed, to be written as records.
#[derive(Debug, Default)]
struct Dirty {
    group_epoch: bool,
    assignment_epoch: bool,
    state_partitions: bool,
    metadata: BTreeSet<String>,
    targets: BTreeSet<String>,
    currents: BTreeSet<String>,
    removed: BTreeSet<String>,
}

/// One KIP-932 share group.
#[derive(Debug)]
pub struct ShareGroup {
    id: String,
    group_epoch: i32,
    assignment_epoch: i32,
    members: BTreeMap<String, ShareMember>,
    /// Target assignment by member id, computed at `assignment_epoch`.
    target: BTreeMap<String, Assignment>,
    /// Hash of the subscribed topics' metadata when the group epoch last moved.
    metadata_hash: i64,
    initialized: InitializedPartitions,
    dirty: Dirty,
    /// Moves whenever a member joins, leaves or changes its subscription.
    subscriptions_version: u64,
    /// (topics version, subscriptions version) at the last topic check.
    topics_checked: Option<(u64, u64)>,
}

fn to_topic_partitions(a: &Assignment) -> TopicPartitions {
    a.iter()
        .filter(|(_, ps)| !ps.is_empty())
        .map(|(t, ps)| (*t, ps.iter().copied().collect()))
        .collect()
}

fn from_topic_partitions(tps: &TopicPartitions) -> Assignment {
    let mut out = Assignment::new();
    for (t, ps) in tps {
        out.entry(*t).or_default().extend(ps.iter().copied());
    }
    out
}

fn normalized(a: &Assignment) -> Assignment {
    a.iter()
        .filter(|(_, ps)| !ps.is_empty())
        .map(|(t, ps)| (*t, ps.clone()))
        .collect()
}

/// Tombstones for the three records of one member (current assignment, target, subscription),
/// in Kafka's order.
fn member_tombstones(group: &str, member: &str) -> [ShareGroupRecord; 3] {
    let (group, member) = (group.to_string(), member.to_string());
    [
        (
            RecordKey::ShareCurrent {
                group: group.clone(),
                member: member.clone(),
            },
            None,
        ),
        (
            RecordKey::ShareTarget {
                group: group.clone(),
                member: member.clone(),
            },
            None,
        ),
        (RecordKey::ShareMember { group, member }, None),
    ]
}

impl ShareGroup {
    pub fn new(id: &str) -> Self {
        Self {
            id: id.to_string(),
            group_epoch: 0,
            assignment_epoch: 0,
            members: BTreeMap::new(),
            target: BTreeMap::new(),
            metadata_hash: 0,
            initialized: BTreeMap::new(),
            dirty: Dirty::default(),
            subscriptions_version: 0,
            topics_checked: None,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    pub fn group_epoch(&self) -> i32 {
        self.group_epoch
    }

    pub fn assignment_epoch(&self) -> i32 {
        self.assignment_epoch
    }

    pub fn state(&self) -> ShareGroupState {
        if self.members.is_empty() {
            ShareGroupState::Empty
        } else {
            ShareGroupState::Stable
        }
    }

    /// The share partitions of the group that have share state (initialized).
    pub fn initialized_partitions(&self) -> &InitializedPartitions {
        &self.initialized
    }

    /// Records `partitions` of topic `topic_id` (named `topic_name`) as having share state
    /// (AlterShareGroupOffsets initialized them); written with the next records.
    pub fn add_initialized(
        &mut self,
        topic_id: Uuid,
        topic_name: &str,
        partitions: impl IntoIterator<Item = i32>,
    ) {
        let entry = self
            .initialized
            .entry(topic_id)
            .or_insert_with(|| (topic_name.to_string(), BTreeSet::new()));
        entry.1.extend(partitions);
        topic_name.clone_into(&mut entry.0);
        self.dirty.state_partitions = true;
    }

    /// Forgets the share partitions of topic `topic_id` (DeleteShareGroupOffsets deleted their
    /// state); written with the next records. Whether the topic had any.
    pub fn remove_initialized(&mut self, topic_id: Uuid) -> bool {
        let had = self.initialized.remove(&topic_id).is_some();
        if had {
            self.dirty.state_partitions = true;
        }
        had
    }

    /// A group made without a member (AlterShareGroupOffsets of a group that did not exist):
    /// its epoch records are written with the next records, so that a replay finds it.
    pub fn mark_created(&mut self) {
        self.dirty.group_epoch = true;
        self.dirty.assignment_epoch = true;
    }

    /// Kafka's `throwIfShareGroupHeartbeatRequestIsInvalid`, plus the member id and metadata
    /// bounds.
    pub fn validate(req: &ShareHeartbeatRequest) -> Result<(), GroupError> {
        let invalid = |m: &str| Err(GroupError::InvalidRequest(m.to_string()));
        if req.group_id.is_empty() {
            return invalid("GroupId can't be empty.");
        }
        if req.member_id.is_empty() {
            return invalid("MemberId can't be empty.");
        }
        if req.member_id.chars().count() > SHARE_MEMBER_ID_CHARS_MAX {
            return invalid("Invalid member id");
        }
        if req.rack_id.as_deref() == Some("") {
            return invalid("RackId can't be empty.");
        }
        if req.member_epoch < SHARE_LEAVE_EPOCH {
            return invalid("MemberEpoch is invalid.");
        }
        if req.member_epoch == SHARE_JOIN_EPOCH
            && req
                .subscribed_topic_names
                .as_ref()
                .is_none_or(|n| n.is_empty())
        {
            return invalid("SubscribedTopicNames must be set in first request.");
        }
        let metadata_bytes = req
            .subscribed_topic_names
            .iter()
            .flatten()
            .map(String::len)
            .sum::<usize>()
            + req.rack_id.as_ref().map_or(0, String::len)
            + req.client_id.len()
            + req.client_host.len()
            + req.member_id.len();
        if metadata_bytes > MEMBER_METADATA_BYTES_MAX {
            return invalid("The member's subscription and ids are too large.");
        }
        Ok(())
    }

    /// One ShareGroupHeartbeat (the request already passed [`ShareGroup::validate`]).
    pub fn heartbeat(
        &mut self,
        config: &ShareGroupConfig,
        req: &ShareHeartbeatRequest,
        topics: &dyn TopicsView,
        now_ms: i64,
    ) -> Result<ShareHeartbeatResponse, GroupError> {
        Self::validate(req)?;
        if req.member_epoch == SHARE_LEAVE_EPOCH {
            return self.leave(&req.member_id);
        }
        let max_size = config.max_size.clamp(1, MEMBERS_PER_GROUP_MAX);
        if self.members.len() >= max_size && !self.members.contains_key(&req.member_id) {
            return Err(GroupError::GroupMaxSizeReached);
        }
        let joined = match self.members.get(&req.member_id) {
            None if req.member_epoch == SHARE_JOIN_EPOCH => {
                self.add_member(req, now_ms);
                true
            }
            None => return Err(GroupError::UnknownMemberId),
            Some(_) if req.member_epoch == SHARE_JOIN_EPOCH => false,
            Some(m) => {
                let fenced = req.member_epoch > m.member_epoch
                    || (req.member_epoch < m.member_epoch
                        && req.member_epoch != m.previous_member_epoch);
                if fenced {
                    return Err(GroupError::FencedMemberEpoch);
                }
                false
            }
        };
        let subscription_changed = self.update_member(req, config, now_ms);
        if joined || subscription_changed {
            self.subscriptions_version = self.subscriptions_version.wrapping_add(1);
        }
        let topics_changed = self.refresh_topics(topics);
        if joined || subscription_changed || topics_changed {
            self.bump();
        }
        if self.group_epoch > self.assignment_epoch {
            self.compute_target(topics, now_ms);
        }
        self.reconcile(&req.member_id);
        let Some(member) = self.members.get_mut(&req.member_id) else {
            return Err(GroupError::UnknownMemberId);
        };
        let full = req.member_epoch == SHARE_JOIN_EPOCH || req.subscribed_topic_names.is_some();
        let changed = member
            .last_sent
            .as_ref()
            .is_none_or(|s| normalized(s) != normalized(&member.assigned));
        let assignment = (full || changed).then(|| normalized(&member.assigned));
        if let Some(a) = &assignment {
            member.last_sent = Some(a.clone());
        }
        Ok(ShareHeartbeatResponse {
            member_id: req.member_id.clone(),
            member_epoch: member.member_epoch,
            heartbeat_interval_ms: config.heartbeat_interval_ms,
            assignment,
        })
    }

    fn add_member(&mut self, req: &ShareHeartbeatRequest, now_ms: i64) {
        self.members.insert(
            req.member_id.clone(),
            ShareMember {
                member_id: req.member_id.clone(),
                rack_id: None,
                client_id: req.client_id.clone(),
                client_host: req.client_host.clone(),
                subscribed_topic_names: BTreeSet::new(),
                member_epoch: SHARE_JOIN_EPOCH,
                previous_member_epoch: SHARE_JOIN_EPOCH,
                assigned: Assignment::new(),
                session_deadline_ms: now_ms,
                last_sent: None,
            },
        );
        self.dirty.removed.remove(&req.member_id);
        self.dirty.metadata.insert(req.member_id.clone());
        self.dirty.targets.insert(req.member_id.clone());
        self.dirty.currents.insert(req.member_id.clone());
    }

    /// Applies a heartbeat's fields to its member and restarts its session; true if its
    /// subscription changed.
    fn update_member(
        &mut self,
        req: &ShareHeartbeatRequest,
        config: &ShareGroupConfig,
        now_ms: i64,
    ) -> bool {
        let Some(m) = self.members.get_mut(&req.member_id) else {
            return false;
        };
        let before = m.metadata_value();
        m.session_deadline_ms = now_ms.saturating_add(i64::from(config.session_timeout_ms));
        let mut changed = false;
        if let Some(names) = &req.subscribed_topic_names {
            let names: BTreeSet<String> = names.iter().cloned().collect();
            if names != m.subscribed_topic_names {
                m.subscribed_topic_names = names;
                changed = true;
            }
        }
        if req.rack_id.is_some() {
            m.rack_id.clone_from(&req.rack_id);
        }
        if !req.client_id.is_empty() {
            m.client_id.clone_from(&req.client_id);
            m.client_host.clone_from(&req.client_host);
        }
        if m.metadata_value() != before {
            self.dirty.metadata.insert(req.member_id.clone());
        }
        changed
    }

    fn bump(&mut self) {
        self.group_epoch = self.group_epoch.saturating_add(1);
        self.dirty.group_epoch = true;
        self.subscriptions_version = self.subscriptions_version.wrapping_add(1);
    }

    /// The subscribed topics that exist.
    fn subscribed_topics(&self, topics: &dyn TopicsView) -> BTreeSet<TopicInfo> {
        let names: BTreeSet<&str> = self
            .members
            .values()
            .flat_map(|m| m.subscribed_topic_names.iter().map(String::as_str))
            .collect();
        names.iter().filter_map(|n| topics.by_name(n)).collect()
    }

    /// Whether the subscribed topics changed (created, deleted, repartitioned) since the group
    /// epoch last moved; records the new hash. Skipped while neither the metadata image nor any
    /// subscription changed since the last check.
    fn refresh_topics(&mut self, topics: &dyn TopicsView) -> bool {
        let checked = topics.version().map(|v| (v, self.subscriptions_version));
        if checked.is_some() && checked == self.topics_checked {
            return false;
        }
        self.topics_checked = checked;
        let hash = topics_hash(&self.subscribed_topics(topics));
        if hash != self.metadata_hash {
            self.metadata_hash = hash;
            return true;
        }
        false
    }

    /// Computes the target assignment at the group epoch with the simple assignor, and records
    /// every subscribed partition as initialized (Millrace initializes share state at once).
    fn compute_target(&mut self, topics: &dyn TopicsView, now_ms: i64) {
        let _ = now_ms;
        let existing = self.subscribed_topics(topics);
        let by_name: BTreeMap<&str, &TopicInfo> =
            existing.iter().map(|t| (t.name.as_str(), t)).collect();
        let partition_counts: BTreeMap<Uuid, i32> =
            existing.iter().map(|t| (t.id, t.partitions)).collect();
        let subscriptions: Vec<(String, BTreeSet<Uuid>)> = self
            .members
            .values()
            .map(|m| {
                let ids = m
                    .subscribed_topic_names
                    .iter()
                    .filter_map(|n| by_name.get(n.as_str()).map(|t| t.id))
                    .collect();
                (m.member_id.clone(), ids)
            })
            .collect();
        let members: Vec<AssignorMember<'_>> = subscriptions
            .iter()
            .map(|(id, subscribed)| AssignorMember {
                member_id: id,
                subscribed: subscribed.clone(),
                current: self.target.get(id),
            })
            .collect();
        let target = share_assignor::assign(&members, &partition_counts);
        for (id, a) in &target {
            if self
                .target
                .get(id)
                .is_none_or(|old| normalized(old) != normalized(a))
            {
                self.dirty.targets.insert(id.clone());
            }
        }
        self.target = target;
        self.assignment_epoch = self.group_epoch;
        self.dirty.assignment_epoch = true;
        for t in &existing {
            let entry = self
                .initialized
                .entry(t.id)
                .or_insert_with(|| (t.name.clone(), BTreeSet::new()));
            let before = entry.1.len();
            entry.1.extend(0..t.partitions.max(0));
            if entry.1.len() != before || entry.0 != t.name {
                entry.0.clone_from(&t.name);
                self.dirty.state_partitions = true;
            }
        }
    }

    /// Moves a member to its target epoch and partitions (no revocation phase).
    fn reconcile(&mut self, member_id: &str) {
        let assignment_epoch = self.assignment_epoch;
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let Some(m) = self.members.get_mut(member_id) else {
            return;
        };
        if m.member_epoch == assignment_epoch && normalized(&m.assigned) == normalized(&target) {
            return;
        }
        if m.member_epoch != assignment_epoch {
            m.previous_member_epoch = m.member_epoch;
            m.member_epoch = assignment_epoch;
        }
        m.assigned = normalized(&target);
        self.dirty.currents.insert(member_id.to_string());
    }

    fn leave(&mut self, member_id: &str) -> Result<ShareHeartbeatResponse, GroupError> {
        if !self.members.contains_key(member_id) {
            return Err(GroupError::UnknownMemberId);
        }
        self.remove_member(member_id);
        Ok(ShareHeartbeatResponse {
            member_id: member_id.to_string(),
            member_epoch: SHARE_LEAVE_EPOCH,
            heartbeat_interval_ms: 0,
            assignment: None,
        })
    }

    /// Removes a member; the group epoch moves, so the others are reassigned on their next
    /// heartbeats.
    fn remove_member(&mut self, member_id: &str) {
        if self.members.remove(member_id).is_some() {
            self.target.remove(member_id);
            self.dirty.metadata.remove(member_id);
            self.dirty.targets.remove(member_id);
            self.dirty.currents.remove(member_id);
            self.dirty.removed.insert(member_id.to_string());
            self.bump();
        }
    }

    /// The earliest session deadline.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.members.values().map(|m| m.session_deadline_ms).min()
    }

    /// Removes members whose session ended (Kafka fences them). Returns their ids.
    pub fn tick(&mut self, now_ms: i64) -> Vec<String> {
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| m.session_deadline_ms <= now_ms)
            .map(|m| m.member_id.clone())
            .collect();
        for id in &expired {
            self.remove_member(id);
        }
        expired
    }

    pub fn describe(&self) -> ShareGroupDescription {
        ShareGroupDescription {
            group_id: self.id.clone(),
            state: self.state(),
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            assignor: SIMPLE_ASSIGNOR_NAME,
            members: self.members.values().cloned().collect(),
        }
    }

    fn group_record(&self) -> ShareGroupRecord {
        (
            RecordKey::ShareGroup {
                group: self.id.clone(),
            },
            Some(RecordValue::ShareGroup {
                epoch: self.group_epoch,
                metadata_hash: self.metadata_hash,
            }),
        )
    }

    fn target_epoch_record(&self) -> ShareGroupRecord {
        (
            RecordKey::ShareTargetEpoch {
                group: self.id.clone(),
            },
            Some(RecordValue::ShareTargetEpoch {
                assignment_epoch: self.assignment_epoch,
                assignment_timestamp_ms: 0,
            }),
        )
    }

    fn state_partitions_record(&self) -> ShareGroupRecord {
        let initialized = self
            .initialized
            .iter()
            .map(|(id, (name, ps))| SharePartitionsInfo {
                topic_id: *id,
                topic_name: name.clone(),
                partitions: ps.iter().copied().collect(),
            })
            .collect();
        (
            RecordKey::ShareStatePartitions {
                group: self.id.clone(),
            },
            Some(RecordValue::ShareStatePartitions(
                ShareStatePartitionsValue {
                    initializing: Vec::new(),
                    initialized,
                    deleting: Vec::new(),
                },
            )),
        )
    }

    fn member_record(&self, m: &ShareMember) -> ShareGroupRecord {
        (
            RecordKey::ShareMember {
                group: self.id.clone(),
                member: m.member_id.clone(),
            },
            Some(RecordValue::ShareMember(m.metadata_value())),
        )
    }

    fn target_record(&self, member_id: &str) -> ShareGroupRecord {
        let target = self
            .target
            .get(member_id)
            .map(to_topic_partitions)
            .unwrap_or_default();
        (
            RecordKey::ShareTarget {
                group: self.id.clone(),
                member: member_id.to_string(),
            },
            Some(RecordValue::ShareTarget(target)),
        )
    }

    fn current_record(&self, m: &ShareMember) -> ShareGroupRecord {
        (
            RecordKey::ShareCurrent {
                group: self.id.clone(),
                member: m.member_id.clone(),
            },
            Some(RecordValue::ShareCurrent(m.current_value())),
        )
    }

    /// The records for what changed since the last call, in the order Kafka writes them:
    /// removed members' tombstones, subscriptions, the group epoch, the state partitions, target
    /// assignments, the assignment epoch, current assignments.
    pub fn take_records(&mut self) -> Vec<ShareGroupRecord> {
        let dirty = std::mem::take(&mut self.dirty);
        let mut out = Vec::new();
        for member in &dirty.removed {
            if !self.members.contains_key(member) {
                out.extend(member_tombstones(&self.id, member));
            }
        }
        for member in &dirty.metadata {
            if let Some(m) = self.members.get(member) {
                out.push(self.member_record(m));
            }
        }
        if dirty.group_epoch {
            out.push(self.group_record());
        }
        if dirty.state_partitions {
            out.push(self.state_partitions_record());
        }
        for member in &dirty.targets {
            if self.members.contains_key(member) {
                out.push(self.target_record(member));
            }
        }
        if dirty.assignment_epoch {
            out.push(self.target_epoch_record());
        }
        for member in &dirty.currents {
            if let Some(m) = self.members.get(member) {
                out.push(self.current_record(m));
            }
        }
        out
    }

    /// Every record that describes the group as it is (the snapshot's materialization, and what
    /// is written again when earlier records did not commit).
    pub fn all_records(&self) -> Vec<ShareGroupRecord> {
        let mut out = vec![self.group_record(), self.target_epoch_record()];
        if !self.initialized.is_empty() {
            out.push(self.state_partitions_record());
        }
        for m in self.members.values() {
            out.push(self.member_record(m));
            out.push(self.target_record(&m.member_id));
            out.push(self.current_record(m));
        }
        out
    }

    /// Writes every record of the group again with the next records taken: the last ones did not
    /// commit, and the log must catch up with the state the members were told.
    pub fn mark_all_dirty(&mut self) {
        self.dirty.group_epoch = true;
        self.dirty.assignment_epoch = true;
        self.dirty.state_partitions = !self.initialized.is_empty();
        for id in self.members.keys() {
            self.dirty.removed.remove(id);
            self.dirty.metadata.insert(id.clone());
            self.dirty.targets.insert(id.clone());
            self.dirty.currents.insert(id.clone());
        }
    }

    /// Tombstones for every record of the group (it is deleted), in Kafka's order.
    pub fn tombstones(&self) -> Vec<ShareGroupRecord> {
        let group = self.id.clone();
        let mut out = Vec::new();
        for id in self.members.keys() {
            out.extend(member_tombstones(&group, id));
        }
        out.push((
            RecordKey::ShareTargetEpoch {
                group: group.clone(),
            },
            None,
        ));
        out.push((
            RecordKey::ShareStatePartitions {
                group: group.clone(),
            },
            None,
        ));
        out.push((RecordKey::ShareGroup { group }, None));
        out
    }
}

/// A share group's records as a replay meets them (latest value per key), turned into the group
/// once the replay ends.
#[derive(Debug, Default)]
pub struct ShareGroupRecords {
    epoch: Option<i32>,
    metadata_hash: i64,
    assignment_epoch: i32,
    state_partitions: Option<ShareStatePartitionsValue>,
    members: BTreeMap<String, ShareMemberValue>,
    targets: BTreeMap<String, TopicPartitions>,
    currents: BTreeMap<String, ShareCurrentValue>,
}

impl ShareGroupRecords {
    /// Applies one record (`None` = tombstone) of this group; records of other kinds are ignored.
    pub fn apply(&mut self, key: &RecordKey, value: Option<RecordValue>) {
        match (key, value) {
            (
                RecordKey::ShareGroup { .. },
                Some(RecordValue::ShareGroup {
                    epoch,
                    metadata_hash,
                }),
            ) => {
                self.epoch = Some(epoch);
                self.metadata_hash = metadata_hash;
            }
            (RecordKey::ShareGroup { .. }, _) => self.epoch = None,
            (
                RecordKey::ShareTargetEpoch { .. },
                Some(RecordValue::ShareTargetEpoch {
                    assignment_epoch, ..
                }),
            ) => self.assignment_epoch = assignment_epoch,
            (RecordKey::ShareTargetEpoch { .. }, _) => self.assignment_epoch = 0,
            (
                RecordKey::ShareStatePartitions { .. },
                Some(RecordValue::ShareStatePartitions(v)),
            ) => self.state_partitions = Some(v),
            (RecordKey::ShareStatePartitions { .. }, _) => self.state_partitions = None,
            (RecordKey::ShareMember { member, .. }, Some(RecordValue::ShareMember(v))) => {
                self.members.insert(member.clone(), v);
            }
            (RecordKey::ShareMember { member, .. }, _) => {
                self.members.remove(member);
            }
            (RecordKey::ShareTarget { member, .. }, Some(RecordValue::ShareTarget(v))) => {
                self.targets.insert(member.clone(), v);
            }
            (RecordKey::ShareTarget { member, .. }, _) => {
                self.targets.remove(member);
            }
            (RecordKey::ShareCurrent { member, .. }, Some(RecordValue::ShareCurrent(v))) => {
                self.currents.insert(member.clone(), v);
            }
            (RecordKey::ShareCurrent { member, .. }, _) => {
                self.currents.remove(member);
            }
            _ => {}
        }
    }

    /// The group, if its records say it exists. Every member's session starts at `now_ms`.
    pub fn build(self, id: &str, config: &ShareGroupConfig, now_ms: i64) -> Option<ShareGroup> {
        let epoch = self.epoch?;
        let mut g = ShareGroup::new(id);
        g.group_epoch = epoch;
        g.metadata_hash = self.metadata_hash;
        g.assignment_epoch = self.assignment_epoch.min(epoch);
        if let Some(sp) = self.state_partitions {
            // Partitions still initializing when the records were written are initialized here
            // (Millrace initializes synchronously); nothing is left "deleting".
            for info in sp.initializing.into_iter().chain(sp.initialized) {
                let entry = g
                    .initialized
                    .entry(info.topic_id)
                    .or_insert_with(|| (info.topic_name.clone(), BTreeSet::new()));
                entry.1.extend(info.partitions);
            }
        }
        for (member_id, meta) in self.members {
            let current = self.currents.get(&member_id).cloned().unwrap_or_default();
            let member = ShareMember {
                member_id: member_id.clone(),
                rack_id: meta.rack_id,
                client_id: meta.client_id,
                client_host: meta.client_host,
                subscribed_topic_names: meta.subscribed_topic_names.into_iter().collect(),
                member_epoch: current.member_epoch.clamp(0, g.assignment_epoch),
                previous_member_epoch: current.previous_member_epoch,
                assigned: from_topic_partitions(&current.assigned),
                session_deadline_ms: now_ms.saturating_add(i64::from(config.session_timeout_ms)),
                // The member may not have heard its latest assignment: say it again.
                last_sent: None,
            };
            if let Some(t) = self.targets.get(&member_id) {
                g.target.insert(member_id.clone(), from_topic_partitions(t));
            }
            g.members.insert(member_id, member);
        }
        Some(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Topics(Vec<TopicInfo>);

    impl TopicsView for Topics {
        fn by_name(&self, name: &str) -> Option<TopicInfo> {
            self.0.iter().find(|t| t.name == name).cloned()
        }
        fn all(&self) -> Vec<TopicInfo> {
            self.0.clone()
        }
    }

    fn topics(spec: &[(&str, i32)]) -> Topics {
        Topics(
            spec.iter()
                .enumerate()
                .map(|(i, (n, p))| TopicInfo {
                    name: n.to_string(),
                    id: Uuid::from_bytes([i as u8 + 1; 16]),
                    partitions: *p,
                })
                .collect(),
        )
    }

    fn join(member: &str, names: &[&str]) -> ShareHeartbeatRequest {
        ShareHeartbeatRequest {
            group_id: "g".into(),
            member_id: member.into(),
            member_epoch: SHARE_JOIN_EPOCH,
            subscribed_topic_names: Some(names.iter().map(|s| s.to_string()).collect()),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            ..ShareHeartbeatRequest::default()
        }
    }

    fn beat(member: &str, epoch: i32) -> ShareHeartbeatRequest {
        ShareHeartbeatRequest {
            group_id: "g".into(),
            member_id: member.into(),
            member_epoch: epoch,
            ..ShareHeartbeatRequest::default()
        }
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    fn step(
        g: &mut ShareGroup,
        req: &ShareHeartbeatRequest,
        t: &Topics,
        now: i64,
    ) -> Result<ShareHeartbeatResponse, GroupError> {
        g.heartbeat(&ShareGroupConfig::default(), req, t, now)
    }

    #[test]
    fn a_join_assigns_at_once_and_a_plain_heartbeat_repeats_nothing() {
        let t = topics(&[("a", 3)]);
        let mut g = ShareGroup::new("g");
        let r = step(&mut g, &join("m1", &["a"]), &t, 0).expect("join");
        assert_eq!(r.member_epoch, 1);
        assert_eq!(r.heartbeat_interval_ms, 5_000);
        assert_eq!(count(r.assignment.as_ref().expect("assignment")), 3);
        assert_eq!(g.state(), ShareGroupState::Stable);
        assert_eq!(
            g.initialized_partitions()[&Uuid::from_bytes([1; 16])]
                .1
                .len(),
            3
        );
        let r2 = step(&mut g, &beat("m1", 1), &t, 1).expect("beat");
        assert_eq!((r2.member_epoch, r2.assignment), (1, None));
        // A full request (subscription named) gets the assignment again.
        let mut full = beat("m1", 1);
        full.subscribed_topic_names = Some(vec!["a".into()]);
        let r3 = step(&mut g, &full, &t, 2).expect("full");
        assert_eq!(r3.member_epoch, 1, "same subscription: no bump");
        assert_eq!(count(r3.assignment.as_ref().expect("again")), 3);
    }

    #[test]
    fn members_share_a_partition_and_jump_to_their_target() {
        let t = topics(&[("a", 1)]);
        let mut g = ShareGroup::new("g");
        let mut epochs = Vec::new();
        for m in ["m1", "m2", "m3"] {
            epochs.push(
                step(&mut g, &join(m, &["a"]), &t, 0)
                    .expect("join")
                    .member_epoch,
            );
        }
        assert_eq!(epochs, vec![1, 2, 3]);
        // m1 and m2 are behind; their next heartbeats move them to epoch 3 with partition 0 kept.
        for m in ["m1", "m2"] {
            let e = g.members[m].member_epoch;
            let r = step(&mut g, &beat(m, e), &t, 1).expect("beat");
            assert_eq!(r.member_epoch, 3);
        }
        for m in ["m1", "m2", "m3"] {
            assert_eq!(count(&g.members[m].assigned), 1, "{m} has partition 0");
        }
    }

    #[test]
    fn epochs_are_fenced_except_the_previous_one() {
        let t = topics(&[("a", 2)]);
        let mut g = ShareGroup::new("g");
        step(&mut g, &join("m1", &["a"]), &t, 0).expect("m1");
        step(&mut g, &join("m2", &["a"]), &t, 0).expect("m2");
        // m1 is at epoch 1 and the group at 2: the heartbeat moves it to 2.
        let r = step(&mut g, &beat("m1", 1), &t, 1).expect("m1 to 2");
        assert_eq!(r.member_epoch, 2);
        // The response was lost: epoch 1 (previous) is still accepted.
        assert!(step(&mut g, &beat("m1", 1), &t, 2).is_ok());
        assert_eq!(
            step(&mut g, &beat("m1", 3), &t, 3),
            Err(GroupError::FencedMemberEpoch),
            "ahead of the member"
        );
        // Two bumps later, epoch 1 is neither current nor previous.
        step(&mut g, &join("m3", &["a"]), &t, 4).expect("m3");
        step(&mut g, &beat("m1", 2), &t, 5).expect("m1 to 3");
        step(&mut g, &join("m4", &["a"]), &t, 6).expect("m4");
        step(&mut g, &beat("m1", 3), &t, 7).expect("m1 to 4");
        assert_eq!(
            step(&mut g, &beat("m1", 1), &t, 8),
            Err(GroupError::FencedMemberEpoch)
        );
        assert_eq!(
            step(&mut g, &beat("nobody", 2), &t, 9),
            Err(GroupError::UnknownMemberId)
        );
        // A fenced member rejoins with epoch 0 under the same id: its current epoch, full
        // assignment, and no epoch bump.
        let epoch = g.group_epoch();
        let r = step(&mut g, &join("m1", &["a"]), &t, 10).expect("rejoin");
        assert_eq!(r.member_epoch, g.members["m1"].member_epoch);
        assert!(r.assignment.is_some());
        assert_eq!(g.group_epoch(), epoch);
    }

    #[test]
    fn leave_max_size_and_validation() {
        let t = topics(&[("a", 2)]);
        let mut g = ShareGroup::new("g");
        let config = ShareGroupConfig {
            max_size: 2,
            ..ShareGroupConfig::default()
        };
        g.heartbeat(&config, &join("m1", &["a"]), &t, 0)
            .expect("m1");
        g.heartbeat(&config, &join("m2", &["a"]), &t, 0)
            .expect("m2");
        assert_eq!(
            g.heartbeat(&config, &join("m3", &["a"]), &t, 0),
            Err(GroupError::GroupMaxSizeReached)
        );
        // A known member may still rejoin a full group.
        assert!(g.heartbeat(&config, &join("m2", &["a"]), &t, 0).is_ok());
        let epoch = g.group_epoch();
        let left = g
            .heartbeat(&config, &beat("m2", SHARE_LEAVE_EPOCH), &t, 1)
            .expect("leave");
        assert_eq!((left.member_epoch, left.member_id.as_str()), (-1, "m2"));
        assert_eq!(g.group_epoch(), epoch + 1);
        assert_eq!(
            g.heartbeat(&config, &beat("m2", SHARE_LEAVE_EPOCH), &t, 1),
            Err(GroupError::UnknownMemberId)
        );
        for bad in [
            join("m", &[]),
            beat("m", -2),
            ShareHeartbeatRequest {
                rack_id: Some(String::new()),
                ..join("m", &["a"])
            },
            join(&"x".repeat(37), &["a"]),
            join("", &["a"]),
        ] {
            assert!(
                matches!(
                    g.heartbeat(&config, &bad, &t, 2),
                    Err(GroupError::InvalidRequest(_))
                ),
                "{bad:?}"
            );
        }
        assert!(ShareGroup::validate(&join(&"x".repeat(36), &["a"])).is_ok());
    }

    #[test]
    fn session_timeout_removes_a_silent_member() {
        let t = topics(&[("a", 2)]);
        let mut g = ShareGroup::new("g");
        step(&mut g, &join("m1", &["a"]), &t, 0).expect("m1");
        step(&mut g, &join("m2", &["a"]), &t, 0).expect("m2");
        assert_eq!(g.next_deadline_ms(), Some(45_000));
        step(&mut g, &beat("m1", 1), &t, 40_000).expect("m1 beats");
        assert_eq!(g.tick(44_999), Vec::<String>::new());
        assert_eq!(g.tick(45_000), vec!["m2".to_string()]);
        let r = step(&mut g, &beat("m1", 2), &t, 45_001).expect("m1");
        assert_eq!(count(r.assignment.as_ref().expect("all back")), 2);
        let records = g.take_records();
        assert!(records.iter().any(|(k, v)| matches!(
            k,
            RecordKey::ShareMember { member, .. } if member == "m2"
        ) && v.is_none()));
    }

    #[test]
    fn new_partitions_bump_the_epoch() {
        let mut g = ShareGroup::new("g");
        let r = step(&mut g, &join("m1", &["a", "b"]), &topics(&[("a", 1)]), 0).expect("m1");
        assert_eq!(count(r.assignment.as_ref().expect("a")), 1);
        let t2 = topics(&[("a", 2), ("b", 1)]);
        let r2 = step(&mut g, &beat("m1", r.member_epoch), &t2, 1).expect("m1");
        assert!(r2.member_epoch > r.member_epoch);
        assert_eq!(count(r2.assignment.as_ref().expect("grown")), 3);
    }

    /// What a coordinator writes after each step, replayed into a new group, gives the same
    /// members, epochs, assignments and initialized partitions, and members carry on.
    #[test]
    fn records_rebuild_the_group() {
        let t = topics(&[("a", 4)]);
        let mut g = ShareGroup::new("g");
        let mut log: Vec<ShareGroupRecord> = Vec::new();
        step(&mut g, &join("m1", &["a"]), &t, 0).expect("m1");
        log.extend(g.take_records());
        step(&mut g, &join("m2", &["a"]), &t, 1).expect("m2");
        log.extend(g.take_records());
        step(&mut g, &beat("m1", 1), &t, 2).expect("m1");
        log.extend(g.take_records());
        assert!(g.take_records().is_empty(), "nothing new");
        let rebuild = |log: &[ShareGroupRecord]| {
            let mut records = ShareGroupRecords::default();
            for (k, v) in log.iter().cloned() {
                records.apply(&k, v);
            }
            records.build("g", &ShareGroupConfig::default(), 10)
        };
        let mut back = rebuild(&log).expect("group");
        assert_eq!(back.group_epoch(), g.group_epoch());
        assert_eq!(back.assignment_epoch(), g.assignment_epoch());
        assert_eq!(back.initialized_partitions(), g.initialized_partitions());
        for id in ["m1", "m2"] {
            assert_eq!(back.members[id].member_epoch, g.members[id].member_epoch);
            assert_eq!(back.members[id].assigned, g.members[id].assigned);
            assert_eq!(
                back.members[id].subscribed_topic_names,
                g.members[id].subscribed_topic_names
            );
        }
        // The members carry on with their epochs; the first heartbeat repeats the assignment.
        let r = step(&mut back, &beat("m2", 2), &t, 11).expect("m2 on");
        assert!(r.assignment.is_some());
        // A leave writes tombstones; the group then rebuilds without the member.
        step(&mut back, &beat("m2", SHARE_LEAVE_EPOCH), &t, 12).expect("leave");
        log.extend(back.take_records());
        let again = rebuild(&log).expect("group");
        assert_eq!(again.member_count(), 1);
        assert_eq!(again.group_epoch(), back.group_epoch());
        // Deleting writes tombstones for everything.
        log.extend(again.tombstones());
        assert!(rebuild(&log).is_none());
        // The materialized records rebuild the same group.
        let whole = rebuild(&back.all_records()).expect("group");
        assert_eq!(whole.group_epoch(), back.group_epoch());
        assert_eq!(whole.member_count(), back.member_count());
    }
}
