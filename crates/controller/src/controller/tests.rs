//! Scenario tests of the controller's decisions, committed to an image as the quorum would.

use std::collections::BTreeMap;

use millrace_cluster::config::BrokerConfig;
use millrace_cluster::records::MetadataBatch;

use super::*;
use crate::messages::ConfigChangeSpec;

const SESSION_MS: i64 = 9_000;

struct Harness {
    image: MetadataImage,
    controller: Controller,
    offset: u64,
    now: i64,
    epochs: BTreeMap<i32, i64>,
}

impl Harness {
    fn new(settings: &[(&str, &str)]) -> Self {
        let layer: BTreeMap<String, String> = settings
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let broker = BrokerConfig::from_layers([&layer]).expect("config");
        let mut next = 0u128;
        let controller = Controller::with_id_generator(
            ControllerConfig::new(broker),
            Box::new(move || {
                next += 1;
                Uuid::from_u128(next)
            }),
        );
        Self {
            image: MetadataImage::default(),
            controller,
            offset: 0,
            now: 1_000_000,
            epochs: BTreeMap::new(),
        }
    }

    /// Commits the decision's records as one entry; returns the answer.
    fn commit(&mut self, decision: Decision) -> ControllerResponse {
        let mut response = decision.response;
        if !decision.records.is_empty() {
            self.offset += 1;
            self.image
                .apply_batch(self.offset, &MetadataBatch::new(decision.records));
            if let ControllerResponse::Registered { broker_epoch } = &mut response {
                if *broker_epoch < 0 {
                    *broker_epoch = self.offset as i64;
                }
            }
        }
        response
    }

    fn request(&mut self, req: ControllerRequest) -> ControllerResponse {
        let decision = self.controller.handle(&self.image, req, self.now);
        self.commit(decision)
    }

    fn tick(&mut self) {
        let records = self.controller.tick(&self.image, self.now);
        self.commit(Decision {
            records,
            response: ControllerResponse::Configs { result: Ok(()) },
        });
    }

    fn register(&mut self, node_id: i32, incarnation: u128, clean: bool) -> ControllerResponse {
        let response = self.request(ControllerRequest::RegisterBroker {
            node_id,
            incarnation_id: Uuid::from_u128(incarnation),
            host: "127.0.0.1".into(),
            port: 9000 + node_id as u16,
            rack: None,
            listeners: Vec::new(),
            clean_shutdown: clean,
        });
        if let ControllerResponse::Registered { broker_epoch } = response {
            self.epochs.insert(node_id, broker_epoch);
        }
        response
    }

    fn heartbeat(&mut self, node_id: i32, want_shutdown: bool) -> ControllerResponse {
        let epoch = self.epochs[&node_id];
        self.request(ControllerRequest::BrokerHeartbeat {
            node_id,
            broker_epoch: epoch,
            metadata_offset: self.offset,
            want_fence: false,
            want_shutdown,
            offline_replicas: Vec::new(),
        })
    }

    /// Registers and unfences brokers.
    fn start(&mut self, brokers: &[i32]) {
        for &b in brokers {
            self.register(b, b as u128 * 1000, true);
            self.heartbeat(b, false);
        }
    }

    fn create(&mut self, name: &str, partitions: i32, rf: i16, configs: &[(&str, &str)]) {
        let response = self.request(ControllerRequest::CreateTopics {
            topics: vec![TopicSpec {
                name: name.into(),
                partitions: Some(partitions),
                replication_factor: Some(rf),
                assignments: BTreeMap::new(),
                configs: configs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            }],
            validate_only: false,
        });
        let ControllerResponse::CreateTopics { results } = response else {
            panic!("unexpected {response:?}");
        };
        assert!(results[0].1.is_ok(), "{results:?}");
    }

    fn partition(&self, topic: &str, p: i32) -> PartitionRegistration {
        self.image.partition(topic, p).cloned().expect("partition")
    }

    /// Every partition's leader proposes to add `broker` back to its ISR (it caught up).
    fn rejoin_isr(&mut self, broker: i32) {
        let topics: Vec<(String, Uuid, i32)> = self
            .image
            .topics
            .values()
            .map(|t| (t.name.clone(), t.topic_id, t.partition_count()))
            .collect();
        for (name, topic_id, count) in topics {
            for index in 0..count {
                let p = self.partition(&name, index);
                if !p.replicas.contains(&broker) || p.isr.contains(&broker) || p.leader < 0 {
                    continue;
                }
                let r = self.request(ControllerRequest::AlterPartition {
                    node_id: p.leader,
                    broker_epoch: self.epochs[&p.leader],
                    topic_id,
                    partition: index,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: p.partition_epoch,
                    new_isr: p
                        .isr
                        .iter()
                        .map(|&b| (b, -1))
                        .chain([(broker, self.epochs[&broker])])
                        .collect(),
                });
                assert!(
                    matches!(r, ControllerResponse::AlterPartition { result: Ok(_) }),
                    "{r:?}"
                );
            }
        }
    }

    /// A broker process restarts cleanly (new incarnation) and is unfenced.
    fn restart(&mut self, broker: i32, incarnation: u128) {
        self.epochs.remove(&broker);
        self.register(broker, incarnation, true);
        self.heartbeat(broker, false);
    }

    fn elect(
        &mut self,
        election: ElectionType,
        partitions: Option<Vec<(&str, i32)>>,
    ) -> Vec<((String, i32), Result<(), ControllerError>)> {
        let r = self.request(ControllerRequest::ElectLeaders {
            election,
            partitions: partitions
                .map(|l| l.into_iter().map(|(t, p)| (t.to_string(), p)).collect()),
        });
        let ControllerResponse::ElectLeaders { results } = r else {
            panic!("{r:?}")
        };
        results
    }

    fn reassign(
        &mut self,
        topic: &str,
        targets: &[(i32, Option<&[i32]>)],
    ) -> Vec<(i32, Result<(), ControllerError>)> {
        self.reassign_allowing(topic, targets, true)
    }

    fn reassign_allowing(
        &mut self,
        topic: &str,
        targets: &[(i32, Option<&[i32]>)],
        allow_replication_factor_change: bool,
    ) -> Vec<(i32, Result<(), ControllerError>)> {
        let r = self.request(ControllerRequest::AlterPartitionReassignments {
            topics: vec![crate::messages::ReassignTopicSpec {
                name: topic.into(),
                partitions: targets
                    .iter()
                    .map(|(p, t)| (*p, t.map(<[i32]>::to_vec)))
                    .collect(),
            }],
            allow_replication_factor_change,
        });
        let ControllerResponse::AlterPartitionReassignments { mut results } = r else {
            panic!("{r:?}")
        };
        assert_eq!(results.len(), 1);
        let (name, partitions) = results.remove(0);
        assert_eq!(name, topic);
        partitions
    }

    fn ongoing(&mut self) -> Vec<(String, Vec<crate::messages::OngoingReassignment>)> {
        let r = self.request(ControllerRequest::ListPartitionReassignments { topics: None });
        let ControllerResponse::ListPartitionReassignments { topics } = r else {
            panic!("{r:?}")
        };
        topics
    }

