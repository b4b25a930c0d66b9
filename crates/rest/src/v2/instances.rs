//! REST v2's consumer instances: what Confluent's proxy keeps in a `KafkaConsumer` per instance,
//! held here in this broker's memory ([`State`]) — the instance's settings, its subscription
//! (topics, a pattern, or a manual assignment), its group membership (a KIP-848 member through
//! [`membership`]), and its fetch positions. Reading ([`Instance::read`]) fetches from the
//! positions through the partitions' leaders ([`consume::fetch`]); commits go to the group's
//! coordinator.
//!
//! Bounds: at most `millrace.rest.consumer.instances.max` instances (one more is refused with
//! 429); an instance unused for `millrace.rest.consumer.instance.timeout.ms` is closed (its
//! positions auto-committed if it auto-commits, its membership left) by one sweeper task per
//! broker that also keeps idle subscribed members heartbeating, and, between two sweeps, is
//! treated as gone when it is next asked for. Each sweep touches every instance once.
//!
//! Locking: the instance table is a `parking_lot` mutex held only to look up, insert or remove;
//! each instance has its own async mutex, held for the whole of one request (requests to one
//! instance are served one at a time, as Confluent's proxy does) and tried — never waited for —
//! by the sweeper.
//!
//! An instance belongs to the principal that created it: another principal asking for it gets
//! 40403, as if it did not exist. Instances do not survive a restart (40403 afterwards); the
//! group's committed offsets do.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use millrace_cluster::config_rest::RestConfig;
use millrace_frontend::error_codes;
use parking_lot::Mutex;
use serde_json::Value;
use tracing::debug;

use super::body::EmbeddedFormat;
use super::body::BASE64;
use crate::consume::{self, FetchLimits, FetchPosition, OffsetSpec};
use crate::error::{code, RestError};
use crate::gateway::{Caller, Gateway};
use crate::membership::{self, Committed, Member, TopicPartition};
use crate::RestApi;

/// How often the sweeper looks at the instances.
const SWEEP_INTERVAL: Duration = Duration::from_millis(500);
/// How long closing one instance (commit, leave) may take before it is dropped anyway.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Kafka's `auto.commit.interval.ms` default.
const AUTO_COMMIT_INTERVAL: Duration = Duration::from_secs(5);
/// Confluent's `consumer.request.timeout.ms` default: how long a read waits without `timeout`.
pub const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_millis(1000);
/// The longest a read may wait (`timeout` and `consumer.request.timeout.ms` are capped to it).
pub const REQUEST_TIMEOUT_MAX: Duration = Duration::from_secs(30);
/// Confluent's `consumer.request.max.bytes` default: a read's bytes of keys and values at most.
pub const READ_BYTES_MAX: i64 = 64 * 1024 * 1024;
/// How soon a member with no partitions heartbeats again while a read waits for an assignment.
const UNASSIGNED_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(250);
/// The pause after a fetch round that returned only errors.
const ERROR_BACKOFF: Duration = Duration::from_millis(50);
/// Fetch rounds in one read at most (each waits for data, so this is rarely reached).
const READ_ROUNDS_MAX: usize = 1000;
/// An instance name's bytes at most (it is a URL path segment).
pub const INSTANCE_NAME_BYTES_MAX: usize = 255;
/// A subscription pattern's bytes at most.
pub const PATTERN_BYTES_MAX: usize = 1024;
/// Topics or partitions named in one request at most.
pub const PARTITIONS_PER_REQUEST_MAX: usize = 10_000;

/// Where a partition without a committed offset starts (`auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    Earliest,
    Latest,
    /// No reset: reading such a partition is an error.
    None,
}

/// An instance's settings, from `POST /consumers/{group}`.
#[derive(Debug, Clone)]
pub struct Settings {
    pub format: EmbeddedFormat,
    pub reset: OffsetReset,
    pub auto_commit: bool,
    /// A read returns once it has this many bytes of keys and values (or its time is up).
    pub fetch_min_bytes: i64,
    /// How long a read waits without a `timeout`.
    pub request_timeout: Duration,
}

