//! The files of a partition directory that describe the partition rather than hold its data:
//! `config.json` (the `LogConfig`) and `partition.metadata` (the topic id, in Kafka's format), the
//! rule that names partition directories inside a data dir, and a read-only look at one directory
//! for callers that must not open the store (the cluster checks a data dir before the store
//! touches it when it has to rebuild its metadata image from the disk).
//!
//! Both files are written with `checkpoint::write_atomic*` (tmp, fdatasync, rename); a reader
//! trusts neither beyond its checks: a missing or malformed file is reported as such and the caller
//! decides (the store falls back to default settings, the cluster's rebuild refuses to guess the
//! settings of a partition that holds data).
//!
//! Pure file formats plus reads; every mutation goes through `storage::Storage`. No locking.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::checkpoint::{self, Durability};
use crate::config::{LogConfig, TopicPartition};
use crate::error::StoreError;
use crate::segment::{self, LOG_SUFFIX};
use crate::storage::Storage;

/// Partition file holding the topic id (Kafka's `partition.metadata`).
pub(crate) const PARTITION_METADATA_FILE: &str = "partition.metadata";

/// Suffix of a partition directory set aside because the cluster metadata does not name it.
pub const ORPHANED_SUFFIX: &str = ".orphaned";

/// Suffix of a partition directory being deleted.
pub(crate) const DELETE_SUFFIX: &str = "-delete";

/// A topic id: 16 bytes, shown as Kafka shows `Uuid`s (URL-safe base64 without padding, 22
/// characters).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicId([u8; 16]);

const BASE64_URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

impl TopicId {
    /// A topic id from its 16 bytes.
    pub const fn from_bytes(bytes: [u8; 16]) -> TopicId {
        TopicId(bytes)
    }

    /// The 16 bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// Parses the 22-character URL-safe base64 form; `None` for anything else.
    pub fn parse(text: &str) -> Option<TopicId> {
        let text = text.as_bytes();
        if text.len() != 22 {
            return None;
        }
        let mut out = [0u8; 16];
        let mut acc: u32 = 0;
        let mut bits = 0u32;
        let mut n = 0usize;
        for &c in text {
            let v = BASE64_URL.iter().position(|&a| a == c)? as u32;
            acc = (acc << 6) | v;
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                let byte = u8::try_from((acc >> bits) & 0xff).ok()?;
                *out.get_mut(n)? = byte;
                n += 1;
            }
        }
        // 22 characters carry 132 bits: the last 4 must be zero, as an encoder writes them.
        (n == 16 && acc & ((1 << bits) - 1) == 0).then_some(TopicId(out))
    }
}

impl fmt::Display for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut acc: u32 = 0;
        let mut bits = 0u32;
        let mut out = String::with_capacity(22);
        for &b in &self.0 {
            acc = (acc << 8) | u32::from(b);
            bits += 8;
            while bits >= 6 {
                bits -= 6;
                out.push(char::from(BASE64_URL[((acc >> bits) & 63) as usize]));
            }
        }
        if bits > 0 {
            out.push(char::from(BASE64_URL[((acc << (6 - bits)) & 63) as usize]));
        }
        f.write_str(&out)
    }
}

impl fmt::Debug for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TopicId({self})")
    }
}

/// `partition.metadata`: `version: 0` and `topic_id: <id>` lines (Kafka's format).
pub(crate) fn encode_partition_metadata(topic_id: TopicId) -> Vec<u8> {
    format!("version: 0\ntopic_id: {topic_id}\n").into_bytes()
}

/// Parses `partition.metadata`; `None` if malformed or of another version.
pub(crate) fn decode_partition_metadata(bytes: &[u8]) -> Option<TopicId> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut version = None;
    let mut topic_id = None;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (key, value) = line.split_once(':')?;
        match key.trim() {
            "version" => version = Some(value.trim().parse::<i32>().ok()?),
            "topic_id" => topic_id = Some(TopicId::parse(value.trim())?),
            _ => return None,
        }
    }
    (version == Some(0)).then_some(topic_id).flatten()
}

/// Writes `partition.metadata` atomically, synced as `durability` says (a creator fsyncs the
/// new directory itself, or the whole file system; a torn file reads as no topic id, which the
/// replica manager assigns again).
pub(crate) fn write_topic_id(
    storage: &dyn Storage,
    dir: &Path,
    topic_id: TopicId,
    durability: Durability,
) -> Result<(), StoreError> {
    let path = dir.join(PARTITION_METADATA_FILE);
    checkpoint::write_atomic_as(
        storage,
        &path,
        &encode_partition_metadata(topic_id),
        durability,
    )
    .map_err(|e| StoreError::io(format!("write {}", path.display()), e))
}

