//! Goal: every kind of controller decision, however many records it makes, is committed in
//! metadata entries under the quorum's bound, and every prefix of those entries is an image that
//! whole decisions made (issue 39). Each test makes one decision large enough to need several
//! entries, through the real service, over an in-memory quorum that refuses an entry over
//! `ENTRY_PAYLOAD_BYTES_MAX` as the real one does and checks the image after every entry.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use millrace_cluster::acl::{AclOperation, AclPermission, PatternType, ResourceType, StandardAcl};
use millrace_cluster::config::BrokerConfig;
use millrace_cluster::image::{MetadataImage, PartitionRegistration, SharedImage, NO_LEADER};
use millrace_cluster::records::{MetadataBatch, MetadataRecord};
use millrace_controller::limits::DECISION_ENTRY_BYTES_TARGET;
use millrace_controller::messages::{
    ElectionType, IsrChange, PartitionsSpec, QuotaAlteration, ReassignTopicSpec, TopicSpec,
};
use millrace_controller::{
    CallError, ControllerConfig, ControllerError, ControllerRequest, ControllerResponse,
    ControllerService, MetadataQuorum, ProposeError, QuorumView,
};
use millrace_quorum::limits::ENTRY_PAYLOAD_BYTES_MAX;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Partitions in the tests' topics: enough that a change to each (~240 bytes) needs several
/// entries of `DECISION_ENTRY_BYTES_TARGET`.
const PARTITIONS: i32 = 6_000;

/// A quorum of one that commits at once, bounds every entry and checks every image it makes.
struct BoundedQuorum {
    image: Arc<SharedImage>,
    offset: Mutex<u64>,
    view: watch::Sender<QuorumView>,
    /// Payload bytes of every committed entry, in order.
    entries: Mutex<Vec<usize>>,
    /// What the image checks found, with the offset.
    problems: Mutex<Vec<String>>,
    /// Whether partitions are checked (a migrated single-node directory names its broker before
    /// that broker registers).
    check_partitions: std::sync::atomic::AtomicBool,
    /// Topics whose partition count every image must show whole: name → the counts allowed.
    whole_topics: Mutex<BTreeMap<String, Vec<usize>>>,
    /// Commit the entry at this offset, then answer that its outcome is unknown (0: never).
    unknown_at: AtomicU64,
}

impl BoundedQuorum {
    fn new(image: Arc<SharedImage>) -> Arc<Self> {
        Arc::new(Self {
            image,
            offset: Mutex::new(0),
            view: watch::Sender::new(QuorumView {
                leader: Some(1),
                is_leader: true,
                term: 1,
            }),
            entries: Mutex::new(Vec::new()),
            problems: Mutex::new(Vec::new()),
            check_partitions: std::sync::atomic::AtomicBool::new(true),
            whole_topics: Mutex::new(BTreeMap::new()),
            unknown_at: AtomicU64::new(0),
        })
    }

    /// What `check_image` requires of every image made by whole decisions.
    fn check(&self, offset: u64) {
        let image = self.image.current();
        let mut problems = Vec::new();
        for topic in image.topics.values() {
            if let Some(whole) = self.whole_topics.lock().get(&topic.name) {
                if !whole.contains(&topic.partitions.len()) {
                    problems.push(format!(
                        "topic {} has {} partitions, not one of {whole:?}",
                        topic.name,
                        topic.partitions.len()
                    ));
                }
            }
            if !self.check_partitions.load(Ordering::SeqCst) {
                continue;
            }
            for (index, p) in topic.partitions.iter().enumerate() {
                if let Some(why) = partition_problem(&image, p) {
                    problems.push(format!("{}-{index}: {why}", topic.name));
                    break;
                }
            }
        }
        self.problems.lock().extend(
            problems
                .into_iter()
                .map(|p| format!("at offset {offset}: {p}")),
        );
    }
}

/// The image invariants the simulator checks after every entry: ISR members registered and
/// unfenced; a leader in the ISR and active.
fn partition_problem(image: &MetadataImage, p: &PartitionRegistration) -> Option<String> {
    if let Some(m) = p
        .isr
        .iter()
        .find(|m| image.broker(**m).is_none_or(|b| b.fenced))
    {
        return Some(format!(
            "fenced or unregistered broker {m} in the ISR {:?}",
            p.isr
        ));
    }
    if p.leader != NO_LEADER && (!p.isr.contains(&p.leader) || !image.is_active(p.leader)) {
        return Some(format!(
            "leader {} inactive or outside the ISR {:?}",
            p.leader, p.isr
        ));
    }
    None
}

