//! Transactions in the store: markers end transactions, the last stable offset holds back
//! `read_committed` readers, aborted transactions are reported, and all of it survives segment
//! rolls, an unclean restart and a follower's truncation.

mod common;

use common::{open, small_segments, tp};
use millrace_store::testing::encode_batch;
use millrace_store::{
    batch, AbortedTxn, AppendError, FlushPolicy, Marker, PartitionLog, ReadUpperBound,
};

/// A transactional batch of `n` records of producer `pid` (epoch 0) from sequence `seq`.
fn txn_batch(pid: i64, seq: i32, n: usize) -> bytes::BytesMut {
    let recs: Vec<millrace_store::testing::TestRecord<'_>> = (0..n)
        .map(|_| (Some(&b"k"[..]), Some(&b"txn-value"[..]), 1_000))
        .collect();
    let mut b = encode_batch(&recs, pid, 0, seq);
    let attrs = i16::from_be_bytes([b[21], b[22]]) | batch::ATTR_TRANSACTIONAL;
    b[21..23].copy_from_slice(&attrs.to_be_bytes());
    batch::rewrite_crc(&mut b);
    b
}

fn marker(commit: bool, coordinator_epoch: i32) -> Marker {
    Marker {
        commit,
        coordinator_epoch,
    }
}

fn aborted(log: &PartitionLog) -> Vec<(i64, i64)> {
    log.aborted_transactions(0, i64::MAX)
        .iter()
        .map(|t: &AbortedTxn| (t.producer_id, t.first_offset))
        .collect()
}

#[test]
fn markers_last_stable_offset_and_aborted_transactions_survive_restarts() {
    let dir = tempfile::tempdir().expect("tmp");
    let t = tp("txn", 0);
    let store = open(dir.path(), FlushPolicy::Always);
    let log = store
        .create_partition(
            &t,
            small_segments(),
            millrace_store::TopicId::from_bytes([3; 16]),
        )
        .expect("create");
    log.append(txn_batch(1, 0, 3), 0).expect("txn 1"); // 0..=2
    assert_eq!((log.high_watermark(), log.last_stable_offset()), (3, 0));
    let r = log
        .read(0, 1 << 20, ReadUpperBound::LastStable, true)
        .expect("read");
    assert!(r.records.is_empty(), "nothing is stable yet");
    assert_eq!(r.last_stable_offset, 0);
    log.append(txn_batch(2, 0, 2), 0).expect("txn 2"); // 3..=4
    log.append(common::batch(1, 1_000), 0).expect("plain"); // 5
    assert!(
        matches!(
            log.append(encode_batch(&[(None, Some(&b"x"[..]), 1)], 1, 0, 3), 0),
            Err(AppendError::InvalidTxnState(_))
        ),
        "a non-transactional write inside a transaction"
    );
    assert_eq!(
        log.append_marker(1, 0, marker(false, 5), 0)
            .expect("abort 1"),
        6
    );
    assert_eq!(log.last_stable_offset(), 3, "transaction 2 still holds it");
    assert_eq!(aborted(&log), vec![(1, 0)]);
    assert_eq!(
        log.append_marker(2, 0, marker(true, 5), 0)
            .expect("commit 2"),
        7
    );
    assert_eq!(log.last_stable_offset(), 8);
    let r = log
        .read(0, 1 << 20, ReadUpperBound::LastStable, true)
        .expect("read");
    assert!(!r.records.is_empty());
    assert!(matches!(
        log.append_marker(2, 0, marker(true, 4), 0),
        Err(AppendError::CoordinatorFenced(_))
    ));
    assert!(matches!(
        log.append_marker(2, -1, marker(true, 5), 0),
        Err(AppendError::InvalidProducerEpoch(_))
    ));

    // Enough to roll several segments, with transaction 3 open across them.
    log.append(txn_batch(3, 0, 1), 0).expect("txn 3"); // 8
    for _ in 0..20 {
        log.append(common::batch(5, 1_000), 0).expect("filler");
    }
    let end = log.log_end_offset();
    assert_eq!(log.last_stable_offset(), 8);
    assert!(
        log.active_segment_base_offset() > 8,
        "rolled past the open transaction"
    );
    drop(log);
    drop(store); // no shutdown: an unclean stop

    let store = open(dir.path(), FlushPolicy::Always);
    let log = store.partition(&t).expect("partition");
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(
        log.last_stable_offset(),
        8,
        "transaction 3 is still open after the restart"
    );
    assert_eq!(aborted(&log), vec![(1, 0)]);
    let p3 = log
        .producer_states()
        .into_iter()
        .find(|p| p.producer_id == 3)
        .expect("producer 3");
    assert_eq!(p3.current_txn_first_offset, Some(8));
    let abort3 = log
        .append_marker(3, 0, marker(false, 6), 0)
        .expect("abort 3");
    assert_eq!(log.last_stable_offset(), log.high_watermark());
    assert_eq!(aborted(&log), vec![(1, 0), (3, 8)]);
    assert_eq!(
        log.aborted_transactions(7, 9)
            .iter()
            .map(|t| t.producer_id)
            .collect::<Vec<_>>(),
        vec![3],
        "a read from 7 below 9 reports only the transaction that began below 9"
    );

    // A follower truncating away the marker reopens the transaction.
    log.truncate_to(abort3).expect("truncate");
    assert_eq!(log.last_stable_offset(), 8);
    assert_eq!(aborted(&log), vec![(1, 0)]);
}

/// The fault harness's lost write (ctp `x1#36`): a transaction's batch was written but its
/// response lost; the client purged it on abort and sent its next transaction's records under
/// the same sequences. The store must refuse that batch, not answer it as a duplicate of the
/// aborted one (which would acknowledge records it never wrote), also after a restart.
#[test]
fn a_batch_reusing_an_ended_transactions_sequences_is_refused_not_acknowledged() {
    let dir = tempfile::tempdir().expect("tmp");
    let t = tp("txn-reuse", 1);
    let store = open(dir.path(), FlushPolicy::Always);
    let log = store
        .create_partition(
            &t,
            small_segments(),
            millrace_store::TopicId::from_bytes([4; 16]),
        )
        .expect("create");
    let written = log.append(txn_batch(7, 0, 5), 0).expect("txn 1"); // 0..=4
    let retry = log.append(txn_batch(7, 0, 5), 0).expect("retry in txn 1");
    assert!(
        retry.duplicate && retry.base_offset == written.base_offset,
        "a retry inside its transaction is still a duplicate"
    );
    log.append_marker(7, 0, marker(false, 7), 0)
        .expect("abort 1"); // 5
    log.append_marker(7, 0, marker(false, 8), 0)
        .expect("abort 1 again, by the next coordinator"); // 6
    let refused = |log: &PartitionLog| {
        let end = log.log_end_offset();
        assert!(
            matches!(
                log.append(txn_batch(7, 0, 5), 0),
                Err(AppendError::OutOfOrderSequence(_))
            ),
            "the reused sequences 0..=4 are refused"
        );
        assert_eq!(log.log_end_offset(), end, "nothing written");
    };
    refused(&log);
    drop(log);
    drop(store); // no shutdown: the state is rebuilt from the log

    let store = open(dir.path(), FlushPolicy::Always);
    let log = store.partition(&t).expect("partition");
    refused(&log);
    let next = log
        .append(txn_batch(7, 5, 5), 0)
        .expect("txn 2 in sequence");
    assert!(!next.duplicate);
    assert_eq!(next.base_offset, 7);
}
