//! Goal: the scrubber finds a flipped byte in a sealed segment, reads refuse the damaged batches
//! (and only them), and a repair with a replica's bytes for exactly those offsets restores the
//! segment byte for byte without moving any offset; a wrong replacement changes nothing.

mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use millrace_store::{
    DamagedRange, FlushPolicy, ReadError, ReadUpperBound, RepairError, ScrubSettings, StoreError,
    TopicPartition,
};

/// The partition's segment files, oldest first.
fn segment_files(dir: &Path, t: &TopicPartition) -> Vec<PathBuf> {
    let pdir = dir.join(format!("{}-{}", t.topic, t.partition));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&pdir)
        .expect("list")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    files.sort();
    files
}

/// (position, base offset, next offset) of every batch of a segment file.
fn batches_of(file: &Path) -> Vec<(u64, i64, i64)> {
    let bytes = std::fs::read(file).expect("read segment");
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < bytes.len() {
        let h = millrace_store::batch::validate_stored(&bytes[pos..]).expect("valid batch");
        out.push((pos as u64, h.base_offset, h.next_offset()));
        pos += h.total_size();
    }
    out
}

/// A store, its partition, the partition's second segment file and that file's batches.
type Setup = (
    std::sync::Arc<millrace_store::Store>,
    TopicPartition,
    PathBuf,
    Vec<(u64, i64, i64)>,
);

/// A store with one partition of several sealed segments.
fn setup(dir: &Path) -> Setup {
    let store = open(dir, FlushPolicy::Always);
    let t = tp("scrub", 0);
    let log = store
        .create_partition(
            &t,
            small_segments(),
            millrace_store::TopicId::from_bytes([9; 16]),
        )
        .expect("create");
    for i in 0..60 {
        log.append(batch(3, 1_000 + i), 0).expect("append");
    }
    let files = segment_files(dir, &t);
    assert!(files.len() >= 4, "want several sealed segments: {files:?}");
    let second = files[1].clone();
    let batches = batches_of(&second);
    assert!(batches.len() >= 3, "want several batches: {batches:?}");
    (store, t, second, batches)
}

fn flip(file: &Path, position: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .expect("open");
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, position).expect("read byte");
    b[0] ^= 0x5a;
    f.write_all_at(&b, position).expect("write byte");
}

fn corrupt(e: &ReadError) -> bool {
    matches!(e, ReadError::Store(StoreError::Corrupt(_)))
}

#[test]
fn scrub_finds_a_flipped_byte_and_reads_stop_before_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let (store, t, file, batches) = setup(dir.path());
    let log = store.partition(&t).expect("log");
    let (pos, base, next) = batches[1];
    // A byte in the records of the second batch: its CRC fails, its length still holds.
    flip(&file, pos + 70);

    let ranges = store.scrub_partition(&t).expect("scrub");
    let segment_base = batches[0].1;
    assert_eq!(
        ranges,
        vec![DamagedRange {
            from: base,
            to: next,
            segment_base,
            position: pos,
            len: batches[2].0 - pos,
        }]
    );
    assert_eq!(store.damaged_partitions(), vec![t.clone()]);
    // The damaged batch is refused; a read before it stops short of it; one after it is served.
    let err = log
        .read(base, 1 << 20, ReadUpperBound::LogEnd, true)
        .expect_err("damaged offset");
    assert!(corrupt(&err), "{err:?}");
    let before = log
        .read(segment_base, 1 << 20, ReadUpperBound::LogEnd, true)
        .expect("read before");
    let h = millrace_store::batch::validate_stored(&before.records).expect("batch");
    assert_eq!(h.base_offset, segment_base);
    assert_eq!(
        before.records.len(),
        h.total_size(),
        "stops before the damage"
    );
    let after = log
        .read(next, 1 << 20, ReadUpperBound::LogEnd, true)
        .expect("read after");
    let h = millrace_store::batch::validate_stored(&after.records).expect("batch");
    assert_eq!(h.base_offset, next);
}

