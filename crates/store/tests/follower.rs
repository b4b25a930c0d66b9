//! Goal: the replication half of the log API — a follower append reproduces the leader's log byte
//! for byte with its offsets, leader epochs and producer state; leader epochs begin at the log end
//! and survive a restart; truncation drops epochs begun at the end; a log restarts at an offset;
//! the durable listener hears about flushes.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use millrace_store::testing::encode_batch;
use millrace_store::{AppendError, FlushPolicy, LogConfig, ReadUpperBound, TopicId};

const ID: TopicId = TopicId::from_bytes([9; 16]);

fn whole_log(log: &millrace_store::PartitionLog) -> Bytes {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let r = log
            .read(offset, 1 << 20, ReadUpperBound::LogEnd, true)
            .expect("read");
        if r.records.is_empty() {
            break;
        }
        let mut pos = 0;
        while let Ok(h) = millrace_store::batch::validate_stored(&r.records[pos..]) {
            pos += h.total_size();
            offset = h.next_offset();
            if pos >= r.records.len() {
                break;
            }
        }
        out.extend_from_slice(&r.records);
    }
    Bytes::from(out)
}

#[test]
fn a_follower_append_reproduces_the_leaders_log() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let leader = store
        .create_partition(&tp("t", 0), LogConfig::default(), ID)
        .expect("leader");
    let follower = store
        .create_partition(&tp("t", 1), LogConfig::default(), ID)
        .expect("follower");
    leader.append(batch(3, 1000), 2).expect("append");
    leader
        .append(
            encode_batch(&[(None, Some(b"p".as_slice()), 1)], 77, 0, 0),
            2,
        )
        .expect("idempotent");
    leader.append(batch(2, 2000), 5).expect("append");
    let bytes = whole_log(&leader);
    let done = follower
        .append_replicated(bytes.clone())
        .expect("replicate");
    assert_eq!((done.first_offset, done.next_offset), (0, 6));
    assert_eq!(whole_log(&follower), bytes, "byte-identical");
    assert_eq!(follower.end_offset_for_leader_epoch(2), Some((2, 4)));
    assert_eq!(follower.latest_leader_epoch(), Some(5));
    let producers = follower.producer_states();
    assert_eq!(producers.len(), 1);
    assert_eq!(producers[0].producer_id, 77);
    // Already there: skipped. Straddling or leaving a gap: refused.
    let again = follower.append_replicated(bytes.clone()).expect("skip");
    assert_eq!((again.first_offset, again.next_offset), (6, 6));
    leader.append(batch(2, 3000), 5).expect("append");
    let tail = leader
        .read(6, 1 << 20, ReadUpperBound::LogEnd, true)
        .expect("tail")
        .records;
    let gap = store
        .create_partition(&tp("t", 2), LogConfig::default(), ID)
        .expect("gap");
    assert!(matches!(
        gap.append_replicated(tail.clone()),
        Err(AppendError::UnexpectedOffset {
            base_offset: 6,
            log_end_offset: 0
        })
    ));
    // Corruption is refused.
    let mut bad = tail.to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    assert!(matches!(
        follower.append_replicated(Bytes::from(bad)),
        Err(AppendError::CorruptMessage(_))
    ));
    follower.append_replicated(tail).expect("tail");
    assert_eq!(whole_log(&follower), whole_log(&leader));
}

#[test]
fn a_leader_epoch_begins_at_the_log_end_and_survives_a_crash() {
    let dir = tempfile::tempdir().expect("tmp");
    {
        let store = open(dir.path(), FlushPolicy::Batch);
        let log = store
            .create_partition(&tp("t", 0), LogConfig::default(), ID)
            .expect("create");
        log.append(batch(3, 1000), 1).expect("append");
        log.begin_leader_epoch(4).expect("begin");
        assert_eq!(log.latest_leader_epoch(), Some(4));
        assert_eq!(log.end_offset_for_leader_epoch(3), Some((1, 3)));
        // Older or equal epochs change nothing.
        log.begin_leader_epoch(2).expect("older");
        assert_eq!(log.latest_leader_epoch(), Some(4));
        // No shutdown: the store is dropped as by a crash.
    }
    let store = open(dir.path(), FlushPolicy::Batch);
    let log = store.partition(&tp("t", 0)).expect("reopened");
    assert_eq!(
        log.latest_leader_epoch(),
        Some(4),
        "the epoch start was on disk"
    );
    // A follower told its log diverges at its end drops the epoch it began there.
    log.truncate_to(3).expect("truncate at the end");
    assert_eq!(log.latest_leader_epoch(), Some(1));
    assert_eq!(log.log_end_offset(), 3);
}

