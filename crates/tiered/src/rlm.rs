//! The remote log manager (Kafka's RemoteLogManager, decision 0073): one task per broker that,
//! every `remote.log.manager.task.interval.ms`,
//!
//! - **copies**: for each tiered partition this broker leads, uploads the sealed segments below
//!   the last stable offset that the remote log does not hold yet (from where the committed remote
//!   log ends, whoever led before), then commits each through the controller in this leader epoch;
//! - **expires**: lets go of remote segments past the topic's whole-log retention (`retention.ms`,
//!   `retention.bytes` over remote + local), oldest first: the deletion is committed, then the
//!   objects are deleted;
//! - **cleans**: deletes orphans — objects of a partition's folder that no committed segment names
//!   (an upload whose commit failed or was cut by a crash, a deletion cut by a crash) once older
//!   than `millrace.remote.storage.orphan.grace.ms` — and, on the lowest-numbered live broker, the
//!   objects of deleted topics;
//! - **publishes**: sets every hosted tiered log's `remote_copied_end` from the image (local
//!   retention waits for it) and the upload backlog bound on produce.
//!
//! **Invariant:** an upload is visible (readable, counted, allowed to free local disk) only once
//! its metadata record is committed; objects without one are never data.
//! **Invariant:** a commit names the uploader's leader epoch and must start where the remote log
//! ends; the controller refuses anything else, so two leaders never both own a segment.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use millrace_cluster::image::MetadataImage;
use millrace_cluster::remote_log::{RemoteLog, RemoteSegment};
use millrace_controller::messages::RemoteLogChange;
use millrace_replication::manager::{HostedPartition, ReplicaManager};
use millrace_store::{PartitionLog, TierSegment, NOTHING_COPIED};
use parking_lot::Mutex;
use tracing::{debug, info, warn};
use uuid::Uuid;

use crate::error::TieredError;
use crate::layout::{ObjectKind, SegmentObjects};
use crate::remote_storage::RemoteStorage;
use crate::segment_walk::{encode_pairs, plan_upload};

/// Segments one partition uploads per task round (the next round goes on).
pub const COPY_SEGMENTS_PER_ROUND: usize = 8;
/// Task rounds between two orphan scans of a partition.
pub const ORPHAN_SCAN_EVERY_ROUNDS: u64 = 10;
/// How long a commit may wait for the controller.
pub const COMMIT_TIMEOUT: Duration = Duration::from_secs(15);

/// Settings of the remote log manager.
#[derive(Debug, Clone)]
pub struct RlmSettings {
    /// `remote.log.manager.task.interval.ms`.
    pub task_interval: Duration,
    /// `millrace.remote.storage.max.pending.bytes`.
    pub max_pending_bytes: u64,
    /// `millrace.remote.storage.orphan.grace.ms`.
    pub orphan_grace_ms: i64,
}

/// Why a remote-log change was not (known to be) committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitError {
    /// The controller refused it: it is not in the metadata log.
    Refused(String),
    /// No answer (a timeout, a controller change, a lost connection): it may or may not be
    /// committed, so nothing it names may be deleted on its account.
    Unknown(String),
}

impl std::fmt::Display for CommitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommitError::Refused(e) => write!(f, "the controller refused it: {e}"),
            CommitError::Unknown(e) => write!(f, "its outcome is unknown: {e}"),
        }
    }
}

/// How a change of a remote log reaches the controller (the broker sends it with its broker
/// epoch; tests may commit directly).
pub trait RemoteLogCommitter: Send + Sync {
    /// Commits `change`.
    fn commit(
        &self,
        change: RemoteLogChange,
    ) -> Pin<Box<dyn Future<Output = Result<(), CommitError>> + Send + '_>>;
}

