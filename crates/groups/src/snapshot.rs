//! The sled snapshot: per `__consumer_offsets` partition, the materialized records (latest value
//! per key), the log offset they reflect, and a mark of the log's last batch below that offset, so
//! that a leader that loads the partition replays only the log's tail.
//!
//! The log stays the source of truth. A snapshot is used only if its checksum holds, its offset
//! lies within the partition's current log (`log start <= offset <= log end`) and the batch that
//! ends just below its offset is still the same batch (base offset, last offset, partition leader
//! epoch and CRC, see [`BatchMark`]) — a broker that lost leadership may have had its log truncated
//! and refilled by another leader since, and the same offsets then hold other records. Otherwise
//! it is ignored and the partition is replayed from the start. So a missing, stale or corrupt
//! snapshot costs time, never data.
//!
//! Layout of one value (key `b"v2"` + partition as big-endian i32): u32 CRC-32C of the rest, i64
//! next offset, i64 mark base offset (-1 = no mark), i32 mark partition leader epoch, u32 mark CRC,
//! u32 entry count, then per entry u32 key length, key, u32 value length, value. Values under the
//! first layout's keys (the bare 4-byte partition) are removed when the database is opened.

use std::path::Path;

use bytes::{BufMut, Bytes, BytesMut};
use tracing::warn;

use crate::limits::{RECORD_ARRAY_MAX, RECORD_BYTES_MAX};

/// A materialized partition: records (key, value), the log offset after the last one applied, and
/// the mark of the batch that ends at `next_offset - 1` (`None` when `next_offset` is 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionSnapshot {
    pub next_offset: i64,
    pub last_batch: Option<BatchMark>,
    pub entries: Vec<(Bytes, Bytes)>,
}

/// What identifies a stored batch: two logs that hold a batch with the same base offset, last
/// offset, partition leader epoch and CRC hold the same records up to it (Kafka's log matching
/// through leader epochs; the CRC tells apart batches of one epoch written twice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMark {
    pub base_offset: i64,
    pub partition_leader_epoch: i32,
    pub crc: u32,
}

/// Sled key of a partition's snapshot in the current layout.
fn key(partition: i32) -> [u8; 6] {
    let p = partition.to_be_bytes();
    [b'v', b'2', p[0], p[1], p[2], p[3]]
}

/// The sled database holding one snapshot per partition.
pub struct SnapshotStore {
    db: sled::Db,
}

impl SnapshotStore {
    /// Opens (or creates) the snapshot database. A database that cannot be opened is removed and
    /// created afresh; if that fails too, there is simply no snapshot.
    pub fn open(dir: &Path) -> Option<Self> {
        match open_sled(dir) {
            Ok(db) => {
                remove_first_layout(&db);
                Some(Self { db })
            }
            Err(e) => {
                warn!(dir = %dir.display(), error = %e, "group snapshot unreadable; rebuilding it");
                let _ = std::fs::remove_dir_all(dir);
                match open_sled(dir) {
                    Ok(db) => Some(Self { db }),
                    Err(e) => {
                        warn!(error = %e, "no group snapshot this run; replays will be full");
                        None
                    }
                }
            }
        }
    }

    pub fn read(&self, partition: i32) -> Option<PartitionSnapshot> {
        let raw = self.db.get(key(partition)).ok()??;
        let decoded = decode(&raw);
        if decoded.is_none() {
            warn!(
                partition,
                "group snapshot corrupt; replaying the whole partition"
            );
        }
        decoded
    }

    pub fn write(&self, partition: i32, snapshot: &PartitionSnapshot) {
        let bytes = encode(snapshot);
        if let Err(e) = self.db.insert(key(partition), bytes.to_vec()) {
            warn!(partition, error = %e, "cannot write group snapshot");
        }
    }

    pub fn flush(&self) {
        if let Err(e) = self.db.flush() {
            warn!(error = %e, "cannot flush group snapshot");
        }
    }
}

/// Removes snapshots of the first layout (keyed by the bare 4-byte partition, without a batch
/// mark): they cannot be checked against a log that other leaders may have rewritten.
fn remove_first_layout(db: &sled::Db) {
    let old: Vec<sled::IVec> = db
        .iter()
        .keys()
        .filter_map(Result::ok)
        .filter(|k| k.len() == 4)
        .collect();
    for k in old {
        if let Err(e) = db.remove(k) {
            warn!(error = %e, "cannot remove an old group snapshot");
        }
    }
}

/// Opens sled, treating a panic inside it (possible on a damaged database) like an error: the
/// snapshot is only a cache, so a damaged one must never stop the broker.
fn open_sled(dir: &Path) -> Result<sled::Db, String> {
    let dir = dir.to_path_buf();
    match std::panic::catch_unwind(move || sled::open(&dir)) {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("sled panicked while opening".to_string()),
    }
}

