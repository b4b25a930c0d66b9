//! Goal: the group coordinator serves a `__consumer_offsets` partition only while it leads it in
//! a leader epoch and has replayed it — loading, unloading and reloading as leadership notifications
//! arrive (in or out of order) — and acknowledges a commit or a group record only once the
//! injected `GroupLog` says it is committed, with Kafka's error codes when it is not.
//!
//! These tests run the real coordinator over real store logs; the `GroupLog` is the single-node
//! `DurableGroupLog` (a "broker"'s view of who leads what) or `ScriptedLog`, which wraps it to
//! refuse appends or to hold, release or fail commits the way a replicated log can.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use millrace_groups::{
    partition_for, CommitPartition, CommitRequest, CoordinatorConfig, DurableGroupLog, GroupAppend,
    GroupConfig, GroupCoordinator, GroupError, GroupLog, GroupLogError, GroupState, JoinRequest,
    JoinResponse, PartitionStatus, Protocol, Reply, SyncRequest,
};
use millrace_store::{LogConfig, PartitionLog, Store, StoreConfig, TopicId, TopicPartition};
use parking_lot::Mutex;
use tokio::sync::watch;

/// `__consumer_offsets` partitions in these tests.
const N: i32 = 3;
/// Bound on every wait for something that must happen.
const WAIT: Duration = Duration::from_secs(10);
/// How long something that must not happen is given to happen anyway.
const QUIET: Duration = Duration::from_millis(200);

struct Logs {
    _dir: tempfile::TempDir,
    store: Arc<Store>,
    logs: Vec<Arc<PartitionLog>>,
}

fn logs() -> Logs {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(StoreConfig {
        data_dir: dir.path().to_path_buf(),
        extra_log_dirs: Vec::new(),
        flush_policy: millrace_store::FlushPolicy::Batch,
        flush_interval: Duration::from_millis(2),
        max_open_files: 16,
        high_watermark_follows_durable: true,
    })
    .expect("store");
    let logs = (0..N)
        .map(|p| {
            store
                .create_partition(
                    &TopicPartition::new("__consumer_offsets", p),
                    LogConfig::default(),
                    TopicId::from_bytes([7; 16]),
                )
                .expect("partition")
        })
        .collect();
    Logs {
        _dir: dir,
        store,
        logs,
    }
}

fn config(initial_rebalance_delay_ms: i32) -> CoordinatorConfig {
    CoordinatorConfig {
        consumer: Default::default(),
        share: Default::default(),
        group: GroupConfig {
            initial_rebalance_delay_ms,
            ..GroupConfig::default()
        },
        offsets_retention_ms: 7 * 24 * 3600 * 1000,
        snapshot_dir: None,
    }
}

/// What a held commit does once released.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Gate {
    Open,
    Closed,
    Fail(GroupLogError),
}

/// A `GroupLog` over `DurableGroupLog` that can refuse appends and hold, release or fail commits.
struct ScriptedLog {
    inner: DurableGroupLog,
    refuse: Mutex<Option<GroupLogError>>,
    gate: watch::Sender<Gate>,
}

impl ScriptedLog {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            inner: DurableGroupLog::new(WAIT),
            refuse: Mutex::new(None),
            gate: watch::Sender::new(Gate::Open),
        })
    }

    fn set_gate(&self, gate: Gate) {
        self.gate.send_replace(gate);
    }
}

impl GroupLog for ScriptedLog {
    fn append(
        &self,
        partition: i32,
        leader_epoch: i32,
        records: BytesMut,
    ) -> Result<GroupAppend, GroupLogError> {
        if let Some(e) = self.refuse.lock().clone() {
            return Err(e);
        }
        let appended = self.inner.append(partition, leader_epoch, records)?;
        let mut gate = self.gate.subscribe();
        let durable = appended.committed;
        let committed: Reply<Result<(), GroupLogError>> = Box::pin(async move {
            durable.await?;
            loop {
                match gate.borrow_and_update().clone() {
                    Gate::Open => return Ok(()),
                    Gate::Fail(e) => return Err(e),
                    Gate::Closed => {}
                }
                if gate.changed().await.is_err() {
                    return Err(GroupLogError::Storage("gate dropped".into()));
                }
            }
        });
        Ok(GroupAppend {
            last_offset: appended.last_offset,
            committed,
        })
    }
}

