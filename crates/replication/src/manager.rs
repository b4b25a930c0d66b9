//! The replica manager (Kafka's `ReplicaManager`): every partition replica this broker hosts, kept
//! in line with the committed metadata image, and the operations the front end calls on them —
//! leader appends with their acks=all wait, consumer reads bounded by the high watermark, and the
//! leader's side of follower fetches. Followers' fetchers live in `fetcher.rs`.
//!
//! Where it sits: the broker applies every new metadata image through [`ReplicaManager::apply_image`];
//! the front end calls `append`, `read_for_consumer`, `read_for_follower`; the store calls back when
//! appended data became durable (`on_durable`), which may advance high watermarks.
//!
//! Invariants:
//! - a broker acts as leader only while the image names it leader *and* shows this process's
//!   registration unfenced (a restarted process never acts on its predecessor's leaderships);
//! - an acks=all append is answered only once the high watermark passed it (or with an error);
//!   `acks=1` once it is as durable as the flush policy promises;
//! - consumers read only below the high watermark, only from the leader, only with a current
//!   leader epoch (KIP-320).
//!
//! Locking: one mutex per hosted partition around its replication state; the store append happens
//! under it, so the leader epoch stamped on a batch is the one checked. Lock order: hosted
//! partition → store partition. The partition map is a short `RwLock`. No lock is held across an
//! `.await`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use millrace_cluster::config::{parse_throttled_replicas, BrokerConfig, ThrottledReplicas};
use millrace_cluster::config_broker::DynamicBrokerConfigs;
use millrace_cluster::image::{MetadataImage, SharedImage, NO_LEADER};
use millrace_controller::limits::ISR_CHANGES_PER_REQUEST_MAX;
use millrace_controller::ControllerClient;
use millrace_store::{
    AppendError, AppendInfo, Marker, PartitionLog, ReadError, ReadResult, ReadUpperBound, Records,
    Store, StoreError, TopicId, TopicPartition,
};
use parking_lot::{Mutex, RwLock};
use tokio::sync::{oneshot, watch, Notify};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use uuid::Uuid;

use crate::client::{BrokerConnection, ClientError};
use crate::client_security::InterBrokerSecurity;
use crate::driver::acks::AckError;
use crate::driver::{HostedReplica, LeadershipMove};
use crate::isr_changes::IsrChangeSender;
use crate::partition::{FollowerFetchDecision, PartitionError};
use crate::replica::{Action, AlterPartitionError, PartitionState, ReplicaConfig};
use crate::store_log::StoreLog;
use crate::throttle::ReplicationQuota;

/// Where an `acks=all` wait gets its answer.
type AckSender = oneshot::Sender<Result<(), AckError>>;

/// Settings of the replica manager (Kafka's names in the docs of each field).
#[derive(Debug, Clone)]
pub struct ReplicaManagerConfig {
    pub node_id: i32,
    /// The broker config (the registry): topic config defaults, min.insync.replicas, the
    /// replica.* settings.
    pub broker: BrokerConfig,
    /// Test only: inter-broker addresses that replace the registered ones (node id → host:port).
    pub peer_addresses: BTreeMap<i32, String>,
    /// How this broker connects to the others' inter-broker listener (TLS, SASL).
    pub inter_broker: InterBrokerSecurity,
}

/// What a waiter on a partition watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub high_watermark: i64,
    pub leader_epoch: i32,
    pub is_leader: bool,
}

/// One partition replica hosted here.
pub struct HostedPartition {
    pub tp: TopicPartition,
    pub topic_id: Uuid,
    pub log: Arc<PartitionLog>,
    state: Mutex<HostedReplica<StoreLog, AckSender>>,
    progress: watch::Sender<Progress>,
    /// Whether the topic's `leader.replication.throttled.replicas` / `follower.…` name this
    /// broker's replica (KIP-73; `throttle`), as of the last image applied.
    leader_throttled: AtomicBool,
    follower_throttled: AtomicBool,
}

impl HostedPartition {
    /// (leader, leader epoch) as this replica acts on them.
    pub fn leader(&self) -> Option<(i32, i32)> {
        self.state.lock().partition.replica().leader()
    }

    pub fn progress(&self) -> watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    /// Whether the topic's `follower.replication.throttled.replicas` names this broker's
    /// replica (KIP-73).
    pub fn follower_throttled(&self) -> bool {
        self.follower_throttled.load(Ordering::Relaxed)
    }

    /// As leader: the start of this leader epoch (ListOffsets answers OFFSET_NOT_AVAILABLE for the
    /// latest offset until the HW reaches it).
    pub fn epoch_start_offset(&self) -> Option<i64> {
        self.state.lock().partition.replica().epoch_start_offset()
    }

