//! The metadata image: what every node knows of the cluster, built by applying the committed
//! metadata log in order (Kafka's `MetadataImage`): the cluster id, registered brokers (endpoint,
//! broker epoch, fenced, in controlled shutdown), topics with their ids and configs, and each
//! partition's replicas, ISR, ELR, leader, leader epoch and partition epoch.
//!
//! Where it sits: the quorum applies committed entries through [`SharedImage::apply_batch`]; the
//! front end, the group coordinator and the replica manager read immutable snapshots
//! ([`SharedImage::current`]) and react to changes ([`SharedImage::subscribe`]). The active
//! controller reads the same image to decide what to write next.
//!
//! **Invariant:** the image holds only committed metadata: nothing writes it but `apply_batch`
//! (and `restore`, from a snapshot of committed state).
//! **Invariant:** leader epochs and partition epochs only rise; a broker epoch is the log offset of
//! its registration, so a newer registration always has a larger epoch.
//! **Invariant:** a partition's state changes only through `Partition` and `PartitionChange`
//! records, each of which raises its partition epoch.
//! **Invariant:** applying is deterministic and never fails as a whole: a record that names an
//! unknown topic or broker is skipped with a warning, identically on every node.
//! **Invariant:** a metadata transaction (a decision spread over several entries) changes nothing
//! a reader sees until its `EndTransaction`: its records wait in [`MetadataImage::transaction`]
//! (which snapshots carry, so a node restored mid-transaction can still end it) and are then
//! applied together at the end's offset; an `AbortTransaction` drops them.
//!
//! Locking: the current image is an `Arc<MetadataImage>` behind a short `RwLock`; readers clone the
//! `Arc` and never block the applier for longer than that. Topics are `Arc`s, so a change to one
//! partition copies one topic, not the whole image.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tracing::warn;
use uuid::Uuid;

use crate::acl::AclSet;
use crate::config::TopicConfigs;
use crate::config_broker::DynamicBrokerConfigs;
use crate::config_group::GroupConfigs;
use crate::listeners::ListenerAddress;
use crate::quota::ClientQuotas;
// The partition registration is the payload of the Partition record and what a PartitionChange
// changes, so it lives with the records; these names stay here for existing paths.
use crate::records::{MetadataBatch, MetadataRecord};
pub use crate::records::{PartitionRegistration, NO_LEADER};
use crate::remote_log::RemoteLog;
use crate::scram::{ScramCredential, ScramMechanism};

/// A registered broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    pub node_id: i32,
    pub incarnation_id: Uuid,
    /// The log offset of the registration record.
    pub broker_epoch: i64,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
    /// Every listener the broker serves clients on ([`BrokerRegistration::endpoint_for`]).
    #[serde(default)]
    pub listeners: Vec<ListenerAddress>,
    pub fenced: bool,
    pub in_controlled_shutdown: bool,
}

impl BrokerRegistration {
    /// Where a client that came in on listener `name` reaches this broker: its listener of that
    /// name (Kafka answers each client in its own listener's addresses); `None` if it has none.
    /// A registration without listeners serves its one address under every name.
    pub fn endpoint_for(&self, name: &str) -> Option<(&str, u16)> {
        if self.listeners.is_empty() {
            return Some((&self.host, self.port));
        }
        self.listeners
            .iter()
            .find(|l| l.name.eq_ignore_ascii_case(name))
            .map(|l| (l.host.as_str(), l.port))
    }

    /// May lead partitions and be in an ISR (KIP-841).
    pub fn is_active(&self) -> bool {
        !self.fenced && !self.in_controlled_shutdown
    }
}

/// One topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicImage {
    pub name: String,
    pub topic_id: Uuid,
    pub configs: TopicConfigs,
    pub partitions: Vec<PartitionRegistration>,
}

impl TopicImage {
    pub fn partition(&self, index: i32) -> Option<&PartitionRegistration> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.partitions.get(i))
    }

    pub fn partition_count(&self) -> i32 {
        i32::try_from(self.partitions.len()).unwrap_or(i32::MAX)
    }

    /// The replication factor as Kafka reports it: the size of partition 0's replica set.
    pub fn replication_factor(&self) -> i16 {
        self.partitions
            .first()
            .map_or(0, |p| i16::try_from(p.replicas.len()).unwrap_or(i16::MAX))
    }
}

