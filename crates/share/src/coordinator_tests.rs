//! The share coordinator's rules, each through the records a caller would append: a record is
//! folded in only after it is "committed" (here: pushed to a log), and a second shard replaying
//! that log through the codec must hold the same state.

use super::*;
use crate::records::{decode_record, encode_record};

const NOW: i64 = 1_700_000_000_000;

fn key(partition: i32) -> ShareStateKey {
    ShareStateKey {
        group_id: "g".into(),
        topic_id: [7; 16],
        partition,
    }
}

fn b(first: i64, last: i64, state: u8, delivery_count: i16) -> StateBatch {
    StateBatch {
        first,
        last,
        state,
        delivery_count,
    }
}

fn w(state_epoch: i32, leader_epoch: i32, start: i64, batches: Vec<StateBatch>) -> StateWrite {
    StateWrite {
        state_epoch,
        leader_epoch,
        start_offset: start,
        delivery_complete_count: 0,
        batches,
    }
}

/// A shard with the log it appended: `commit` encodes, decodes and replays a record as the
/// broker does.
struct Coordinator {
    shard: ShareCoordinatorShard,
    log: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl Coordinator {
    fn new(updates_per_snapshot: u32) -> Coordinator {
        Coordinator {
            shard: ShareCoordinatorShard::new(updates_per_snapshot),
            log: Vec::new(),
        }
    }

    fn commit(&mut self, record: ShareStateRecord) -> ShareStateRecord {
        let (k, v) = encode_record(&record).expect("encodes");
        let decoded = decode_record(&k, v.as_deref()).expect("decodes");
        assert_eq!(decoded, record);
        self.log.push((k.to_vec(), v.map(|v| v.to_vec())));
        self.shard.replay_at(&decoded, self.log.len() as i64 - 1);
        decoded
    }

    /// A fresh shard loaded from the log.
    fn reload(&self) -> ShareCoordinatorShard {
        self.reload_from(0)
    }

    /// A fresh shard loaded from the log's records at and after `start` (what is left once the
    /// records below it are pruned).
    fn reload_from(&self, start: i64) -> ShareCoordinatorShard {
        let mut shard = ShareCoordinatorShard::new(self.shard.updates_per_snapshot);
        for (offset, (k, v)) in self.log.iter().enumerate().skip(start as usize) {
            shard.replay_at(
                &decode_record(k, v.as_deref()).expect("decodes"),
                offset as i64,
            );
        }
        shard
    }
}

#[test]
fn initialize_read_write_and_reload() {
    let mut c = Coordinator::new(UPDATES_PER_SNAPSHOT_DEFAULT);
    let k = key(0);
    assert!(matches!(
        c.shard.read(&k, 0, NOW),
        Err(CoordinatorError::InvalidRequest(_))
    ));
    let r = c.shard.initialize(&k, 0, 10, NOW).expect("initialize");
    assert!(matches!(r, ShareStateRecord::Snapshot(..)));
    c.commit(r);
    let (state, bump) = c.shard.read(&k, 0, NOW).expect("read");
    assert_eq!(state, PersistedState::initial(0, 10));
    assert!(bump.is_none(), "the same leader epoch is not written again");

    let r = c
        .shard
        .write(
            &k,
            &w(0, 0, 12, vec![b(10, 11, 2, 1), b(12, 14, 0, 2)]),
            NOW,
        )
        .expect("write");
    assert!(matches!(r, ShareStateRecord::Update(..)));
    c.commit(r);
    let state = c.shard.state(&k).expect("stored").clone();
    assert_eq!(state.start_offset, 12);
    assert_eq!(state.batches, vec![b(12, 14, 0, 2)]);
    assert_eq!(c.reload().state(&k), Some(&state));
}

#[test]
fn a_snapshot_every_n_updates() {
    let mut c = Coordinator::new(3);
    let k = key(1);
    c.commit(c.shard.initialize(&k, 0, 0, NOW).expect("initialize"));
    let mut kinds = Vec::new();
    for i in 0..7 {
        let r = c
            .shard
            .write(&k, &w(0, 0, -1, vec![b(i, i, 2, 1)]), NOW)
            .expect("write");
        kinds.push(match c.commit(r) {
            ShareStateRecord::Snapshot(_, v) => format!("S{}", v.snapshot_epoch),
            ShareStateRecord::Update(_, v) => format!("U{}", v.snapshot_epoch),
            ShareStateRecord::Tombstone(_) => "T".into(),
        });
    }
    assert_eq!(kinds, ["U0", "U0", "S1", "U1", "U1", "S2", "U2"]);
    let state = c.shard.state(&k).expect("stored").clone();
    assert_eq!(state.batches, vec![b(0, 6, 2, 1)]);
    assert_eq!(c.reload().state(&k), Some(&state));
}

#[test]
fn epochs_fence_older_writers() {
    let mut c = Coordinator::new(UPDATES_PER_SNAPSHOT_DEFAULT);
    let k = key(2);
    c.commit(c.shard.initialize(&k, 1, 0, NOW).expect("initialize"));
    // A newer leader's read records its epoch.
    let (_, bump) = c.shard.read(&k, 4, NOW).expect("read");
    c.commit(bump.expect("a newer leader epoch is written"));
    assert_eq!(c.reload().state(&k).map(|s| s.leader_epoch), Some(4));
    assert_eq!(
        c.shard.read(&k, 3, NOW).err(),
        Some(CoordinatorError::FencedLeaderEpoch {
            request: 3,
            stored: 4
        })
    );
    assert_eq!(
        c.shard.write(&k, &w(1, 3, -1, vec![]), NOW).err(),
        Some(CoordinatorError::FencedLeaderEpoch {
            request: 3,
            stored: 4
        })
    );
    assert_eq!(
        c.shard.write(&k, &w(0, 4, -1, vec![]), NOW).err(),
        Some(CoordinatorError::FencedStateEpoch {
            request: 0,
            stored: 1
        })
    );
    assert_eq!(
        c.shard.initialize(&k, 0, 5, NOW).err(),
        Some(CoordinatorError::FencedStateEpoch {
            request: 0,
            stored: 1
        })
    );
    assert!(matches!(
        c.shard.write(&k, &w(-1, 4, -1, vec![]), NOW),
        Err(CoordinatorError::InvalidRequest(_))
    ));
    assert!(matches!(
        c.shard.write(&k, &w(1, 4, -1, vec![b(5, 4, 0, 1)]), NOW),
        Err(CoordinatorError::InvalidRequest(_))
    ));
    assert!(matches!(
        c.shard.write(&key(3), &w(1, 4, -1, vec![]), NOW),
        Err(CoordinatorError::InvalidRequest(_))
    ));
    assert!(matches!(
        c.shard.initialize(&key(-1), 0, 0, NOW),
        Err(CoordinatorError::InvalidRequest(_))
    ));
    // A write in a newer state epoch is a snapshot that records it.
    let r = c.shard.write(&k, &w(2, 4, 3, vec![]), NOW).expect("write");
    assert!(matches!(r, ShareStateRecord::Snapshot(_, ref v) if v.state_epoch == 2));
    c.commit(r);
    assert_eq!(
        c.reload()
            .state(&k)
            .map(|s| (s.state_epoch, s.start_offset)),
        Some((2, 3))
    );
}

#[test]
fn delete_and_summary() {
    let mut c = Coordinator::new(UPDATES_PER_SNAPSHOT_DEFAULT);
    let k = key(4);
    assert_eq!(
        c.shard.read_summary(&k),
        Ok(StateSummary {
            state_epoch: 0,
            leader_epoch: 0,
            start_offset: -1,
            delivery_complete_count: -1
        })
    );
    assert_eq!(
        c.shard.delete(&k),
        Ok(None),
        "deleting nothing writes nothing"
    );
    c.commit(c.shard.initialize(&k, 3, 20, NOW).expect("initialize"));
    c.commit(
        c.shard
            .write(
                &k,
                &StateWrite {
                    delivery_complete_count: 2,
                    ..w(3, 1, -1, vec![b(21, 22, 2, 1)])
                },
                NOW,
            )
            .expect("write"),
    );
    assert_eq!(
        c.shard.read_summary(&k),
        Ok(StateSummary {
            state_epoch: 3,
            leader_epoch: 1,
            start_offset: 20,
            delivery_complete_count: 2
        })
    );
    let tombstone = c.shard.delete(&k).expect("delete").expect("a tombstone");
    c.commit(tombstone);
    assert!(c.shard.state(&k).is_none());
    assert!(c.reload().state(&k).is_none());
    assert!(c.reload().is_empty());
}

#[test]
fn out_of_order_writes_converge() {
    // Two writes of one share partition may reach the coordinator in either order (release
    // and lock expiry are not awaited): the combiner makes the outcome the same.
    let k = key(5);
    let acked = w(0, 0, -1, vec![b(0, 4, 2, 1)]);
    let released = w(0, 0, -1, vec![b(0, 4, 0, 1)]);
    let mut one = Coordinator::new(UPDATES_PER_SNAPSHOT_DEFAULT);
    let mut two = Coordinator::new(UPDATES_PER_SNAPSHOT_DEFAULT);
    for c in [&mut one, &mut two] {
        c.commit(c.shard.initialize(&k, 0, 0, NOW).expect("initialize"));
    }
    for write in [&released, &acked] {
        one.commit(one.shard.write(&k, write, NOW).expect("write"));
    }
    for write in [&acked, &released] {
        two.commit(two.shard.write(&k, write, NOW).expect("write"));
    }
    assert_eq!(one.shard.state(&k), two.shard.state(&k));
    assert_eq!(
        one.shard.state(&k).map(|s| s.batches.clone()),
        Some(vec![b(0, 4, 2, 1)])
    );
}

#[test]
fn pruning_keeps_what_a_reload_needs() {
    // Key 1 is written often (a snapshot every 2 updates); key 2 once, at the start: it holds
    // every record back until it gets a fresh snapshot of its own.
    let (busy, cold) = (key(1), key(2));
    let mut c = Coordinator::new(2);
    c.commit(c.shard.initialize(&cold, 0, 0, NOW).expect("initialize"));
    c.commit(
        c.shard
            .write(&cold, &w(0, 1, 3, vec![b(3, 4, 2, 1)]), NOW)
            .expect("write"),
    );
    c.commit(c.shard.initialize(&busy, 0, 0, NOW).expect("initialize"));
    for n in 0..9 {
        let write = w(0, 1, -1, vec![b(n, n, 2, 1)]);
        c.commit(c.shard.write(&busy, &write, NOW).expect("write"));
    }
    let end = c.log.len() as i64;
    assert_eq!(
        c.shard.redundant_below(end),
        0,
        "the cold key's snapshot is at 0"
    );
    assert_eq!(c.shard.snapshotted_below(3), vec![cold.clone()]);
    assert_eq!(c.shard.snapshot_offset(&cold), Some(0));
    // A fresh snapshot of the cold key lets pruning pass everything before the busy key's
    // latest snapshot.
    let fresh = c.shard.snapshot(&cold, NOW).expect("held");
    c.commit(fresh);
    let end = c.log.len() as i64;
    let below = c.shard.redundant_below(end);
    assert!(below > 2, "pruning moves past the first records: {below}");
    let pruned = c.reload_from(below);
    for k in [&busy, &cold] {
        assert_eq!(
            pruned.state(k),
            c.shard.state(k),
            "{k:?} rebuilt from the records kept"
        );
    }
    assert_eq!(c.shard.snapshot(&key(9), NOW), None, "no key, no snapshot");
    // A tombstoned key holds nothing back; with no key left, everything is redundant.
    for k in [&busy, &cold] {
        let tombstone = c.shard.delete(k).expect("delete").expect("a tombstone");
        c.commit(tombstone);
    }
    let end = c.log.len() as i64;
    assert_eq!(c.shard.redundant_below(end), end);
    assert!(c.reload_from(end).is_empty());
}
