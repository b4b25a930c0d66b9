//! Rebuilding the cluster metadata image from what the partition directories say about
//! themselves, for when the image itself is gone (today `cluster-metadata.json`; with issue 12,
//! also when neither that file nor the metadata log exists). The rule (docs/decisions/0005):
//! metadata is never a reason to delete data. Each partition directory carries its topic id
//! (`partition.metadata`) and its settings (`config.json`); from them the image is rebuilt —
//! topics, topic ids, partition counts, config overrides — and every record stays. Only where the
//! directories contradict each other, or a partition that holds data has no readable settings
//! (its retention would be a guess), is the disk ambiguous: then the broker refuses to start and
//! changes nothing.
//!
//! Where it sits: `facts_from_disk` reads a data dir without opening the store (the broker calls
//! it before the store's recovery touches anything, so a refusal leaves the files untouched);
//! `facts_from_store` reads the same facts, plus producer ids, from an open store; `rebuild_image`
//! is pure: facts in, topics or the reason for a refusal out.
//!
//! What a rebuild cannot know and how it guesses safely: the cluster id (a new one), producer ids
//! handed out but never written (the next id skips `PRODUCER_ID_REBUILD_GAP` past the largest id
//! found in any log), topic ids of directories written before they were recorded (new ones),
//! partitions whose directory is gone (created empty, as the image would have asked), and topic
//! config keys the store does not keep (`compression.type`, `min.insync.replicas`, … fall back to
//! the broker's defaults; every key that decides what is kept — retention, cleanup policy,
//! segment and message sizes, timestamps, flush — is restored exactly).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use millrace_store::{LogConfig, Store, TopicId, TopicPartition};
use uuid::Uuid;

use crate::config::{BrokerConfig, TopicConfigs};
// The refusal is a `MetadataError::Ambiguous` reason, so it is defined with that error.
pub use crate::metadata::RebuildError;
use crate::metadata::{TopicMetadata, PARTITIONS_PER_TOPIC_MAX};
use crate::topic_name::validate_topic_name;

/// Producer ids handed to a broker per AllocateProducerIds, in blocks of 1000 as Kafka's controller
/// does (`millrace-controller` has its own constant of the same size): the unit of the rebuild gap.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// Producer ids: how far past the largest producer id found in any log a rebuilt image starts
/// handing out ids (1,000 blocks). Ids handed out since the last one that reached a log are not
/// recorded anywhere else; skipping ahead keeps them from being handed out twice unless that many
/// producers started without writing. Enforced by `rebuild_image`.
pub const PRODUCER_ID_REBUILD_GAP: i64 = 1_000 * PRODUCER_ID_BLOCK_SIZE;

/// What one partition directory says about its topic.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionFacts {
    pub tp: TopicPartition,
    /// From `partition.metadata`; `None` for directories written before topic ids were recorded.
    pub topic_id: Option<TopicId>,
    /// From `config.json`; `None` if missing or unreadable.
    pub config: Option<LogConfig>,
    /// Whether any segment holds bytes.
    pub has_data: bool,
    /// The largest producer id in the partition's producer state (open store only).
    pub producer_id_max: Option<i64>,
}

/// The image the partition directories determine.
#[derive(Debug, Clone, PartialEq)]
pub struct RebuiltImage {
    pub topics: Vec<TopicMetadata>,
    pub next_producer_id: i64,
    /// What was guessed, one line each (new topic ids, partitions created empty, skipped keys).
    pub notes: Vec<String>,
}

/// The store's form of a topic id.
pub fn topic_id(id: uuid::Uuid) -> millrace_store::TopicId {
    millrace_store::TopicId::from_bytes(id.into_bytes())
}

/// The facts of every partition directory in `data_dir`, read without changing anything.
pub fn facts_from_disk(data_dir: &Path) -> Result<Vec<PartitionFacts>, RebuildError> {
    let unreadable = |what: &Path, e: std::io::Error| RebuildError::Unreadable {
        what: what.display().to_string(),
        reason: e.to_string(),
    };
    let dirs = millrace_store::partition_dirs(data_dir).map_err(|e| unreadable(data_dir, e))?;
    let mut facts = Vec::with_capacity(dirs.len());
    for (tp, dir) in dirs {
        let info = millrace_store::inspect_partition_dir(&dir).map_err(|e| unreadable(&dir, e))?;
        facts.push(PartitionFacts {
            tp,
            topic_id: info.topic_id,
            config: info.config,
            has_data: info.has_data,
            producer_id_max: None,
        });
    }
    Ok(facts)
}