#[test]
fn a_log_restarts_at_an_offset() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let log = store
        .create_partition(&tp("t", 0), LogConfig::default(), ID)
        .expect("create");
    log.append(batch(3, 1000), 1).expect("append");
    log.truncate_fully_and_start_at(1000).expect("restart");
    assert_eq!(
        (
            log.log_start_offset(),
            log.log_end_offset(),
            log.high_watermark()
        ),
        (1000, 1000, 1000)
    );
    assert_eq!(log.latest_leader_epoch(), None);
    let leader_dir = tempfile::tempdir().expect("tmp");
    let leader_store = open(leader_dir.path(), FlushPolicy::Never);
    let leader = leader_store
        .create_partition(&tp("t", 0), LogConfig::default(), ID)
        .expect("leader");
    leader
        .truncate_fully_and_start_at(1000)
        .expect("leader start");
    leader.append(batch(2, 1000), 7).expect("append");
    let records = leader
        .read(1000, 1 << 20, ReadUpperBound::LogEnd, true)
        .expect("read")
        .records;
    log.append_replicated(records).expect("replicate");
    assert_eq!(log.log_end_offset(), 1002);
    assert_eq!(log.latest_leader_epoch(), Some(7));
}

#[test]
fn an_empty_log_restarted_where_it_is_keeps_its_segment_and_drops_its_epochs() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let log = store
        .create_partition(&tp("t", 0), LogConfig::default(), ID)
        .expect("create");
    log.begin_leader_epoch(3).expect("epoch");
    let segment = std::fs::read_dir(dir.path().join("t-0"))
        .expect("dir")
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .expect("a segment")
        .path();
    // A handle on the segment: removed and recreated, its file would have no links left.
    let held = std::fs::File::open(&segment).expect("open the segment");
    log.truncate_fully_and_start_at(0).expect("restart");
    assert_eq!(log.latest_leader_epoch(), None, "the epochs are gone");
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0));
    let links = std::os::unix::fs::MetadataExt::nlink(&held.metadata().expect("fstat"));
    assert_eq!(links, 1, "the segment file was kept, not replaced");
    // It goes on as a follower.
    log.append(batch(2, 0), 5).expect("append");
    assert_eq!(
        (log.log_end_offset(), log.latest_leader_epoch()),
        (2, Some(5))
    );
    drop(log);
    drop(store);
    let store = open(dir.path(), FlushPolicy::Never);
    let log = store.partition(&tp("t", 0)).expect("reopened");
    assert_eq!(log.latest_leader_epoch(), Some(5));
}

#[test]
fn the_durable_listener_hears_each_flushed_partition() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut config = store_config(dir.path(), FlushPolicy::Batch);
    config.high_watermark_follows_durable = false;
    let store = millrace_store::Store::open(config).expect("open");
    let heard = Arc::new(AtomicUsize::new(0));
    let h = Arc::clone(&heard);
    store.set_durable_listener(Arc::new(move |t| {
        assert_eq!(t.topic, "t");
        h.fetch_add(1, Ordering::SeqCst);
    }));
    let log = store
        .create_partition(&tp("t", 0), LogConfig::default(), ID)
        .expect("create");
    log.append(batch(3, 1000), 1).expect("append");
    let deadline = Instant::now() + Duration::from_secs(10);
    while heard.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the listener was never called");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(log.durable_offset(), 3);
    assert_eq!(log.high_watermark(), 0, "replication owns the HW here");
}

#[test]
fn a_read_past_the_high_watermark_inside_the_log_is_empty_not_out_of_range() {
    // A follower's (or a new leader's) high watermark trails its log end: a consumer may already
    // have read past it from the old leader. Kafka answers such a fetch with no records.
    let dir = tempfile::tempdir().expect("tmp");
    let store = open(dir.path(), FlushPolicy::Never);
    let leader = store
        .create_partition(&tp("t", 0), LogConfig::default(), ID)
        .expect("leader");
    let follower = store
        .create_partition(&tp("t", 1), LogConfig::default(), ID)
        .expect("follower");
    leader.append(batch(2, 1000), 1).expect("append");
    leader.append(batch(3, 2000), 1).expect("append");
    follower
        .append_replicated(whole_log(&leader))
        .expect("replicate");
    follower.set_high_watermark(2);
    assert_eq!(
        (follower.high_watermark(), follower.log_end_offset()),
        (2, 5)
    );
    for bound in [ReadUpperBound::HighWatermark, ReadUpperBound::LastStable] {
        for offset in [2, 3, 5] {
            let r = follower
                .read(offset, 1 << 20, bound, true)
                .unwrap_or_else(|e| panic!("{offset} ({bound:?}) is inside the log: {e}"));
            assert!(r.records.is_empty(), "{offset} ({bound:?})");
        }
        assert!(
            matches!(
                follower.read(6, 1 << 20, bound, true),
                Err(millrace_store::ReadError::OffsetOutOfRange { .. })
            ),
            "past the log end ({bound:?})"
        );
    }
    let r = follower
        .read(0, 1 << 20, ReadUpperBound::HighWatermark, true)
        .expect("read");
    assert!(!r.records.is_empty(), "below the high watermark");
}
