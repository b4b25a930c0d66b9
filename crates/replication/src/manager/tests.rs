//! The replica manager over a real store in a temporary directory, a metadata image built by hand
//! and a controller that only records what it is sent: leading only while current, the `acks=all`
//! wait (committed, timed out, refused when leadership moves) and ISR changes on their way to the
//! controller (sent again after an internal error, never sent without a registration).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use millrace_cluster::image::{PartitionRegistration, SharedImage};
use millrace_cluster::records::{MetadataBatch, MetadataRecord, PartitionChangeBuilder};
use millrace_cluster::BrokerConfig;
use millrace_controller::messages::ControllerError;
use millrace_controller::{
    CallError, ControllerClient, ControllerRequest, ControllerResponse, MetadataQuorum,
    ProposeError, QuorumView,
};
use millrace_store::testing::encode_batch;
use millrace_store::{Store, StoreConfig, TopicPartition};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::*;

const TOPIC_ID: Uuid = Uuid::from_u128(42);

/// What the controller on another node was sent; it answers every request with an internal
/// error (an outcome the broker cannot know), per change for `AlterPartitions`.
#[derive(Default)]
struct RecordingController {
    requests: Mutex<Vec<ControllerRequest>>,
}

struct RecordingQuorum {
    controller: Arc<RecordingController>,
    view: tokio::sync::watch::Sender<QuorumView>,
}

impl MetadataQuorum for RecordingQuorum {
    fn propose(&self, _payload: Vec<u8>) -> BoxFuture<'_, Result<u64, ProposeError>> {
        Box::pin(async { Err(ProposeError::NotLeader { leader: Some(9) }) })
    }
    fn view(&self) -> tokio::sync::watch::Receiver<QuorumView> {
        self.view.subscribe()
    }
    fn call(
        &self,
        _to: i32,
        payload: Vec<u8>,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<Vec<u8>, CallError>> {
        let internal = ControllerError::Internal("recorded".into());
        let answer = match ControllerRequest::decode(&payload) {
            Ok(request) => {
                let answer = match &request {
                    ControllerRequest::AlterPartitions { changes, .. } => {
                        ControllerResponse::AlterPartitions {
                            results: vec![Err(internal); changes.len()],
                        }
                    }
                    _ => ControllerResponse::Error { error: internal },
                };
                self.controller.requests.lock().push(request);
                answer
            }
            Err(e) => ControllerResponse::Error {
                error: ControllerError::InvalidRequest(e),
            },
        };
        Box::pin(async move { Ok(answer.to_wire()) })
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    manager: Arc<ReplicaManager>,
    image: Arc<SharedImage>,
    controller: Arc<RecordingController>,
    tp: TopicPartition,
    next_offset: u64,
}

impl Fixture {
    /// Broker 1 (this one) and broker 2 registered and unfenced; topic `t` with one partition
    /// on `replicas`, led by the first.
    fn new(replicas: &[i32], configs: &[(&str, &str)]) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(StoreConfig::new(dir.path())).expect("store");
        let layer: BTreeMap<String, String> = configs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let broker = BrokerConfig::from_layers([&layer]).expect("config");
        let controller = Arc::new(RecordingController::default());
        let quorum = RecordingQuorum {
            controller: Arc::clone(&controller),
            view: tokio::sync::watch::channel(QuorumView {
                leader: Some(9),
                is_leader: false,
                term: 1,
            })
            .0,
        };
        let image = Arc::new(SharedImage::default());
        let registrations = [1, 2]
            .into_iter()
            .map(|node_id| MetadataRecord::RegisterBroker {
                node_id,
                incarnation_id: Uuid::from_u128(node_id as u128),
                host: "127.0.0.1".into(),
                port: 9092,
                rack: None,
                listeners: Vec::new(),
                clean_shutdown: true,
            })
            .collect();
        image.apply_batch(1, &MetadataBatch::new(registrations));
        let mut records: Vec<MetadataRecord> = [1, 2]
            .into_iter()
            .map(|node_id| MetadataRecord::UnfenceBroker {
                node_id,
                broker_epoch: 1,
            })
            .collect();
        records.push(MetadataRecord::Topic {
            name: "t".into(),
            topic_id: TOPIC_ID,
            configs: Default::default(),
        });
        records.push(MetadataRecord::Partition {
            topic_id: TOPIC_ID,
            partition: 0,
            registration: PartitionRegistration::new(replicas.to_vec()),
        });
        image.apply_batch(2, &MetadataBatch::new(records));
        let manager = ReplicaManager::new(
            ReplicaManagerConfig {
                node_id: 1,
                broker,
                peer_addresses: BTreeMap::new(),
                inter_broker: Default::default(),
            },
            store,
            Arc::clone(&image),
            Arc::new(ControllerClient::new(1, Arc::new(quorum), None)),
            CancellationToken::new(),
        );
        Fixture {
            _dir: dir,
            manager,
            image,
            controller,
            tp: TopicPartition::new("t", 0),
            next_offset: 3,
        }
    }

    fn apply(&self, current: bool) {
        self.manager.apply_image(&self.image.current(), current);
    }

    /// Commits a change of the partition's leader (a new leader epoch) and applies it.
    fn move_leader(&mut self, leader: i32) {
        let change = PartitionChangeBuilder {
            leader: Some(leader),
            ..MetadataRecord::partition_change(TOPIC_ID, 0)
        }
        .build();
        self.image
            .apply_batch(self.next_offset, &MetadataBatch::new(vec![change]));
        self.next_offset += 1;
        self.apply(true);
    }

    /// Commits new configs for the topic and applies them.
    fn set_topic_configs(&mut self, configs: &[(&str, &str)]) {
        let entries = configs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let record = MetadataRecord::TopicConfigs {
            topic_id: TOPIC_ID,
            configs: millrace_cluster::config::TopicConfigs::new(entries).expect("configs"),
        };
        self.image
            .apply_batch(self.next_offset, &MetadataBatch::new(vec![record]));
        self.next_offset += 1;
        self.apply(true);
    }

    fn append(&self, acks: i16) -> Result<(AppendInfo, Option<AckWait>), ReplicaError> {
        let batch = encode_batch(&[(None, Some(b"v"), 0)], -1, -1, -1);
        self.manager.append(&self.tp, batch, acks)
    }

    fn requests(&self) -> Vec<ControllerRequest> {
        self.controller.requests.lock().clone()
    }
}