impl MetadataQuorum for BoundedQuorum {
    fn propose(&self, payload: Vec<u8>) -> BoxFuture<'_, Result<u64, ProposeError>> {
        Box::pin(async move {
            let view = *self.view.borrow();
            if !view.is_leader {
                return Err(ProposeError::NotLeader {
                    leader: view.leader,
                });
            }
            if payload.len() > ENTRY_PAYLOAD_BYTES_MAX {
                return Err(ProposeError::Refused(format!(
                    "payload of {} bytes exceeds the limit of {ENTRY_PAYLOAD_BYTES_MAX}",
                    payload.len()
                )));
            }
            let batch = MetadataBatch::decode(&payload).map_err(ProposeError::Unknown)?;
            let offset = {
                let mut offset = self.offset.lock();
                *offset += 1;
                self.image.apply_batch(*offset, &batch);
                *offset
            };
            self.entries.lock().push(payload.len());
            self.check(offset);
            if self.unknown_at.load(Ordering::SeqCst) == offset {
                return Err(ProposeError::Unknown("injected: outcome unknown".into()));
            }
            Ok(offset)
        })
    }

    fn view(&self) -> watch::Receiver<QuorumView> {
        self.view.subscribe()
    }

    fn call(
        &self,
        to: i32,
        _payload: Vec<u8>,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<Vec<u8>, CallError>> {
        Box::pin(async move {
            Err(CallError {
                node: to,
                reason: "no other nodes".into(),
            })
        })
    }
}

