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
