//! Replay: what one coordinator wrote, a fresh one over the same logs reads back, with or
//! without (or with a corrupt or foreign) sled snapshot. Leadership and commit semantics are
//! tested through the public API in `tests/leadership.rs`.

use std::time::Duration;

use super::*;
use crate::consumer_group::{HeartbeatRequest, TopicsView};
use crate::group::{JoinRequest, SyncRequest};
use crate::group_log::DurableGroupLog;
use crate::records::{self, OffsetValue, RecordKey};
use crate::snapshot::PartitionSnapshot;
use millrace_store::{LogConfig, Store, StoreConfig, TopicPartition};

const N: i32 = 3;

/// A store of `N` offsets partitions in a fresh directory (kept alive by the returned guard).
fn logs() -> (tempfile::TempDir, Arc<Store>, Vec<Arc<PartitionLog>>) {
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
                    millrace_store::TopicId::from_bytes([7; 16]),
                )
                .expect("partition")
        })
        .collect();
    (dir, store, logs)
}

fn coordinator(logs: &[Arc<PartitionLog>], snapshot_dir: Option<PathBuf>) -> Arc<GroupCoordinator> {
    coordinator_with_retention(logs, snapshot_dir, 7 * 24 * 3600 * 1000)
}

fn coordinator_with_retention(
    logs: &[Arc<PartitionLog>],
    snapshot_dir: Option<PathBuf>,
    offsets_retention_ms: i64,
) -> Arc<GroupCoordinator> {
    let config = CoordinatorConfig {
        consumer: Default::default(),
        share: Default::default(),
        group: GroupConfig::default(),
        offsets_retention_ms,
        snapshot_dir,
    };
    coordinator_over(logs, config)
}

/// A coordinator that leads every partition of `logs` in leader epoch 0 (not loaded yet).
fn coordinator_over(
    logs: &[Arc<PartitionLog>],
    config: CoordinatorConfig,
) -> Arc<GroupCoordinator> {
    let group_log = Arc::new(DurableGroupLog::new(Duration::from_secs(10)));
    for (p, log) in logs.iter().enumerate() {
        group_log.lead(p as i32, log.clone(), 0);
    }
    GroupCoordinator::new(config, logs.len() as i32, group_log)
}