/// The facts of every partition of an open store.
pub fn facts_from_store(store: &Store) -> Vec<PartitionFacts> {
    store
        .partitions()
        .into_iter()
        .filter_map(|tp| {
            let log = store.partition(&tp)?;
            Some(PartitionFacts {
                topic_id: log.topic_id(),
                config: log.config_persisted().then(|| log.config()),
                has_data: log.size_bytes() > 0,
                producer_id_max: log.producer_states().iter().map(|p| p.producer_id).max(),
                tp,
            })
        })
        .collect()
}

/// A topic config override per `LogConfig` field that differs from the broker's default,
/// as Kafka keys and values.
fn overrides(config: &LogConfig, defaults: &LogConfig) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut put = |key: &str, value: String, default: String| {
        if value != default {
            out.insert(key.to_string(), value);
        }
    };
    put(
        "segment.bytes",
        config.segment_bytes.to_string(),
        defaults.segment_bytes.to_string(),
    );
    put(
        "segment.ms",
        config.segment_ms.to_string(),
        defaults.segment_ms.to_string(),
    );
    put(
        "segment.index.bytes",
        config.segment_index_bytes.to_string(),
        defaults.segment_index_bytes.to_string(),
    );
    put(
        "index.interval.bytes",
        config.index_interval_bytes.to_string(),
        defaults.index_interval_bytes.to_string(),
    );
    put(
        "max.message.bytes",
        config.max_message_bytes.to_string(),
        defaults.max_message_bytes.to_string(),
    );
    put(
        "retention.ms",
        config.retention_ms.to_string(),
        defaults.retention_ms.to_string(),
    );
    put(
        "retention.bytes",
        config.retention_bytes.to_string(),
        defaults.retention_bytes.to_string(),
    );
    put(
        "cleanup.policy",
        config.cleanup_policy.to_string(),
        defaults.cleanup_policy.to_string(),
    );
    put(
        "delete.retention.ms",
        config.delete_retention_ms.to_string(),
        defaults.delete_retention_ms.to_string(),
    );
    put(
        "min.cleanable.dirty.ratio",
        config.min_cleanable_dirty_ratio.to_string(),
        defaults.min_cleanable_dirty_ratio.to_string(),
    );
    put(
        "min.compaction.lag.ms",
        config.min_compaction_lag_ms.to_string(),
        defaults.min_compaction_lag_ms.to_string(),
    );
    put(
        "message.timestamp.type",
        format!("{:?}", config.message_timestamp_type),
        format!("{:?}", defaults.message_timestamp_type),
    );
    put(
        "message.timestamp.before.max.ms",
        config.message_timestamp_before_max_ms.to_string(),
        defaults.message_timestamp_before_max_ms.to_string(),
    );
    put(
        "message.timestamp.after.max.ms",
        config.message_timestamp_after_max_ms.to_string(),
        defaults.message_timestamp_after_max_ms.to_string(),
    );
    put(
        "flush.messages",
        config.flush_messages.to_string(),
        defaults.flush_messages.to_string(),
    );
    put(
        "flush.ms",
        config.flush_ms.to_string(),
        defaults.flush_ms.to_string(),
    );
    out
}

