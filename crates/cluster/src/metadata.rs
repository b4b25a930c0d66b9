//! The legacy single-node metadata file (`cluster-metadata.json`, [`ClusterMetadata`]): cluster
//! id, next producer id, and every topic with its topic id, partition count and config overrides,
//! as data directories written before the metadata log kept them.
//!
//! Where it sits: the metadata image is now built from the metadata log (`image.rs`,
//! `records.rs`); this file is only read, when a data directory has no metadata log yet, to seed
//! a new one (`node.rs`, `bootstrap_records`). A missing file is not an empty image: the caller
//! rebuilds one from the partition directories (`recover.rs`) or, on an empty data dir, starts a
//! new cluster. Also here: [`MetadataError`] (with [`RebuildError`], why the directories are
//! ambiguous), which the broker's pre-start check reports.
//!
//! Persistence (kept for tests and old directories): written tmp → fsync → rename → fsync dir, so
//! a crash leaves either the old or the new file. Locking: one `RwLock` around the contents;
//! writers persist while holding it.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::config::TopicConfigs;

/// File name of the metadata checkpoint inside the data directory.
pub const METADATA_FILE: &str = "cluster-metadata.json";

/// Most partitions one topic may have (Kafka has no hard limit; this bounds a CreateTopics or
/// CreatePartitions request so that one request cannot create millions of logs).
pub const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("topic '{0}' already exists")]
    TopicAlreadyExists(String),
    #[error("topic '{0}' does not exist")]
    UnknownTopic(String),
    #[error("invalid partition count: {0}")]
    InvalidPartitions(String),
    #[error("metadata checkpoint {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("metadata checkpoint {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("{} is missing and the partition directories do not say unambiguously what it held: {reason}. Nothing was changed; restore the file from a backup, or move the partition directories that do not belong out of {}, then start again", path.display(), path.parent().map_or_else(String::new, |d| d.display().to_string()))]
    Ambiguous { path: PathBuf, reason: RebuildError },
}

/// Why the partition directories do not determine the image (decided by `recover.rs`; defined
/// here because [`MetadataError::Ambiguous`] carries it).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RebuildError {
    #[error("topic '{topic}': its partitions carry different topic ids ({ids})")]
    ConflictingTopicIds { topic: String, ids: String },
    #[error("partition {partition} holds data but its config.json is missing or unreadable, so its retention settings are unknown")]
    UnknownConfig { partition: String },
    #[error(
        "topic '{topic}': partitions {first} and {other} have different settings in config.json"
    )]
    ConflictingConfigs {
        topic: String,
        first: i32,
        other: i32,
    },
    #[error("topic '{topic}': partition {partition} is beyond the {PARTITIONS_PER_TOPIC_MAX} partitions a topic may have")]
    TooManyPartitions { topic: String, partition: i32 },
    #[error("cannot read {what}: {reason}")]
    Unreadable { what: String, reason: String },
}

/// One topic as the cluster knows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TopicMetadata {
    pub name: String,
    pub topic_id: Uuid,
    pub partitions: i32,
    pub replication_factor: i16,
    #[serde(default)]
    pub configs: TopicConfigs,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Image {
    cluster_id: String,
    topics: BTreeMap<String, TopicMetadata>,
    /// First producer id not yet handed out in a block; ids below it are never reused.
    #[serde(default)]
    next_producer_id: i64,
    /// Topics a DeleteTopics removed whose logs may still be on disk: topic id → name. Reconcile
    /// deletes (rather than sets aside) their directories, then forgets them.
    #[serde(default)]
    deleting: BTreeMap<Uuid, String>,
}

/// The cluster metadata image plus its checkpoint file.
#[derive(Debug)]
pub struct ClusterMetadata {
    path: PathBuf,
    image: RwLock<Image>,
}