/// What an instance reads.
#[derive(Debug, Clone)]
pub enum Subscription {
    None,
    /// Group-managed partitions of these topics.
    Topics(Vec<String>),
    /// Group-managed partitions of every topic whose whole name matches; `source` as given.
    Pattern {
        source: String,
        regex: regex::Regex,
    },
    /// These partitions, chosen by the client (no group membership).
    Assigned(Vec<TopicPartition>),
}

/// One record read, in the instance's format.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RecordJson {
    pub topic: String,
    pub key: Value,
    pub value: Value,
    pub partition: i32,
    pub offset: i64,
}

/// One consumer instance.
pub struct Instance {
    pub group: String,
    pub name: String,
    pub settings: Settings,
    /// Who created it; the sweeper's calls (heartbeats, closing) are made as this caller.
    pub caller: Caller,
    subscription: Subscription,
    /// The group member while subscribed (epoch 0 until it joined).
    member: Option<Member>,
    last_heartbeat: Option<Instant>,
    /// The next offset to read, per partition read so far.
    positions: BTreeMap<TopicPartition, i64>,
    /// What auto-commit last committed (so an unchanged position is not committed again).
    auto_committed: BTreeMap<TopicPartition, i64>,
    last_auto_commit: Instant,
}

/// An instance in the table, with what the sweeper reads without locking it.
pub struct Slot {
    pub instance: Arc<tokio::sync::Mutex<Instance>>,
    principal: String,
    last_used: Mutex<Instant>,
}

impl Slot {
    fn touch(&self) {
        *self.last_used.lock() = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last_used.lock().elapsed()
    }
}

/// An instance held for one request; dropping it marks the instance used now.
pub struct InstanceGuard {
    slot: Arc<Slot>,
    guard: tokio::sync::OwnedMutexGuard<Instance>,
}

impl std::ops::Deref for InstanceGuard {
    type Target = Instance;
    fn deref(&self) -> &Instance {
        &self.guard
    }
}

impl std::ops::DerefMut for InstanceGuard {
    fn deref_mut(&mut self) -> &mut Instance {
        &mut self.guard
    }
}

impl Drop for InstanceGuard {
    fn drop(&mut self) {
        self.slot.touch();
    }
}

/// The v2 API's own state: the consumer instances this broker holds.
pub struct State {
    instances: Mutex<HashMap<(String, String), Arc<Slot>>>,
    instances_max: usize,
    timeout: Duration,
    /// The API, once the first instance started the sweeper: closes that no request carries
    /// (expiry) make their calls through it.
    api: OnceLock<Weak<RestApi>>,
}

impl State {
    pub fn new(config: &RestConfig) -> Self {
        Self {
            instances: Mutex::new(HashMap::new()),
            instances_max: config.consumer_instances_max,
            timeout: config.consumer_instance_timeout,
            api: OnceLock::new(),
        }
    }

    /// Instances held now.
    pub fn len(&self) -> usize {
        self.instances.lock().len()
    }

