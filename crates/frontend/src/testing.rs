//! An in-process single-node broker context for tests and the fuzz targets: a store in a given
//! directory, a committed metadata image in which node 1 leads every listed topic, a replica
//! manager hosting their partitions, and a group coordinator leading `__consumer_offsets`. There
//! is no controller quorum (requests that reach the controller fail as if it were unreachable).
//! The broker binary never uses this module.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use millrace_cluster::image::{PartitionRegistration, SharedImage};
use millrace_cluster::records::{MetadataBatch, MetadataRecord};
use millrace_cluster::{BrokerConfig, BrokerEndpoint, Cluster};
use millrace_controller::{
    BrokerInfo, BrokerLifecycle, CallError, ControllerClient, MetadataQuorum, ProducerIdAllocator,
    ProposeError, QuorumView,
};
use millrace_groups::{
    CoordinatorConfig, DurableGroupLog, GroupConfig, GroupCoordinator, LoadHold,
};
use millrace_replication::{ReplicaManager, ReplicaManagerConfig};
use millrace_store::{Store, TopicPartition};
use tokio_util::sync::CancellationToken;

use crate::BrokerContext;

/// The node id of the single node.
pub const NODE_ID: i32 = 1;
/// Partitions of `__consumer_offsets` in this context.
pub const OFFSETS_PARTITIONS: i32 = 3;

/// A quorum that is never reachable: proposals and controller calls fail; its view never
/// changes (no leader).
struct NoQuorum {
    view: tokio::sync::watch::Sender<QuorumView>,
}

impl MetadataQuorum for NoQuorum {
    fn propose(&self, _payload: Vec<u8>) -> BoxFuture<'_, Result<u64, ProposeError>> {
        Box::pin(async { Err(ProposeError::NotLeader { leader: None }) })
    }
    fn view(&self) -> tokio::sync::watch::Receiver<QuorumView> {
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
                reason: "no controller quorum in this context".into(),
            })
        })
    }
}

