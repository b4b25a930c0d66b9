//! The share-partition state machine against Kafka's rules: acquisition, locks, acknowledgement,
//! the delivery-count limit, the start offset, the in-flight cap and restart from persisted state.

use super::*;
use crate::records::ShareSnapshotValue;
use crate::records::{
    decode_record, encode_record, replay, ShareStateKey, ShareStateRecord, ShareUpdateValue,
};

const T0: i64 = 1_000_000;
const LOCK_MS: i64 = RECORD_LOCK_DURATION_MS_DEFAULT;

/// A log of `count` batches of `len` records each, from offset 0.
fn log_of(len: i64, count: i64) -> Vec<LogBatch> {
    (0..count)
        .map(|i| LogBatch {
            first: i * len,
            last: i * len + len - 1,
        })
        .collect()
}

/// What a leader read from `from`: every batch ending at or after it.
fn read(log: &[LogBatch], from: i64) -> Vec<LogBatch> {
    log.iter().copied().filter(|b| b.last >= from).collect()
}

fn fresh(start: i64) -> SharePartition {
    SharePartition::new(
        PersistedState::initial(0, start),
        SharePartitionConfig::default(),
    )
    .expect("load")
}

fn with_cfg(start: i64, cfg: SharePartitionConfig) -> SharePartition {
    SharePartition::new(PersistedState::initial(0, start), cfg).expect("load")
}

fn r(first: i64, last: i64, delivery_count: i16) -> AcquiredRange {
    AcquiredRange {
        first,
        last,
        delivery_count,
    }
}

fn sb(first: i64, last: i64, state: RecordState, delivery_count: i16) -> StateBatch {
    StateBatch {
        first,
        last,
        state: state.id(),
        delivery_count,
    }
}

fn ack(first: i64, last: i64, t: AckType) -> AckBatch {
    AckBatch {
        first,
        last,
        types: vec![t],
    }
}

/// Fetches for `member` as a Java consumer does (batch-optimized, BatchSize = MaxRecords).
fn fetch(
    sp: &mut SharePartition,
    log: &[LogBatch],
    member: &str,
    max: u32,
    now: i64,
) -> Vec<AcquiredRange> {
    let from = sp.next_fetch_offset();
    let batches = read(log, from);
    sp.acquire(
        member,
        from,
        &batches,
        max,
        max,
        AcquireMode::BatchOptimized,
        &[],
        now,
    )
    .expect("acquire")
}

fn ok(sp: &mut SharePartition, member: &str, batches: &[AckBatch]) -> StateChange {
    sp.acknowledge(member, batches, false, T0)
        .expect("acknowledge")
}

fn invalid_state(res: Result<StateChange, ShareError>) -> bool {
    matches!(res, Err(ShareError::InvalidRecordState(_)))
}

fn invalid_request(res: Result<StateChange, ShareError>) -> bool {
    matches!(res, Err(ShareError::InvalidRequest(_)))
}

#[test]
fn defaults_are_kafkas() {
    let cfg = SharePartitionConfig::default();
    assert_eq!(cfg.delivery_count_limit, 5);
    assert_eq!(cfg.max_record_locks, 2000);
    assert_eq!(cfg.record_lock_duration_ms, 30_000);
    assert!(cfg.renew_enabled);
}

#[test]
fn first_delivery_has_count_one_and_the_fetch_offset_moves_on() {
    let log = log_of(10, 5);
    let mut sp = fresh(0);
    assert_eq!(sp.next_fetch_offset(), 0);
    assert_eq!(fetch(&mut sp, &log, "a", 10, T0), vec![r(0, 9, 1)]);
    assert_eq!(
        (sp.start_offset(), sp.end_offset(), sp.next_fetch_offset()),
        (0, 9, 10)
    );
    assert_eq!(sp.metrics().acquired_records, 10);
    assert_eq!(sp.next_lock_deadline(), Some(T0 + LOCK_MS));
}

#[test]
fn nothing_below_the_start_offset_is_acquired() {
    let log = log_of(10, 5);
    let mut sp = fresh(15);
    assert_eq!(sp.next_fetch_offset(), 15);
    // The leader returns the whole log batch 10..=19 that holds offset 15.
    assert_eq!(fetch(&mut sp, &log, "a", 100, T0), vec![r(15, 49, 1)]);
    let mut old = fresh(50);
    assert_eq!(
        old.acquire(
            "a",
            0,
            &log[..2],
            10,
            10,
            AcquireMode::BatchOptimized,
            &[],
            T0
        ),
        Ok(vec![])
    );
}

#[test]
fn two_members_get_disjoint_ranges() {
    let log = log_of(10, 10);
    let mut sp = fresh(0);
    let a = fetch(&mut sp, &log, "a", 10, T0);
    let b = fetch(&mut sp, &log, "b", 10, T0);
    assert_eq!(a, vec![r(0, 9, 1)]);
    assert_eq!(b, vec![r(10, 19, 1)]);
    assert!(invalid_state(sp.acknowledge(
        "a",
        &[ack(10, 19, AckType::Accept)],
        false,
        T0
    )));
    assert!(invalid_state(sp.acknowledge(
        "b",
        &[ack(0, 9, AckType::Accept)],
        false,
        T0
    )));
}

