//! Names and settings: `TopicPartition`, the per-topic `LogConfig` (Kafka's topic config names and
//! defaults) and the store-wide `StoreConfig`.
//!
//! Pure data, no I/O. `LogConfig` is persisted per partition as `config.json` (`partition_dir.rs`) so a
//! restarted store knows each partition's settings before the cluster layer re-sends them.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A topic name and partition number. Displayed (and named on disk) as `{topic}-{partition}`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct TopicPartition {
    /// Topic name; may contain '.', '_' and '-'.
    pub topic: String,
    /// Partition number, >= 0.
    pub partition: i32,
}

impl TopicPartition {
    /// Builds a `TopicPartition`.
    pub fn new(topic: impl Into<String>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    /// Parses a partition directory name `<topic>-<partition>` by its LAST '-'. Returns `None` for
    /// anything else (including deleted `…-delete` directories and an empty topic).
    pub fn from_dir_name(name: &str) -> Option<TopicPartition> {
        let (topic, partition) = name.rsplit_once('-')?;
        if topic.is_empty()
            || partition.is_empty()
            || !partition.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let partition = partition.parse::<i32>().ok()?;
        Some(TopicPartition::new(topic, partition))
    }
}

/// Kafka's topic name rule: 1..=249 of `[a-zA-Z0-9._-]`, not "." or "..". Keeps directory names
/// safe (no '/', no traversal).
pub(crate) fn is_legal_topic_name(topic: &str) -> bool {
    (1..=249).contains(&topic.len())
        && topic != "."
        && topic != ".."
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Error from parsing a config value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value {value:?} for {name}")]
pub struct ConfigParseError {
    /// Config name.
    pub name: &'static str,
    /// Value that failed to parse.
    pub value: String,
}

/// `log.flush.policy`: when is an append durable.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum FlushPolicy {
    /// Group commit: a background thread fdatasyncs dirty partitions every `flush_interval`.
    #[default]
    Batch,
    /// fdatasync inside every append.
    Always,
    /// Durable once in the page cache (Kafka's default); `flush.messages`/`flush.ms` still apply.
    Never,
}

impl FromStr for FlushPolicy {
    type Err = ConfigParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "batch" => Ok(FlushPolicy::Batch),
            "always" => Ok(FlushPolicy::Always),
            "never" => Ok(FlushPolicy::Never),
            _ => Err(ConfigParseError {
                name: "log.flush.policy",
                value: s.to_string(),
            }),
        }
    }
}

/// `message.timestamp.type`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub enum TimestampType {
    /// Keep the producer's timestamps.
    #[default]
    CreateTime,
    /// The broker stamps each batch with its append time.
    LogAppendTime,
}

impl FromStr for TimestampType {
    type Err = ConfigParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "CreateTime" => Ok(TimestampType::CreateTime),
            "LogAppendTime" => Ok(TimestampType::LogAppendTime),
            _ => Err(ConfigParseError {
                name: "message.timestamp.type",
                value: s.to_string(),
            }),
        }
    }
}

/// `cleanup.policy`: a set of `delete` and `compact`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct CleanupPolicy {
    /// Retention by time and size deletes old segments.
    pub delete: bool,
    /// The cleaner keeps the latest record per key.
    pub compact: bool,
}

impl Default for CleanupPolicy {
    fn default() -> Self {
        CleanupPolicy {
            delete: true,
            compact: false,
        }
    }
}

impl FromStr for CleanupPolicy {
    type Err = ConfigParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut policy = CleanupPolicy {
            delete: false,
            compact: false,
        };
        for part in s.split(',').map(str::trim) {
            match part {
                "delete" => policy.delete = true,
                "compact" => policy.compact = true,
                _ => {
                    return Err(ConfigParseError {
                        name: "cleanup.policy",
                        value: s.to_string(),
                    })
                }
            }
        }
        Ok(policy)
    }
}

impl fmt::Display for CleanupPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.compact, self.delete) {
            (true, true) => f.write_str("compact,delete"),
            (true, false) => f.write_str("compact"),
            _ => f.write_str("delete"),
        }
    }
}

