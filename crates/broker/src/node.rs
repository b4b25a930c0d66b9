//! Wiring of one node: the metadata quorum (a quorum of one without `--controller-voters`), the
//! controller service on voters, the broker's registration and heartbeats, the replica manager, and
//! the publisher that applies every committed metadata image to the replicas (and, through their
//! leadership changes, to the group coordinator).
//!
//! Start order (each step needs the one before): store → image + quorum (replays the metadata log)
//! → controller service (voters) → lifecycle (registers this process) → replica manager → (the
//! group coordinator subscribes to leadership changes) → the publisher, which first waits until
//! the image holds this process's registration, so that the broker never acts on a view older
//! than its own registration.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use millrace_cluster::image::SharedImage;
use millrace_cluster::listeners::ListenerAddress;
use millrace_cluster::node::{self, METADATA_LOG_DIR};
use millrace_cluster::BrokerConfig;
use millrace_controller::raft::{ControllerRpc, ImageStateMachine, RaftQuorum};
use millrace_controller::{
    BrokerInfo, BrokerLifecycle, ControllerClient, ControllerConfig, ControllerService,
    MetadataQuorum,
};
use millrace_quorum::{Quorum, QuorumConfig, Role};
use millrace_replication::{ReplicaManager, ReplicaManagerConfig};
use millrace_store::{FlushPolicy, Store};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::settings::Settings;

/// How long one registration or heartbeat may wait for the controller.
const CONTROLLER_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The running parts of a node.
pub struct Node {
    pub image: Arc<SharedImage>,
    pub quorum: Arc<RaftQuorum>,
    pub controller: Arc<ControllerClient>,
    pub lifecycle: Arc<BrokerLifecycle>,
    pub replicas: Arc<ReplicaManager>,
}

/// Starts the quorum, the controller service, the lifecycle and the replica manager.
pub async fn start(
    settings: &Settings,
    config: &BrokerConfig,
    store: &Arc<Store>,
    (host, port, listeners): (&str, u16, Vec<ListenerAddress>),
    stop: &CancellationToken,
) -> anyhow::Result<Node> {
    let node_id = config.node_id();
    let data_dir = &settings.data_dir;
    let image = Arc::new(SharedImage::default());
    // Seed records for a metadata log that turns out empty (migration, rebuild).
    // `metadata.log.dir` (Kafka's key), else under the data dir as before.
    let metadata_root = node::metadata_log_root(config, data_dir);
    let bootstrap = if node::has_metadata_log(&metadata_root) {
        Vec::new()
    } else {
        node::bootstrap_records(config, data_dir, store, node_id)
            .context("cannot seed the metadata log from this data directory")?
    };
    let quorum_dir = metadata_root.join(METADATA_LOG_DIR);
    let id = u64::try_from(node_id).context("node.id must not be negative")?;
    let qconfig = match &settings.quorum {
        None => QuorumConfig::single_node(id, &quorum_dir),
        Some(q) => {
            let voters = q
                .voters
                .iter()
                .map(|(v, addr)| (u64::try_from(*v).unwrap_or(0), addr.clone()))
                .collect();
            let role = if q.voter { Role::Voter } else { Role::Observer };
            let mut c = QuorumConfig::new(id, &quorum_dir, role, voters, Some(q.listen));
            if let Ok(ms) = config
                .get("controller.quorum.election.timeout.ms")
                .unwrap_or("")
                .parse::<u64>()
            {
                c.election_timeout_min_ms = ms;
                c.election_timeout_max_ms = ms * 2;
            }
            c.tls = settings.controller_tls.clone();
            c
        }
    };
    let voter = settings.quorum.as_ref().is_none_or(|q| q.voter);
    let rpc = ControllerRpc::new();
    let quorum = Quorum::start(
        qconfig,
        ImageStateMachine::new(Arc::clone(&image)),
        rpc.clone(),
    )
    .await
    .context("cannot start the metadata quorum")?;
    let raft = RaftQuorum::new(Arc::new(quorum));
    let service = voter.then(|| {
        ControllerService::spawn(
            node_id,
            ControllerConfig::new(config.clone()),
            raft.clone() as Arc<dyn MetadataQuorum>,
            Arc::clone(&image),
            bootstrap,
            stop.child_token(),
        )
    });
    if let Some(s) = &service {
        rpc.set_service(Arc::clone(s));
    }
    let controller = Arc::new(ControllerClient::new(
        node_id,
        raft.clone() as Arc<dyn MetadataQuorum>,
        service,
    ));
    let heartbeat_ms = config
        .get("broker.heartbeat.interval.ms")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(2000);
    // KIP-966's unclean shutdown protects unflushed records; under batch/always every record a
    // replica counted towards a high watermark was fsynced (docs/decisions/0025).
    let clean_shutdown =
        store.opened_after_clean_shutdown() || config.flush_policy() != FlushPolicy::Never;
    let lifecycle = BrokerLifecycle::new(
        BrokerInfo {
            node_id,
            host: host.to_string(),
            port,
            listeners,
            rack: config.get("broker.rack").map(str::to_string),
            clean_shutdown,
            heartbeat_interval: Duration::from_millis(heartbeat_ms.max(10)),
            request_timeout: CONTROLLER_REQUEST_TIMEOUT,
        },
        Arc::clone(&controller),
        Arc::clone(&image),
    );
    let offline_store = Arc::clone(store);
    lifecycle.set_offline_replicas_source(Box::new(move || {
        offline_store
            .offline_partitions()
            .into_iter()
            .filter_map(|(tp, id)| Some((*id?.as_bytes(), tp.partition)))
            .collect()
    }));
    // A failed log dir reaches the controller with the next heartbeat, sent at once.
    let waker = Arc::downgrade(&lifecycle);
    store.set_offline_listener(Arc::new(move |_dir: &std::path::Path| {
        if let Some(lifecycle) = waker.upgrade() {
            lifecycle.heartbeat_now();
        }
    }));
    tokio::spawn(lifecycle.clone().run(stop.child_token()));
    let replicas = ReplicaManager::new(
        ReplicaManagerConfig {
            node_id,
            broker: config.clone(),
            peer_addresses: settings.peer_addresses.clone(),
            inter_broker: settings.inter_broker.clone(),
        },
        Arc::clone(store),
        Arc::clone(&image),
        Arc::clone(&controller),
        stop.child_token(),
    );
    // Damaged batches the store's scrubber finds are replaced with an in-sync replica's copy.
    replicas.start_repairs();
    Ok(Node {
        image,
        quorum: raft,
        controller,
        lifecycle,
        replicas,
    })
}

