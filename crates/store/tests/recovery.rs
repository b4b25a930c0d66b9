//! Goal: after an unclean stop, recovery ends exactly at the last valid batch, whatever happened
//! to the bytes of the active segment's last batch (cut at every byte, any bit flipped), and no
//! batch with a bad CRC is ever returned by `read`.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use millrace_store::{FlushPolicy, LogConfig, ReadUpperBound, TopicPartition};

struct Fixture {
    template: tempfile::TempDir,
    t: TopicPartition,
    active_log: PathBuf,
    /// (base offset, last offset) of every batch.
    batches: Vec<(i64, i64)>,
    /// Byte position of the last batch in the active segment, and the segment size.
    last_pos: u64,
    size: u64,
}

fn fixture() -> Fixture {
    let template = tempfile::tempdir().expect("tmp");
    let t = tp("rec.topic-a", 7);
    {
        let store = open(template.path(), FlushPolicy::Never);
        let log = store
            .create_partition(
                &t,
                LogConfig {
                    segment_bytes: 2000,
                    index_interval_bytes: 100,
                    ..LogConfig::default()
                },
                millrace_store::TopicId::from_bytes([7; 16]),
            )
            .expect("create");
        for i in 0..30 {
            log.append(batch(1 + i % 4, 1_000 + i as i64), 3)
                .expect("append");
        }
        // Unclean: dropped without shutdown.
    }
    let store = open(template.path(), FlushPolicy::Never);
    let batches = read_all(&store, &t);
    drop(store);
    // The clean-shutdown marker is gone and no checkpoints were written: next open recovers.
    let pdir = template.path().join(t.to_string());
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&pdir)
        .expect("ls")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    let active_log = logs.last().cloned().expect("active segment");
    let bytes = std::fs::read(&active_log).expect("read");
    let mut pos = 0usize;
    let mut last_pos = 0usize;
    while pos < bytes.len() {
        last_pos = pos;
        pos += millrace_store::batch::validate_stored(&bytes[pos..])
            .expect("valid")
            .total_size();
    }
    assert!(last_pos > 0, "active segment should hold several batches");
    Fixture {
        template,
        t,
        active_log,
        batches,
        last_pos: last_pos as u64,
        size: bytes.len() as u64,
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("ls") {
        let e = e.expect("entry");
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).expect("copy");
        }
    }
}

/// Opens a copy of the fixture after `damage`, returns the batches recovery kept, checking that
/// every batch `read` returns has a valid CRC and that appends continue right after them.
fn recover_with(f: &Fixture, damage: impl FnOnce(&Path)) -> Vec<(i64, i64)> {
    let dir = tempfile::tempdir().expect("tmp");
    copy_dir(f.template.path(), dir.path());
    let rel = f
        .active_log
        .strip_prefix(f.template.path())
        .expect("relative");
    damage(&dir.path().join(rel));
    let store = open(dir.path(), FlushPolicy::Never);
    let kept = read_all(&store, &f.t); // read_all validates every CRC it sees
    let log = store.partition(&f.t).expect("partition");
    assert_contiguous(&kept, 0);
    assert_eq!(log.log_end_offset(), kept.last().map_or(0, |b| b.1 + 1));
    let next = log.append(batch(1, 9), 3).expect("append after recovery");
    assert_eq!(next.base_offset, log.log_end_offset() - 1);
    kept
}

#[test]
fn truncation_at_every_byte_of_the_last_batch() {
    let f = fixture();
    let all = f.batches.clone();
    let without_last = all[..all.len() - 1].to_vec();
    for cut in f.last_pos..f.size {
        let kept = recover_with(&f, |log| {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(log)
                .expect("open");
            file.set_len(cut).expect("truncate");
        });
        assert_eq!(kept, without_last, "cut at byte {cut}");
    }
    // Control: the untouched log keeps everything.
    assert_eq!(recover_with(&f, |_| {}), all);
}

#[test]
fn bit_flips_in_the_last_batch() {
    let f = fixture();
    let all = f.batches.clone();
    let without_last = all[..all.len() - 1].to_vec();
    for byte in f.last_pos..f.size {
        let rel = byte - f.last_pos;
        let kept = recover_with(&f, |log| {
            let mut bytes = std::fs::read(log).expect("read");
            bytes[byte as usize] ^= 1 << (byte % 8);
            std::fs::write(log, bytes).expect("write");
        });
        if (12..16).contains(&rel) {
            // partitionLeaderEpoch is outside the CRC by design: the batch stays.
            assert_eq!(kept, all, "flip in partitionLeaderEpoch at byte {rel}");
        } else {
            assert_eq!(kept, without_last, "flip at byte {rel} of the last batch");
        }
    }
}