    /// As leader: replica set, ISR and follower progress, for the metrics.
    pub fn leader_health(&self) -> Option<crate::replica::LeaderHealth> {
        self.state.lock().partition.replica().leader_health()
    }

    /// As leader: the committed ISR.
    pub fn isr(&self) -> Option<Vec<i32>> {
        self.state
            .lock()
            .partition
            .replica()
            .isr()
            .map(<[i32]>::to_vec)
    }

    /// As a replica that may serve a consumer read: the leader, or with `follower_too` any replica
    /// that knows its leader (Kafka serves Fetch v11+ from followers, KIP-392), in
    /// `current_leader_epoch` (-1: any). The leader epoch.
    pub fn check_serving(
        &self,
        current_leader_epoch: i32,
        follower_too: bool,
    ) -> Result<i32, PartitionError> {
        if !follower_too {
            return self.check_leader(current_leader_epoch);
        }
        let state = self.state.lock();
        state.partition.check_leader_epoch(current_leader_epoch)?;
        state
            .partition
            .replica()
            .leader()
            .map(|(_, epoch)| epoch)
            .ok_or(PartitionError::NotLeader {
                leader: -1,
                leader_epoch: -1,
            })
    }

    pub fn check_leader(&self, current_leader_epoch: i32) -> Result<i32, PartitionError> {
        let state = self.state.lock();
        let epoch = state.partition.require_leader()?;
        state.partition.check_leader_epoch(current_leader_epoch)?;
        Ok(epoch)
    }
}