/// Waits (bounded) until `partition` is in `want`.
async fn wait_status(c: &GroupCoordinator, partition: i32, want: PartitionStatus) {
    let deadline = Instant::now() + WAIT;
    while c.partition_status(partition) != Some(want) {
        assert!(
            Instant::now() < deadline,
            "partition {partition}: {:?}, want {want:?}",
            c.partition_status(partition)
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Leads every partition in `leader_epoch` (in the log and in the coordinator) and waits until
/// all are loaded.
async fn lead_all(
    c: &GroupCoordinator,
    group_log: &DurableGroupLog,
    logs: &[Arc<PartitionLog>],
    leader_epoch: i32,
) {
    for (p, log) in logs.iter().enumerate() {
        group_log.lead(p as i32, log.clone(), leader_epoch);
        c.become_leader(p as i32, log.clone(), leader_epoch);
    }
    for p in 0..logs.len() as i32 {
        wait_status(c, p, PartitionStatus::Loaded { leader_epoch }).await;
    }
}

fn commit(group: &str, offset: i64) -> CommitRequest {
    CommitRequest {
        group_id: group.into(),
        generation_id: -1,
        member_id: String::new(),
        group_instance_id: None,
        retention_time_ms: -1,
        partitions: vec![CommitPartition {
            topic: "t".into(),
            partition: 0,
            offset,
            leader_epoch: 1,
            metadata: Some(String::new()),
        }],
    }
}

fn committed(c: &GroupCoordinator, group: &str) -> Result<Option<i64>, GroupError> {
    let fetched = c.fetch_offsets(group, Some(vec![("t".to_string(), vec![0])]))?;
    Ok(fetched
        .first()
        .and_then(|(_, ps)| ps.first())
        .and_then(|(_, o)| o.as_ref().map(|o| o.offset)))
}

fn join_request(group: &str, member_id: &str) -> JoinRequest {
    JoinRequest {
        group_id: group.into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        member_id: member_id.into(),
        group_instance_id: None,
        protocol_type: "consumer".into(),
        protocols: vec![Protocol {
            name: "range".into(),
            metadata: Bytes::from_static(b"m"),
        }],
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        require_known_member_id: false,
    }
}

fn sync_request(group: &str, joined: &JoinResponse, assign: bool) -> SyncRequest {
    SyncRequest {
        group_id: group.into(),
        generation_id: joined.generation_id,
        member_id: joined.member_id.clone(),
        group_instance_id: None,
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignments: if assign {
            joined
                .members
                .iter()
                .map(|m| (m.member_id.clone(), Bytes::from_static(b"A")))
                .collect()
        } else {
            Vec::new()
        },
    }
}

/// A group id (other than "g") whose `__consumer_offsets` partition is `partition`.
fn group_in_partition(partition: i32) -> String {
    (0..10_000)
        .map(|i| format!("j{i}"))
        .find(|g| partition_for(g, N) == partition)
        .expect("some group id maps to every partition")
}

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} not answered within {WAIT:?}"))
}

/// Two members in generation 2 of `group`, both answered; the first one leads.
async fn two_members(c: &GroupCoordinator, group: &str) -> (JoinResponse, JoinResponse) {
    let a = within("join a", c.join(join_request(group, ""))).await;
    assert_eq!(a.error, None, "{a:?}");
    // B's join starts a rebalance that waits for A to rejoin.
    let b = c.join(join_request(group, ""));
    let a2 = within("rejoin a", c.join(join_request(group, &a.member_id))).await;
    let b = within("join b", b).await;
    assert_eq!((a2.error.clone(), b.error.clone()), (None, None));
    assert_eq!(a2.generation_id, b.generation_id);
    if a2.leader == a2.member_id {
        (a2, b)
    } else {
        (b, a2)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_notifications_load_unload_and_reload_by_leader_epoch() {
    let l = logs();
    let group_log = Arc::new(DurableGroupLog::new(WAIT));
    let c = GroupCoordinator::new(config(0), N, group_log.clone());
    let p = partition_for("g", N);
    let log = l.logs[p as usize].clone();
    // Nothing is led at first.
    assert_eq!(c.check_coordinator("g"), Err(GroupError::NotCoordinator));
    assert_eq!(c.partition_status(p), Some(PartitionStatus::NotLeader));

    // Loading, then loaded, in epoch 1.
    let hold = c.hold_loads().expect("hold");
    group_log.lead(p, log.clone(), 1);
    c.become_leader(p, log.clone(), 1);
    assert_eq!(
        c.check_coordinator("g"),
        Err(GroupError::CoordinatorLoadInProgress)
    );
    assert_eq!(
        within("commit while loading", c.commit_offsets(commit("g", 5))).await,
        vec![Err(GroupError::CoordinatorLoadInProgress)]
    );
    assert_eq!(
        c.list_groups(&[]),
        Err(GroupError::CoordinatorLoadInProgress)
    );
    drop(hold);
    wait_status(&c, p, PartitionStatus::Loaded { leader_epoch: 1 }).await;
    assert_eq!(c.check_coordinator("g"), Ok(()));
    assert_eq!(
        within("commit", c.commit_offsets(commit("g", 5))).await,
        vec![Ok(())]
    );

    // A duplicate or older become_leader, and an older resign, change nothing (the parked
    // JoinGroup stays parked: no reload answered it).
    let first = within("first join", c.join(join_request("g", ""))).await;
    assert_eq!(first.error, None);
    let waiting = c.join(join_request("g", ""));
    let mut waiting = Box::pin(waiting);
    assert!(tokio::time::timeout(QUIET, &mut waiting).await.is_err());
    c.become_leader(p, log.clone(), 1);
    c.become_leader(p, log.clone(), 0);
    c.resign(p, Some(0));
    assert_eq!(
        c.partition_status(p),
        Some(PartitionStatus::Loaded { leader_epoch: 1 })
    );
    assert!(tokio::time::timeout(QUIET, &mut waiting).await.is_err());

    // A newer epoch while loaded reloads: the parked join is answered NOT_COORDINATOR, the
    // replay brings the commit back.
    group_log.lead(p, log.clone(), 3);
    c.become_leader(p, log.clone(), 3);
    let answered = within("parked join on reload", waiting).await;
    assert_eq!(answered.error, Some(GroupError::NotCoordinator));
    wait_status(&c, p, PartitionStatus::Loaded { leader_epoch: 3 }).await;
    assert_eq!(committed(&c, "g"), Ok(Some(5)));

    // Resign in epoch 4: not served; a late become_leader for epoch 3 stays ignored; epoch 4
    // itself loads again (a fenced broker gets leadership back without a new epoch).
    c.resign(p, Some(4));
    assert_eq!(c.partition_status(p), Some(PartitionStatus::NotLeader));
    assert_eq!(c.check_coordinator("g"), Err(GroupError::NotCoordinator));
    assert_eq!(committed(&c, "g"), Err(GroupError::NotCoordinator));
    c.become_leader(p, log.clone(), 3);
    assert_eq!(c.partition_status(p), Some(PartitionStatus::NotLeader));
    group_log.lead(p, log.clone(), 4);
    c.become_leader(p, log.clone(), 4);
    wait_status(&c, p, PartitionStatus::Loaded { leader_epoch: 4 }).await;
    assert_eq!(committed(&c, "g"), Ok(Some(5)));

    // Out of order: a replay for epoch 5 still queued when the resign for epoch 5 arrives is
    // discarded, whatever the loader does later.
    let hold = c.hold_loads().expect("hold");
    c.become_leader(p, log.clone(), 5);
    assert_eq!(
        c.partition_status(p),
        Some(PartitionStatus::Loading { leader_epoch: 5 })
    );
    c.resign(p, Some(4));
    assert_eq!(
        c.partition_status(p),
        Some(PartitionStatus::Loading { leader_epoch: 5 }),
        "a resign older than the load is stale"
    );
    c.resign(p, Some(6));
    drop(hold);
    tokio::time::sleep(QUIET).await;
    assert_eq!(c.partition_status(p), Some(PartitionStatus::NotLeader));

    // Two loads in a row: only the newer one is installed.
    let hold = c.hold_loads().expect("hold");
    c.become_leader(p, log.clone(), 7);
    c.become_leader(p, log.clone(), 8);
    drop(hold);
    wait_status(&c, p, PartitionStatus::Loaded { leader_epoch: 8 }).await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        c.partition_status(p),
        Some(PartitionStatus::Loaded { leader_epoch: 8 })
    );

    // The partition is gone (resign without an epoch): every epoch is forgotten.
    c.resign(p, None);
    c.become_leader(p, log.clone(), 0);
    wait_status(&c, p, PartitionStatus::Loaded { leader_epoch: 0 }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resign_answers_parked_join_and_sync_with_not_coordinator() {
    let l = logs();
    let group_log = Arc::new(DurableGroupLog::new(WAIT));
    let c = GroupCoordinator::new(config(0), N, group_log.clone());
    lead_all(&c, &group_log, &l.logs, 1).await;
    let p = partition_for("g", N);

    // In group g a follower's SyncGroup parks until the leader's; in group j (same partition) a
    // second member's JoinGroup parks until the first rejoins.
    let (leader, follower) = two_members(&c, "g").await;
    let mut sync = Box::pin(c.sync(sync_request("g", &follower, false)));
    assert!(tokio::time::timeout(QUIET, &mut sync).await.is_err());
    let j = group_in_partition(p);
    let first = within("join j", c.join(join_request(&j, ""))).await;
    assert_eq!(first.error, None);
    let mut join = Box::pin(c.join(join_request(&j, "")));
    assert!(tokio::time::timeout(QUIET, &mut join).await.is_err());

    group_log.resign(p);
    c.resign(p, Some(2));
    let synced = within("parked sync", sync).await;
    assert_eq!(synced.error, Some(GroupError::NotCoordinator));
    let joined = within("parked join", join).await;
    assert_eq!(joined.error, Some(GroupError::NotCoordinator));
    // Nothing of the group is left to time out or to answer.
    assert_eq!(
        c.heartbeat("g", &leader.member_id, None, leader.generation_id),
        Err(GroupError::NotCoordinator)
    );
    c.tick(true);
    assert_eq!(c.list_groups(&[]), Ok(Vec::new()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_and_group_records_are_answered_only_once_committed() {
    let l = logs();
    let scripted = ScriptedLog::new();
    let c = GroupCoordinator::new(config(0), N, scripted.clone());
    lead_all(&c, &scripted.inner, &l.logs, 1).await;

    scripted.set_gate(Gate::Closed);
    let mut commit_reply = Box::pin(c.commit_offsets(commit("g", 42)));
    assert!(
        tokio::time::timeout(QUIET, &mut commit_reply)
            .await
            .is_err(),
        "answered before the log said committed"
    );
    // The leader's SyncGroup writes the group record; its answer waits for the commit too.
    let joined = within("join", c.join(join_request("g2", ""))).await;
    assert_eq!(joined.error, None);
    let mut sync_reply = Box::pin(c.sync(sync_request("g2", &joined, true)));
    assert!(tokio::time::timeout(QUIET, &mut sync_reply).await.is_err());

    scripted.set_gate(Gate::Open);
    assert_eq!(within("commit", commit_reply).await, vec![Ok(())]);
    let synced = within("sync", sync_reply).await;
    assert_eq!(synced.error, None);
    assert_eq!(synced.assignment, Bytes::from_static(b"A"));
    assert_eq!(committed(&c, "g"), Ok(Some(42)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_that_do_not_commit_get_kafkas_coordinator_errors() {
    let l = logs();
    let scripted = ScriptedLog::new();
    let c = GroupCoordinator::new(config(0), N, scripted.clone());
    lead_all(&c, &scripted.inner, &l.logs, 1).await;
    assert_eq!(
        within("commit", c.commit_offsets(commit("g", 1))).await,
        vec![Ok(())]
    );

    // Refused at append: nothing written, nothing applied.
    for (refusal, answer) in [
        (GroupLogError::NotLeader, GroupError::NotCoordinator),
        (
            GroupLogError::NotEnoughReplicas,
            GroupError::CoordinatorNotAvailable,
        ),
    ] {
        *scripted.refuse.lock() = Some(refusal);
        assert_eq!(
            within("refused commit", c.commit_offsets(commit("g", 2))).await,
            vec![Err(answer)]
        );
        assert_eq!(committed(&c, "g"), Ok(Some(1)));
    }
    *scripted.refuse.lock() = None;

    // Appended but not committed.
    for (failure, answer) in [
        (GroupLogError::NotLeader, GroupError::NotCoordinator),
        (
            GroupLogError::NotEnoughReplicas,
            GroupError::CoordinatorNotAvailable,
        ),
        (GroupLogError::Timeout, GroupError::CoordinatorNotAvailable),
    ] {
        scripted.set_gate(Gate::Fail(failure));
        assert_eq!(
            within("failed commit", c.commit_offsets(commit("g", 3))).await,
            vec![Err(answer)]
        );
    }

    // A group record that does not commit: the SyncGroup gets the error, never an assignment,
    // and the group rebalances.
    scripted.set_gate(Gate::Fail(GroupLogError::NotEnoughReplicas));
    let joined = within("join", c.join(join_request("g3", ""))).await;
    assert_eq!(joined.error, None);
    let synced = within("sync", c.sync(sync_request("g3", &joined, true))).await;
    assert_eq!(synced.error, Some(GroupError::CoordinatorNotAvailable));
    assert!(synced.assignment.is_empty());
    let deadline = Instant::now() + WAIT;
    while c.describe_group("g3").map(|d| d.state) != Ok(GroupState::PreparingRebalance) {
        assert!(
            Instant::now() < deadline,
            "group never went back to rebalancing"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Leadership moved in the log before the coordinator heard of it: the append is refused
/// NOT_LEADER, the client gets NOT_COORDINATOR, and the coordinator's state is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_not_leader_append_answers_not_coordinator() {
    let l = logs();
    let group_log = Arc::new(DurableGroupLog::new(WAIT));
    let c = GroupCoordinator::new(config(0), N, group_log.clone());
    lead_all(&c, &group_log, &l.logs, 1).await;
    assert_eq!(
        within("commit", c.commit_offsets(commit("g", 1))).await,
        vec![Ok(())]
    );
    let p = partition_for("g", N);
    let end = l.logs[p as usize].log_end_offset();
    // Another broker leads epoch 2 now.
    group_log.lead(p, l.logs[p as usize].clone(), 2);
    assert_eq!(
        within("commit", c.commit_offsets(commit("g", 2))).await,
        vec![Err(GroupError::NotCoordinator)]
    );
    assert_eq!(committed(&c, "g"), Ok(Some(1)));
    assert_eq!(l.logs[p as usize].log_end_offset(), end, "nothing appended");
}

/// Failover between two brokers over the same (replicated) log: each new leader replays the
/// partition and serves every commit acknowledged before, and a deposed leader's late commit is
/// refused rather than lost silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_replays_the_committed_offsets() {
    let l = logs();
    let (a_log, b_log) = (
        Arc::new(DurableGroupLog::new(WAIT)),
        Arc::new(DurableGroupLog::new(WAIT)),
    );
    let a = GroupCoordinator::new(config(0), N, a_log.clone());
    let b = GroupCoordinator::new(config(0), N, b_log.clone());
    lead_all(&a, &a_log, &l.logs, 1).await;
    for (g, o) in [("g", 10), ("h", 20), ("i", 30)] {
        assert_eq!(
            within("commit", a.commit_offsets(commit(g, o))).await,
            vec![Ok(())]
        );
    }
    let joined = within("join", a.join(join_request("grp", ""))).await;
    let synced = within("sync", a.sync(sync_request("grp", &joined, true))).await;
    assert_eq!(synced.error, None);

    // B takes over in epoch 2; A has not heard yet and its log refuses.
    for p in 0..N {
        a_log.resign(p);
    }
    lead_all(&b, &b_log, &l.logs, 2).await;
    assert_eq!(
        within("late commit", a.commit_offsets(commit("g", 11))).await,
        vec![Err(GroupError::NotCoordinator)]
    );
    for p in 0..N {
        a.resign(p, Some(2));
    }
    for (g, o) in [("g", 10), ("h", 20), ("i", 30)] {
        assert_eq!(committed(&b, g), Ok(Some(o)), "group {g}");
    }
    // The group's membership came along: its member may heartbeat the new coordinator.
    let described = b.describe_group("grp").expect("describe");
    assert_eq!(described.state, GroupState::Stable);
    assert_eq!(described.members.len(), 1);
    assert_eq!(
        b.heartbeat("grp", &joined.member_id, None, joined.generation_id),
        Ok(())
    );
    assert_eq!(
        within("commit", b.commit_offsets(commit("h", 21))).await,
        vec![Ok(())]
    );

    // And back to A in epoch 3: it reloads and sees B's commit.
    for p in 0..N {
        b_log.resign(p);
        b.resign(p, Some(3));
    }
    lead_all(&a, &a_log, &l.logs, 3).await;
    assert_eq!(committed(&a, "g"), Ok(Some(10)));
    assert_eq!(committed(&a, "h"), Ok(Some(21)));
    assert_eq!(committed(&a, "i"), Ok(Some(30)));
}

/// A replay that cannot read the log fails as a whole: the partition is not served (no partial
/// state) until a newer leader epoch loads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_replay_is_not_served() {
    let l = logs();
    let group_log = Arc::new(DurableGroupLog::new(WAIT));
    let writer = GroupCoordinator::new(config(0), N, group_log.clone());
    lead_all(&writer, &group_log, &l.logs, 1).await;
    assert_eq!(
        within("commit", writer.commit_offsets(commit("g", 1))).await,
        vec![Ok(())]
    );
    let p = partition_for("g", N);
    let tp = TopicPartition::new("__consumer_offsets", p);
    let old = l.logs[p as usize].clone();

    let c = GroupCoordinator::new(config(0), N, group_log.clone());
    let hold = c.hold_loads().expect("hold");
    c.become_leader(p, old.clone(), 1);
    l.store.delete_partition(&tp).expect("delete");
    drop(hold);
    wait_status(&c, p, PartitionStatus::Failed { leader_epoch: 1 }).await;
    assert_eq!(c.check_coordinator("g"), Err(GroupError::NotCoordinator));
    c.become_leader(p, old, 1);
    assert_eq!(
        c.partition_status(p),
        Some(PartitionStatus::Failed { leader_epoch: 1 })
    );

    // A newer epoch over a readable log loads.
    let fresh = l
        .store
        .create_partition(&tp, LogConfig::default(), TopicId::from_bytes([7; 16]))
        .expect("partition");
    c.become_leader(p, fresh, 2);
    wait_status(&c, p, PartitionStatus::Loaded { leader_epoch: 2 }).await;
    assert_eq!(committed(&c, "g"), Ok(None));
}
