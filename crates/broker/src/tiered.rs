//! Tiered storage in the broker (decision 0073): with `remote.log.storage.system.enable`, the
//! object store named by `millrace.remote.storage.url` (credentials from the AWS environment), the
//! remote reads the front end serves below the local log start, and the remote log manager task,
//! whose commits go to the active controller with this broker's epoch.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures::future::BoxFuture;
use millrace_cluster::remote_log::{RemoteLog, RemoteSegment};
use millrace_cluster::BrokerConfig;
use millrace_controller::messages::{ControllerRequest, ControllerResponse, RemoteLogChange};
use millrace_controller::ControllerClient;
use millrace_frontend::tiered::{RemoteReads, RemoteRecords};
use millrace_replication::manager::ReplicaManager;
use millrace_store::TopicPartition;
use millrace_tiered::remote_read::{RemotePartition, RemoteReader};
use millrace_tiered::rlm::{CommitError, RemoteLogCommitter, RemoteLogManager, RlmSettings};
use millrace_tiered::RemoteStorage;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};
use uuid::Uuid;

/// How long a remote-log commit waits for the controller's answer.
const CONTROLLER_TIMEOUT: Duration = Duration::from_secs(10);

/// Tiered storage as running: the reads for the front end and the manager's task.
pub struct Tiered {
    pub reader: Arc<dyn RemoteReads>,
    pub manager: Arc<RemoteLogManager>,
    pub task: JoinHandle<()>,
}

/// Starts tiered storage when enabled; an unusable url or AWS environment refuses the start
/// with a message that says what is missing.
pub fn start(
    config: &BrokerConfig,
    replicas: &Arc<ReplicaManager>,
    controller: &Arc<ControllerClient>,
    stop: &CancellationToken,
) -> anyhow::Result<Option<Tiered>> {
    let settings = config.remote_storage();
    if !settings.remote_log_storage_system_enable {
        return Ok(None);
    }
    let url = settings
        .remote_storage_url
        .as_deref()
        .context("remote.log.storage.system.enable=true needs millrace.remote.storage.url (s3://bucket/prefix or file:///path)")?;
    let storage = RemoteStorage::from_url(
        url,
        |k| std::env::var(k).ok(),
        settings.remote_storage_cache_bytes,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    info!(store = %storage.describe(), "tiered storage on");
    {
        // A wrong secret or an unreachable store is said at once, not only at the first upload;
        // the broker still starts (the store may come back) and uploads wait meanwhile.
        let storage = storage.clone();
        tokio::spawn(async move {
            match storage.probe().await {
                Ok(()) => info!(store = %storage.describe(), "remote storage answers"),
                Err(e) => {
                    error!(store = %storage.describe(), error = %e, "remote storage probe failed; uploads wait until it answers")
                }
            }
        });
    }
    let settings = RlmSettings {
        task_interval: Duration::from_millis(settings.remote_log_manager_task_interval_ms),
        max_pending_bytes: settings.remote_storage_max_pending_bytes,
        orphan_grace_ms: i64::try_from(settings.remote_storage_orphan_grace_ms).unwrap_or(i64::MAX),
    };
    let committer = Arc::new(ControllerCommitter {
        controller: Arc::clone(controller),
        replicas: Arc::clone(replicas),
    });
    let manager = RemoteLogManager::new(storage.clone(), Arc::clone(replicas), committer, settings);
    let reader = Arc::new(Reads(Arc::new(RemoteReader::new(storage))));
    let stop = stop.clone();
    let task = tokio::spawn(Arc::clone(&manager).run(async move { stop.cancelled().await }));
    Ok(Some(Tiered {
        reader,
        manager,
        task,
    }))
}

/// Sends remote-log changes to the active controller with this broker's epoch.
struct ControllerCommitter {
    controller: Arc<ControllerClient>,
    replicas: Arc<ReplicaManager>,
}

impl RemoteLogCommitter for ControllerCommitter {
    fn commit(
        &self,
        change: RemoteLogChange,
    ) -> Pin<Box<dyn Future<Output = Result<(), CommitError>> + Send + '_>> {
        Box::pin(async move {
            let req = ControllerRequest::RemoteLog {
                node_id: self.replicas.node_id(),
                broker_epoch: self.replicas.broker_epoch(),
                change,
            };
            match self.controller.request(req, CONTROLLER_TIMEOUT).await {
                // The decision's own answer: committed, or refused and not in the log.
                ControllerResponse::RemoteLog { result } => {
                    result.map_err(|e| CommitError::Refused(e.to_string()))
                }
                // Not the controller any more, no quorum, a timeout: maybe committed.
                ControllerResponse::Error { error } => Err(CommitError::Unknown(error.to_string())),
                other => Err(CommitError::Unknown(format!(
                    "unexpected controller answer {other:?}"
                ))),
            }
        })
    }
}

/// The front end's remote reads over `millrace_tiered::remote_read`.
struct Reads(Arc<RemoteReader>);

impl RemoteReads for Reads {
    fn read(
        &self,
        tp: TopicPartition,
        topic_id: Uuid,
        segment: RemoteSegment,
        offset: i64,
        max_bytes: usize,
        min_one: bool,
        read_committed: bool,
    ) -> BoxFuture<'static, Result<RemoteRecords, String>> {
        let reader = Arc::clone(&self.0);
        Box::pin(async move {
            let part = RemotePartition {
                topic: &tp.topic,
                topic_id,
                partition: tp.partition,
            };
            reader
                .read(&part, &segment, offset, max_bytes, min_one, read_committed)
                .await
                .map(|r| RemoteRecords {
                    records: r.records,
                    aborted: r.aborted,
                })
                .map_err(|e| e.to_string())
        })
    }

    fn offset_for_timestamp(
        &self,
        tp: TopicPartition,
        topic_id: Uuid,
        remote: Arc<RemoteLog>,
        timestamp: i64,
    ) -> BoxFuture<'static, Result<Option<(i64, i64)>, String>> {
        let reader = Arc::clone(&self.0);
        Box::pin(async move {
            let part = RemotePartition {
                topic: &tp.topic,
                topic_id,
                partition: tp.partition,
            };
            reader
                .offset_for_timestamp(&part, &remote, timestamp)
                .await
                .map_err(|e| e.to_string())
        })
    }
}
