//! One KIP-848 consumer group's state machine (Kafka's `ConsumerGroup` plus the heartbeat parts
//! of `GroupMetadataManager` and `CurrentAssignmentBuilder`): members join, stay and leave by
//! ConsumerGroupHeartbeat alone; the coordinator computes the target assignment with a server-side
//! assignor ([`crate::assignor`]) and walks each member towards it without stopping the others.
//!
//! Epochs: the **group epoch** moves whenever what the assignment depends on changes (a member
//! joins or leaves, a subscription or the assignor changes, a subscribed topic appears, goes or
//! gains partitions). The **assignment epoch** is the group epoch the target assignment was
//! computed at; a heartbeat that finds the group epoch ahead recomputes it. Each member has a
//! **member epoch**: the assignment epoch of the last target it fully reached.
//!
//! Reconciliation of one member, on its own heartbeat: if it holds partitions the target no
//! longer gives it, it is told its reduced assignment and waits (`UnrevokedPartitions`) until a
//! heartbeat shows it released them or its rebalance timeout fences it; then it moves to the
//! target epoch and is given the target's new partitions that no other member still holds
//! (`UnreleasedPartitions` until the rest are free), else it is `Stable`.
//!
//! It is pure, like [`crate::group`]: every call takes `now_ms`; the coordinator owns locks and
//! timers and calls [`ConsumerGroup::tick`] when [`ConsumerGroup::next_deadline_ms`] has passed.
//!
//! Invariants kept:
//! - a partition is in at most one member's assigned or pending-revocation set, so no two members
//!   ever own it at once; the target assignment gives each partition to at most one member;
//! - a member's epoch never exceeds the assignment epoch, which never exceeds the group epoch;
//! - every member leaves by a heartbeat with epoch -1 (or -2 for a static member, which keeps
//!   its partitions until its session ends or its instance id rejoins), by its session timeout,
//!   or by not revoking within its rebalance timeout; nothing parks a member forever.
//!
//! Persistence: every step records what it changed ([`ConsumerGroup::take_records`]) as Kafka's
//! consumer group records (group epoch, member subscriptions, target assignment, current member
//! assignments; `records.rs`), which the coordinator appends to `__consumer_offsets`; a new
//! coordinator rebuilds the group from them ([`ConsumerGroupRecords`]) and members carry on with
//! their epochs. Each member's session starts afresh at load, as in Kafka.
//!
//! Not here: committed offsets (the classic [`crate::group::Group`] that shares the group id
//! keeps them).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use uuid::Uuid;

use crate::assignor::{self, Assignment, Assignor, AssignorMember};
use crate::error::GroupError;
use crate::limits::{
    MEMBERS_PER_GROUP_MAX, MEMBER_METADATA_BYTES_MAX, REBALANCE_TIMEOUT_MS_MAX,
    SUBSCRIPTION_REGEX_BYTES_MAX, SUBSCRIPTION_REGEX_COMPILED_BYTES_MAX,
};
use crate::records::{
    ConsumerCurrentValue, ConsumerMemberValue, RecordKey, RecordValue, TopicPartitions,
};

/// The member epoch of a heartbeat that joins.
pub const JOIN_EPOCH: i32 = 0;
/// The member epoch of a heartbeat that leaves.
pub const LEAVE_EPOCH: i32 = -1;
/// The member epoch of a static member's heartbeat that leaves for now (keeps its partitions).
pub const LEAVE_STATIC_EPOCH: i32 = -2;

/// Kafka's consumer group states (ListGroups, ConsumerGroupDescribe).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerGroupState {
    Empty,
    Assigning,
    Reconciling,
    Stable,
}

impl ConsumerGroupState {
    pub fn name(self) -> &'static str {
        match self {
            ConsumerGroupState::Empty => "Empty",
            ConsumerGroupState::Assigning => "Assigning",
            ConsumerGroupState::Reconciling => "Reconciling",
            ConsumerGroupState::Stable => "Stable",
        }
    }
}

/// Broker settings of consumer groups.
#[derive(Debug, Clone)]
pub struct ConsumerGroupConfig {
    /// group.consumer.session.timeout.ms
    pub session_timeout_ms: i32,
    /// group.consumer.heartbeat.interval.ms
    pub heartbeat_interval_ms: i32,
    /// group.consumer.max.size (capped by [`MEMBERS_PER_GROUP_MAX`])
    pub max_size: usize,
    /// group.consumer.assignors; the first is the default.
    pub assignors: Vec<Assignor>,
}

impl Default for ConsumerGroupConfig {
    fn default() -> Self {
        Self {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            max_size: MEMBERS_PER_GROUP_MAX,
            assignors: vec![Assignor::Uniform, Assignor::Range],
        }
    }
}

/// A group's own member timeouts (its dynamic `*.session.timeout.ms` and
/// `*.heartbeat.interval.ms` configs, KIP-848/KIP-932, resolved by the front end from the
/// metadata); `None` = the broker's `group.*` value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupTimeouts {
    pub session_timeout_ms: Option<i32>,
    pub heartbeat_interval_ms: Option<i32>,
}

impl GroupTimeouts {
    /// (session timeout, heartbeat interval): the group's own, else `broker`'s.
    pub fn or(self, broker: (i32, i32)) -> (i32, i32) {
        (
            self.session_timeout_ms.unwrap_or(broker.0),
            self.heartbeat_interval_ms.unwrap_or(broker.1),
        )
    }
}

/// One topic as the coordinator's metadata knows it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TopicInfo {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
}

/// The topics a heartbeat is stepped against (the broker's current metadata image).
pub trait TopicsView {
    fn by_name(&self, name: &str) -> Option<TopicInfo>;
    /// Every topic a regular expression may match (internal topics too, as in Kafka).
    fn all(&self) -> Vec<TopicInfo>;
    /// A number that changes whenever the topics may have (the metadata image's offset); `None`
    /// when unknown, and then every heartbeat looks again.
    fn version(&self) -> Option<u64> {
        None
    }
}

/// ConsumerGroupHeartbeat, in the coordinator's words.
#[derive(Debug, Clone, Default)]
pub struct HeartbeatRequest {
    pub group_id: String,
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// -1 = unchanged.
    pub rebalance_timeout_ms: i32,
    /// `None` = unchanged.
    pub subscribed_topic_names: Option<Vec<String>>,
    /// `None` = unchanged; `Some("")` = no regular expression.
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// The partitions the member owns; `None` = unchanged since the last heartbeat.
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
    /// The group's `consumer.session.timeout.ms` / `consumer.heartbeat.interval.ms`.
    pub timeouts: GroupTimeouts,
}

/// ConsumerGroupHeartbeat's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatResponse {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The member's assignment, when it must hear it.
    pub assignment: Option<Assignment>,
}

/// Where a member is on its way to its target assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    Stable,
    UnrevokedPartitions,
    UnreleasedPartitions,
}

/// One member of a consumer group.
#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: BTreeSet<String>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<Assignor>,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: MemberState,
    /// Partitions it owns and keeps.
    pub assigned: Assignment,
    /// Partitions it owns and must give up.
    pub pending_revocation: Assignment,
    session_deadline_ms: i64,
    revocation_deadline_ms: Option<i64>,
    /// The assignment last sent to it.
    last_sent: Option<Assignment>,
    /// A static member that left with epoch -2 and may come back under its instance id.
    left_static: bool,
}

/// What a member looks like in ConsumerGroupDescribe.
#[derive(Debug, Clone)]
pub struct ConsumerMemberDescription {
    pub member: ConsumerMember,
    pub target: Assignment,
}

/// ConsumerGroupDescribe's view of a group.
#[derive(Debug, Clone)]
pub struct ConsumerGroupDescription {
    pub group_id: String,
    pub state: ConsumerGroupState,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: &'static str,
    pub members: Vec<ConsumerMemberDescription>,
}

/// One KIP-848 consumer group.
#[derive(Debug)]
pub struct ConsumerGroup {
    id: String,
    group_epoch: i32,
    assignment_epoch: i32,
    members: BTreeMap<String, ConsumerMember>,
    /// group.instance.id → member id.
    static_members: BTreeMap<String, String>,
    /// Target assignment by member id, computed at `assignment_epoch`.
    target: BTreeMap<String, Assignment>,
    /// Hash of the subscribed topics' metadata (names, ids, partition counts) when the group
    /// epoch last moved; 0 = not known (a group loaded from Kafka-written records).
    metadata_hash: i64,
    /// Compiled subscription regexes, by source.
    regexes: HashMap<String, regex::Regex>,
    /// What changed since the records were last taken.
    dirty: Dirty,
    /// When the last member left (or the group was created or loaded empty): committed offsets
    /// expire counting from here, as a classic group's count from when it became Empty.
    empty_since_ms: i64,
    /// Moves whenever a member joins, leaves or changes its subscription.
    subscriptions_version: u64,
    /// (topics version, subscriptions version) at the last topic check.
    topics_checked: Option<(u64, u64)>,
}