#[test]
fn lock_expiry_redelivers_to_another_member_with_count_two() {
    let log = log_of(10, 3);
    let mut sp = fresh(0);
    assert_eq!(fetch(&mut sp, &log, "a", 10, T0), vec![r(0, 9, 1)]);
    assert!(
        sp.expire_locks(T0 + LOCK_MS - 1).is_empty(),
        "the lock holds until its deadline"
    );
    let expired = sp.expire_locks(T0 + LOCK_MS);
    assert_eq!(
        expired.batches,
        vec![sb(0, 9, RecordState::Available, 1)],
        "count unchanged by expiry"
    );
    assert_eq!(sp.next_fetch_offset(), 0);
    assert_eq!(
        fetch(&mut sp, &log, "b", 10, T0 + LOCK_MS),
        vec![r(0, 9, 2)]
    );
    assert!(invalid_state(sp.acknowledge(
        "a",
        &[ack(0, 9, AckType::Accept)],
        false,
        T0 + LOCK_MS
    )));
    let change = sp
        .acknowledge("b", &[ack(0, 9, AckType::Accept)], false, T0 + LOCK_MS)
        .expect("ack");
    assert_eq!(change.start_offset, 10);
    assert_eq!(sp.metrics().redelivered_records_total, 10);
}

#[test]
fn an_ack_after_the_lock_deadline_fails_even_before_expiry_runs() {
    let log = log_of(10, 1);
    let mut sp = fresh(0);
    fetch(&mut sp, &log, "a", 10, T0);
    assert!(invalid_state(sp.acknowledge(
        "a",
        &[ack(0, 9, AckType::Accept)],
        false,
        T0 + LOCK_MS
    )));
    assert!(sp
        .acknowledge("a", &[ack(0, 9, AckType::Accept)], false, T0 + LOCK_MS - 1)
        .is_ok());
}

#[test]
fn release_then_refetch_increments_the_count() {
    let log = log_of(10, 2);
    let mut sp = fresh(0);
    fetch(&mut sp, &log, "a", 10, T0);
    let change = ok(&mut sp, "a", &[ack(0, 9, AckType::Release)]);
    assert_eq!(change.batches, vec![sb(0, 9, RecordState::Available, 1)]);
    assert!(!change.start_offset_moved);
    assert_eq!(sp.next_fetch_offset(), 0);
    assert_eq!(fetch(&mut sp, &log, "b", 10, T0), vec![r(0, 9, 2)]);
}

#[test]
fn the_delivery_count_limit_archives_and_spso_passes_it() {
    // One-record batches so that throttling does not split anything.
    let log = log_of(1, 3);
    let mut sp = fresh(0);
    for count in 1..=5 {
        assert_eq!(fetch(&mut sp, &log, "a", 1, T0), vec![r(0, 0, count)]);
        let change = ok(&mut sp, "a", &[ack(0, 0, AckType::Release)]);
        let expected = if count < 5 {
            RecordState::Available
        } else {
            RecordState::Archived
        };
        assert_eq!(change.batches, vec![sb(0, 0, expected, count)]);
    }
    assert_eq!(sp.start_offset(), 1, "SPSO passes the archived record");
    assert_eq!(
        fetch(&mut sp, &log, "a", 1, T0),
        vec![r(1, 1, 1)],
        "offset 0 is never delivered again"
    );
    assert_eq!(sp.metrics().archived_records_total, 1);

    // The same by lock expiry.
    let mut sp = fresh(0);
    for count in 1..=5 {
        let now = T0 + i64::from(count) * LOCK_MS;
        assert_eq!(fetch(&mut sp, &log, "a", 1, now), vec![r(0, 0, count)]);
        let change = sp.expire_locks(now + LOCK_MS);
        let expected = if count < 5 {
            RecordState::Available
        } else {
            RecordState::Archived
        };
        assert_eq!(change.batches, vec![sb(0, 0, expected, count)]);
    }
    assert_eq!(sp.start_offset(), 1);
}

#[test]
fn spso_moves_only_across_a_contiguous_terminal_prefix() {
    let log = log_of(10, 3);
    let mut sp = fresh(0);
    fetch(&mut sp, &log, "a", 30, T0);
    let change = ok(
        &mut sp,
        "a",
        &[ack(5, 9, AckType::Accept), ack(20, 29, AckType::Reject)],
    );
    assert_eq!((change.start_offset, change.start_offset_moved), (0, false));
    assert_eq!(change.delivery_complete_count, 15);
    let change = ok(
        &mut sp,
        "a",
        &[ack(0, 1, AckType::Gap), ack(2, 4, AckType::Accept)],
    );
    assert_eq!((change.start_offset, change.start_offset_moved), (10, true));
    assert_eq!(change.delivery_complete_count, 10);
    let change = ok(&mut sp, "a", &[ack(10, 19, AckType::Release)]);
    assert_eq!(change.start_offset, 10, "an AVAILABLE record stops SPSO");
    fetch(&mut sp, &log, "a", 10, T0);
    let change = ok(&mut sp, "a", &[ack(10, 19, AckType::Accept)]);
    assert_eq!(
        (change.start_offset, change.delivery_complete_count),
        (30, 0)
    );
    assert_eq!((sp.end_offset(), sp.next_fetch_offset()), (30, 30));
    assert_eq!(sp.metrics().in_flight_records, 0);
}

