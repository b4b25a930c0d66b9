//! Test fixtures: a small hand-written v2 batch encoder (no `kafka-protocol`), public so the front
//! end can build batches for its tests too; and `Tmpfs`, a real small file system for the store's
//! and the broker's disk-full and failed-dir tests.

use bytes::BytesMut;

use crate::records::{encode_records, BatchFields, Record};

/// One test record: (key, value, timestamp); `None` is null.
pub type TestRecord<'a> = (Option<&'a [u8]>, Option<&'a [u8]>, i64);

/// Encodes one uncompressed v2 batch with baseOffset 0, partitionLeaderEpoch -1, CreateTime.
/// `records` are (key, value, timestamp); a `None` value is a tombstone.
pub fn encode_batch(
    records: &[TestRecord<'_>],
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
) -> BytesMut {
    let base_timestamp = records.first().map(|r| r.2).unwrap_or(-1);
    let max_timestamp = records.iter().map(|r| r.2).max().unwrap_or(-1);
    let recs: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (k, v, ts))| Record {
            offset: i as i64,
            timestamp: *ts,
            key: k.map(bytes::Bytes::copy_from_slice),
            value: v.map(bytes::Bytes::copy_from_slice),
            headers: Vec::new(),
        })
        .collect();
    let fields = BatchFields {
        base_offset: 0,
        partition_leader_epoch: -1,
        attributes: 0,
        last_offset_delta: (records.len() as i32 - 1).max(0),
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
    };
    encode_records(&fields, &recs)
}

/// Encodes a batch of `count` records each with a `value_bytes`-byte value (for benchmarks).
pub fn encode_filler_batch(count: usize, value_bytes: usize, timestamp: i64) -> BytesMut {
    let value = vec![b'x'; value_bytes];
    let recs: Vec<TestRecord<'_>> = (0..count)
        .map(|_| (None, Some(&value[..]), timestamp))
        .collect();
    encode_batch(&recs, -1, -1, -1)
}

/// A tmpfs of a given size, for tests that need a real small file system (a full disk, a failing
/// log dir). Mounting needs root. Dropped: unmounted — plainly, else lazily, so that a process
/// still holding files there cannot block it — and its mount point removed if it made one.
pub struct Tmpfs {
    path: std::path::PathBuf,
    mounted: bool,
    made_mount_point: bool,
}

impl Tmpfs {
    /// Mounts a tmpfs of `bytes` at `mount_point` (created if missing).
    pub fn mount(mount_point: &std::path::Path, bytes: u64) -> std::io::Result<Tmpfs> {
        std::fs::create_dir_all(mount_point)?;
        Tmpfs::mount_on(mount_point.to_path_buf(), bytes, false)
    }

    /// Mounts a tmpfs of `bytes` on a fresh directory under the system's temp dir.
    pub fn mount_fresh(bytes: u64) -> std::io::Result<Tmpfs> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "millrace-tmpfs-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path)?;
        Tmpfs::mount_on(path, bytes, true)
    }

    fn mount_on(path: std::path::PathBuf, bytes: u64, made: bool) -> std::io::Result<Tmpfs> {
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(&path)
            .status()?;
        if !status.success() {
            return Err(std::io::Error::other(format!(
                "mount -t tmpfs on {} failed ({status}); the test needs root",
                path.display()
            )));
        }
        Ok(Tmpfs {
            path,
            mounted: true,
            made_mount_point: made,
        })
    }

    /// The mount point.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The file system "fails": a lazy unmount, after which no path under it resolves (open
    /// files keep working until closed).
    pub fn fail(&mut self) -> std::io::Result<()> {
        let status = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status()?;
        if !status.success() {
            return Err(std::io::Error::other(format!("umount -l: {status}")));
        }
        self.mounted = false;
        Ok(())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if self.mounted {
            let plain = std::process::Command::new("umount")
                .arg(&self.path)
                .status();
            if !plain.is_ok_and(|s| s.success()) {
                let lazy = std::process::Command::new("umount")
                    .arg("-l")
                    .arg(&self.path)
                    .status();
                if !lazy.is_ok_and(|s| s.success()) {
                    eprintln!(
                        "could not unmount the test tmpfs at {}",
                        self.path.display()
                    );
                }
            }
        }
        if self.made_mount_point {
            let _ = std::fs::remove_dir(&self.path);
        }
    }
}
