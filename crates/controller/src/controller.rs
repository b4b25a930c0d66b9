//! The controller's state machine (Kafka's `QuorumController` decisions: `ClusterControlManager`,
//! `ReplicationControlManager`, `BrokerHeartbeatManager`, `ProducerIdControlManager`): given the
//! committed metadata image and one request (or a clock tick), decide which records to commit and
//! what to answer once they are committed.
//!
//! Where it sits: the service (`service.rs`) runs on the node that leads the metadata quorum; it
//! feeds requests from brokers and ticks through [`Controller::handle`] / [`Controller::tick`] one
//! at a time, commits the returned records (one log entry, or a metadata transaction of several when
//! they are large: `entries.rs`), waits until they are applied to the
//! image, and only then answers and takes the next request. So every decision reads an image that
//! already contains every earlier decision.
//!
//! Invariants it keeps (each with a test below or in `partition_change.rs`):
//! - a fenced or shutting-down broker leads nothing and joins no ISR (KIP-841);
//! - a broker whose session expired (`broker.session.timeout.ms` without a heartbeat) is fenced,
//!   and its leaderships move in the same decision; time the controller itself did not run (a
//!   gap of `CONTROLLER_STALL_MS` or more between ticks) does not count against any session, so
//!   a controller resuming from a stop does not fence every broker at once;
//! - leader epochs only rise (a leader change always raises it; see `partition_change.rs`);
//! - an AlterPartition is applied only if its leader epoch and partition epoch are current and
//!   every new ISR member is active with the broker epoch the leader saw (KIP-903);
//! - a reassignment (KIP-455) completes only once every target replica is in the ISR, so no
//!   replica leaves before the target set holds every committed record (`partition_change.rs`);
//! - the automatic leader rebalance (`auto.leader.rebalance.enable`) runs only in a tick that
//!   decided nothing else, so its preferred elections never race another change of the same
//!   partition within one decision.
//!
//! Pure: no I/O, no clock (time comes in as `now_ms`), randomness (topic ids) from an injected
//! generator — so a seeded simulator can drive it.
//!
//! Soft state (not in the log, rebuilt when a node becomes the active controller): the last
//! heartbeat time of each broker, and when the next leader-imbalance check is due.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use millrace_cluster::acl::{AclFilter, StandardAcl};
use millrace_cluster::config::{BrokerConfig, ConfigChange, ConfigOp, TopicConfigs};
use millrace_cluster::config_broker::{
    self as config_broker, BrokerConfigError, DynamicBrokerConfigs,
};
use millrace_cluster::config_group::GroupConfigs;
use millrace_cluster::image::{MetadataImage, PartitionRegistration, TopicImage, NO_LEADER};
use millrace_cluster::listeners::ListenerAddress;
use millrace_cluster::records::{MetadataRecord, PartitionChangeBuilder};
use millrace_cluster::scram::{
    ScramCredential, ScramMechanism, SCRAM_ITERATIONS_MAX, SCRAM_ITERATIONS_MIN,
};
use millrace_cluster::validate_topic_name;
use tracing::{info, warn};
use uuid::Uuid;

use crate::limits::{
    CONTROLLER_STALL_MS, GROUPS_WITH_CONFIGS_MAX, GROUP_CONFIG_BYTES_MAX,
    ISR_CHANGES_PER_REQUEST_MAX, LEADER_REBALANCE_ELECTIONS_MAX,
    OFFLINE_REPLICAS_PER_HEARTBEAT_MAX, PARTITIONS_PER_TOPIC_MAX, PRODUCER_ID_BLOCK_SIZE,
    RECORDS_PER_USER_OP_MAX,
};
use crate::messages::{
    ConfigChangeSpec, ControllerError, ControllerRequest, ControllerResponse, CreatedTopic,
    ElectionType, IsrChange, OngoingReassignment, PartitionsSpec, QuotaAlteration,
    ReassignTopicSpec, ScramUpsertion, TopicSpec,
};
use crate::partition_change::{Election, ElectionOutcome, PartitionChange};
use crate::placement;

/// What one request or tick decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Records to commit, as one decision: one entry, or a metadata transaction when they do not
    /// fit one (`entries::entries_of`). Empty: nothing to commit.
    pub records: Vec<MetadataRecord>,
    /// The answer, to give once the records are committed. A `Registered` answer's broker epoch
    /// is the committed entry's offset; the service fills it in.
    pub response: ControllerResponse,
}

impl Decision {
    fn answer(response: ControllerResponse) -> Self {
        Self {
            records: Vec::new(),
            response,
        }
    }

    fn error(error: ControllerError) -> Self {
        Self::answer(ControllerResponse::Error { error })
    }
}

/// Settings the controller decides with.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// broker.session.timeout.ms
    pub session_timeout_ms: i64,
    /// auto.leader.rebalance.enable
    pub auto_leader_rebalance: bool,
    /// leader.imbalance.check.interval.seconds, in milliseconds.
    pub leader_imbalance_check_interval_ms: i64,
    /// leader.imbalance.per.broker.percentage (decision 0045).
    pub leader_imbalance_per_broker_percentage: i64,
    /// The node's broker config: num.partitions, default.replication.factor, min.insync.replicas,
    /// unclean.leader.election.enable, delete.topic.enable, topic config defaults.
    pub broker: BrokerConfig,
}

impl ControllerConfig {
    pub fn new(broker: BrokerConfig) -> Self {
        let number = |key: &str, default: i64| {
            broker
                .get(key)
                .and_then(|v| v.trim().parse::<i64>().ok())
                .unwrap_or(default)
        };
        let session_timeout_ms = number("broker.session.timeout.ms", 9_000);
        let leader_imbalance_check_interval_ms =
            number("leader.imbalance.check.interval.seconds", 300)
                .max(1)
                .saturating_mul(1000);
        let leader_imbalance_per_broker_percentage =
            number("leader.imbalance.per.broker.percentage", 10).max(0);
        let auto_leader_rebalance = broker
            .get("auto.leader.rebalance.enable")
            .is_none_or(|v| v.trim().eq_ignore_ascii_case("true"));
        Self {
            session_timeout_ms,
            auto_leader_rebalance,
            leader_imbalance_check_interval_ms,
            leader_imbalance_per_broker_percentage,
            broker,
        }
    }
}

/// One BrokerHeartbeat's fields (`ControllerRequest::BrokerHeartbeat`).
struct Heartbeat {
    node_id: i32,
    broker_epoch: i64,
    metadata_offset: u64,
    want_fence: bool,
    want_shutdown: bool,
    offline_replicas: Vec<(Uuid, i32)>,
}

#[derive(Debug, Clone, Copy)]
struct Session {
    last_contact_ms: i64,
    /// Whether the broker itself reached this controller (a registration or heartbeat) rather
    /// than the session being granted when this controller became active.
    heard_from: bool,
}

/// The controller's decisions and soft state.
pub struct Controller {
    config: ControllerConfig,
    sessions: BTreeMap<i32, Session>,
    /// When the next leader-imbalance check is due (`None`: not scheduled yet; the first tick
    /// schedules it one interval ahead, as activation does).
    next_rebalance_ms: Option<i64>,
    /// When the last tick (or the activation) ran: a much later next tick is a stall of this
    /// controller, credited to the sessions (`CONTROLLER_STALL_MS`).
    last_tick_ms: Option<i64>,
    /// The image's dynamic broker configs last seen, and the static config with them layered
    /// over it (`refresh_effective`): what topic defaults such as `min.insync.replicas` are.
    effective: (Arc<DynamicBrokerConfigs>, BrokerConfig),
    new_topic_id: Box<dyn FnMut() -> Uuid + Send + Sync>,
    /// Per broker, its replicas on a failed log dir, as its last heartbeat reported them (soft
    /// state: a new active controller learns them from the next heartbeats; a new incarnation
    /// of the broker starts with none). Such a replica may neither lead nor stay in or join the
    /// ISR (decision 0071).
    offline_replicas: BTreeMap<i32, BTreeSet<(Uuid, i32)>>,
}

impl Controller {
    pub fn new(config: ControllerConfig) -> Self {
        Self::with_id_generator(config, Box::new(Uuid::new_v4))
    }

    /// With a given source of topic ids (seeded in simulations).
    pub fn with_id_generator(
        config: ControllerConfig,
        new_topic_id: Box<dyn FnMut() -> Uuid + Send + Sync>,
    ) -> Self {
        let effective = (Arc::default(), config.broker.clone());
        Self {
            config,
            sessions: BTreeMap::new(),
            next_rebalance_ms: None,
            last_tick_ms: None,
            effective,
            new_topic_id,
            offline_replicas: BTreeMap::new(),
        }
    }