    /// Creates `name` with the given assignment (partition i gets `assignment[i]`).
    fn create_assigned(&mut self, name: &str, assignment: &[&[i32]], configs: &[(&str, &str)]) {
        let response = self.request(ControllerRequest::CreateTopics {
            topics: vec![TopicSpec {
                name: name.into(),
                assignments: assignment
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (i as i32, r.to_vec()))
                    .collect(),
                configs: configs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            }],
            validate_only: false,
        });
        assert!(
            matches!(&response, ControllerResponse::CreateTopics { results } if results[0].1.is_ok()),
            "{response:?}"
        );
    }

    /// Every broker except `silent` heartbeats, over `ms` of time, in 2 s steps.
    fn run(&mut self, ms: i64, silent: &[i32]) {
        let mut left = ms;
        while left > 0 {
            let step = left.min(2_000);
            self.now += step;
            left -= step;
            let live: Vec<i32> = self
                .image
                .brokers
                .keys()
                .copied()
                .filter(|b| !silent.contains(b))
                .collect();
            for b in live {
                if self.epochs.contains_key(&b) {
                    self.heartbeat(b, false);
                }
            }
            self.tick();
            self.check_invariants();
        }
    }

    /// What must hold after every step.
    fn check_invariants(&self) {
        for topic in self.image.topics.values() {
            for p in &topic.partitions {
                if p.leader != NO_LEADER {
                    assert!(self.image.is_active(p.leader), "inactive leader {p:?}");
                    assert!(p.isr.contains(&p.leader), "leader outside the ISR {p:?}");
                }
                for b in &p.isr {
                    assert!(
                        !self.image.broker(*b).is_some_and(|r| r.fenced),
                        "fenced ISR member {p:?}"
                    );
                }
                for b in &p.elr {
                    assert!(!p.isr.contains(b), "ISR and ELR overlap {p:?}");
                }
                for b in p
                    .isr
                    .iter()
                    .chain(&p.adding_replicas)
                    .chain(&p.removing_replicas)
                {
                    assert!(p.replicas.contains(b), "{b} is not a replica {p:?}");
                }
                for b in &p.adding_replicas {
                    assert!(
                        !p.removing_replicas.contains(b),
                        "adding and removing {p:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn brokers_register_fenced_and_are_unfenced_once_caught_up() {
    let mut h = Harness::new(&[]);
    let r = h.register(1, 10, true);
    assert_eq!(r, ControllerResponse::Registered { broker_epoch: 1 });
    assert!(h.image.broker(1).expect("b").fenced);
    // Not caught up yet: stays fenced.
    let r = h.request(ControllerRequest::BrokerHeartbeat {
        node_id: 1,
        broker_epoch: 1,
        metadata_offset: 0,
        want_fence: false,
        want_shutdown: false,
        offline_replicas: Vec::new(),
    });
    assert!(matches!(
        r,
        ControllerResponse::Heartbeat {
            is_caught_up: false,
            is_fenced: true,
            ..
        }
    ));
    let r = h.heartbeat(1, false);
    assert!(matches!(
        r,
        ControllerResponse::Heartbeat {
            is_caught_up: true,
            is_fenced: false,
            ..
        }
    ));
    assert!(!h.image.broker(1).expect("b").fenced);
    // A retried registration of the same incarnation keeps its epoch and writes nothing.
    let before = h.offset;
    assert_eq!(
        h.register(1, 10, true),
        ControllerResponse::Registered { broker_epoch: 1 }
    );
    assert_eq!(h.offset, before);
}

#[test]
fn a_heartbeat_with_an_old_broker_epoch_is_stale() {
    let mut h = Harness::new(&[]);
    h.start(&[1]);
    let r = h.request(ControllerRequest::BrokerHeartbeat {
        node_id: 1,
        broker_epoch: 99,
        metadata_offset: h.offset,
        want_fence: false,
        want_shutdown: false,
        offline_replicas: Vec::new(),
    });
    assert_eq!(
        r,
        ControllerResponse::Error {
            error: ControllerError::StaleBrokerEpoch
        }
    );
}

#[test]
fn six_partitions_rf3_have_leaders_on_every_broker() {
    let mut h = Harness::new(&[]);
    h.start(&[1, 2, 3]);
    h.create("t", 6, 3, &[]);
    let leaders: std::collections::BTreeSet<i32> =
        (0..6).map(|p| h.partition("t", p).leader).collect();
    assert_eq!(leaders.len(), 3);
    for p in 0..6 {
        assert_eq!(h.partition("t", p).isr.len(), 3);
    }
}

#[test]
fn rf_above_the_live_brokers_is_invalid_replication_factor() {
    let mut h = Harness::new(&[]);
    h.start(&[1, 2]);
    let r = h.request(ControllerRequest::CreateTopics {
        topics: vec![TopicSpec {
            name: "t".into(),
            partitions: Some(1),
            replication_factor: Some(3),
            ..Default::default()
        }],
        validate_only: false,
    });
    let ControllerResponse::CreateTopics { results } = r else {
        panic!("{r:?}")
    };
    assert!(matches!(
        results[0].1,
        Err(ControllerError::InvalidReplicationFactor(_))
    ));
    assert!(h.image.topic("t").is_none());
}

#[test]
fn an_expired_session_fences_the_broker_and_moves_its_leaderships() {
    let mut h = Harness::new(&[("min.insync.replicas", "2")]);
    h.start(&[1, 2, 3]);
    h.create("t", 6, 3, &[]);
    let led_by_1: Vec<i32> = (0..6)
        .filter(|&p| h.partition("t", p).leader == 1)
        .collect();
    assert!(!led_by_1.is_empty());
    let epochs: Vec<i32> = led_by_1
        .iter()
        .map(|&p| h.partition("t", p).leader_epoch)
        .collect();
    h.run(SESSION_MS - 2_000, &[1]);
    assert!(
        !h.image.broker(1).expect("b").fenced,
        "fenced before the session timeout"
    );
    h.run(4_000, &[1]);
    assert!(h.image.broker(1).expect("b").fenced);
    for (i, &p) in led_by_1.iter().enumerate() {
        let reg = h.partition("t", p);
        assert!(reg.leader == 2 || reg.leader == 3, "{reg:?}");
        assert!(!reg.isr.contains(&1));
        assert!(reg.leader_epoch > epochs[i]);
    }
}

#[test]
fn a_new_incarnation_is_refused_while_the_old_session_lives() {
    let mut h = Harness::new(&[]);
    h.start(&[1]);
    let r = h.register(1, 77, true);
    assert!(matches!(
        r,
        ControllerResponse::Error {
            error: ControllerError::DuplicateBrokerRegistration(_)
        }
    ));
    h.now += SESSION_MS + 1;
    let r = h.register(1, 77, true);
    assert!(matches!(r, ControllerResponse::Registered { broker_epoch } if broker_epoch > 1));
}

#[test]
fn after_activation_a_new_incarnation_registers_at_once_and_a_silent_broker_is_fenced() {
    let mut h = Harness::new(&[]);
    h.start(&[1, 2]);
    // This controller restarts (a single node after kill -9, or a failover): the sessions it
    // grants on activation hold no broker id against a new incarnation...
    h.controller.activate(&h.image, h.now);
    let r = h.register(1, 77, false);
    assert!(
        matches!(r, ControllerResponse::Registered { broker_epoch } if broker_epoch > 2),
        "{r:?}"
    );
    // ...and once heard from (and unfenced), the new incarnation's session does.
    h.heartbeat(1, false);
    assert!(!h.image.broker(1).expect("broker 1").fenced);
    let r = h.register(1, 78, false);
    assert!(matches!(
        r,
        ControllerResponse::Error {
            error: ControllerError::DuplicateBrokerRegistration(_)
        }
    ));
    // Broker 2 never reaches the new controller: fenced a session timeout after activation.
    assert!(!h.image.broker(2).expect("broker 2").fenced);
    h.run(SESSION_MS + 1, &[2]);
    assert!(h.image.broker(2).expect("broker 2").fenced);
}

#[test]
fn a_stall_of_the_controller_fences_no_broker_but_silence_after_it_does() {
    let mut h = Harness::new(&[]);
    h.start(&[1, 2, 3]);
    h.create("t", 3, 3, &[]);
    h.run(2_000, &[]);
    // The controller stops for longer than a session (SIGSTOP, a stalled machine): heartbeats
    // sent meanwhile were never heard, so its first tick after the stall fences nobody.
    h.now += SESSION_MS * 2;
    h.tick();
    for b in [1, 2, 3] {
        assert!(
            !h.image.broker(b).expect("broker").fenced,
            "broker {b} fenced by a stall"
        );
    }
    // What happens after the stall counts: broker 3 stays silent and loses its session one
    // session timeout later (less the time before the stall), the others keep theirs.
    h.run(SESSION_MS + 1, &[3]);
    assert!(h.image.broker(3).expect("broker 3").fenced);
    assert!(!h.image.broker(1).expect("broker 1").fenced);
    assert!(!h.image.broker(2).expect("broker 2").fenced);
}

#[test]
fn controlled_shutdown_moves_leaders_then_lets_the_broker_go() {
    let mut h = Harness::new(&[]);
    h.start(&[1, 2, 3]);
    h.create("t", 6, 3, &[]);
    let r = h.heartbeat(2, true);
    assert!(matches!(
        r,
        ControllerResponse::Heartbeat {
            should_shut_down: false,
            ..
        }
    ));
    for p in 0..6 {
        let reg = h.partition("t", p);
        assert_ne!(reg.leader, 2);
        assert!(!reg.isr.contains(&2));
    }
    let r = h.heartbeat(2, true);
    assert!(matches!(
        r,
        ControllerResponse::Heartbeat {
            should_shut_down: true,
            is_fenced: true,
            ..
        }
    ));
    assert!(h.image.broker(2).expect("b").fenced);
    h.check_invariants();
}

#[test]
fn alter_partition_checks_epochs_and_eligibility() {
    let mut h = Harness::new(&[]);
    h.start(&[1, 2, 3]);
    h.create("t", 1, 3, &[]);
    let p = h.partition("t", 0);
    let topic_id = h.image.topic("t").expect("t").topic_id;
    let leader = p.leader;
    let alter = |h: &Harness, leader_epoch, partition_epoch, isr: Vec<(i32, i64)>| {
        ControllerRequest::AlterPartition {
            node_id: leader,
            broker_epoch: h.epochs[&leader],
            topic_id,
            partition: 0,
            leader_epoch,
            partition_epoch,
            new_isr: isr,
        }
    };
    // Shrink to the leader alone.
    let r = h.request(alter(
        &h,
        p.leader_epoch,
        p.partition_epoch,
        vec![(leader, -1)],
    ));
    let ControllerResponse::AlterPartition { result: Ok(next) } = r else {
        panic!("{r:?}")
    };
    assert_eq!(next.isr, vec![leader]);
    assert_eq!(next, h.partition("t", 0));
    // A stale partition epoch is refused.
    let r = h.request(alter(
        &h,
        p.leader_epoch,
        p.partition_epoch,
        vec![(leader, -1)],
    ));
    assert_eq!(
        r,
        ControllerResponse::AlterPartition {
            result: Err(ControllerError::InvalidUpdateVersion)
        }
    );
    // Expanding with a wrong broker epoch is INELIGIBLE_REPLICA (KIP-903).
    let other = *p.replicas.iter().find(|&&b| b != leader).expect("follower");
    let r = h.request(alter(
        &h,
        next.leader_epoch,
        next.partition_epoch,
        vec![(leader, -1), (other, 12345)],
    ));
    assert!(matches!(
        r,
        ControllerResponse::AlterPartition {
            result: Err(ControllerError::IneligibleReplica(_))
        }
    ));
    // With the right epoch it joins.
    let e = h.epochs[&other];
    let r = h.request(alter(
        &h,
        next.leader_epoch,
        next.partition_epoch,
        vec![(leader, -1), (other, e)],
    ));
    let ControllerResponse::AlterPartition { result: Ok(after) } = r else {
        panic!("{r:?}")
    };
    assert_eq!(after.isr.len(), 2);
    // An old leader epoch is fenced.
    let r = h.request(alter(
        &h,
        next.leader_epoch - 1,
        after.partition_epoch,
        vec![(leader, -1)],
    ));
    assert_eq!(
        r,
        ControllerResponse::AlterPartition {
            result: Err(ControllerError::FencedLeaderEpoch)
        }
    );
}

#[test]
fn a_fenced_broker_cannot_join_the_isr() {
    let mut h = Harness::new(&[]);
    h.start(&[1, 2, 3]);
    h.create("t", 1, 3, &[]);
    let p = h.partition("t", 0);
    let topic_id = h.image.topic("t").expect("t").topic_id;
    let follower = *p.replicas.iter().find(|&&b| b != p.leader).expect("f");
    h.run(SESSION_MS + 2_000, &[follower]);
    let p = h.partition("t", 0);
    assert!(!p.isr.contains(&follower));
    let r = h.request(ControllerRequest::AlterPartition {
        node_id: p.leader,
        broker_epoch: h.epochs[&p.leader],
        topic_id,
        partition: 0,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        new_isr: p
            .isr
            .iter()
            .map(|&b| (b, -1))
            .chain([(follower, -1)])
            .collect(),
    });
    assert!(matches!(
        r,
        ControllerResponse::AlterPartition {
            result: Err(ControllerError::IneligibleReplica(_))
        }
    ));
}

#[test]
fn last_replica_standing_that_restarts_uncleanly_is_not_elected() {
    // RF 3, min ISR 2. Brokers die one after another; the last ISR member restarts uncleanly.
    let mut h = Harness::new(&[("min.insync.replicas", "2")]);
    h.start(&[1, 2, 3]);
    h.create("t", 1, 3, &[]);
    let p = h.partition("t", 0);
    let order = p.replicas.clone();
    // First the two followers die; the leader stays alone (the ELR holds them).
    let followers: Vec<i32> = order.iter().copied().filter(|&b| b != p.leader).collect();
    h.run(SESSION_MS + 2_000, &followers);
    let p = h.partition("t", 0);
    assert_eq!(p.isr, vec![order[0]]);
    // Now the leader dies too.
    h.run(SESSION_MS + 2_000, &order);
    let p = h.partition("t", 0);
    assert_eq!(p.leader, NO_LEADER);
    assert!(p.isr.is_empty());
    // The last leader comes back after an unclean restart: it must not lead alone.
    h.epochs.remove(&order[0]);
    h.register(order[0], 555, false);
    h.heartbeat(order[0], false);
    h.tick();
    let p = h.partition("t", 0);
    assert_eq!(p.leader, NO_LEADER, "{p:?}");
    // A follower that left cleanly (in the ELR) comes back: it leads.
    h.epochs.remove(&followers[0]);
    h.register(followers[0], 556, true);
    h.heartbeat(followers[0], false);
    let p = h.partition("t", 0);
    assert_eq!(p.leader, followers[0], "{p:?}");
    h.check_invariants();
}

#[test]
fn incremental_alter_configs_and_min_isr_change_clears_elr() {
    let mut h = Harness::new(&[]);
    h.start(&[1, 2, 3]);
    h.create("t", 1, 3, &[("min.insync.replicas", "3")]);
    let p = h.partition("t", 0);
    let follower = *p.replicas.iter().find(|&&b| b != p.leader).expect("f");
    h.run(SESSION_MS + 2_000, &[follower]);
    assert_eq!(h.partition("t", 0).elr, vec![follower]);
    let r = h.request(ControllerRequest::AlterTopicConfigs {
        name: "t".into(),
        changes: vec![ConfigChangeSpec {
            name: "min.insync.replicas".into(),
            op: 0,
            value: Some("2".into()),
        }],
        validate_only: false,
    });
    assert_eq!(r, ControllerResponse::Configs { result: Ok(()) });
    assert_eq!(
        h.image
            .topic("t")
            .expect("t")
            .configs
            .get("min.insync.replicas"),
        Some("2")
    );
    assert!(h.partition("t", 0).elr.is_empty());
}

#[test]
fn group_configs_are_validated_stored_and_removed_without_a_group() {
    let mut h = Harness::new(&[("group.share.min.record.lock.duration.ms", "1000")]);
    h.start(&[1]);
    let set = |name: &str, value: Option<&str>| ConfigChangeSpec {
        name: name.into(),
        op: if value.is_some() { 0 } else { 1 },
        value: value.map(str::to_string),
    };
    let alter = |h: &mut Harness, group: &str, changes: Vec<ConfigChangeSpec>| {
        h.request(ControllerRequest::AlterGroupConfigs {
            group_id: group.into(),
            changes,
            validate_only: false,
        })
    };
    // The broker's lower bound (1000 here) is what a group value is checked against.
    let r = alter(
        &mut h,
        "g",
        vec![set("share.record.lock.duration.ms", Some("2000"))],
    );
    assert_eq!(r, ControllerResponse::Configs { result: Ok(()) });
    let stored = h
        .image
        .group_configs("g")
        .expect("stored before the group exists");
    assert_eq!(stored.get("share.record.lock.duration.ms"), Some("2000"));
    let r = alter(
        &mut h,
        "g",
        vec![set("share.delivery.count.limit", Some("11"))],
    );
    assert_eq!(
        r,
        ControllerResponse::Configs {
            result: Err(ControllerError::InvalidConfig(
                "share.delivery.count.limit must be in the range 2 to 10 inclusive.".into()
            ))
        }
    );
    let r = alter(
        &mut h,
        "",
        vec![set("share.delivery.count.limit", Some("3"))],
    );
    assert!(matches!(
        r,
        ControllerResponse::Configs { result: Err(ControllerError::InvalidRequest(ref m)) } if m == "Default group resources are not allowed."
    ));
    // AlterConfigs replaces the whole set.
    let r = h.request(ControllerRequest::SetGroupConfigs {
        group_id: "g".into(),
        configs: [(
            "share.isolation.level".to_string(),
            "read_committed".to_string(),
        )]
        .into(),
        validate_only: false,
    });
    assert_eq!(r, ControllerResponse::Configs { result: Ok(()) });
    let stored = h.image.group_configs("g").expect("stored");
    assert_eq!(stored.get("share.record.lock.duration.ms"), None);
    assert_eq!(stored.get("share.isolation.level"), Some("read_committed"));
    // Deleting the last key removes the group's entry.
    let r = alter(&mut h, "g", vec![set("share.isolation.level", None)]);
    assert_eq!(r, ControllerResponse::Configs { result: Ok(()) });
    assert!(h.image.group_configs("g").is_none());
}

#[test]
fn tiered_storage_rules_run_on_create_alter_and_incremental_alter() {
    let refused = |response: ControllerResponse, needle: &str| match response {
        ControllerResponse::Configs {
            result: Err(ControllerError::InvalidConfig(m)),
        } if m.contains(needle) => {}
        ControllerResponse::CreateTopics { ref results } if matches!(&results[..], [(_, Err(ControllerError::InvalidConfig(m)))] if m.contains(needle)) =>
            {}
        other => panic!("expected INVALID_CONFIG with {needle:?}, got {other:?}"),
    };
    let create =
        |name: &str, configs: &[(&str, &str)], validate_only| ControllerRequest::CreateTopics {
            topics: vec![TopicSpec {
                name: name.into(),
                partitions: Some(1),
                replication_factor: Some(1),
                assignments: BTreeMap::new(),
                configs: configs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            }],
            validate_only,
        };
    // Tiered storage off: a tiered topic is refused, validate_only included.
    let mut off = Harness::new(&[]);
    off.start(&[1]);
    for validate_only in [true, false] {
        let r = off.request(create(
            "t",
            &[("remote.storage.enable", "true")],
            validate_only,
        ));
        refused(r, "remote.log.storage.system.enable=false");
    }
    assert!(off.image.topic("t").is_none());

    let mut on = Harness::new(&[
        ("remote.log.storage.system.enable", "true"),
        ("millrace.remote.storage.url", "file:///tmp/tiered"),
    ]);
    on.start(&[1]);
    let r = on.request(create(
        "c",
        &[
            ("remote.storage.enable", "true"),
            ("cleanup.policy", "compact"),
        ],
        false,
    ));
    refused(r, "compacted");
    on.create(
        "t",
        1,
        1,
        &[
            ("remote.storage.enable", "true"),
            ("retention.bytes", "1000"),
        ],
    );
    // AlterConfigs (the whole set) and IncrementalAlterConfigs meet the same rules.
    let r = on.request(ControllerRequest::SetTopicConfigs {
        name: "t".into(),
        configs: BTreeMap::from([
            ("remote.storage.enable".to_string(), "true".to_string()),
            ("retention.bytes".to_string(), "1000".to_string()),
            ("local.retention.bytes".to_string(), "2000".to_string()),
        ]),
        validate_only: false,
    });
    refused(r, "retention.bytes (1000)");
    let set = |name: &str, value: &str| ConfigChangeSpec {
        name: name.into(),
        op: 0,
        value: Some(value.into()),
    };
    let r = on.request(ControllerRequest::AlterTopicConfigs {
        name: "t".into(),
        changes: vec![set("remote.storage.enable", "false")],
        validate_only: false,
    });
    refused(r, "remote.log.delete.on.disable=true");
    let r = on.request(ControllerRequest::AlterTopicConfigs {
        name: "t".into(),
        changes: vec![set("local.retention.bytes", "500")],
        validate_only: false,
    });
    assert_eq!(r, ControllerResponse::Configs { result: Ok(()) });
    let configs = &on.image.topic("t").expect("t").configs;
    assert_eq!(configs.get("local.retention.bytes"), Some("500"));
    assert_eq!(configs.get("remote.storage.enable"), Some("true"));
}

#[test]
fn producer_id_blocks_never_overlap() {
    let mut h = Harness::new(&[]);
    h.start(&[1, 2]);
    let mut seen = Vec::new();
    for b in [1, 2, 1] {
        let r = h.request(ControllerRequest::AllocateProducerIds {
            node_id: b,
            broker_epoch: h.epochs[&b],
        });
        let ControllerResponse::ProducerIds {
            first_producer_id,
            count,
        } = r
        else {
            panic!("{r:?}")
        };
        seen.push((first_producer_id, count));
    }
    assert_eq!(seen, vec![(0, 1000), (1000, 1000), (2000, 1000)]);
}

#[test]
fn preferred_election_restores_the_preferred_leader() {
    let mut h = Harness::new(&[]);
    h.start(&[1, 2, 3]);
    h.create("t", 1, 3, &[]);
    let preferred = h.partition("t", 0).preferred_leader();
    h.run(SESSION_MS + 2_000, &[preferred]);
    assert_ne!(h.partition("t", 0).leader, preferred);
    // It comes back; the leaders of the remaining ISR stay until asked.
    h.epochs.remove(&preferred);
    h.register(preferred, 999, true);
    h.heartbeat(preferred, false);
    let p = h.partition("t", 0);
    // Not in the ISR yet (the leader adds it back once it catches up): not electable.
    let r = h.request(ControllerRequest::ElectLeaders {
        election: ElectionType::Preferred,
        partitions: Some(vec![("t".into(), 0)]),
    });
    assert!(
        matches!(&r, ControllerResponse::ElectLeaders { results } if results[0].1 == Err(ControllerError::PreferredLeaderNotAvailable)),
        "{r:?}"
    );
    let topic_id = h.image.topic("t").expect("t").topic_id;
    h.request(ControllerRequest::AlterPartition {
        node_id: p.leader,
        broker_epoch: h.epochs[&p.leader],
        topic_id,
        partition: 0,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        new_isr: p
            .isr
            .iter()
            .map(|&b| (b, -1))
            .chain([(preferred, h.epochs[&preferred])])
            .collect(),
    });
    let r = h.request(ControllerRequest::ElectLeaders {
        election: ElectionType::Preferred,
        partitions: Some(vec![("t".into(), 0)]),
    });
    assert!(
        matches!(&r, ControllerResponse::ElectLeaders { results } if results[0].1.is_ok()),
        "{r:?}"
    );
    assert_eq!(h.partition("t", 0).leader, preferred);
}

#[test]
fn delete_and_grow_topics() {
    let mut h = Harness::new(&[]);
    h.start(&[1, 2]);
    h.create("t", 2, 2, &[]);
    let r = h.request(ControllerRequest::CreatePartitions {
        topics: vec![PartitionsSpec {
            name: "t".into(),
            count: 5,
            assignments: None,
        }],
        validate_only: false,
    });
    assert!(matches!(&r, ControllerResponse::CreatePartitions { results } if results[0].1.is_ok()));
    assert_eq!(h.image.topic("t").expect("t").partition_count(), 5);
    assert_eq!(h.partition("t", 4).replicas.len(), 2);
    let r = h.request(ControllerRequest::DeleteTopics {
        names: vec!["t".into(), "nope".into()],
    });
    let ControllerResponse::DeleteTopics { results } = r else {
        panic!()
    };
    assert!(results[0].1.is_ok());
    assert!(matches!(
        results[1].1,
        Err(ControllerError::UnknownTopicOrPartition(_))
    ));
    assert!(h.image.topic("t").is_none());
}

#[test]
fn elect_leaders_follows_kafkas_answers() {
    let mut h = Harness::new(&[("auto.leader.rebalance.enable", "false")]);
    h.start(&[1, 2, 3]);
    h.create("t", 3, 3, &[]);
    // Every preferred replica leads: nothing to do, so an all-partitions request lists nothing.
    assert!(h.elect(ElectionType::Preferred, None).is_empty());
    // Named partitions are answered one by one.
    let r = h.elect(
        ElectionType::Preferred,
        Some(vec![("t", 0), ("t", 9), ("nope", 0)]),
    );
    assert_eq!(r[0].1, Err(ControllerError::ElectionNotNeeded));
    assert!(matches!(
        r[1].1,
        Err(ControllerError::UnknownTopicOrPartition(_))
    ));
    assert!(matches!(
        r[2].1,
        Err(ControllerError::UnknownTopicOrPartition(_))
    ));
    // A partition with a leader needs no unclean election.
    let r = h.elect(ElectionType::Unclean, Some(vec![("t", 1)]));
    assert_eq!(r[0].1, Err(ControllerError::ElectionNotNeeded));

    // Broker 1 dies and comes back: the partitions it prefers are led elsewhere.
    h.run(SESSION_MS + 2_000, &[1]);
    h.restart(1, 501);
    let moved: Vec<i32> = (0..3)
        .filter(|&p| h.partition("t", p).preferred_leader() == 1)
        .collect();
    assert!(!moved.is_empty());
    for &p in &moved {
        assert_ne!(h.partition("t", p).leader, 1);
    }
    // Out of the ISR it cannot be elected.
    let r = h.elect(ElectionType::Preferred, None);
    assert_eq!(r.len(), moved.len(), "{r:?}");
    assert!(r
        .iter()
        .all(|(_, e)| *e == Err(ControllerError::PreferredLeaderNotAvailable)));
    // Back in the ISR it is; only the partitions that needed it are answered.
    h.rejoin_isr(1);
    let epochs: Vec<i32> = moved
        .iter()
        .map(|&p| h.partition("t", p).leader_epoch)
        .collect();
    let r = h.elect(ElectionType::Preferred, None);
    assert_eq!(r.len(), moved.len(), "{r:?}");
    assert!(r.iter().all(|(_, e)| e.is_ok()), "{r:?}");
    for (i, &p) in moved.iter().enumerate() {
        let reg = h.partition("t", p);
        assert_eq!(reg.leader, 1);
        assert!(reg.leader_epoch > epochs[i]);
    }
    h.check_invariants();
}

#[test]
fn unclean_election_elects_an_out_of_sync_replica_only_when_asked() {
    let mut h = Harness::new(&[("min.insync.replicas", "1")]);
    h.start(&[1, 2]);
    h.create_assigned("t", &[&[1, 2]], &[]);
    // 2 falls out of the ISR (the leader shrinks it), then the leader dies.
    let p = h.partition("t", 0);
    let topic_id = h.image.topic("t").expect("t").topic_id;
    let r = h.request(ControllerRequest::AlterPartition {
        node_id: 1,
        broker_epoch: h.epochs[&1],
        topic_id,
        partition: 0,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        new_isr: vec![(1, -1)],
    });
    assert!(matches!(
        r,
        ControllerResponse::AlterPartition { result: Ok(_) }
    ));
    h.run(SESSION_MS + 2_000, &[1]);
    assert_eq!(h.partition("t", 0).leader, NO_LEADER);
    // A preferred election cannot help; an unclean one elects 2.
    let r = h.elect(ElectionType::Preferred, Some(vec![("t", 0)]));
    assert_eq!(r[0].1, Err(ControllerError::PreferredLeaderNotAvailable));
    let r = h.elect(ElectionType::Unclean, Some(vec![("t", 0)]));
    assert_eq!(r[0].1, Ok(()));
    let p = h.partition("t", 0);
    assert_eq!((p.leader, p.isr.as_slice()), (2, &[2][..]));
    h.check_invariants();
}

#[test]
fn unclean_election_without_an_active_replica_is_not_available() {
    let mut h = Harness::new(&[]);
    h.start(&[1, 2]);
    h.create_assigned("t", &[&[1, 2]], &[]);
    h.run(SESSION_MS + 2_000, &[1, 2]);
    assert_eq!(h.partition("t", 0).leader, NO_LEADER);
    let r = h.elect(ElectionType::Unclean, Some(vec![("t", 0)]));
    assert_eq!(r[0].1, Err(ControllerError::EligibleLeadersNotAvailable));
}

/// Settings of the rebalance tests: a 10 s check interval.
const REBALANCE: &[(&str, &str)] = &[
    ("auto.leader.rebalance.enable", "true"),
    ("leader.imbalance.check.interval.seconds", "10"),
];

/// Broker 1 (preferred leader of 2 of 6 partitions) dies and returns in sync.
fn imbalanced(settings: &[(&str, &str)]) -> (Harness, Vec<i32>) {
    let mut h = Harness::new(settings);
    h.start(&[1, 2, 3]);
    h.create("t", 6, 3, &[]);
    let preferred_1: Vec<i32> = (0..6)
        .filter(|&p| h.partition("t", p).preferred_leader() == 1)
        .collect();
    assert_eq!(preferred_1.len(), 2);
    h.run(SESSION_MS + 2_000, &[1]);
    h.restart(1, 601);
    h.rejoin_isr(1);
    for &p in &preferred_1 {
        assert_ne!(h.partition("t", p).leader, 1);
    }
    (h, preferred_1)
}

#[test]
fn auto_rebalance_moves_leaders_back_to_the_preferred_replica_after_the_interval() {
    let (mut h, preferred_1) = imbalanced(REBALANCE);
    // A newly active controller checks one interval (10 s) after it took over.
    let image = h.image.clone();
    h.controller.activate(&image, h.now);
    h.run(8_000, &[]);
    for &p in &preferred_1 {
        assert_ne!(h.partition("t", p).leader, 1, "moved before the interval");
    }
    h.run(4_000, &[]);
    for p in 0..6 {
        let reg = h.partition("t", p);
        assert_eq!(reg.leader, reg.preferred_leader(), "{reg:?}");
    }
    h.check_invariants();
}

#[test]
fn auto_rebalance_is_off_when_disabled() {
    let settings = [
        ("auto.leader.rebalance.enable", "false"),
        ("leader.imbalance.check.interval.seconds", "10"),
    ];
    let (mut h, preferred_1) = imbalanced(&settings);
    h.run(60_000, &[]);
    for &p in &preferred_1 {
        assert_ne!(h.partition("t", p).leader, 1);
    }
}

#[test]
fn auto_rebalance_waits_until_a_broker_is_over_the_imbalance_percentage() {
    // Broker 1 leads 0 of its 2 preferred partitions: 100 %, above 99 %: rebalanced.
    let mut settings = REBALANCE.to_vec();
    settings.push(("leader.imbalance.per.broker.percentage", "99"));
    let (mut h, preferred_1) = imbalanced(&settings);
    h.run(30_000, &[]);
    for &p in &preferred_1 {
        assert_eq!(h.partition("t", p).leader, 1);
    }
    // At 100 % nothing is ever above the threshold.
    settings.pop();
    settings.push(("leader.imbalance.per.broker.percentage", "100"));
    let (mut h, preferred_1) = imbalanced(&settings);
    h.run(30_000, &[]);
    for &p in &preferred_1 {
        assert_ne!(h.partition("t", p).leader, 1);
    }
}

#[test]
fn auto_rebalance_leaves_a_preferred_replica_that_is_out_of_sync() {
    let mut h = Harness::new(REBALANCE);
    h.start(&[1, 2, 3]);
    h.create("t", 6, 3, &[]);
    h.run(SESSION_MS + 2_000, &[1]);
    h.restart(1, 701);
    // Not back in any ISR: the rebalance elects nothing and writes nothing.
    let before = h.offset;
    h.run(30_000, &[]);
    assert_eq!(
        h.offset, before,
        "an election that changes nothing wrote a record"
    );
    for p in 0..6 {
        assert_ne!(h.partition("t", p).leader, 1);
    }
}

#[test]
fn a_reassignment_adds_replicas_then_removes_the_old_ones_and_the_leader_steps_down() {
    let mut h = Harness::new(&[("min.insync.replicas", "2")]);
    h.start(&[1, 2, 3, 4]);
    h.create_assigned("t", &[&[1, 2, 3], &[2, 3, 4]], &[]);
    let before = h.partition("t", 0);
    assert_eq!(before.leader, 1);
    let r = h.reassign("t", &[(0, Some(&[2, 3, 4]))]);
    assert_eq!(r, vec![(0, Ok(()))]);
    // Started: the new replica is a replica (hosted, fetching), nothing left yet.
    let p = h.partition("t", 0);
    assert_eq!(p.replicas, vec![2, 3, 4, 1]);
    assert_eq!(
        (p.adding_replicas.clone(), p.removing_replicas.clone()),
        (vec![4], vec![1])
    );
    assert_eq!((p.leader, p.leader_epoch), (1, before.leader_epoch));
    assert_eq!(p.isr, vec![1, 2, 3]);
    let ongoing = h.ongoing();
    assert_eq!(ongoing.len(), 1);
    assert_eq!(ongoing[0].0, "t");
    assert_eq!(
        ongoing[0].1,
        vec![crate::messages::OngoingReassignment {
            partition: 0,
            replicas: vec![2, 3, 4, 1],
            adding_replicas: vec![4],
            removing_replicas: vec![1],
        }]
    );
    // Time passes: nothing completes while 4 is out of sync.
    h.run(10_000, &[]);
    assert_eq!(h.partition("t", 0).replicas, vec![2, 3, 4, 1]);
    // The leader adds 4 once it caught up: the reassignment completes, 1 steps down.
    h.rejoin_isr(4);
    let p = h.partition("t", 0);
    assert_eq!(p.replicas, vec![2, 3, 4]);
    assert_eq!(p.isr, vec![2, 3, 4]);
    assert_eq!(p.leader, 2);
    assert!(p.leader_epoch > before.leader_epoch);
    assert!(p.adding_replicas.is_empty() && p.removing_replicas.is_empty());
    assert!(h.ongoing().is_empty());
    h.check_invariants();
}

#[test]
fn a_reassignment_that_only_reorders_or_shrinks_completes_at_once() {
    let mut h = Harness::new(&[]);
    h.start(&[1, 2, 3]);
    h.create_assigned("t", &[&[1, 2, 3], &[1, 2, 3]], &[]);
    let r = h.reassign("t", &[(0, Some(&[3, 2, 1])), (1, Some(&[1, 2]))]);
    assert_eq!(r, vec![(0, Ok(())), (1, Ok(()))]);
    let p0 = h.partition("t", 0);
    assert_eq!((p0.replicas.as_slice(), p0.leader), (&[3, 2, 1][..], 1));
    let p1 = h.partition("t", 1);
    assert_eq!(
        (p1.replicas.as_slice(), p1.isr.as_slice()),
        (&[1, 2][..], &[1, 2][..])
    );
    assert_eq!(
        p1.leader_epoch, 1,
        "a removed replica is fenced by a new leader epoch"
    );
    assert!(h.ongoing().is_empty());
    // The reordered partition's new preferred leader takes over on a preferred election.
    let r = h.elect(ElectionType::Preferred, Some(vec![("t", 0)]));
    assert_eq!(r[0].1, Ok(()));
    assert_eq!(h.partition("t", 0).leader, 3);
}

#[test]
fn without_allow_replication_factor_change_a_target_of_another_size_is_refused() {
    let mut h = Harness::new(&[]);
    h.start(&[1, 2, 3, 4]);
    h.create_assigned("t", &[&[1, 2, 3], &[1, 2, 3], &[1, 2, 3]], &[]);
    let r = h.reassign_allowing(
        "t",
        &[
            (0, Some(&[2, 3, 4])),
            (1, Some(&[1, 2])),
            (2, Some(&[1, 2, 3, 4])),
        ],
        false,
    );
    assert_eq!(r[0], (0, Ok(())), "same size, other brokers");
    assert!(
        matches!(&r[1], (1, Err(ControllerError::InvalidReplicationFactor(m))) if m.contains("from 3 to 2")),
        "{:?}",
        r[1]
    );
    assert!(
        matches!(
            &r[2],
            (2, Err(ControllerError::InvalidReplicationFactor(_)))
        ),
        "{:?}",
        r[2]
    );
    assert_eq!(
        h.partition("t", 1).replicas,
        vec![1, 2, 3],
        "refused: unchanged"
    );
    // While 0 moves (replicas 2, 3, 4, 1 with 4 adding), its size is still 3: another target of
    // three is accepted, one of four refused.
    let r = h.reassign_allowing("t", &[(0, Some(&[1, 2, 3, 4]))], false);
    assert!(
        matches!(
            &r[0],
            (0, Err(ControllerError::InvalidReplicationFactor(_)))
        ),
        "{r:?}"
    );
    let r = h.reassign_allowing("t", &[(0, Some(&[3, 4, 1]))], false);
    assert_eq!(r, vec![(0, Ok(()))]);
    // Allowed (v0, the default): the size may change.
    let r = h.reassign("t", &[(1, Some(&[1, 2]))]);
    assert_eq!(r, vec![(1, Ok(()))]);
}

#[test]
fn cancelling_a_reassignment_reverts_it() {
    let mut h = Harness::new(&[]);
    h.start(&[1, 2, 3, 4]);
    h.create_assigned("t", &[&[1, 2, 3]], &[]);
    let r = h.reassign("t", &[(0, None)]);
    assert_eq!(r, vec![(0, Err(ControllerError::NoReassignmentInProgress))]);
    h.reassign("t", &[(0, Some(&[2, 3, 4]))]);
    let started = h.partition("t", 0);
    let r = h.reassign("t", &[(0, None)]);
    assert_eq!(r, vec![(0, Ok(()))]);
    let p = h.partition("t", 0);
    assert_eq!(p.replicas, vec![2, 3, 1]);
    assert_eq!((p.leader, p.isr.as_slice()), (1, &[1, 2, 3][..]));
    assert!(p.adding_replicas.is_empty() && p.removing_replicas.is_empty());
    assert!(p.leader_epoch > started.leader_epoch, "4 left the replicas");
    assert!(h.ongoing().is_empty());
}

#[test]
fn invalid_reassignments_are_refused_per_partition() {
    let mut h = Harness::new(&[]);
    h.start(&[1, 2, 3]);
    h.create_assigned("t", &[&[1, 2], &[2, 3]], &[]);
    let before = h.offset;
    let r = h.reassign("t", &[(0, Some(&[])), (1, Some(&[2, 2])), (5, Some(&[1]))]);
    assert!(matches!(
        r[0].1,
        Err(ControllerError::InvalidReplicaAssignment(_))
    ));
    assert!(matches!(
        r[1].1,
        Err(ControllerError::InvalidReplicaAssignment(_))
    ));
    assert!(matches!(
        r[2].1,
        Err(ControllerError::UnknownTopicOrPartition(_))
    ));
    let r = h.reassign("t", &[(0, Some(&[1, 9]))]);
    assert!(
        matches!(&r[0].1, Err(ControllerError::InvalidReplicaAssignment(m)) if m.contains("broker 9")),
        "{r:?}"
    );
    let r = h.reassign("nope", &[(0, Some(&[1]))]);
    assert!(matches!(
        r[0].1,
        Err(ControllerError::UnknownTopicOrPartition(_))
    ));
    assert_eq!(h.offset, before, "a refused reassignment wrote something");
    // One partition twice in a request: the second is refused, the first applies.
    let r = h.reassign("t", &[(0, Some(&[1, 3])), (0, Some(&[2, 3]))]);
    assert_eq!(r[0].1, Ok(()));
    assert!(matches!(r[1].1, Err(ControllerError::InvalidRequest(_))));
    assert_eq!(h.partition("t", 0).replicas, vec![1, 3, 2]);
    // A refused mention does not count: the next mention of that partition is checked alone.
    let r = h.reassign("t", &[(1, Some(&[9])), (1, Some(&[3, 1]))]);
    assert!(matches!(
        r[0].1,
        Err(ControllerError::InvalidReplicaAssignment(_))
    ));
    assert_eq!(r[1].1, Ok(()), "{r:?}");
    assert_eq!(h.partition("t", 1).replicas, vec![3, 1, 2]);
}

#[test]
fn replicas_dying_midway_stall_a_reassignment_without_removing_anything() {
    let mut h = Harness::new(&[("min.insync.replicas", "2")]);
    h.start(&[1, 2, 3, 4]);
    h.create_assigned("t", &[&[1, 2, 3]], &[]);
    h.reassign("t", &[(0, Some(&[2, 3, 4]))]);
    // The new replica's broker dies before catching up: nothing completes, nothing is removed.
    h.run(SESSION_MS + 2_000, &[4]);
    let p = h.partition("t", 0);
    assert_eq!(p.replicas, vec![2, 3, 4, 1]);
    assert_eq!((p.leader, p.isr.as_slice()), (1, &[1, 2, 3][..]));
    // Then the leader (being removed) dies: an in-sync replica of the target takes over; the
    // reassignment stays in progress.
    h.run(SESSION_MS + 2_000, &[1, 4]);
    let p = h.partition("t", 0);
    assert_eq!((p.leader, p.isr.as_slice()), (2, &[2, 3][..]));
    assert_eq!(p.replicas, vec![2, 3, 4, 1]);
    assert_eq!(p.adding_replicas, vec![4]);
    // 4 returns and catches up from the new leader: now the reassignment completes, without 1.
    h.restart(4, 4001);
    h.rejoin_isr(4);
    let p = h.partition("t", 0);
    assert_eq!(p.replicas, vec![2, 3, 4]);
    assert_eq!((p.leader, p.isr.as_slice()), (2, &[2, 3, 4][..]));
    assert!(h.ongoing().is_empty());
    // 1 comes back: it is no replica any more (its broker deletes the log), and leads nothing.
    h.restart(1, 1001);
    h.run(4_000, &[]);
    assert!(!h.partition("t", 0).replicas.contains(&1));
    h.check_invariants();
}

#[test]
fn an_election_writing_more_than_the_record_bound_is_a_policy_violation() {
    let mut h = Harness::new(&[("auto.leader.rebalance.enable", "false")]);
    h.register(1, 1000, true);
    h.heartbeat(1, false);
    h.register(2, 2000, true); // registered, still fenced: not in any ISR
    let partitions = RECORDS_PER_USER_OP_MAX + 1;
    let first = partitions / 2;
    let assignment: Vec<&[i32]> = vec![&[1, 2]; first];
    h.create_assigned("a", &assignment, &[]);
    let assignment: Vec<&[i32]> = vec![&[1, 2]; partitions - first];
    h.create_assigned("b", &assignment, &[]);
    // 2 is unfenced, then 1 dies: every partition is leaderless, 2 could lead uncleanly.
    h.run(SESSION_MS + 2_000, &[1]);
    assert_eq!(h.partition("b", 0).leader, NO_LEADER);
    let before = h.offset;
    let r = h.request(ControllerRequest::ElectLeaders {
        election: ElectionType::Unclean,
        partitions: None,
    });
    assert!(
        matches!(
            r,
            ControllerResponse::Error {
                error: ControllerError::PolicyViolation(_)
            }
        ),
        "{r:?}"
    );
    assert_eq!(h.offset, before);
    // A request within the bound goes through.
    let r = h.elect(ElectionType::Unclean, Some(vec![("a", 0), ("b", 0)]));
    assert!(r.iter().all(|(_, e)| e.is_ok()), "{r:?}");
    assert_eq!(h.partition("b", 0).leader, 2);
}

#[test]
fn scram_credentials_follow_kafkas_rules() {
    use crate::messages::ScramUpsertion;
    use millrace_cluster::scram::ScramMechanism;
    let upsert = |name: &str, mechanism: i8, iterations: i32| ScramUpsertion {
        name: name.into(),
        mechanism,
        iterations,
        salt: vec![1, 2, 3],
        stored_key: vec![4; 32],
        server_key: vec![5; 32],
    };
    let mut h = Harness::new(&[]);
    h.start(&[1]);
    let r = h.request(ControllerRequest::AlterUserScramCredentials {
        deletions: vec![("carol".into(), 1), ("dave".into(), 1)],
        upsertions: vec![
            upsert("alice", 1, 4096),
            upsert("alice", 2, 8192),
            upsert("bob", 2, 8192),
            upsert("erin", 3, 8192),
            upsert("frank", 1, 4095),
            upsert("grace", 1, 16385),
            upsert("", 1, 4096),
            upsert("dave", 1, 4096),
        ],
    });
    let ControllerResponse::AlterUserScramCredentials { results } = r else {
        panic!("{r:?}")
    };
    let names: Vec<&str> = results.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["carol", "dave", "alice", "bob", "erin", "frank", "grace", ""],
        "one result per user, in order of first appearance"
    );
    let code = |i: usize| results[i].1.clone();
    assert!(matches!(code(0), Err(ControllerError::ResourceNotFound(_))));
    // dave's first change (deleting nothing) was refused: that refusal stays, as in Kafka.
    assert!(matches!(code(1), Err(ControllerError::ResourceNotFound(_))));
    assert!(matches!(
        code(2),
        Err(ControllerError::DuplicateResource(_))
    ));
    assert!(code(3).is_ok());
    assert!(matches!(
        code(4),
        Err(ControllerError::UnsupportedSaslMechanism(_))
    ));
    assert!(matches!(
        code(5),
        Err(ControllerError::UnacceptableCredential(_))
    ));
    assert!(matches!(
        code(6),
        Err(ControllerError::UnacceptableCredential(_))
    ));
    assert!(matches!(
        code(7),
        Err(ControllerError::UnacceptableCredential(_))
    ));
    // Only bob's credential was written; alice's two were refused together.
    assert!(h
        .image
        .scram_credential("bob", ScramMechanism::Sha512)
        .is_some());
    assert!(h
        .image
        .scram_credential("alice", ScramMechanism::Sha256)
        .is_none());
    assert_eq!(h.image.scram_credentials.len(), 1);
    let r = h.request(ControllerRequest::AlterUserScramCredentials {
        deletions: vec![("bob".into(), 2)],
        upsertions: vec![],
    });
    assert!(
        matches!(&r, ControllerResponse::AlterUserScramCredentials { results } if results[0].1.is_ok()),
        "{r:?}"
    );
    assert!(h.image.scram_credentials.is_empty());
}

#[test]
fn replicas_on_a_failed_log_dir_lose_leadership_and_the_isr_until_the_broker_restarts() {
    let mut h = Harness::new(&[]);
    h.start(&[1, 2, 3]);
    h.create("jbod", 6, 3, &[]);
    let topic_id = h.image.topic("jbod").expect("topic").topic_id;
    let led_by_1: Vec<i32> = (0..6)
        .filter(|&p| h.partition("jbod", p).leader == 1)
        .collect();
    assert!(!led_by_1.is_empty());
    // Broker 1 reports two of its replicas offline: partition 0 and one it leads.
    let failed: Vec<i32> = {
        let mut f = vec![0, led_by_1[0]];
        f.dedup();
        f
    };
    let before: Vec<PartitionRegistration> = (0..6).map(|p| h.partition("jbod", p)).collect();
    let r = h.request(ControllerRequest::BrokerHeartbeat {
        node_id: 1,
        broker_epoch: h.epochs[&1],
        metadata_offset: h.offset,
        want_fence: false,
        want_shutdown: false,
        offline_replicas: failed.iter().map(|&p| (topic_id, p)).collect(),
    });
    assert!(matches!(
        r,
        ControllerResponse::Heartbeat {
            is_fenced: false,
            ..
        }
    ));
    for p in 0..6 {
        let now = h.partition("jbod", p);
        if failed.contains(&p) {
            assert_ne!(now.leader, 1, "partition {p}: {now:?}");
            assert!(
                !now.isr.contains(&1) && now.isr.len() == 2,
                "partition {p}: {now:?}"
            );
        } else {
            assert_eq!(now, before[p as usize], "partition {p} is untouched");
        }
    }
    // Its leader proposes broker 1 back into the ISR: refused while the replica is offline.
    let p = h.partition("jbod", failed[0]);
    let mut isr: Vec<(i32, i64)> = p.isr.iter().map(|&b| (b, h.epochs[&b])).collect();
    isr.push((1, h.epochs[&1]));
    let r = h.request(ControllerRequest::AlterPartition {
        node_id: p.leader,
        broker_epoch: h.epochs[&p.leader],
        topic_id,
        partition: failed[0],
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        new_isr: isr.clone(),
    });
    assert!(
        matches!(
            r,
            ControllerResponse::AlterPartition {
                result: Err(ControllerError::IneligibleReplica(_))
            }
        ),
        "{r:?}"
    );
    // Other partitions keep failing nothing, and a later tick changes nothing more.
    let offset = h.offset;
    h.tick();
    assert_eq!(h.offset, offset);
    // Restarted (its dirs rescanned), broker 1 may rejoin.
    h.register(1, 1001, true);
    h.heartbeat(1, false);
    let p = h.partition("jbod", failed[0]);
    let mut isr: Vec<(i32, i64)> = p.isr.iter().map(|&b| (b, h.epochs[&b])).collect();
    isr.push((1, h.epochs[&1]));
    let r = h.request(ControllerRequest::AlterPartition {
        node_id: p.leader,
        broker_epoch: h.epochs[&p.leader],
        topic_id,
        partition: failed[0],
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        new_isr: isr,
    });
    assert!(
        matches!(r, ControllerResponse::AlterPartition { result: Ok(_) }),
        "{r:?}"
    );
    assert!(h.partition("jbod", failed[0]).isr.contains(&1));
}

#[test]
fn remote_segments_commit_only_from_the_current_leader_and_contiguously() {
    use crate::messages::RemoteLogChange;
    use millrace_cluster::remote_log::RemoteSegment;
    let mut h = Harness::new(&[
        ("remote.log.storage.system.enable", "true"),
        ("millrace.remote.storage.url", "file:///tmp/x"),
    ]);
    h.start(&[1, 2, 3]);
    h.create("t", 1, 3, &[("remote.storage.enable", "true")]);
    let p = h.partition("t", 0);
    let topic_id = h.image.topic("t").expect("t").topic_id;
    let follower = *p
        .replicas
        .iter()
        .find(|&&b| b != p.leader)
        .expect("follower");
    let segment = |base: i64, end: i64| RemoteSegment {
        segment_id: Uuid::from_u128(base as u128 + 7),
        base_offset: base,
        end_offset: end,
        leader_epoch: p.leader_epoch,
        max_timestamp: 1,
        size_bytes: 10,
        epochs: vec![(p.leader_epoch, base)],
    };
    let commit = |h: &Harness, node_id: i32, leader_epoch: i32, seg: RemoteSegment| {
        ControllerRequest::RemoteLog {
            node_id,
            broker_epoch: h.epochs[&node_id],
            change: RemoteLogChange::Commit {
                topic_id,
                partition: 0,
                leader_epoch,
                segment: seg,
            },
        }
    };
    let ok = ControllerResponse::RemoteLog { result: Ok(()) };
    assert_eq!(
        h.request(commit(&h, p.leader, p.leader_epoch, segment(0, 9))),
        ok
    );
    // Not the leader; an older leader epoch; a copy of offsets already owned: all refused.
    assert_eq!(
        h.request(commit(&h, follower, p.leader_epoch, segment(10, 19))),
        ControllerResponse::RemoteLog {
            result: Err(ControllerError::NotLeaderOrFollower)
        }
    );
    assert_eq!(
        h.request(commit(&h, p.leader, p.leader_epoch - 1, segment(10, 19))),
        ControllerResponse::RemoteLog {
            result: Err(ControllerError::FencedLeaderEpoch)
        }
    );
    assert!(matches!(
        h.request(commit(&h, p.leader, p.leader_epoch, segment(5, 19))),
        ControllerResponse::RemoteLog {
            result: Err(ControllerError::InvalidRequest(_))
        }
    ));
    assert_eq!(
        h.request(commit(&h, p.leader, p.leader_epoch, segment(10, 19))),
        ok
    );
    // The same commit again (a retry whose answer was lost) succeeds without a second copy, even
    // from a broker that no longer leads: it is in the log, and a refusal would have the uploader
    // delete the segment's objects.
    assert_eq!(
        h.request(commit(&h, p.leader, p.leader_epoch, segment(10, 19))),
        ok
    );
    assert_eq!(
        h.request(commit(&h, follower, p.leader_epoch, segment(10, 19))),
        ok
    );
    let remote = h.image.remote_log(topic_id, 0).expect("remote log");
    assert_eq!(
        remote
            .segments
            .iter()
            .map(|s| (s.base_offset, s.end_offset))
            .collect::<Vec<_>>(),
        vec![(0, 9), (10, 19)]
    );
    // Retention drops the oldest; deleting the topic leaves its objects to purge.
    let delete = ControllerRequest::RemoteLog {
        node_id: p.leader,
        broker_epoch: h.epochs[&p.leader],
        change: RemoteLogChange::Delete {
            topic_id,
            partition: 0,
            leader_epoch: p.leader_epoch,
            through_end_offset: 9,
            log_start_offset: 10,
        },
    };
    assert_eq!(h.request(delete), ok);
    let remote = h.image.remote_log(topic_id, 0).expect("remote log");
    assert_eq!(remote.start_offset(), Some(10));
    assert_eq!(remote.segments.len(), 1);
    h.request(ControllerRequest::DeleteTopics {
        names: vec!["t".into()],
    });
    assert!(h.image.remote_log(topic_id, 0).is_none());
    assert_eq!(
        h.image.remote_purges.get(&topic_id).map(String::as_str),
        Some("t")
    );
    let purged = ControllerRequest::RemoteLog {
        node_id: p.leader,
        broker_epoch: h.epochs[&p.leader],
        change: RemoteLogChange::Purged { topic_id },
    };
    assert_eq!(h.request(purged), ok);
    assert!(h.image.remote_purges.is_empty());
}

#[test]
fn dynamic_broker_configs_are_checked_stored_and_in_force_for_elections() {
    let mut h = Harness::new(&[("auto.leader.rebalance.enable", "false")]);
    h.register(1, 1000, true);
    h.heartbeat(1, false);
    h.register(2, 2000, true); // registered, still fenced: not in the ISR
    h.create_assigned("t", &[&[1, 2]], &[]);
    let change = |name: &str, value: Option<&str>| ConfigChangeSpec {
        name: name.into(),
        op: if value.is_some() { 0 } else { 1 },
        value: value.map(str::to_string),
    };
    let refused = |r: ControllerResponse, want: &str| {
        assert_eq!(
            r,
            ControllerResponse::Configs {
                result: Err(ControllerError::InvalidRequest(want.into()))
            }
        );
    };
    // Kafka's refusals: a key it does not reconfigure, a value of the wrong type.
    let r = h.request(ControllerRequest::SetBrokerConfigs {
        broker: None,
        configs: [("log.dirs".to_string(), "/x".to_string())].into(),
        validate_only: false,
    });
    refused(r, "Cannot update these configs dynamically: [log.dirs]");
    let r = h.request(ControllerRequest::AlterBrokerConfigs {
        broker: Some(1),
        changes: vec![change("message.max.bytes", Some("abc"))],
        validate_only: false,
    });
    refused(
        r,
        "Invalid value abc for configuration message.max.bytes: Not a number of type INT",
    );
    // A broker's own set is stored, and removed with its last key.
    let alter = |h: &mut Harness, broker, changes| {
        h.request(ControllerRequest::AlterBrokerConfigs {
            broker,
            changes,
            validate_only: false,
        })
    };
    let ok = ControllerResponse::Configs { result: Ok(()) };
    assert_eq!(
        alter(
            &mut h,
            Some(2),
            vec![change("log.retention.ms", Some("1000"))]
        ),
        ok
    );
    assert_eq!(
        h.image.broker_configs.of(Some(2)),
        Some(&[("log.retention.ms".to_string(), "1000".to_string())].into())
    );
    assert_eq!(
        alter(&mut h, Some(2), vec![change("log.retention.ms", None)]),
        ok
    );
    assert_eq!(h.image.broker_configs.of(Some(2)), None);
    // The cluster default turns unclean election on for every topic without its own value: once
    // 2 is unfenced and 1 dies, the out-of-sync 2 is elected at a tick (without it the partition
    // stays leaderless: `an_election_writing_more_than_the_record_bound_is_a_policy_violation`).
    assert_eq!(
        alter(
            &mut h,
            None,
            vec![change("unclean.leader.election.enable", Some("true"))]
        ),
        ok
    );
    h.run(SESSION_MS + 2_000, &[1]);
    assert_eq!(h.partition("t", 0).leader, 2);
}

#[test]
fn unregistering_a_broker_takes_it_out_of_every_isr_and_the_image() {
    let mut h = Harness::new(&[]);
    h.start(&[1, 2, 3]);
    h.create_assigned("t", &[&[3, 1, 2], &[1, 2, 3]], &[]);
    assert_eq!(h.partition("t", 0).leader, 3);

    let r = h.request(ControllerRequest::UnregisterBroker { node_id: 3 });
    assert!(matches!(r, ControllerResponse::Unregistered), "{r:?}");
    assert!(h.image.broker(3).is_none(), "the registration is gone");
    let p0 = h.partition("t", 0);
    assert_eq!(
        (p0.leader, p0.isr.clone()),
        (1, vec![1, 2]),
        "a new leader without 3"
    );
    assert_eq!(p0.replicas, vec![3, 1, 2], "its replica stays assigned");
    assert_eq!(h.partition("t", 1).isr, vec![1, 2]);

    // Gone: a second unregister is refused, and its heartbeat tells it to register again.
    let r = h.request(ControllerRequest::UnregisterBroker { node_id: 3 });
    assert!(
        matches!(
            r,
            ControllerResponse::Error {
                error: ControllerError::BrokerIdNotRegistered(3)
            }
        ),
        "{r:?}"
    );
    let r = h.heartbeat(3, false);
    assert!(
        matches!(
            r,
            ControllerResponse::Error {
                error: ControllerError::StaleBrokerEpoch
            }
        ),
        "{r:?}"
    );
    assert!(matches!(
        h.register(3, 3001, true),
        ControllerResponse::Registered { .. }
    ));
    assert!(h.image.broker(3).is_some(), "registered again");
}