/// The service on a bounded quorum, with brokers 1..=3 registered and unfenced.
struct Harness {
    image: Arc<SharedImage>,
    quorum: Arc<BoundedQuorum>,
    service: Arc<ControllerService>,
    stop: CancellationToken,
    epochs: BTreeMap<i32, i64>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Harness {
    /// With a migrated topic, whose partitions every image must show whole; their leader and
    /// ISR are not checked (they name broker 1 before it registers).
    async fn start_unchecked(bootstrap: Vec<MetadataRecord>) -> Harness {
        let whole: Vec<(String, usize)> = bootstrap
            .iter()
            .filter_map(|r| match r {
                MetadataRecord::Topic { name, topic_id, .. } => Some((
                    name.clone(),
                    bootstrap
                        .iter()
                        .filter(|p| matches!(p, MetadataRecord::Partition { topic_id: t, .. } if t == topic_id))
                        .count(),
                )),
                _ => None,
            })
            .collect();
        Self::start_with(&[], bootstrap, |q| {
            q.check_partitions.store(false, Ordering::SeqCst);
            q.whole_topics
                .lock()
                .extend(whole.into_iter().map(|(n, c)| (n, vec![c])));
        })
        .await
    }

    async fn start(settings: &[(&str, &str)], bootstrap: Vec<MetadataRecord>) -> Harness {
        Self::start_with(settings, bootstrap, |_| {}).await
    }

    async fn start_with(
        settings: &[(&str, &str)],
        bootstrap: Vec<MetadataRecord>,
        prepare: impl FnOnce(&BoundedQuorum),
    ) -> Harness {
        let mut layer: BTreeMap<String, String> = BTreeMap::new();
        // No session expires and no rebalance runs unless a test asks.
        layer.insert("broker.session.timeout.ms".into(), "600000".into());
        layer.insert("auto.leader.rebalance.enable".into(), "false".into());
        for (k, v) in settings {
            layer.insert((*k).into(), (*v).into());
        }
        let config = BrokerConfig::from_layers([&layer]).expect("config");
        let image = Arc::new(SharedImage::default());
        let quorum = BoundedQuorum::new(Arc::clone(&image));
        prepare(&quorum);
        let stop = CancellationToken::new();
        let service = ControllerService::spawn(
            1,
            ControllerConfig::new(config),
            quorum.clone(),
            Arc::clone(&image),
            bootstrap,
            stop.clone(),
        );
        let mut h = Harness {
            image,
            quorum,
            service,
            stop,
            epochs: BTreeMap::new(),
        };
        for node in 1..=3 {
            h.join(node, true).await;
        }
        h
    }

    /// The quorum elects this node again in a new term: the service activates anew, and the
    /// sessions it grants hold no broker id against a new incarnation — as after a single node's
    /// kill -9, when the controller restarts with the broker.
    fn new_term(&self) {
        self.quorum.view.send_modify(|v| v.term += 1);
    }

    async fn decide(&self, req: ControllerRequest) -> ControllerResponse {
        tokio::time::timeout(Duration::from_secs(60), self.service.submit(req))
            .await
            .expect("decided within 60 s")
    }

    /// Registers a new incarnation of `node` and unfences it.
    async fn join(&mut self, node: i32, clean: bool) {
        let epoch = self.register(node, clean).await;
        self.unfence(node, epoch).await;
    }

    async fn register(&mut self, node: i32, clean_shutdown: bool) -> i64 {
        let response = self
            .decide(ControllerRequest::RegisterBroker {
                node_id: node,
                incarnation_id: Uuid::new_v4(),
                host: "127.0.0.1".into(),
                port: 9000 + u16::try_from(node).expect("small"),
                rack: None,
                clean_shutdown,
                listeners: Vec::new(),
            })
            .await;
        let ControllerResponse::Registered { broker_epoch } = response else {
            panic!("registration of {node}: {response:?}")
        };
        self.epochs.insert(node, broker_epoch);
        broker_epoch
    }

    async fn heartbeat(&self, node: i32, want_shutdown: bool) -> ControllerResponse {
        self.decide(ControllerRequest::BrokerHeartbeat {
            node_id: node,
            broker_epoch: self.epochs[&node],
            metadata_offset: self.image.current().offset,
            want_fence: false,
            want_shutdown,
            offline_replicas: Vec::new(),
        })
        .await
    }

    async fn unfence(&self, node: i32, epoch: i64) {
        let response = self.heartbeat(node, false).await;
        assert!(
            matches!(
                response,
                ControllerResponse::Heartbeat {
                    is_fenced: false,
                    ..
                }
            ),
            "unfencing {node} (epoch {epoch}): {response:?}"
        );
    }

    async fn create_topic(&self, name: &str, partitions: i32, rf: i16) {
        self.quorum.whole_topics.lock().insert(
            name.into(),
            vec![usize::try_from(partitions).expect("positive")],
        );
        let response = self
            .decide(ControllerRequest::CreateTopics {
                topics: vec![TopicSpec {
                    name: name.into(),
                    partitions: Some(partitions),
                    replication_factor: Some(rf),
                    ..Default::default()
                }],
                validate_only: false,
            })
            .await;
        assert!(
            matches!(&response, ControllerResponse::CreateTopics { results } if results[0].1.is_ok()),
            "{response:?}"
        );
    }

    fn entries(&self) -> usize {
        self.quorum.entries.lock().len()
    }

    /// Asserts that the entries committed since `mark` are several, each under the bounds, and
    /// that every image they made passed the checks; returns how many there were.
    fn assert_split_since(&self, mark: usize, what: &str) -> usize {
        let entries = self.quorum.entries.lock()[mark..].to_vec();
        assert!(
            entries.len() >= 2,
            "{what}: {} entries, expected a transaction of several ({entries:?})",
            entries.len()
        );
        for bytes in &entries {
            assert!(
                *bytes <= DECISION_ENTRY_BYTES_TARGET,
                "{what}: an entry of {bytes} bytes"
            );
        }
        self.assert_valid(what);
        entries.len()
    }

    fn assert_valid(&self, what: &str) {
        let problems = self.quorum.problems.lock().clone();
        assert!(problems.is_empty(), "{what}: {}", problems.join("\n"));
        assert!(
            self.image.current().transaction.is_none(),
            "{what}: a transaction is left open"
        );
    }

    fn partitions_led_by(&self, node: i32) -> usize {
        let image = self.image.current();
        image
            .topics
            .values()
            .flat_map(|t| t.partitions.iter())
            .filter(|p| p.leader == node)
            .count()
    }

    fn isrs_with(&self, node: i32) -> usize {
        let image = self.image.current();
        image
            .topics
            .values()
            .flat_map(|t| t.partitions.iter())
            .filter(|p| p.isr.contains(&node))
            .count()
    }
}

#[tokio::test]
async fn creating_a_topic_of_thousands_of_partitions_is_whole_in_every_image() {
    let h = Harness::start(&[], Vec::new()).await;
    let mark = h.entries();
    h.create_topic("big", PARTITIONS, 3).await;
    let n = h.assert_split_since(mark, "CreateTopics");
    let image = h.image.current();
    let topic = image.topic("big").expect("created");
    assert_eq!(topic.partition_count(), PARTITIONS);
    assert!(topic.partitions.iter().all(|p| p.isr.len() == 3));
    eprintln!("CreateTopics of {PARTITIONS} partitions × 3: {n} entries");
}

#[tokio::test]
async fn adding_thousands_of_partitions_is_whole_in_every_image() {
    let h = Harness::start(&[], Vec::new()).await;
    h.create_topic("grow", 1, 3).await;
    // The topic has 1 partition until the decision ends, then all of them.
    h.quorum
        .whole_topics
        .lock()
        .insert("grow".into(), vec![1, 1 + PARTITIONS as usize]);
    let mark = h.entries();
    let response = h
        .decide(ControllerRequest::CreatePartitions {
            topics: vec![PartitionsSpec {
                name: "grow".into(),
                count: 1 + PARTITIONS,
                assignments: None,
            }],
            validate_only: false,
        })
        .await;
    assert!(
        matches!(&response, ControllerResponse::CreatePartitions { results } if results[0].1.is_ok()),
        "{response:?}"
    );
    h.assert_split_since(mark, "CreatePartitions");
    assert_eq!(
        h.image.current().topic("grow").map(|t| t.partition_count()),
        Some(1 + PARTITIONS)
    );
}

#[tokio::test]
async fn creating_and_deleting_ten_thousand_topics_take_several_entries_each() {
    let h = Harness::start(&[], Vec::new()).await;
    let names: Vec<String> = (0..10_000).map(|i| format!("t{i:05}")).collect();
    let mark = h.entries();
    let response = h
        .decide(ControllerRequest::CreateTopics {
            topics: names
                .iter()
                .map(|n| TopicSpec {
                    name: n.clone(),
                    partitions: Some(1),
                    replication_factor: Some(1),
                    ..Default::default()
                })
                .collect(),
            validate_only: false,
        })
        .await;
    assert!(matches!(response, ControllerResponse::CreateTopics { .. }));
    h.assert_split_since(mark, "CreateTopics of 10,000 topics");
    assert_eq!(h.image.current().topics.len(), 10_000);

    let mark = h.entries();
    let response = h
        .decide(ControllerRequest::DeleteTopics {
            names: names.clone(),
        })
        .await;
    let ControllerResponse::DeleteTopics { results } = response else {
        panic!("{response:?}")
    };
    assert!(results.iter().all(|(_, r)| r.is_ok()));
    h.assert_split_since(mark, "DeleteTopics of 10,000 topics");
    assert!(h.image.current().topics.is_empty());
}

#[tokio::test]
async fn a_new_incarnation_of_a_broker_in_thousands_of_isrs_registers_with_the_last_entrys_epoch() {
    let mut h = Harness::start(&[], Vec::new()).await;
    h.create_topic("big", PARTITIONS, 3).await;
    assert_eq!(
        h.isrs_with(1),
        usize::try_from(PARTITIONS).expect("positive")
    );
    assert!(h.partitions_led_by(1) > 0);
    let old_epoch = h.epochs[&1];
    h.new_term();
    let mark = h.entries();
    // Restarted after kill -9: a new incarnation, unclean.
    let epoch = h.register(1, false).await;
    // The activation's barrier, then the registration.
    assert!(h.assert_split_since(mark + 1, "registration") >= 2);
    // The broker epoch is the offset of the entry where the registration took effect: the last.
    assert_eq!(epoch, i64::try_from(h.entries()).expect("small"));
    let image = h.image.current();
    let b = image.broker(1).expect("registered");
    assert_eq!(b.broker_epoch, epoch);
    assert!(epoch > old_epoch && b.fenced);
    assert_eq!((h.isrs_with(1), h.partitions_led_by(1)), (0, 0));
    // The epoch it was answered with is the one heartbeats must carry.
    h.unfence(1, epoch).await;
    h.assert_valid("unfencing after the registration");
}

#[tokio::test]
async fn unfencing_a_broker_that_thousands_of_partitions_wait_for_elects_it_in_one_transaction() {
    let mut h = Harness::start(&[], Vec::new()).await;
    // Every partition on broker 1 alone: while it is away none has a leader.
    let response = h
        .decide(ControllerRequest::CreateTopics {
            topics: vec![TopicSpec {
                name: "solo".into(),
                assignments: (0..PARTITIONS).map(|p| (p, vec![1])).collect(),
                ..Default::default()
            }],
            validate_only: false,
        })
        .await;
    assert!(matches!(response, ControllerResponse::CreateTopics { .. }));
    h.new_term();
    h.register(1, true).await;
    assert_eq!(h.partitions_led_by(1), 0);
    let mark = h.entries();
    h.unfence(1, h.epochs[&1]).await;
    h.assert_split_since(mark, "unfencing");
    assert_eq!(
        h.partitions_led_by(1),
        usize::try_from(PARTITIONS).expect("positive")
    );
}

#[tokio::test]
async fn a_controlled_shutdown_of_a_broker_in_thousands_of_isrs_moves_everything_at_once() {
    let h = Harness::start(&[], Vec::new()).await;
    h.create_topic("big", PARTITIONS, 3).await;
    let mark = h.entries();
    let response = h.heartbeat(1, true).await;
    assert!(
        matches!(response, ControllerResponse::Heartbeat { .. }),
        "{response:?}"
    );
    h.assert_split_since(mark, "controlled shutdown");
    assert!(
        h.image
            .current()
            .broker(1)
            .expect("b")
            .in_controlled_shutdown
    );
    assert_eq!(h.partitions_led_by(1), 0);
}

#[tokio::test]
async fn fencing_a_broker_whose_session_expired_moves_thousands_of_leaderships() {
    let h = Harness::start(&[("broker.session.timeout.ms", "3000")], Vec::new()).await;
    h.create_topic("big", PARTITIONS, 3).await;
    let led = h.partitions_led_by(1);
    assert!(led > 0);
    let mark = h.entries();
    // Brokers 2 and 3 keep their sessions; broker 1 goes silent.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !h.image.current().broker(1).expect("b").fenced {
        assert!(
            tokio::time::Instant::now() < deadline,
            "broker 1 not fenced within 30 s"
        );
        for node in [2, 3] {
            h.heartbeat(node, false).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    h.assert_split_since(mark, "fencing");
    assert_eq!((h.partitions_led_by(1), h.isrs_with(1)), (0, 0));
}

#[tokio::test]
async fn a_preferred_election_of_thousands_of_partitions_commits_in_several_entries() {
    let h = Harness::start(&[], Vec::new()).await;
    h.create_topic("big", PARTITIONS, 3).await;
    // Rotate every replica list: the same replicas, each partition's preferred leader another.
    let image = h.image.current();
    let rotated: Vec<(i32, Option<Vec<i32>>)> = image
        .topic("big")
        .expect("big")
        .partitions
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut target = p.replicas.clone();
            target.rotate_left(1);
            (i32::try_from(i).expect("small"), Some(target))
        })
        .collect();
    let response = h
        .decide(ControllerRequest::AlterPartitionReassignments {
            topics: vec![ReassignTopicSpec {
                name: "big".into(),
                partitions: rotated,
            }],
            allow_replication_factor_change: true,
        })
        .await;
    assert!(matches!(
        response,
        ControllerResponse::AlterPartitionReassignments { .. }
    ));
    let not_preferred = |image: &MetadataImage| {
        image
            .topics
            .values()
            .flat_map(|t| t.partitions.iter())
            .filter(|p| p.leader != p.preferred_leader())
            .count()
    };
    assert_eq!(not_preferred(&h.image.current()), PARTITIONS as usize);
    let mark = h.entries();
    let response = h
        .decide(ControllerRequest::ElectLeaders {
            election: ElectionType::Preferred,
            partitions: None,
        })
        .await;
    assert!(
        matches!(response, ControllerResponse::ElectLeaders { .. }),
        "{response:?}"
    );
    h.assert_split_since(mark, "ElectLeaders");
    assert_eq!(not_preferred(&h.image.current()), 0);
}