/// What a step changed, to be written as records.
#[derive(Debug, Default)]
struct Dirty {
    group_epoch: bool,
    assignment_epoch: bool,
    metadata: BTreeSet<String>,
    targets: BTreeSet<String>,
    currents: BTreeSet<String>,
    removed: BTreeSet<String>,
}

/// A record of a consumer group: key and value (`None` = tombstone).
pub type GroupRecord = (RecordKey, Option<RecordValue>);

/// Tombstones for the three records of one member (current assignment, target, subscription).
fn member_tombstones(group: &str, member: &str) -> [GroupRecord; 3] {
    let (group, member) = (group.to_string(), member.to_string());
    [
        (
            RecordKey::ConsumerCurrent {
                group: group.clone(),
                member: member.clone(),
            },
            None,
        ),
        (
            RecordKey::ConsumerTarget {
                group: group.clone(),
                member: member.clone(),
            },
            None,
        ),
        (RecordKey::ConsumerMember { group, member }, None),
    ]
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

fn state_value(state: MemberState) -> i8 {
    match state {
        MemberState::Stable => 0,
        MemberState::UnrevokedPartitions => 1,
        MemberState::UnreleasedPartitions => 2,
    }
}

impl ConsumerMember {
    fn metadata_value(&self) -> ConsumerMemberValue {
        ConsumerMemberValue {
            instance_id: self.instance_id.clone(),
            rack_id: self.rack_id.clone(),
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
            subscribed_topic_names: self.subscribed_topic_names.iter().cloned().collect(),
            subscribed_topic_regex: self.subscribed_topic_regex.clone(),
            rebalance_timeout_ms: self.rebalance_timeout_ms,
            server_assignor: self.server_assignor.map(|a| a.name().to_string()),
        }
    }

    /// The current assignment record; a static member that left is written with epoch -2 and
    /// its epoch as the previous one, as Kafka does.
    fn current_value(&self) -> ConsumerCurrentValue {
        let (member_epoch, previous_member_epoch) = if self.left_static {
            (LEAVE_STATIC_EPOCH, self.member_epoch)
        } else {
            (self.member_epoch, self.previous_member_epoch)
        };
        ConsumerCurrentValue {
            member_epoch,
            previous_member_epoch,
            state: state_value(self.state),
            assigned: to_topic_partitions(&self.assigned),
            pending_revocation: to_topic_partitions(&self.pending_revocation),
        }
    }

    /// The fields a current assignment record holds, to tell whether a step changed them.
    fn current_fingerprint(&self) -> (i32, i32, MemberState, Assignment, Assignment, bool) {
        (
            self.member_epoch,
            self.previous_member_epoch,
            self.state,
            self.assigned.clone(),
            self.pending_revocation.clone(),
            self.left_static,
        )
    }
}

/// Compiles a subscription regex that a topic name must match as a whole.
fn compile_subscription(source: &str) -> Result<regex::Regex, GroupError> {
    whole_match_regex(source, SUBSCRIPTION_REGEX_COMPILED_BYTES_MAX).map_err(|e| {
        GroupError::InvalidRegularExpression(format!(
            "SubscribedTopicRegex `{source}` is not a valid regular expression: {e}"
        ))
    })
}

/// Compiles a regex that matches a name only as a whole, as Java's `Matcher.matches` (Kafka's
/// topic subscriptions, its transactional-id patterns): checked alone first, so that a source
/// such as `a)|(.*` cannot escape the anchors, then anchored; at most `size_limit` bytes compiled.
pub fn whole_match_regex(source: &str, size_limit: usize) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(source)
        .size_limit(size_limit)
        .build()?;
    regex::RegexBuilder::new(&format!("^(?:{source})$"))
        .size_limit(size_limit)
        .build()
}

/// FNV-1a over the topics' names, ids and partition counts, in order: stable across runs and
/// versions, so a group loaded from its records knows whether its topics changed meanwhile.
pub(crate) fn topics_hash(topics: &BTreeSet<TopicInfo>) -> i64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET_BASIS;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(PRIME);
        }
    };
    for t in topics {
        feed(&(t.name.len() as u64).to_be_bytes());
        feed(t.name.as_bytes());
        feed(t.id.as_bytes());
        feed(&t.partitions.to_be_bytes());
    }
    // 0 means "not known"; an empty set hashes to the basis, never 0.
    i64::from_be_bytes(h.to_be_bytes())
}

fn is_subset(a: &Assignment, b: &Assignment) -> bool {
    a.iter()
        .all(|(t, ps)| ps.is_empty() || b.get(t).is_some_and(|bs| ps.is_subset(bs)))
}

fn intersects(a: &Assignment, b: &Assignment) -> bool {
    a.iter()
        .any(|(t, ps)| b.get(t).is_some_and(|bs| !ps.is_disjoint(bs)))
}

fn normalized(a: &Assignment) -> Assignment {
    a.iter()
        .filter(|(_, ps)| !ps.is_empty())
        .map(|(t, ps)| (*t, ps.clone()))
        .collect()
}

fn same(a: &Assignment, b: &Assignment) -> bool {
    normalized(a) == normalized(b)
}

impl ConsumerGroup {
    pub fn new(id: &str) -> Self {
        Self {
            id: id.to_string(),
            group_epoch: 0,
            assignment_epoch: 0,
            members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            target: BTreeMap::new(),
            metadata_hash: 0,
            regexes: HashMap::new(),
            dirty: Dirty::default(),
            empty_since_ms: 0,
            subscriptions_version: 0,
            topics_checked: None,
        }
    }

    /// When the group last became empty (meaningful while it is).
    pub fn empty_since_ms(&self) -> i64 {
        self.empty_since_ms
    }

    /// Sets when the group became empty (a group created at `now_ms`).
    pub fn set_empty_since_ms(&mut self, now_ms: i64) {
        self.empty_since_ms = now_ms;
    }

    /// The records for what changed since the last call, in the order Kafka writes them:
    /// removed members' tombstones, subscriptions, the group epoch, target assignments, the
    /// assignment epoch, current assignments.
    pub fn take_records(&mut self) -> Vec<GroupRecord> {
        let dirty = std::mem::take(&mut self.dirty);
        let group = self.id.clone();
        let mut out = Vec::new();
        for member in &dirty.removed {
            if self.members.contains_key(member) {
                continue;
            }
            out.extend(member_tombstones(&group, member));
        }
        for member in &dirty.metadata {
            if let Some(m) = self.members.get(member) {
                out.push((
                    RecordKey::ConsumerMember {
                        group: group.clone(),
                        member: member.clone(),
                    },
                    Some(RecordValue::ConsumerMember(m.metadata_value())),
                ));
            }
        }
        if dirty.group_epoch {
            out.push((
                RecordKey::ConsumerGroup {
                    group: group.clone(),
                },
                Some(RecordValue::ConsumerGroup {
                    epoch: self.group_epoch,
                    metadata_hash: self.metadata_hash,
                }),
            ));
        }
        for member in &dirty.targets {
            if self.members.contains_key(member) {
                let target = self
                    .target
                    .get(member)
                    .map(to_topic_partitions)
                    .unwrap_or_default();
                out.push((
                    RecordKey::ConsumerTarget {
                        group: group.clone(),
                        member: member.clone(),
                    },
                    Some(RecordValue::ConsumerTarget(target)),
                ));
            }
        }
        if dirty.assignment_epoch {
            out.push((
                RecordKey::ConsumerTargetEpoch {
                    group: group.clone(),
                },
                Some(RecordValue::ConsumerTargetEpoch {
                    assignment_epoch: self.assignment_epoch,
                }),
            ));
        }
        for member in &dirty.currents {
            if let Some(m) = self.members.get(member) {
                out.push((
                    RecordKey::ConsumerCurrent {
                        group: group.clone(),
                        member: member.clone(),
                    },
                    Some(RecordValue::ConsumerCurrent(m.current_value())),
                ));
            }
        }
        out
    }