#[test]
fn acknowledgement_validation_is_invalid_request() {
    let log = log_of(10, 2);
    let mut sp = fresh(0);
    fetch(&mut sp, &log, "a", 20, T0);
    let bad: Vec<Vec<AckBatch>> = vec![
        vec![ack(5, 4, AckType::Accept)],
        vec![ack(10, 19, AckType::Accept), ack(0, 9, AckType::Accept)],
        vec![AckBatch {
            first: 0,
            last: 9,
            types: vec![],
        }],
        vec![AckBatch {
            first: 0,
            last: 9,
            types: vec![AckType::Accept; 3],
        }],
        vec![ack(0, 9, AckType::Renew)],
    ];
    for batches in bad {
        assert!(
            invalid_request(sp.acknowledge("a", &batches, false, T0)),
            "{batches:?}"
        );
    }
    assert_eq!(AckType::from_id(5), None);
    assert_eq!(AckType::from_id(-1), None);
    assert_eq!(AckType::from_id(4), Some(AckType::Renew));
    // Nothing changed: the records are still acquired by a.
    assert_eq!(
        ok(&mut sp, "a", &[ack(0, 19, AckType::Accept)]).start_offset,
        20
    );
}

#[test]
fn offsets_outside_the_cache() {
    let log = log_of(10, 5);
    let mut sp = fresh(10);
    assert!(
        invalid_state(sp.acknowledge("a", &[ack(10, 10, AckType::Accept)], false, T0)),
        "empty cache: not found"
    );
    fetch(&mut sp, &log, "a", 10, T0);
    assert_eq!(sp.end_offset(), 19);
    assert!(
        ok(&mut sp, "a", &[ack(0, 5, AckType::Accept)]).is_empty(),
        "wholly below SPSO: skipped"
    );
    assert!(
        invalid_request(sp.acknowledge("a", &[ack(15, 25, AckType::Accept)], false, T0)),
        "last past the cache"
    );
    assert!(
        invalid_request(sp.acknowledge("a", &[ack(30, 35, AckType::Accept)], false, T0)),
        "first past the cache"
    );
    ok(&mut sp, "a", &[ack(12, 12, AckType::Accept)]);
    assert!(
        invalid_state(sp.acknowledge("a", &[ack(12, 12, AckType::Accept)], false, T0)),
        "already accepted"
    );
    assert!(
        invalid_state(sp.acknowledge("a", &[ack(10, 19, AckType::Accept)], false, T0)),
        "one accepted inside"
    );
}

#[test]
fn a_failing_batch_rolls_back_the_whole_partition() {
    let log = log_of(10, 3);
    let mut sp = fresh(0);
    fetch(&mut sp, &log, "a", 10, T0);
    fetch(&mut sp, &log, "b", 10, T0);
    let res = sp.acknowledge(
        "a",
        &[ack(0, 9, AckType::Accept), ack(10, 19, AckType::Accept)],
        false,
        T0,
    );
    assert!(invalid_state(res));
    assert_eq!(sp.start_offset(), 0);
    assert_eq!(sp.metrics().acquired_records, 20);
    // Per-offset types and a one-offset overlap (which validation lets through): the second
    // touch of offset 5 fails and the first batch is undone too.
    let res = sp.acknowledge(
        "a",
        &[
            AckBatch {
                first: 0,
                last: 5,
                types: vec![AckType::Accept; 6],
            },
            ack(5, 9, AckType::Release),
        ],
        false,
        T0,
    );
    assert!(invalid_state(res));
    assert_eq!(
        sp.persisted_state().batches,
        vec![],
        "nothing was left half-applied"
    );
    let change = ok(&mut sp, "a", &[ack(0, 9, AckType::Accept)]);
    assert_eq!(change.batches, vec![sb(0, 9, RecordState::Acknowledged, 1)]);
    assert_eq!(change.start_offset, 10);
}

#[test]
fn per_offset_acknowledgement_types() {
    let log = log_of(10, 1);
    let mut sp = fresh(0);
    fetch(&mut sp, &log, "a", 10, T0);
    let types = vec![
        AckType::Accept,
        AckType::Accept,
        AckType::Gap,
        AckType::Release,
        AckType::Reject,
        AckType::Accept,
        AckType::Accept,
        AckType::Accept,
        AckType::Accept,
        AckType::Accept,
    ];
    let change = ok(
        &mut sp,
        "a",
        &[AckBatch {
            first: 0,
            last: 9,
            types,
        }],
    );
    assert_eq!(
        change.batches,
        vec![
            sb(0, 1, RecordState::Acknowledged, 1),
            sb(2, 2, RecordState::Archived, 1),
            sb(3, 3, RecordState::Available, 1),
            sb(4, 4, RecordState::Archived, 1),
            sb(5, 9, RecordState::Acknowledged, 1),
        ]
    );
    assert_eq!(change.start_offset, 3);
    assert_eq!(sp.next_fetch_offset(), 3);
    assert_eq!(
        fetch(&mut sp, &log, "b", 10, T0),
        vec![r(3, 3, 2)],
        "only the released offset"
    );
}