/// Commits `change` within `COMMIT_TIMEOUT`; a timeout is an unknown outcome.
async fn commit_bounded(
    committer: &dyn RemoteLogCommitter,
    change: RemoteLogChange,
) -> Result<(), CommitError> {
    tokio::time::timeout(COMMIT_TIMEOUT, committer.commit(change))
        .await
        .unwrap_or_else(|_| Err(CommitError::Unknown("no answer in time".into())))
}

/// Counters of the manager's work, read by the metrics collector.
#[derive(Debug, Default, Clone, Copy)]
pub struct RlmStats {
    pub segments_copied: u64,
    pub bytes_copied: u64,
    pub segments_deleted: u64,
    pub copy_errors: u64,
    pub orphans_deleted: u64,
    /// Bytes of closed local segments not yet copied, over the hosted tiered logs (last round).
    pub pending_bytes: u64,
    /// Closed local segments not yet copied (last round).
    pub pending_segments: u64,
    /// `pending_bytes` is over `millrace.remote.storage.max.pending.bytes`: produce to tiered
    /// topics is refused.
    pub backlog_full: bool,
}

/// How an upload failed: before its commit could take effect, or with its commit's outcome
/// unknown.
enum Upload {
    NotCommitted(TieredError),
    MaybeCommitted(TieredError),
}

/// The remote log manager of one broker.
pub struct RemoteLogManager {
    storage: RemoteStorage,
    replicas: Arc<ReplicaManager>,
    committer: Arc<dyn RemoteLogCommitter>,
    settings: RlmSettings,
    /// Segment ids being uploaded now (the orphan scan leaves them alone).
    in_flight: Mutex<HashSet<Uuid>>,
    stats: Mutex<RlmStats>,
    round: std::sync::atomic::AtomicU64,
    /// Partitions whose copy is stuck (a gap, a refused commit), to warn once.
    stuck: Mutex<HashMap<(Uuid, i32), String>>,
    /// Where this broker's last committed upload of each partition ended: the controller answers
    /// once the record is committed, but this broker's image may apply it a moment later, and the
    /// next upload must not start from the older end.
    committed_ends: Mutex<HashMap<(Uuid, i32), i64>>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Where a partition's remote log ends (the next offset to upload), from the image; `None` when
/// nothing was ever committed for it.
pub fn remote_end(remote: Option<&RemoteLog>) -> Option<i64> {
    remote.map(|r| r.end_offset().unwrap_or(r.log_start_offset))
}

impl RemoteLogManager {
    pub fn new(
        storage: RemoteStorage,
        replicas: Arc<ReplicaManager>,
        committer: Arc<dyn RemoteLogCommitter>,
        settings: RlmSettings,
    ) -> Arc<RemoteLogManager> {
        Arc::new(RemoteLogManager {
            storage,
            replicas,
            committer,
            settings,
            in_flight: Mutex::new(HashSet::new()),
            stats: Mutex::new(RlmStats::default()),
            round: std::sync::atomic::AtomicU64::new(0),
            stuck: Mutex::new(HashMap::new()),
            committed_ends: Mutex::new(HashMap::new()),
        })
    }

    pub fn storage(&self) -> &RemoteStorage {
        &self.storage
    }

    pub fn stats(&self) -> RlmStats {
        *self.stats.lock()
    }