    /// Every record that describes the group as it is (the snapshot's materialization).
    pub fn all_records(&self) -> Vec<GroupRecord> {
        let group = self.id.clone();
        let mut out = vec![(
            RecordKey::ConsumerGroup {
                group: group.clone(),
            },
            Some(RecordValue::ConsumerGroup {
                epoch: self.group_epoch,
                metadata_hash: self.metadata_hash,
            }),
        )];
        out.push((
            RecordKey::ConsumerTargetEpoch {
                group: group.clone(),
            },
            Some(RecordValue::ConsumerTargetEpoch {
                assignment_epoch: self.assignment_epoch,
            }),
        ));
        for (id, m) in &self.members {
            out.push((
                RecordKey::ConsumerMember {
                    group: group.clone(),
                    member: id.clone(),
                },
                Some(RecordValue::ConsumerMember(m.metadata_value())),
            ));
            let target = self
                .target
                .get(id)
                .map(to_topic_partitions)
                .unwrap_or_default();
            out.push((
                RecordKey::ConsumerTarget {
                    group: group.clone(),
                    member: id.clone(),
                },
                Some(RecordValue::ConsumerTarget(target)),
            ));
            out.push((
                RecordKey::ConsumerCurrent {
                    group: group.clone(),
                    member: id.clone(),
                },
                Some(RecordValue::ConsumerCurrent(m.current_value())),
            ));
        }
        out
    }