/// Everything a node knows of the cluster at one metadata log offset.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetadataImage {
    /// Log offset of the last applied entry; 0 before any.
    pub offset: u64,
    pub cluster_id: Option<String>,
    pub brokers: BTreeMap<i32, BrokerRegistration>,
    pub topics: BTreeMap<String, Arc<TopicImage>>,
    /// Topic id → name (derived from `topics`).
    #[serde(skip)]
    topic_names: HashMap<Uuid, String>,
    /// First producer id not yet handed out in a block.
    pub next_producer_id: i64,
    /// SCRAM credentials: user → one per mechanism.
    #[serde(default)]
    pub scram_credentials: BTreeMap<String, Vec<ScramCredential>>,
    /// The ACLs in force (shared: most batches do not touch them).
    #[serde(default)]
    pub acls: Arc<AclSet>,
    /// Client quotas: entity → key → value.
    #[serde(default)]
    pub client_quotas: Arc<ClientQuotas>,
    /// Tiered partitions' remote logs: topic id → partition → committed remote segments
    /// (decision 0073). Shared: most batches do not touch them.
    #[serde(default)]
    pub remote_logs: Arc<RemoteLogs>,
    /// Deleted topics whose remote objects are not yet purged: topic id → topic name.
    #[serde(default)]
    pub remote_purges: BTreeMap<Uuid, String>,
    /// GROUP resources' dynamic configs: group id → its configs (never empty). Shared: most
    /// batches do not touch them.
    #[serde(default)]
    pub group_configs: Arc<BTreeMap<String, GroupConfigs>>,
    /// BROKER resources' dynamic configs: per broker and the cluster default
    /// (`config_broker`). Shared: most batches do not touch them.
    #[serde(default)]
    pub broker_configs: Arc<DynamicBrokerConfigs>,
    /// The metadata transaction begun and not yet ended or aborted, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction: Option<OpenTransaction>,
}

/// Remote logs by topic id, then partition.
pub type RemoteLogs = BTreeMap<Uuid, BTreeMap<i32, Arc<RemoteLog>>>;

/// A metadata transaction in progress: the records of one decision committed so far, not yet
/// applied.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OpenTransaction {
    /// The name its `BeginTransaction` gave (what the decision was).
    pub name: String,
    /// Offset of the entry that began it.
    pub start_offset: u64,
    /// Its records so far, in log order.
    pub records: Vec<MetadataRecord>,
}

impl MetadataImage {
    pub fn topic(&self, name: &str) -> Option<&Arc<TopicImage>> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<&Arc<TopicImage>> {
        self.topic_names.get(&id).and_then(|n| self.topics.get(n))
    }

    pub fn partition(&self, topic: &str, index: i32) -> Option<&PartitionRegistration> {
        self.topic(topic).and_then(|t| t.partition(index))
    }

    /// A tiered partition's remote log; `None` before its first committed upload.
    pub fn remote_log(&self, topic_id: Uuid, partition: i32) -> Option<&Arc<RemoteLog>> {
        self.remote_logs.get(&topic_id)?.get(&partition)
    }

    /// A group's dynamic configs, if it has any.
    pub fn group_configs(&self, group_id: &str) -> Option<&GroupConfigs> {
        self.group_configs.get(group_id)
    }

    pub fn broker(&self, node_id: i32) -> Option<&BrokerRegistration> {
        self.brokers.get(&node_id)
    }

    /// A user's SCRAM credential for `mechanism`.
    pub fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Option<&ScramCredential> {
        self.scram_credentials
            .get(user)?
            .iter()
            .find(|c| c.mechanism == mechanism)
    }