impl Node {
    /// Starts applying committed images to the replicas (after everything that listens to their
    /// leadership changes subscribed). The receiver turns true once an applied image shows this
    /// process registered and unfenced.
    pub fn start_publishing(
        &self,
        store: &Arc<Store>,
        data_dir: &Path,
        stop: &CancellationToken,
    ) -> watch::Receiver<bool> {
        let (ready_tx, ready) = watch::channel(false);
        tokio::spawn(publish(
            Arc::clone(&self.image),
            self.lifecycle.clone(),
            Arc::clone(&self.replicas),
            Arc::clone(store),
            data_dir.to_path_buf(),
            ready_tx,
            stop.child_token(),
        ));
        ready
    }
}

/// Applies every committed image to the replicas, once the image holds this process's
/// registration.
async fn publish(
    image: Arc<SharedImage>,
    lifecycle: Arc<BrokerLifecycle>,
    replicas: Arc<ReplicaManager>,
    store: Arc<Store>,
    data_dir: std::path::PathBuf,
    ready: watch::Sender<bool>,
    stop: CancellationToken,
) {
    let mut changes = image.subscribe();
    let mut registration = lifecycle.watch();
    let mut first = true;
    loop {
        let reg = *registration.borrow_and_update();
        let current = image.current();
        if let Some(reg) = reg {
            let seen = u64::try_from(reg.broker_epoch).is_ok_and(|e| current.offset >= e);
            if seen {
                replicas.set_broker_epoch(reg.broker_epoch);
                let is_current = lifecycle.is_current(&current);
                // Creating or deleting logs fsyncs files and directories (seconds for a topic of
                // 1,000 partitions): off the shared runtime thread, so that connections served by
                // the same thread are not held meanwhile.
                millrace_frontend::blocking::run(|| replicas.apply_image(&current, is_current));
                if first {
                    first = false;
                    set_aside_unassigned(&replicas, &store);
                    if let Some(retired) = node::retire_legacy_metadata(&data_dir) {
                        info!(file = %retired.display(), "legacy metadata file retired: the metadata log holds it now");
                    }
                }
                if is_current && !*ready.borrow() {
                    ready.send_replace(true);
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            r = changes.changed() => if r.is_err() { return },
            r = registration.changed() => if r.is_err() { return },
        }
    }
}

/// Partition directories the image does not assign to this broker are moved aside, never deleted
/// (docs/decisions/0005): they may be the only copy of something an operator wants back.
fn set_aside_unassigned(replicas: &ReplicaManager, store: &Store) {
    for tp in store.partitions() {
        if replicas.partition(&tp).is_some() {
            continue;
        }
        match store.set_aside_partition(&tp) {
            Ok(moved) => {
                warn!(partition = %tp, moved_to = %moved.display(), "partition directory not assigned to this broker; moved aside (nothing deleted)")
            }
            Err(e) => {
                warn!(partition = %tp, error = %e, "cannot move an unassigned partition directory aside")
            }
        }
    }
}
