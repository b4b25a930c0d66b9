//! The cluster as one broker sees it: its own endpoint, the metadata image, and the topic
//! operations (create, delete, add partitions) that must change the image and the store together.
//!
//! Ordering, so that a crash at any point is repaired at the next start by [`Cluster::open`]:
//! create = image first, then partition logs (missing logs are created at start);
//! delete = image first (the topic leaves it and is remembered as being deleted), then logs, then
//! the image forgets the deletion (logs of a topic being deleted are deleted at start).
//!
//! **Invariant:** the image is never a reason to delete data. At start, a partition directory the
//! image does not name is set aside (`<dir>.<nanos>.orphaned`), not deleted — unless a
//! DeleteTopics asked for that topic id; a directory whose topic id is not the image's is set
//! aside too; and a missing image is rebuilt from the directories (`recover.rs`) instead of
//! starting empty, or, where the directories contradict each other, the broker refuses to start.
//!
//! Locking: `admin` serialises topic operations so that two CreateTopics for the same name cannot
//! both create logs; reads (Metadata, Produce, Fetch) never take it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use millrace_store::{PartitionLog, Store, StoreError, TopicPartition};
use parking_lot::Mutex;
use tracing::{info, warn};
use uuid::Uuid;

use crate::config::{BrokerConfig, ConfigError, TopicConfigs};
use crate::metadata::{ClusterMetadata, MetadataError, TopicMetadata, METADATA_FILE};
use crate::recover;
use crate::topic_name::validate_topic_name;

/// Writes an image rebuilt from the store's partition directories (the checkpoint was missing),
/// with one log line saying so.
fn rebuild_metadata(
    config: &BrokerConfig,
    store: &Store,
    data_dir: &std::path::Path,
) -> Result<ClusterMetadata, AdminError> {
    let facts = recover::facts_from_store(store);
    let rebuilt = recover::rebuild_image(&facts, config).map_err(|reason| {
        AdminError::Metadata(MetadataError::Ambiguous {
            path: data_dir.join(METADATA_FILE),
            reason,
        })
    })?;
    let topics: Vec<String> = rebuilt
        .topics
        .iter()
        .map(|t| format!("{} ({} partitions)", t.name, t.partitions))
        .collect();
    warn!(
        file = %data_dir.join(METADATA_FILE).display(),
        directories = facts.len(),
        topics = %topics.join(", "),
        guesses = %rebuilt.notes.join("; "),
        "cluster metadata file missing: rebuilt the metadata image from the partition directories (new cluster id); every record is kept"
    );
    Ok(ClusterMetadata::create(
        data_dir,
        rebuilt.topics,
        rebuilt.next_producer_id,
    )?)
}

/// Refuses (before anything is opened or changed) a data dir whose cluster metadata file is
/// missing while its partition directories contradict each other; `Ok` otherwise. The broker
/// calls it before opening the store, so that a refusal leaves every file untouched.
pub fn check_data_dir(
    config: &BrokerConfig,
    data_dir: &std::path::Path,
) -> Result<(), MetadataError> {
    let path = data_dir.join(METADATA_FILE);
    if path.exists() || !data_dir.exists() {
        return Ok(());
    }
    let facts = recover::facts_from_disk(data_dir).map_err(|reason| MetadataError::Ambiguous {
        path: path.clone(),
        reason,
    })?;
    recover::rebuild_image(&facts, config)
        .map(|_| ())
        .map_err(|reason| MetadataError::Ambiguous { path, reason })
}

/// The store's form of a topic id.
pub fn topic_id(id: uuid::Uuid) -> millrace_store::TopicId {
    millrace_store::TopicId::from_bytes(id.into_bytes())
}

/// Where clients reach a broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerEndpoint {
    pub node_id: i32,
    pub host: String,
    pub port: u16,
}