    /// Brokers that are registered and not fenced (what Metadata lists).
    pub fn live_brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values().filter(|b| !b.fenced)
    }

    /// Brokers that may take new replicas and leaderships: unfenced, not shutting down.
    pub fn active_brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values().filter(|b| b.is_active())
    }

    pub fn is_active(&self, node_id: i32) -> bool {
        self.brokers.get(&node_id).is_some_and(|b| b.is_active())
    }

    /// Applies one committed entry at log `offset`.
    pub fn apply_batch(&mut self, offset: u64, batch: &MetadataBatch) {
        for record in &batch.records {
            self.apply_in_transaction(offset, record);
        }
        self.offset = self.offset.max(offset);
    }

    /// Applies `record`, or holds it back while a metadata transaction is open.
    fn apply_in_transaction(&mut self, offset: u64, record: &MetadataRecord) {
        match record {
            MetadataRecord::BeginTransaction { name } => {
                if let Some(open) = self.transaction.take() {
                    warn!(dropped = %open.name, records = open.records.len(), offset, "metadata: a transaction began inside another; the open one is dropped");
                }
                self.transaction = Some(OpenTransaction {
                    name: name.clone(),
                    start_offset: offset,
                    records: Vec::new(),
                });
            }
            MetadataRecord::EndTransaction => match self.transaction.take() {
                Some(open) => {
                    for r in &open.records {
                        self.apply(offset, r);
                    }
                }
                None => warn!(
                    offset,
                    "metadata: end of a transaction that is not open skipped"
                ),
            },
            MetadataRecord::AbortTransaction { reason } => match self.transaction.take() {
                Some(open) => {
                    warn!(name = %open.name, records = open.records.len(), start_offset = open.start_offset, offset, %reason, "metadata: transaction aborted");
                }
                None => warn!(
                    offset,
                    "metadata: abort of a transaction that is not open skipped"
                ),
            },
            _ => match &mut self.transaction {
                Some(open) => open.records.push(record.clone()),
                None => self.apply(offset, record),
            },
        }
    }

    fn apply(&mut self, offset: u64, record: &MetadataRecord) {
        let epoch = i64::try_from(offset).unwrap_or(i64::MAX);
        match record {
            MetadataRecord::BeginTransaction { .. }
            | MetadataRecord::EndTransaction
            | MetadataRecord::AbortTransaction { .. } => {
                // Handled by `apply_in_transaction`; a transaction never holds these.
            }
            MetadataRecord::UserScramCredential { name, credential } => {
                let credentials = self.scram_credentials.entry(name.clone()).or_default();
                credentials.retain(|c| c.mechanism != credential.mechanism);
                credentials.push(credential.clone());
                credentials.sort_by_key(|c| c.mechanism);
            }
            MetadataRecord::RemoveUserScramCredential { name, mechanism } => {
                if let Some(credentials) = self.scram_credentials.get_mut(name) {
                    credentials.retain(|c| c.mechanism != *mechanism);
                    if credentials.is_empty() {
                        self.scram_credentials.remove(name);
                    }
                }
            }
            MetadataRecord::ClientQuota { entity, key, value } => {
                let quotas = Arc::make_mut(&mut self.client_quotas);
                match value {
                    Some(v) => {
                        quotas
                            .entry(entity.clone())
                            .or_default()
                            .insert(key.clone(), *v);
                    }
                    None => {
                        if let Some(keys) = quotas.get_mut(entity) {
                            keys.remove(key);
                            if keys.is_empty() {
                                quotas.remove(entity);
                            }
                        }
                    }
                }
            }
            MetadataRecord::AccessControlEntry { acl } => {
                if !self.acls.contains(acl) {
                    Arc::make_mut(&mut self.acls).insert(acl.clone());
                }
            }
            MetadataRecord::RemoveAccessControlEntry { acl } => {
                if self.acls.contains(acl) {
                    Arc::make_mut(&mut self.acls).remove(acl);
                }
            }
            MetadataRecord::Bootstrap { cluster_id } => {
                if self.cluster_id.is_none() {
                    self.cluster_id = Some(cluster_id.clone());
                }
            }
            MetadataRecord::RegisterBroker {
                node_id,
                incarnation_id,
                host,
                port,
                rack,
                clean_shutdown,
                listeners,
            } => {
                self.brokers.insert(
                    *node_id,
                    BrokerRegistration {
                        node_id: *node_id,
                        incarnation_id: *incarnation_id,
                        broker_epoch: epoch,
                        host: host.clone(),
                        port: *port,
                        rack: rack.clone(),
                        listeners: listeners.clone(),
                        fenced: true,
                        in_controlled_shutdown: false,
                    },
                );
                // `clean_shutdown` is read by the controller, which writes the ISR/ELR changes an
                // unclean restart calls for as explicit partition changes (KIP-966).
                let _ = clean_shutdown;
            }
            MetadataRecord::FenceBroker {
                node_id,
                broker_epoch,
            } => {
                if let Some(b) = self.broker_at_epoch(*node_id, *broker_epoch) {
                    b.fenced = true;
                }
            }
            MetadataRecord::UnfenceBroker {
                node_id,
                broker_epoch,
            } => {
                if let Some(b) = self.broker_at_epoch(*node_id, *broker_epoch) {
                    b.fenced = false;
                }
            }
            MetadataRecord::BeginControlledShutdown {
                node_id,
                broker_epoch,
            } => {
                if let Some(b) = self.broker_at_epoch(*node_id, *broker_epoch) {
                    b.in_controlled_shutdown = true;
                }
            }
            MetadataRecord::UnregisterBroker {
                node_id,
                broker_epoch,
            } => {
                if self
                    .brokers
                    .get(node_id)
                    .is_some_and(|b| b.broker_epoch == *broker_epoch)
                {
                    self.brokers.remove(node_id);
                }
            }
            MetadataRecord::Topic {
                name,
                topic_id,
                configs,
            } => {
                if self.topics.contains_key(name) || self.topic_names.contains_key(topic_id) {
                    warn!(topic = %name, %topic_id, offset, "metadata: topic record for an existing topic skipped");
                    return;
                }
                self.topic_names.insert(*topic_id, name.clone());
                self.topics.insert(
                    name.clone(),
                    Arc::new(TopicImage {
                        name: name.clone(),
                        topic_id: *topic_id,
                        configs: configs.clone(),
                        partitions: Vec::new(),
                    }),
                );
            }
            MetadataRecord::Partition {
                topic_id,
                partition,
                registration,
            } => {
                let Some(topic) = self.topic_mut(*topic_id, offset) else {
                    return;
                };
                let index = usize::try_from(*partition).unwrap_or(usize::MAX);
                if index != topic.partitions.len() {
                    warn!(topic = %topic.name, partition, offset, "metadata: partition record out of order skipped");
                    return;
                }
                topic.partitions.push(registration.clone());
            }
            MetadataRecord::PartitionChange {
                topic_id,
                partition,
                ..
            } => {
                let Some(topic) = self.topic_mut(*topic_id, offset) else {
                    return;
                };
                let index = usize::try_from(*partition).unwrap_or(usize::MAX);
                let Some(p) = topic.partitions.get_mut(index) else {
                    warn!(topic = %topic.name, partition, offset, "metadata: change of an unknown partition skipped");
                    return;
                };
                p.apply_change(record);
            }
            MetadataRecord::RemoveTopic { topic_id } => match self.topic_names.remove(topic_id) {
                Some(name) => {
                    self.topics.remove(&name);
                    if self.remote_logs.contains_key(topic_id) {
                        Arc::make_mut(&mut self.remote_logs).remove(topic_id);
                        self.remote_purges.insert(*topic_id, name);
                    }
                }
                None => {
                    warn!(%topic_id, offset, "metadata: removal of an unknown topic skipped");
                }
            },
            MetadataRecord::TopicConfigs { topic_id, configs } => {
                if let Some(topic) = self.topic_mut(*topic_id, offset) {
                    topic.configs = configs.clone();
                }
            }
            MetadataRecord::ProducerIds { next_producer_id } => {
                self.next_producer_id = self.next_producer_id.max(*next_producer_id);
            }
            MetadataRecord::GroupConfigs { group_id, configs } => {
                let groups = Arc::make_mut(&mut self.group_configs);
                if configs.is_empty() {
                    groups.remove(group_id);
                } else {
                    groups.insert(group_id.clone(), configs.clone());
                }
            }
            MetadataRecord::BrokerConfigs { broker, configs } => {
                Arc::make_mut(&mut self.broker_configs).replace(*broker, configs.clone());
            }
            MetadataRecord::RemoteSegmentCommitted { .. }
            | MetadataRecord::RemoteSegmentsDeleted { .. }
            | MetadataRecord::RemoteTopicPurged { .. } => self.apply_remote(offset, record),
        }
    }

    /// Applies a tiered-storage record (decision 0073) to the remote logs.
    fn apply_remote(&mut self, offset: u64, record: &MetadataRecord) {
        match record {
            MetadataRecord::RemoteSegmentCommitted {
                topic_id,
                partition,
                segment,
            } => {
                if self.topic_mut(*topic_id, offset).is_none() {
                    return;
                }
                let logs = Arc::make_mut(&mut self.remote_logs);
                let log = logs
                    .entry(*topic_id)
                    .or_default()
                    .entry(*partition)
                    .or_default();
                if !Arc::make_mut(log).commit(segment.clone()) {
                    warn!(%topic_id, partition, base = segment.base_offset, offset, "metadata: remote segment that does not follow the remote log skipped");
                }
            }
            MetadataRecord::RemoteSegmentsDeleted {
                topic_id,
                partition,
                through_end_offset,
                log_start_offset,
            } => {
                let logs = Arc::make_mut(&mut self.remote_logs);
                if let Some(log) = logs.get_mut(topic_id).and_then(|t| t.get_mut(partition)) {
                    Arc::make_mut(log).delete_through(*through_end_offset, *log_start_offset);
                }
            }
            MetadataRecord::RemoteTopicPurged { topic_id } => {
                self.remote_purges.remove(topic_id);
            }
            _ => {}
        }
    }

    fn broker_at_epoch(
        &mut self,
        node_id: i32,
        broker_epoch: i64,
    ) -> Option<&mut BrokerRegistration> {
        match self.brokers.get_mut(&node_id) {
            Some(b) if b.broker_epoch == broker_epoch => Some(b),
            _ => None,
        }
    }

    fn topic_mut(&mut self, topic_id: Uuid, offset: u64) -> Option<&mut TopicImage> {
        let Some(name) = self.topic_names.get(&topic_id) else {
            warn!(%topic_id, offset, "metadata: record for an unknown topic skipped");
            return None;
        };
        self.topics.get_mut(name).map(Arc::make_mut)
    }

    /// Encodes the whole image (the quorum's snapshot).
    pub fn encode(&self) -> Result<Vec<u8>, crate::records::EncodeError> {
        Ok(serde_json::to_vec(self)?)
    }

    /// Decodes a snapshot made by [`MetadataImage::encode`].
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut image: MetadataImage = serde_json::from_slice(bytes)
            .map_err(|e| format!("undecodable metadata snapshot: {e}"))?;
        image.topic_names = image
            .topics
            .values()
            .map(|t| (t.topic_id, t.name.clone()))
            .collect();
        Ok(image)
    }
}