    /// Tombstones for every record of the group (it is deleted).
    pub fn tombstones(&self) -> Vec<GroupRecord> {
        let group = self.id.clone();
        let mut out = Vec::new();
        for id in self.members.keys() {
            out.extend(member_tombstones(&group, id));
        }
        out.push((
            RecordKey::ConsumerTargetEpoch {
                group: group.clone(),
            },
            None,
        ));
        out.push((RecordKey::ConsumerGroup { group }, None));
        out
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

    pub fn state(&self) -> ConsumerGroupState {
        if self.members.is_empty() {
            ConsumerGroupState::Empty
        } else if self.group_epoch > self.assignment_epoch {
            ConsumerGroupState::Assigning
        } else if self
            .members
            .values()
            .any(|m| m.member_epoch != self.assignment_epoch || m.state != MemberState::Stable)
        {
            ConsumerGroupState::Reconciling
        } else {
            ConsumerGroupState::Stable
        }
    }

    /// The assignor the group uses: the one most members asked for, else the broker's default.
    fn assignor(&self, config: &ConsumerGroupConfig) -> Assignor {
        let mut counts: BTreeMap<&'static str, (usize, Assignor)> = BTreeMap::new();
        for a in self.members.values().filter_map(|m| m.server_assignor) {
            counts.entry(a.name()).or_insert((0, a)).0 += 1;
        }
        counts
            .into_values()
            .max_by_key(|(n, _)| *n)
            .map(|(_, a)| a)
            .or_else(|| config.assignors.first().copied())
            .unwrap_or(Assignor::Uniform)
    }

    fn bump(&mut self) {
        self.group_epoch = self.group_epoch.saturating_add(1);
        self.dirty.group_epoch = true;
        // Whatever moved the epoch may have changed the subscriptions' topics.
        self.subscriptions_version = self.subscriptions_version.wrapping_add(1);
    }

    /// Checks a heartbeat's fields as Kafka's `throwIfConsumerGroupHeartbeatRequestIsInvalid`.
    fn validate(req: &HeartbeatRequest, config: &ConsumerGroupConfig) -> Result<(), GroupError> {
        let invalid = |m: &str| Err(GroupError::InvalidRequest(m.to_string()));
        if req.member_epoch < LEAVE_STATIC_EPOCH {
            return invalid("MemberEpoch is invalid.");
        }
        if req.member_epoch != JOIN_EPOCH && req.member_id.is_empty() {
            return invalid("MemberId can't be empty.");
        }
        if req.member_epoch == LEAVE_STATIC_EPOCH && req.instance_id.is_none() {
            return invalid("InstanceId can't be null when MemberEpoch is -2.");
        }
        if req.member_epoch == JOIN_EPOCH {
            if req.rebalance_timeout_ms == -1 {
                return invalid("RebalanceTimeoutMs must be provided in first request.");
            }
            if req.subscribed_topic_names.is_none() && req.subscribed_topic_regex.is_none() {
                return invalid(
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                );
            }
            if req
                .owned
                .as_ref()
                .is_some_and(|o| o.values().any(|p| !p.is_empty()))
            {
                return invalid("TopicPartitions must be empty when (re-)joining.");
            }
        }
        if req.rebalance_timeout_ms < -1 {
            return invalid("RebalanceTimeoutMs is out of range.");
        }
        let strings = |o: &Option<String>| o.as_ref().map_or(0, String::len);
        let metadata_bytes = req
            .subscribed_topic_names
            .iter()
            .flatten()
            .map(String::len)
            .sum::<usize>()
            + strings(&req.subscribed_topic_regex)
            + strings(&req.instance_id)
            + strings(&req.rack_id)
            + strings(&req.server_assignor)
            + req.client_id.len()
            + req.client_host.len()
            + req.member_id.len();
        if metadata_bytes > MEMBER_METADATA_BYTES_MAX {
            return invalid("The member's subscription and ids are too large.");
        }
        if let Some(name) = &req.server_assignor {
            match Assignor::from_name(name) {
                Some(a) if config.assignors.contains(&a) => {}
                _ => return Err(GroupError::UnsupportedAssignor),
            }
        }
        if let Some(regex) = &req.subscribed_topic_regex {
            if regex.len() > SUBSCRIPTION_REGEX_BYTES_MAX {
                return Err(GroupError::InvalidRegularExpression(format!(
                    "SubscribedTopicRegex is longer than {SUBSCRIPTION_REGEX_BYTES_MAX} bytes."
                )));
            }
        }
        Ok(())
    }

    /// Drops compiled regexes no member subscribes with any more.
    fn prune_regexes(&mut self) {
        let used: BTreeSet<&str> = self
            .members
            .values()
            .filter_map(|m| m.subscribed_topic_regex.as_deref())
            .collect();
        self.regexes
            .retain(|source, _| used.contains(source.as_str()));
    }

    /// Kafka's `throwIfInstanceIdIsFenced`: a static member's heartbeat (other than a join) must
    /// come from the member id that holds the instance id now; an older incarnation is fenced.
    fn check_instance_id(&self, req: &HeartbeatRequest) -> Result<(), GroupError> {
        let Some(instance) = &req.instance_id else {
            return Ok(());
        };
        if req.member_epoch == JOIN_EPOCH {
            return Ok(());
        }
        match self.static_members.get(instance) {
            Some(holder) if *holder != req.member_id => Err(GroupError::FencedInstanceId),
            _ => Ok(()),
        }
    }

    /// One ConsumerGroupHeartbeat.
    pub fn heartbeat(
        &mut self,
        config: &ConsumerGroupConfig,
        req: &HeartbeatRequest,
        topics: &dyn TopicsView,
        new_member_id: impl FnOnce() -> String,
        now_ms: i64,
    ) -> Result<HeartbeatResponse, GroupError> {
        Self::validate(req, config)?;
        self.check_instance_id(req)?;
        match req.member_epoch {
            LEAVE_EPOCH | LEAVE_STATIC_EPOCH => return self.leave(req, config, now_ms),
            _ => {}
        }
        // The regex is compiled only for a member the group accepts, and cached only while a
        // member uses it (a stream of refused heartbeats cannot grow the cache).
        let compiled = match req.subscribed_topic_regex.as_deref() {
            Some(source) if !source.is_empty() && !self.regexes.contains_key(source) => {
                Some((source.to_string(), compile_subscription(source)?))
            }
            _ => None,
        };
        let (member_id, joined) = if req.member_epoch == JOIN_EPOCH {
            self.join(config, req, new_member_id, now_ms)?
        } else {
            let member = self
                .members
                .get(&req.member_id)
                .ok_or(GroupError::UnknownMemberId)?;
            if member.left_static {
                return Err(GroupError::FencedMemberEpoch);
            }
            let epoch_ok = req.member_epoch == member.member_epoch
                || (req.member_epoch == member.previous_member_epoch
                    && req
                        .owned
                        .as_ref()
                        .is_some_and(|o| is_subset(o, &member.assigned)));
            if !epoch_ok {
                return Err(GroupError::FencedMemberEpoch);
            }
            (req.member_id.clone(), false)
        };
        if let Some((source, re)) = compiled {
            self.regexes.insert(source, re);
        }
        // One epoch move for whatever changed in this heartbeat, as Kafka's.
        let subscription_changed = self.update_member(&member_id, req, config, now_ms);
        if subscription_changed {
            self.prune_regexes();
        }
        if joined || subscription_changed {
            self.subscriptions_version = self.subscriptions_version.wrapping_add(1);
        }
        let topics_changed = self.refresh_topics(topics);
        if joined || subscription_changed || topics_changed {
            self.bump();
            // Kafka's consumer-group rebalance sensor records the heartbeat's epoch bumps only: a
            // member fenced on leave or expiry moves the epoch without it. Replay counts nothing.
            millrace_metrics::global().group_rebalances.inc();
        }
        if self.group_epoch > self.assignment_epoch {
            self.compute_target(config, topics);
        }
        self.reconcile(&member_id, req.owned.as_ref(), now_ms);
        let Some(member) = self.members.get_mut(&member_id) else {
            return Err(GroupError::UnknownMemberId);
        };
        let owned_differs = req
            .owned
            .as_ref()
            .is_some_and(|o| !same(o, &member.assigned));
        let send = req.member_epoch == JOIN_EPOCH
            || owned_differs
            || member
                .last_sent
                .as_ref()
                .is_none_or(|s| !same(s, &member.assigned));
        let assignment = send.then(|| normalized(&member.assigned));
        if let Some(a) = &assignment {
            member.last_sent = Some(a.clone());
        }
        Ok(HeartbeatResponse {
            member_id,
            member_epoch: member.member_epoch,
            heartbeat_interval_ms: config.heartbeat_interval_ms,
            assignment,
        })
    }

    /// A heartbeat with epoch 0: a new member, a known one starting over, or a static member
    /// taking its instance id's place back. Returns the member id and whether it is new.
    fn join(
        &mut self,
        config: &ConsumerGroupConfig,
        req: &HeartbeatRequest,
        new_member_id: impl FnOnce() -> String,
        now_ms: i64,
    ) -> Result<(String, bool), GroupError> {
        let member_id = if req.member_id.is_empty() {
            new_member_id()
        } else {
            req.member_id.clone()
        };
        if let Some(instance) = &req.instance_id {
            if let Some(old_id) = self.static_members.get(instance).cloned() {
                if old_id != member_id {
                    if self.members.get(&old_id).is_some_and(|m| !m.left_static) {
                        return Err(GroupError::UnreleasedInstanceId);
                    }
                    // The new incarnation takes over the old one's partitions and epoch.
                    if let Some(mut m) = self.members.remove(&old_id) {
                        m.member_id = member_id.clone();
                        m.left_static = false;
                        m.last_sent = None;
                        if let Some(t) = self.target.remove(&old_id) {
                            self.target.insert(member_id.clone(), t);
                        }
                        self.members.insert(member_id.clone(), m);
                        self.mark_removed(&old_id);
                        self.mark_member(&member_id);
                        self.static_members
                            .insert(instance.clone(), member_id.clone());
                        return Ok((member_id, false));
                    }
                    self.static_members.remove(instance);
                }
            }
        }
        if let Some(m) = self.members.get_mut(&member_id) {
            // A known member starting over (it was fenced or lost its state): it holds nothing.
            m.assigned.clear();
            m.pending_revocation.clear();
            m.member_epoch = JOIN_EPOCH;
            m.previous_member_epoch = JOIN_EPOCH;
            m.state = MemberState::Stable;
            m.revocation_deadline_ms = None;
            m.last_sent = None;
            m.left_static = false;
            self.dirty.currents.insert(member_id.clone());
            return Ok((member_id, false));
        }
        if self.members.len() >= config.max_size.min(MEMBERS_PER_GROUP_MAX) {
            return Err(GroupError::GroupMaxSizeReached);
        }
        self.members.insert(
            member_id.clone(),
            ConsumerMember {
                member_id: member_id.clone(),
                instance_id: req.instance_id.clone(),
                rack_id: None,
                client_id: req.client_id.clone(),
                client_host: req.client_host.clone(),
                rebalance_timeout_ms: req.rebalance_timeout_ms.min(REBALANCE_TIMEOUT_MS_MAX),
                subscribed_topic_names: BTreeSet::new(),
                subscribed_topic_regex: None,
                server_assignor: None,
                member_epoch: JOIN_EPOCH,
                previous_member_epoch: JOIN_EPOCH,
                state: MemberState::Stable,
                assigned: Assignment::new(),
                pending_revocation: Assignment::new(),
                session_deadline_ms: now_ms,
                revocation_deadline_ms: None,
                last_sent: None,
                left_static: false,
            },
        );
        if let Some(instance) = &req.instance_id {
            self.static_members
                .insert(instance.clone(), member_id.clone());
        }
        self.mark_member(&member_id);
        Ok((member_id, true))
    }

    /// Applies a heartbeat's subscription fields; true if the assignment depends on the change.
    fn update_member(
        &mut self,
        member_id: &str,
        req: &HeartbeatRequest,
        config: &ConsumerGroupConfig,
        now_ms: i64,
    ) -> bool {
        let Some(m) = self.members.get_mut(member_id) else {
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
        if let Some(regex) = &req.subscribed_topic_regex {
            let regex = (!regex.is_empty()).then(|| regex.clone());
            if regex != m.subscribed_topic_regex {
                m.subscribed_topic_regex = regex;
                changed = true;
            }
        }
        if let Some(name) = &req.server_assignor {
            let a = Assignor::from_name(name);
            if a != m.server_assignor {
                m.server_assignor = a;
                changed = true;
            }
        }
        if req.rebalance_timeout_ms >= 0 {
            // Clamped, as the classic path does: a consumer's max.poll.interval.ms may be longer.
            m.rebalance_timeout_ms = req.rebalance_timeout_ms.min(REBALANCE_TIMEOUT_MS_MAX);
        }
        if req.rack_id.is_some() {
            m.rack_id.clone_from(&req.rack_id);
        }
        if !req.client_id.is_empty() {
            m.client_id.clone_from(&req.client_id);
            m.client_host.clone_from(&req.client_host);
        }
        if m.metadata_value() != before {
            self.dirty.metadata.insert(member_id.to_string());
        }
        changed
    }

    /// Marks every record of a member as changed.
    fn mark_member(&mut self, member_id: &str) {
        self.dirty.removed.remove(member_id);
        self.dirty.metadata.insert(member_id.to_string());
        self.dirty.targets.insert(member_id.to_string());
        self.dirty.currents.insert(member_id.to_string());
    }

    /// Marks a member's records for tombstones.
    fn mark_removed(&mut self, member_id: &str) {
        self.dirty.metadata.remove(member_id);
        self.dirty.targets.remove(member_id);
        self.dirty.currents.remove(member_id);
        self.dirty.removed.insert(member_id.to_string());
    }

    /// The topics `m` subscribes to that exist (names and regex matches).
    /// Whether the subscribed topics changed (created, deleted, repartitioned, or newly matched
    /// by a regex) since the group epoch last moved; records the new set.
    /// Skipped while neither the metadata image nor any subscription changed since the last
    /// check: most heartbeats change nothing, and this walk is the costly part of one.
    fn refresh_topics(&mut self, topics: &dyn TopicsView) -> bool {
        let checked = topics.version().map(|v| (v, self.subscriptions_version));
        if checked.is_some() && checked == self.topics_checked {
            return false;
        }
        self.topics_checked = checked;
        // Each distinct name is looked up once and each distinct regex run once.
        let names: BTreeSet<&str> = self
            .members
            .values()
            .flat_map(|m| m.subscribed_topic_names.iter().map(String::as_str))
            .collect();
        let mut now: BTreeSet<TopicInfo> = names.iter().filter_map(|n| topics.by_name(n)).collect();
        if !self.regexes.is_empty() {
            let all = topics.all();
            for re in self.regexes.values() {
                now.extend(all.iter().filter(|t| re.is_match(&t.name)).cloned());
            }
        }
        let hash = topics_hash(&now);
        if hash != self.metadata_hash {
            self.metadata_hash = hash;
            return true;
        }
        false
    }

    fn compute_target(&mut self, config: &ConsumerGroupConfig, topics: &dyn TopicsView) {
        // Each distinct regex is run over the topics once, each name looked up once.
        let all = if self.regexes.is_empty() {
            Vec::new()
        } else {
            topics.all()
        };
        let matched: HashMap<&str, Vec<&TopicInfo>> = self
            .regexes
            .iter()
            .map(|(source, re)| {
                (
                    source.as_str(),
                    all.iter().filter(|t| re.is_match(&t.name)).collect(),
                )
            })
            .collect();
        let mut by_name: HashMap<&str, Option<TopicInfo>> = HashMap::new();
        let mut partition_counts: BTreeMap<Uuid, i32> = BTreeMap::new();
        let mut subscriptions: Vec<(String, BTreeSet<Uuid>)> = Vec::new();
        for m in self.members.values() {
            let mut ids = BTreeSet::new();
            for name in &m.subscribed_topic_names {
                let found = by_name
                    .entry(name.as_str())
                    .or_insert_with(|| topics.by_name(name));
                if let Some(t) = found {
                    ids.insert(t.id);
                    partition_counts.insert(t.id, t.partitions);
                }
            }
            if let Some(ts) = m
                .subscribed_topic_regex
                .as_deref()
                .and_then(|r| matched.get(r))
            {
                for t in ts {
                    ids.insert(t.id);
                    partition_counts.insert(t.id, t.partitions);
                }
            }
            subscriptions.push((m.member_id.clone(), ids));
        }
        let members: Vec<AssignorMember<'_>> = subscriptions
            .iter()
            .map(|(id, subscribed)| AssignorMember {
                member_id: id,
                subscribed: subscribed.clone(),
                current: self.target.get(id),
            })
            .collect();
        let target = assignor::assign(self.assignor(config), &members, &partition_counts);
        for (id, a) in &target {
            if self.target.get(id).is_none_or(|old| !same(old, a)) {
                self.dirty.targets.insert(id.clone());
            }
        }
        self.target = target;
        self.assignment_epoch = self.group_epoch;
        self.dirty.assignment_epoch = true;
    }

    /// Whether a member other than `member_id` owns (or still revokes) `topic`/`partition`.
    fn owned_by_other(&self, member_id: &str, topic: &Uuid, partition: i32) -> bool {
        self.members.values().any(|m| {
            m.member_id != member_id
                && [&m.assigned, &m.pending_revocation]
                    .iter()
                    .any(|a| a.get(topic).is_some_and(|ps| ps.contains(&partition)))
        })
    }

    /// Walks `member_id` towards its target (Kafka's `CurrentAssignmentBuilder`), marking its
    /// current assignment record if that changed.
    fn reconcile(&mut self, member_id: &str, owned: Option<&Assignment>, now_ms: i64) {
        let before = self
            .members
            .get(member_id)
            .map(ConsumerMember::current_fingerprint);
        self.reconcile_step(member_id, owned, now_ms);
        let after = self
            .members
            .get(member_id)
            .map(ConsumerMember::current_fingerprint);
        if before != after {
            self.dirty.currents.insert(member_id.to_string());
        }
    }

    fn reconcile_step(&mut self, member_id: &str, owned: Option<&Assignment>, now_ms: i64) {
        let Some(m) = self.members.get(member_id) else {
            return;
        };
        match m.state {
            MemberState::UnrevokedPartitions => {
                let released = owned.is_some_and(|o| !intersects(o, &m.pending_revocation));
                if !released {
                    return;
                }
            }
            MemberState::Stable if m.member_epoch == self.assignment_epoch => return,
            MemberState::Stable | MemberState::UnreleasedPartitions => {}
        }
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let Some(m) = self.members.get(member_id) else {
            return;
        };
        let mut keep = Assignment::new();
        let mut revoke = Assignment::new();
        for (topic, ps) in &m.assigned {
            for &p in ps {
                let side = if target.get(topic).is_some_and(|t| t.contains(&p)) {
                    &mut keep
                } else {
                    &mut revoke
                };
                side.entry(*topic).or_default().insert(p);
            }
        }
        let rebalance_timeout_ms = m.rebalance_timeout_ms;
        if !revoke.is_empty() {
            if let Some(m) = self.members.get_mut(member_id) {
                m.assigned = keep;
                m.pending_revocation = revoke;
                m.state = MemberState::UnrevokedPartitions;
                m.revocation_deadline_ms =
                    Some(now_ms.saturating_add(i64::from(rebalance_timeout_ms.max(0))));
            }
            return;
        }
        let mut unreleased = false;
        let mut assigned = keep;
        for (topic, ps) in &target {
            for &p in ps {
                if assigned.get(topic).is_some_and(|a| a.contains(&p)) {
                    continue;
                }
                if self.owned_by_other(member_id, topic, p) {
                    unreleased = true;
                } else {
                    assigned.entry(*topic).or_default().insert(p);
                }
            }
        }
        let assignment_epoch = self.assignment_epoch;
        if let Some(m) = self.members.get_mut(member_id) {
            m.assigned = assigned;
            m.pending_revocation.clear();
            m.revocation_deadline_ms = None;
            if m.member_epoch != assignment_epoch {
                m.previous_member_epoch = m.member_epoch;
                m.member_epoch = assignment_epoch;
            }
            m.state = if unreleased {
                MemberState::UnreleasedPartitions
            } else {
                MemberState::Stable
            };
        }
    }

    fn leave(
        &mut self,
        req: &HeartbeatRequest,
        config: &ConsumerGroupConfig,
        now_ms: i64,
    ) -> Result<HeartbeatResponse, GroupError> {
        let member_id = match (&req.instance_id, req.member_epoch) {
            (Some(instance), _) => self
                .static_members
                .get(instance)
                .cloned()
                .ok_or(GroupError::UnknownMemberId)?,
            (None, _) => req.member_id.clone(),
        };
        if !self.members.contains_key(&member_id) {
            return Err(GroupError::UnknownMemberId);
        }
        if req.member_epoch == LEAVE_STATIC_EPOCH {
            // Kept, partitions and all, until its session ends or its instance id rejoins.
            if let Some(m) = self.members.get_mut(&member_id) {
                m.left_static = true;
                m.session_deadline_ms = now_ms.saturating_add(i64::from(config.session_timeout_ms));
                // What it was revoking is released (Kafka's static leave), so the members
                // waiting for those partitions need not wait for its session to end.
                m.pending_revocation.clear();
                m.revocation_deadline_ms = None;
            }
            self.dirty.currents.insert(member_id.clone());
        } else {
            self.remove_member(&member_id, now_ms);
        }
        Ok(HeartbeatResponse {
            member_id: req.member_id.clone(),
            member_epoch: req.member_epoch,
            heartbeat_interval_ms: 0,
            assignment: None,
        })
    }

    /// Removes a member; its partitions become free and the group epoch moves.
    fn remove_member(&mut self, member_id: &str, now_ms: i64) {
        if let Some(m) = self.members.remove(member_id) {
            if self.members.is_empty() {
                self.empty_since_ms = now_ms;
            }
            if let Some(instance) = &m.instance_id {
                if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                    self.static_members.remove(instance);
                }
            }
            self.target.remove(member_id);
            self.mark_removed(member_id);
            self.bump();
        }
    }

    /// Keeps the invariant that no partition is in two members' assigned or pending sets after a
    /// rebuild from records: should the log hold a member whose removal was never written next to
    /// the member that got its partitions, the partition stays with the member of the highest
    /// epoch (the later owner) and leaves the others.
    fn release_double_claims(&mut self) {
        let mut owner: BTreeMap<(Uuid, i32), (i32, String)> = BTreeMap::new();
        for m in self.members.values() {
            for a in [&m.assigned, &m.pending_revocation] {
                for (t, ps) in a {
                    for &p in ps {
                        let e = owner
                            .entry((*t, p))
                            .or_insert((m.member_epoch, m.member_id.clone()));
                        if m.member_epoch > e.0 {
                            *e = (m.member_epoch, m.member_id.clone());
                        }
                    }
                }
            }
        }
        for m in self.members.values_mut() {
            for a in [&mut m.assigned, &mut m.pending_revocation] {
                for (t, ps) in a.iter_mut() {
                    ps.retain(|p| {
                        owner
                            .get(&(*t, *p))
                            .is_none_or(|(_, id)| *id == m.member_id)
                    });
                }
                a.retain(|_, ps| !ps.is_empty());
            }
        }
    }

    /// Writes every record of the group again with the next records taken: the last ones did not
    /// commit, and the log must catch up with the state the members were told.
    pub fn mark_all_dirty(&mut self) {
        self.dirty.group_epoch = true;
        self.dirty.assignment_epoch = true;
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            self.mark_member(&id);
        }
    }

