//! TEMPORARY in-memory stand-in for the store (the real one lands from branch `store`).
//! Same public API as API.md so the front end can be built and tried meanwhile.
#![allow(missing_docs, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}
impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}
impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushPolicy {
    Batch,
    Always,
    Never,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CleanupPolicy {
    pub delete: bool,
    pub compact: bool,
}

#[derive(Clone, Debug)]
pub struct LogConfig {
    pub segment_bytes: u64,
    pub segment_ms: i64,
    pub segment_index_bytes: u64,
    pub index_interval_bytes: u32,
    pub max_message_bytes: u32,
    pub retention_ms: i64,
    pub retention_bytes: i64,
    pub cleanup_policy: CleanupPolicy,
    pub delete_retention_ms: i64,
    pub min_cleanable_dirty_ratio: f64,
    pub min_compaction_lag_ms: i64,
    pub message_timestamp_type: TimestampType,
    pub flush_messages: i64,
    pub flush_ms: i64,
}
impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 1 << 30,
            segment_ms: 604_800_000,
            segment_index_bytes: 10 << 20,
            index_interval_bytes: 4096,
            max_message_bytes: 1_048_588,
            retention_ms: 604_800_000,
            retention_bytes: -1,
            cleanup_policy: CleanupPolicy {
                delete: true,
                compact: false,
            },
            delete_retention_ms: 86_400_000,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            message_timestamp_type: TimestampType::CreateTime,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
        }
    }
}

pub struct StoreConfig {
    pub data_dir: PathBuf,
    pub flush_policy: FlushPolicy,
    pub flush_interval: Duration,
    pub max_open_files: usize,
    pub high_watermark_follows_durable: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("partition {0} already exists")]
    AlreadyExists(TopicPartition),
    #[error("unknown partition {0}")]
    UnknownPartition(TopicPartition),
    #[error("log directory offline: {0}")]
    Offline(String),
    #[error("store is shut down")]
    ShutDown,
    #[error("corrupt: {0}")]
    Corrupt(String),
}

