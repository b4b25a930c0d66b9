//! A broker's lifecycle with the controller (Kafka's `BrokerLifecycleManager`): register this
//! process (a new incarnation id per start), heartbeat every `broker.heartbeat.interval.ms` with
//! the metadata offset applied here, become unfenced once caught up, re-register when the
//! controller says the broker epoch is stale, and on shutdown ask for a controlled shutdown and
//! wait until the controller has moved this broker's leaderships away.
//!
//! The broker acts on the image, not on this state: it leads a partition only if the image names
//! it leader *and* shows this incarnation registered and unfenced (see `is_current`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use millrace_cluster::image::{MetadataImage, SharedImage};
use millrace_cluster::listeners::ListenerAddress;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use uuid::Uuid;

use crate::client::ControllerClient;
use crate::limits::{FAST_HEARTBEAT_MS, REGISTRATION_RETRY_MS_MAX, REGISTRATION_RETRY_MS_MIN};
use crate::messages::{ControllerError, ControllerRequest, ControllerResponse};

/// How this broker is registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration {
    pub broker_epoch: i64,
    pub fenced: bool,
    /// The controller has finished this broker's controlled shutdown.
    pub shut_down: bool,
}

/// What the broker registers with.
#[derive(Debug, Clone)]
pub struct BrokerInfo {
    pub node_id: i32,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
    /// Every client listener, advertised addresses.
    pub listeners: Vec<ListenerAddress>,
    /// See `ControllerRequest::RegisterBroker::clean_shutdown`.
    pub clean_shutdown: bool,
    /// broker.heartbeat.interval.ms
    pub heartbeat_interval: Duration,
    /// How long one registration or heartbeat may wait for the controller.
    pub request_timeout: Duration,
}

/// The lifecycle of this broker process.
pub struct BrokerLifecycle {
    info: BrokerInfo,
    incarnation_id: Uuid,
    client: Arc<ControllerClient>,
    image: Arc<SharedImage>,
    state: watch::Sender<Option<Registration>>,
    shutting_down: AtomicBool,
    wake: tokio::sync::Notify,
    /// This broker's replicas on failed log dirs (topic id, partition), for every heartbeat.
    offline_source: std::sync::OnceLock<OfflineReplicas>,
}

/// Lists the broker's replicas on failed log dirs (topic id bytes, partition).
pub type OfflineReplicas = Box<dyn Fn() -> Vec<([u8; 16], i32)> + Send + Sync>;

impl BrokerLifecycle {
    pub fn new(
        info: BrokerInfo,
        client: Arc<ControllerClient>,
        image: Arc<SharedImage>,
    ) -> Arc<Self> {
        Arc::new(Self {
            info,
            incarnation_id: Uuid::new_v4(),
            client,
            image,
            state: watch::Sender::new(None),
            shutting_down: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
            offline_source: std::sync::OnceLock::new(),
        })
    }

    /// Where heartbeats learn this broker's replicas on failed log dirs (the store's offline
    /// dirs); without it, heartbeats report none. Set once; a second source is ignored.
    pub fn set_offline_replicas_source(&self, source: OfflineReplicas) {
        let _ = self.offline_source.set(source);
    }

    /// Wakes the heartbeat loop at once (a log dir failed: the controller should know now).
    pub fn heartbeat_now(&self) {
        self.wake.notify_one();
    }