/// Becomes leader of every partition in leader epoch 0 and waits (10 s at most) until each
/// is loaded.
fn load(c: &GroupCoordinator, logs: &[Arc<PartitionLog>]) {
    for (p, log) in logs.iter().enumerate() {
        c.become_leader(p as i32, log.clone(), 0);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    for p in 0..logs.len() as i32 {
        while c.partition_status(p) != Some(PartitionStatus::Loaded { leader_epoch: 0 }) {
            assert!(
                std::time::Instant::now() < deadline,
                "partition {p} not loaded: {:?}",
                c.partition_status(p)
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

fn commit(group: &str, topic: &str, partition: i32, offset: i64, metadata: &str) -> CommitRequest {
    CommitRequest {
        group_id: group.into(),
        generation_id: -1,
        member_id: String::new(),
        group_instance_id: None,
        retention_time_ms: -1,
        partitions: vec![CommitPartition {
            topic: topic.into(),
            partition,
            offset,
            leader_epoch: 5,
            metadata: Some(metadata.into()),
        }],
    }
}

fn offset_of(
    c: &GroupCoordinator,
    group: &str,
    topic: &str,
    partition: i32,
) -> Option<(i64, String)> {
    let fetched = c
        .fetch_offsets(group, Some(vec![(topic.to_string(), vec![partition])]))
        .expect("fetch");
    fetched[0].1[0]
        .1
        .as_ref()
        .map(|o| (o.offset, o.metadata.clone()))
}

async fn write_some(c: &GroupCoordinator) {
    for (g, off) in [("alpha", 10), ("beta", 20), ("gamma", 30)] {
        let r = c.commit_offsets(commit(g, "t", 0, off, "m")).await;
        assert_eq!(r, vec![Ok(())]);
    }
    // Overwrite, then delete one group.
    assert_eq!(
        c.commit_offsets(commit("alpha", "t", 0, 11, "again")).await,
        vec![Ok(())]
    );
    assert_eq!(
        c.delete_groups(vec!["gamma".into()]).await,
        vec![Ok(DeletedGroup::default())]
    );
}

fn check_replayed(c: &GroupCoordinator) {
    assert_eq!(offset_of(c, "alpha", "t", 0), Some((11, "again".into())));
    assert_eq!(offset_of(c, "beta", "t", 0), Some((20, "m".into())));
    assert_eq!(offset_of(c, "gamma", "t", 0), None);
    assert_eq!(offset_of(c, "beta", "t", 1), None);
}

#[tokio::test]
async fn replay_restores_offsets_and_tombstones() {
    let (_dir, _store, logs) = logs();
    let first = coordinator(&logs, None);
    assert_eq!(
        first.check_coordinator("alpha"),
        Err(GroupError::NotCoordinator)
    );
    load(&first, &logs);
    assert_eq!(first.check_coordinator(""), Err(GroupError::InvalidGroupId));
    write_some(&first).await;
    check_replayed(&first);

    let second = coordinator(&logs, None);
    load(&second, &logs);
    check_replayed(&second);
    let listed: Vec<String> = second
        .list_groups(&[])
        .expect("list")
        .into_iter()
        .map(|g| g.group_id)
        .collect();
    assert_eq!(listed.len(), 2, "{listed:?}");
}

/// Topics for consumer group tests: one topic "t" with 3 partitions.
struct OneTopic;

impl TopicsView for OneTopic {
    fn by_name(&self, name: &str) -> Option<crate::consumer_group::TopicInfo> {
        (name == "t").then(|| crate::consumer_group::TopicInfo {
            name: "t".into(),
            id: uuid::Uuid::from_bytes([1; 16]),
            partitions: 3,
        })
    }
    fn all(&self) -> Vec<crate::consumer_group::TopicInfo> {
        self.by_name("t").into_iter().collect()
    }
}

fn consumer_join(group: &str, member: &str) -> HeartbeatRequest {
    HeartbeatRequest {
        group_id: group.into(),
        member_id: member.into(),
        member_epoch: 0,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(vec!["t".into()]),
        owned: Some(crate::assignor::Assignment::new()),
        ..HeartbeatRequest::default()
    }
}

/// A KIP-848 group written through the log comes back in a new coordinator (replay, then the
/// snapshot) with its member, epoch and assignment; the member carries on there; commits
/// check its epoch; a non-empty consumer group refuses classic joins and deletion.
#[tokio::test]
async fn consumer_group_survives_replay_and_snapshot() {
    let (_dir, _store, logs) = logs();
    let dir = tempfile::tempdir().expect("tempdir");
    let snap = dir.path().join("snap");
    let epoch;
    {
        let first = coordinator(&logs, Some(snap.clone()));
        load(&first, &logs);
        let r = first
            .consumer_heartbeat(&consumer_join("cg", "m1"), &OneTopic)
            .await
            .expect("join");
        epoch = r.member_epoch;
        assert_eq!(
            r.assignment
                .map(|a| a.values().map(|p| p.len()).sum::<usize>()),
            Some(3)
        );
        let mut stale = commit("cg", "t", 0, 7, "m");
        stale.generation_id = epoch + 1;
        stale.member_id = "m1".into();
        assert_eq!(
            first.commit_offsets(stale).await,
            vec![Err(GroupError::StaleMemberEpoch)]
        );
        let mut ok = commit("cg", "t", 0, 7, "m");
        ok.generation_id = epoch;
        ok.member_id = "m1".into();
        assert_eq!(first.commit_offsets(ok).await, vec![Ok(())]);
        // DescribeGroups names it as Kafka does: not a classic group (the front end answers
        // "Dead" without an error below v6).
        assert_eq!(
            first.describe_group("cg").map(|d| d.state),
            Err(GroupError::GroupIdNotFoundWith(
                "Group cg is not a classic group.".into()
            ))
        );
        // Classic members are refused while the consumer group has members; so is deletion.
        let join = first.join(JoinRequest {
            group_id: "cg".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 10_000,
            member_id: String::new(),
            group_instance_id: None,
            protocol_type: "consumer".into(),
            protocols: vec![crate::group::Protocol {
                name: "range".into(),
                metadata: Bytes::new(),
            }],
            client_id: "c".into(),
            client_host: "h".into(),
            require_known_member_id: false,
        });
        assert_eq!(
            join.await.error,
            Some(GroupError::InconsistentGroupProtocol)
        );
        assert_eq!(
            first.delete_groups(vec!["cg".into()]).await,
            vec![Err(GroupError::NonEmptyGroup)]
        );
        first.shutdown();
        first.write_final_snapshot();
    }
    for with_snapshot in [false, true] {
        let next = coordinator(&logs, with_snapshot.then(|| snap.clone()));
        load(&next, &logs);
        let d = next.describe_consumer_group("cg").expect("consumer group");
        assert_eq!(d.members.len(), 1, "snapshot {with_snapshot}");
        assert_eq!(d.members[0].member.member_epoch, epoch);
        assert_eq!(offset_of(&next, "cg", "t", 0), Some((7, "m".into())));
        let beat = HeartbeatRequest {
            group_id: "cg".into(),
            member_id: "m1".into(),
            member_epoch: epoch,
            rebalance_timeout_ms: -1,
            ..HeartbeatRequest::default()
        };
        let r = next
            .consumer_heartbeat(&beat, &OneTopic)
            .await
            .expect("carries on");
        assert!(r.member_epoch >= epoch, "not fenced: {r:?}");
    }
}

fn share_join(group: &str, member: &str) -> crate::share_group::ShareHeartbeatRequest {
    crate::share_group::ShareHeartbeatRequest {
        group_id: group.into(),
        member_id: member.into(),
        member_epoch: 0,
        subscribed_topic_names: Some(vec!["t".into()]),
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        ..Default::default()
    }
}

/// A share group written through the log comes back in a new coordinator (replay, then the
/// snapshot) with its members, epochs and initialized partitions; members carry on there; the
/// group refuses consumer-group requests and is deleted only once empty.
#[tokio::test]
async fn share_group_survives_replay_and_snapshot() {
    let (_dir, _store, logs) = logs();
    let dir = tempfile::tempdir().expect("tempdir");
    let snap = dir.path().join("snap");
    let epoch;
    {
        let first = coordinator(&logs, Some(snap.clone()));
        load(&first, &logs);
        // A consumer group id is not a share group.
        first
            .consumer_heartbeat(&consumer_join("cg", "m1"), &OneTopic)
            .await
            .expect("consumer join");
        assert!(matches!(
            first.share_heartbeat(&share_join("cg", "s1"), &OneTopic).await,
            Err(GroupError::GroupIdNotFoundWith(m)) if m == "Group cg is not a share group."
        ));
        for m in ["s1", "s2"] {
            first
                .share_heartbeat(&share_join("sg", m), &OneTopic)
                .await
                .expect("share join");
        }
        let d = first.describe_share_group("sg").expect("share group");
        epoch = d.group_epoch;
        assert_eq!(
            (d.group_epoch, d.members.len(), d.assignor),
            (2, 2, "simple")
        );
        // A share group id is not a consumer group.
        let r = first.commit_offsets(commit("sg", "t", 0, 1, "")).await;
        assert!(
            matches!(&r[..], [Err(GroupError::GroupIdNotFoundWith(m))] if m == "Group sg is not a consumer group.")
        );
        assert!(matches!(
            first.fetch_offsets("sg", None),
            Err(GroupError::GroupIdNotFoundWith(_))
        ));
        assert!(matches!(
            first
                .consumer_heartbeat(&consumer_join("sg", "c1"), &OneTopic)
                .await,
            Err(GroupError::GroupIdNotFoundWith(_))
        ));
        assert_eq!(
            first.delete_groups(vec!["sg".into()]).await,
            vec![Err(GroupError::NonEmptyGroup)]
        );
        let join = first.join(JoinRequest {
            group_id: "sg".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 10_000,
            member_id: String::new(),
            group_instance_id: None,
            protocol_type: "consumer".into(),
            protocols: vec![crate::group::Protocol {
                name: "range".into(),
                metadata: Bytes::new(),
            }],
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            require_known_member_id: false,
        });
        assert!(matches!(
            join.await.error,
            Some(GroupError::GroupIdNotFoundWith(m)) if m == "Group sg is not a classic group."
        ));
        // The other classic requests name the share group the same way (Kafka's 69, not 25).
        let not_classic = |e: &GroupError| matches!(e, GroupError::GroupIdNotFoundWith(m) if m == "Group sg is not a classic group.");
        let sync = first
            .sync(SyncRequest {
                group_id: "sg".into(),
                generation_id: 1,
                member_id: "m".into(),
                group_instance_id: None,
                protocol_type: None,
                protocol_name: None,
                assignments: Vec::new(),
            })
            .await;
        assert!(sync.error.as_ref().is_some_and(not_classic), "{sync:?}");
        let beat = first.heartbeat("sg", "m", None, 1);
        assert!(beat.as_ref().is_err_and(not_classic), "{beat:?}");
        let left = first.leave("sg", &[("m".into(), None)]);
        assert!(left.as_ref().is_err_and(not_classic), "{left:?}");
        assert!(matches!(
            first.describe_group("sg"),
            Err(GroupError::GroupIdNotFoundWith(_))
        ));
        let listed = first.list_groups(&[]).expect("list");
        assert!(listed.iter().any(|g| g.group_id == "sg"
            && g.group_type == "Share"
            && g.protocol_type == "share"
            && g.state == "Stable"));
        first.shutdown();
        first.write_final_snapshot();
    }
    for with_snapshot in [false, true] {
        let next = coordinator(&logs, with_snapshot.then(|| snap.clone()));
        load(&next, &logs);
        let d = next.describe_share_group("sg").expect("share group");
        assert_eq!(d.group_epoch, epoch, "snapshot {with_snapshot}");
        assert_eq!(d.members.len(), 2);
        let partitions = next.share_group_partitions("sg").expect("partitions");
        assert_eq!(partitions[&uuid::Uuid::from_bytes([1; 16])].1.len(), 3);
        let s2 = d.members.iter().find(|m| m.member_id == "s2").expect("s2");
        let beat = crate::share_group::ShareHeartbeatRequest {
            group_id: "sg".into(),
            member_id: "s2".into(),
            member_epoch: s2.member_epoch,
            ..Default::default()
        };
        let r = next
            .share_heartbeat(&beat, &OneTopic)
            .await
            .expect("carries on");
        assert_eq!(r.member_epoch, epoch);
    }
    // Both leave; the empty group is deleted, naming its share partitions.
    let last = coordinator(&logs, None);
    load(&last, &logs);
    for m in ["s1", "s2"] {
        let leave = crate::share_group::ShareHeartbeatRequest {
            group_id: "sg".into(),
            member_id: m.into(),
            member_epoch: -1,
            ..Default::default()
        };
        let r = last
            .share_heartbeat(&leave, &OneTopic)
            .await
            .expect("leave");
        assert_eq!(r.member_epoch, -1);
    }
    let deleted = last.delete_groups(vec!["sg".into()]).await;
    assert!(matches!(&deleted[..], [Ok(d)] if d.share_partitions.len() == 1));
    assert!(matches!(
        last.describe_share_group("sg"),
        Err(GroupError::GroupIdNotFoundWith(_))
    ));
    let again = coordinator(&logs, None);
    load(&again, &logs);
    assert!(
        again.describe_share_group("sg").is_err(),
        "deletion replayed"
    );
}

#[tokio::test]
async fn snapshot_shortens_replay_and_a_bad_one_costs_nothing() {
    let (_dir, _store, logs) = logs();
    let dir = tempfile::tempdir().expect("tempdir");
    let snap = dir.path().join("snap");
    {
        let first = coordinator(&logs, Some(snap.clone()));
        load(&first, &logs);
        write_some(&first).await;
        first.shutdown();
        first.write_final_snapshot();
    }
    {
        let second = coordinator(&logs, Some(snap.clone()));
        load(&second, &logs);
        check_replayed(&second);
        // More commits after the snapshot: replayed from the log's tail.
        second.closed.store(false, Ordering::Release);
        assert_eq!(
            second
                .commit_offsets(commit("beta", "t", 0, 21, "tail"))
                .await,
            vec![Ok(())]
        );
    }
    {
        let third = coordinator(&logs, Some(snap.clone()));
        load(&third, &logs);
        assert_eq!(offset_of(&third, "beta", "t", 0), Some((21, "tail".into())));
        // A snapshot claiming more than the log holds is ignored.
        if let Some(store) = third.snapshot_store() {
            for p in 0..N {
                store.write(
                    p,
                    &PartitionSnapshot {
                        next_offset: 1_000_000,
                        last_batch: None,
                        entries: vec![],
                    },
                );
            }
            store.flush();
        }
    }
    let fourth = coordinator(&logs, Some(snap.clone()));
    load(&fourth, &logs);
    assert_eq!(
        offset_of(&fourth, "beta", "t", 0),
        Some((21, "tail".into()))
    );
    assert_eq!(
        offset_of(&fourth, "alpha", "t", 0),
        Some((11, "again".into()))
    );
}

/// A broker's snapshot reflects its log up to offset X; after it lost leadership, its log was
/// truncated and refilled by another leader up to X again, with other records. The offset
/// still lies within the log, but the batch below X is another one (its mark differs), so
/// the snapshot is ignored and the replay reads what the log now says.
#[tokio::test]
async fn snapshot_of_a_log_rewritten_by_another_leader_is_ignored() {
    let (_dir, _store, logs) = logs();
    let dir = tempfile::tempdir().expect("tempdir");
    let snap = dir.path().join("snap");
    let p = partition_for("alpha", N) as usize;
    {
        let first = coordinator(&logs, Some(snap.clone()));
        load(&first, &logs);
        for off in [1, 2] {
            assert_eq!(
                first.commit_offsets(commit("alpha", "t", 0, off, "")).await,
                vec![Ok(())]
            );
        }
        first.shutdown();
        first.write_final_snapshot();
    }
    assert_eq!(logs[p].log_end_offset(), 2);
    // The snapshot matches the log and is used: an entry only it holds (a "ghost" group,
    // added here behind the CRC's back) is served.
    {
        let reader = coordinator(&logs, Some(snap.clone()));
        let store = reader.snapshot_store().expect("snapshot store");
        let mut s = store.read(p as i32).expect("snapshot written");
        assert!(s.last_batch.is_some(), "{s:?}");
        s.entries.push((
            records::encode_key(&RecordKey::Offset {
                group: "alpha".into(),
                topic: "ghost".into(),
                partition: 0,
            }),
            records::encode_offset_value(&OffsetValue {
                offset: 99,
                leader_epoch: -1,
                metadata: String::new(),
                commit_timestamp_ms: now_ms(),
                expire_timestamp_ms: -1,
            }),
        ));
        store.write(p as i32, &s);
        store.flush();
        load(&reader, &logs);
        assert_eq!(
            offset_of(&reader, "alpha", "ghost", 0),
            Some((99, String::new()))
        );
        assert_eq!(
            offset_of(&reader, "alpha", "t", 0),
            Some((2, String::new()))
        );
    }
    // As a follower: the batch at offset 1 diverged from the new leader's log and goes; the
    // new leader's commit of the same group takes its place at offset 1.
    logs[p].truncate_to(1).expect("truncate");
    {
        let other = coordinator(&logs, None);
        load(&other, &logs);
        assert_eq!(
            other.commit_offsets(commit("alpha", "t", 0, 7, "x")).await,
            vec![Ok(())]
        );
    }
    assert_eq!(logs[p].log_end_offset(), 2);
    let again = coordinator(&logs, Some(snap.clone()));
    load(&again, &logs);
    assert_eq!(offset_of(&again, "alpha", "t", 0), Some((7, "x".into())));
    assert_eq!(offset_of(&again, "alpha", "ghost", 0), None);
}

#[tokio::test]
async fn expired_offsets_and_empty_groups_leave_tombstones() {
    let (_dir, _store, logs) = logs();
    let c = coordinator_with_retention(&logs, None, 0);
    load(&c, &logs);
    assert_eq!(
        c.commit_offsets(commit("old", "t", 0, 5, "")).await,
        vec![Ok(())]
    );
    assert_eq!(offset_of(&c, "old", "t", 0), Some((5, String::new())));
    c.tick(true);
    assert_eq!(offset_of(&c, "old", "t", 0), None);
    assert!(c.list_groups(&[]).expect("list").is_empty());
    // The tombstones replay too.
    let again = coordinator(&logs, None);
    load(&again, &logs);
    assert_eq!(offset_of(&again, "old", "t", 0), None);
    assert!(again.list_groups(&[]).expect("list").is_empty());
}

/// A store whose fdatasync fails for every segment: JoinGroup succeeds (it writes nothing),
/// the SyncGroup that would make the group Stable writes its metadata record, which never
/// becomes durable, so it is answered with a storage error (COORDINATOR_NOT_AVAILABLE on the
/// wire), never with an assignment, and the group goes back to rebalancing.
#[tokio::test]
async fn sync_group_is_refused_when_the_group_record_is_not_durable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open_with_storage(
        StoreConfig {
            data_dir: dir.path().to_path_buf(),
            extra_log_dirs: Vec::new(),
            flush_policy: millrace_store::FlushPolicy::Batch,
            flush_interval: Duration::from_millis(2),
            max_open_files: 16,
            high_watermark_follows_durable: true,
        },
        Arc::new(millrace_store::storage::FaultStorage::failing_sync_of(
            ".log",
        )),
    )
    .expect("store");
    let logs: Vec<_> = (0..N)
        .map(|p| {
            store
                .create_partition(
                    &TopicPartition::new("__consumer_offsets", p),
                    LogConfig::default(),
                    millrace_store::TopicId::from_bytes([7; 16]),
                )
                .expect("partition")
        })
        .collect();
    let config = CoordinatorConfig {
        consumer: Default::default(),
        share: Default::default(),
        group: GroupConfig {
            initial_rebalance_delay_ms: 0,
            ..GroupConfig::default()
        },
        offsets_retention_ms: 1000,
        snapshot_dir: None,
    };
    let c = coordinator_over(&logs, config);
    load(&c, &logs);
    let join = |member_id: &str| JoinRequest {
        group_id: "g".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        member_id: member_id.into(),
        group_instance_id: None,
        protocol_type: "consumer".into(),
        protocols: vec![crate::group::Protocol {
            name: "range".into(),
            metadata: Bytes::from_static(b"m"),
        }],
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        require_known_member_id: false,
    };
    let ten_s = Duration::from_secs(10);
    let joined = tokio::time::timeout(ten_s, c.join(join("")))
        .await
        .expect("join answered");
    assert_eq!(joined.error, None);
    let synced = tokio::time::timeout(
        ten_s,
        c.sync(SyncRequest {
            group_id: "g".into(),
            generation_id: joined.generation_id,
            member_id: joined.member_id.clone(),
            group_instance_id: None,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignments: vec![(joined.member_id.clone(), Bytes::from_static(b"A"))],
        }),
    )
    .await
    .expect("sync answered");
    assert!(
        matches!(synced.error, Some(GroupError::Storage(_))),
        "{synced:?}"
    );
    assert!(synced.assignment.is_empty());
    assert!(
        store.offline_reason().is_some(),
        "the failed fsync took the dir offline"
    );
    // The group left Stable: its members must rejoin.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while c.describe_group("g").expect("describe").state != GroupState::PreparingRebalance {
        assert!(
            std::time::Instant::now() < deadline,
            "group never went back to rebalancing"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        c.heartbeat("g", &joined.member_id, None, joined.generation_id),
        Err(GroupError::RebalanceInProgress)
    );
}

#[test]
fn partition_for_matches_java_string_hash_code() {
    // "" → 0; "a" → 97; "group" → 98629247; Java's hashCode of "polygenelubricants" is
    // Integer.MIN_VALUE, which Kafka's Utils.abs maps to 0.
    assert_eq!(partition_for("a", 50), 97 % 50);
    assert_eq!(partition_for("group", 50), 98_629_247 % 50);
    assert_eq!(partition_for("polygenelubricants", 50), 0);
    for g in ["x", "consumer-group-1", "ünïcödé"] {
        assert!((0..50).contains(&partition_for(g, 50)));
    }
}

/// A group's own heartbeat interval (its dynamic config, resolved by the front end) is what its
/// members are told; a group without one gets the broker's.
#[tokio::test]
async fn a_groups_own_timeouts_override_the_brokers() {
    let (_dir, _store, logs) = logs();
    let c = coordinator(&logs, None);
    load(&c, &logs);
    let own = crate::consumer_group::GroupTimeouts {
        session_timeout_ms: Some(50_000),
        heartbeat_interval_ms: Some(7_000),
    };
    let share = c
        .share_heartbeat(
            &crate::share_group::ShareHeartbeatRequest {
                timeouts: own,
                ..share_join("sg", "s1")
            },
            &OneTopic,
        )
        .await
        .expect("share join");
    assert_eq!(share.heartbeat_interval_ms, 7_000);
    let consumer = c
        .consumer_heartbeat(
            &HeartbeatRequest {
                timeouts: own,
                ..consumer_join("cg", "m1")
            },
            &OneTopic,
        )
        .await
        .expect("consumer join");
    assert_eq!(consumer.heartbeat_interval_ms, 7_000);
    let plain = c
        .share_heartbeat(&share_join("other", "s1"), &OneTopic)
        .await
        .expect("share join");
    assert_eq!(plain.heartbeat_interval_ms, 5_000);
}

/// The share-group admin side: AlterShareGroupOffsets creates a missing group and records its
/// partitions, DeleteShareGroupOffsets forgets a topic, and both survive a replay; a group with
/// members refuses both, and DeleteGroups' first step names the partitions to delete.
#[tokio::test]
async fn share_offsets_changes_survive_replay() {
    let (_dir, _store, logs) = logs();
    let first = coordinator(&logs, None);
    load(&first, &logs);
    let t1 = uuid::Uuid::from_bytes([1; 16]);
    let t2 = uuid::Uuid::from_bytes([2; 16]);
    let parts = |entries: &[(uuid::Uuid, &str, &[i32])]| -> InitializedPartitions {
        entries
            .iter()
            .map(|(id, name, ps)| (*id, (name.to_string(), ps.iter().copied().collect())))
            .collect()
    };

    assert_eq!(
        first.share_offsets_deletable("admin"),
        Err(GroupError::GroupIdNotFoundWith(
            "Group admin not found.".into()
        ))
    );
    assert_eq!(
        first.share_offsets_alterable("").await,
        Err(GroupError::InvalidGroupId)
    );
    assert_eq!(first.share_offsets_alterable("admin").await, Ok(0));
    first
        .share_partitions_initialized("admin", parts(&[(t1, "one", &[0, 1]), (t2, "two", &[0])]))
        .await
        .expect("recorded");
    first
        .share_topics_deleted("admin", vec![t2])
        .await
        .expect("forgotten");
    let expected = parts(&[(t1, "one", &[0, 1])]);
    assert_eq!(first.share_offsets_deletable("admin"), Ok(expected.clone()));

    // A classic group's id is not a share group's.
    assert_eq!(
        first
            .commit_offsets(commit("classic", "t", 0, 1, "m"))
            .await,
        vec![Ok(())]
    );
    assert_eq!(
        first.share_offsets_alterable("classic").await,
        Err(GroupError::GroupIdNotFoundWith(
            "Group classic is not a share group.".into()
        ))
    );

    let second = coordinator(&logs, None);
    load(&second, &logs);
    assert_eq!(second.share_group_partitions("admin"), Ok(expected.clone()));
    assert_eq!(
        second.share_groups_to_delete(&["admin".into(), "classic".into(), "none".into()]),
        vec![
            Ok(ShareGroupDeletion::Delete(expected)),
            Ok(ShareGroupDeletion::NotShare),
            Ok(ShareGroupDeletion::NotShare),
        ]
    );

    // With a member, the group's offsets can be neither altered nor deleted.
    second
        .share_heartbeat(&share_join("admin", "m1"), &OneTopic)
        .await
        .expect("joined");
    assert_eq!(
        second.share_offsets_alterable("admin").await,
        Err(GroupError::NonEmptyGroup)
    );
    assert_eq!(
        second.share_offsets_deletable("admin"),
        Err(GroupError::NonEmptyGroup)
    );
    assert_eq!(
        second.share_groups_to_delete(&["admin".into()]),
        vec![Ok(ShareGroupDeletion::NotEmpty)]
    );
}

/// A `require_stable` OffsetFetch answers a partition with a pending transactional offset as
/// unstable (named or among every offset of the group) until its producer's marker; a plain
/// fetch answers the last committed offset meanwhile. COMMIT applies the offset, ABORT drops it.
#[tokio::test]
async fn pending_transactional_offset_is_unstable_until_its_marker() {
    let (_dir, _store, logs) = logs();
    let c = coordinator(&logs, None);
    load(&c, &logs);
    let offsets_partition = partition_for("g", N);
    let r = c.commit_offsets(commit("g", "t", 0, 5, "")).await;
    assert!(matches!(&r[..], [Ok(())]), "{r:?}");
    let fetch = |require_stable: bool, topics: FetchTopics| {
        c.fetch_offsets_as("g", None, -1, require_stable, topics)
            .expect("fetch")
    };
    let named = || Some(vec![("t".to_string(), vec![0])]);
    let stable_at = |fetched: &[(String, Vec<(i32, FetchedOffset)>)]| match &fetched[0].1[..] {
        [(0, FetchedOffset::Stable(Some(o)))] => Some(o.offset),
        [(0, FetchedOffset::Unstable)] => None,
        other => panic!("unexpected answer {other:?}"),
    };
    let mut committed = 5;
    assert_eq!(stable_at(&fetch(true, named())), Some(committed));

    for (producer_id, offset, commit_marker, after) in [(77, 9, true, 9), (78, 12, false, 9)] {
        let r = c
            .commit_txn_offsets(commit("g", "t", 0, offset, ""), producer_id, 0)
            .await;
        assert!(matches!(&r[..], [Ok(())]), "{r:?}");
        assert_eq!(
            stable_at(&fetch(true, named())),
            None,
            "producer {producer_id}"
        );
        assert_eq!(
            stable_at(&fetch(true, None)),
            None,
            "producer {producer_id}"
        );
        assert_eq!(offset_of(&c, "g", "t", 0).map(|o| o.0), Some(committed));
        c.complete_txn(offsets_partition, producer_id, commit_marker);
        committed = after;
        assert_eq!(stable_at(&fetch(true, named())), Some(committed));
        assert_eq!(stable_at(&fetch(false, None)), Some(committed));
    }
}