/// Per-topic log settings with Kafka's names; `Default` gives Kafka's topic defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LogConfig {
    /// `segment.bytes`: roll the active segment when it would exceed this.
    pub segment_bytes: u64,
    /// `segment.ms`: roll the active segment when it is older than this.
    pub segment_ms: i64,
    /// `segment.index.bytes`: size bound of each `.index`/`.timeindex`; a full index rolls.
    pub segment_index_bytes: u64,
    /// `index.interval.bytes`: log bytes between offset index entries.
    pub index_interval_bytes: u32,
    /// `max.message.bytes`: largest batch (including its 12-byte prefix).
    pub max_message_bytes: u32,
    /// `retention.ms`: delete sealed segments whose largest timestamp is older (-1 = forever).
    pub retention_ms: i64,
    /// `retention.bytes`: delete sealed segments while the log is larger (-1 = no limit).
    pub retention_bytes: i64,
    /// `cleanup.policy`.
    pub cleanup_policy: CleanupPolicy,
    /// `delete.retention.ms`: how long the cleaner keeps tombstones.
    pub delete_retention_ms: i64,
    /// `min.cleanable.dirty.ratio`: clean once dirty bytes / total bytes reaches this.
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`: records younger than this are not compacted.
    pub min_compaction_lag_ms: i64,
    /// `message.timestamp.type`.
    pub message_timestamp_type: TimestampType,
    /// `message.timestamp.before.max.ms`: with CreateTime, a record timestamp older than now by
    /// more than this is refused (INVALID_TIMESTAMP).
    pub message_timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`: with CreateTime, a record timestamp newer than now by
    /// more than this is refused (INVALID_TIMESTAMP). Kafka 4's default: one hour.
    pub message_timestamp_after_max_ms: i64,
    /// `flush.messages`: fsync after this many messages (policy `never`).
    pub flush_messages: i64,
    /// `flush.ms`: fsync after this long (policy `never`).
    pub flush_ms: i64,
    /// `remote.storage.enable`: closed segments are copied to the object store (tiered storage,
    /// decision 0073); local segments then go only once copied and past local retention.
    pub remote_storage_enable: bool,
    /// `local.retention.ms`: how long the local tail of a tiered log keeps a segment; -2 (the
    /// default) means `retention.ms`.
    pub local_retention_ms: i64,
    /// `local.retention.bytes`: the local tail's size bound of a tiered log; -2 (the default)
    /// means `retention.bytes`.
    pub local_retention_bytes: i64,
    /// `remote.log.copy.disable` (KIP-950): a tiered log stops copying segments to the object
    /// store; what is there stays readable, and local retention then equals retention.
    pub remote_log_copy_disable: bool,
    /// `remote.log.delete.on.disable` (KIP-950): set with `remote.storage.enable=false` to turn
    /// tiering off and delete the log's remote segments.
    pub remote_log_delete_on_disable: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1_073_741_824,
            segment_ms: 604_800_000,
            segment_index_bytes: 10_485_760,
            index_interval_bytes: 4096,
            max_message_bytes: 1_048_588,
            retention_ms: 604_800_000,
            retention_bytes: -1,
            cleanup_policy: CleanupPolicy::default(),
            delete_retention_ms: 86_400_000,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            message_timestamp_type: TimestampType::CreateTime,
            message_timestamp_before_max_ms: i64::MAX,
            message_timestamp_after_max_ms: 3_600_000,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            remote_storage_enable: false,
            local_retention_ms: -2,
            local_retention_bytes: -2,
            remote_log_copy_disable: false,
            remote_log_delete_on_disable: false,
        }
    }
}

impl LogConfig {
    /// The retention time the local segments obey: `local.retention.ms` on a tiered log (-2:
    /// `retention.ms`), `retention.ms` otherwise.
    pub fn local_retention_ms(&self) -> i64 {
        if self.remote_storage_enable && self.local_retention_ms != -2 {
            self.local_retention_ms
        } else {
            self.retention_ms
        }
    }

    /// The size bound the local segments obey: `local.retention.bytes` on a tiered log (-2:
    /// `retention.bytes`), `retention.bytes` otherwise.
    pub fn local_retention_bytes(&self) -> i64 {
        if self.remote_storage_enable && self.local_retention_bytes != -2 {
            self.local_retention_bytes
        } else {
            self.retention_bytes
        }
    }

    /// `segment.bytes` clamped to what the on-disk format can address.
    pub(crate) fn effective_segment_bytes(&self) -> u64 {
        self.segment_bytes.clamp(
            crate::limits::SEGMENT_BYTES_MIN,
            crate::limits::SEGMENT_BYTES_MAX,
        )
    }