#[test]
fn bit_flip_in_a_middle_batch_drops_everything_after_it() {
    let f = fixture();
    let dir = tempfile::tempdir().expect("tmp");
    copy_dir(f.template.path(), dir.path());
    // Corrupt the first batch of the first segment: recovery keeps nothing.
    let first_log = dir
        .path()
        .join(f.t.to_string())
        .join(format!("{:020}.log", 0));
    let mut bytes = std::fs::read(&first_log).expect("read");
    bytes[70] ^= 0x10;
    std::fs::write(&first_log, bytes).expect("write");
    let store = open(dir.path(), FlushPolicy::Never);
    assert!(read_all(&store, &f.t).is_empty());
    assert_eq!(store.partition(&f.t).expect("p").log_end_offset(), 0);
}

#[test]
fn corrupt_sealed_segment_after_clean_shutdown_is_never_served() {
    let f = fixture();
    let dir = tempfile::tempdir().expect("tmp");
    copy_dir(f.template.path(), dir.path());
    {
        let store = open(dir.path(), FlushPolicy::Never);
        store.shutdown().expect("shutdown");
    }
    // A clean start skips recovery of sealed segments: damage one of them behind its back.
    let first_log = dir
        .path()
        .join(f.t.to_string())
        .join(format!("{:020}.log", 0));
    let mut bytes = std::fs::read(&first_log).expect("read");
    let second = millrace_store::batch::validate_stored(&bytes)
        .expect("valid")
        .total_size();
    bytes[second + 70] ^= 0x10;
    std::fs::write(&first_log, bytes).expect("write");
    let store = open(dir.path(), FlushPolicy::Never);
    let log = store.partition(&f.t).expect("partition");
    let (first, corrupt) = (f.batches[0], f.batches[1]);
    assert_eq!(
        log.log_end_offset(),
        f.batches.last().expect("batches").1 + 1
    );
    for offset in 0..log.log_end_offset() {
        let r = log.read(offset, 1 << 20, ReadUpperBound::LogEnd, true);
        if (corrupt.0..=corrupt.1).contains(&offset) {
            // The damaged batch is never served: the read fails (KAFKA_STORAGE_ERROR at the
            // edge, which clients retry) until a replica's copy repairs it.
            assert!(
                matches!(
                    r,
                    Err(millrace_store::ReadError::Store(
                        millrace_store::StoreError::Corrupt(_)
                    ))
                ),
                "offset {offset}: {r:?}"
            );
            continue;
        }
        let r = r.expect("read");
        let mut served = Vec::new();
        let mut pos = 0;
        while pos < r.records.len() {
            let h = millrace_store::batch::validate_stored(&r.records[pos..])
                .expect("only valid batches are served");
            served.push((h.base_offset, h.last_offset()));
            pos += h.total_size();
        }
        // Every other offset is served, starting with the batch that holds it.
        let head = served.first().copied();
        assert!(
            head.is_some_and(|(b, l)| b <= offset && offset <= l),
            "offset {offset}: served {served:?}"
        );
        if offset <= first.1 {
            assert_eq!(head, Some(first), "offset {offset}");
        }
    }
}

/// A data dir whose log start offset checkpoint lies past everything its segments still hold
/// (flush policy `never` and a power cut took the tail): recovery starts the log over at the log
/// start offset, so offsets below it are never handed out again (Kafka's rule).
#[test]
fn log_that_ends_below_its_log_start_starts_over_there() {
    let f = fixture();
    let dir = tempfile::tempdir().expect("tmp");
    copy_dir(f.template.path(), dir.path());
    let lso = 5;
    {
        let store = open(dir.path(), FlushPolicy::Never);
        let log = store.partition(&f.t).expect("partition");
        assert_eq!(log.delete_records_before(lso).expect("delete records"), lso);
    }
    // Lose every segment's bytes, as a power cut under `never` may.
    let pdir = dir.path().join(f.t.to_string());
    for e in std::fs::read_dir(&pdir).expect("ls") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|e| e == "log") {
            std::fs::write(&p, b"").expect("empty the segment");
        }
    }
    let store = open(dir.path(), FlushPolicy::Never);
    let log = store.partition(&f.t).expect("partition");
    assert_eq!(log.log_start_offset(), lso);
    assert_eq!(log.log_end_offset(), lso);
    assert_eq!(log.append(batch(1, 9), 3).expect("append").base_offset, lso);
    drop(log);
    drop(store);
    let store = open(dir.path(), FlushPolicy::Never);
    assert_eq!(read_all(&store, &f.t), vec![(lso, lso)]);
}