#[test]
fn renew_restarts_the_lock_and_persists_nothing() {
    let log = log_of(10, 1);
    let mut sp = fresh(0);
    fetch(&mut sp, &log, "a", 10, T0);
    let change = sp
        .acknowledge("a", &[ack(0, 9, AckType::Renew)], true, T0 + 20_000)
        .expect("renew");
    assert!(change.is_empty());
    assert_eq!(sp.next_lock_deadline(), Some(T0 + 20_000 + LOCK_MS));
    assert!(
        sp.expire_locks(T0 + LOCK_MS).is_empty(),
        "the old deadline no longer applies"
    );
    assert!(
        invalid_state(sp.acknowledge("b", &[ack(0, 9, AckType::Renew)], true, T0)),
        "not b's to renew"
    );
    assert!(!sp.expire_locks(T0 + 20_000 + LOCK_MS).is_empty());

    let cfg = SharePartitionConfig {
        renew_enabled: false,
        ..SharePartitionConfig::default()
    };
    let mut sp = with_cfg(0, cfg);
    fetch(&mut sp, &log, "a", 10, T0);
    assert!(invalid_state(sp.acknowledge(
        "a",
        &[ack(0, 9, AckType::Renew)],
        true,
        T0
    )));
}

#[test]
fn aborted_transactions_are_archived_and_left_out() {
    let log = log_of(10, 2);
    let mut sp = fresh(0);
    let batches = read(&log, 0);
    let got = sp
        .acquire(
            "a",
            0,
            &batches,
            20,
            20,
            AcquireMode::BatchOptimized,
            &[(3, 5), (10, 19)],
            T0,
        )
        .expect("acquire");
    assert_eq!(got, vec![r(0, 2, 1), r(6, 9, 1)]);
    assert_eq!(sp.metrics().archived_records_total, 13);
    assert!(
        invalid_state(sp.acknowledge("a", &[ack(3, 3, AckType::Accept)], false, T0)),
        "aborted are not acquired"
    );
    let change = ok(
        &mut sp,
        "a",
        &[ack(0, 2, AckType::Accept), ack(6, 9, AckType::Accept)],
    );
    assert_eq!(
        change.start_offset, 20,
        "SPSO passes the archived aborted records"
    );
}

#[test]
fn in_flight_window_is_capped_and_exceeded_by_at_most_one_batch() {
    let log = log_of(300, 20);
    let mut sp = fresh(0);
    let mut acquired = 0;
    for _ in 0..10 {
        let got = fetch(&mut sp, &log, "a", 500, T0);
        acquired += got.iter().map(|r| r.last - r.first + 1).sum::<i64>();
    }
    // 600 records (500 rounded up to two batches of 300) three times, then 200 rounded up to one.
    assert_eq!(acquired, 2100);
    assert!(
        acquired - 2000 < 300,
        "at most one log batch past the limit"
    );
    assert!(!sp.can_acquire());
    assert_eq!(
        fetch(&mut sp, &log, "b", 500, T0),
        vec![],
        "a second member gets nothing"
    );
    // A record released inside the full window is re-acquired, and nothing past SPEO.
    ok(&mut sp, "a", &[ack(400, 400, AckType::Release)]);
    assert!(sp.can_acquire());
    assert_eq!(fetch(&mut sp, &log, "b", 500, T0), vec![r(400, 400, 2)]);
    assert_eq!(sp.end_offset(), 2099);
    // Accepting the head frees room.
    ok(&mut sp, "a", &[ack(0, 299, AckType::Accept)]);
    assert_eq!(sp.start_offset(), 300);
    assert_eq!(fetch(&mut sp, &log, "b", 500, T0), vec![r(2100, 2399, 1)]);
}

#[test]
fn a_smaller_record_lock_limit_applies() {
    let cfg = SharePartitionConfig {
        max_record_locks: 100,
        ..SharePartitionConfig::default()
    };
    let mut sp = with_cfg(0, cfg);
    let log = log_of(10, 50);
    assert_eq!(fetch(&mut sp, &log, "a", 500, T0), vec![r(0, 99, 1)]);
    assert!(!sp.can_acquire());
}

#[test]
fn batch_size_splits_new_ranges_at_log_batch_boundaries() {
    let log = log_of(10, 10);
    let mut sp = fresh(0);
    let batches = read(&log, 0);
    let got = sp
        .acquire(
            "a",
            0,
            &batches,
            50,
            20,
            AcquireMode::BatchOptimized,
            &[],
            T0,
        )
        .expect("acquire");
    assert_eq!(got, vec![r(0, 19, 1), r(20, 39, 1), r(40, 49, 1)]);
    let mut sp = fresh(0);
    let got = sp
        .acquire(
            "a",
            0,
            &batches,
            50,
            25,
            AcquireMode::BatchOptimized,
            &[],
            T0,
        )
        .expect("acquire");
    assert_eq!(
        got,
        vec![r(0, 29, 1), r(30, 49, 1)],
        "each piece holds at least BatchSize records"
    );
    // Each piece is its own cached batch: acknowledging one leaves the others acquired.
    ok(&mut sp, "a", &[ack(0, 29, AckType::Accept)]);
    assert_eq!(sp.start_offset(), 30);
}