    /// Whether no instance is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `instance`: 409 40902 when its group already has one of that name, 429 when the
    /// broker holds its maximum (after dropping expired ones).
    pub fn insert(&self, api: &Arc<RestApi>, instance: Instance) -> Result<(), RestError> {
        self.start_sweeper(api);
        let key = (instance.group.clone(), instance.name.clone());
        let slot = Arc::new(Slot {
            principal: instance.caller.principal.clone(),
            instance: Arc::new(tokio::sync::Mutex::new(instance)),
            last_used: Mutex::new(Instant::now()),
        });
        let expired = {
            let mut table = self.instances.lock();
            let expired = if table.len() >= self.instances_max {
                self.take_expired(&mut table)
            } else {
                Vec::new()
            };
            if table.contains_key(&key) {
                return Err(RestError::new(
                    StatusCode::CONFLICT,
                    code::CONSUMER_ALREADY_EXISTS,
                    "Consumer with specified consumer ID already exists in the specified consumer \
                     group.",
                ));
            }
            if table.len() >= self.instances_max {
                return Err(RestError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    code::TOO_MANY_REQUESTS,
                    format!(
                        "This broker holds {} consumer instances, its maximum \
                         (millrace.rest.consumer.instances.max); delete one or wait for an idle \
                         one to expire.",
                        self.instances_max
                    ),
                ));
            }
            table.insert(key, slot);
            expired
        };
        self.close_all(expired);
        Ok(())
    }

    /// The instance `name` of `group` for `caller`: 40403 when there is none, when it belongs to
    /// another principal, or when it has expired.
    pub fn get(&self, group: &str, name: &str, caller: &Caller) -> Result<Arc<Slot>, RestError> {
        let key = (group.to_string(), name.to_string());
        let mut table = self.instances.lock();
        let slot = table
            .get(&key)
            .filter(|s| s.principal == caller.principal)
            .cloned()
            .ok_or_else(RestError::consumer_instance_not_found)?;
        if slot.idle_for() > self.timeout && slot.instance.try_lock().is_ok() {
            // Expired between two sweeps: the sweeper closes what it no longer finds in use, so
            // take it out here and let the next sweep see it gone.
            table.remove(&key);
            drop(table);
            self.close_all(vec![slot]);
            return Err(RestError::consumer_instance_not_found());
        }
        slot.touch();
        Ok(slot)
    }

    /// The instance locked for one request (waiting while another request holds it); it counts
    /// as used until the guard is dropped.
    pub async fn lock(
        &self,
        group: &str,
        name: &str,
        caller: &Caller,
    ) -> Result<InstanceGuard, RestError> {
        let slot = self.get(group, name, caller)?;
        let guard = slot.instance.clone().lock_owned().await;
        Ok(InstanceGuard { slot, guard })
    }

    /// Takes the instance out of the table (the caller closes it).
    pub fn remove(&self, group: &str, name: &str, caller: &Caller) -> Result<Arc<Slot>, RestError> {
        let key = (group.to_string(), name.to_string());
        let mut table = self.instances.lock();
        match table.get(&key) {
            Some(slot) if slot.principal == caller.principal => Ok(table
                .remove(&key)
                .ok_or_else(RestError::consumer_instance_not_found)?),
            _ => Err(RestError::consumer_instance_not_found()),
        }
    }

    /// Removes and returns every expired instance not in use.
    fn take_expired(&self, table: &mut HashMap<(String, String), Arc<Slot>>) -> Vec<Arc<Slot>> {
        let expired: Vec<(String, String)> = table
            .iter()
            .filter(|(_, s)| s.idle_for() > self.timeout && s.instance.try_lock().is_ok())
            .map(|(k, _)| k.clone())
            .collect();
        expired.iter().filter_map(|k| table.remove(k)).collect()
    }

    /// Starts the sweeper once: it closes expired instances and heartbeats idle members until the
    /// broker shuts down or the API is dropped.
    fn start_sweeper(&self, api: &Arc<RestApi>) {
        let weak = Arc::downgrade(api);
        if self.api.set(weak.clone()).is_err() {
            return;
        }
        tokio::spawn(sweep(weak));
    }

    /// Closes `slots` in the background, each as its creator, bounded by [`CLOSE_TIMEOUT`].
    fn close_all(&self, slots: Vec<Arc<Slot>>) {
        let Some(api) = self.api.get().cloned() else {
            return;
        };
        for slot in slots {
            let api = api.clone();
            tokio::spawn(async move {
                let mut instance = slot.instance.lock().await;
                let Some(api) = api.upgrade() else { return };
                let caller = instance.caller.clone();
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, instance.close(&api.gateway, &caller))
                    .await;
            });
        }
    }
}