    fn offline_replicas(&self) -> Vec<(Uuid, i32)> {
        self.offline_source
            .get()
            .map(|source| {
                source()
                    .into_iter()
                    .map(|(id, p)| (Uuid::from_bytes(id), p))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn incarnation_id(&self) -> Uuid {
        self.incarnation_id
    }

    pub fn node_id(&self) -> i32 {
        self.info.node_id
    }

    /// Watches the registration.
    pub fn watch(&self) -> watch::Receiver<Option<Registration>> {
        self.state.subscribe()
    }

    /// Whether `image` shows this process registered and unfenced: only then may it lead.
    pub fn is_current(&self, image: &MetadataImage) -> bool {
        image
            .broker(self.info.node_id)
            .is_some_and(|b| b.incarnation_id == self.incarnation_id && !b.fenced)
    }

    /// Asks for a controlled shutdown; `run` ends once the controller lets this broker go.
    pub fn begin_controlled_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    /// Registers and heartbeats until `stop` or the end of a controlled shutdown.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut registration: Option<Registration> = None;
        let mut retry_ms = REGISTRATION_RETRY_MS_MIN;
        loop {
            if stop.is_cancelled() {
                return;
            }
            let Some(current) = registration else {
                registration = self.register(retry_ms).await;
                if registration.is_none() {
                    self.pause(Duration::from_millis(retry_ms), &stop).await;
                    retry_ms = retry_ms.saturating_mul(2).min(REGISTRATION_RETRY_MS_MAX);
                } else {
                    retry_ms = REGISTRATION_RETRY_MS_MIN;
                }
                continue;
            };
            let want_shutdown = self.shutting_down.load(Ordering::SeqCst);
            let req = ControllerRequest::BrokerHeartbeat {
                node_id: self.info.node_id,
                broker_epoch: current.broker_epoch,
                metadata_offset: self.image.current().offset,
                want_fence: false,
                want_shutdown,
                offline_replicas: self.offline_replicas(),
            };
            match self.client.request(req, self.info.request_timeout).await {
                ControllerResponse::Heartbeat {
                    is_fenced,
                    should_shut_down,
                    ..
                } => {
                    let next = Registration {
                        broker_epoch: current.broker_epoch,
                        fenced: is_fenced,
                        shut_down: should_shut_down && want_shutdown,
                    };
                    if next != current {
                        info!(
                            broker_epoch = next.broker_epoch,
                            fenced = next.fenced,
                            shut_down = next.shut_down,
                            "broker registration changed"
                        );
                    }
                    registration = Some(next);
                    self.state.send_replace(registration);
                    if next.shut_down {
                        info!("controlled shutdown complete");
                        return;
                    }
                }
                ControllerResponse::Error {
                    error: ControllerError::StaleBrokerEpoch,
                } => {
                    warn!(
                        broker_epoch = current.broker_epoch,
                        "the controller does not know this broker epoch; registering again"
                    );
                    registration = None;
                    self.state.send_replace(None);
                    continue;
                }
                other => {
                    warn!(answer = ?other, "broker heartbeat failed");
                }
            }
            let fast = registration.is_some_and(|r| r.fenced) || want_shutdown;
            let wait = if fast {
                Duration::from_millis(FAST_HEARTBEAT_MS)
            } else {
                self.info.heartbeat_interval
            };
            // Heartbeat again at once when the image moves while fenced (catching up is what
            // unfences us), or after the interval.
            let mut applied = self.image.subscribe();
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
                _ = applied.changed(), if fast && !want_shutdown => {}
            }
        }
    }

    /// One registration attempt; a failure is logged with the pause before the next
    /// (`retry_ms`, which grows to `REGISTRATION_RETRY_MS_MAX`).
    async fn register(&self, retry_ms: u64) -> Option<Registration> {
        let req = ControllerRequest::RegisterBroker {
            node_id: self.info.node_id,
            incarnation_id: self.incarnation_id,
            host: self.info.host.clone(),
            port: self.info.port,
            rack: self.info.rack.clone(),
            clean_shutdown: self.info.clean_shutdown,
            listeners: self.info.listeners.clone(),
        };
        match self.client.request(req, self.info.request_timeout).await {
            ControllerResponse::Registered { broker_epoch } => {
                info!(broker_epoch, incarnation = %self.incarnation_id, "registered with the controller");
                let r = Registration {
                    broker_epoch,
                    fenced: true,
                    shut_down: false,
                };
                self.state.send_replace(Some(r));
                Some(r)
            }
            ControllerResponse::Error {
                error: error @ ControllerError::PolicyViolation(_),
            } => {
                // The controller cannot commit this registration at all: retrying will not
                // help until an operator acts (the controller logged why).
                tracing::error!(%error, retry_ms, "the controller refused this broker's registration; retrying");
                None
            }
            other => {
                warn!(answer = ?other, retry_ms, "broker registration failed; retrying");
                None
            }
        }
    }

    async fn pause(&self, d: Duration, stop: &CancellationToken) {
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(d) => {}
        }
    }
}