#[tokio::test]
async fn reassigning_thousands_of_partitions_commits_in_several_entries() {
    let mut h = Harness::start(&[], Vec::new()).await;
    h.create_topic("big", PARTITIONS, 3).await;
    h.join(4, true).await;
    let image = h.image.current();
    let targets: Vec<(i32, Option<Vec<i32>>)> = image
        .topic("big")
        .expect("big")
        .partitions
        .iter()
        .enumerate()
        .filter(|(_, p)| !p.replicas.contains(&4))
        .map(|(i, p)| {
            let mut target = p.replicas.clone();
            target.retain(|&b| b != 1);
            target.push(4);
            target.truncate(3);
            (i32::try_from(i).expect("small"), Some(target))
        })
        .collect();
    assert_eq!(targets.len(), PARTITIONS as usize);
    let mark = h.entries();
    let response = h
        .decide(ControllerRequest::AlterPartitionReassignments {
            topics: vec![ReassignTopicSpec {
                name: "big".into(),
                partitions: targets,
            }],
            allow_replication_factor_change: true,
        })
        .await;
    assert!(
        matches!(
            response,
            ControllerResponse::AlterPartitionReassignments { .. }
        ),
        "{response:?}"
    );
    h.assert_split_since(mark, "AlterPartitionReassignments");
    let image = h.image.current();
    let adding = image
        .topic("big")
        .expect("big")
        .partitions
        .iter()
        .filter(|p| p.adding_replicas.contains(&4) || p.replicas.contains(&4))
        .count();
    assert_eq!(adding, usize::try_from(PARTITIONS).expect("positive"));
}