/// Polls `f` every 20 ms for at most `limit`; whether it became true.
async fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

/// Whether `r` proposes the ISR [1] for partition 0 under broker epoch `epoch`.
fn is_shrink_to_leader(r: &ControllerRequest, epoch: i64) -> bool {
    matches!(r, ControllerRequest::AlterPartitions { node_id: 1, broker_epoch, changes }
        if *broker_epoch == epoch
            && changes.len() == 1
            && changes[0].partition == 0
            && changes[0].new_isr.iter().map(|(b, _)| *b).eq([1]))
}

#[tokio::test]
async fn a_replica_leads_only_while_the_image_shows_this_process_current() {
    let f = Fixture::new(&[1], &[]);
    let became = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&became);
    f.manager.on_leadership(Box::new(move |change| {
        if let LeadershipChange::Became { leader_epoch, .. } = change {
            seen.lock().push(leader_epoch);
        }
    }));
    f.apply(false);
    assert!(matches!(
        f.append(-1),
        Err(ReplicaError::Partition(PartitionError::NotLeader { .. }))
    ));
    assert!(became.lock().is_empty());
    f.apply(true);
    assert_eq!(*became.lock(), vec![0]);
    assert!(f.append(-1).is_ok());
}

#[tokio::test]
async fn an_acks_all_append_is_answered_once_the_high_watermark_passes_it() {
    let f = Fixture::new(&[1], &[]);
    f.apply(true);
    let (info, wait) = f.append(-1).expect("appended");
    assert_eq!(info.base_offset, 0);
    let wait = wait.expect("acks=all waits");
    assert_eq!(wait.wait(Duration::from_secs(10)).await, Ok(()));
    let hosted = f.manager.partition(&f.tp).expect("hosted");
    assert_eq!(hosted.log.high_watermark(), 1);
}

#[tokio::test]
async fn an_acks_all_wait_times_out_without_its_follower_and_ends_when_leadership_moves() {
    let mut f = Fixture::new(&[1, 2], &[]);
    f.apply(true);
    let (_, wait) = f.append(-1).expect("appended");
    let started = tokio::time::Instant::now();
    assert_eq!(
        wait.expect("waits").wait(Duration::from_millis(300)).await,
        Err(AckError::Timeout),
        "broker 2 never fetches: the HW stays"
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    let (_, wait) = f.append(-1).expect("appended");
    let waiting = tokio::spawn(wait.expect("waits").wait(Duration::from_secs(30)));
    tokio::time::sleep(Duration::from_millis(50)).await;
    f.move_leader(2);
    let answer = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("answered before its deadline")
        .expect("joined");
    assert_eq!(answer, Err(AckError::NotLeader));
}

#[tokio::test]
async fn an_isr_change_answered_with_an_internal_error_is_sent_again() {
    // Broker 2 never fetches: after replica.lag.time.max.ms the leader shrinks the ISR to [1].
    let f = Fixture::new(&[1, 2], &[("replica.lag.time.max.ms", "200")]);
    f.manager.set_broker_epoch(7);
    f.apply(true);
    let sent = eventually(Duration::from_secs(10), || {
        f.requests()
            .iter()
            .filter(|r| is_shrink_to_leader(r, 7))
            .count()
            >= 2
    })
    .await;
    assert!(
        sent,
        "the shrink is sent, answered with an internal error, and sent again: {:?}",
        f.requests()
    );
}

#[tokio::test]
async fn an_isr_change_is_not_sent_without_a_registration() {
    let f = Fixture::new(&[1, 2], &[("replica.lag.time.max.ms", "200")]);
    f.apply(true);
    // Well past the lag time and several ISR checks: nothing reaches the controller.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(f.requests().is_empty(), "{:?}", f.requests());
    // Once registered, the pending shrink goes out.
    f.manager.set_broker_epoch(3);
    let sent = eventually(Duration::from_secs(10), || {
        f.requests().iter().any(|r| is_shrink_to_leader(r, 3))
    })
    .await;
    assert!(sent, "{:?}", f.requests());
}

#[tokio::test]
async fn a_topic_config_change_reaches_its_replicas_without_a_partition_change() {
    let mut f = Fixture::new(&[1], &[]);
    f.apply(true);
    assert!(f.append(-1).is_ok(), "ISR [1] meets min.insync.replicas 1");
    f.set_topic_configs(&[("min.insync.replicas", "2")]);
    assert!(matches!(
        f.append(-1),
        Err(ReplicaError::Partition(PartitionError::NotEnoughReplicas))
    ));
    assert!(f.append(1).is_ok(), "acks=1 does not need the ISR");
}