#[test]
fn batch_optimized_rounds_up_and_record_limit_does_not() {
    let log = log_of(10, 3);
    let mut sp = fresh(0);
    assert_eq!(fetch(&mut sp, &log, "a", 3, T0), vec![r(0, 9, 1)]);

    let mut sp = fresh(0);
    let got = sp
        .acquire(
            "a",
            0,
            &read(&log, 0),
            3,
            3,
            AcquireMode::RecordLimit,
            &[],
            T0,
        )
        .expect("acquire");
    assert_eq!(got, vec![r(0, 2, 1)]);
    assert_eq!(
        (sp.end_offset(), sp.next_fetch_offset()),
        (9, 3),
        "the rest of the log batch stays available"
    );
    let got = sp
        .acquire(
            "b",
            3,
            &read(&log, 3),
            3,
            3,
            AcquireMode::RecordLimit,
            &[],
            T0,
        )
        .expect("acquire");
    assert_eq!(got, vec![r(3, 5, 1)]);
    let got = sp
        .acquire(
            "b",
            6,
            &read(&log, 6),
            10,
            10,
            AcquireMode::RecordLimit,
            &[],
            T0,
        )
        .expect("acquire");
    assert_eq!(got, vec![r(6, 9, 1), r(10, 15, 1)]);
}

#[test]
fn poison_records_are_throttled_and_delivered_alone_at_the_end() {
    let log = log_of(10, 1);
    let load = |batches: Vec<StateBatch>| {
        let state = PersistedState {
            batches,
            ..PersistedState::initial(0, 0)
        };
        SharePartition::new(state, SharePartitionConfig::default()).expect("load")
    };
    // Limit 5: the throttle starts at 3 deliveries and halves the batch: 10 >> 1 = 5.
    let mut sp = load(vec![sb(0, 9, RecordState::Available, 3)]);
    assert_eq!(fetch(&mut sp, &log, "a", 10, T0), vec![r(0, 4, 4)]);
    assert_eq!(fetch(&mut sp, &log, "a", 10, T0), vec![r(5, 9, 4)]);
    // On the last attempt a record goes alone.
    let mut sp = load(vec![sb(0, 9, RecordState::Available, 4)]);
    assert_eq!(fetch(&mut sp, &log, "a", 10, T0), vec![r(0, 0, 5)]);
    assert_eq!(fetch(&mut sp, &log, "b", 10, T0), vec![r(1, 1, 5)]);
    // A throttled batch is never delivered together with other records.
    let mut sp = load(vec![
        sb(0, 4, RecordState::Available, 1),
        sb(5, 9, RecordState::Available, 3),
    ]);
    assert_eq!(fetch(&mut sp, &log, "a", 10, T0), vec![r(0, 4, 2)]);
    // Its own cached batch holds 5 records: 5 >> 1 = 2.
    assert_eq!(fetch(&mut sp, &log, "a", 10, T0), vec![r(5, 6, 4)]);
}

#[test]
fn release_member_releases_only_that_members_records() {
    let log = log_of(10, 3);
    let mut sp = fresh(0);
    fetch(&mut sp, &log, "a", 10, T0);
    fetch(&mut sp, &log, "b", 10, T0);
    let change = sp.release_member("a", T0);
    assert_eq!(change.batches, vec![sb(0, 9, RecordState::Available, 1)]);
    assert_eq!(sp.metrics().acquired_records, 10);
    assert!(
        ok(&mut sp, "b", &[ack(10, 19, AckType::Accept)])
            .batches
            .len()
            == 1
    );
    assert_eq!(fetch(&mut sp, &log, "c", 10, T0), vec![r(0, 9, 2)]);
}

#[test]
fn log_start_movement_archives_below_it() {
    let log = log_of(10, 3);
    let mut sp = fresh(0);
    fetch(&mut sp, &log, "a", 20, T0);
    ok(&mut sp, "a", &[ack(10, 19, AckType::Release)]);
    let change = sp.archive_below(15);
    assert!(change.start_offset_moved && change.batches.is_empty());
    assert_eq!(sp.start_offset(), 15);
    assert_eq!(sp.next_fetch_offset(), 15, "10..=14 were archived");
    // The ACQUIRED records below the new start are archived when their lock expires.
    let change = sp.expire_locks(T0 + LOCK_MS);
    assert_eq!(change.batches, vec![sb(0, 9, RecordState::Archived, 1)]);
    assert_eq!(sp.start_offset(), 15);
    // An empty cache: SPSO and SPEO jump together.
    let mut sp = fresh(0);
    sp.archive_below(100);
    assert_eq!(
        (sp.start_offset(), sp.end_offset(), sp.next_fetch_offset()),
        (100, 100, 100)
    );
}

#[test]
fn records_the_log_compacted_away_are_archived() {
    let log = log_of(10, 3);
    let mut sp = fresh(0);
    fetch(&mut sp, &log, "a", 10, T0);
    fetch(&mut sp, &log, "b", 10, T0);
    ok(&mut sp, "a", &[ack(0, 9, AckType::Release)]);
    assert_eq!(sp.next_fetch_offset(), 0);
    // The read from 0 now starts at 10: 0..=9 were compacted away.
    let got = sp
        .acquire(
            "c",
            0,
            &read(&log, 10),
            10,
            10,
            AcquireMode::BatchOptimized,
            &[],
            T0,
        )
        .expect("acquire");
    assert_eq!(got, vec![r(20, 29, 1)]);
    assert_eq!(
        sp.start_offset(),
        10,
        "the archived records no longer hold SPSO back"
    );
}