pub fn encode(s: &PartitionSnapshot) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u32(0);
    b.put_i64(s.next_offset);
    let mark = s.last_batch.unwrap_or(BatchMark {
        base_offset: -1,
        partition_leader_epoch: -1,
        crc: 0,
    });
    b.put_i64(mark.base_offset);
    b.put_i32(mark.partition_leader_epoch);
    b.put_u32(mark.crc);
    b.put_u32(s.entries.len() as u32);
    for (k, v) in &s.entries {
        b.put_u32(k.len() as u32);
        b.put_slice(k);
        b.put_u32(v.len() as u32);
        b.put_slice(v);
    }
    let crc = crc32c::crc32c(&b[4..]);
    b[0..4].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

pub fn decode(raw: &[u8]) -> Option<PartitionSnapshot> {
    let crc = u32::from_be_bytes(raw.get(0..4)?.try_into().ok()?);
    let rest = raw.get(4..)?;
    if crc32c::crc32c(rest) != crc {
        return None;
    }
    let mut r = rest;
    let mut take = |n: usize| -> Option<&[u8]> {
        if n > r.len() {
            return None;
        }
        let (h, t) = r.split_at(n);
        r = t;
        Some(h)
    };
    let next_offset = i64::from_be_bytes(take(8)?.try_into().ok()?);
    let base_offset = i64::from_be_bytes(take(8)?.try_into().ok()?);
    let partition_leader_epoch = i32::from_be_bytes(take(4)?.try_into().ok()?);
    let crc = u32::from_be_bytes(take(4)?.try_into().ok()?);
    let last_batch = (base_offset >= 0).then_some(BatchMark {
        base_offset,
        partition_leader_epoch,
        crc,
    });
    let count = u32::from_be_bytes(take(4)?.try_into().ok()?) as usize;
    if count > RECORD_ARRAY_MAX {
        return None;
    }
    let mut entries = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let kl = u32::from_be_bytes(take(4)?.try_into().ok()?) as usize;
        if kl > RECORD_BYTES_MAX {
            return None;
        }
        let k = Bytes::copy_from_slice(take(kl)?);
        let vl = u32::from_be_bytes(take(4)?.try_into().ok()?) as usize;
        if vl > RECORD_BYTES_MAX {
            return None;
        }
        let v = Bytes::copy_from_slice(take(vl)?);
        entries.push((k, v));
    }
    Some(PartitionSnapshot {
        next_offset,
        last_batch,
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_round_trips_and_detects_corruption() {
        let s = PartitionSnapshot {
            next_offset: 77,
            last_batch: Some(BatchMark {
                base_offset: 70,
                partition_leader_epoch: 3,
                crc: 0xdead_beef,
            }),
            entries: vec![(Bytes::from_static(b"k"), Bytes::from_static(b"value"))],
        };
        let bytes = encode(&s);
        assert_eq!(decode(&bytes), Some(s));
        let mut bad = bytes.to_vec();
        bad[10] ^= 0xff;
        assert_eq!(decode(&bad), None);
        assert_eq!(decode(&bad[..3]), None);
    }

    #[test]
    fn damaged_database_is_rebuilt() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("snap");
        std::fs::create_dir_all(&path).expect("mkdir");
        std::fs::write(path.join("conf"), b"\xff\xfe garbage").expect("write");
        std::fs::write(path.join("db"), vec![0xa5u8; 4096]).expect("write");
        let store = SnapshotStore::open(&path).expect("rebuilt");
        assert_eq!(store.read(0), None);
    }

    #[test]
    fn sled_store_survives_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = PartitionSnapshot {
            next_offset: 5,
            last_batch: None,
            entries: vec![],
        };
        {
            let store = SnapshotStore::open(dir.path()).expect("open");
            store.write(3, &s);
            store.flush();
        }
        let store = SnapshotStore::open(dir.path()).expect("reopen");
        assert_eq!(store.read(3), Some(s));
        assert_eq!(store.read(4), None);
    }

    /// A value of the first layout (bare 4-byte key, no batch mark) is removed at open, so it can
    /// never be read as a snapshot of the current layout.
    #[test]
    fn first_layout_snapshots_are_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let db = sled::open(dir.path()).expect("sled");
            db.insert(3i32.to_be_bytes(), b"old".to_vec())
                .expect("insert");
            db.flush().expect("flush");
        }
        let store = SnapshotStore::open(dir.path()).expect("open");
        assert_eq!(store.db.len(), 0);
        assert_eq!(store.read(3), None);
    }
}