    /// The earliest session or revocation deadline.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.members
            .values()
            .flat_map(|m| [Some(m.session_deadline_ms), m.revocation_deadline_ms])
            .flatten()
            .min()
    }

    /// Removes members whose session ended or who did not revoke in time. Returns their ids.
    pub fn tick(&mut self, now_ms: i64) -> Vec<String> {
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                m.session_deadline_ms <= now_ms
                    || m.revocation_deadline_ms.is_some_and(|d| d <= now_ms)
            })
            .map(|m| m.member_id.clone())
            .collect();
        for id in &expired {
            self.remove_member(id, now_ms);
        }
        expired
    }

    /// Kafka's `ConsumerGroup.validateOffsetCommit`: epoch < 0 commits while the group is empty
    /// (admin clients, consumers outside the group); otherwise the member must exist and name its
    /// current epoch.
    pub fn validate_commit(&self, member_id: &str, member_epoch: i32) -> Result<(), GroupError> {
        if member_epoch < 0 && self.members.is_empty() {
            return Ok(());
        }
        self.validate_member_epoch(member_id, member_epoch)
    }

    /// Kafka's `ConsumerGroup.validateOffsetFetch`: a request naming a member must name its
    /// current epoch.
    pub fn validate_fetch(
        &self,
        member_id: Option<&str>,
        member_epoch: i32,
    ) -> Result<(), GroupError> {
        match member_id {
            None => Ok(()),
            Some(_) if member_epoch < 0 => Ok(()),
            Some(id) => self.validate_member_epoch(id, member_epoch),
        }
    }

    fn validate_member_epoch(&self, member_id: &str, member_epoch: i32) -> Result<(), GroupError> {
        let m = self
            .members
            .get(member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        if m.member_epoch != member_epoch {
            return Err(GroupError::StaleMemberEpoch);
        }
        Ok(())
    }

    /// Whether a member subscribes to `topic` by name or regex (OffsetDelete).
    pub fn is_subscribed(&self, topic: &str) -> bool {
        self.members.values().any(|m| {
            m.subscribed_topic_names.contains(topic)
                || m.subscribed_topic_regex
                    .as_ref()
                    .and_then(|r| self.regexes.get(r))
                    .is_some_and(|re| re.is_match(topic))
        })
    }

    pub fn describe(&self, config: &ConsumerGroupConfig) -> ConsumerGroupDescription {
        ConsumerGroupDescription {
            group_id: self.id.clone(),
            state: self.state(),
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            assignor: self.assignor(config).name(),
            members: self
                .members
                .values()
                .map(|m| ConsumerMemberDescription {
                    member: m.clone(),
                    target: self.target.get(&m.member_id).cloned().unwrap_or_default(),
                })
                .collect(),
        }
    }
}