/// The sweeper's loop.
async fn sweep(api: Weak<RestApi>) {
    loop {
        tokio::time::sleep(SWEEP_INTERVAL).await;
        let Some(api) = api.upgrade() else { return };
        if api
            .gateway
            .context()
            .is_ok_and(|ctx| ctx.shutdown.is_cancelled())
        {
            return;
        }
        let (expired, live) = {
            let mut table = api.v2.instances.lock();
            let expired = api.v2.take_expired(&mut table);
            let live: Vec<Arc<Slot>> = table.values().cloned().collect();
            (expired, live)
        };
        api.v2.close_all(expired);
        // Idle members keep their place in the group; a member in a request heartbeats there.
        let beats = live.into_iter().filter_map(|slot| {
            let mut instance = slot.instance.clone().try_lock_owned().ok()?;
            let gateway = &api.gateway;
            Some(async move {
                let caller = instance.caller.clone();
                if let Err(e) = instance.keep_membership(gateway, &caller, false).await {
                    debug!(group = %instance.group, instance = %instance.name, error = %e, "heartbeat failed");
                }
            })
        });
        futures::future::join_all(beats).await;
    }
}

impl Instance {
    pub fn new(group: &str, name: &str, settings: Settings, caller: Caller) -> Self {
        Self {
            group: group.to_string(),
            name: name.to_string(),
            settings,
            caller,
            subscription: Subscription::None,
            member: None,
            last_heartbeat: None,
            positions: BTreeMap::new(),
            auto_committed: BTreeMap::new(),
            last_auto_commit: Instant::now(),
        }
    }

    /// Closes the instance: its positions are committed if it auto-commits, its membership is
    /// left. Errors are logged, not returned (Confluent's `close()` does not fail a delete).
    pub async fn close(&mut self, gateway: &Gateway, caller: &Caller) {
        if self.settings.auto_commit {
            if let Err(e) = self.commit_positions(gateway, caller).await {
                debug!(group = %self.group, instance = %self.name, error = %e, "auto-commit on close failed");
            }
        }
        self.leave(gateway, caller).await;
        self.subscription = Subscription::None;
        self.positions.clear();
    }

    /// Leaves the group, if a member.
    async fn leave(&mut self, gateway: &Gateway, caller: &Caller) {
        if let Some(member) = self.member.take() {
            if member.epoch > 0 {
                if let Err(e) = membership::leave(gateway, caller, &member).await {
                    debug!(group = %self.group, instance = %self.name, error = %e, "leave failed");
                }
            }
        }
        self.last_heartbeat = None;
    }

    /// `GET …/subscription`: the topics subscribed to (a pattern's matches so far).
    pub fn subscribed_topics(&self) -> Vec<String> {
        match &self.subscription {
            Subscription::Topics(topics) => topics.clone(),
            Subscription::Pattern { .. } => self
                .member
                .as_ref()
                .map(|m| m.topics.clone())
                .unwrap_or_default(),
            Subscription::None | Subscription::Assigned(_) => Vec::new(),
        }
    }

    /// The partitions the instance reads now: its manual assignment, or what the group gave it.
    pub fn assigned(&self) -> Vec<TopicPartition> {
        match &self.subscription {
            Subscription::Assigned(partitions) => partitions.clone(),
            Subscription::Topics(_) | Subscription::Pattern { .. } => self
                .member
                .as_ref()
                .map(|m| m.assignment.clone())
                .unwrap_or_default(),
            Subscription::None => Vec::new(),
        }
    }

    /// `POST …/subscription`: subscribes (replacing a previous subscription) and joins the
    /// group. 409 40903 while manually assigned.
    pub async fn subscribe(
        &mut self,
        gateway: &Gateway,
        caller: &Caller,
        subscription: Subscription,
    ) -> Result<(), RestError> {
        if matches!(self.subscription, Subscription::Assigned(_)) {
            return Err(illegal_state(
                "Subscription to topics, partitions and pattern are mutually exclusive",
            ));
        }
        let previous_topics = self.member.as_ref().map(|m| m.topics.clone());
        self.subscription = subscription;
        let topics = self.topics_now(gateway)?;
        match self.member.as_mut() {
            Some(member) => member.topics = topics,
            None => {
                let member_id = uuid::Uuid::new_v4().to_string();
                self.member = Some(Member::new(&self.group, &member_id, topics));
            }
        }
        if previous_topics != self.member.as_ref().map(|m| m.topics.clone()) {
            self.keep_membership(gateway, caller, true).await?;
        }
        Ok(())
    }