/// The image every component reads, with change notification.
#[derive(Debug)]
pub struct SharedImage {
    current: RwLock<Arc<MetadataImage>>,
    changed: watch::Sender<u64>,
}

impl Default for SharedImage {
    fn default() -> Self {
        Self::new(MetadataImage::default())
    }
}

impl SharedImage {
    pub fn new(image: MetadataImage) -> Self {
        let offset = image.offset;
        Self {
            current: RwLock::new(Arc::new(image)),
            changed: watch::Sender::new(offset),
        }
    }

    /// The image as of the last applied entry.
    pub fn current(&self) -> Arc<MetadataImage> {
        Arc::clone(&self.current.read())
    }

    /// Notified with the new offset after every applied entry or restore.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Applies one committed entry.
    pub fn apply_batch(&self, offset: u64, batch: &MetadataBatch) {
        let next = {
            let mut guard = self.current.write();
            let image = Arc::make_mut(&mut guard);
            image.apply_batch(offset, batch);
            image.offset
        };
        self.changed.send_replace(next);
    }

    /// Records that the entry at `offset` held no metadata (a quorum membership or blank entry).
    pub fn advance_to(&self, offset: u64) {
        let next = {
            let mut guard = self.current.write();
            if guard.offset >= offset {
                return;
            }
            Arc::make_mut(&mut guard).offset = offset;
            offset
        };
        self.changed.send_replace(next);
    }