/// A consumer group's records as a replay meets them (latest value per key), turned into the
/// group once the replay ends.
#[derive(Debug, Default)]
pub struct ConsumerGroupRecords {
    epoch: Option<i32>,
    metadata_hash: i64,
    assignment_epoch: i32,
    members: BTreeMap<String, ConsumerMemberValue>,
    targets: BTreeMap<String, TopicPartitions>,
    currents: BTreeMap<String, ConsumerCurrentValue>,
}

impl ConsumerGroupRecords {
    /// Applies one record (`None` = tombstone) of this group.
    pub fn apply(&mut self, key: &RecordKey, value: Option<RecordValue>) {
        match (key, value) {
            (
                RecordKey::ConsumerGroup { .. },
                Some(RecordValue::ConsumerGroup {
                    epoch,
                    metadata_hash,
                }),
            ) => {
                self.epoch = Some(epoch);
                self.metadata_hash = metadata_hash;
            }
            (RecordKey::ConsumerGroup { .. }, _) => self.epoch = None,
            (
                RecordKey::ConsumerTargetEpoch { .. },
                Some(RecordValue::ConsumerTargetEpoch { assignment_epoch }),
            ) => self.assignment_epoch = assignment_epoch,
            (RecordKey::ConsumerTargetEpoch { .. }, _) => self.assignment_epoch = 0,
            (RecordKey::ConsumerMember { member, .. }, Some(RecordValue::ConsumerMember(v))) => {
                self.members.insert(member.clone(), v);
            }
            (RecordKey::ConsumerMember { member, .. }, _) => {
                self.members.remove(member);
            }
            (RecordKey::ConsumerTarget { member, .. }, Some(RecordValue::ConsumerTarget(v))) => {
                self.targets.insert(member.clone(), v);
            }
            (RecordKey::ConsumerTarget { member, .. }, _) => {
                self.targets.remove(member);
            }
            (RecordKey::ConsumerCurrent { member, .. }, Some(RecordValue::ConsumerCurrent(v))) => {
                self.currents.insert(member.clone(), v);
            }
            (RecordKey::ConsumerCurrent { member, .. }, _) => {
                self.currents.remove(member);
            }
            _ => {}
        }
    }

