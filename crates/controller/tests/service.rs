//! The controller service, client and broker lifecycle over an in-memory quorum: a broker
//! registers and is unfenced by itself, admin requests commit before they are answered, and a node
//! that loses the quorum stops deciding.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use millrace_cluster::config::BrokerConfig;
use millrace_cluster::image::SharedImage;
use millrace_cluster::records::MetadataBatch;
use millrace_controller::messages::TopicSpec;
use millrace_controller::{
    BrokerInfo, BrokerLifecycle, CallError, ControllerClient, ControllerConfig, ControllerError,
    ControllerRequest, ControllerResponse, ControllerService, MetadataQuorum, ProposeError,
    QuorumView,
};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A quorum of one that commits at once, whose leadership the test can take away.
struct MemoryQuorum {
    image: Arc<SharedImage>,
    offset: Mutex<u64>,
    view: watch::Sender<QuorumView>,
}

impl MemoryQuorum {
    fn new(image: Arc<SharedImage>) -> Arc<Self> {
        Arc::new(Self {
            image,
            offset: Mutex::new(0),
            view: watch::Sender::new(QuorumView {
                leader: Some(1),
                is_leader: true,
                term: 1,
            }),
        })
    }
}

impl MetadataQuorum for MemoryQuorum {
    fn propose(&self, payload: Vec<u8>) -> BoxFuture<'_, Result<u64, ProposeError>> {
        Box::pin(async move {
            let view = *self.view.borrow();
            if !view.is_leader {
                return Err(ProposeError::NotLeader {
                    leader: view.leader,
                });
            }
            let batch = MetadataBatch::decode(&payload).map_err(ProposeError::Unknown)?;
            let mut offset = self.offset.lock();
            *offset += 1;
            self.image.apply_batch(*offset, &batch);
            Ok(*offset)
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

fn broker_config() -> BrokerConfig {
    let layer: BTreeMap<String, String> = BTreeMap::new();
    BrokerConfig::from_layers([&layer]).expect("config")
}

async fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_broker_registers_is_unfenced_and_topics_commit_before_the_answer() {
    let image = Arc::new(SharedImage::default());
    let quorum = MemoryQuorum::new(Arc::clone(&image));
    let stop = CancellationToken::new();
    let service = ControllerService::spawn(
        1,
        ControllerConfig::new(broker_config()),
        quorum.clone(),
        Arc::clone(&image),
        Vec::new(),
        stop.clone(),
    );
    let client = Arc::new(ControllerClient::new(
        1,
        quorum.clone(),
        Some(service.clone()),
    ));
    let lifecycle = BrokerLifecycle::new(
        BrokerInfo {
            node_id: 1,
            host: "127.0.0.1".into(),
            port: 9092,
            rack: None,
            listeners: Vec::new(),
            clean_shutdown: true,
            heartbeat_interval: Duration::from_millis(2000),
            request_timeout: Duration::from_secs(2),
        },
        Arc::clone(&client),
        Arc::clone(&image),
    );
    let started = std::time::Instant::now();
    tokio::spawn(lifecycle.clone().run(stop.clone()));
    wait_for("unfenced", || lifecycle.is_current(&image.current())).await;
    let unfenced_ms = started.elapsed().as_millis();
    assert!(unfenced_ms < 1000, "unfenced after {unfenced_ms} ms");
    assert!(image.current().cluster_id.is_some());

    let response = client
        .request(
            ControllerRequest::CreateTopics {
                topics: vec![TopicSpec {
                    name: "t".into(),
                    partitions: Some(3),
                    replication_factor: Some(1),
                    ..Default::default()
                }],
                validate_only: false,
            },
            Duration::from_secs(2),
        )
        .await;
    let ControllerResponse::CreateTopics { results } = response else {
        panic!("{response:?}")
    };
    let created = results[0].1.clone().expect("created");
    // Committed and applied before the answer.
    let topic = image.current().topic("t").cloned().expect("in the image");
    assert_eq!(topic.topic_id, created.topic_id);
    assert!(topic.partitions.iter().all(|p| p.leader == 1));

    // Controlled shutdown: the broker is let go and fenced.
    lifecycle.begin_controlled_shutdown();
    let mut watch = lifecycle.watch();
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if watch.borrow_and_update().is_some_and(|r| r.shut_down) {
                break;
            }
            let _ = watch.changed().await;
        }
    })
    .await
    .expect("controlled shutdown finished");
    assert!(image.current().broker(1).expect("b").fenced);
    stop.cancel();
}

#[tokio::test]
async fn a_node_that_loses_the_quorum_stops_deciding() {
    let image = Arc::new(SharedImage::default());
    let quorum = MemoryQuorum::new(Arc::clone(&image));
    let stop = CancellationToken::new();
    let service = ControllerService::spawn(
        1,
        ControllerConfig::new(broker_config()),
        quorum.clone(),
        Arc::clone(&image),
        Vec::new(),
        stop.clone(),
    );
    wait_for("bootstrap", || image.current().cluster_id.is_some()).await;
    quorum.view.send_replace(QuorumView {
        leader: Some(2),
        is_leader: false,
        term: 2,
    });
    let before = image.current().offset;
    let response = service
        .submit(ControllerRequest::DeleteTopics {
            names: vec!["x".into()],
        })
        .await;
    assert_eq!(
        response,
        ControllerResponse::Error {
            error: ControllerError::NotController { leader: Some(2) }
        }
    );
    assert_eq!(image.current().offset, before);
    stop.cancel();
}