#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error("corrupt message: {0}")]
    CorruptMessage(String),
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    #[error("message too large: {size} > {max}")]
    MessageTooLarge { size: usize, max: usize },
    #[error("out of order sequence: {0}")]
    OutOfOrderSequence(String),
    #[error("invalid producer epoch: {0}")]
    InvalidProducerEpoch(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("offset {fetch_offset} out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        fetch_offset: i64,
        log_start_offset: i64,
        log_end_offset: i64,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

#[derive(Debug, Clone)]
pub struct AppendInfo {
    pub base_offset: i64,
    pub last_offset: i64,
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
    pub duplicate: bool,
}
#[derive(Debug, Clone)]
pub struct ReadResult {
    pub records: Bytes,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}
#[derive(Debug, Clone, Copy)]
pub enum ReadUpperBound {
    HighWatermark,
    LogEnd,
}
#[derive(Debug, Clone, Default)]
pub struct MaintenanceReport;
#[derive(Debug, Clone)]
pub struct ProducerStateEntry;

pub struct Store {
    parts: Mutex<BTreeMap<TopicPartition, Arc<PartitionLog>>>,
    notify: Arc<tokio::sync::Notify>,
}
impl Store {
    pub fn open(_config: StoreConfig) -> Result<Arc<Store>, StoreError> {
        Ok(Arc::new(Store {
            parts: Mutex::new(BTreeMap::new()),
            notify: Arc::new(tokio::sync::Notify::new()),
        }))
    }
    pub fn create_partition(
        &self,
        tp: &TopicPartition,
        config: LogConfig,
    ) -> Result<Arc<PartitionLog>, StoreError> {
        let mut p = self.parts.lock();
        if p.contains_key(tp) {
            return Err(StoreError::AlreadyExists(tp.clone()));
        }
        let log = Arc::new(PartitionLog {
            config: Mutex::new(config),
            batches: Mutex::new(Vec::new()),
            next: Mutex::new(0),
            notify: self.notify.clone(),
        });
        p.insert(tp.clone(), log.clone());
        Ok(log)
    }
    pub fn delete_partition(&self, tp: &TopicPartition) -> Result<(), StoreError> {
        self.parts
            .lock()
            .remove(tp)
            .map(|_| ())
            .ok_or_else(|| StoreError::UnknownPartition(tp.clone()))
    }
    pub fn partition(&self, tp: &TopicPartition) -> Option<Arc<PartitionLog>> {
        self.parts.lock().get(tp).cloned()
    }
    pub fn partitions(&self) -> Vec<TopicPartition> {
        self.parts.lock().keys().cloned().collect()
    }
    pub fn data_available(&self) -> Arc<tokio::sync::Notify> {
        self.notify.clone()
    }
    pub fn run_maintenance(&self, _now_ms: i64) -> Result<MaintenanceReport, StoreError> {
        Ok(MaintenanceReport)
    }
    pub fn shutdown(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

pub struct PartitionLog {
    config: Mutex<LogConfig>,
    batches: Mutex<Vec<(i64, i64, Bytes)>>,
    next: Mutex<i64>,
    notify: Arc<tokio::sync::Notify>,
}
impl PartitionLog {
    pub fn append(
        &self,
        mut records: BytesMut,
        leader_epoch: i32,
    ) -> Result<AppendInfo, AppendError> {
        if records.len() < 61 {
            return Err(AppendError::CorruptMessage("short".into()));
        }
        let count = i32::from_be_bytes(records[57..61].try_into().unwrap()) as i64;
        let mut next = self.next.lock();
        let base = *next;
        records[0..8].copy_from_slice(&base.to_be_bytes());
        records[12..16].copy_from_slice(&leader_epoch.to_be_bytes());
        let last = base + count.max(1) - 1;
        self.batches.lock().push((base, last, records.freeze()));
        *next = last + 1;
        self.notify.notify_waiters();
        Ok(AppendInfo {
            base_offset: base,
            last_offset: last,
            log_append_time_ms: -1,
            log_start_offset: 0,
            duplicate: false,
        })
    }
    pub fn read(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        _bound: ReadUpperBound,
        min_one_batch: bool,
    ) -> Result<ReadResult, ReadError> {
        let end = *self.next.lock();
        if fetch_offset < 0 || fetch_offset > end {
            return Err(ReadError::OffsetOutOfRange {
                fetch_offset,
                log_start_offset: 0,
                log_end_offset: end,
            });
        }
        let mut out = BytesMut::new();
        for (_b, last, bytes) in self.batches.lock().iter() {
            if *last < fetch_offset {
                continue;
            }
            if out.len() + bytes.len() > max_bytes && !(out.is_empty() && min_one_batch) {
                break;
            }
            out.extend_from_slice(bytes);
        }
        Ok(ReadResult {
            records: out.freeze(),
            high_watermark: end,
            log_start_offset: 0,
            log_end_offset: end,
        })
    }
    pub fn log_start_offset(&self) -> i64 {
        0
    }
    pub fn log_end_offset(&self) -> i64 {
        *self.next.lock()
    }
    pub fn high_watermark(&self) -> i64 {
        *self.next.lock()
    }
    pub fn set_high_watermark(&self, _offset: i64) {}
    pub fn durable_offset(&self) -> i64 {
        *self.next.lock()
    }
    pub async fn wait_durable(&self, _offset: i64) -> Result<(), StoreError> {
        Ok(())
    }
    pub fn offset_for_timestamp(&self, _ts: i64) -> Result<Option<(i64, i64)>, StoreError> {
        Ok(None)
    }
    pub fn max_timestamp(&self) -> Result<Option<(i64, i64)>, StoreError> {
        Ok(None)
    }
    pub fn truncate_to(&self, _offset: i64) -> Result<(), StoreError> {
        Ok(())
    }
    pub fn delete_records_before(&self, _offset: i64) -> Result<i64, StoreError> {
        Ok(0)
    }
    pub fn config(&self) -> LogConfig {
        self.config.lock().clone()
    }
    pub fn update_config(&self, config: LogConfig) {
        *self.config.lock() = config;
    }
    pub fn size_bytes(&self) -> u64 {
        0
    }
    pub fn producer_states(&self) -> Vec<ProducerStateEntry> {
        vec![]
    }
}