/// Why an operation on a partition failed (the front end maps each to a Kafka error code).
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    #[error("this broker hosts no replica of {0}")]
    UnknownPartition(TopicPartition),
    #[error("{0:?}")]
    Partition(PartitionError),
    #[error(transparent)]
    Append(#[from] AppendError),
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A leadership change of a hosted partition (the group coordinator loads and unloads
/// `__consumer_offsets` partitions on these).
#[derive(Clone)]
pub enum LeadershipChange {
    Became {
        tp: TopicPartition,
        leader_epoch: i32,
        log: Arc<PartitionLog>,
    },
    Resigned {
        tp: TopicPartition,
    },
}

type LeadershipListener = Box<dyn Fn(LeadershipChange) + Send + Sync>;

/// Every replica hosted on this broker.
pub struct ReplicaManager {
    pub(crate) config: ReplicaManagerConfig,
    store: Arc<Store>,
    pub(crate) image: Arc<SharedImage>,
    controller: Arc<ControllerClient>,
    partitions: RwLock<HashMap<TopicPartition, Arc<HostedPartition>>>,
    /// Follower partitions by leader broker.
    pub(crate) following: RwLock<BTreeMap<i32, BTreeSet<TopicPartition>>>,
    pub(crate) fetchers: Mutex<BTreeMap<i32, FetcherHandle>>,
    /// This process's broker epoch (sent in replica fetches, KIP-903), -1 before registration.
    pub(crate) broker_epoch: AtomicI64,
    /// Whether the last applied image showed this process registered and unfenced.
    current: AtomicBool,
    listeners: RwLock<Vec<LeadershipListener>>,
    /// The metadata offset of the last image applied to the replicas.
    applied: watch::Sender<u64>,
    /// ISR changes proposed by partitions led here, sent in batches by `run_isr_change_sender`.
    isr_changes: Mutex<IsrChangeSender<Arc<HostedPartition>>>,
    isr_changes_wake: Notify,
    /// The image's dynamic broker configs last seen and the broker config with them layered
    /// over the static one (`effective`): the topic defaults every log and ISR check uses, so a
    /// `kafka-configs --entity-type brokers` change applies at the next image.
    effective: RwLock<(Arc<DynamicBrokerConfigs>, Arc<BrokerConfig>)>,
    /// Replication throttles (KIP-73): what this broker sends as a leader to, and fetches as a
    /// follower for, replicas out of the ISR that their topic names.
    pub(crate) leader_quota: ReplicationQuota,
    pub(crate) follower_quota: ReplicationQuota,
    pub(crate) stop: CancellationToken,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// How often leaders check their ISR (shrink, expand retries).
const ISR_CHECK_INTERVAL: Duration = Duration::from_millis(250);
/// How long an AlterPartition may wait for the controller.
const ALTER_PARTITION_TIMEOUT: Duration = Duration::from_secs(10);

impl ReplicaManager {
    /// The store the replicas live in (log-dir APIs: DescribeLogDirs, AlterReplicaLogDirs).
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn new(
        config: ReplicaManagerConfig,
        store: Arc<Store>,
        image: Arc<SharedImage>,
        controller: Arc<ControllerClient>,
        stop: CancellationToken,
    ) -> Arc<Self> {
        let effective = config.broker.clone();
        let manager = Arc::new(Self {
            config,
            store,
            image,
            controller,
            partitions: RwLock::new(HashMap::new()),
            following: RwLock::new(BTreeMap::new()),
            fetchers: Mutex::new(BTreeMap::new()),
            broker_epoch: AtomicI64::new(-1),
            current: AtomicBool::new(false),
            listeners: RwLock::new(Vec::new()),
            applied: watch::Sender::new(0),
            isr_changes: Mutex::new(IsrChangeSender::default()),
            isr_changes_wake: Notify::new(),
            effective: RwLock::new((Arc::default(), Arc::new(effective))),
            leader_quota: ReplicationQuota::default(),
            follower_quota: ReplicationQuota::default(),
            stop,
        });
        let weak = Arc::downgrade(&manager);
        manager
            .store
            .set_durable_listener(Arc::new(move |tp: &TopicPartition| {
                if let Some(m) = weak.upgrade() {
                    m.on_durable(tp);
                }
            }));
        let ticker = Arc::clone(&manager);
        tokio::spawn(async move { ticker.run_isr_checks().await });
        let sender = Arc::clone(&manager);
        tokio::spawn(async move { sender.run_isr_change_sender().await });
        manager
    }

    /// Hosted replicas holding damaged batches the scrubber found, with their damaged ranges.
    pub fn damaged_replicas(&self) -> Vec<(TopicPartition, Vec<millrace_store::DamagedRange>)> {
        self.store
            .damaged_partitions()
            .into_iter()
            .filter_map(|tp| {
                let ranges = self.store.partition(&tp)?.damaged_ranges();
                (!ranges.is_empty()).then_some((tp, ranges))
            })
            .collect()
    }

    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    /// Subscribes to leadership changes of hosted partitions.
    pub fn on_leadership(&self, listener: LeadershipListener) {
        self.listeners.write().push(listener);
    }

    pub fn set_broker_epoch(&self, epoch: i64) {
        self.broker_epoch.store(epoch, Ordering::SeqCst);
    }

    /// This broker's epoch as last set (`set_broker_epoch`); -1 before registration.
    pub fn broker_epoch(&self) -> i64 {
        self.broker_epoch.load(Ordering::SeqCst)
    }

    /// The settings this manager runs with.
    pub fn config(&self) -> &ReplicaManagerConfig {
        &self.config
    }

    /// The committed metadata image the replicas follow.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.current()
    }

    pub fn partition(&self, tp: &TopicPartition) -> Option<Arc<HostedPartition>> {
        self.partitions.read().get(tp).cloned()
    }

    pub fn hosted(&self) -> Vec<Arc<HostedPartition>> {
        self.partitions.read().values().cloned().collect()
    }

    /// Waits (at most `timeout`) until the replicas follow an image at least as new as `offset`;
    /// whether they do.
    pub async fn wait_applied(&self, offset: u64, timeout: Duration) -> bool {
        let mut rx = self.applied.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|a| *a >= offset))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The broker config in force for `image`: the static one with the image's dynamic broker
    /// configs over it, recomputed only when those changed.
    fn effective(&self, image: &MetadataImage) -> Arc<BrokerConfig> {
        {
            let held = self.effective.read();
            if Arc::ptr_eq(&held.0, &image.broker_configs) {
                return Arc::clone(&held.1);
            }
        }
        let config = Arc::new(image.broker_configs.layer_over(&self.config.broker));
        *self.effective.write() = (Arc::clone(&image.broker_configs), Arc::clone(&config));
        config
    }

    fn replica_config(&self, image: &MetadataImage, topic: &str) -> ReplicaConfig {
        let broker = self.effective(image);
        let min_insync_replicas = image.topic(topic).map_or_else(
            || broker.min_insync_replicas(&Default::default()),
            |t| broker.min_insync_replicas(&t.configs),
        );
        ReplicaConfig {
            replica_lag_time_max_ms: self.config.broker.replica_lag_time_max_ms(),
            min_insync_replicas,
        }
    }

    /// Brings the hosted replicas in line with `image`. `current`: the image shows this process
    /// registered and unfenced (otherwise it leads nothing).
    pub fn apply_image(self: &Arc<Self>, image: &MetadataImage, current: bool) {
        let local = self.config.node_id;
        self.current.store(current, Ordering::SeqCst);
        let now = now_ms();
        let mut wanted: BTreeSet<TopicPartition> = BTreeSet::new();
        let mut changes = Vec::new();
        let mut following: BTreeMap<i32, BTreeSet<TopicPartition>> = BTreeMap::new();
        self.create_new_logs(image);
        let broker = self.effective(image);
        self.leader_quota
            .set_rate(broker.long_or_max("leader.replication.throttled.rate"));
        self.follower_quota
            .set_rate(broker.long_or_max("follower.replication.throttled.rate"));
        for topic in image.topics.values() {
            let throttled = |key: &str| {
                broker
                    .topic_value(&topic.configs, key)
                    .and_then(|v| parse_throttled_replicas(&v))
            };
            let (leader_list, follower_list) = (
                throttled("leader.replication.throttled.replicas"),
                throttled("follower.replication.throttled.replicas"),
            );
            for (index, p) in topic.partitions.iter().enumerate() {
                if !p.replicas.contains(&local) {
                    continue;
                }
                let tp = TopicPartition::new(&topic.name, i32::try_from(index).unwrap_or(i32::MAX));
                wanted.insert(tp.clone());
                let hosted = match self.ensure_hosted(&tp, topic.topic_id, image) {
                    Ok(h) => h,
                    Err(e) => {
                        warn!(partition = %tp, error = %e, "cannot host replica");
                        continue;
                    }
                };
                let state = PartitionState {
                    leader: p.leader,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: p.partition_epoch,
                    isr: p.isr.clone(),
                    replicas: p.replicas.clone(),
                };
                let index_i32 = i32::try_from(index).unwrap_or(i32::MAX);
                let named = |list: &Option<ThrottledReplicas>| {
                    list.as_ref().is_some_and(|l| l.contains(index_i32, local))
                };
                hosted
                    .leader_throttled
                    .store(named(&leader_list), Ordering::Relaxed);
                hosted
                    .follower_throttled
                    .store(named(&follower_list), Ordering::Relaxed);
                let config = self.replica_config(image, &topic.name);
                let mut slot = hosted.state.lock();
                let inactive = |b: i32| !image.is_active(b);
                match slot.on_metadata(state, current, config, now, inactive) {
                    Ok(outcome) => {
                        if outcome.epoch_changed || outcome.leadership.is_some() {
                            // Parked fetches answer now (NOT_LEADER_OR_FOLLOWER,
                            // FENCED_LEADER_EPOCH, or the new leader's data), not at their deadline.
                            hosted.log.wake_watchers();
                        }
                        match outcome.leadership {
                            Some(LeadershipMove::Became { leader_epoch }) => {
                                info!(partition = %tp, leader_epoch, "became leader");
                                changes.push(LeadershipChange::Became {
                                    tp: tp.clone(),
                                    leader_epoch,
                                    log: Arc::clone(&hosted.log),
                                });
                            }
                            Some(LeadershipMove::Resigned) => {
                                info!(partition = %tp, leader = p.leader, leader_epoch = p.leader_epoch, "resigned leadership");
                                changes.push(LeadershipChange::Resigned { tp: tp.clone() });
                            }
                            None => {}
                        }
                        self.process(&hosted, &mut slot, outcome.actions);
                    }
                    Err(e) => warn!(partition = %tp, error = ?e, "cannot apply partition state"),
                }
                let is_leader = slot.partition.is_leader();
                let (leader_now, epoch_now) =
                    slot.partition.replica().leader().unwrap_or((NO_LEADER, -1));
                if !is_leader && leader_now >= 0 && leader_now != local {
                    following.entry(leader_now).or_default().insert(tp.clone());
                }
                hosted.progress.send_modify(|pr| {
                    pr.leader_epoch = epoch_now;
                    pr.is_leader = is_leader;
                    pr.high_watermark = slot.partition.replica().high_watermark();
                });
                drop(slot);
                let log_config = self.effective(image).log_config(&topic.configs);
                if hosted.log.config() != log_config {
                    hosted.log.update_config(log_config);
                }
            }
        }
        // Replicas no longer assigned here: stop, and delete their logs.
        let gone: Vec<Arc<HostedPartition>> = self
            .partitions
            .read()
            .values()
            .filter(|h| !wanted.contains(&h.tp))
            .cloned()
            .collect();
        for hosted in gone {
            self.partitions.write().remove(&hosted.tp);
            let (was_leader, refused) = {
                let mut slot = hosted.state.lock();
                (
                    slot.partition.is_leader(),
                    slot.acks.fail_all(AckError::Storage),
                )
            };
            deliver(refused);
            hosted.progress.send_modify(|p| p.is_leader = false);
            if was_leader {
                changes.push(LeadershipChange::Resigned {
                    tp: hosted.tp.clone(),
                });
            }
            info!(partition = %hosted.tp, "replica no longer assigned here; deleting its log");
            match self.store.delete_partition(&hosted.tp) {
                Ok(()) | Err(StoreError::UnknownPartition(_)) => {}
                Err(e) => warn!(partition = %hosted.tp, error = %e, "deleting log failed"),
            }
        }
        *self.following.write() = following;
        self.update_fetchers();
        self.applied.send_replace(image.offset);
        let listeners = self.listeners.read();
        for change in changes {
            for l in listeners.iter() {
                l(change.clone());
            }
        }
    }

    /// Creates, in one batch, the logs of every replica assigned here that has none yet (a new
    /// topic's partitions): the store makes a large batch durable with one file-system sync
    /// instead of several syncs per partition. `ensure_hosted` then finds them; a failure here
    /// leaves it to create that log on its own.
    fn create_new_logs(&self, image: &MetadataImage) {
        let local = self.config.node_id;
        let mut batch = Vec::new();
        for topic in image.topics.values() {
            for (index, p) in topic.partitions.iter().enumerate() {
                if !p.replicas.contains(&local) {
                    continue;
                }
                let tp = TopicPartition::new(&topic.name, i32::try_from(index).unwrap_or(i32::MAX));
                if self.partitions.read().contains_key(&tp) || self.store.partition(&tp).is_some() {
                    continue;
                }
                let config = self.effective(image).log_config(&topic.configs);
                let id = TopicId::from_bytes(topic.topic_id.into_bytes());
                batch.push((tp, config, id));
            }
        }
        if batch.len() < 2 {
            return;
        }
        let names: Vec<TopicPartition> = batch.iter().map(|(tp, _, _)| tp.clone()).collect();
        for (tp, result) in names.iter().zip(self.store.create_partitions(batch)) {
            if let Err(e) = result {
                warn!(partition = %tp, error = %e, "creating log in a batch failed");
            }
        }
    }

    fn ensure_hosted(
        &self,
        tp: &TopicPartition,
        topic_id: Uuid,
        image: &MetadataImage,
    ) -> Result<Arc<HostedPartition>, StoreError> {
        if let Some(h) = self.partitions.read().get(tp) {
            if h.topic_id == topic_id {
                return Ok(Arc::clone(h));
            }
        }
        // A log of an older topic of the same name goes first.
        if let Some(old) = self.partitions.write().remove(tp) {
            warn!(partition = %tp, old = %old.topic_id, new = %topic_id, "topic recreated; replacing the old log");
            let _ = self.store.delete_partition(tp);
        }
        let config = image
            .topic(&tp.topic)
            .map(|t| self.effective(image).log_config(&t.configs))
            .unwrap_or_default();
        let id = TopicId::from_bytes(topic_id.into_bytes());
        let log = match self.store.partition(tp) {
            Some(log) if log.topic_id() == Some(id) => log,
            Some(log) if log.topic_id().is_none() => {
                log.assign_topic_id(id)?;
                log
            }
            Some(_) => {
                warn!(partition = %tp, "log on disk belongs to another topic id; replacing it");
                self.store.delete_partition(tp)?;
                self.store.create_partition(tp, config, id)?
            }
            None => self.store.create_partition(tp, config, id)?,
        };
        let part = HostedReplica::new(
            self.config.node_id,
            StoreLog(Arc::clone(&log)),
            self.replica_config(image, &tp.topic),
        );
        let hosted = Arc::new(HostedPartition {
            tp: tp.clone(),
            topic_id,
            progress: watch::Sender::new(Progress {
                high_watermark: log.high_watermark(),
                leader_epoch: -1,
                is_leader: false,
            }),
            log,
            state: Mutex::new(part),
            leader_throttled: AtomicBool::new(false),
            follower_throttled: AtomicBool::new(false),
        });
        self.partitions
            .write()
            .insert(tp.clone(), Arc::clone(&hosted));
        Ok(hosted)
    }

    /// Carries out the replica machine's actions through the driver (`HostedReplica::after`):
    /// high watermark moves wake watchers, ISR changes go to the sender, released acks answer.
    pub(crate) fn process(
        &self,
        hosted: &Arc<HostedPartition>,
        slot: &mut HostedReplica<StoreLog, AckSender>,
        actions: Vec<Action>,
    ) {
        let broker_epoch = self.broker_epoch.load(Ordering::SeqCst);
        let after = slot.after(
            actions,
            (hosted.topic_id, hosted.tp.partition),
            (broker_epoch >= 0).then_some(broker_epoch),
            now_ms(),
        );
        if let Some(hw) = after.high_watermark {
            hosted.progress.send_modify(|p| p.high_watermark = hw);
        }
        if !after.proposals.is_empty() {
            let mut sender = self.isr_changes.lock();
            for proposal in after.proposals {
                let change = &proposal.change;
                info!(partition = %hosted.tp, isr = ?change.new_isr, leader_epoch = change.leader_epoch, partition_epoch = change.partition_epoch, "proposing ISR change");
                sender.propose(proposal, Arc::clone(hosted));
            }
            drop(sender);
            self.isr_changes_wake.notify_one();
        }
        deliver(after.acks);
    }

    /// Sends the ISR changes proposed here, every pending one in one request, one request at a
    /// time (`isr_changes.rs`), and hands each partition its answer.
    async fn run_isr_change_sender(self: Arc<Self>) {
        loop {
            let woken = self.isr_changes_wake.notified();
            let request = self
                .isr_changes
                .lock()
                .next_request(self.config.node_id, ISR_CHANGES_PER_REQUEST_MAX);
            let Some(request) = request else {
                tokio::select! {
                    _ = self.stop.cancelled() => return,
                    _ = woken => continue,
                }
            };
            let response = self
                .controller
                .request(request, ALTER_PARTITION_TIMEOUT)
                .await;
            let answered = self.isr_changes.lock().on_response(response.clone());
            if answered
                .iter()
                .all(|(_, (r, _))| matches!(r, Err(AlterPartitionError::Retriable)))
            {
                warn!(changes = answered.len(), answer = ?response, "ISR changes not answered; will retry");
            }
            for (hosted, (result, refused)) in answered {
                if let Some(error) = refused {
                    info!(partition = %hosted.tp, %error, "ISR change refused");
                }
                let mut slot = hosted.state.lock();
                let actions = slot.partition.on_alter_partition(result, now_ms());
                self.process(&hosted, &mut slot, actions);
            }
        }
    }

    /// The store made appended data of `tp` durable.
    pub fn on_durable(self: &Arc<Self>, tp: &TopicPartition) {
        let Some(hosted) = self.partition(tp) else {
            return;
        };
        let mut slot = hosted.state.lock();
        if !slot.partition.is_leader() {
            return;
        }
        let actions = slot.partition.on_local_durable();
        self.process(&hosted, &mut slot, actions);
    }

    async fn run_isr_checks(self: Arc<Self>) {
        let mut tick = tokio::time::interval(ISR_CHECK_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let now = now_ms();
            for hosted in self.hosted() {
                let mut slot = hosted.state.lock();
                let actions = if slot.partition.is_leader() {
                    slot.partition.tick(now)
                } else {
                    Vec::new()
                };
                if !actions.is_empty() || !slot.acks.is_empty() {
                    // (Also answers the acks=all waits whose deadline passed.)
                    self.process(&hosted, &mut slot, actions);
                }
            }
        }
    }

    /// Appends producer batches as leader. Returns the append's result and what to wait for before
    /// answering (acks=all: the HW; acks=1: durability; acks=0: nothing).
    pub fn append(
        self: &Arc<Self>,
        tp: &TopicPartition,
        records: impl AsRef<[u8]>,
        acks: i16,
    ) -> Result<(AppendInfo, Option<AckWait>), ReplicaError> {
        // A client's produce stops at the low-water mark (`millrace.log.dir.min.free.bytes`);
        // the coordinators' appends and replication go on until the disk is really full.
        // (Leaders only: a follower's answer stays NOT_LEADER_OR_FOLLOWER.)
        if let Some(hosted) = self.partition(tp) {
            if hosted.progress.borrow().is_leader {
                hosted
                    .log
                    .check_free_space(self.config.broker.log_dir_min_free_bytes())?;
                // Tiered storage: the object store is behind by more than
                // `millrace.remote.storage.max.pending.bytes`.
                hosted.log.check_upload_backlog()?;
            }
        }
        self.append_in_epoch(tp, records, acks, None)
    }

    /// `append`, refused with NotLeader unless this replica leads in exactly `leader_epoch` (the
    /// coordinators' appends: their state was loaded in that epoch).
    pub fn append_in_epoch(
        self: &Arc<Self>,
        tp: &TopicPartition,
        records: impl AsRef<[u8]>,
        acks: i16,
        leader_epoch: Option<i32>,
    ) -> Result<(AppendInfo, Option<AckWait>), ReplicaError> {
        self.append_as_leader(tp, acks, leader_epoch, |log, epoch| {
            log.append(records, epoch)
        })
    }

    /// Appends a transaction marker as the partition's leader, acks=all (Kafka's coordinator
    /// origin): committed once the wait returns.
    pub fn append_marker(
        self: &Arc<Self>,
        tp: &TopicPartition,
        producer_id: i64,
        producer_epoch: i16,
        marker: Marker,
    ) -> Result<(AppendInfo, Option<AckWait>), ReplicaError> {
        self.append_as_leader(tp, -1, None, |log, epoch| {
            let offset = log.append_marker(producer_id, producer_epoch, marker, epoch)?;
            Ok(AppendInfo {
                base_offset: offset,
                last_offset: offset,
                log_append_time_ms: -1,
                log_start_offset: log.log_start_offset(),
                duplicate: false,
            })
        })
    }

    fn append_as_leader(
        self: &Arc<Self>,
        tp: &TopicPartition,
        acks: i16,
        leader_epoch: Option<i32>,
        append: impl FnOnce(&PartitionLog, i32) -> Result<AppendInfo, AppendError>,
    ) -> Result<(AppendInfo, Option<AckWait>), ReplicaError> {
        let hosted = self
            .partition(tp)
            .ok_or_else(|| ReplicaError::UnknownPartition(tp.clone()))?;
        let acks_all = acks == -1;
        let mut slot = hosted.state.lock();
        let epoch = slot
            .partition
            .check_append(acks_all)
            .map_err(ReplicaError::Partition)?;
        if leader_epoch.is_some_and(|e| e != epoch) {
            return Err(ReplicaError::Partition(PartitionError::NotLeader {
                leader: self.config.node_id,
                leader_epoch: epoch,
            }));
        }
        let info = append(&hosted.log, epoch)?;
        if !info.duplicate {
            // Under `never` (or an already durable duplicate) the durable end moved here.
            let actions = slot.partition.on_local_durable();
            self.process(&hosted, &mut slot, actions);
        }
        drop(slot);
        if !info.duplicate {
            hosted.log.wake_log_end_watchers();
        }
        let wait = match acks {
            0 => None,
            -1 => Some(AckWait::HighWatermark {
                hosted: Arc::clone(&hosted),
                offset: info.last_offset.saturating_add(1),
                leader_epoch: epoch,
            }),
            _ => Some(AckWait::Durable {
                log: Arc::clone(&hosted.log),
                offset: info.last_offset.saturating_add(1),
            }),
        };
        Ok((info, wait))
    }

    /// A consumer read: the leader (with `follower_too`, a follower as well: Fetch v11+), current
    /// leader epoch, below this replica's high watermark. Batches already checked come back as a
    /// file slice to send as they are (see `PartitionLog::read_records`).
    #[allow(clippy::too_many_arguments)]
    pub fn read_for_consumer(
        &self,
        tp: &TopicPartition,
        current_leader_epoch: i32,
        fetch_offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
        read_committed: bool,
        follower_too: bool,
    ) -> Result<ReadResult<Records>, ReplicaError> {
        let hosted = self
            .partition(tp)
            .ok_or_else(|| ReplicaError::UnknownPartition(tp.clone()))?;
        hosted
            .check_serving(current_leader_epoch, follower_too)
            .map_err(ReplicaError::Partition)?;
        let bound = if read_committed {
            ReadUpperBound::LastStable
        } else {
            ReadUpperBound::HighWatermark
        };
        Ok(hosted
            .log
            .read_records(fetch_offset, max_bytes, bound, min_one_batch)?)
    }

    /// The leader's side of a follower fetch: accounts the follower's position (which may move the
    /// HW and the ISR) and reads from it up to the log end, or says where the follower diverges.
    #[allow(clippy::too_many_arguments)]
    pub fn read_for_follower(
        self: &Arc<Self>,
        tp: &TopicPartition,
        replica_id: i32,
        replica_broker_epoch: i64,
        current_leader_epoch: i32,
        fetch_offset: i64,
        last_fetched_epoch: i32,
        max_bytes: usize,
    ) -> Result<FollowerRead, ReplicaError> {
        let hosted = self
            .partition(tp)
            .ok_or_else(|| ReplicaError::UnknownPartition(tp.clone()))?;
        let image = self.image.current();
        let eligible = image.broker(replica_id).is_some_and(|b| {
            b.is_active() && (replica_broker_epoch < 0 || b.broker_epoch == replica_broker_epoch)
        });
        let mut slot = hosted.state.lock();
        let (decision, actions) = slot
            .partition
            .on_follower_fetch(
                replica_id,
                replica_broker_epoch,
                current_leader_epoch,
                fetch_offset,
                last_fetched_epoch,
                eligible,
                now_ms(),
            )
            .map_err(ReplicaError::Partition)?;
        self.process(&hosted, &mut slot, actions);
        drop(slot);
        let log = &hosted.log;
        match decision {
            FollowerFetchDecision::Diverging { epoch, end_offset } => Ok(FollowerRead {
                records: Bytes::new(),
                high_watermark: log.high_watermark(),
                log_start_offset: log.log_start_offset(),
                log_end_offset: log.log_end_offset(),
                diverging: Some((epoch, end_offset)),
            }),
            FollowerFetchDecision::Serve { high_watermark } => {
                // KIP-73: a throttled replica out of the ISR gets no records while the leader's
                // bound is exceeded (its position above still counts).
                let throttled = hosted.leader_throttled.load(Ordering::Relaxed)
                    && !image
                        .partition(&tp.topic, tp.partition)
                        .is_some_and(|p| p.isr.contains(&replica_id));
                let now = now_ms();
                let records = if fetch_offset >= log.log_end_offset()
                    || (throttled && self.leader_quota.exceeded(now))
                {
                    Bytes::new()
                } else {
                    let records = log
                        .read(fetch_offset, max_bytes, ReadUpperBound::LogEnd, true)?
                        .records;
                    if throttled {
                        self.leader_quota.record(records.len(), now);
                    }
                    records
                };
                Ok(FollowerRead {
                    records,
                    high_watermark,
                    log_start_offset: log.log_start_offset(),
                    log_end_offset: log.log_end_offset(),
                    diverging: None,
                })
            }
        }
    }

    /// The leader of `tp` in the committed image (`NO_LEADER` while it has none); `None` when the
    /// partition is not in the image.
    pub fn leader_of(&self, tp: &TopicPartition) -> Option<i32> {
        self.image
            .current()
            .topic(&tp.topic)
            .and_then(|t| t.partition(tp.partition))
            .map(|p| p.leader)
    }

    /// A new connection to another broker's inter-broker listener at `addr`, with this broker's
    /// inter-broker security.
    pub async fn connect_to(
        &self,
        addr: &str,
        client_id: &str,
        timeout: Duration,
    ) -> Result<BrokerConnection, ClientError> {
        BrokerConnection::connect(addr, client_id, timeout, &self.config.inter_broker).await
    }

    /// Address of `node`'s Kafka listener for inter-broker traffic.
    pub fn broker_address(&self, node: i32) -> Option<String> {
        if let Some(a) = self.config.peer_addresses.get(&node) {
            return Some(a.clone());
        }
        self.image
            .current()
            .broker(node)
            .map(|b| format!("{}:{}", b.host, b.port))
    }

    /// Follower partitions of `leader` with their positions.
    pub(crate) fn following(&self, leader: i32) -> Vec<Arc<HostedPartition>> {
        let set = self
            .following
            .read()
            .get(&leader)
            .cloned()
            .unwrap_or_default();
        set.iter().filter_map(|tp| self.partition(tp)).collect()
    }

    pub(crate) fn lock_partition<'a>(
        &self,
        hosted: &'a HostedPartition,
    ) -> parking_lot::MutexGuard<'a, HostedReplica<StoreLog, AckSender>> {
        hosted.state.lock()
    }
}