    /// This node just became the active controller: every broker gets a fresh session (its last
    /// heartbeat went to the previous controller), so one that never reaches this controller is
    /// fenced a session timeout from now. Such a granted session does not make a new incarnation's
    /// registration a duplicate: as in Kafka, only a broker heard from by this controller holds
    /// its id against another (a restarted single node must not wait out its own old session).
    pub fn activate(&mut self, image: &MetadataImage, now_ms: i64) {
        self.sessions = image
            .brokers
            .keys()
            .map(|&b| {
                (
                    b,
                    Session {
                        last_contact_ms: now_ms,
                        heard_from: false,
                    },
                )
            })
            .collect();
        self.next_rebalance_ms =
            Some(now_ms.saturating_add(self.config.leader_imbalance_check_interval_ms));
        self.last_tick_ms = Some(now_ms);
        self.offline_replicas.clear();
    }

    /// Credits a stall of this controller to every session: when the previous tick ran
    /// `CONTROLLER_STALL_MS` or more ago, the controller could not hear heartbeats for that
    /// long, so each session's last contact moves forward by the gap (never past now). Without
    /// it a controller resuming from a stop longer than the session timeout fences every broker
    /// at once, and a client then answered with an empty broker list forgets every broker.
    fn credit_stall(&mut self, now_ms: i64) {
        let last = self.last_tick_ms.replace(now_ms);
        let Some(last) = last else { return };
        let gap = now_ms.saturating_sub(last);
        if gap < CONTROLLER_STALL_MS {
            return;
        }
        warn!(
            gap_ms = gap,
            "the controller did not run for a while; broker sessions are not charged for it"
        );
        for s in self.sessions.values_mut() {
            s.last_contact_ms = s.last_contact_ms.saturating_add(gap).min(now_ms);
        }
    }

    /// Whether broker `b`'s replica of the partition is on a failed log dir.
    fn replica_offline(&self, b: i32, topic_id: Uuid, partition: i32) -> bool {
        self.offline_replicas
            .get(&b)
            .is_some_and(|set| set.contains(&(topic_id, partition)))
    }

    /// Whether `b` may lead the partition: an active broker whose replica is not offline.
    fn can_lead(&self, image: &MetadataImage, b: i32, topic_id: Uuid, partition: i32) -> bool {
        image.is_active(b) && !self.replica_offline(b, topic_id, partition)
    }

    /// The broker config in force: the static one with the image's dynamic cluster default (and
    /// this node's own dynamic configs) over it, recomputed only when those changed.
    fn refresh_effective(&mut self, image: &MetadataImage) {
        if !Arc::ptr_eq(&self.effective.0, &image.broker_configs) {
            self.effective = (
                Arc::clone(&image.broker_configs),
                image.broker_configs.layer_over(&self.config.broker),
            );
        }
    }

    fn min_isr(&self, topic: &TopicImage) -> usize {
        self.effective.1.min_insync_replicas(&topic.configs)
    }

    fn unclean_allowed(&self, topic: &TopicImage) -> bool {
        self.effective
            .1
            .unclean_leader_election_enable(&topic.configs)
    }

    fn session_valid(&self, node_id: i32, now_ms: i64) -> bool {
        self.sessions.get(&node_id).is_some_and(|s| {
            now_ms.saturating_sub(s.last_contact_ms) < self.config.session_timeout_ms
        })
    }

    /// Whether a broker this controller has heard from still holds its session (a registration
    /// by another incarnation is then a duplicate).
    fn session_held(&self, node_id: i32, now_ms: i64) -> bool {
        self.session_valid(node_id, now_ms)
            && self.sessions.get(&node_id).is_some_and(|s| s.heard_from)
    }

    fn touch(&mut self, node_id: i32, now_ms: i64) {
        self.sessions.insert(
            node_id,
            Session {
                last_contact_ms: now_ms,
                heard_from: true,
            },
        );
    }

    /// Decides one request.
    pub fn handle(
        &mut self,
        image: &MetadataImage,
        req: ControllerRequest,
        now_ms: i64,
    ) -> Decision {
        self.refresh_effective(image);
        match req {
            ControllerRequest::RegisterBroker {
                node_id,
                incarnation_id,
                host,
                port,
                rack,
                clean_shutdown,
                listeners,
            } => self.register(
                image,
                node_id,
                incarnation_id,
                (host, port, listeners),
                rack,
                clean_shutdown,
                now_ms,
            ),
            ControllerRequest::BrokerHeartbeat {
                node_id,
                broker_epoch,
                metadata_offset,
                want_fence,
                want_shutdown,
                offline_replicas,
            } => self.heartbeat(
                image,
                Heartbeat {
                    node_id,
                    broker_epoch,
                    metadata_offset,
                    want_fence,
                    want_shutdown,
                    offline_replicas,
                },
                now_ms,
            ),
            ControllerRequest::CreateTopics {
                topics,
                validate_only,
            } => self.create_topics(image, topics, validate_only),
            ControllerRequest::DeleteTopics { names } => self.delete_topics(image, names),
            ControllerRequest::CreatePartitions {
                topics,
                validate_only,
            } => self.create_partitions(image, topics, validate_only),
            ControllerRequest::AlterUserScramCredentials {
                deletions,
                upsertions,
            } => alter_scram_credentials(image, deletions, upsertions),
            ControllerRequest::CreateAcls { acls } => create_acls(image, acls),
            ControllerRequest::DeleteAcls { filters } => delete_acls(image, filters),
            ControllerRequest::AlterClientQuotas {
                entries,
                validate_only,
            } => alter_client_quotas(image, entries, validate_only),
            ControllerRequest::SetTopicConfigs {
                name,
                configs,
                validate_only,
            } => match TopicConfigs::new(configs) {
                Ok(configs) => self.set_topic_configs(image, &name, configs, validate_only),
                Err(e) => Decision::answer(ControllerResponse::Configs {
                    result: Err(ControllerError::InvalidConfig(e.to_string())),
                }),
            },
            ControllerRequest::AlterTopicConfigs {
                name,
                changes,
                validate_only,
            } => {
                let Some(topic) = image.topic(&name) else {
                    return Decision::answer(ControllerResponse::Configs {
                        result: Err(ControllerError::UnknownTopicOrPartition(name)),
                    });
                };
                let mut parsed = Vec::with_capacity(changes.len());
                for c in &changes {
                    match c.to_change() {
                        Some(change) => parsed.push(change),
                        None => {
                            return Decision::answer(ControllerResponse::Configs {
                                result: Err(ControllerError::InvalidRequest(format!(
                                    "unknown config operation {}",
                                    c.op
                                ))),
                            })
                        }
                    }
                }
                let broker = &self.config.broker;
                match topic
                    .configs
                    .with_changes(&parsed, |key| broker.topic_default(key))
                {
                    Ok(configs) => self.set_topic_configs(image, &name, configs, validate_only),
                    Err(e) => Decision::answer(ControllerResponse::Configs {
                        result: Err(ControllerError::InvalidConfig(e.to_string())),
                    }),
                }
            }
            ControllerRequest::SetGroupConfigs {
                group_id,
                configs,
                validate_only,
            } => self.group_configs(image, group_id, GroupConfigs::new(configs), validate_only),
            ControllerRequest::AlterGroupConfigs {
                group_id,
                changes,
                validate_only,
            } => self.alter_group_configs(image, group_id, &changes, validate_only),
            ControllerRequest::SetBrokerConfigs {
                broker,
                configs,
                validate_only,
            } => {
                self.set_broker_configs(image, broker, config_broker::check(configs), validate_only)
            }
            ControllerRequest::AlterBrokerConfigs {
                broker,
                changes,
                validate_only,
            } => self.alter_broker_configs(image, broker, &changes, validate_only),
            ControllerRequest::AllocateProducerIds {
                node_id,
                broker_epoch,
            } => allocate_producer_ids(image, node_id, broker_epoch),
            ControllerRequest::AlterPartition {
                node_id,
                broker_epoch,
                topic_id,
                partition,
                leader_epoch,
                partition_epoch,
                new_isr,
            } => self.alter_partition(
                image,
                node_id,
                broker_epoch,
                topic_id,
                partition,
                leader_epoch,
                partition_epoch,
                &new_isr,
            ),
            ControllerRequest::AlterPartitions {
                node_id,
                broker_epoch,
                changes,
            } => self.alter_partitions(image, node_id, broker_epoch, changes),
            ControllerRequest::RemoteLog {
                node_id,
                broker_epoch,
                change,
            } => {
                // A commit already in the log (a retry whose first answer was lost) succeeded,
                // whoever asks now: refusing it would have the uploader delete live objects.
                if crate::remote_log::already_committed(image, &change) {
                    return Decision::answer(ControllerResponse::RemoteLog { result: Ok(()) });
                }
                if image.broker(node_id).map(|b| b.broker_epoch) != Some(broker_epoch) {
                    return Decision::error(ControllerError::StaleBrokerEpoch);
                }
                match crate::remote_log::decide(image, node_id, change) {
                    Ok(records) => Decision {
                        records,
                        response: ControllerResponse::RemoteLog { result: Ok(()) },
                    },
                    Err(e) => Decision::answer(ControllerResponse::RemoteLog { result: Err(e) }),
                }
            }
            ControllerRequest::ElectLeaders {
                election,
                partitions,
            } => self.elect_leaders(image, election, partitions),
            ControllerRequest::AlterPartitionReassignments {
                topics,
                allow_replication_factor_change,
            } => self.alter_partition_reassignments(image, topics, allow_replication_factor_change),
            ControllerRequest::ListPartitionReassignments { topics } => {
                Decision::answer(ControllerResponse::ListPartitionReassignments {
                    topics: list_partition_reassignments(image, topics),
                })
            }
            ControllerRequest::UnregisterBroker { node_id } => {
                self.unregister_broker(image, node_id)
            }
            // Answered by the service from the quorum, never queued here.
            ControllerRequest::DescribeQuorum => Decision::answer(ControllerResponse::Error {
                error: ControllerError::InvalidRequest(
                    "DescribeQuorum is answered by the quorum, not the decision loop".into(),
                ),
            }),
        }
    }

