//! The sled snapshot: per `__consumer_offsets` partition, the materialized records (latest value
//! per key) and the log offset they reflect, so that a restart replays only the log's tail.
//!
//! The log stays the source of truth. A snapshot is used only if its checksum holds and its
//! offset lies within the partition's current log (`log start <= offset <= log end`); otherwise
//! it is ignored and the partition is replayed from the start. So a missing, stale or corrupt
//! snapshot costs time, never data. Layout of one value: u32 CRC-32C of the rest, i64 next
//! offset, u32 entry count, then per entry u32 key length, key, u32 value length, value.

use std::path::Path;

use bytes::{BufMut, Bytes, BytesMut};
use tracing::warn;

use crate::limits::{RECORD_ARRAY_MAX, RECORD_BYTES_MAX};

/// A materialized partition: records (key, value) and the log offset after the last one applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionSnapshot {
    pub next_offset: i64,
    pub entries: Vec<(Bytes, Bytes)>,
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
            Ok(db) => Some(Self { db }),
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
        let raw = self.db.get(partition.to_be_bytes()).ok()??;
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
        if let Err(e) = self.db.insert(partition.to_be_bytes(), bytes.to_vec()) {
            warn!(partition, error = %e, "cannot write group snapshot");
        }
    }

    pub fn flush(&self) {
        if let Err(e) = self.db.flush() {
            warn!(error = %e, "cannot flush group snapshot");
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
}