    /// The group, if its records say it exists. Every member's session starts at `now_ms`.
    pub fn build(
        self,
        id: &str,
        config: &ConsumerGroupConfig,
        now_ms: i64,
    ) -> Option<ConsumerGroup> {
        let epoch = self.epoch?;
        let mut g = ConsumerGroup::new(id);
        g.empty_since_ms = now_ms;
        g.group_epoch = epoch;
        g.metadata_hash = self.metadata_hash;
        g.assignment_epoch = self.assignment_epoch.min(epoch);
        for (member_id, meta) in self.members {
            let current = self.currents.get(&member_id).cloned().unwrap_or_default();
            let left_static = current.member_epoch == LEAVE_STATIC_EPOCH;
            let (member_epoch, previous_member_epoch) = if left_static {
                (current.previous_member_epoch, current.previous_member_epoch)
            } else {
                (current.member_epoch, current.previous_member_epoch)
            };
            let state = match current.state {
                1 => MemberState::UnrevokedPartitions,
                2 => MemberState::UnreleasedPartitions,
                _ => MemberState::Stable,
            };
            let member = ConsumerMember {
                member_id: member_id.clone(),
                instance_id: meta.instance_id.clone(),
                rack_id: meta.rack_id,
                client_id: meta.client_id,
                client_host: meta.client_host,
                rebalance_timeout_ms: meta.rebalance_timeout_ms,
                subscribed_topic_names: meta.subscribed_topic_names.into_iter().collect(),
                subscribed_topic_regex: meta.subscribed_topic_regex.clone(),
                server_assignor: meta
                    .server_assignor
                    .as_deref()
                    .and_then(Assignor::from_name),
                member_epoch: member_epoch.clamp(0, g.assignment_epoch),
                previous_member_epoch,
                state,
                assigned: from_topic_partitions(&current.assigned),
                pending_revocation: from_topic_partitions(&current.pending_revocation),
                session_deadline_ms: now_ms.saturating_add(i64::from(config.session_timeout_ms)),
                revocation_deadline_ms: (state == MemberState::UnrevokedPartitions)
                    .then(|| now_ms.saturating_add(i64::from(meta.rebalance_timeout_ms.max(0)))),
                // The member may not have heard its latest assignment: say it again.
                last_sent: None,
                left_static,
            };
            if let Some(regex) = &meta.subscribed_topic_regex {
                // A regex that no longer compiles subscribes to nothing.
                if let Ok(re) = compile_subscription(regex) {
                    g.regexes.insert(regex.clone(), re);
                }
            }
            if let Some(instance) = meta.instance_id {
                g.static_members.insert(instance, member_id.clone());
            }
            if let Some(t) = self.targets.get(&member_id) {
                g.target.insert(member_id.clone(), from_topic_partitions(t));
            }
            g.members.insert(member_id, member);
        }
        g.release_double_claims();
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

    fn join(member: &str, names: &[&str]) -> HeartbeatRequest {
        HeartbeatRequest {
            group_id: "g".into(),
            member_id: member.into(),
            member_epoch: 0,
            rebalance_timeout_ms: 10_000,
            subscribed_topic_names: Some(names.iter().map(|s| s.to_string()).collect()),
            owned: Some(Assignment::new()),
            ..HeartbeatRequest::default()
        }
    }

    fn beat(member: &str, epoch: i32, owned: Option<&Assignment>) -> HeartbeatRequest {
        HeartbeatRequest {
            group_id: "g".into(),
            member_id: member.into(),
            member_epoch: epoch,
            rebalance_timeout_ms: -1,
            owned: owned.cloned(),
            ..HeartbeatRequest::default()
        }
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    fn step(
        g: &mut ConsumerGroup,
        req: &HeartbeatRequest,
        t: &Topics,
        now: i64,
    ) -> Result<HeartbeatResponse, GroupError> {
        g.heartbeat(
            &ConsumerGroupConfig::default(),
            req,
            t,
            || "generated".into(),
            now,
        )
    }

    #[test]
    fn one_member_gets_every_partition_and_is_stable() {
        let t = topics(&[("a", 3)]);
        let mut g = ConsumerGroup::new("g");
        let r = step(&mut g, &join("m1", &["a"]), &t, 0).expect("join");
        assert_eq!(r.member_epoch, 1, "the join moved the epoch once");
        assert_eq!(count(r.assignment.as_ref().expect("assignment")), 3);
        assert_eq!(g.state(), ConsumerGroupState::Stable);
        // A plain heartbeat repeats nothing.
        let owned = r.assignment.clone();
        let r2 = step(&mut g, &beat("m1", r.member_epoch, owned.as_ref()), &t, 10).expect("beat");
        assert_eq!(r2.assignment, None);
    }

    #[test]
    fn each_group_epoch_bump_counts_as_a_rebalance() {
        // The counter is process-wide and the classic-group tests running beside this one move it
        // too, by a handful each: JOINS joins make a delta no other test comes near.
        const JOINS: u64 = 2_000;
        let rebalances = || millrace_metrics::global().group_rebalances.get();
        let t = topics(&[("a", 2)]);
        let before = rebalances();
        for _ in 0..JOINS {
            let mut g = ConsumerGroup::new("g");
            step(&mut g, &join("m1", &["a"]), &t, 0).expect("join");
        }
        assert!(
            rebalances() - before >= JOINS,
            "every join moved a group epoch and counted"
        );
    }

    #[test]
    fn partitions_move_only_after_the_owner_revokes() {
        let t = topics(&[("a", 4)]);
        let mut g = ConsumerGroup::new("g");
        let r1 = step(&mut g, &join("m1", &["a"]), &t, 0).expect("m1");
        let m1_owned = r1.assignment.clone().expect("m1 assignment");
        let r2 = step(&mut g, &join("m2", &["a"]), &t, 1).expect("m2");
        // m2 is at the new epoch but its partitions are still m1's.
        assert_eq!(count(r2.assignment.as_ref().expect("m2 assignment")), 0);
        assert_eq!(g.state(), ConsumerGroupState::Reconciling);
        // m1 is told to keep half: it must revoke before its epoch moves.
        let r1b =
            step(&mut g, &beat("m1", r1.member_epoch, Some(&m1_owned)), &t, 2).expect("m1 beat");
        let kept = r1b.assignment.expect("m1 reduced assignment");
        assert_eq!(count(&kept), 2);
        assert_eq!(
            r1b.member_epoch, r1.member_epoch,
            "epoch waits for the revocation"
        );
        // m2 still gets nothing while m1 has not released.
        let r2b = step(
            &mut g,
            &beat("m2", r2.member_epoch, Some(&Assignment::new())),
            &t,
            3,
        )
        .expect("m2 beat");
        assert_eq!(r2b.assignment, None);
        // m1 revokes: it moves to the new epoch; m2 then gets the freed partitions.
        let r1c =
            step(&mut g, &beat("m1", r1.member_epoch, Some(&kept)), &t, 4).expect("m1 revoked");
        assert_eq!(r1c.member_epoch, r2.member_epoch);
        let r2c = step(
            &mut g,
            &beat("m2", r2.member_epoch, Some(&Assignment::new())),
            &t,
            5,
        )
        .expect("m2 gets");
        let got = r2c.assignment.expect("m2 partitions");
        assert_eq!(count(&got), 2);
        assert!(!intersects(&got, &kept), "no partition owned twice");
        assert_eq!(g.state(), ConsumerGroupState::Stable);
    }

    #[test]
    fn wrong_epochs_are_fenced_and_unknown_members_refused() {
        let t = topics(&[("a", 2)]);
        let mut g = ConsumerGroup::new("g");
        let r = step(&mut g, &join("m1", &["a"]), &t, 0).expect("join");
        assert_eq!(
            step(&mut g, &beat("m1", r.member_epoch + 5, None), &t, 1),
            Err(GroupError::FencedMemberEpoch)
        );
        assert_eq!(
            step(&mut g, &beat("nobody", 3, None), &t, 1),
            Err(GroupError::UnknownMemberId)
        );
        assert_eq!(g.validate_commit("m1", r.member_epoch), Ok(()));
        assert_eq!(
            g.validate_commit("m1", r.member_epoch - 1),
            Err(GroupError::StaleMemberEpoch)
        );
        assert_eq!(g.validate_commit("", -1), Err(GroupError::UnknownMemberId));
    }

    #[test]
    fn session_timeout_and_leave_free_partitions() {
        let t = topics(&[("a", 2)]);
        let mut g = ConsumerGroup::new("g");
        let r1 = step(&mut g, &join("m1", &["a"]), &t, 0).expect("m1");
        step(&mut g, &join("m2", &["a"]), &t, 0).expect("m2");
        let deadline = g.next_deadline_ms().expect("deadline");
        assert_eq!(deadline, 45_000);
        // m1 keeps beating; m2 goes silent and is removed.
        let owned = r1.assignment.clone();
        let r1b = step(
            &mut g,
            &beat("m1", r1.member_epoch, owned.as_ref()),
            &t,
            40_000,
        )
        .expect("beat");
        let kept = r1b.assignment.clone().expect("reduced");
        step(
            &mut g,
            &beat("m1", r1.member_epoch, Some(&kept)),
            &t,
            40_001,
        )
        .expect("revoked");
        assert_eq!(g.tick(46_000), vec!["m2".to_string()]);
        let epoch = g.members["m1"].member_epoch;
        let r1d = step(&mut g, &beat("m1", epoch, Some(&kept)), &t, 46_001).expect("after");
        assert_eq!(count(r1d.assignment.as_ref().expect("all back")), 2);
        let left = step(&mut g, &beat("m1", LEAVE_EPOCH, None), &t, 46_002).expect("leave");
        assert_eq!(left.member_epoch, LEAVE_EPOCH);
        assert!(g.is_empty());
        assert_eq!(g.validate_commit("", -1), Ok(()));
    }

    #[test]
    fn regex_subscription_follows_new_topics() {
        let mut g = ConsumerGroup::new("g");
        let mut req = join("m1", &[]);
        req.subscribed_topic_names = None;
        req.subscribed_topic_regex = Some("orders-.*".into());
        let t1 = topics(&[("orders-1", 1), ("other", 1)]);
        let r = step(&mut g, &req, &t1, 0).expect("join");
        assert_eq!(count(r.assignment.as_ref().expect("a")), 1);
        let t2 = topics(&[("orders-1", 1), ("other", 1), ("orders-2", 2)]);
        let owned = r.assignment.clone();
        let r2 = step(&mut g, &beat("m1", r.member_epoch, owned.as_ref()), &t2, 1).expect("beat");
        assert!(r2.member_epoch > r.member_epoch);
        assert_eq!(count(r2.assignment.as_ref().expect("grown")), 3);
        let mut bad = join("m2", &[]);
        bad.subscribed_topic_names = None;
        bad.subscribed_topic_regex = Some("(".into());
        assert!(matches!(
            step(&mut g, &bad, &t2, 2),
            Err(GroupError::InvalidRegularExpression(_))
        ));
    }

    /// What a coordinator writes after each step, replayed into a new group, gives the same
    /// members, epochs and assignments, and the members carry on without rejoining.
    #[test]
    fn records_rebuild_the_group() {
        let t = topics(&[("a", 4)]);
        let mut g = ConsumerGroup::new("g");
        let mut log: Vec<GroupRecord> = Vec::new();
        let r1 = step(&mut g, &join("m1", &["a"]), &t, 0).expect("m1");
        log.extend(g.take_records());
        let r2 = step(&mut g, &join("m2", &["a"]), &t, 1).expect("m2");
        log.extend(g.take_records());
        let owned = r1.assignment.clone();
        let r1b = step(&mut g, &beat("m1", r1.member_epoch, owned.as_ref()), &t, 2).expect("m1");
        log.extend(g.take_records());
        assert!(g.take_records().is_empty(), "nothing new");
        let mut records = ConsumerGroupRecords::default();
        for (k, v) in log.clone() {
            records.apply(&k, v);
        }
        let mut back = records
            .build("g", &ConsumerGroupConfig::default(), 10)
            .expect("group");
        assert_eq!(back.group_epoch(), g.group_epoch());
        assert_eq!(back.state(), g.state());
        for id in ["m1", "m2"] {
            assert_eq!(
                back.members[id].member_epoch, g.members[id].member_epoch,
                "{id}"
            );
            assert_eq!(back.members[id].assigned, g.members[id].assigned, "{id}");
            assert_eq!(
                back.members[id].pending_revocation,
                g.members[id].pending_revocation
            );
        }
        // m1 goes on revoking in the rebuilt group with its epoch.
        let kept = r1b.assignment.expect("reduced");
        let r = step(&mut back, &beat("m1", r1.member_epoch, Some(&kept)), &t, 11).expect("m1 on");
        assert_eq!(r.member_epoch, r2.member_epoch);
        // A leave writes tombstones; the group then rebuilds without the member.
        step(&mut back, &beat("m2", r2.member_epoch, None), &t, 12).expect("m2 on");
        step(&mut back, &beat("m2", LEAVE_EPOCH, None), &t, 13).expect("m2 leaves");
        log.extend(back.take_records());
        let mut again = ConsumerGroupRecords::default();
        for (k, v) in log {
            again.apply(&k, v);
        }
        let rebuilt = again
            .build("g", &ConsumerGroupConfig::default(), 20)
            .expect("group");
        assert_eq!(rebuilt.member_count(), 1);
        assert_eq!(rebuilt.group_epoch(), back.group_epoch());
        // Deleting writes tombstones for everything.
        let mut gone = ConsumerGroupRecords::default();
        for (k, v) in rebuilt
            .all_records()
            .into_iter()
            .chain(rebuilt.tombstones())
        {
            gone.apply(&k, v);
        }
        assert!(gone
            .build("g", &ConsumerGroupConfig::default(), 30)
            .is_none());
    }

    #[test]
    fn review_fixes_hold() {
        let t = topics(&[("a", 4)]);
        let mut g = ConsumerGroup::new("g");
        // A static member, replaced by a new incarnation after a -2 leave.
        let mut a = join("old", &["a"]);
        a.instance_id = Some("i".into());
        let ra = step(&mut g, &a, &t, 0).expect("old joins");
        let mut leave = beat("old", LEAVE_STATIC_EPOCH, None);
        leave.instance_id = Some("i".into());
        step(&mut g, &leave, &t, 1).expect("old leaves for now");
        let mut b = join("new", &["a"]);
        b.instance_id = Some("i".into());
        step(&mut g, &b, &t, 2).expect("new takes over");
        // The zombie old incarnation is fenced; its leave does not remove the new one.
        let mut zombie = beat("old", LEAVE_EPOCH, None);
        zombie.instance_id = Some("i".into());
        assert_eq!(
            step(&mut g, &zombie, &t, 3),
            Err(GroupError::FencedInstanceId)
        );
        let mut zombie_beat = beat("old", ra.member_epoch, None);
        zombie_beat.instance_id = Some("i".into());
        assert_eq!(
            step(&mut g, &zombie_beat, &t, 3),
            Err(GroupError::FencedInstanceId)
        );
        assert_eq!(g.member_count(), 1);

        // Refused heartbeats with fresh regexes do not grow the regex cache.
        for i in 0..50 {
            let mut r = beat("nobody", 3, None);
            r.subscribed_topic_regex = Some(format!("x{i}.*"));
            assert!(step(&mut g, &r, &t, 4).is_err());
        }
        assert!(g.regexes.is_empty(), "{} regexes cached", g.regexes.len());
        // A regex cannot escape its anchors.
        let mut escape = join("rx", &[]);
        escape.subscribed_topic_names = None;
        escape.subscribed_topic_regex = Some("a)|(.*".into());
        assert!(matches!(
            step(&mut g, &escape, &t, 5),
            Err(GroupError::InvalidRegularExpression(_))
        ));

        // A long rebalance timeout is clamped, not refused.
        let mut long = join("long", &["a"]);
        long.rebalance_timeout_ms = i32::MAX;
        step(&mut g, &long, &t, 6).expect("joins");
        assert_eq!(
            g.members["long"].rebalance_timeout_ms,
            REBALANCE_TIMEOUT_MS_MAX
        );
        // An oversized subscription is refused.
        let mut huge = join("huge", &[]);
        huge.subscribed_topic_names = Some(vec!["t".repeat(MEMBER_METADATA_BYTES_MAX + 1)]);
        assert!(matches!(
            step(&mut g, &huge, &t, 7),
            Err(GroupError::InvalidRequest(_))
        ));
    }

    #[test]
    fn static_leave_releases_what_it_was_revoking() {
        let t = topics(&[("a", 2)]);
        let mut g = ConsumerGroup::new("g");
        let mut s1 = join("s", &["a"]);
        s1.instance_id = Some("i".into());
        let r = step(&mut g, &s1, &t, 0).expect("s");
        step(&mut g, &join("d", &["a"]), &t, 1).expect("d");
        // s is told to give one partition up, then leaves with -2 before revoking.
        let mut sb = beat("s", r.member_epoch, r.assignment.as_ref());
        sb.instance_id = Some("i".into());
        step(&mut g, &sb, &t, 2).expect("s reduced");
        assert_eq!(g.members["s"].state, MemberState::UnrevokedPartitions);
        let mut leave = beat("s", LEAVE_STATIC_EPOCH, None);
        leave.instance_id = Some("i".into());
        step(&mut g, &leave, &t, 3).expect("s leaves for now");
        assert!(g.members["s"].pending_revocation.is_empty());
        // d gets the released partition at once.
        let epoch = g.members["d"].member_epoch;
        let rd = step(&mut g, &beat("d", epoch, Some(&Assignment::new())), &t, 4).expect("d");
        assert_eq!(count(rd.assignment.as_ref().expect("d's partition")), 1);
    }

    #[test]
    fn a_rebuild_never_gives_a_partition_to_two_members() {
        let t = topics(&[("a", 2)]);
        let mut g = ConsumerGroup::new("g");
        step(&mut g, &join("m1", &["a"]), &t, 0).expect("m1");
        let mut stale = ConsumerGroupRecords::default();
        for (k, v) in g.all_records() {
            stale.apply(&k, v);
        }
        // m1's removal is lost; m2 then holds everything at a later epoch.
        let mut later = ConsumerGroup::new("g");
        later.group_epoch = 5;
        step(&mut later, &join("m2", &["a"]), &t, 1).expect("m2");
        for (k, v) in later.all_records() {
            stale.apply(&k, v);
        }
        let rebuilt = stale
            .build("g", &ConsumerGroupConfig::default(), 2)
            .expect("group");
        let m1 = count(&rebuilt.members["m1"].assigned);
        let m2 = count(&rebuilt.members["m2"].assigned);
        assert_eq!((m1, m2), (0, 2), "the later owner keeps the partitions");
    }

    #[test]
    fn static_member_comes_back_to_its_partitions() {
        let t = topics(&[("a", 2)]);
        let mut g = ConsumerGroup::new("g");
        let mut req = join("m1", &["a"]);
        req.instance_id = Some("i1".into());
        let r = step(&mut g, &req, &t, 0).expect("join");
        let mut leave = beat("m1", LEAVE_STATIC_EPOCH, None);
        leave.instance_id = Some("i1".into());
        step(&mut g, &leave, &t, 1).expect("leave");
        let epoch = g.group_epoch();
        let mut again = join("m1b", &["a"]);
        again.instance_id = Some("i1".into());
        let r2 = step(&mut g, &again, &t, 2).expect("rejoin");
        assert_eq!(r2.member_epoch, r.member_epoch);
        assert_eq!(r2.assignment, r.assignment);
        assert_eq!(g.group_epoch(), epoch, "no rebalance");
        let mut clash = join("m1c", &["a"]);
        clash.instance_id = Some("i1".into());
        assert_eq!(
            step(&mut g, &clash, &t, 3),
            Err(GroupError::UnreleasedInstanceId)
        );
    }
}