/// Why a topic operation was refused. The front end maps each to a Kafka error code.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{0}")]
    InvalidTopic(String),
    #[error("Topic '{0}' already exists.")]
    TopicAlreadyExists(String),
    #[error("This server does not host this topic-partition: {0}")]
    UnknownTopic(String),
    #[error("{0}")]
    InvalidPartitions(String),
    #[error("{0}")]
    InvalidReplicationFactor(String),
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    #[error(transparent)]
    InvalidConfig(#[from] ConfigError),
    #[error("Topic deletion is disabled.")]
    TopicDeletionDisabled,
    #[error(transparent)]
    Metadata(MetadataError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<MetadataError> for AdminError {
    fn from(e: MetadataError) -> Self {
        match e {
            MetadataError::TopicAlreadyExists(t) => AdminError::TopicAlreadyExists(t),
            MetadataError::UnknownTopic(t) => AdminError::UnknownTopic(t),
            MetadataError::InvalidPartitions(m) => AdminError::InvalidPartitions(m),
            other => AdminError::Metadata(other),
        }
    }
}

/// What a CreateTopics entry asks for; `None` means "the broker default" (Kafka's -1).
#[derive(Debug, Clone, Default)]
pub struct NewTopic {
    pub name: String,
    pub partitions: Option<i32>,
    pub replication_factor: Option<i16>,
    /// Manual assignment: partition index → broker ids. Empty = let the broker choose.
    pub assignments: BTreeMap<i32, Vec<i32>>,
    pub configs: BTreeMap<String, String>,
}

/// Producer ids reserved per metadata write (Kafka's controller hands out blocks of 1000 too).
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// The unused rest of the current producer-id block: `next..end`.
#[derive(Debug, Default)]
struct ProducerIdBlock {
    next: i64,
    end: i64,
}

/// One broker's view of the cluster plus the topic operations.
pub struct Cluster {
    pub config: BrokerConfig,
    pub metadata: ClusterMetadata,
    pub store: Arc<Store>,
    endpoint: BrokerEndpoint,
    admin: Mutex<()>,
    producer_ids: Mutex<ProducerIdBlock>,
}

impl Cluster {
    /// Opens the metadata image in the store's data directory and reconciles the store with it.
    /// Without an image: a new cluster on an empty data dir, else an image rebuilt from the
    /// partition directories (`MetadataError::Ambiguous` where they contradict each other).
    pub fn open(
        config: BrokerConfig,
        store: Arc<Store>,
        data_dir: &std::path::Path,
        endpoint: BrokerEndpoint,
    ) -> Result<Self, AdminError> {
        let metadata = match ClusterMetadata::load(data_dir)? {
            Some(metadata) => metadata,
            None if store.partitions().is_empty() => ClusterMetadata::create_new(data_dir)?,
            None => rebuild_metadata(&config, &store, data_dir)?,
        };
        let cluster = Self {
            config,
            metadata,
            store,
            endpoint,
            admin: Mutex::new(()),
            producer_ids: Mutex::new(ProducerIdBlock::default()),
        };
        cluster.reconcile()?;
        Ok(cluster)
    }

    /// Makes the store hold exactly the partitions the image names: creates missing logs, records
    /// topic ids in directories that have none, sets aside directories the image does not name
    /// (or names with another topic id), deletes those of topics being deleted.
    fn reconcile(&self) -> Result<(), AdminError> {
        let deleting = self.metadata.pending_deletions();
        let mut wanted = BTreeSet::new();
        for topic in self.metadata.topics() {
            let log_config = self.config.log_config(&topic.configs);
            let id = topic_id(topic.topic_id);
            for p in 0..topic.partitions {
                let tp = TopicPartition {
                    topic: topic.name.clone(),
                    partition: p,
                };
                let mut log = self.store.partition(&tp);
                if let Some(existing) = &log {
                    match existing.topic_id() {
                        None => existing.assign_topic_id(id)?,
                        Some(on_disk) if on_disk == id => {}
                        Some(on_disk) => {
                            let aside = self.store.set_aside_partition(&tp)?;
                            warn!(partition = %tp, topic_id = %id, %on_disk, moved_to = %aside.display(), "partition directory belongs to another topic id; moved aside (nothing deleted)");
                            log = None;
                        }
                    }
                }
                match log {
                    Some(log) => log.update_config(log_config.clone()),
                    None => {
                        warn!(partition = %tp, "partition log missing at start; creating it empty");
                        self.store.create_partition(&tp, log_config.clone(), id)?;
                    }
                }
                wanted.insert(tp);
            }
        }
        for tp in self.store.partitions() {
            if wanted.contains(&tp) {
                continue;
            }
            let on_disk = self
                .store
                .partition(&tp)
                .and_then(|l| l.topic_id())
                .map(|id| Uuid::from_bytes(*id.as_bytes()));
            let asked = deleting.iter().any(|(id, name)| {
                *name == tp.topic && on_disk.is_none_or(|on_disk| on_disk == *id)
            });
            if asked {
                info!(partition = %tp, "deleting the log of a deleted topic");
                self.store.delete_partition(&tp)?;
            } else {
                let aside = self.store.set_aside_partition(&tp)?;
                warn!(partition = %tp, moved_to = %aside.display(), "partition directory is not in the cluster metadata; moved aside (nothing deleted)");
            }
        }
        let done: Vec<Uuid> = deleting.iter().map(|(id, _)| *id).collect();
        self.metadata.finish_deletions(&done)?;
        Ok(())
    }

    pub fn node_id(&self) -> i32 {
        self.endpoint.node_id
    }

    pub fn cluster_id(&self) -> String {
        self.metadata.cluster_id()
    }

    /// Live brokers. A single node for now.
    pub fn brokers(&self) -> Vec<BrokerEndpoint> {
        vec![self.endpoint.clone()]
    }

    /// The broker that answers admin requests (Kafka's `controller_id`).
    pub fn controller_id(&self) -> i32 {
        self.endpoint.node_id
    }

    /// A producer id never handed out before (InitProducerId without a transactional id).
    pub fn next_producer_id(&self) -> Result<i64, AdminError> {
        let mut block = self.producer_ids.lock();
        if block.next >= block.end {
            let first = self
                .metadata
                .allocate_producer_ids(PRODUCER_ID_BLOCK_SIZE)?;
            *block = ProducerIdBlock {
                next: first,
                end: first + PRODUCER_ID_BLOCK_SIZE,
            };
        }
        let id = block.next;
        block.next += 1;
        Ok(id)
    }

    /// Replaces a topic's config overrides (AlterConfigs semantics) and applies them to its logs.
    pub fn set_topic_configs(
        &self,
        name: &str,
        configs: TopicConfigs,
        validate_only: bool,
    ) -> Result<(), AdminError> {
        let _admin = self.admin.lock();
        let topic = self
            .metadata
            .topic(name)
            .ok_or_else(|| AdminError::UnknownTopic(name.to_string()))?;
        if validate_only {
            return Ok(());
        }
        self.metadata.set_topic_configs(name, configs.clone())?;
        let log_config = self.config.log_config(&configs);
        for p in 0..topic.partitions {
            if let Some(log) = self.partition_log(name, p) {
                log.update_config(log_config.clone());
            }
        }
        info!(topic = %name, "altered topic configs");
        Ok(())
    }

    pub fn partition_log(&self, topic: &str, partition: i32) -> Option<Arc<PartitionLog>> {
        self.store.partition(&TopicPartition {
            topic: topic.to_string(),
            partition,
        })
    }

    /// Validates a topic creation without performing it: name, partitions, replication factor,
    /// assignment and configs. Returns the resolved (partitions, replication factor, configs).
    pub fn validate_new_topic(
        &self,
        new: &NewTopic,
    ) -> Result<(i32, i16, TopicConfigs), AdminError> {
        validate_topic_name(&new.name).map_err(AdminError::InvalidTopic)?;
        if self.metadata.topic(&new.name).is_some() {
            return Err(AdminError::TopicAlreadyExists(new.name.clone()));
        }
        let brokers = self.brokers().len() as i16;
        let (partitions, replication_factor) = if new.assignments.is_empty() {
            let partitions = new
                .partitions
                .unwrap_or_else(|| self.config.num_partitions());
            let rf = new
                .replication_factor
                .unwrap_or_else(|| self.config.default_replication_factor());
            (partitions, rf)
        } else {
            if new.partitions.is_some() || new.replication_factor.is_some() {
                return Err(AdminError::InvalidReplicaAssignment(
                    "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.".into(),
                ));
            }
            self.check_assignments(&new.assignments, 0)?;
            let rf = new
                .assignments
                .values()
                .next()
                .map_or(1, |r| r.len() as i16);
            (new.assignments.len() as i32, rf)
        };
        if partitions < 1 {
            return Err(AdminError::InvalidPartitions(
                "Number of partitions was set to an invalid non-positive value.".into(),
            ));
        }
        if replication_factor < 1 {
            return Err(AdminError::InvalidReplicationFactor(
                "Replication factor must be larger than 0, or -1 to use the default value.".into(),
            ));
        }
        if replication_factor > brokers {
            return Err(AdminError::InvalidReplicationFactor(format!(
                "Unable to replicate the partition {replication_factor} time(s): The target replication factor of {replication_factor} cannot be reached because only {brokers} broker(s) are registered."
            )));
        }
        let configs = TopicConfigs::new(new.configs.clone())?;
        Ok((partitions, replication_factor, configs))
    }

    fn check_assignments(
        &self,
        assignments: &BTreeMap<i32, Vec<i32>>,
        first: i32,
    ) -> Result<(), AdminError> {
        let live: BTreeSet<i32> = self.brokers().iter().map(|b| b.node_id).collect();
        for (i, (&p, replicas)) in assignments.iter().enumerate() {
            if p != first + i as i32 {
                return Err(AdminError::InvalidReplicaAssignment(
                    "Partitions should be a consecutive 0-based integer sequence".into(),
                ));
            }
            let distinct: BTreeSet<i32> = replicas.iter().copied().collect();
            if replicas.is_empty() || distinct.len() != replicas.len() {
                return Err(AdminError::InvalidReplicaAssignment(format!(
                    "Duplicate or empty replica assignment for partition {p}"
                )));
            }
            if let Some(b) = replicas.iter().find(|b| !live.contains(b)) {
                return Err(AdminError::InvalidReplicaAssignment(format!(
                    "Unknown broker {b} in the assignment of partition {p}"
                )));
            }
        }
        Ok(())
    }

    /// Creates a topic: image first, then one log per partition.
    pub fn create_topic(&self, new: &NewTopic) -> Result<TopicMetadata, AdminError> {
        let _admin = self.admin.lock();
        let (partitions, rf, configs) = self.validate_new_topic(new)?;
        let log_config = self.config.log_config(&configs);
        let topic = self
            .metadata
            .create_topic(&new.name, partitions, rf, configs)?;
        for p in 0..partitions {
            self.ensure_log(&topic, p, &log_config)?;
        }
        info!(topic = %topic.name, partitions, topic_id = %topic.topic_id, "created topic");
        Ok(topic)
    }

    fn ensure_log(
        &self,
        topic: &TopicMetadata,
        partition: i32,
        config: &millrace_store::LogConfig,
    ) -> Result<(), AdminError> {
        let tp = TopicPartition {
            topic: topic.name.clone(),
            partition,
        };
        match self
            .store
            .create_partition(&tp, config.clone(), topic_id(topic.topic_id))
        {
            Ok(_) | Err(StoreError::AlreadyExists(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes a topic: image first, then its logs (data removed from disk).
    pub fn delete_topic(&self, name: &str) -> Result<TopicMetadata, AdminError> {
        if !self.config.delete_topic_enable() {
            return Err(AdminError::TopicDeletionDisabled);
        }
        let _admin = self.admin.lock();
        let topic = self.metadata.delete_topic(name)?;
        for p in 0..topic.partitions {
            let tp = TopicPartition {
                topic: topic.name.clone(),
                partition: p,
            };
            match self.store.delete_partition(&tp) {
                Ok(()) | Err(StoreError::UnknownPartition(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.metadata.finish_deletions(&[topic.topic_id])?;
        info!(topic = %name, "deleted topic");
        Ok(topic)
    }

    /// Grows a topic to `count` partitions (or only checks that it could, with `validate_only`).
    pub fn create_partitions(
        &self,
        name: &str,
        count: i32,
        assignments: Option<&BTreeMap<i32, Vec<i32>>>,
        validate_only: bool,
    ) -> Result<(), AdminError> {
        let _admin = self.admin.lock();
        let topic = self
            .metadata
            .topic(name)
            .ok_or_else(|| AdminError::UnknownTopic(name.to_string()))?;
        if count <= topic.partitions {
            return Err(AdminError::InvalidPartitions(format!(
                "Topic currently has {} partitions, which is higher than or equal to the requested {count}.",
                topic.partitions
            )));
        }
        if let Some(assignments) = assignments {
            if assignments.len() as i32 != count - topic.partitions {
                return Err(AdminError::InvalidReplicaAssignment(format!(
                    "Increasing the number of partitions by {} but {} assignments provided.",
                    count - topic.partitions,
                    assignments.len()
                )));
            }
            self.check_assignments(assignments, topic.partitions)?;
        }
        if validate_only {
            return Ok(());
        }
        self.metadata.set_partition_count(name, count)?;
        let log_config = self.config.log_config(&topic.configs);
        for p in topic.partitions..count {
            self.ensure_log(&topic, p, &log_config)?;
        }
        info!(topic = %name, from = topic.partitions, to = count, "added partitions");
        Ok(())
    }
}