    /// Runs rounds until `shutdown` resolves.
    pub async fn run(self: Arc<Self>, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            self.round().await;
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(self.settings.task_interval) => {}
            }
        }
    }

    /// One round over every hosted tiered partition.
    pub async fn round(&self) {
        let round = self
            .round
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let image = self.replicas.image();
        let tiered: Vec<Arc<HostedPartition>> = self
            .replicas
            .hosted()
            .into_iter()
            .filter(|h| h.log.config().remote_storage_enable)
            .collect();
        self.publish(&image, &tiered);
        for hosted in &tiered {
            let progress = *hosted.progress().borrow();
            if !progress.is_leader {
                continue;
            }
            let epoch = progress.leader_epoch;
            if let Err(e) = self.copy(hosted, epoch).await {
                self.stats.lock().copy_errors += 1;
                warn!(partition = %hosted.tp, error = %e, "tiered storage: upload failed; retried next round");
            }
            let image = self.replicas.image();
            if let Err(e) = self.expire(&image, hosted, epoch).await {
                warn!(partition = %hosted.tp, error = %e, "tiered storage: remote retention failed; retried next round");
            }
            if round.is_multiple_of(ORPHAN_SCAN_EVERY_ROUNDS) {
                if let Err(e) = self.clean_orphans(&image, hosted).await {
                    debug!(partition = %hosted.tp, error = %e, "tiered storage: orphan scan failed");
                }
            }
        }
        if round.is_multiple_of(ORPHAN_SCAN_EVERY_ROUNDS) {
            self.purge_deleted_topics(&image).await;
        }
        let image = self.replicas.image();
        self.publish(&image, &tiered);
    }

    /// Sets each hosted tiered log's copied end from the image, and the upload backlog.
    fn publish(&self, image: &MetadataImage, tiered: &[Arc<HostedPartition>]) {
        let mut pending_bytes = 0u64;
        let mut pending_segments = 0u64;
        for hosted in tiered {
            let remote = image.remote_log(hosted.topic_id, hosted.tp.partition);
            let end = remote_end(remote.map(|r| &**r)).unwrap_or(NOTHING_COPIED);
            if end > hosted.log.remote_copied_end() || end == NOTHING_COPIED {
                hosted.log.set_remote_copied_end(end);
            }
            let from = if end == NOTHING_COPIED { i64::MIN } else { end };
            let (segments, bytes) = hosted.log.sealed_from(from);
            pending_segments += segments;
            pending_bytes += bytes;
        }
        let over = pending_bytes > self.settings.max_pending_bytes;
        for hosted in tiered {
            hosted.log.set_upload_backlog(
                over.then_some((pending_bytes, self.settings.max_pending_bytes)),
            );
        }
        let mut stats = self.stats.lock();
        stats.pending_bytes = pending_bytes;
        stats.pending_segments = pending_segments;
        stats.backlog_full = over;
    }

    fn objects(hosted: &HostedPartition, base_offset: i64, segment_id: Uuid) -> SegmentObjects {
        SegmentObjects {
            topic: hosted.tp.topic.clone(),
            topic_id: millrace_store::TopicId::from_bytes(*hosted.topic_id.as_bytes()),
            partition: hosted.tp.partition,
            base_offset,
            segment_id,
        }
    }

    /// Uploads and commits what the remote log lacks of this leader's sealed segments.
    async fn copy(&self, hosted: &HostedPartition, leader_epoch: i32) -> Result<(), TieredError> {
        let log = &hosted.log;
        let upper = log.last_stable_offset().min(log.high_watermark());
        for _ in 0..COPY_SEGMENTS_PER_ROUND {
            let image = self.replicas.image();
            let remote = image.remote_log(hosted.topic_id, hosted.tp.partition);
            let known = self
                .committed_ends
                .lock()
                .get(&(hosted.topic_id, hosted.tp.partition))
                .copied();
            let from = match (remote_end(remote.map(|r| &**r)), known) {
                (Some(image), Some(known)) => image.max(known),
                (image, known) => image.or(known).unwrap_or_else(|| log.log_start_offset()),
            };
            let Some(seg) = log.sealed_segments_from(from, upper, 1).into_iter().next() else {
                return Ok(());
            };
            if seg.base_offset > from && remote.is_some_and(|r| !r.segments.is_empty()) {
                self.warn_stuck(hosted, format!(
                    "the remote log ends at {from} but the local log starts at {}: the gap cannot be uploaded",
                    seg.base_offset
                ));
                return Ok(());
            }
            if !self.still_leads(hosted, leader_epoch) {
                return Ok(());
            }
            self.copy_segment(hosted, leader_epoch, &seg, from.max(seg.base_offset))
                .await?;
        }
        Ok(())
    }

    fn still_leads(&self, hosted: &HostedPartition, leader_epoch: i32) -> bool {
        let p = *hosted.progress().borrow();
        p.is_leader && p.leader_epoch == leader_epoch
    }

    fn warn_stuck(&self, hosted: &HostedPartition, why: String) {
        let key = (hosted.topic_id, hosted.tp.partition);
        let mut stuck = self.stuck.lock();
        if stuck.get(&key) != Some(&why) {
            warn!(partition = %hosted.tp, "tiered storage: {why}");
            stuck.insert(key, why);
        }
    }

    async fn copy_segment(
        &self,
        hosted: &HostedPartition,
        leader_epoch: i32,
        seg: &TierSegment,
        from: i64,
    ) -> Result<(), TieredError> {
        let log = Arc::clone(&hosted.log);
        let path = seg.log_path.clone();
        let size = seg.size;
        let slice = tokio::task::spawn_blocking(move || plan_upload(&path, size, from))
            .await
            .map_err(|e| TieredError::Store {
                key: seg.log_path.display().to_string(),
                detail: format!("upload planning task failed: {e}"),
            })??;
        if slice.first_offset < 0 {
            // Nothing at or after `from` in it (an empty segment): nothing to upload; the next
            // segment follows.
            return Ok(());
        }
        let segment_id = Uuid::new_v4();
        let objects = Self::objects(hosted, slice.first_offset, segment_id);
        self.in_flight.lock().insert(segment_id);
        let result = self
            .upload_and_commit(hosted, &log, leader_epoch, seg, &slice, &objects)
            .await;
        self.in_flight.lock().remove(&segment_id);
        match result {
            Ok(()) => Ok(()),
            // Never committed: its objects are not data. Best effort now; the orphan scan
            // removes what this leaves.
            Err(Upload::NotCommitted(e)) => {
                for kind in ObjectKind::ALL {
                    let _ = self.storage.delete(&objects.key(kind)).await;
                }
                debug!(partition = %hosted.tp, error = %e, "tiered storage: upload abandoned");
                Err(e)
            }
            // Perhaps committed: the objects stay. If the commit did not happen, the orphan scan
            // deletes them after the grace period; if it did, they are the segment's data.
            Err(Upload::MaybeCommitted(e)) => Err(e),
        }
    }

    async fn upload_and_commit(
        &self,
        hosted: &HostedPartition,
        log: &Arc<PartitionLog>,
        leader_epoch: i32,
        seg: &TierSegment,
        slice: &crate::segment_walk::SegmentSlice,
        objects: &SegmentObjects,
    ) -> Result<(), Upload> {
        let bytes = self
            .storage
            .put_file_range(
                &objects.key(ObjectKind::Log),
                &seg.log_path,
                slice.start_pos..slice.end_pos,
            )
            .await
            .map_err(Upload::NotCommitted)?;
        let time_index: Vec<(i64, u64)> = slice
            .time_index
            .iter()
            .map(|(ts, off)| (*ts, *off as u64))
            .collect();
        let (_, snapshot) = log.producer_snapshot();
        let epochs: Vec<(i32, i64)> = log
            .leader_epoch_entries()
            .into_iter()
            .filter(|(_, start)| *start < seg.next_base_offset)
            .collect();
        let aborted: Vec<(i64, i64, i64)> = log
            .aborted_in(slice.first_offset, seg.next_base_offset)
            .iter()
            .map(|t| (t.producer_id, t.first_offset, t.last_offset))
            .collect();
        // The segment's small objects go up together (each is one PUT).
        let small = [
            (ObjectKind::Index, Bytes::from(encode_pairs(&slice.index))),
            (
                ObjectKind::TimeIndex,
                Bytes::from(encode_pairs(&time_index)),
            ),
            (ObjectKind::ProducerSnapshot, Bytes::from(snapshot)),
            (
                ObjectKind::LeaderEpochs,
                Bytes::from(serde_json::to_vec(&epochs).unwrap_or_default()),
            ),
            (
                ObjectKind::TxnIndex,
                Bytes::from(serde_json::to_vec(&aborted).unwrap_or_default()),
            ),
        ];
        futures::future::try_join_all(
            small
                .into_iter()
                .map(|(kind, bytes)| self.storage.put_bytes_owned(objects.key(kind), bytes)),
        )
        .await
        .map_err(Upload::NotCommitted)?;
        let segment = RemoteSegment {
            segment_id: objects.segment_id,
            base_offset: slice.first_offset,
            end_offset: seg.next_base_offset - 1,
            leader_epoch,
            max_timestamp: slice.max_timestamp,
            size_bytes: bytes,
            epochs: slice.epochs.clone(),
        };
        let change = RemoteLogChange::Commit {
            topic_id: hosted.topic_id,
            partition: hosted.tp.partition,
            leader_epoch,
            segment,
        };
        if let Err(e) = commit_bounded(&*self.committer, change).await {
            let error = TieredError::Store {
                key: objects.key(ObjectKind::Log),
                detail: format!("the segment's commit failed: {e}"),
            };
            return Err(match e {
                CommitError::Refused(_) => Upload::NotCommitted(error),
                CommitError::Unknown(_) => Upload::MaybeCommitted(error),
            });
        }
        log.set_remote_copied_end(seg.next_base_offset);
        self.committed_ends
            .lock()
            .insert((hosted.topic_id, hosted.tp.partition), seg.next_base_offset);
        let mut stats = self.stats.lock();
        stats.segments_copied += 1;
        stats.bytes_copied += bytes;
        drop(stats);
        self.stuck
            .lock()
            .remove(&(hosted.topic_id, hosted.tp.partition));
        info!(
            partition = %hosted.tp,
            base_offset = slice.first_offset,
            end_offset = seg.next_base_offset - 1,
            bytes,
            leader_epoch,
            "tiered storage: segment copied"
        );
        Ok(())
    }

    /// Whole-log retention over the remote segments: the oldest go while the log is over
    /// `retention.bytes` or they are older than `retention.ms`.
    async fn expire(
        &self,
        image: &MetadataImage,
        hosted: &HostedPartition,
        leader_epoch: i32,
    ) -> Result<(), TieredError> {
        let Some(remote) = image.remote_log(hosted.topic_id, hosted.tp.partition) else {
            return Ok(());
        };
        if remote.segments.is_empty() {
            return Ok(());
        }
        let config = hosted.log.config();
        let log = &hosted.log;
        let copied_end = remote_end(Some(remote)).unwrap_or(NOTHING_COPIED);
        // Local bytes the remote log already holds are not counted twice.
        let (_, sealed) = log.sealed_from(i64::MIN);
        let local_copied = sealed.saturating_sub(log.sealed_from(copied_end).1);
        let mut total = remote.size_bytes() + log.size_bytes().saturating_sub(local_copied);
        let now = now_ms();
        let mut through: Option<&RemoteSegment> = None;
        for seg in &remote.segments {
            let by_size = config.retention_bytes >= 0
                && total.saturating_sub(seg.size_bytes) >= config.retention_bytes as u64
                && total > config.retention_bytes as u64;
            let by_time = config.retention_ms >= 0
                && seg.max_timestamp >= 0
                && now.saturating_sub(seg.max_timestamp) > config.retention_ms;
            if !(by_size || by_time) {
                break;
            }
            total = total.saturating_sub(seg.size_bytes);
            through = Some(seg);
        }
        let Some(last) = through else {
            return Ok(());
        };
        let dropped: Vec<RemoteSegment> = remote
            .segments
            .iter()
            .take_while(|s| s.end_offset <= last.end_offset)
            .cloned()
            .collect();
        let change = RemoteLogChange::Delete {
            topic_id: hosted.topic_id,
            partition: hosted.tp.partition,
            leader_epoch,
            through_end_offset: last.end_offset,
            log_start_offset: last.end_offset + 1,
        };
        // Objects are deleted only once the deletion is known to be committed.
        if let Err(e) = commit_bounded(&*self.committer, change).await {
            return Err(TieredError::Store {
                key: hosted.tp.to_string(),
                detail: format!("the remote segments' deletion failed: {e}"),
            });
        }
        for seg in &dropped {
            let objects = Self::objects(hosted, seg.base_offset, seg.segment_id);
            for kind in ObjectKind::ALL {
                // A failure leaves an orphan for the scan.
                let _ = self.storage.delete(&objects.key(kind)).await;
            }
        }
        self.stats.lock().segments_deleted += dropped.len() as u64;
        info!(partition = %hosted.tp, segments = dropped.len(), through_end_offset = last.end_offset, "tiered storage: remote segments past retention deleted");
        Ok(())
    }

    /// Deletes objects in the partition's folder that no committed segment names, once older
    /// than the grace period.
    async fn clean_orphans(
        &self,
        image: &MetadataImage,
        hosted: &HostedPartition,
    ) -> Result<(), TieredError> {
        let folder = SegmentObjects::partition_folder(
            &hosted.tp.topic,
            millrace_store::TopicId::from_bytes(*hosted.topic_id.as_bytes()),
            hosted.tp.partition,
        );
        let listed = self.storage.list(&folder).await?;
        let committed: HashSet<Uuid> = image
            .remote_log(hosted.topic_id, hosted.tp.partition)
            .map(|r| r.segments.iter().map(|s| s.segment_id).collect())
            .unwrap_or_default();
        let now = now_ms();
        let mut deleted = 0u64;
        for object in listed {
            let Some((_, id, _)) = SegmentObjects::parse_name(&object.name) else {
                continue;
            };
            if committed.contains(&id) || self.in_flight.lock().contains(&id) {
                continue;
            }
            if now.saturating_sub(object.last_modified_ms) < self.settings.orphan_grace_ms {
                continue;
            }
            if self
                .storage
                .delete(&format!("{folder}/{}", object.name))
                .await
                .is_ok()
            {
                deleted += 1;
            }
        }
        if deleted > 0 {
            self.stats.lock().orphans_deleted += deleted;
            info!(partition = %hosted.tp, objects = deleted, "tiered storage: orphan objects deleted");
        }
        Ok(())
    }

    /// On the lowest-numbered active broker: deletes the remote objects of deleted topics.
    async fn purge_deleted_topics(&self, image: &MetadataImage) {
        if image.remote_purges.is_empty() {
            return;
        }
        let lowest = image.active_brokers().map(|b| b.node_id).min();
        if lowest != Some(self.replicas.node_id()) {
            return;
        }
        for (topic_id, name) in &image.remote_purges {
            let prefix = format!(
                "{name}-{}",
                millrace_store::TopicId::from_bytes(*topic_id.as_bytes())
            );
            let listed = match self.storage.list(&prefix).await {
                Ok(l) => l,
                Err(e) => {
                    debug!(topic = %name, error = %e, "tiered storage: listing a deleted topic failed");
                    continue;
                }
            };
            let mut failed = false;
            for object in &listed {
                if self
                    .storage
                    .delete(&format!("{prefix}/{}", object.name))
                    .await
                    .is_err()
                {
                    failed = true;
                }
            }
            if failed {
                continue;
            }
            let change = RemoteLogChange::Purged {
                topic_id: *topic_id,
            };
            if commit_bounded(&*self.committer, change).await.is_ok() {
                info!(topic = %name, objects = listed.len(), "tiered storage: deleted topic's remote objects purged");
            }
        }
    }
}