    /// Periodic work: fence brokers whose session expired, elect leaders for partitions that
    /// have none although a replica could lead, and — when nothing else changed and the check is
    /// due — rebalance leaders towards the preferred replicas. Returns the records to commit
    /// (maybe none).
    pub fn tick(&mut self, image: &MetadataImage, now_ms: i64) -> Vec<MetadataRecord> {
        self.refresh_effective(image);
        self.credit_stall(now_ms);
        let mut records = Vec::new();
        let mut leaving = BTreeSet::new();
        for b in image.brokers.values() {
            if b.fenced {
                continue;
            }
            if let std::collections::btree_map::Entry::Vacant(e) = self.sessions.entry(b.node_id) {
                e.insert(Session {
                    last_contact_ms: now_ms,
                    heard_from: false,
                });
                continue;
            }
            if !self.session_valid(b.node_id, now_ms) {
                info!(
                    broker = b.node_id,
                    broker_epoch = b.broker_epoch,
                    "broker session expired; fencing it"
                );
                records.push(MetadataRecord::FenceBroker {
                    node_id: b.node_id,
                    broker_epoch: b.broker_epoch,
                });
                leaving.insert(b.node_id);
            }
        }
        records.extend(self.partition_changes(image, &leaving, &[], |_| true));
        if records.is_empty() {
            records = self.maybe_rebalance_leaders(image, now_ms);
        }
        records
    }

    /// UnregisterBroker: the broker leaves every ISR and leadership as if fenced, then its
    /// registration goes (Kafka's `handleBrokerUnregistered`); its replicas stay assigned, offline
    /// until it registers again or a reassignment moves them. Unknown → BROKER_ID_NOT_REGISTERED.
    fn unregister_broker(&mut self, image: &MetadataImage, node_id: i32) -> Decision {
        let Some(broker) = image.broker(node_id) else {
            return Decision::error(ControllerError::BrokerIdNotRegistered(node_id));
        };
        info!(
            broker = node_id,
            broker_epoch = broker.broker_epoch,
            "unregistering broker"
        );
        let leaving = BTreeSet::from([node_id]);
        let mut records = self.partition_changes(image, &leaving, &[], |_| true);
        records.push(MetadataRecord::UnregisterBroker {
            node_id,
            broker_epoch: broker.broker_epoch,
        });
        self.sessions.remove(&node_id);
        Decision {
            records,
            response: ControllerResponse::Unregistered,
        }
    }

    /// The automatic preferred-leader rebalance, when enabled and due.
    fn maybe_rebalance_leaders(
        &mut self,
        image: &MetadataImage,
        now_ms: i64,
    ) -> Vec<MetadataRecord> {
        if !self.config.auto_leader_rebalance {
            return Vec::new();
        }
        let interval = self.config.leader_imbalance_check_interval_ms;
        let due = *self
            .next_rebalance_ms
            .get_or_insert_with(|| now_ms.saturating_add(interval));
        if now_ms < due {
            return Vec::new();
        }
        let (records, capped) = self.rebalance_leaders(image);
        // A pass that hit its bound goes on at the next tick (Kafka reschedules it at once).
        self.next_rebalance_ms = Some(if capped {
            now_ms
        } else {
            now_ms.saturating_add(interval)
        });
        if !records.is_empty() {
            info!(
                elections = records.len(),
                "leader imbalance: electing preferred leaders"
            );
        }
        records
    }

    /// One rebalance pass (ZooKeeper-mode Kafka's `checkAndTriggerAutoLeaderRebalance`, decision
    /// 0045): for every broker, the partitions it is the preferred leader of but does not lead;
    /// when their share of the partitions it is preferred for exceeds
    /// `leader.imbalance.per.broker.percentage`, a preferred election for each of them (it
    /// changes nothing where the preferred replica cannot lead). Returns the records and whether
    /// the pass stopped at `LEADER_REBALANCE_ELECTIONS_MAX`.
    fn rebalance_leaders(&self, image: &MetadataImage) -> (Vec<MetadataRecord>, bool) {
        /// One broker as a preferred leader.
        #[derive(Default)]
        struct Preferred<'a> {
            /// Partitions it is the preferred leader of.
            total: u64,
            /// Those it does not lead.
            imbalanced: Vec<(&'a Arc<TopicImage>, i32)>,
        }
        let mut by_broker: BTreeMap<i32, Preferred> = BTreeMap::new();
        for topic in image.topics.values() {
            for (index, p) in topic.partitions.iter().enumerate() {
                let preferred = p.preferred_leader();
                if preferred == NO_LEADER {
                    continue;
                }
                let entry = by_broker.entry(preferred).or_default();
                entry.total = entry.total.saturating_add(1);
                if p.leader != preferred {
                    entry
                        .imbalanced
                        .push((topic, i32::try_from(index).unwrap_or(i32::MAX)));
                }
            }
        }
        let percentage =
            u64::try_from(self.config.leader_imbalance_per_broker_percentage).unwrap_or(0);
        let mut records = Vec::new();
        for Preferred { total, imbalanced } in by_broker.into_values() {
            let count = u64::try_from(imbalanced.len()).unwrap_or(u64::MAX);
            // ratio > percentage / 100, in integers
            if count.saturating_mul(100) <= percentage.saturating_mul(total) {
                continue;
            }
            for (topic, index) in imbalanced {
                if records.len() >= LEADER_REBALANCE_ELECTIONS_MAX {
                    return (records, true);
                }
                let Some(p) = topic.partition(index) else {
                    continue;
                };
                let mut change =
                    PartitionChange::new(topic.topic_id, index, p, self.min_isr(topic));
                change.election = Election::Preferred;
                if let (Some(r), _) =
                    change.build(|b| self.can_lead(image, b, topic.topic_id, index))
                {
                    records.push(r);
                }
            }
        }
        (records, false)
    }

    /// Partition changes after `leaving` brokers become inactive (fenced, shutting down or
    /// re-registered; `unclean` of them restarted uncleanly), plus elections for every partition
    /// without a valid leader that can get one. `filter` limits the partitions considered.
    fn partition_changes(
        &self,
        image: &MetadataImage,
        leaving: &BTreeSet<i32>,
        unclean: &[i32],
        filter: impl Fn(&PartitionRegistration) -> bool,
    ) -> Vec<MetadataRecord> {
        let mut records = Vec::new();
        for topic in image.topics.values() {
            let min_isr = self.min_isr(topic);
            let unclean_allowed = self.unclean_allowed(topic);
            for (index, p) in topic.partitions.iter().enumerate() {
                if !filter(p) {
                    continue;
                }
                let index = i32::try_from(index).unwrap_or(i32::MAX);
                let offline = |b: i32| self.replica_offline(b, topic.topic_id, index);
                let is_active = |b: i32| !leaving.contains(&b) && image.is_active(b) && !offline(b);
                let touched = p.isr.iter().any(|&b| leaving.contains(&b) || offline(b))
                    || p.elr
                        .iter()
                        .chain(&p.last_known_elr)
                        .any(|b| unclean.contains(b));
                let needs_leader = p.leader == NO_LEADER || !is_active(p.leader);
                if !touched && !needs_leader {
                    continue;
                }
                let mut change = PartitionChange::new(topic.topic_id, index, p, min_isr);
                change
                    .target_isr
                    .retain(|&b| !leaving.contains(&b) && !offline(b));
                change.unclean_shutdown = unclean.to_vec();
                if unclean_allowed {
                    change.election = Election::Unclean;
                }
                let (record, outcome) = change.build(is_active);
                if let ElectionOutcome::Unclean(b) = outcome {
                    tracing::warn!(topic = %topic.name, partition = index, leader = b, "unclean leader election: records not on this replica may be lost");
                }
                if let Some(r) = record {
                    records.push(r);
                }
            }
        }
        records
    }

