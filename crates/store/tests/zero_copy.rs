//! `read_records`: batches already CRC-checked in this process come back as a slice of the segment
//! file (sent with `sendfile`), byte for byte what the in-memory read returns; bytes found on disk
//! are checked (read into memory) before they are ever sent from the file, and a corrupt batch is
//! never part of a slice.

mod common;

use std::os::unix::fs::FileExt;

use common::*;
use millrace_store::{FlushPolicy, LogConfig, ReadUpperBound, Records};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 64 * 1024,
        index_interval_bytes: 300,
        ..LogConfig::default()
    }
}

fn bytes_of(records: Records) -> Vec<u8> {
    records.into_bytes().expect("slice readable").to_vec()
}

/// Every read the fetch path can make, sent from the file, equals the in-memory read — the cut by
/// `max_bytes`, by the high watermark and at the segment's end included (the header walk that
/// finds the cut starts from the offset index entry nearest it).
#[test]
fn file_slices_equal_the_in_memory_read() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let t = tp("zc", 0);
    let log = store
        .create_partition(&t, config(), millrace_store::TopicId::from_bytes([3; 16]))
        .expect("create");
    for i in 0..400 {
        log.append(batch(1 + i % 7, 1000 + i as i64), 0)
            .expect("append");
    }
    // A follower's truncation cuts the active segment; what is appended after it is checked too.
    let leo = log.log_end_offset();
    log.truncate_to(leo - 20).expect("truncate");
    for i in 0..30 {
        log.append(batch(1 + i % 4, 9000 + i as i64), 0)
            .expect("append");
    }
    let leo = log.log_end_offset();
    let mut from_file = 0;
    for offset in (0..leo).step_by(7) {
        for max_bytes in [1, 90, 400, 1_000, 5_000, 40_000, 1 << 20] {
            for min_one in [true, false] {
                for bound in [ReadUpperBound::LogEnd, ReadUpperBound::HighWatermark] {
                    let memory = log.read(offset, max_bytes, bound, min_one).expect("read");
                    let sendable = log
                        .read_records(offset, max_bytes, bound, min_one)
                        .expect("read_records");
                    assert_eq!(sendable.high_watermark, memory.high_watermark);
                    if matches!(sendable.records, Records::File(_)) {
                        from_file += 1;
                    }
                    assert_eq!(
                        bytes_of(sendable.records),
                        memory.records.to_vec(),
                        "offset {offset}, max_bytes {max_bytes}, min_one {min_one}, {bound:?}"
                    );
                }
            }
        }
    }
    assert!(
        from_file > 1_000,
        "only {from_file} reads came from the file"
    );
}

/// After a restart nothing on disk counts as checked: the first read of a region is in memory
/// (and checks it), later reads of it come from the file. A batch corrupted on disk is cut off by
/// the in-memory read and never ends up in a file slice.
#[test]
fn bytes_found_on_disk_are_checked_before_they_are_sent_from_the_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let t = tp("zc", 1);
    let positions;
    {
        let store = open(dir.path(), FlushPolicy::Batch);
        let log = store
            .create_partition(&t, config(), millrace_store::TopicId::from_bytes([4; 16]))
            .expect("create");
        for i in 0..20 {
            log.append(batch(3, 1000 + i), 0).expect("append");
        }
        let all = log
            .read(0, 1 << 20, ReadUpperBound::LogEnd, true)
            .expect("read");
        positions = batch_positions(&all.records);
        assert_eq!(positions.len(), 20);
        store.shutdown().expect("shutdown");
    }
    // Flip a byte inside the records of batch 12 (offsets 36..=38).
    let (pos12, len12) = positions[12];
    let segment = dir.path().join("zc-1").join("00000000000000000000.log");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&segment)
        .expect("open segment");
    let at = pos12 + len12 as u64 - 3;
    let mut b = [0u8; 1];
    file.read_exact_at(&mut b, at).expect("read byte");
    file.write_all_at(&[b[0] ^ 0x55], at).expect("flip byte");
    drop(file);

    let store = open(dir.path(), FlushPolicy::Batch);
    let log = store.partition(&t).expect("partition");
    let read = |offset, max_bytes| {
        log.read_records(offset, max_bytes, ReadUpperBound::LogEnd, true)
            .expect("read_records")
            .records
    };
    // Batches 0..6, sound: checked by the first read, sent from the file by the next.
    let six = positions[6].0 as usize;
    let first = read(0, six);
    assert!(
        matches!(first, Records::Memory(_)),
        "first read after restart: {first:?}"
    );
    assert_eq!(first.len(), six);
    let again = read(0, six);
    assert!(matches!(again, Records::File(_)), "second read: {again:?}");
    assert_eq!(bytes_of(again), bytes_of(first));
    // A read reaching batch 12 is checked every time, and stops before it.
    for _ in 0..2 {
        let records = read(0, 1 << 20);
        assert!(matches!(records, Records::Memory(_)), "{records:?}");
        assert_eq!(
            records.len() as u64,
            pos12,
            "served up to the corrupt batch"
        );
    }
    // A read starting at the corrupt batch fails (KAFKA_STORAGE_ERROR at the edge) rather than
    // serving it or skipping it.
    let refused = log.read_records(36, 1 << 20, ReadUpperBound::LogEnd, true);
    assert!(
        matches!(
            refused,
            Err(millrace_store::ReadError::Store(
                millrace_store::StoreError::Corrupt(_)
            ))
        ),
        "{refused:?}"
    );
    for offset in [30, 33] {
        let records = read(offset, 1 << 20);
        assert!(
            matches!(records, Records::Memory(_)),
            "offset {offset} reaches the corrupt batch and must be checked"
        );
        let bytes = bytes::Bytes::from(bytes_of(records));
        let mut pos = 0;
        while pos < bytes.len() {
            let h = millrace_store::batch::validate_stored(&bytes[pos..]).expect("valid batch");
            assert!(
                h.base_offset < 36,
                "a read from {offset} served the corrupt batch"
            );
            pos += h.total_size();
        }
    }
}

/// (position, length) of each batch in `records`.
fn batch_positions(records: &bytes::Bytes) -> Vec<(u64, usize)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < records.len() {
        let h = millrace_store::batch::validate_stored(&records[pos..]).expect("valid batch");
        out.push((pos as u64, h.total_size()));
        pos += h.total_size();
    }
    out
}