/// Rebuilds the image from `facts`; see the module comment for the rule.
pub fn rebuild_image(
    facts: &[PartitionFacts],
    broker: &BrokerConfig,
) -> Result<RebuiltImage, RebuildError> {
    let defaults = broker.log_config(&TopicConfigs::default());
    let mut by_topic: BTreeMap<&str, Vec<&PartitionFacts>> = BTreeMap::new();
    let mut notes = Vec::new();
    for f in facts {
        match validate_topic_name(&f.tp.topic) {
            Ok(()) => by_topic.entry(f.tp.topic.as_str()).or_default().push(f),
            Err(why) => notes.push(format!(
                "directory {} is not a legal topic's: left out ({why})",
                f.tp
            )),
        }
    }
    let mut topics = Vec::with_capacity(by_topic.len());
    for (name, parts) in by_topic {
        let ids: BTreeSet<TopicId> = parts.iter().filter_map(|f| f.topic_id).collect();
        let topic_id = match ids.len() {
            0 => {
                let id = Uuid::new_v4();
                notes.push(format!(
                    "topic '{name}' had no recorded topic id; it gets {}",
                    topic_id(id)
                ));
                id
            }
            1 => ids
                .iter()
                .next()
                .map(|id| Uuid::from_bytes(*id.as_bytes()))
                .unwrap_or_else(Uuid::new_v4),
            _ => {
                return Err(RebuildError::ConflictingTopicIds {
                    topic: name.to_string(),
                    ids: ids
                        .iter()
                        .map(|id| id.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                })
            }
        };
        let mut config: Option<(i32, &LogConfig)> = None;
        for f in &parts {
            match (&f.config, config) {
                (None, _) if f.has_data => {
                    return Err(RebuildError::UnknownConfig {
                        partition: f.tp.to_string(),
                    })
                }
                (None, _) => {}
                (Some(c), None) => config = Some((f.tp.partition, c)),
                (Some(c), Some((first, seen))) if c != seen => {
                    return Err(RebuildError::ConflictingConfigs {
                        topic: name.to_string(),
                        first,
                        other: f.tp.partition,
                    })
                }
                (Some(_), Some(_)) => {}
            }
        }
        let max_partition = parts.iter().map(|f| f.tp.partition).max().unwrap_or(0);
        if max_partition >= PARTITIONS_PER_TOPIC_MAX {
            return Err(RebuildError::TooManyPartitions {
                topic: name.to_string(),
                partition: max_partition,
            });
        }
        let partitions = max_partition + 1;
        let present: BTreeSet<i32> = parts.iter().map(|f| f.tp.partition).collect();
        let missing: Vec<i32> = (0..partitions).filter(|p| !present.contains(p)).collect();
        if !missing.is_empty() {
            notes.push(format!(
                "topic '{name}': partitions {missing:?} had no directory; they start empty"
            ));
        }
        let mut configs = BTreeMap::new();
        if let Some((_, c)) = config {
            for (key, value) in overrides(c, &defaults) {
                match TopicConfigs::new([(key.clone(), value.clone())].into_iter().collect()) {
                    Ok(_) => {
                        configs.insert(key, value);
                    }
                    Err(e) => notes.push(format!(
                        "topic '{name}': setting {key}={value} from config.json left out ({e})"
                    )),
                }
            }
        }
        let configs = TopicConfigs::new(configs).unwrap_or_default();
        topics.push(TopicMetadata {
            name: name.to_string(),
            topic_id,
            partitions,
            replication_factor: 1,
            configs,
        });
    }
    let largest_producer_id = facts.iter().filter_map(|f| f.producer_id_max).max();
    let next_producer_id = largest_producer_id
        .map(|id| {
            id.saturating_add(1)
                .saturating_add(PRODUCER_ID_REBUILD_GAP)
                .saturating_add(PRODUCER_ID_BLOCK_SIZE - 1)
                / PRODUCER_ID_BLOCK_SIZE
                * PRODUCER_ID_BLOCK_SIZE
        })
        .unwrap_or(0);
    Ok(RebuiltImage {
        topics,
        next_producer_id,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use millrace_store::CleanupPolicy;

    fn broker() -> BrokerConfig {
        BrokerConfig::from_layers(std::iter::empty()).expect("defaults")
    }

    fn fact(topic: &str, p: i32, id: Option<u8>, config: Option<LogConfig>) -> PartitionFacts {
        PartitionFacts {
            tp: TopicPartition::new(topic, p),
            topic_id: id.map(|b| TopicId::from_bytes([b; 16])),
            config,
            has_data: true,
            producer_id_max: None,
        }
    }

    fn check(
        facts: &[PartitionFacts],
        expected: Result<(), fn(&RebuildError) -> bool>,
    ) -> Option<RebuiltImage> {
        match (rebuild_image(facts, &broker()), expected) {
            (Ok(image), Ok(())) => Some(image),
            (Err(e), Err(pred)) => {
                assert!(pred(&e), "unexpected error {e}");
                None
            }
            (got, _) => panic!("unexpected result {got:?}"),
        }
    }

    #[test]
    fn topics_ids_counts_and_settings_come_back() {
        let defaults = broker().log_config(&TopicConfigs::default());
        let compact = LogConfig {
            cleanup_policy: CleanupPolicy {
                delete: false,
                compact: true,
            },
            retention_ms: -1,
            ..defaults.clone()
        };
        let mut facts = vec![
            fact("keep", 0, Some(1), Some(compact.clone())),
            fact("keep", 2, Some(1), Some(compact.clone())),
            fact("plain", 0, None, Some(defaults.clone())),
        ];
        facts[0].producer_id_max = Some(4_321);
        let image = check(&facts, Ok(())).expect("image");
        let keep = &image.topics[0];
        assert_eq!(keep.name, "keep");
        assert_eq!(keep.topic_id, Uuid::from_bytes([1; 16]));
        assert_eq!(keep.partitions, 3, "a missing middle partition is counted");
        assert_eq!(keep.configs.get("cleanup.policy"), Some("compact"));
        assert_eq!(keep.configs.get("retention.ms"), Some("-1"));
        assert_eq!(keep.configs.iter().count(), 2);
        assert_eq!(broker().log_config(&keep.configs), compact);
        let plain = &image.topics[1];
        assert_eq!(plain.configs, TopicConfigs::default());
        assert!(image
            .notes
            .iter()
            .any(|n| n.contains("'plain' had no recorded topic id")));
        assert!(image.notes.iter().any(|n| n.contains("partitions [1]")));
        assert!(image.next_producer_id > 4_321 + PRODUCER_ID_REBUILD_GAP);
        assert_eq!(image.next_producer_id % PRODUCER_ID_BLOCK_SIZE, 0);
    }

    #[test]
    fn contradictions_are_refused() {
        let c = broker().log_config(&TopicConfigs::default());
        check(
            &[
                fact("t", 0, Some(1), Some(c.clone())),
                fact("t", 1, Some(2), Some(c.clone())),
            ],
            Err(|e| matches!(e, RebuildError::ConflictingTopicIds { .. })),
        );
        let other = LogConfig {
            retention_ms: 5,
            ..c.clone()
        };
        check(
            &[
                fact("t", 0, Some(1), Some(c.clone())),
                fact("t", 1, Some(1), Some(other)),
            ],
            Err(|e| {
                matches!(
                    e,
                    RebuildError::ConflictingConfigs {
                        first: 0,
                        other: 1,
                        ..
                    }
                )
            }),
        );
        check(
            &[fact("t", 0, Some(1), None)],
            Err(|e| matches!(e, RebuildError::UnknownConfig { .. })),
        );
        // An empty partition without settings is not a guess about data: defaults.
        let mut empty = fact("t", 0, Some(1), None);
        empty.has_data = false;
        check(&[empty], Ok(()));
    }
}

#[cfg(test)]
mod store_tests {
    //! The seed of a new metadata log over a real store: what a data directory without metadata
    //! yields, what a legacy metadata file yields, and what is refused.
    use std::collections::BTreeMap;

    use millrace_store::{LogConfig, Store, StoreConfig, TopicId, TopicPartition};
    use uuid::Uuid;

    use crate::config::TopicConfigs;
    use crate::metadata::{ClusterMetadata, METADATA_FILE};
    use crate::node::{bootstrap_records, check_data_dir};
    use crate::records::MetadataRecord;
    use crate::BrokerConfig;

    fn config() -> BrokerConfig {
        BrokerConfig::from_layers(std::iter::empty()).expect("config")
    }

    fn append(store: &Store, topic: &str, partition: i32, n: usize) {
        let log = store
            .partition(&TopicPartition::new(topic, partition))
            .expect("log");
        for i in 0..n {
            let b = millrace_store::testing::encode_batch(
                &[(Some(b"k"), Some(format!("v{i}").as_bytes()), 1)],
                -1,
                -1,
                -1,
            );
            log.append(b, 0).expect("append");
        }
    }

    #[test]
    fn partition_directories_seed_topics_with_their_ids_counts_and_settings() {
        let dir = tempfile::tempdir().expect("tmp");
        let id = Uuid::from_u128(42);
        {
            let store = Store::open(StoreConfig::new(dir.path())).expect("store");
            let log_config = LogConfig {
                retention_ms: -1,
                ..LogConfig::default()
            };
            for p in 0..3 {
                store
                    .create_partition(
                        &TopicPartition::new("keep", p),
                        log_config.clone(),
                        TopicId::from_bytes(id.into_bytes()),
                    )
                    .expect("partition");
            }
            append(&store, "keep", 0, 5);
            store.shutdown().expect("shutdown");
        }
        check_data_dir(&config(), dir.path()).expect("not ambiguous");
        let store = Store::open(StoreConfig::new(dir.path())).expect("store");
        let records = bootstrap_records(&config(), dir.path(), &store, 7).expect("seed");
        let topic = records
            .iter()
            .find_map(|r| match r {
                MetadataRecord::Topic {
                    name,
                    topic_id,
                    configs,
                } if name == "keep" => Some((*topic_id, configs.clone())),
                _ => None,
            })
            .expect("topic seeded");
        assert_eq!(topic.0, id, "the topic id on disk is kept");
        assert_eq!(topic.1.get("retention.ms"), Some("-1"));
        let partitions: Vec<(i32, Vec<i32>)> = records
            .iter()
            .filter_map(|r| match r {
                MetadataRecord::Partition {
                    topic_id,
                    partition,
                    registration,
                } if *topic_id == id => Some((*partition, registration.replicas.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(partitions, vec![(0, vec![7]), (1, vec![7]), (2, vec![7])]);
        assert!(
            !records
                .iter()
                .any(|r| matches!(r, MetadataRecord::Bootstrap { .. })),
            "a rebuilt image gets a new cluster id from the controller"
        );
        // Nothing on disk was touched: the data is all there.
        assert_eq!(
            store
                .partition(&TopicPartition::new("keep", 0))
                .expect("log")
                .log_end_offset(),
            5
        );
    }

    #[test]
    fn a_legacy_metadata_file_seeds_its_cluster_id_topics_and_producer_ids() {
        let dir = tempfile::tempdir().expect("tmp");
        let id = Uuid::from_u128(9);
        let legacy = ClusterMetadata::create(
            dir.path(),
            vec![crate::metadata::TopicMetadata {
                name: "old".into(),
                topic_id: id,
                partitions: 2,
                replication_factor: 1,
                configs: TopicConfigs::new(BTreeMap::from([(
                    "cleanup.policy".to_string(),
                    "compact".to_string(),
                )]))
                .expect("configs"),
            }],
            5000,
        )
        .expect("legacy file");
        let cluster_id = legacy.cluster_id();
        let store = Store::open(StoreConfig::new(dir.path())).expect("store");
        let records = bootstrap_records(&config(), dir.path(), &store, 1).expect("seed");
        assert!(
            matches!(&records[0], MetadataRecord::Bootstrap { cluster_id: c } if *c == cluster_id)
        );
        assert!(records.iter().any(|r| matches!(r, MetadataRecord::Topic { name, topic_id, configs } if name == "old" && *topic_id == id && configs.get("cleanup.policy") == Some("compact"))));
        assert_eq!(
            records
                .iter()
                .filter(
                    |r| matches!(r, MetadataRecord::Partition { topic_id, .. } if *topic_id == id)
                )
                .count(),
            2
        );
        assert!(records.iter().any(|r| matches!(
            r,
            MetadataRecord::ProducerIds {
                next_producer_id: 5000
            }
        )));
        assert!(dir.path().join(METADATA_FILE).exists());
        assert!(crate::node::retire_legacy_metadata(dir.path()).is_some());
        assert!(!dir.path().join(METADATA_FILE).exists());
    }

    #[test]
    fn contradicting_directories_are_refused_untouched() {
        let dir = tempfile::tempdir().expect("tmp");
        {
            let store = Store::open(StoreConfig::new(dir.path())).expect("store");
            for (p, id) in [(0, 1u8), (1, 2u8)] {
                store
                    .create_partition(
                        &millrace_store::TopicPartition::new("t", p),
                        millrace_store::LogConfig::default(),
                        millrace_store::TopicId::from_bytes([id; 16]),
                    )
                    .expect("partition");
            }
            store.shutdown().expect("shutdown");
        }
        let listing = || {
            let mut v: Vec<String> = std::fs::read_dir(dir.path())
                .expect("ls")
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect();
            v.sort();
            v
        };
        let before = listing();
        let config = BrokerConfig::from_layers(std::iter::empty()).expect("config");
        let err = check_data_dir(&config, dir.path()).expect_err("ambiguous");
        assert!(err.to_string().contains("different topic ids"), "{err}");
        assert!(err.to_string().contains(METADATA_FILE), "{err}");
        assert_eq!(listing(), before, "nothing changed");
    }
}