/// The context over `store` (opened in `data_dir`), with `topics` (name, partitions) besides
/// `__consumer_offsets`. The offsets partitions start loading at once, unless `hold_loads`: then
/// they stay loading until the returned hold is dropped.
pub fn single_node_context(
    store: Arc<Store>,
    data_dir: &Path,
    config: BrokerConfig,
    topics: &[(&str, i32)],
    hold_loads: bool,
) -> (Arc<BrokerContext>, Option<LoadHold>) {
    let endpoint = BrokerEndpoint {
        node_id: NODE_ID,
        host: "127.0.0.1".into(),
        port: 9092,
    };
    let image = Arc::new(SharedImage::default());
    image.apply_batch(
        1,
        &MetadataBatch::new(vec![MetadataRecord::RegisterBroker {
            node_id: NODE_ID,
            incarnation_id: uuid::Uuid::from_u128(1),
            host: endpoint.host.clone(),
            port: endpoint.port,
            rack: None,
            listeners: Vec::new(),
            clean_shutdown: true,
        }]),
    );
    let mut records = vec![MetadataRecord::UnfenceBroker {
        node_id: NODE_ID,
        broker_epoch: 1,
    }];
    let all =
        std::iter::once(("__consumer_offsets", OFFSETS_PARTITIONS)).chain(topics.iter().copied());
    for (i, (name, partitions)) in all.enumerate() {
        let topic_id = uuid::Uuid::from_u128(100 + i as u128);
        records.push(MetadataRecord::Topic {
            name: name.into(),
            topic_id,
            configs: Default::default(),
        });
        for p in 0..partitions {
            records.push(MetadataRecord::Partition {
                topic_id,
                partition: p,
                registration: PartitionRegistration::new(vec![NODE_ID]),
            });
        }
    }
    image.apply_batch(2, &MetadataBatch::new(records));
    let controller = Arc::new(ControllerClient::new(
        NODE_ID,
        Arc::new(NoQuorum {
            view: tokio::sync::watch::channel(QuorumView::default()).0,
        }),
        None,
    ));
    let replicas = ReplicaManager::new(
        ReplicaManagerConfig {
            node_id: NODE_ID,
            broker: config.clone(),
            peer_addresses: BTreeMap::new(),
            inter_broker: Default::default(),
        },
        store.clone(),
        image.clone(),
        controller.clone(),
        CancellationToken::new(),
    );
    replicas.apply_image(&image.current(), true);
    let lifecycle = BrokerLifecycle::new(
        BrokerInfo {
            node_id: NODE_ID,
            host: endpoint.host.clone(),
            port: endpoint.port,
            rack: None,
            listeners: Vec::new(),
            clean_shutdown: true,
            heartbeat_interval: Duration::from_secs(2),
            request_timeout: Duration::from_secs(1),
        },
        controller.clone(),
        image.clone(),
    );
    let producer_ids = Arc::new(ProducerIdAllocator::new(controller.clone(), lifecycle));
    let cluster = Arc::new(Cluster::new(config, store, image, endpoint, true));
    let group_log = Arc::new(DurableGroupLog::new(Duration::from_secs(10)));
    let groups = GroupCoordinator::new(
        CoordinatorConfig {
            consumer: Default::default(),
            share: Default::default(),
            group: GroupConfig {
                initial_rebalance_delay_ms: 0,
                ..GroupConfig::default()
            },
            offsets_retention_ms: 1_000_000,
            snapshot_dir: None,
        },
        OFFSETS_PARTITIONS,
        group_log.clone(),
    );
    let hold = if hold_loads {
        groups.hold_loads()
    } else {
        None
    };
    for p in 0..OFFSETS_PARTITIONS {
        if let Some(partition) = replicas.partition(&TopicPartition::new("__consumer_offsets", p)) {
            let log = partition.log.clone();
            group_log.lead(p, log.clone(), 0);
            groups.become_leader(p, log, 0);
        }
    }
    let ctx = Arc::new(BrokerContext {
        cluster,
        replicas,
        controller,
        producer_ids,
        groups,
        transactions: millrace_transactions::TransactionCoordinator::new(
            millrace_transactions::TxnConfig {
                partitions: 1,
                max_timeout_ms: 900_000,
                abort_check_interval: std::time::Duration::from_secs(10),
            },
            Arc::new(NoTxnIo),
        ),
        data_dir: data_dir.display().to_string(),
        shutdown: CancellationToken::new(),
        fetch_sessions: Arc::new(crate::fetch_session::FetchSessionCache::new(1000)),
        shares: Arc::new(crate::share_partitions::ShareState::new(
            crate::share_partitions::ShareSettings {
                enabled: true,
                ..Default::default()
            },
            None,
        )),
        authorizer: None,
        quotas: Default::default(),
        remote: None,
    });
    (ctx, hold)
}

/// In-process tests lead no `__transaction_state` partition: every transactional id answers
/// NOT_COORDINATOR, and this I/O is never reached.
struct NoTxnIo;

impl millrace_transactions::TxnIo for NoTxnIo {
    fn append_state(
        &self,
        _partition: i32,
        _leader_epoch: i32,
        _key: bytes::Bytes,
        _value: Option<bytes::Bytes>,
    ) -> millrace_transactions::IoFuture<()> {
        Box::pin(async { Err(millrace_transactions::TxnIoError::NotLeader) })
    }

    fn write_marker(
        &self,
        _topic: &str,
        _partition: i32,
        _producer_id: i64,
        _producer_epoch: i16,
        _marker: millrace_store::Marker,
    ) -> millrace_transactions::IoFuture<()> {
        Box::pin(async { Err(millrace_transactions::TxnIoError::NotLeader) })
    }

    fn next_producer_id(&self) -> millrace_transactions::IoFuture<i64> {
        Box::pin(async { Err(millrace_transactions::TxnIoError::NotLeader) })
    }
}