#[tokio::test]
async fn a_leaders_batch_of_thousands_of_isr_changes_commits_in_several_entries() {
    let h = Harness::start(&[], Vec::new()).await;
    h.create_topic("big", 3 * PARTITIONS / 2, 3).await;
    let image = h.image.current();
    let topic = image.topic("big").expect("big");
    // Broker 1 shrinks the ISR of every partition it leads to itself and one follower.
    let changes: Vec<IsrChange> = topic
        .partitions
        .iter()
        .enumerate()
        .filter(|(_, p)| p.leader == 1)
        .map(|(i, p)| IsrChange {
            topic_id: topic.topic_id,
            partition: i32::try_from(i).expect("small"),
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr: p.isr.iter().take(2).map(|&b| (b, -1)).collect(),
        })
        .collect();
    let led = changes.len();
    assert!(led > 2_500, "{led}");
    let mark = h.entries();
    let response = h
        .decide(ControllerRequest::AlterPartitions {
            node_id: 1,
            broker_epoch: h.epochs[&1],
            changes,
        })
        .await;
    let ControllerResponse::AlterPartitions { results } = response else {
        panic!("{response:?}")
    };
    assert_eq!(results.len(), led);
    assert!(
        results.iter().all(Result::is_ok),
        "{:?}",
        results.iter().find(|r| r.is_err())
    );
    h.assert_split_since(mark, "AlterPartitions");
    let image = h.image.current();
    let shrunk = image
        .topic("big")
        .expect("big")
        .partitions
        .iter()
        .filter(|p| p.leader == 1 && p.isr.len() == 2)
        .count();
    assert_eq!(shrunk, led);
}