impl ClusterMetadata {
    /// Loads the checkpoint from `data_dir`; `None` if there is none (the caller decides between
    /// a new cluster and a rebuild: a missing file never means "no topics").
    pub fn load(data_dir: &Path) -> Result<Option<Self>, MetadataError> {
        let path = data_dir.join(METADATA_FILE);
        let image = match fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice::<Image>(&bytes).map_err(|e| MetadataError::Corrupt {
                    path: path.clone(),
                    reason: e.to_string(),
                })?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(MetadataError::Io { path, source }),
        };
        Ok(Some(Self {
            path,
            image: RwLock::new(image),
        }))
    }

    /// Starts a new cluster (new cluster id, no topics) and writes its checkpoint.
    pub fn create_new(data_dir: &Path) -> Result<Self, MetadataError> {
        Self::create(data_dir, Vec::new(), 0)
    }

    /// Writes a new image (new cluster id) holding `topics`, handing out producer ids from
    /// `next_producer_id` (a rebuild from the partition directories).
    pub fn create(
        data_dir: &Path,
        topics: Vec<TopicMetadata>,
        next_producer_id: i64,
    ) -> Result<Self, MetadataError> {
        let path = data_dir.join(METADATA_FILE);
        let image = Image {
            cluster_id: new_cluster_id(),
            topics: topics.into_iter().map(|t| (t.name.clone(), t)).collect(),
            next_producer_id,
            deleting: BTreeMap::new(),
        };
        write_checkpoint(&path, &image)?;
        Ok(Self {
            path,
            image: RwLock::new(image),
        })
    }

    /// First producer id not yet handed out in a block.
    pub fn next_producer_id(&self) -> i64 {
        self.image.read().next_producer_id
    }

    /// The checkpoint file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn cluster_id(&self) -> String {
        self.image.read().cluster_id.clone()
    }

    pub fn topic(&self, name: &str) -> Option<TopicMetadata> {
        self.image.read().topics.get(name).cloned()
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<TopicMetadata> {
        self.image
            .read()
            .topics
            .values()
            .find(|t| t.topic_id == id)
            .cloned()
    }

    /// Every topic, in name order.
    pub fn topics(&self) -> Vec<TopicMetadata> {
        self.image.read().topics.values().cloned().collect()
    }

    /// Records a new topic durably and returns it (with its fresh topic id).
    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: TopicConfigs,
    ) -> Result<TopicMetadata, MetadataError> {
        check_partition_count(partitions)?;
        let mut image = self.image.write();
        if image.topics.contains_key(name) {
            return Err(MetadataError::TopicAlreadyExists(name.to_string()));
        }
        let topic = TopicMetadata {
            name: name.to_string(),
            topic_id: Uuid::new_v4(),
            partitions,
            replication_factor,
            configs,
        };
        let mut next = image.clone();
        next.topics.insert(name.to_string(), topic.clone());
        write_checkpoint(&self.path, &next)?;
        *image = next;
        Ok(topic)
    }

    /// Removes a topic durably and returns what it was. The image remembers it as being deleted
    /// until `finish_deletion`, so that its logs are deleted, not set aside, if a crash leaves
    /// them behind.
    pub fn delete_topic(&self, name: &str) -> Result<TopicMetadata, MetadataError> {
        let mut image = self.image.write();
        let mut next = image.clone();
        let topic = next
            .topics
            .remove(name)
            .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?;
        next.deleting.insert(topic.topic_id, topic.name.clone());
        write_checkpoint(&self.path, &next)?;
        *image = next;
        Ok(topic)
    }

    /// Topics being deleted whose logs may remain: (topic id, name).
    pub fn pending_deletions(&self) -> Vec<(Uuid, String)> {
        self.image
            .read()
            .deleting
            .iter()
            .map(|(id, name)| (*id, name.clone()))
            .collect()
    }

    /// Forgets deletions whose logs are gone (durably).
    pub fn finish_deletions(&self, topic_ids: &[Uuid]) -> Result<(), MetadataError> {
        let mut image = self.image.write();
        if !topic_ids.iter().any(|id| image.deleting.contains_key(id)) {
            return Ok(());
        }
        let mut next = image.clone();
        for id in topic_ids {
            next.deleting.remove(id);
        }
        write_checkpoint(&self.path, &next)?;
        *image = next;
        Ok(())
    }

    /// Grows a topic to `count` partitions durably; returns the previous count.
    pub fn set_partition_count(&self, name: &str, count: i32) -> Result<i32, MetadataError> {
        check_partition_count(count)?;
        let mut image = self.image.write();
        let mut next = image.clone();
        let topic = next
            .topics
            .get_mut(name)
            .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?;
        let previous = topic.partitions;
        if count <= previous {
            return Err(MetadataError::InvalidPartitions(format!(
                "Topic currently has {previous} partitions, which is higher than or equal to the requested {count}."
            )));
        }
        topic.partitions = count;
        write_checkpoint(&self.path, &next)?;
        *image = next;
        Ok(previous)
    }

    /// Reserves `count` producer ids durably and returns the first. Ids are never handed out twice,
    /// even across crashes: the reservation is on disk before any id of it is used.
    pub fn allocate_producer_ids(&self, count: i64) -> Result<i64, MetadataError> {
        let mut image = self.image.write();
        let mut next = image.clone();
        let first = next.next_producer_id;
        next.next_producer_id = first
            .checked_add(count)
            .ok_or_else(|| MetadataError::Corrupt {
                path: self.path.clone(),
                reason: "producer ids exhausted".into(),
            })?;
        write_checkpoint(&self.path, &next)?;
        *image = next;
        Ok(first)
    }

    /// Replaces a topic's config overrides durably.
    pub fn set_topic_configs(
        &self,
        name: &str,
        configs: TopicConfigs,
    ) -> Result<(), MetadataError> {
        let mut image = self.image.write();
        let mut next = image.clone();
        next.topics
            .get_mut(name)
            .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?
            .configs = configs;
        write_checkpoint(&self.path, &next)?;
        *image = next;
        Ok(())
    }
}