    #[allow(clippy::too_many_arguments)]
    fn register(
        &mut self,
        image: &MetadataImage,
        node_id: i32,
        incarnation_id: Uuid,
        (host, port, listeners): (String, u16, Vec<ListenerAddress>),
        rack: Option<String>,
        clean_shutdown: bool,
        now_ms: i64,
    ) -> Decision {
        if node_id < 0 {
            return Decision::error(ControllerError::InvalidRequest(format!(
                "invalid node id {node_id}"
            )));
        }
        if let Some(existing) = image.broker(node_id) {
            if existing.incarnation_id == incarnation_id {
                // A retry of a registration that already committed.
                self.touch(node_id, now_ms);
                return Decision::answer(ControllerResponse::Registered {
                    broker_epoch: existing.broker_epoch,
                });
            }
            if !existing.fenced && self.session_held(node_id, now_ms) {
                return Decision::error(ControllerError::DuplicateBrokerRegistration(format!(
                    "Another broker is registered with that broker id {node_id} and its session has not expired."
                )));
            }
        }
        self.touch(node_id, now_ms);
        // A new incarnation rescanned its log dirs: its heartbeats report anew what is offline.
        self.offline_replicas.remove(&node_id);
        let mut records = vec![MetadataRecord::RegisterBroker {
            node_id,
            incarnation_id,
            host,
            port,
            rack,
            clean_shutdown,
            listeners,
        }];
        let leaving: BTreeSet<i32> = [node_id].into_iter().collect();
        let unclean = if clean_shutdown {
            vec![]
        } else {
            vec![node_id]
        };
        records.extend(self.partition_changes(image, &leaving, &unclean, |_| true));
        Decision {
            records,
            response: ControllerResponse::Registered { broker_epoch: -1 },
        }
    }

    fn heartbeat(&mut self, image: &MetadataImage, beat: Heartbeat, now_ms: i64) -> Decision {
        let Heartbeat {
            node_id,
            broker_epoch,
            metadata_offset,
            want_fence,
            want_shutdown,
            offline_replicas,
        } = beat;
        if offline_replicas.len() > OFFLINE_REPLICAS_PER_HEARTBEAT_MAX {
            return Decision::error(too_large());
        }
        let Some(b) = image
            .broker(node_id)
            .filter(|b| b.broker_epoch == broker_epoch)
        else {
            return Decision::error(ControllerError::StaleBrokerEpoch);
        };
        self.touch(node_id, now_ms);
        let registration_offset = u64::try_from(b.broker_epoch).unwrap_or(u64::MAX);
        let is_caught_up = metadata_offset >= registration_offset;
        let mut records = self.update_offline_replicas(image, node_id, offline_replicas);
        let mut should_shut_down = false;
        let mut is_fenced = b.fenced;
        if want_shutdown {
            if b.fenced {
                should_shut_down = true;
            } else if !b.in_controlled_shutdown {
                info!(
                    broker = node_id,
                    "controlled shutdown: moving leaderships away"
                );
                records.push(MetadataRecord::BeginControlledShutdown {
                    node_id,
                    broker_epoch,
                });
                let leaving: BTreeSet<i32> = [node_id].into_iter().collect();
                records.extend(self.partition_changes(image, &leaving, &[], |_| true));
            } else if metadata_offset >= image.offset {
                // The broker has seen its leaderships move: let it go, fenced.
                should_shut_down = true;
                is_fenced = true;
                records.push(MetadataRecord::FenceBroker {
                    node_id,
                    broker_epoch,
                });
            }
        } else if b.fenced && !want_fence && is_caught_up && !b.in_controlled_shutdown {
            info!(
                broker = node_id,
                broker_epoch, "broker caught up with the metadata log; unfencing it"
            );
            is_fenced = false;
            records.push(MetadataRecord::UnfenceBroker {
                node_id,
                broker_epoch,
            });
            // Partitions waiting for this broker to lead.
            let mut after = image.clone();
            if let Some(reg) = after.brokers.get_mut(&node_id) {
                reg.fenced = false;
            }
            records.extend(self.partition_changes(&after, &BTreeSet::new(), &[], |p| {
                p.replicas.contains(&node_id)
            }));
        }
        Decision {
            records,
            response: ControllerResponse::Heartbeat {
                is_caught_up,
                is_fenced,
                should_shut_down,
            },
        }
    }

    /// Records the broker's offline replicas; for those newly offline, the partition changes
    /// that take them out of the ISR and move their leadership to another in-sync replica (as
    /// fencing does, but only for those partitions).
    fn update_offline_replicas(
        &mut self,
        image: &MetadataImage,
        node_id: i32,
        offline: Vec<(Uuid, i32)>,
    ) -> Vec<MetadataRecord> {
        let offline: BTreeSet<(Uuid, i32)> = offline.into_iter().collect();
        let known = self.offline_replicas.get(&node_id);
        let newly: BTreeSet<(Uuid, i32)> = offline
            .iter()
            .filter(|r| !known.is_some_and(|k| k.contains(r)))
            .copied()
            .collect();
        if offline.is_empty() {
            self.offline_replicas.remove(&node_id);
        } else {
            self.offline_replicas.insert(node_id, offline);
        }
        if newly.is_empty() {
            return Vec::new();
        }
        tracing::warn!(
            broker = node_id,
            replicas = newly.len(),
            "replicas on a failed log dir: moving their leadership and leaving them out of the ISR"
        );
        self.partition_changes(image, &BTreeSet::new(), &[], |p| {
            p.replicas.contains(&node_id)
        })
    }

    fn create_topics(
        &mut self,
        image: &MetadataImage,
        topics: Vec<TopicSpec>,
        validate_only: bool,
    ) -> Decision {
        let mut records = Vec::new();
        let mut results = Vec::with_capacity(topics.len());
        let mut seen = BTreeSet::new();
        for spec in topics {
            let name = spec.name.clone();
            if !seen.insert(name.clone()) {
                results.push((
                    name,
                    Err(ControllerError::InvalidRequest(
                        "Duplicate topic name in the request.".into(),
                    )),
                ));
                continue;
            }
            match self.plan_topic(image, &spec) {
                Ok((assignments, configs)) => {
                    let topic_id = (self.new_topic_id)();
                    let created = CreatedTopic {
                        topic_id,
                        partitions: i32::try_from(assignments.len()).unwrap_or(i32::MAX),
                        replication_factor: assignments
                            .first()
                            .map_or(0, |r| i16::try_from(r.len()).unwrap_or(i16::MAX)),
                        configs: configs.clone(),
                    };
                    if !validate_only {
                        records.push(MetadataRecord::Topic {
                            name: name.clone(),
                            topic_id,
                            configs,
                        });
                        for (index, replicas) in assignments.into_iter().enumerate() {
                            records.push(MetadataRecord::Partition {
                                topic_id,
                                partition: i32::try_from(index).unwrap_or(i32::MAX),
                                registration: new_partition(image, replicas),
                            });
                        }
                    }
                    results.push((name, Ok(created)));
                }
                Err(e) => results.push((name, Err(e))),
            }
        }
        Decision {
            records,
            response: ControllerResponse::CreateTopics { results },
        }
    }

    /// Validates a new topic and chooses its replicas.
    fn plan_topic(
        &self,
        image: &MetadataImage,
        spec: &TopicSpec,
    ) -> Result<(Vec<Vec<i32>>, TopicConfigs), ControllerError> {
        validate_topic_name(&spec.name).map_err(ControllerError::InvalidTopic)?;
        if image.topic(&spec.name).is_some() {
            return Err(ControllerError::TopicAlreadyExists(spec.name.clone()));
        }
        let configs = TopicConfigs::new(spec.configs.clone())
            .map_err(|e| ControllerError::InvalidConfig(e.to_string()))?;
        self.config
            .broker
            .check_topic_configs(&TopicConfigs::default(), &configs)
            .map_err(|e| ControllerError::InvalidConfig(e.to_string()))?;
        let assignments = if spec.assignments.is_empty() {
            let partitions = spec
                .partitions
                .unwrap_or_else(|| self.config.broker.num_partitions());
            let rf = spec
                .replication_factor
                .unwrap_or_else(|| self.config.broker.default_replication_factor());
            check_partition_count(partitions)?;
            placement::place(image, partitions, rf)?
        } else {
            if spec.partitions.is_some() || spec.replication_factor.is_some() {
                return Err(ControllerError::InvalidReplicaAssignment(
                    "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.".into(),
                ));
            }
            let list: Vec<Vec<i32>> = spec.assignments.values().cloned().collect();
            for (i, &p) in spec.assignments.keys().enumerate() {
                if i64::from(p) != i as i64 {
                    return Err(ControllerError::InvalidReplicaAssignment(
                        "Partitions should be a consecutive 0-based integer sequence".into(),
                    ));
                }
            }
            check_partition_count(i32::try_from(list.len()).unwrap_or(i32::MAX))?;
            check_assignments(image, &list, 0)?;
            list
        };
        Ok((assignments, configs))
    }