/// The largest batch append accepts (`BATCH_BYTES_MAX`, whatever `max.message.bytes` says) is read
/// back by recovery after an unclean stop; one byte more is refused with MESSAGE_TOO_LARGE.
#[test]
fn largest_accepted_batch_survives_recovery() {
    use millrace_store::limits::BATCH_BYTES_MAX;
    use millrace_store::AppendError;
    let dir = tempfile::tempdir().expect("tmp");
    let t = tp("big", 0);
    let config = LogConfig {
        max_message_bytes: u32::MAX,
        ..LogConfig::default()
    };
    {
        let store = open(dir.path(), FlushPolicy::Always);
        let log = store
            .create_partition(&t, config, millrace_store::TopicId::from_bytes([3; 16]))
            .expect("create");
        let too_big = batch_of_size(BATCH_BYTES_MAX + 1);
        assert!(matches!(
            log.append(too_big, 0),
            Err(AppendError::MessageTooLarge { size, max })
                if size == BATCH_BYTES_MAX + 1 && max == BATCH_BYTES_MAX
        ));
        let largest = batch_of_size(BATCH_BYTES_MAX);
        assert_eq!(
            log.append(largest, 0).expect("largest batch").base_offset,
            0
        );
        assert_eq!(
            log.append(batch(1, 5), 0).expect("small batch").base_offset,
            1
        );
        // Dropped without shutdown: the next open recovers.
    }
    let store = open(dir.path(), FlushPolicy::Always);
    let log = store.partition(&t).expect("partition");
    assert_eq!(log.log_end_offset(), 2, "recovery kept both batches");
    let r = log
        .read(0, 1, ReadUpperBound::LogEnd, true)
        .expect("read the big batch");
    let h = millrace_store::batch::validate_stored(&r.records).expect("valid");
    assert_eq!((h.base_offset, h.total_size()), (0, BATCH_BYTES_MAX));
}

/// One uncompressed batch of exactly `size` bytes (one record, its value sized to fit).
fn batch_of_size(size: usize) -> bytes::BytesMut {
    let mut value_len = size - 100;
    for _ in 0..16 {
        let value = vec![b'v'; value_len];
        let b = millrace_store::testing::encode_batch(&[(None, Some(&value[..]), 7)], -1, -1, -1);
        match b.len().cmp(&size) {
            std::cmp::Ordering::Equal => return b,
            std::cmp::Ordering::Less => value_len += size - b.len(),
            std::cmp::Ordering::Greater => value_len -= b.len() - size,
        }
    }
    panic!("no batch of exactly {size} bytes");
}

#[test]
fn missing_or_corrupt_indexes_are_rebuilt() {
    let f = fixture();
    for clean in [true, false] {
        let dir = tempfile::tempdir().expect("tmp");
        copy_dir(f.template.path(), dir.path());
        if clean {
            open(dir.path(), FlushPolicy::Never)
                .shutdown()
                .expect("shutdown");
        }
        let pdir = dir.path().join(f.t.to_string());
        for e in std::fs::read_dir(&pdir).expect("ls") {
            let p = e.expect("entry").path();
            match p.extension().and_then(|e| e.to_str()) {
                Some("index") => std::fs::remove_file(&p).expect("rm"),
                Some("timeindex") => std::fs::write(&p, b"garbage!garbage!").expect("write"),
                _ => {}
            }
        }
        let store = open(dir.path(), FlushPolicy::Never);
        assert_eq!(read_all(&store, &f.t), f.batches, "clean={clean}");
        let log = store.partition(&f.t).expect("partition");
        assert_eq!(
            log.offset_for_timestamp(1_010).expect("ts").map(|x| x.1),
            Some(1_010)
        );
    }
}