fn acl(i: usize) -> StandardAcl {
    StandardAcl {
        resource_type: ResourceType::Topic,
        resource_name: format!("topic-{i}"),
        pattern_type: PatternType::Literal,
        principal: format!("User:user-{i}"),
        host: "*".into(),
        operation: AclOperation::Read,
        permission: AclPermission::Allow,
    }
}

#[tokio::test]
async fn acl_and_quota_batches_of_thousands_commit_in_several_entries() {
    let h = Harness::start(&[], Vec::new()).await;
    let mark = h.entries();
    let response = h
        .decide(ControllerRequest::CreateAcls {
            acls: (0..PARTITIONS as usize).map(acl).collect(),
        })
        .await;
    let ControllerResponse::CreateAcls { results } = response else {
        panic!("{response:?}")
    };
    assert!(results.iter().all(Result::is_ok));
    h.assert_split_since(mark, "CreateAcls");
    assert_eq!(h.image.current().acls.len(), PARTITIONS as usize);

    let mark = h.entries();
    let response = h
        .decide(ControllerRequest::AlterClientQuotas {
            entries: (0..PARTITIONS)
                .map(|i| QuotaAlteration {
                    entity: vec![("user".into(), Some(format!("user-{i}")))],
                    changes: vec![
                        ("producer_byte_rate".into(), Some(1_048_576.0)),
                        ("consumer_byte_rate".into(), Some(2_097_152.0)),
                    ],
                })
                .collect(),
            validate_only: false,
        })
        .await;
    let ControllerResponse::AlterClientQuotas { results } = response else {
        panic!("{response:?}")
    };
    assert!(results.iter().all(Result::is_ok));
    h.assert_split_since(mark, "AlterClientQuotas");
    assert_eq!(h.image.current().client_quotas.len(), PARTITIONS as usize);
}