    /// Max entries of the offset index (8-byte entries).
    pub(crate) fn max_index_entries(&self) -> usize {
        let bytes = self
            .segment_index_bytes
            .max(crate::limits::SEGMENT_INDEX_BYTES_MIN);
        usize::try_from(bytes / 8).unwrap_or(usize::MAX)
    }

    /// Max entries of the time index (12-byte entries).
    pub(crate) fn max_time_index_entries(&self) -> usize {
        let bytes = self
            .segment_index_bytes
            .max(crate::limits::SEGMENT_INDEX_BYTES_MIN);
        usize::try_from(bytes / 12).unwrap_or(usize::MAX)
    }
}

/// Store-wide settings.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// The first log dir (`log.dirs`' first entry): one sub-directory per partition placed here.
    pub data_dir: PathBuf,
    /// The further log dirs (`log.dirs` after its first entry), in order; empty for one dir.
    pub extra_log_dirs: Vec<PathBuf>,
    /// `log.flush.policy`, default `Batch`.
    pub flush_policy: FlushPolicy,
    /// Group-commit period for `Batch` (default 2 ms).
    pub flush_interval: Duration,
    /// Bound on cached open segment files (default 1024).
    pub max_open_files: usize,
    /// Single node: the store advances the high watermark itself as data becomes durable.
    pub high_watermark_follows_durable: bool,
}

impl StoreConfig {
    /// Defaults with the given data dir.
    pub fn new(data_dir: impl Into<PathBuf>) -> StoreConfig {
        StoreConfig {
            data_dir: data_dir.into(),
            ..StoreConfig::default()
        }
    }

    /// Defaults with several log dirs (`log.dirs`, in order; at least one). Empty: `new(".")`'s
    /// default dir.
    pub fn with_log_dirs(dirs: impl IntoIterator<Item = PathBuf>) -> StoreConfig {
        let mut dirs = dirs.into_iter();
        let mut config = StoreConfig::default();
        if let Some(first) = dirs.next() {
            config.data_dir = first;
        }
        config.extra_log_dirs = dirs.collect();
        config
    }

    /// Every log dir, the first (`data_dir`) first.
    pub fn log_dirs(&self) -> Vec<PathBuf> {
        std::iter::once(self.data_dir.clone())
            .chain(self.extra_log_dirs.iter().cloned())
            .collect()
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            data_dir: PathBuf::from("./data"),
            extra_log_dirs: Vec::new(),
            flush_policy: FlushPolicy::Batch,
            flush_interval: Duration::from_millis(2),
            max_open_files: 1024,
            high_watermark_follows_durable: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_dir(name: &str, expected: Option<(&str, i32)>) {
        let got = TopicPartition::from_dir_name(name);
        assert_eq!(
            got,
            expected.map(|(t, p)| TopicPartition::new(t, p)),
            "{name}"
        );
    }

    #[test]
    fn dir_names_parse_by_last_dash() {
        check_dir("orders-0", Some(("orders", 0)));
        check_dir("my-topic.v1_x-12", Some(("my-topic.v1_x", 12)));
        check_dir("__consumer_offsets-49", Some(("__consumer_offsets", 49)));
        check_dir("orders-0.abc-delete", None);
        check_dir("orders", None);
        check_dir("-3", None);
        check_dir("t--1", Some(("t-", 1)));
        check_dir("t-", None);
        check_dir("t-99999999999", None);
    }

    #[test]
    fn topic_names() {
        assert!(is_legal_topic_name("orders.v1_x-y"));
        for bad in ["", ".", "..", "a/b", "a b", "ü", &"x".repeat(250)] {
            assert!(!is_legal_topic_name(bad), "{bad}");
        }
    }

    #[test]
    fn policies_parse() {
        assert_eq!("batch".parse::<FlushPolicy>(), Ok(FlushPolicy::Batch));
        assert_eq!("never".parse::<FlushPolicy>(), Ok(FlushPolicy::Never));
        assert!("sometimes".parse::<FlushPolicy>().is_err());
        let p: CleanupPolicy = "compact,delete".parse().unwrap_or_default();
        assert!(p.compact && p.delete);
        let p: CleanupPolicy = "compact".parse().unwrap_or_default();
        assert!(p.compact && !p.delete);
        assert!("nope".parse::<CleanupPolicy>().is_err());
        assert_eq!(p.to_string(), "compact");
    }
}