/// A running fetcher task (`fetcher.rs`): how to wake it and how to stop it.
pub(crate) struct FetcherHandle {
    pub(crate) wake: Arc<Notify>,
    pub(crate) stop: CancellationToken,
}

/// What an append waits for before its answer.
pub enum AckWait {
    HighWatermark {
        hosted: Arc<HostedPartition>,
        offset: i64,
        leader_epoch: i32,
    },
    Durable {
        log: Arc<PartitionLog>,
        offset: i64,
    },
}

impl AckWait {
    /// Resolves when the append may be acknowledged, or with why not.
    pub async fn wait(self, timeout: Duration) -> Result<(), AckError> {
        match self {
            AckWait::Durable { log, offset } => {
                match tokio::time::timeout(timeout, log.wait_durable(offset)).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(_)) => Err(AckError::Storage),
                    Err(_) => Err(AckError::Timeout),
                }
            }
            AckWait::HighWatermark {
                hosted,
                offset,
                leader_epoch,
            } => {
                let (tx, mut rx) = oneshot::channel();
                let timeout_ms = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
                let id = {
                    let mut slot = hosted.state.lock();
                    let now = now_ms();
                    let id =
                        slot.acks
                            .add(tx, leader_epoch, offset, now.saturating_add(timeout_ms));
                    deliver(slot.release_acks(now));
                    id
                };
                let log = Arc::clone(&hosted.log);
                // The log going offline (or deleted) ends the wait at once.
                let failed = async move {
                    if log.wait_durable(offset).await.is_err() {
                        return;
                    }
                    std::future::pending::<()>().await
                };
                let given_up = tokio::select! {
                    answer = &mut rx => return answer.unwrap_or(Err(AckError::Storage)),
                    _ = failed => AckError::Storage,
                    _ = tokio::time::sleep(timeout) => AckError::Timeout,
                };
                // Take the wait back, unless the driver answered it meanwhile.
                if hosted.state.lock().acks.remove(id).is_some() {
                    return Err(given_up);
                }
                rx.try_recv().unwrap_or(Err(given_up))
            }
        }
    }
}

/// Hands `acks=all` answers to their waiters (a waiter that gave up is gone; nothing to do).
fn deliver(answers: Vec<(AckSender, Result<(), AckError>)>) {
    for (waiter, result) in answers {
        let _ = waiter.send(result);
    }
}

/// What the leader sends a follower for one partition.
#[derive(Debug, Clone)]
pub struct FollowerRead {
    pub records: Bytes,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// (epoch, end offset) when the follower must truncate.
    pub diverging: Option<(i32, i64)>,
}

#[cfg(test)]
mod tests;