#[tokio::test]
async fn a_migrated_data_directory_of_thousands_of_partitions_bootstraps_in_several_entries() {
    let topic_id = Uuid::new_v4();
    let mut bootstrap = vec![MetadataRecord::Topic {
        name: "migrated".into(),
        topic_id,
        configs: Default::default(),
    }];
    bootstrap.extend((0..PARTITIONS).map(|p| MetadataRecord::Partition {
        topic_id,
        partition: p,
        registration: PartitionRegistration::new(vec![1]),
    }));
    let h = Harness::start_unchecked(bootstrap).await;
    // Entry 1 is the barrier; the bootstrap follows, then brokers 1..=3 registered.
    let entries = h.quorum.entries.lock().clone();
    assert!(
        entries.len() > 4 && entries.iter().all(|b| *b <= DECISION_ENTRY_BYTES_TARGET),
        "{entries:?}"
    );
    h.assert_valid("bootstrap");
    let image = h.image.current();
    assert_eq!(
        image.topic("migrated").map(|t| t.partition_count()),
        Some(PARTITIONS)
    );
    assert!(image.cluster_id.is_some());
}

#[tokio::test]
async fn a_transaction_whose_outcome_was_lost_is_aborted_before_the_next_decision() {
    let mut h = Harness::start(&[], Vec::new()).await;
    h.create_topic("big", PARTITIONS, 3).await;
    h.new_term();
    h.decide(ControllerRequest::ListPartitionReassignments { topics: None })
        .await;
    let before = h.image.current();
    // The registration's first entry commits but its answer is lost.
    let first = h.entries() as u64 + 1;
    h.quorum.unknown_at.store(first, Ordering::SeqCst);
    let response = h
        .decide(ControllerRequest::RegisterBroker {
            node_id: 1,
            incarnation_id: Uuid::new_v4(),
            host: "127.0.0.1".into(),
            port: 9001,
            rack: None,
            clean_shutdown: false,
            listeners: Vec::new(),
        })
        .await;
    assert!(
        matches!(
            response,
            ControllerResponse::Error {
                error: ControllerError::Timeout(_)
            }
        ),
        "{response:?}"
    );
    let open = h.image.current();
    assert!(open.transaction.is_some(), "the first entry began it");
    assert_eq!(open.brokers, before.brokers);
    assert_eq!(open.topics, before.topics);
    // The next decision first aborts it; then the broker's retry registers it whole.
    let aborted_before = millrace_metrics::global()
        .controller_metadata_transactions_aborted
        .get();
    let epoch = h.register(1, false).await;
    assert!(
        millrace_metrics::global()
            .controller_metadata_transactions_aborted
            .get()
            > aborted_before
    );
    h.assert_valid("after the abort");
    assert_eq!(h.image.current().broker(1).expect("b").broker_epoch, epoch);
    assert_eq!(h.isrs_with(1), 0);
}

#[tokio::test]
async fn a_record_that_can_never_fit_an_entry_is_refused_not_retried() {
    let h = Harness::start(&[], Vec::new()).await;
    let mut huge = acl(0);
    huge.principal = format!("User:{}", "x".repeat(DECISION_ENTRY_BYTES_TARGET));
    let refused_before = millrace_metrics::global()
        .controller_decisions_refused
        .get();
    let mark = h.entries();
    let response = h
        .decide(ControllerRequest::CreateAcls {
            acls: vec![huge, acl(1)],
        })
        .await;
    assert!(
        matches!(
            &response,
            ControllerResponse::Error {
                error: ControllerError::PolicyViolation(m)
            } if m.contains("does not fit")
        ),
        "{response:?}"
    );
    assert_eq!(h.entries(), mark, "nothing was committed");
    assert!(
        millrace_metrics::global()
            .controller_decisions_refused
            .get()
            > refused_before
    );
    // The controller goes on deciding.
    let response = h
        .decide(ControllerRequest::CreateAcls { acls: vec![acl(2)] })
        .await;
    assert!(matches!(response, ControllerResponse::CreateAcls { .. }));
    h.assert_valid("after the refusal");
}