#[test]
fn repair_restores_the_segment_byte_for_byte() {
    let dir = tempfile::tempdir().expect("tmp");
    let (store, t, file, batches) = setup(dir.path());
    let log = store.partition(&t).expect("log");
    let original = std::fs::read(&file).expect("read");
    let (pos, _, _) = batches[1];
    let good = Bytes::copy_from_slice(&original[pos as usize..batches[2].0 as usize]);
    let end_before = (
        log.log_end_offset(),
        log.high_watermark(),
        log.log_start_offset(),
    );
    flip(&file, pos + 70);
    let ranges = store.scrub_partition(&t).expect("scrub");
    assert_eq!(ranges.len(), 1);
    let range = ranges[0];

    // A replacement that does not cover exactly the damaged offsets changes nothing.
    let wrong = Bytes::copy_from_slice(&original[..batches[1].0 as usize]);
    let refused = log.repair_segment(range.segment_base, &[(range, wrong)]);
    assert!(
        matches!(refused, Err(RepairError::BadReplacement { .. })),
        "{refused:?}"
    );
    assert_eq!(log.damaged_ranges(), vec![range]);

    assert_eq!(
        log.repair_segment(range.segment_base, &[(range, good)])
            .expect("repair"),
        1
    );
    assert_eq!(
        std::fs::read(&file).expect("read"),
        original,
        "byte for byte"
    );
    assert!(log.damaged_ranges().is_empty());
    assert!(store.damaged_partitions().is_empty());
    assert_eq!(
        (
            log.log_end_offset(),
            log.high_watermark(),
            log.log_start_offset()
        ),
        end_before
    );
    assert_contiguous(&read_all(&store, &t), 0);
    // A rescan finds nothing, and the repaired segment survives a restart.
    assert!(store.scrub_partition(&t).expect("rescan").is_empty());
    store.shutdown().expect("shutdown");
    drop(store);
    let store = open(dir.path(), FlushPolicy::Always);
    assert_contiguous(&read_all(&store, &t), 0);
    assert!(store.scrub_partition(&t).expect("scan").is_empty());
}

#[test]
fn a_damaged_length_is_bounded_by_the_offset_index() {
    let dir = tempfile::tempdir().expect("tmp");
    let (store, t, file, batches) = setup(dir.path());
    let log = store.partition(&t).expect("log");
    let original = std::fs::read(&file).expect("read");
    let (pos, base, _) = batches[1];
    // The length field's top byte: the batch claims to be far longer than the segment.
    flip(&file, pos + 8);
    let ranges = store.scrub_partition(&t).expect("scrub");
    assert_eq!(ranges.len(), 1, "{ranges:?}");
    let range = ranges[0];
    assert_eq!((range.from, range.position), (base, pos));
    // It ends at a batch boundary after the damaged batch (the next index entry, or the end).
    let ends: Vec<(u64, i64)> = batches.iter().map(|b| (b.0, b.1)).collect();
    let end_pos = range.position + range.len;
    assert!(
        end_pos == original.len() as u64 || ends.contains(&(end_pos, range.to)),
        "{range:?} in {batches:?}"
    );
    let good = Bytes::copy_from_slice(&original[pos as usize..end_pos as usize]);
    log.repair_segment(range.segment_base, &[(range, good)])
        .expect("repair");
    assert_eq!(std::fs::read(&file).expect("read"), original);
    assert_contiguous(&read_all(&store, &t), 0);
}

#[test]
fn a_read_that_meets_a_bad_batch_has_the_scrubber_scan_its_partition() {
    let dir = tempfile::tempdir().expect("tmp");
    let (store, t, file, batches) = setup(dir.path());
    let log = store.partition(&t).expect("log");
    // No periodic passes: only the read's request makes the scrubber look.
    store
        .start_scrubber(ScrubSettings {
            interval: Duration::ZERO,
            bytes_per_sec: 64 << 20,
        })
        .expect("scrubber");
    let (pos, base, _) = batches[1];
    flip(&file, pos + 70);
    // A fresh store instance would check unchecked bytes; this one trusts what it appended, so
    // go through a restart to make the read check the batch.
    store.shutdown().expect("shutdown");
    drop((store, log));
    let store = open(dir.path(), FlushPolicy::Always);
    store
        .start_scrubber(ScrubSettings {
            interval: Duration::ZERO,
            bytes_per_sec: 64 << 20,
        })
        .expect("scrubber");
    let log = store.partition(&t).expect("log");
    let err = log
        .read(base, 1 << 20, ReadUpperBound::LogEnd, true)
        .expect_err("bad batch");
    assert!(corrupt(&err), "{err:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.damaged_partitions().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the scrubber never recorded the damage"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(log.damaged_ranges().len(), 1);
    store.shutdown().expect("shutdown");
}

#[test]
fn damage_in_a_segment_retention_removed_is_forgotten() {
    let dir = tempfile::tempdir().expect("tmp");
    let (store, t, file, batches) = setup(dir.path());
    let log = store.partition(&t).expect("log");
    flip(&file, batches[1].0 + 70);
    assert_eq!(store.scrub_partition(&t).expect("scrub").len(), 1);
    // DeleteRecords past the damaged segment, then maintenance deletes it.
    let third_segment_base = batches_of(&segment_files(dir.path(), &t)[2])[0].1;
    log.delete_records_before(third_segment_base)
        .expect("delete records");
    store.run_maintenance(0).expect("maintenance");
    assert!(!file.exists(), "the damaged segment was deleted");
    log.prune_damage();
    assert!(log.damaged_ranges().is_empty());
    assert!(store.damaged_partitions().is_empty());
}