    /// `DELETE …/subscription`: leaves the group and forgets the subscription and positions
    /// (committing them first when auto-committing).
    pub async fn unsubscribe(&mut self, gateway: &Gateway, caller: &Caller) {
        if self.settings.auto_commit && self.member.is_some() {
            if let Err(e) = self.commit_positions(gateway, caller).await {
                debug!(group = %self.group, instance = %self.name, error = %e, "auto-commit on unsubscribe failed");
            }
        }
        self.leave(gateway, caller).await;
        if !matches!(self.subscription, Subscription::Assigned(_)) {
            self.subscription = Subscription::None;
        }
        self.positions.clear();
    }

    /// `POST …/assignments`: reads exactly `partitions` (positions of partitions kept stay).
    /// 409 40903 while subscribed.
    pub fn assign(&mut self, partitions: Vec<TopicPartition>) -> Result<(), RestError> {
        if matches!(
            self.subscription,
            Subscription::Topics(_) | Subscription::Pattern { .. }
        ) {
            return Err(illegal_state(
                "Subscription to topics, partitions and pattern are mutually exclusive",
            ));
        }
        let keep: BTreeSet<&TopicPartition> = partitions.iter().collect();
        self.positions.retain(|tp, _| keep.contains(tp));
        self.subscription = if partitions.is_empty() {
            Subscription::None
        } else {
            Subscription::Assigned(partitions)
        };
        Ok(())
    }

    /// `POST …/positions`: sets the next offset of assigned partitions (409 40903 for a
    /// partition not assigned).
    pub fn seek(&mut self, offsets: &[(TopicPartition, i64)]) -> Result<(), RestError> {
        let assigned: BTreeSet<TopicPartition> = self.assigned().into_iter().collect();
        if let Some((tp, _)) = offsets.iter().find(|(tp, _)| !assigned.contains(tp)) {
            return Err(not_assigned(tp));
        }
        for (tp, offset) in offsets {
            self.positions.insert(tp.clone(), *offset);
        }
        Ok(())
    }

    /// `POST …/positions/beginning|end` and seeks by time: each partition's offset by `spec`,
    /// from its leader.
    pub async fn seek_to(
        &mut self,
        gateway: &Gateway,
        caller: &Caller,
        partitions: &[(TopicPartition, OffsetSpec)],
    ) -> Result<(), RestError> {
        let assigned: BTreeSet<TopicPartition> = self.assigned().into_iter().collect();
        if let Some((tp, _)) = partitions.iter().find(|(tp, _)| !assigned.contains(tp)) {
            return Err(not_assigned(tp));
        }
        let lookups = partitions.iter().map(|((topic, partition), spec)| {
            consume::resolve_offset(gateway, caller, topic, *partition, *spec)
        });
        let offsets = futures::future::try_join_all(lookups).await?;
        for ((tp, _), offset) in partitions.iter().zip(offsets) {
            self.positions.insert(tp.clone(), offset);
        }
        Ok(())
    }

    /// The topics a subscription names now (a pattern's matches among the image's topics).
    fn topics_now(&self, gateway: &Gateway) -> Result<Vec<String>, RestError> {
        Ok(match &self.subscription {
            Subscription::Topics(topics) => topics.clone(),
            Subscription::Pattern { regex, .. } => {
                let image = gateway.image()?;
                image
                    .topics
                    .keys()
                    .filter(|t| !t.starts_with("__") && regex.is_match(t))
                    .cloned()
                    .collect()
            }
            Subscription::None | Subscription::Assigned(_) => Vec::new(),
        })
    }

