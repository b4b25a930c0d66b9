//! The cluster as one broker sees it: this node (id, endpoint, whether it runs alone), the
//! committed metadata image every request reads, and how a brand-new metadata log is seeded from
//! what an older data directory already holds.
//!
//! Where it sits: the front end reads brokers, topics and partitions from [`Cluster::image`]; topic
//! changes go to the active controller (`millrace-controller`), never through here; the broker's
//! replica manager creates, deletes and sets aside partition logs as the image says.
//!
//! **Invariant:** the image is never a reason to delete data. A data directory whose metadata log
//! is missing is seeded from its legacy `cluster-metadata.json` or, without that, rebuilt from the
//! partition directories (`recover.rs`), keeping topic ids and every record; where the directories
//! contradict each other the broker refuses to start ([`check_data_dir`]) and changes nothing.
//! Partition directories the image does not name are set aside (`*.orphaned`), not deleted.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use millrace_store::Store;
use tracing::{info, warn};

use crate::config::BrokerConfig;
use crate::image::{
    BrokerRegistration, MetadataImage, PartitionRegistration, SharedImage, TopicImage,
};
use crate::metadata::{ClusterMetadata, MetadataError, METADATA_FILE};
use crate::records::MetadataRecord;
use crate::recover;
// Defined with the rebuild, their only user here; kept under these paths.
pub use crate::recover::{topic_id, PRODUCER_ID_BLOCK_SIZE};

/// The metadata log's directory inside a data directory (Kafka's `__cluster_metadata-0`).
pub const METADATA_LOG_DIR: &str = "__cluster_metadata";

/// Whether the data directory has a metadata log already (under `metadata.log.dir` when that
/// is set, see [`metadata_log_root`]).
pub fn has_metadata_log(data_dir: &Path) -> bool {
    data_dir.join(METADATA_LOG_DIR).exists()
}

/// The directory that holds the metadata log's directory (`METADATA_LOG_DIR`): Kafka's
/// `metadata.log.dir` when set, else the (first) data directory, as before that key existed.
pub fn metadata_log_root(config: &BrokerConfig, data_dir: &Path) -> std::path::PathBuf {
    config
        .metadata_log_dir()
        .map_or_else(|| data_dir.to_path_buf(), std::path::PathBuf::from)
}