    fn delete_topics(&mut self, image: &MetadataImage, names: Vec<String>) -> Decision {
        let enabled = self
            .config
            .broker
            .get("delete.topic.enable")
            .is_none_or(|v| v.trim().eq_ignore_ascii_case("true"));
        let mut records = Vec::new();
        let mut results = Vec::with_capacity(names.len());
        let mut seen = BTreeSet::new();
        for name in names {
            let result = if !enabled {
                Err(ControllerError::TopicDeletionDisabled)
            } else {
                match image.topic(&name) {
                    Some(t) if seen.insert(t.topic_id) => {
                        records.push(MetadataRecord::RemoveTopic {
                            topic_id: t.topic_id,
                        });
                        Ok(t.topic_id)
                    }
                    Some(t) => Ok(t.topic_id),
                    None => Err(ControllerError::UnknownTopicOrPartition(name.clone())),
                }
            };
            results.push((name, result));
        }
        Decision {
            records,
            response: ControllerResponse::DeleteTopics { results },
        }
    }

    fn create_partitions(
        &mut self,
        image: &MetadataImage,
        topics: Vec<PartitionsSpec>,
        validate_only: bool,
    ) -> Decision {
        let mut records = Vec::new();
        let mut results = Vec::with_capacity(topics.len());
        for spec in topics {
            let planned = (|| {
                let topic = image
                    .topic(&spec.name)
                    .ok_or_else(|| ControllerError::UnknownTopicOrPartition(spec.name.clone()))?;
                let current = topic.partition_count();
                if spec.count <= current {
                    return Err(ControllerError::InvalidPartitions(format!(
                        "Topic currently has {current} partitions, which is higher than or equal to the requested {}.",
                        spec.count
                    )));
                }
                check_partition_count(spec.count)?;
                let added = spec.count - current;
                let assignments = match &spec.assignments {
                    Some(list) => {
                        if i64::try_from(list.len()).unwrap_or(i64::MAX) != i64::from(added) {
                            return Err(ControllerError::InvalidReplicaAssignment(format!(
                                "Increasing the number of partitions by {added} but {} assignments provided.",
                                list.len()
                            )));
                        }
                        check_assignments(image, list, current)?;
                        list.clone()
                    }
                    None => placement::place(image, added, topic.replication_factor().max(1))?,
                };
                Ok((topic.topic_id, current, assignments))
            })();
            match planned {
                Ok((topic_id, first, assignments)) => {
                    if !validate_only {
                        for (i, replicas) in assignments.into_iter().enumerate() {
                            records.push(MetadataRecord::Partition {
                                topic_id,
                                partition: first
                                    .saturating_add(i32::try_from(i).unwrap_or(i32::MAX)),
                                registration: new_partition(image, replicas),
                            });
                        }
                    }
                    results.push((spec.name, Ok(())));
                }
                Err(e) => results.push((spec.name, Err(e))),
            }
        }
        Decision {
            records,
            response: ControllerResponse::CreatePartitions { results },
        }
    }

    fn set_topic_configs(
        &mut self,
        image: &MetadataImage,
        name: &str,
        configs: TopicConfigs,
        validate_only: bool,
    ) -> Decision {
        let Some(topic) = image.topic(name) else {
            return Decision::answer(ControllerResponse::Configs {
                result: Err(ControllerError::UnknownTopicOrPartition(name.to_string())),
            });
        };
        // The rules between keys (tiered storage's), for AlterConfigs and IncrementalAlterConfigs
        // alike; each value on its own was checked when `configs` was built.
        if let Err(e) = self
            .config
            .broker
            .check_topic_configs(&topic.configs, &configs)
        {
            return Decision::answer(ControllerResponse::Configs {
                result: Err(ControllerError::InvalidConfig(e.to_string())),
            });
        }
        if validate_only || configs == topic.configs {
            return Decision::answer(ControllerResponse::Configs { result: Ok(()) });
        }
        let mut records = vec![MetadataRecord::TopicConfigs {
            topic_id: topic.topic_id,
            configs: configs.clone(),
        }];
        if configs.get("min.insync.replicas") != topic.configs.get("min.insync.replicas") {
            // KIP-966: the ELR was computed against the old minimum; start afresh.
            for (index, p) in topic.partitions.iter().enumerate() {
                if p.elr.is_empty() && p.last_known_elr.is_empty() {
                    continue;
                }
                records.push(
                    PartitionChangeBuilder {
                        elr: Some(Vec::new()),
                        last_known_elr: Some(Vec::new()),
                        ..MetadataRecord::partition_change(
                            topic.topic_id,
                            i32::try_from(index).unwrap_or(i32::MAX),
                        )
                    }
                    .build(),
                );
            }
        }
        Decision {
            records,
            response: ControllerResponse::Configs { result: Ok(()) },
        }
    }

    /// IncrementalAlterConfigs of a GROUP resource: its changes applied to its current set.
    fn alter_group_configs(
        &mut self,
        image: &MetadataImage,
        group_id: String,
        changes: &[ConfigChangeSpec],
        validate_only: bool,
    ) -> Decision {
        let Some(parsed) = parse_changes(changes) else {
            return unknown_operation();
        };
        // Kafka's first check: only DELETE goes without a value.
        if let Some(c) = parsed
            .iter()
            .find(|c| c.op != ConfigOp::Delete && c.value.is_none())
        {
            return Decision::answer(ControllerResponse::Configs {
                result: Err(ControllerError::InvalidRequest(format!(
                    "Null value not supported for : {}",
                    c.name
                ))),
            });
        }
        let current = image.group_configs(&group_id).cloned().unwrap_or_default();
        let configs = current.with_changes(&parsed);
        self.group_configs(image, group_id, configs, validate_only)
    }

    /// A GROUP resource's new set, if each value passed on its own.
    fn group_configs(
        &mut self,
        image: &MetadataImage,
        group_id: String,
        configs: Result<GroupConfigs, millrace_cluster::ConfigError>,
        validate_only: bool,
    ) -> Decision {
        match configs {
            Ok(configs) => self.set_group_configs(image, group_id, configs, validate_only),
            Err(e) => Decision::answer(ControllerResponse::Configs {
                result: Err(ControllerError::InvalidConfig(e.to_string())),
            }),
        }
    }

    /// A GROUP resource's whole new config set (Kafka's `GroupConfig.validate` against this
    /// broker's bounds), committed as one record; an empty set removes the group's configs.
    fn set_group_configs(
        &mut self,
        image: &MetadataImage,
        group_id: String,
        configs: GroupConfigs,
        validate_only: bool,
    ) -> Decision {
        let answer = |result| Decision::answer(ControllerResponse::Configs { result });
        if group_id.is_empty() {
            return answer(Err(ControllerError::InvalidRequest(
                "Default group resources are not allowed.".into(),
            )));
        }
        if let Err(e) = self.config.broker.check_group_configs(&configs) {
            return answer(Err(ControllerError::InvalidConfig(e.to_string())));
        }
        let bytes = group_id.len()
            + configs
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>();
        if bytes > GROUP_CONFIG_BYTES_MAX {
            return answer(Err(ControllerError::InvalidConfig(format!(
                "The configs of group {group_id} take {bytes} bytes; at most \
                 {GROUP_CONFIG_BYTES_MAX} are allowed."
            ))));
        }
        let current = image.group_configs(&group_id);
        if current.is_none()
            && !configs.is_empty()
            && image.group_configs.len() >= GROUPS_WITH_CONFIGS_MAX
        {
            return answer(Err(ControllerError::InvalidRequest(format!(
                "At most {GROUPS_WITH_CONFIGS_MAX} groups may have configs."
            ))));
        }
        let unchanged = match current {
            Some(c) => *c == configs,
            None => configs.is_empty(),
        };
        if validate_only || unchanged {
            return answer(Ok(()));
        }
        Decision {
            records: vec![MetadataRecord::GroupConfigs { group_id, configs }],
            response: ControllerResponse::Configs { result: Ok(()) },
        }
    }

    /// IncrementalAlterConfigs of a BROKER resource: its new set from the current one.
    fn alter_broker_configs(
        &mut self,
        image: &MetadataImage,
        broker: Option<i32>,
        changes: &[ConfigChangeSpec],
        validate_only: bool,
    ) -> Decision {
        let Some(parsed) = parse_changes(changes) else {
            return unknown_operation();
        };
        let current = image.broker_configs.of(broker).cloned().unwrap_or_default();
        // APPEND/SUBTRACT start from the value in force (as this node sees it).
        let next = config_broker::with_changes(&current, &parsed, |key| {
            self.effective.1.get(key).map(str::to_string)
        });
        self.set_broker_configs(image, broker, next, validate_only)
    }