    /// Keeps a subscribed instance's membership current: heartbeats when one is due (or when
    /// `now`), joins again when the coordinator fenced the member, and drops the positions of
    /// partitions the group took away (committing them first when auto-committing).
    pub async fn keep_membership(
        &mut self,
        gateway: &Gateway,
        caller: &Caller,
        now: bool,
    ) -> Result<(), RestError> {
        if !matches!(
            self.subscription,
            Subscription::Topics(_) | Subscription::Pattern { .. }
        ) {
            return Ok(());
        }
        let topics = self.topics_now(gateway)?;
        let Some(member) = self.member.as_mut() else {
            return Ok(());
        };
        let changed = member.topics != topics;
        member.topics = topics;
        let interval = if member.assignment.is_empty() {
            UNASSIGNED_HEARTBEAT_INTERVAL.min(member.heartbeat_interval)
        } else {
            member.heartbeat_interval
        };
        let due = self
            .last_heartbeat
            .is_none_or(|at| at.elapsed() >= interval);
        if !(now || due || changed || member.epoch == 0) {
            return Ok(());
        }
        let before: BTreeSet<TopicPartition> = member.assignment.iter().cloned().collect();
        let mut rejoined = false;
        let beat = loop {
            match membership::heartbeat(gateway, caller, member).await {
                Err(e)
                    if e.is_kafka(&[
                        error_codes::FENCED_MEMBER_EPOCH,
                        error_codes::UNKNOWN_MEMBER_ID,
                    ]) && !rejoined =>
                {
                    // The coordinator no longer knows this member (its session expired, or the
                    // coordinator lost it): join again as a new member, as a Kafka consumer does.
                    rejoined = true;
                    member.epoch = 0;
                    member.assignment.clear();
                    member.member_id = uuid::Uuid::new_v4().to_string();
                }
                other => break other,
            }
        };
        self.last_heartbeat = Some(Instant::now());
        let after: BTreeSet<TopicPartition> = member.assignment.iter().cloned().collect();
        let revoked: Vec<TopicPartition> = before.difference(&after).cloned().collect();
        if !revoked.is_empty() {
            self.positions.retain(|tp, _| after.contains(tp));
            self.auto_committed.retain(|tp, _| after.contains(tp));
        }
        beat
    }

    /// Commits every position held (what was consumed), if any changed since the last
    /// auto-commit.
    pub async fn commit_positions(
        &mut self,
        gateway: &Gateway,
        caller: &Caller,
    ) -> Result<(), RestError> {
        let changed: BTreeMap<TopicPartition, Committed> = self
            .positions
            .iter()
            .filter(|(tp, offset)| self.auto_committed.get(*tp) != Some(*offset))
            .map(|(tp, offset)| {
                (
                    tp.clone(),
                    Committed {
                        offset: *offset,
                        metadata: None,
                    },
                )
            })
            .collect();
        if changed.is_empty() {
            return Ok(());
        }
        self.commit(gateway, caller, &changed).await?;
        for (tp, c) in changed {
            self.auto_committed.insert(tp, c.offset);
        }
        self.last_auto_commit = Instant::now();
        Ok(())
    }

    /// Commits `offsets` (as given: the caller adds 1 where Confluent does) for the group, as the
    /// member when subscribed. A partition the coordinator refuses fails the commit.
    pub async fn commit(
        &mut self,
        gateway: &Gateway,
        caller: &Caller,
        offsets: &BTreeMap<TopicPartition, Committed>,
    ) -> Result<(), RestError> {
        let member = self
            .member
            .as_ref()
            .filter(|m| m.epoch > 0)
            .map(|m| (m.member_id.as_str(), m.epoch));
        let group = self.group.as_str();
        let refused = membership::commit(gateway, caller, group, member, offsets).await?;
        if let Some(((topic, partition), kafka_code)) = refused.into_iter().next() {
            return Err(RestError::kafka(
                kafka_code,
                &format!("commit of {topic}-{partition} for group {}", self.group),
            ));
        }
        Ok(())
    }