#[test]
fn a_release_while_the_leader_reads_is_not_taken_for_compaction() {
    // Member a holds 0..=9 and b 10..=19; c's fetch reads the log from 20 (everything below is
    // acquired). Before c's acquire runs, a releases 0..=9. The log read from 20 starting at 20
    // says nothing about 0..=9: they stay AVAILABLE and go to the next fetch.
    let log = log_of(10, 3);
    let mut sp = fresh(0);
    fetch(&mut sp, &log, "a", 10, T0);
    fetch(&mut sp, &log, "b", 10, T0);
    let read_from = sp.next_fetch_offset();
    assert_eq!(read_from, 20);
    ok(&mut sp, "a", &[ack(0, 9, AckType::Release)]);
    let got = sp
        .acquire(
            "c",
            read_from,
            &read(&log, read_from),
            10,
            10,
            AcquireMode::BatchOptimized,
            &[],
            T0,
        )
        .expect("acquire");
    assert_eq!(got, vec![r(20, 29, 1)]);
    assert_eq!(sp.metrics().archived_records_total, 0);
    assert_eq!(sp.next_fetch_offset(), 0, "the released records come next");
    assert_eq!(fetch(&mut sp, &log, "c", 10, T0), vec![r(0, 9, 2)]);
}

#[test]
fn persisted_state_is_what_the_writes_built() {
    let log = log_of(10, 4);
    let mut sp = fresh(0);
    let mut coordinator = PersistedState::initial(0, 0);
    let mut write = |c: &StateChange| {
        coordinator.apply_update(0, c.start_offset, c.delivery_complete_count, &c.batches)
    };
    fetch(&mut sp, &log, "a", 40, T0);
    write(&ok(
        &mut sp,
        "a",
        &[ack(0, 9, AckType::Accept), ack(20, 29, AckType::Release)],
    ));
    write(&ok(&mut sp, "a", &[ack(30, 34, AckType::Reject)]));
    fetch(&mut sp, &log, "b", 10, T0); // re-acquires 20..=29 with count 2: not written
    assert_eq!(sp.persisted_state(), coordinator);
    assert_eq!(
        coordinator.batches,
        vec![
            sb(20, 29, RecordState::Available, 1),
            sb(30, 34, RecordState::Archived, 1)
        ]
    );
    assert_eq!(coordinator.start_offset, 10);
}

#[test]
fn restart_keeps_accepted_records_and_redelivers_what_was_in_flight() {
    let log = log_of(10, 5);
    let mut sp = fresh(0);
    let mut coordinator = PersistedState::initial(0, 0);
    fetch(&mut sp, &log, "a", 40, T0);
    // 0..=9 accepted, 10..=19 released twice (count 2), 20..=29 acquired and never written,
    // 30..=39 accepted.
    let c = ok(
        &mut sp,
        "a",
        &[
            ack(0, 9, AckType::Accept),
            ack(10, 19, AckType::Release),
            ack(30, 39, AckType::Accept),
        ],
    );
    coordinator.apply_update(0, c.start_offset, c.delivery_complete_count, &c.batches);
    fetch(&mut sp, &log, "a", 10, T0);
    let c = ok(&mut sp, "a", &[ack(10, 19, AckType::Release)]);
    coordinator.apply_update(0, c.start_offset, c.delivery_complete_count, &c.batches);

    let mut restarted =
        SharePartition::new(coordinator, SharePartitionConfig::default()).expect("load");
    assert_eq!(restarted.start_offset(), 10);
    assert_eq!(restarted.next_fetch_offset(), 10);
    // Available keep their count (2 → 3); the never-written hole comes back with count 1;
    // accepted records are not delivered again; new records follow.
    assert_eq!(
        fetch(&mut restarted, &log, "b", 100, T0),
        vec![r(10, 19, 3), r(20, 29, 1), r(40, 49, 1)]
    );
    assert_eq!(restarted.next_fetch_offset(), 50);
    let change = ok(
        &mut restarted,
        "b",
        &[ack(10, 29, AckType::Accept), ack(40, 49, AckType::Accept)],
    );
    assert_eq!(change.start_offset, 50);
}

#[test]
fn restart_through_the_record_codec() {
    let log = log_of(10, 3);
    let key = ShareStateKey {
        group_id: "g".into(),
        topic_id: [7; 16],
        partition: 0,
    };
    let mut sp = fresh(0);
    let mut records = vec![ShareStateRecord::Snapshot(
        key.clone(),
        ShareSnapshotValue::from_state(&PersistedState::initial(0, 0), 0, T0, T0),
    )];
    fetch(&mut sp, &log, "a", 30, T0);
    for batches in [
        vec![ack(0, 4, AckType::Accept)],
        vec![ack(5, 5, AckType::Release), ack(10, 19, AckType::Reject)],
    ] {
        let c = ok(&mut sp, "a", &batches);
        let update = ShareUpdateValue {
            snapshot_epoch: 0,
            leader_epoch: 0,
            start_offset: if c.start_offset_moved {
                c.start_offset
            } else {
                -1
            },
            delivery_complete_count: c.delivery_complete_count,
            state_batches: c.batches,
        };
        let (k, v) = encode_record(&ShareStateRecord::Update(key.clone(), update)).expect("encode");
        records.push(decode_record(&k, v.as_deref()).expect("decode"));
    }
    let state = replay(&records).expect("replay").expect("state");
    assert_eq!(state.start_offset, 5);
    let mut restarted = SharePartition::new(state, SharePartitionConfig::default()).expect("load");
    // 5 was released (count 1 → 2 on redelivery); 6..=9 were never written (count 1);
    // 10..=19 rejected; 20..=29 never written.
    assert_eq!(
        fetch(&mut restarted, &log, "b", 100, T0),
        vec![r(5, 5, 2), r(6, 9, 1), r(20, 29, 1)]
    );
}