/// The topic id in `dir`, if `partition.metadata` is there and well-formed.
pub(crate) fn read_topic_id(dir: &Path) -> Option<TopicId> {
    let path = dir.join(PARTITION_METADATA_FILE);
    match checkpoint::read_bounded(&path) {
        Ok(Some(bytes)) => {
            let id = decode_partition_metadata(&bytes);
            if id.is_none() {
                tracing::warn!(file = %path.display(), "malformed partition.metadata ignored");
            }
            id
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "unreadable partition.metadata ignored");
            None
        }
    }
}

/// Persists a `LogConfig` as `config.json` atomically, synced as `durability` says (a torn
/// file reads as missing: defaults, rewritten by the next config change).
pub(crate) fn write_config(
    storage: &dyn Storage,
    dir: &Path,
    config: &LogConfig,
    durability: Durability,
) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec_pretty(config)
        .map_err(|e| StoreError::Corrupt(format!("encoding config: {e}")))?;
    let path = dir.join(checkpoint::CONFIG_FILE);
    checkpoint::write_atomic_as(storage, &path, &bytes, durability)
        .map_err(|e| StoreError::io(format!("write {}", path.display()), e))
}

/// `config.json` of `dir`: `None` if missing or unreadable (logged).
pub(crate) fn read_config(dir: &Path) -> Option<LogConfig> {
    let path = dir.join(checkpoint::CONFIG_FILE);
    match checkpoint::read_bounded(&path) {
        Ok(Some(bytes)) => match serde_json::from_slice(&bytes) {
            Ok(config) => Some(config),
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "unreadable config.json");
                None
            }
        },
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "unreadable config.json");
            None
        }
    }
}

/// What a partition directory says about itself, read without opening the store.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionDirInfo {
    /// Its topic id (`partition.metadata`), if present and well-formed.
    pub topic_id: Option<TopicId>,
    /// Its `config.json`, if present and readable.
    pub config: Option<LogConfig>,
    /// Whether any segment file holds bytes.
    pub has_data: bool,
}

/// Reads `partition.metadata`, `config.json` and the segment sizes of one partition directory.
/// Changes nothing.
pub fn inspect_partition_dir(dir: &Path) -> io::Result<PartitionDirInfo> {
    let mut has_data = false;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if let Some((_, LOG_SUFFIX)) = segment::parse_segment_name(&name) {
            has_data |= entry.metadata()?.len() > 0;
        }
    }
    Ok(PartitionDirInfo {
        topic_id: read_topic_id(dir),
        config: read_config(dir),
        has_data,
    })
}

/// The partition directories of `data_dir` (`<topic>-<partition>`, a decimal partition), sorted.
/// Directories being deleted (`*-delete`) or set aside (`*.orphaned`) and anything else are not
/// partitions. Changes nothing.
pub fn partition_dirs(data_dir: &Path) -> io::Result<Vec<(TopicPartition, PathBuf)>> {
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if name.ends_with(DELETE_SUFFIX) || name.ends_with(ORPHANED_SUFFIX) {
            continue;
        }
        if let Some(tp) = TopicPartition::from_dir_name(&name) {
            dirs.push((tp, path));
        }
    }
    dirs.sort();
    Ok(dirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(bytes: [u8; 16], text: &str) {
        let id = TopicId::from_bytes(bytes);
        assert_eq!(id.to_string(), text);
        assert_eq!(TopicId::parse(text), Some(id));
    }

    #[test]
    fn topic_ids_print_and_parse_as_kafka_uuids() {
        check([0; 16], "AAAAAAAAAAAAAAAAAAAAAA");
        check([0xff; 16], "_____________________w");
        let mut b = [0u8; 16];
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8 * 17;
        }
        check(b, "ABEiM0RVZneImaq7zN3u_w");
        assert_eq!(TopicId::parse("AAAAAAAAAAAAAAAAAAAAA"), None);
        assert_eq!(TopicId::parse("AAAAAAAAAAAAAAAAAAAAA="), None);
        // Non-zero padding bits are not an encoder's output.
        assert_eq!(TopicId::parse("_____________________x"), None);
    }

    #[test]
    fn partition_metadata_round_trips() {
        let id = TopicId::from_bytes([7; 16]);
        let bytes = encode_partition_metadata(id);
        assert_eq!(
            std::str::from_utf8(&bytes).expect("utf8"),
            format!("version: 0\ntopic_id: {id}\n")
        );
        assert_eq!(decode_partition_metadata(&bytes), Some(id));
        assert_eq!(
            decode_partition_metadata(b"version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n"),
            None
        );
        assert_eq!(decode_partition_metadata(b"version: 0\n"), None);
        assert_eq!(decode_partition_metadata(b"garbage"), None);
    }
}