    /// `GET …/records`: records from the positions of the assigned partitions, waiting up to
    /// `timeout` for `fetch.min.bytes` of them, at most `max_bytes` of keys and values (at least
    /// one record when there is one). A partition's first read starts at the group's committed
    /// offset, else where `auto.offset.reset` says. Positions move past what is returned.
    pub async fn read(
        &mut self,
        gateway: &Gateway,
        caller: &Caller,
        timeout: Duration,
        max_bytes: i64,
    ) -> Result<Vec<RecordJson>, RestError> {
        let deadline = Instant::now() + timeout;
        let min_bytes = self.settings.fetch_min_bytes.max(1);
        let mut out = Vec::new();
        let mut bytes = 0i64;
        for round in 0..READ_ROUNDS_MAX {
            if round > 0 && Instant::now() >= deadline {
                break;
            }
            self.keep_membership(gateway, caller, false).await?;
            let assigned = self.assigned();
            if assigned.is_empty() {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                tokio::time::sleep(left.min(UNASSIGNED_HEARTBEAT_INTERVAL)).await;
                continue;
            }
            self.init_positions(gateway, caller, &assigned).await?;
            if self.settings.auto_commit && self.last_auto_commit.elapsed() >= AUTO_COMMIT_INTERVAL
            {
                if let Err(e) = self.commit_positions(gateway, caller).await {
                    debug!(group = %self.group, instance = %self.name, error = %e, "auto-commit failed");
                    self.last_auto_commit = Instant::now();
                }
            }
            let positions: Vec<FetchPosition> = assigned
                .iter()
                .filter_map(|tp| {
                    self.positions.get(tp).map(|offset| FetchPosition {
                        topic: tp.0.clone(),
                        partition: tp.1,
                        offset: *offset,
                    })
                })
                .collect();
            let limits = FetchLimits {
                max_bytes: i32::try_from(max_bytes.saturating_sub(bytes).max(1))
                    .unwrap_or(i32::MAX),
                max_wait: deadline.saturating_duration_since(Instant::now()),
                ..FetchLimits::default()
            };
            let fetched = consume::fetch(gateway, caller, &positions, limits).await?;
            let mut errors = 0;
            let mut out_of_range = Vec::new();
            for partition in fetched {
                let tp = (partition.topic.clone(), partition.partition);
                match partition.error_code {
                    error_codes::NONE => {}
                    error_codes::OFFSET_OUT_OF_RANGE => {
                        out_of_range.push(tp);
                        errors += 1;
                        continue;
                    }
                    error_codes::TOPIC_AUTHORIZATION_FAILED => {
                        return Err(RestError::kafka(
                            partition.error_code,
                            &format!("topic {}", partition.topic),
                        ))
                    }
                    _ => {
                        errors += 1;
                        continue;
                    }
                }
                let mut taken_all = true;
                for record in &partition.records {
                    let size = record.key.as_ref().map_or(0, |k| k.len())
                        + record.value.as_ref().map_or(0, |v| v.len());
                    let size = i64::try_from(size).unwrap_or(i64::MAX);
                    if !out.is_empty() && bytes.saturating_add(size) > max_bytes {
                        taken_all = false;
                        break;
                    }
                    let json = match self.to_json(&partition.topic, partition.partition, record) {
                        Ok(json) => json,
                        Err(e) if out.is_empty() => return Err(e),
                        Err(_) => {
                            // Stop before the record that cannot be read: the next read
                            // answers its error.
                            taken_all = false;
                            break;
                        }
                    };
                    out.push(json);
                    bytes = bytes.saturating_add(size);
                    self.positions
                        .insert(tp.clone(), record.offset.saturating_add(1));
                }
                if taken_all {
                    let next = partition
                        .next_offset
                        .max(self.positions.get(&tp).copied().unwrap_or(0));
                    self.positions.insert(tp, next);
                }
            }
            if !out_of_range.is_empty() {
                // As a Kafka consumer: a position outside the log is reset by auto.offset.reset
                // (not by the committed offset, which may be just as far outside).
                self.reset_positions(gateway, caller, out_of_range).await?;
            }
            if bytes >= min_bytes || (!out.is_empty() && bytes >= max_bytes) {
                break;
            }
            if errors > 0 && out.is_empty() {
                let left = deadline.saturating_duration_since(Instant::now());
                tokio::time::sleep(left.min(ERROR_BACKOFF)).await;
            }
        }
        Ok(out)
    }