#[test]
fn corrupt_persisted_state_and_log_batches_are_errors() {
    let cfg = SharePartitionConfig::default();
    let bad = [
        PersistedState::initial(0, -1),
        PersistedState {
            batches: vec![sb(0, 9, RecordState::Acquired, 1)],
            ..PersistedState::initial(0, 0)
        },
        PersistedState {
            batches: vec![sb(5, 4, RecordState::Available, 1)],
            ..PersistedState::initial(0, 0)
        },
        PersistedState {
            batches: vec![
                sb(0, 9, RecordState::Available, 1),
                sb(9, 12, RecordState::Archived, 1),
            ],
            ..PersistedState::initial(0, 0)
        },
    ];
    for state in bad {
        assert!(matches!(
            SharePartition::new(state, cfg),
            Err(ShareError::InvalidPersistedState(_))
        ));
    }
    let mut sp = fresh(0);
    for log in [
        vec![LogBatch { first: 5, last: 4 }],
        vec![
            LogBatch {
                first: 10,
                last: 19,
            },
            LogBatch { first: 0, last: 9 },
        ],
        vec![
            LogBatch { first: 0, last: 9 },
            LogBatch { first: 9, last: 12 },
        ],
    ] {
        let res = sp.acquire("a", 0, &log, 10, 10, AcquireMode::BatchOptimized, &[], T0);
        assert!(matches!(res, Err(ShareError::InvalidLogBatches(_))));
    }
}

/// A small deterministic PRNG (xorshift64*), so the random walk below is reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> i64 {
        i64::try_from(self.next() % n).expect("small")
    }
}

/// Checks the cache's structure: batches sorted, non-overlapping, runs contiguous.
fn check_structure(sp: &SharePartition) {
    let mut prev_last: Option<i64> = None;
    for (key, b) in &sp.cache {
        assert_eq!(*key, b.first);
        if let Some(p) = prev_last {
            assert!(b.first > p, "overlapping batches");
        }
        prev_last = Some(b.last);
        let mut next = b.first;
        for run in &b.runs {
            assert_eq!(run.first, next, "runs not contiguous");
            assert!(run.first <= run.last);
            next = run.last + 1;
            let acquired = run.rec.state == RecordState::Acquired;
            assert_eq!(acquired, run.rec.member.is_some());
            assert_eq!(acquired, run.rec.lock_deadline_ms.is_some());
        }
        assert_eq!(next, b.last + 1, "runs do not cover the batch");
    }
}

fn state_at(sp: &SharePartition, offset: i64) -> Option<RecordState> {
    let (_, b) = sp.cache.range(..=offset).next_back()?;
    b.runs
        .iter()
        .find(|r| r.first <= offset && offset <= r.last)
        .map(|r| r.rec.state)
}