    /// Replaces the image (a snapshot was installed).
    pub fn restore(&self, image: MetadataImage) {
        let offset = image.offset;
        *self.current.write() = Arc::new(image);
        self.changed.send_replace(offset);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn register(node_id: i32, clean: bool) -> MetadataRecord {
        MetadataRecord::RegisterBroker {
            node_id,
            incarnation_id: Uuid::from_u128(node_id as u128),
            host: "127.0.0.1".into(),
            port: 9000 + node_id as u16,
            rack: None,
            clean_shutdown: clean,
            listeners: Vec::new(),
        }
    }

    fn image_with_topic() -> (MetadataImage, Uuid) {
        let mut image = MetadataImage::default();
        let id = Uuid::from_u128(7);
        image.apply_batch(
            1,
            &MetadataBatch::new(vec![register(1, true), register(2, true)]),
        );
        image.apply_batch(
            2,
            &MetadataBatch::new(vec![
                MetadataRecord::Topic {
                    name: "t".into(),
                    topic_id: id,
                    configs: TopicConfigs::default(),
                },
                MetadataRecord::Partition {
                    topic_id: id,
                    partition: 0,
                    registration: PartitionRegistration::new(vec![1, 2]),
                },
            ]),
        );
        (image, id)
    }

    #[test]
    fn broker_epoch_is_the_registration_offset_and_starts_fenced() {
        let (image, _) = image_with_topic();
        let b = image.broker(2).expect("registered");
        assert_eq!(b.broker_epoch, 1);
        assert!(b.fenced);
        assert_eq!(image.live_brokers().count(), 0);
    }

    #[test]
    fn stale_broker_epoch_records_do_not_touch_a_newer_registration() {
        let (mut image, _) = image_with_topic();
        image.apply_batch(3, &MetadataBatch::new(vec![register(1, true)]));
        image.apply_batch(
            4,
            &MetadataBatch::new(vec![MetadataRecord::UnfenceBroker {
                node_id: 1,
                broker_epoch: 1,
            }]),
        );
        assert!(image.broker(1).expect("b1").fenced);
        image.apply_batch(
            5,
            &MetadataBatch::new(vec![MetadataRecord::UnfenceBroker {
                node_id: 1,
                broker_epoch: 3,
            }]),
        );
        assert!(!image.broker(1).expect("b1").fenced);
    }

    #[test]
    fn leader_change_raises_both_epochs_isr_change_only_partition_epoch() {
        let (mut image, id) = image_with_topic();
        let isr_only = MetadataRecord::partition_change(id, 0);
        let isr_only = crate::records::PartitionChangeBuilder {
            isr: Some(vec![1]),
            ..isr_only
        }
        .build();
        image.apply_batch(3, &MetadataBatch::new(vec![isr_only]));
        let p = image.partition("t", 0).expect("p");
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (1, 0, 1));
        let lead = crate::records::PartitionChangeBuilder {
            leader: Some(2),
            isr: Some(vec![2]),
            ..MetadataRecord::partition_change(id, 0)
        }
        .build();
        image.apply_batch(4, &MetadataBatch::new(vec![lead]));
        let p = image.partition("t", 0).expect("p");
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (2, 1, 2));
    }

    #[test]
    fn snapshot_round_trip_restores_the_topic_id_index() {
        let (image, id) = image_with_topic();
        let back = MetadataImage::decode(&image.encode().expect("encode")).expect("decode");
        assert_eq!(back, image);
        assert_eq!(back.topic_by_id(id).expect("by id").name, "t");
    }

    #[test]
    fn records_for_unknown_topics_are_skipped_identically() {
        let (mut image, _) = image_with_topic();
        let before = image.clone();
        let change = crate::records::PartitionChangeBuilder {
            leader: Some(2),
            ..MetadataRecord::partition_change(Uuid::from_u128(99), 0)
        }
        .build();
        image.apply_batch(3, &MetadataBatch::new(vec![change]));
        assert_eq!(image.topics, before.topics);
        assert_eq!(image.offset, 3);
    }

    #[test]
    fn a_transaction_takes_effect_at_its_end_and_survives_a_snapshot() {
        let (mut image, id) = image_with_topic();
        let before = image.clone();
        let lead = |leader| {
            crate::records::PartitionChangeBuilder {
                leader: Some(leader),
                ..MetadataRecord::partition_change(id, 0)
            }
            .build()
        };
        image.apply_batch(
            3,
            &MetadataBatch::new(vec![
                MetadataRecord::BeginTransaction { name: "t".into() },
                register(3, true),
                lead(2),
            ]),
        );
        // Nothing visible, but the offset moves and the transaction is in the snapshot.
        assert_eq!(
            (&image.brokers, &image.topics),
            (&before.brokers, &before.topics)
        );
        assert_eq!(image.offset, 3);
        let mut restored = MetadataImage::decode(&image.encode().expect("encode")).expect("decode");
        assert_eq!(restored, image);
        restored.apply_batch(4, &MetadataBatch::new(vec![MetadataRecord::EndTransaction]));
        assert!(restored.transaction.is_none());
        // Every record at the end's offset: the broker epoch is 4, not 3.
        assert_eq!(restored.broker(3).map(|b| b.broker_epoch), Some(4));
        assert_eq!(restored.partition("t", 0).map(|p| p.leader), Some(2));
    }

    #[test]
    fn an_aborted_transaction_changes_nothing() {
        let (mut image, id) = image_with_topic();
        let before = image.clone();
        image.apply_batch(
            3,
            &MetadataBatch::new(vec![
                MetadataRecord::BeginTransaction { name: "t".into() },
                MetadataRecord::RemoveTopic { topic_id: id },
            ]),
        );
        image.apply_batch(
            4,
            &MetadataBatch::new(vec![MetadataRecord::AbortTransaction {
                reason: "test".into(),
            }]),
        );
        // A stray end or abort is skipped.
        image.apply_batch(5, &MetadataBatch::new(vec![MetadataRecord::EndTransaction]));
        assert_eq!(image.topics, before.topics);
        assert!(image.transaction.is_none());
        assert_eq!(image.offset, 5);
    }
}