/// Refuses (before anything is opened or changed) a data dir that has neither a metadata log nor
/// a legacy metadata file while its partition directories contradict each other; `Ok` otherwise.
/// The broker calls it before opening the store, so that a refusal leaves every file untouched.
pub fn check_data_dir(config: &BrokerConfig, data_dir: &Path) -> Result<(), MetadataError> {
    let path = data_dir.join(METADATA_FILE);
    if has_metadata_log(&metadata_log_root(config, data_dir)) || path.exists() || !data_dir.exists()
    {
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

/// The records a brand-new metadata log starts with on this data directory: the cluster id and
/// topics of a legacy `cluster-metadata.json` (a single-node data directory from before the
/// metadata log), or topics rebuilt from the partition directories, each partition led by
/// `node_id`; nothing for an empty directory. Used only if the metadata log turns out empty when
/// this node first becomes the active controller.
pub fn bootstrap_records(
    config: &BrokerConfig,
    data_dir: &Path,
    store: &Store,
    node_id: i32,
) -> Result<Vec<MetadataRecord>, MetadataError> {
    let mut records = Vec::new();
    let (topics, next_producer_id) = match ClusterMetadata::load(data_dir)? {
        Some(legacy) => {
            records.push(MetadataRecord::Bootstrap {
                cluster_id: legacy.cluster_id(),
            });
            info!(file = %legacy.path().display(), topics = legacy.topics().len(), "seeding the metadata log from the legacy metadata file");
            (legacy.topics(), legacy.next_producer_id())
        }
        None if store.partitions().is_empty() => return Ok(records),
        None => {
            let facts = recover::facts_from_store(store);
            let rebuilt = recover::rebuild_image(&facts, config).map_err(|reason| {
                MetadataError::Ambiguous {
                    path: data_dir.join(METADATA_FILE),
                    reason,
                }
            })?;
            warn!(
                directories = facts.len(),
                topics = rebuilt.topics.len(),
                guesses = %rebuilt.notes.join("; "),
                "no metadata log and no metadata file: seeding the metadata log from the partition directories; every record is kept"
            );
            (rebuilt.topics, rebuilt.next_producer_id)
        }
    };
    for topic in topics {
        records.push(MetadataRecord::Topic {
            name: topic.name.clone(),
            topic_id: topic.topic_id,
            configs: topic.configs.clone(),
        });
        for p in 0..topic.partitions {
            records.push(MetadataRecord::Partition {
                topic_id: topic.topic_id,
                partition: p,
                registration: PartitionRegistration::new(vec![node_id]),
            });
        }
    }
    records.push(MetadataRecord::ProducerIds { next_producer_id });
    Ok(records)
}

/// Once the seeded metadata log holds the legacy file's contents, the file is renamed so that it
/// is not mistaken for the truth again.
pub fn retire_legacy_metadata(data_dir: &Path) -> Option<PathBuf> {
    let path = data_dir.join(METADATA_FILE);
    if !path.exists() {
        return None;
    }
    let retired = data_dir.join(format!("{METADATA_FILE}.migrated"));
    match std::fs::rename(&path, &retired) {
        Ok(()) => Some(retired),
        Err(e) => {
            warn!(file = %path.display(), error = %e, "cannot retire the legacy metadata file");
            None
        }
    }
}

/// Where clients reach a broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerEndpoint {
    pub node_id: i32,
    pub host: String,
    pub port: u16,
}

impl From<&BrokerRegistration> for BrokerEndpoint {
    fn from(b: &BrokerRegistration) -> Self {
        BrokerEndpoint {
            node_id: b.node_id,
            host: b.host.clone(),
            port: b.port,
        }
    }
}

/// One broker's view of the cluster.
pub struct Cluster {
    pub config: BrokerConfig,
    pub store: Arc<Store>,
    image: Arc<SharedImage>,
    endpoint: BrokerEndpoint,
    single_node: bool,
}

impl Cluster {
    /// `single_node`: no controller quorum is configured (a quorum of one on this node).
    pub fn new(
        config: BrokerConfig,
        store: Arc<Store>,
        image: Arc<SharedImage>,
        endpoint: BrokerEndpoint,
        single_node: bool,
    ) -> Self {
        Self {
            config,
            store,
            image,
            endpoint,
            single_node,
        }
    }

    pub fn node_id(&self) -> i32 {
        self.endpoint.node_id
    }

    pub fn endpoint(&self) -> &BrokerEndpoint {
        &self.endpoint
    }

    /// Whether this broker runs without a controller quorum (a single-node cluster).
    pub fn is_single_node(&self) -> bool {
        self.single_node
    }

    /// The broker config in force now: the static one with the image's dynamic broker configs
    /// (this broker's, the cluster default's) over it.
    pub fn effective_config(&self) -> BrokerConfig {
        self.image().broker_configs.layer_over(&self.config)
    }

    /// The committed metadata as of now.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.current()
    }

    pub fn shared_image(&self) -> &Arc<SharedImage> {
        &self.image
    }

    pub fn cluster_id(&self) -> String {
        self.image().cluster_id.clone().unwrap_or_default()
    }

    /// Live (registered, unfenced) brokers.
    pub fn brokers(&self) -> Vec<BrokerEndpoint> {
        self.image()
            .live_brokers()
            .map(BrokerEndpoint::from)
            .collect()
    }

    /// A registered broker's endpoint.
    pub fn broker(&self, node_id: i32) -> Option<BrokerEndpoint> {
        self.image().broker(node_id).map(BrokerEndpoint::from)
    }

    pub fn topic(&self, name: &str) -> Option<Arc<TopicImage>> {
        self.image().topic(name).cloned()
    }

    pub fn topic_by_id(&self, id: uuid::Uuid) -> Option<Arc<TopicImage>> {
        self.image().topic_by_id(id).cloned()
    }
}
