//! The broker's executor of batch repair (decision 0072, rules in `driver::repair`): whenever the
//! store's scrubber records damaged batches in a hosted replica, fetch a good copy of exactly
//! those offsets from another in-sync replica and have the store swap it into the segment.
//!
//! The copy is read with a consumer Fetch (replica id -1, read_uncommitted, no leader-epoch
//! check): it changes nothing in the source's view of this replica (a replica fetch would move
//! the follower's position back on the leader), and a follower serves it up to its own high
//! watermark as Kafka followers serve consumers (KIP-392). Until the swap, the store refuses reads
//! of the damaged offsets (KAFKA_STORAGE_ERROR, retried by clients and followers alike).
//!
//! Nothing here truncates, moves the high watermark or touches the ISR: a repair replaces bytes
//! for offsets the log already holds, or fails and is tried again later.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse};
use millrace_store::{DamagedRange, RepairError};
use tracing::{debug, info, warn};

use crate::client::BrokerConnection;
use crate::driver::repair::{repair_sources, repairable, take_batches};
use crate::limits::{REPAIR_FETCHES_PER_RANGE_MAX, REPAIR_FETCH_BYTES_MAX, REPAIR_RETRY_MS};
use crate::manager::{HostedPartition, ReplicaManager};

/// Fetch version of the copy (topic ids; v11+ so a follower serves it).
const REPAIR_FETCH_VERSION: i16 = 17;

impl ReplicaManager {
    /// Starts the repair task (until the manager stops).
    pub fn start_repairs(self: &Arc<Self>) {
        tokio::spawn(run_repairs(Arc::clone(self)));
    }
}

/// Runs until the manager stops: repairs every damaged replica, after each change of the store's
/// damage board and every `REPAIR_RETRY_MS` while some damage remains.
async fn run_repairs(manager: Arc<ReplicaManager>) {
    let mut changes = manager.store().damage_changes();
    loop {
        tokio::select! {
            () = manager.stop.cancelled() => return,
            _ = changes.changed() => {}
            () = tokio::time::sleep(Duration::from_millis(REPAIR_RETRY_MS)) => {}
        }
        for tp in manager.store().damaged_partitions() {
            if manager.stop.is_cancelled() {
                return;
            }
            if let Some(hosted) = manager.partition(&tp) {
                repair_partition(&manager, &hosted).await;
            }
        }
    }
}

/// Tries to repair every damaged segment of one hosted replica, one source after another.
async fn repair_partition(manager: &Arc<ReplicaManager>, hosted: &Arc<HostedPartition>) {
    let tp = &hosted.tp;
    let (leader, isr) = match manager
        .image
        .current()
        .topic(&tp.topic)
        .and_then(|t| t.partition(tp.partition))
    {
        Some(p) => (p.leader, p.isr.clone()),
        None => return,
    };
    let sources = repair_sources(manager.node_id(), Some(leader), &isr);
    // Retention or a truncation may have removed damaged segments since the scrubber saw them.
    hosted.log.prune_damage();
    let mut by_segment: BTreeMap<i64, Vec<DamagedRange>> = BTreeMap::new();
    for r in hosted.log.damaged_ranges() {
        by_segment.entry(r.segment_base).or_default().push(r);
    }
    for (segment, ranges) in by_segment {
        let high_watermark = hosted.log.high_watermark();
        if !ranges.iter().all(|r| repairable(r.to, high_watermark)) {
            debug!(partition = %tp, segment, high_watermark, "damaged batches above the high watermark wait");
            continue;
        }
        if sources.is_empty() {
            debug!(partition = %tp, segment, "no in-sync replica to repair damaged batches from");
            continue;
        }
        for source in &sources {
            let copy = match fetch_copy(manager, *source, hosted, &ranges).await {
                Ok(copy) => copy,
                Err(e) => {
                    debug!(partition = %tp, segment, source, error = %e, "no copy of damaged batches");
                    continue;
                }
            };
            match hosted.log.repair_segment(segment, &copy) {
                Ok(n) => {
                    info!(partition = %tp, segment, source, ranges = n, "damaged batches replaced with an in-sync replica's copy");
                    break;
                }
                Err(e @ RepairError::BadReplacement { .. }) => {
                    warn!(partition = %tp, segment, source, error = %e, "a replica's copy does not fit; trying another");
                }
                Err(e) => {
                    debug!(partition = %tp, segment, error = %e, "repair not applied; retried later");
                    break;
                }
            }
        }
    }
}

/// The source's batches for each damaged range, each covering exactly its offsets.
async fn fetch_copy(
    manager: &Arc<ReplicaManager>,
    source: i32,
    hosted: &HostedPartition,
    ranges: &[DamagedRange],
) -> Result<Vec<(DamagedRange, Bytes)>, String> {
    let addr = manager
        .broker_address(source)
        .ok_or_else(|| format!("broker {source} has no address"))?;
    let timeout = manager.config.broker.replica_socket_timeout();
    let client_id = format!("millrace-repair-{}", manager.node_id());
    let mut conn = manager
        .connect_to(&addr, &client_id, timeout)
        .await
        .map_err(|e| e.to_string())?;
    let mut copies = Vec::with_capacity(ranges.len());
    for range in ranges {
        let mut out = Vec::with_capacity(usize::try_from(range.len).unwrap_or(0));
        let mut next = range.from;
        for _ in 0..REPAIR_FETCHES_PER_RANGE_MAX {
            if next >= range.to {
                break;
            }
            let records = fetch_once(&mut conn, hosted, next, range, timeout).await?;
            let after = take_batches(&records, next, range.to, &mut out)?;
            if after == next {
                return Err(format!("no batch at offset {next} in the answer"));
            }
            next = after;
        }
        if next != range.to {
            return Err(format!(
                "copy of [{}, {}) stopped at {next}",
                range.from, range.to
            ));
        }
        copies.push((*range, Bytes::from(out)));
    }
    Ok(copies)
}

/// One consumer Fetch of `hosted`'s partition at `offset`; the partition's records.
async fn fetch_once(
    conn: &mut BrokerConnection,
    hosted: &HostedPartition,
    offset: i64,
    range: &DamagedRange,
    timeout: Duration,
) -> Result<Bytes, String> {
    let max_bytes = i32::try_from(range.len)
        .unwrap_or(i32::MAX)
        .clamp(1, REPAIR_FETCH_BYTES_MAX);
    let partition = FetchPartition::default()
        .with_partition(hosted.tp.partition)
        .with_current_leader_epoch(-1)
        .with_fetch_offset(offset)
        .with_last_fetched_epoch(-1)
        .with_log_start_offset(-1)
        .with_partition_max_bytes(max_bytes);
    let request = FetchRequest::default()
        .with_replica_state(ReplicaState::default().with_replica_id(BrokerId(-1)))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(max_bytes)
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic_id(hosted.topic_id)
            .with_partitions(vec![partition])]);
    let response: FetchResponse = conn
        .send(ApiKey::Fetch, REPAIR_FETCH_VERSION, &request, timeout)
        .await
        .map_err(|e| e.to_string())?;
    if response.error_code != 0 {
        return Err(format!("fetch error {}", response.error_code));
    }
    let data = response
        .responses
        .into_iter()
        .flat_map(|t| t.partitions)
        .find(|p| p.partition_index == hosted.tp.partition)
        .ok_or_else(|| "no answer for the partition".to_string())?;
    if data.error_code != 0 {
        return Err(format!("partition error {}", data.error_code));
    }
    Ok(data.records.unwrap_or_default())
}