fn check_partition_count(count: i32) -> Result<(), MetadataError> {
    if !(1..=PARTITIONS_PER_TOPIC_MAX).contains(&count) {
        return Err(MetadataError::InvalidPartitions(format!(
            "Number of partitions must be in [1, {PARTITIONS_PER_TOPIC_MAX}], got {count}."
        )));
    }
    Ok(())
}

/// A Kafka-style cluster id: 16 random bytes in URL-safe base64 without padding (22 characters).
fn new_cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = Uuid::new_v4().into_bytes();
    let mut out = String::with_capacity(22);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for b in bytes {
        acc = (acc << 8) | u32::from(b);
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            out.push(ALPHABET[((acc >> bits) & 63) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[((acc << (6 - bits)) & 63) as usize] as char);
    }
    out
}

fn write_checkpoint(path: &Path, image: &Image) -> Result<(), MetadataError> {
    let io = |source| MetadataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let bytes = serde_json::to_vec_pretty(image).map_err(|e| io(std::io::Error::other(e)))?;
    let tmp = path.with_extension("json.tmp");
    let mut file = File::create(&tmp).map_err(io)?;
    file.write_all(&bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    drop(file);
    fs::rename(&tmp, path).map_err(io)?;
    if let Some(dir) = path.parent() {
        File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_id_and_topic_ids_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        assert!(ClusterMetadata::load(dir.path()).unwrap().is_none());
        let m = ClusterMetadata::create_new(dir.path()).unwrap();
        let id = m.cluster_id();
        assert_eq!(id.len(), 22);
        let t = m.create_topic("a", 3, 1, TopicConfigs::default()).unwrap();
        drop(m);
        let m = ClusterMetadata::load(dir.path()).unwrap().unwrap();
        assert_eq!(m.cluster_id(), id);
        assert_eq!(m.topic("a").unwrap().topic_id, t.topic_id);
        assert_eq!(m.topic_by_id(t.topic_id).unwrap().name, "a");
    }

    #[test]
    fn producer_id_blocks_never_repeat_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let m = ClusterMetadata::create_new(dir.path()).unwrap();
        assert_eq!(m.allocate_producer_ids(1000).unwrap(), 0);
        assert_eq!(m.allocate_producer_ids(1000).unwrap(), 1000);
        drop(m);
        let m = ClusterMetadata::load(dir.path()).unwrap().unwrap();
        assert_eq!(m.allocate_producer_ids(1000).unwrap(), 2000);
    }

    #[test]
    fn create_delete_grow() {
        let dir = tempfile::tempdir().unwrap();
        let m = ClusterMetadata::create_new(dir.path()).unwrap();
        let a = m.create_topic("a", 1, 1, TopicConfigs::default()).unwrap();
        assert!(matches!(
            m.create_topic("a", 1, 1, TopicConfigs::default()),
            Err(MetadataError::TopicAlreadyExists(_))
        ));
        assert!(matches!(
            m.set_partition_count("a", 1),
            Err(MetadataError::InvalidPartitions(_))
        ));
        assert_eq!(m.set_partition_count("a", 4).unwrap(), 1);
        assert_eq!(m.topic("a").unwrap().partitions, 4);
        m.delete_topic("a").unwrap();
        assert!(m.topic("a").is_none());
        assert_eq!(m.pending_deletions(), vec![(a.topic_id, "a".to_string())]);
        m.finish_deletions(&[a.topic_id]).unwrap();
        assert!(m.pending_deletions().is_empty());
        assert!(matches!(
            m.delete_topic("a"),
            Err(MetadataError::UnknownTopic(_))
        ));
    }
}