    /// Gives each assigned partition without a position one: the group's committed offset, else
    /// `auto.offset.reset`'s.
    async fn init_positions(
        &mut self,
        gateway: &Gateway,
        caller: &Caller,
        assigned: &[TopicPartition],
    ) -> Result<(), RestError> {
        let missing: Vec<TopicPartition> = assigned
            .iter()
            .filter(|tp| !self.positions.contains_key(*tp))
            .cloned()
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let group = self.group.as_str();
        let committed = membership::committed(gateway, caller, group, Some(&missing)).await?;
        let mut unset = Vec::new();
        for tp in missing {
            match committed.get(&tp) {
                Some(c) => {
                    self.auto_committed.insert(tp.clone(), c.offset);
                    self.positions.insert(tp, c.offset);
                }
                None => unset.push(tp),
            }
        }
        self.reset_positions(gateway, caller, unset).await
    }

    /// Sets the positions of `unset` where `auto.offset.reset` says (an error for `none`).
    async fn reset_positions(
        &mut self,
        gateway: &Gateway,
        caller: &Caller,
        unset: Vec<TopicPartition>,
    ) -> Result<(), RestError> {
        if unset.is_empty() {
            return Ok(());
        }
        let spec = match self.settings.reset {
            OffsetReset::Earliest => OffsetSpec::Earliest,
            OffsetReset::Latest => OffsetSpec::Latest,
            OffsetReset::None => {
                let names: Vec<String> = unset.iter().map(|(t, p)| format!("{t}-{p}")).collect();
                return Err(RestError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    code::KAFKA_ERROR,
                    format!(
                        "Undefined offset with no reset policy for partitions: [{}]",
                        names.join(", ")
                    ),
                ));
            }
        };
        let lookups = unset.iter().map(|(topic, partition)| {
            consume::resolve_offset(gateway, caller, topic, *partition, spec)
        });
        let offsets = futures::future::try_join_all(lookups).await?;
        for (tp, offset) in unset.into_iter().zip(offsets) {
            self.positions.insert(tp, offset);
        }
        Ok(())
    }

    /// A record in the instance's format.
    fn to_json(
        &self,
        topic: &str,
        partition: i32,
        record: &crate::records::FetchedRecord,
    ) -> Result<RecordJson, RestError> {
        record_json(self.settings.format, topic, partition, record)
    }
}

/// A record in `format`: base64 (binary) or the JSON its bytes hold (json; bytes that are not
/// JSON are 500 50002, as Confluent's JSON deserializer fails them).
pub fn record_json(
    format: EmbeddedFormat,
    topic: &str,
    partition: i32,
    record: &crate::records::FetchedRecord,
) -> Result<RecordJson, RestError> {
    let convert = |bytes: &Option<bytes::Bytes>, what: &str| -> Result<Value, RestError> {
        let Some(bytes) = bytes else {
            return Ok(Value::Null);
        };
        match format {
            EmbeddedFormat::Json => serde_json::from_slice(bytes).map_err(|e| {
                RestError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    code::KAFKA_ERROR,
                    format!(
                        "The {what} of the record at offset {} of {topic}-{partition} is not \
                         JSON ({e}); read it with a binary consumer, or seek past it",
                        record.offset
                    ),
                )
            }),
            _ => Ok(Value::String(base64::Engine::encode(&BASE64, bytes))),
        }
    };
    Ok(RecordJson {
        topic: topic.to_string(),
        key: convert(&record.key, "key")?,
        value: convert(&record.value, "value")?,
        partition,
        offset: record.offset,
    })
}

/// Confluent's 409 40903.
pub fn illegal_state(message: &str) -> RestError {
    RestError::new(
        StatusCode::CONFLICT,
        code::ILLEGAL_STATE,
        format!("Illegal state: {message}"),
    )
}

fn not_assigned((topic, partition): &TopicPartition) -> RestError {
    illegal_state(&format!(
        "No current assignment for partition {topic}-{partition}"
    ))
}