    /// A BROKER resource's whole new dynamic set, already checked by `config_broker`, committed
    /// as one record; an empty set removes it.
    fn set_broker_configs(
        &mut self,
        image: &MetadataImage,
        broker: Option<i32>,
        configs: Result<BTreeMap<String, String>, BrokerConfigError>,
        validate_only: bool,
    ) -> Decision {
        let answer = |result| Decision::answer(ControllerResponse::Configs { result });
        let configs = match configs {
            Ok(c) => c,
            Err(BrokerConfigError::InvalidRequest(m)) => {
                return answer(Err(ControllerError::InvalidRequest(m)))
            }
            Err(BrokerConfigError::InvalidConfig(m)) => {
                return answer(Err(ControllerError::InvalidConfig(m)))
            }
        };
        let unchanged = match image.broker_configs.of(broker) {
            Some(c) => *c == configs,
            None => configs.is_empty(),
        };
        if validate_only || unchanged {
            return answer(Ok(()));
        }
        Decision {
            records: vec![MetadataRecord::BrokerConfigs { broker, configs }],
            response: ControllerResponse::Configs { result: Ok(()) },
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn alter_partition(
        &mut self,
        image: &MetadataImage,
        node_id: i32,
        broker_epoch: i64,
        topic_id: Uuid,
        partition: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        new_isr: &[(i32, i64)],
    ) -> Decision {
        if image.broker(node_id).map(|b| b.broker_epoch) != Some(broker_epoch) {
            return Decision::error(ControllerError::StaleBrokerEpoch);
        }
        let answer = |result| Decision::answer(ControllerResponse::AlterPartition { result });
        let Some(topic) = image.topic_by_id(topic_id) else {
            return answer(Err(ControllerError::UnknownTopicOrPartition(format!(
                "{topic_id}-{partition}"
            ))));
        };
        let Some(p) = topic.partition(partition) else {
            return answer(Err(ControllerError::UnknownTopicOrPartition(format!(
                "{}-{partition}",
                topic.name
            ))));
        };
        if p.leader != node_id {
            return answer(Err(ControllerError::NotLeaderOrFollower));
        }
        if leader_epoch != p.leader_epoch {
            return answer(Err(ControllerError::FencedLeaderEpoch));
        }
        if partition_epoch != p.partition_epoch {
            return answer(Err(ControllerError::InvalidUpdateVersion));
        }
        let isr: Vec<i32> = new_isr.iter().map(|(b, _)| *b).collect();
        let distinct: BTreeSet<i32> = isr.iter().copied().collect();
        if distinct.len() != isr.len() || !isr.contains(&node_id) {
            return answer(Err(ControllerError::InvalidRequest(format!(
                "Invalid ISR {isr:?}: the leader must be in it, once."
            ))));
        }
        for &(b, epoch) in new_isr {
            if !p.replicas.contains(&b) {
                return answer(Err(ControllerError::InvalidRequest(format!(
                    "ISR member {b} is not a replica"
                ))));
            }
            let eligible = image
                .broker(b)
                .is_some_and(|reg| reg.is_active() && (epoch < 0 || reg.broker_epoch == epoch));
            if !eligible && !p.isr.contains(&b) {
                return answer(Err(ControllerError::IneligibleReplica(format!(
                    "Broker {b} is fenced, shutting down or has a newer broker epoch; it cannot join the ISR"
                ))));
            }
            if self.replica_offline(b, topic.topic_id, partition) {
                return answer(Err(ControllerError::IneligibleReplica(format!(
                    "The replica of broker {b} is on a failed log dir; it cannot be in the ISR"
                ))));
            }
        }
        let mut change = PartitionChange::new(topic.topic_id, partition, p, self.min_isr(topic));
        change.target_isr = isr;
        let (record, _) = change.build(|b| self.can_lead(image, b, topic.topic_id, partition));
        let mut next = p.clone();
        let records = match record {
            Some(r) => {
                next.apply_change(&r);
                vec![r]
            }
            None => Vec::new(),
        };
        Decision {
            records,
            response: ControllerResponse::AlterPartition { result: Ok(next) },
        }
    }

    /// Several partitions' ISR changes from their leader, each decided against the same image as
    /// `alter_partition` decides one (they name distinct partitions, so none sees another's
    /// record); a partition named twice gets INVALID_REQUEST the second time.
    fn alter_partitions(
        &mut self,
        image: &MetadataImage,
        node_id: i32,
        broker_epoch: i64,
        changes: Vec<IsrChange>,
    ) -> Decision {
        if image.broker(node_id).map(|b| b.broker_epoch) != Some(broker_epoch) {
            return Decision::error(ControllerError::StaleBrokerEpoch);
        }
        if changes.len() > ISR_CHANGES_PER_REQUEST_MAX {
            return Decision::error(too_large());
        }
        let mut records = Vec::new();
        let mut results = Vec::with_capacity(changes.len());
        let mut seen = BTreeSet::new();
        for c in changes {
            if !seen.insert((c.topic_id, c.partition)) {
                results.push(Err(ControllerError::InvalidRequest(format!(
                    "partition {}-{} is named twice",
                    c.topic_id, c.partition
                ))));
                continue;
            }
            let one = self.alter_partition(
                image,
                node_id,
                broker_epoch,
                c.topic_id,
                c.partition,
                c.leader_epoch,
                c.partition_epoch,
                &c.new_isr,
            );
            records.extend(one.records);
            results.push(match one.response {
                ControllerResponse::AlterPartition { result } => result,
                ControllerResponse::Error { error } => Err(error),
                other => Err(ControllerError::Internal(format!(
                    "unexpected answer {other:?}"
                ))),
            });
        }
        Decision {
            records,
            response: ControllerResponse::AlterPartitions { results },
        }
    }

    /// ElectLeaders as Kafka's `ReplicationControlManager.electLeaders`: ELECTION_NOT_NEEDED when
    /// the preferred replica already leads (preferred) or the partition has a leader (unclean);
    /// success whenever the election changes the partition, PREFERRED_LEADER_NOT_AVAILABLE /
    /// ELIGIBLE_LEADERS_NOT_AVAILABLE when it changes nothing. Asked for every partition
    /// (`None`), partitions that need no election are left out of the answer.
    fn elect_leaders(
        &mut self,
        image: &MetadataImage,
        election: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Decision {
        let all = partitions.is_none();
        let wanted: Vec<(String, i32)> = match partitions {
            Some(list) => list,
            None => image
                .topics
                .values()
                .flat_map(|t| (0..t.partition_count()).map(move |p| (t.name.clone(), p)))
                .collect(),
        };
        let mut records = Vec::new();
        let mut results = Vec::with_capacity(wanted.len());
        // A partition named twice gets the first answer again, not a second record.
        let mut decided: BTreeMap<(String, i32), Result<(), ControllerError>> = BTreeMap::new();
        for (name, index) in wanted {
            if let Some(first) = decided.get(&(name.clone(), index)) {
                results.push(((name, index), first.clone()));
                continue;
            }
            let result = self.elect_leader(image, election, &name, index, &mut records);
            if records.len() > RECORDS_PER_USER_OP_MAX {
                return Decision::error(too_large());
            }
            decided.insert((name.clone(), index), result.clone());
            if all && result == Err(ControllerError::ElectionNotNeeded) {
                continue;
            }
            results.push(((name, index), result));
        }
        Decision {
            records,
            response: ControllerResponse::ElectLeaders { results },
        }
    }

    fn elect_leader(
        &self,
        image: &MetadataImage,
        election: ElectionType,
        name: &str,
        index: i32,
        records: &mut Vec<MetadataRecord>,
    ) -> Result<(), ControllerError> {
        let topic = image
            .topic(name)
            .ok_or_else(|| ControllerError::UnknownTopicOrPartition(name.to_string()))?;
        let p = topic
            .partition(index)
            .ok_or_else(|| ControllerError::UnknownTopicOrPartition(format!("{name}-{index}")))?;
        let not_needed = match election {
            ElectionType::Preferred => p.leader == p.preferred_leader(),
            ElectionType::Unclean => p.leader != NO_LEADER,
        };
        if not_needed {
            return Err(ControllerError::ElectionNotNeeded);
        }
        let mut change = PartitionChange::new(topic.topic_id, index, p, self.min_isr(topic));
        change.election = match election {
            ElectionType::Preferred => Election::Preferred,
            ElectionType::Unclean => Election::Unclean,
        };
        let (record, outcome) = change.build(|b| self.can_lead(image, b, topic.topic_id, index));
        match (record, election) {
            (Some(r), _) => {
                if let ElectionOutcome::Unclean(b) = outcome {
                    tracing::warn!(topic = %name, partition = index, leader = b, "unclean leader election requested: records not on this replica may be lost");
                }
                records.push(r);
                Ok(())
            }
            (None, ElectionType::Preferred) => Err(ControllerError::PreferredLeaderNotAvailable),
            (None, ElectionType::Unclean) => Err(ControllerError::EligibleLeadersNotAvailable),
        }
    }

    /// AlterPartitionReassignments as Kafka's `ReplicationControlManager`: per partition, a
    /// target starts (or replaces) a reassignment, `None` cancels the one in progress. The
    /// records of every accepted partition commit as one decision.
    fn alter_partition_reassignments(
        &mut self,
        image: &MetadataImage,
        topics: Vec<ReassignTopicSpec>,
        allow_rf_change: bool,
    ) -> Decision {
        let mut records = Vec::new();
        let mut results = Vec::with_capacity(topics.len());
        let mut touched: BTreeSet<(Uuid, i32)> = BTreeSet::new();
        for spec in topics {
            let mut partition_results = Vec::with_capacity(spec.partitions.len());
            for (index, target) in spec.partitions {
                let result = self.alter_partition_reassignment(
                    image,
                    (&spec.name, index),
                    target.as_deref(),
                    allow_rf_change,
                    &mut touched,
                    &mut records,
                );
                if records.len() > RECORDS_PER_USER_OP_MAX {
                    return Decision::error(too_large());
                }
                if let Err(e) = &result {
                    info!(topic = %spec.name, partition = index, error = %e, "partition reassignment refused");
                }
                partition_results.push((index, result));
            }
            results.push((spec.name, partition_results));
        }
        Decision {
            records,
            response: ControllerResponse::AlterPartitionReassignments { results },
        }
    }

    fn alter_partition_reassignment(
        &self,
        image: &MetadataImage,
        (name, index): (&str, i32),
        target: Option<&[i32]>,
        allow_rf_change: bool,
        touched: &mut BTreeSet<(Uuid, i32)>,
        records: &mut Vec<MetadataRecord>,
    ) -> Result<(), ControllerError> {
        let topic = image.topic(name).ok_or_else(|| {
            ControllerError::UnknownTopicOrPartition(format!(
                "Unable to find a topic named {name}."
            ))
        })?;
        let p = topic.partition(index).ok_or_else(|| {
            ControllerError::UnknownTopicOrPartition(format!(
                "Unable to find partition {name}:{index}."
            ))
        })?;
        if touched.contains(&(topic.topic_id, index)) {
            // Two changes of one partition in one decision would be computed from the same state.
            // Only a mention that changed it counts: a refused one is checked on its own, as
            // Kafka checks every partition of the request.
            return Err(ControllerError::InvalidRequest(format!(
                "Partition {name}:{index} is changed earlier in the same request."
            )));
        }
        let change = PartitionChange::new(topic.topic_id, index, p, self.min_isr(topic));
        let change = match target {
            None => {
                if p.adding_replicas.is_empty() && p.removing_replicas.is_empty() {
                    return Err(ControllerError::NoReassignmentInProgress);
                }
                let (mut change, unclean) = change.revert();
                if change.target_replicas.is_empty() {
                    return Err(ControllerError::InvalidReplicaAssignment(
                        "Invalid replica assignment: addingReplicas contains all replicas.".into(),
                    ));
                }
                let unclean_allowed = self.unclean_allowed(topic);
                if unclean && !unclean_allowed {
                    return Err(ControllerError::InvalidReplicaAssignment(format!(
                        "Unable to revert partition assignment for {name}:{index} because it would require an unclean leader election."
                    )));
                }
                if unclean_allowed {
                    change.election = Election::Unclean;
                }
                change
            }
            Some(target) => {
                check_reassignment_target(image, target)?;
                // KIP-860: the size of the assignment before any reassignment in progress.
                let current = p.replicas.len().saturating_sub(p.adding_replicas.len());
                if !allow_rf_change && target.len() != current {
                    return Err(ControllerError::InvalidReplicationFactor(format!(
                        "The replication factor of {name}:{index} would change from {current} to {} but allowReplicationFactorChange is false.",
                        target.len()
                    )));
                }
                change.reassign(target)
            }
        };
        let (record, _) = change.build(|b| self.can_lead(image, b, topic.topic_id, index));
        if let Some(r) = record {
            records.push(r);
            touched.insert((topic.topic_id, index));
        }
        Ok(())
    }
}

fn too_large() -> ControllerError {
    ControllerError::PolicyViolation("Unable to perform excessively large batch operation.".into())
}

/// Kafka's `validateManualPartitionAssignment` for a reassignment target: not empty, every broker
/// registered, none twice.
fn check_reassignment_target(image: &MetadataImage, target: &[i32]) -> Result<(), ControllerError> {
    if target.is_empty() {
        return Err(ControllerError::InvalidReplicaAssignment(
            "The manual partition assignment includes an empty replica list.".into(),
        ));
    }
    let mut sorted = target.to_vec();
    sorted.sort_unstable();
    let mut previous = None;
    for b in sorted {
        if image.broker(b).is_none() {
            return Err(ControllerError::InvalidReplicaAssignment(format!(
                "The manual partition assignment includes broker {b}, but no such broker is registered."
            )));
        }
        if previous == Some(b) {
            return Err(ControllerError::InvalidReplicaAssignment(format!(
                "The manual partition assignment includes the broker {b} more than once."
            )));
        }
        previous = Some(b);
    }
    Ok(())
}

/// ListPartitionReassignments over the committed image: every partition being reassigned, or
/// those of the named topics and partitions (unknown topics and partitions are left out).
pub fn list_partition_reassignments(
    image: &MetadataImage,
    topics: Option<Vec<(String, Vec<i32>)>>,
) -> Vec<(String, Vec<OngoingReassignment>)> {
    let ongoing = |index: i32, p: &PartitionRegistration| {
        (!p.adding_replicas.is_empty() || !p.removing_replicas.is_empty()).then(|| {
            OngoingReassignment {
                partition: index,
                replicas: p.replicas.clone(),
                adding_replicas: p.adding_replicas.clone(),
                removing_replicas: p.removing_replicas.clone(),
            }
        })
    };
    let wanted: Vec<(String, Vec<i32>)> = match topics {
        Some(list) => list,
        None => image
            .topics
            .values()
            .map(|t| (t.name.clone(), (0..t.partition_count()).collect()))
            .collect(),
    };
    let mut out = Vec::new();
    for (name, partitions) in wanted {
        let Some(topic) = image.topic(&name) else {
            continue;
        };
        let found: Vec<OngoingReassignment> = partitions
            .into_iter()
            .filter_map(|i| topic.partition(i).and_then(|p| ongoing(i, p)))
            .collect();
        if !found.is_empty() {
            out.push((name, found));
        }
    }
    out
}

/// A new partition's registration: the active assigned replicas form the ISR; the first of them
/// leads.
fn new_partition(image: &MetadataImage, replicas: Vec<i32>) -> PartitionRegistration {
    let mut reg = PartitionRegistration::new(replicas);
    reg.isr.retain(|&b| image.is_active(b));
    reg.leader = reg
        .replicas
        .iter()
        .copied()
        .find(|b| reg.isr.contains(b))
        .unwrap_or(NO_LEADER);
    reg
}

fn check_partition_count(count: i32) -> Result<(), ControllerError> {
    if !(1..=PARTITIONS_PER_TOPIC_MAX).contains(&count) {
        return Err(ControllerError::InvalidPartitions(format!(
            "Number of partitions must be in [1, {PARTITIONS_PER_TOPIC_MAX}], got {count}."
        )));
    }
    Ok(())
}

/// Manual assignments: distinct, non-empty, registered brokers, one replication factor, and at
/// least one active replica per partition.
fn check_assignments(
    image: &MetadataImage,
    assignments: &[Vec<i32>],
    first: i32,
) -> Result<(), ControllerError> {
    let rf = assignments.first().map_or(0, Vec::len);
    for (i, replicas) in assignments.iter().enumerate() {
        let p = first.saturating_add(i32::try_from(i).unwrap_or(i32::MAX));
        let distinct: BTreeSet<i32> = replicas.iter().copied().collect();
        if replicas.is_empty() || distinct.len() != replicas.len() {
            return Err(ControllerError::InvalidReplicaAssignment(format!(
                "Duplicate or empty replica assignment for partition {p}"
            )));
        }
        if replicas.len() != rf {
            return Err(ControllerError::InvalidReplicaAssignment(format!(
                "Inconsistent replication factor between partitions, partition 0 has {rf} while partition {p} has {} replicas.",
                replicas.len()
            )));
        }
        if let Some(b) = replicas.iter().find(|b| image.broker(**b).is_none()) {
            return Err(ControllerError::InvalidReplicaAssignment(format!(
                "The manual partition assignment includes broker {b}, but no such broker is registered."
            )));
        }
        if !replicas.iter().any(|b| image.is_active(*b)) {
            return Err(ControllerError::InvalidReplicaAssignment(format!(
                "All brokers specified in the partition assignment for partition {p} are fenced or in controlled shutdown."
            )));
        }
    }
    Ok(())
}

/// AlterUserScramCredentials with Kafka 4's rules (`ScramControlManager.alterCredentials`):
/// deletions, then upsertions, each checked unless its user already failed; a second change to a
/// user in the same request (whatever the mechanisms) → DUPLICATE_RESOURCE for that user and
/// nothing of it applied; a user whose first change was refused keeps that refusal. Checks: an
/// unknown mechanism → UNSUPPORTED_SASL_MECHANISM; iterations outside [4096, 16384] → "Too few
/// iterations" / "Too many iterations" (UNACCEPTABLE_CREDENTIAL); deleting a credential that does
/// not exist → RESOURCE_NOT_FOUND. Millrace's own: an empty user name, salt or salted password →
/// UNACCEPTABLE_CREDENTIAL. One result per user, in the order users first appear.
fn alter_scram_credentials(
    image: &MetadataImage,
    deletions: Vec<(String, i8)>,
    upsertions: Vec<ScramUpsertion>,
) -> Decision {
    let mut order: Vec<String> = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut errors: BTreeMap<String, ControllerError> = BTreeMap::new();
    let mut changes: BTreeMap<String, MetadataRecord> = BTreeMap::new();
    let unsupported =
        || ControllerError::UnsupportedSaslMechanism("Unknown SCRAM mechanism".to_string());
    let empty_name =
        || ControllerError::UnacceptableCredential("Username must not be empty".to_string());
    let duplicate = || {
        ControllerError::DuplicateResource(
            "A user credential cannot be altered twice in the same request".to_string(),
        )
    };
    for (name, code) in deletions {
        if seen.insert(name.clone()) {
            order.push(name.clone());
        }
        if errors.contains_key(&name) {
            continue;
        }
        if changes.remove(&name).is_some() {
            errors.insert(name, duplicate());
            continue;
        }
        let checked = (|| {
            if name.is_empty() {
                return Err(empty_name());
            }
            let mechanism = ScramMechanism::from_kafka_type(code).ok_or_else(unsupported)?;
            if image.scram_credential(&name, mechanism).is_none() {
                return Err(ControllerError::ResourceNotFound(
                    "Attempt to delete a user credential that does not exist".to_string(),
                ));
            }
            Ok(MetadataRecord::RemoveUserScramCredential {
                name: name.clone(),
                mechanism,
            })
        })();
        match checked {
            Ok(record) => {
                changes.insert(name, record);
            }
            Err(e) => {
                errors.insert(name, e);
            }
        }
    }
    for u in upsertions {
        if seen.insert(u.name.clone()) {
            order.push(u.name.clone());
        }
        if errors.contains_key(&u.name) {
            continue;
        }
        if changes.remove(&u.name).is_some() {
            errors.insert(u.name, duplicate());
            continue;
        }
        let checked = (|| {
            if u.name.is_empty() {
                return Err(empty_name());
            }
            let mechanism = ScramMechanism::from_kafka_type(u.mechanism).ok_or_else(unsupported)?;
            if u.iterations < SCRAM_ITERATIONS_MIN {
                return Err(ControllerError::UnacceptableCredential(
                    "Too few iterations".to_string(),
                ));
            }
            if u.iterations > SCRAM_ITERATIONS_MAX {
                return Err(ControllerError::UnacceptableCredential(
                    "Too many iterations".to_string(),
                ));
            }
            if u.salt.is_empty() || u.stored_key.is_empty() || u.server_key.is_empty() {
                return Err(ControllerError::UnacceptableCredential(
                    "Empty salt or salted password".to_string(),
                ));
            }
            Ok(MetadataRecord::UserScramCredential {
                name: u.name.clone(),
                credential: ScramCredential {
                    mechanism,
                    salt: u.salt.clone(),
                    stored_key: u.stored_key.clone(),
                    server_key: u.server_key.clone(),
                    iterations: u.iterations,
                },
            })
        })();
        match checked {
            Ok(record) => {
                changes.insert(u.name, record);
            }
            Err(e) => {
                errors.insert(u.name, e);
            }
        }
    }
    let mut records = Vec::with_capacity(changes.len());
    let mut results = Vec::with_capacity(order.len());
    for name in order {
        if let Some(e) = errors.remove(&name) {
            results.push((name, Err(e)));
        } else if let Some(record) = changes.remove(&name) {
            records.push(record);
            results.push((name, Ok(())));
        }
    }
    Decision {
        records,
        response: ControllerResponse::AlterUserScramCredentials { results },
    }
}

/// CreateAcls (`AclControlManager.createAcls`): each ACL checked on its own; one that exists, or
/// that comes twice, is a success that writes nothing more.
fn create_acls(image: &MetadataImage, acls: Vec<StandardAcl>) -> Decision {
    let mut added: BTreeSet<StandardAcl> = BTreeSet::new();
    let mut records = Vec::new();
    let results = acls
        .into_iter()
        .map(|acl| {
            acl.validate()
                .map_err(|e| ControllerError::InvalidRequest(e.0))?;
            if !image.acls.contains(&acl) && added.insert(acl.clone()) {
                records.push(MetadataRecord::AccessControlEntry { acl });
            }
            Ok(())
        })
        .collect();
    Decision {
        records,
        response: ControllerResponse::CreateAcls { results },
    }
}

/// DeleteAcls (`AclControlManager.deleteAcls`): per filter, the ACLs in force it matches; an ACL
/// two filters match is removed once and reported by both.
fn delete_acls(image: &MetadataImage, filters: Vec<AclFilter>) -> Decision {
    let mut removed: BTreeSet<StandardAcl> = BTreeSet::new();
    let results = filters
        .into_iter()
        .map(|filter| {
            filter
                .validate()
                .map_err(|e| ControllerError::InvalidRequest(e.0))?;
            let matched: Vec<StandardAcl> = image
                .acls
                .iter()
                .filter(|acl| filter.matches(acl))
                .cloned()
                .collect();
            removed.extend(matched.iter().cloned());
            Ok(matched)
        })
        .collect();
    Decision {
        records: removed
            .into_iter()
            .map(|acl| MetadataRecord::RemoveAccessControlEntry { acl })
            .collect(),
        response: ControllerResponse::DeleteAcls { results },
    }
}

/// AlterClientQuotas (`ClientQuotaControlManager.alterClientQuotas`): each entity checked on its
/// own; a key set to the value it has, or removed when absent, writes nothing.
fn alter_client_quotas(
    image: &MetadataImage,
    entries: Vec<QuotaAlteration>,
    validate_only: bool,
) -> Decision {
    let mut records = Vec::new();
    let results = entries
        .into_iter()
        .map(|entry| {
            let entity = millrace_cluster::quota::validate(&entry.entity, &entry.changes)
                .map_err(|e| ControllerError::InvalidRequest(e.0))?;
            let current = image.client_quotas.get(&entity);
            for (key, value) in entry.changes {
                let now = current.and_then(|keys| keys.get(&key)).copied();
                if now != value && !(value.is_none() && now.is_none()) {
                    records.push(MetadataRecord::ClientQuota {
                        entity: entity.clone(),
                        key,
                        value,
                    });
                }
            }
            Ok(())
        })
        .collect();
    Decision {
        records: if validate_only { Vec::new() } else { records },
        response: ControllerResponse::AlterClientQuotas { results },
    }
}

#[cfg(test)]
mod tests;

/// \[AllocateProducerIds\] The next block of producer ids, for a broker of the current epoch.
fn allocate_producer_ids(image: &MetadataImage, node_id: i32, broker_epoch: i64) -> Decision {
    if image.broker(node_id).map(|b| b.broker_epoch) != Some(broker_epoch) {
        return Decision::error(ControllerError::StaleBrokerEpoch);
    }
    let first = image.next_producer_id;
    let Some(next) = first.checked_add(PRODUCER_ID_BLOCK_SIZE) else {
        return Decision::error(ControllerError::Internal("producer ids exhausted".into()));
    };
    Decision {
        records: vec![MetadataRecord::ProducerIds {
            next_producer_id: next,
        }],
        response: ControllerResponse::ProducerIds {
            first_producer_id: first,
            count: PRODUCER_ID_BLOCK_SIZE,
        },
    }
}

/// IncrementalAlterConfigs' changes parsed; `None` when an operation is unknown.
fn parse_changes(changes: &[ConfigChangeSpec]) -> Option<Vec<ConfigChange>> {
    changes.iter().map(ConfigChangeSpec::to_change).collect()
}

/// The answer to an IncrementalAlterConfigs with an unknown operation.
fn unknown_operation() -> Decision {
    Decision::answer(ControllerResponse::Configs {
        result: Err(ControllerError::InvalidRequest(
            "unknown config operation".into(),
        )),
    })
}