#[test]
fn random_operations_keep_every_invariant() {
    const MEMBERS: [&str; 3] = ["a", "b", "c"];
    let types = [
        AckType::Gap,
        AckType::Accept,
        AckType::Release,
        AckType::Reject,
        AckType::Renew,
    ];
    for seed in 1..=40u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let log: Vec<LogBatch> = {
            // Batches of 1..=7 records with occasional compaction holes between them.
            let mut v = Vec::new();
            let mut next = 0;
            for _ in 0..120 {
                let len = 1 + rng.below(7);
                v.push(LogBatch {
                    first: next,
                    last: next + len - 1,
                });
                next += len + if rng.below(5) == 0 { rng.below(3) } else { 0 };
            }
            v
        };
        let cfg = SharePartitionConfig {
            delivery_count_limit: 2 + i16::try_from(rng.below(5)).expect("small"),
            max_record_locks: 40,
            record_lock_duration_ms: 1000,
            renew_enabled: rng.below(2) == 0,
        };
        let mut sp = with_cfg(0, cfg);
        let mut accepted: Vec<(i64, i64)> = Vec::new();
        let mut now = T0;
        let (mut acquired_n, mut acked_n, mut refused_n) = (0, 0, 0);
        for _ in 0..400 {
            now += rng.below(300);
            let start_before = sp.start_offset();
            match rng.below(10) {
                0..=3 => {
                    let member = MEMBERS[usize::try_from(rng.below(3)).expect("small")];
                    let mode = if rng.below(3) == 0 {
                        AcquireMode::RecordLimit
                    } else {
                        AcquireMode::BatchOptimized
                    };
                    let before = sp.clone();
                    let from = sp.next_fetch_offset();
                    let batches = read(&log, from);
                    let batches = &batches[..batches
                        .len()
                        .min(1 + usize::try_from(rng.below(8)).expect("small"))];
                    let aborted: Vec<(i64, i64)> = if rng.below(4) == 0 {
                        batches.iter().take(1).map(|b| (b.first, b.last)).collect()
                    } else {
                        vec![]
                    };
                    let max = u32::try_from(1 + rng.below(30)).expect("small");
                    let got = sp
                        .acquire(
                            member,
                            from,
                            batches,
                            max,
                            u32::try_from(rng.below(10)).expect("small"),
                            mode,
                            &aborted,
                            now,
                        )
                        .expect("acquire");
                    for range in got {
                        acquired_n += range.last - range.first + 1;
                        assert!(range.first >= before.start_offset(), "acquired below SPSO");
                        assert!(
                            range.delivery_count <= cfg.delivery_count_limit,
                            "delivered past the limit"
                        );
                        for offset in range.first..=range.last {
                            let was = state_at(&before, offset);
                            assert!(
                                was.is_none() || was == Some(RecordState::Available),
                                "offset {offset} acquired from {was:?}"
                            );
                            assert!(
                                !accepted.iter().any(|(f, l)| *f <= offset && offset <= *l),
                                "accepted offset redelivered"
                            );
                        }
                    }
                }
                4..=6 => {
                    let mut member = MEMBERS[usize::try_from(rng.below(3)).expect("small")];
                    let mut first = sp.start_offset() - 3 + rng.below(30);
                    let mut last = first + rng.below(12) - 1;
                    // Half the time, acknowledge what a member really holds.
                    let held: Vec<(i64, i64, &str)> = sp
                        .cache
                        .values()
                        .flat_map(|b| &b.runs)
                        .filter(|r| r.rec.state == RecordState::Acquired)
                        .filter_map(|r| {
                            MEMBERS
                                .iter()
                                .find(|m| r.rec.is_owned_by(m))
                                .map(|m| (r.first, r.last, *m))
                        })
                        .collect();
                    if rng.below(2) == 0 && !held.is_empty() {
                        let (f, l, m) =
                            held[usize::try_from(rng.below(held.len() as u64)).expect("small")];
                        (first, last, member) = (f, l, m);
                    }
                    let n = if rng.below(2) == 0 {
                        1
                    } else {
                        usize::try_from((last - first + 1).max(0)).expect("small")
                    };
                    let batch = AckBatch {
                        first,
                        last,
                        types: (0..n)
                            .map(|_| types[usize::try_from(rng.below(5)).expect("small")])
                            .collect(),
                    };
                    let is_renew = rng.below(2) == 0;
                    let before = sp.clone();
                    match sp.acknowledge(member, std::slice::from_ref(&batch), is_renew, now) {
                        Ok(change) => {
                            acked_n += 1;
                            for b in &change.batches {
                                if b.state == RecordState::Acknowledged.id() {
                                    accepted.push((b.first, b.last));
                                }
                            }
                        }
                        Err(_) => {
                            refused_n += 1;
                            assert_eq!(
                                sp.cache, before.cache,
                                "a failed acknowledgement changed state"
                            );
                            assert_eq!(sp.start_offset(), before.start_offset());
                        }
                    }
                }
                7 => {
                    sp.expire_locks(now);
                }
                8 => {
                    sp.release_member(MEMBERS[usize::try_from(rng.below(3)).expect("small")], now);
                }
                _ => {
                    if rng.below(8) == 0 {
                        sp.archive_below(sp.start_offset() + rng.below(5));
                    }
                }
            }
            assert!(sp.start_offset() >= start_before, "SPSO moved back");
            check_structure(&sp);
            assert!(
                sp.in_flight_span() <= i64::from(cfg.max_record_locks) + 7 + 30,
                "window unbounded"
            );
            let persisted = sp.persisted_state();
            assert!(persisted
                .batches
                .iter()
                .all(|b| b.first >= sp.start_offset()));
        }
        assert!(
            acquired_n > 100 && acked_n > 10 && refused_n > 10,
            "seed {seed}: {acquired_n} {acked_n} {refused_n}"
        );
        assert!(
            sp.start_offset() > 50,
            "seed {seed}: the walk made progress"
        );
    }
}

#[test]
fn a_config_change_applies_from_the_next_use() {
    let log = log_of(1, 3);
    let mut sp = fresh(0);
    assert_eq!(fetch(&mut sp, &log, "a", 1, T0), vec![r(0, 0, 1)]);
    // A shorter lock from now on: the lock already held keeps its deadline.
    sp.set_config(SharePartitionConfig {
        record_lock_duration_ms: 15_000,
        delivery_count_limit: 2,
        ..SharePartitionConfig::default()
    });
    assert!(sp.expire_locks(T0 + 15_000).is_empty());
    assert!(!sp.expire_locks(T0 + LOCK_MS).is_empty());
    // The next acquisition locks for 15 s, and the limit of 2 archives at its expiry.
    let now = T0 + LOCK_MS;
    assert_eq!(fetch(&mut sp, &log, "a", 1, now), vec![r(0, 0, 2)]);
    let change = sp.expire_locks(now + 15_000);
    assert_eq!(change.batches, vec![sb(0, 0, RecordState::Archived, 2)]);
    // Below Kafka's minimum the limit stays 2.
    sp.set_config(SharePartitionConfig {
        delivery_count_limit: 1,
        ..SharePartitionConfig::default()
    });
    assert_eq!(sp.config().delivery_count_limit, DELIVERY_COUNT_LIMIT_MIN);
}
