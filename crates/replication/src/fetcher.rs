//! Followers' fetchers (Kafka's `ReplicaFetcherThread`): one task per leader broker fetches every
//! partition this broker follows from that leader, with one Fetch request at a time (v17:
//! `replica_state` with our broker epoch, `last_fetched_epoch`, topic ids).
//!
//! Per answer and partition: a diverging epoch truncates our log (and the next fetch starts from
//! the new end); records are appended as the leader stored them (offsets and leader epochs kept);
//! an out-of-range offset below the leader's log start restarts our log there; the leader's HW,
//! capped by our log end, becomes ours. The next fetch goes out only once everything appended is
//! as durable as the flush policy promises, so the offset we fetch from — which is what the
//! leader counts for its HW — is always durable here.
//!
//! Each fetcher keeps an incremental fetch session with its leader (KIP-227,
//! [`crate::fetch_session`]): after the first full request, a request names only the partitions
//! whose position changed, and the answer only the partitions with something new.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::fetch_request::{
    FetchPartition, FetchTopic, ForgottenTopic, ReplicaState,
};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse};
use millrace_store::TopicPartition;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::client::BrokerConnection;
use crate::fetch_session::{FetchSessionClient, PartitionFetch, PartitionKey};
use crate::manager::{HostedPartition, ReplicaManager};

/// The Fetch version followers send.
pub const REPLICA_FETCH_VERSION: i16 = 17;

/// Kafka error codes the fetcher acts on.
mod codes {
    pub const NONE: i16 = 0;
    pub const OFFSET_OUT_OF_RANGE: i16 = 1;
}

/// How long a partition whose fetch failed waits before it is fetched again.
const PARTITION_BACKOFF: Duration = Duration::from_millis(200);

/// A running fetcher.
pub(crate) struct FetcherHandle {
    wake: Arc<Notify>,
    stop: CancellationToken,
}

impl ReplicaManager {
    /// Starts fetchers for leaders we now follow, stops those we no longer need, wakes the rest.
    pub(crate) fn update_fetchers(self: &Arc<Self>) {
        let leaders: Vec<i32> = self
            .following
            .read()
            .iter()
            .filter(|(_, set)| !set.is_empty())
            .map(|(l, _)| *l)
            .collect();
        let mut fetchers = self.fetchers.lock();
        fetchers.retain(|leader, handle| {
            let keep = leaders.contains(leader);
            if !keep {
                handle.stop.cancel();
            }
            keep
        });
        for leader in leaders {
            let handle = fetchers.entry(leader).or_insert_with(|| {
                let wake = Arc::new(Notify::new());
                let stop = self.stop.child_token();
                let manager = Arc::clone(self);
                let (w, s) = (Arc::clone(&wake), stop.clone());
                tokio::spawn(async move { run(manager, leader, w, s).await });
                info!(leader, "started replica fetcher");
                FetcherHandle { wake, stop }
            });
            handle.wake.notify_one();
        }
    }
}

async fn run(
    manager: Arc<ReplicaManager>,
    leader: i32,
    wake: Arc<Notify>,
    stop: CancellationToken,
) {
    let mut conn: Option<BrokerConnection> = None;
    let mut session = FetchSessionClient::default();
    let mut backoff_until: HashMap<TopicPartition, Instant> = HashMap::new();
    let client_id = format!("broker-{}-fetcher-{leader}", manager.node_id());
    loop {
        if stop.is_cancelled() {
            return;
        }
        let now = Instant::now();
        backoff_until.retain(|_, until| *until > now);
        let partitions: Vec<Arc<HostedPartition>> = manager
            .following(leader)
            .into_iter()
            .filter(|h| !backoff_until.contains_key(&h.tp))
            .collect();
        let mut wanted = Vec::new();
        for hosted in &partitions {
            let part = manager.lock_partition(hosted);
            if let Some(pos) = part.fetch_position() {
                if pos.leader == leader {
                    wanted.push((Arc::clone(hosted), pos, part.log.0.log_start_offset()));
                }
            }
        }
        if wanted.is_empty() {
            let pause = backoff_until
                .values()
                .min()
                .map_or(Duration::from_secs(1), |u| u.saturating_duration_since(now));
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = wake.notified() => {}
                _ = tokio::time::sleep(pause) => {}
            }
            continue;
        }
        let connected = match conn.take() {
            Some(c) => Some(c),
            // (A failed request reset the session, so a new connection starts a new one.)
            None => match manager.broker_address(leader) {
                Some(addr) => {
                    match BrokerConnection::connect(
                        &addr,
                        &client_id,
                        manager.config.replica_socket_timeout(),
                    )
                    .await
                    {
                        Ok(c) => Some(c),
                        Err(e) => {
                            debug!(leader, error = %e, "cannot reach the leader");
                            None
                        }
                    }
                }
                None => None,
            },
        };
        let Some(mut c) = connected else {
            pause(&stop, &wake, manager.config.replica_fetch_backoff()).await;
            continue;
        };
        let max_bytes = manager.config.replica_fetch_max_bytes();
        let state: Vec<(PartitionKey, PartitionFetch)> = wanted
            .iter()
            .map(|(hosted, pos, log_start)| {
                (
                    (hosted.topic_id, hosted.tp.partition),
                    PartitionFetch {
                        fetch_offset: pos.fetch_offset,
                        current_leader_epoch: pos.leader_epoch,
                        last_fetched_epoch: pos.last_fetched_epoch,
                        log_start_offset: *log_start,
                        partition_max_bytes: max_bytes,
                    },
                )
            })
            .collect();
        let request = build_request(&manager, &state, session.next_request(&state));
        let timeout = manager.config.replica_socket_timeout()
            + Duration::from_millis(u64::try_from(request.max_wait_ms.max(0)).unwrap_or(0));
        let response: FetchResponse = match c
            .send(ApiKey::Fetch, REPLICA_FETCH_VERSION, &request, timeout)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                debug!(leader, error = %e, "replica fetch failed");
                session.reset();
                pause(&stop, &wake, manager.config.replica_fetch_backoff()).await;
                continue;
            }
        };
        conn = Some(c);
        session.on_response(response.error_code, response.session_id);
        if response.error_code != codes::NONE {
            debug!(
                leader,
                code = response.error_code,
                "fetch session refused; fetching in full"
            );
            continue;
        }
        let mut to_sync = Vec::new();
        for topic in response.responses {
            for pd in topic.partitions {
                let Some((hosted, pos, _)) = wanted.iter().find(|(h, _, _)| {
                    h.topic_id == topic.topic_id && h.tp.partition == pd.partition_index
                }) else {
                    continue;
                };
                let mut part = manager.lock_partition(hosted);
                // The state may have moved while the request was out: act only on the same epoch.
                match part.fetch_position() {
                    Some(p)
                        if p.leader == leader
                            && p.leader_epoch == pos.leader_epoch
                            && p.fetch_offset == pos.fetch_offset => {}
                    _ => continue,
                }
                match pd.error_code {
                    codes::NONE => {
                        if pd.diverging_epoch.epoch >= 0 || pd.diverging_epoch.end_offset >= 0 {
                            match part.on_diverging_epoch(
                                pd.diverging_epoch.epoch,
                                pd.diverging_epoch.end_offset,
                            ) {
                                Ok(leo) => {
                                    info!(partition = %hosted.tp, epoch = pd.diverging_epoch.epoch, end_offset = pd.diverging_epoch.end_offset, truncated_to = leo, "truncated a diverging log")
                                }
                                Err(e) => {
                                    warn!(partition = %hosted.tp, error = ?e, "truncation failed")
                                }
                            }
                            continue;
                        }
                        if let Some(records) = pd.records.filter(|r| !r.is_empty()) {
                            match hosted.log.append_replicated(records) {
                                Ok(_) => {
                                    to_sync.push((Arc::clone(hosted), hosted.log.log_end_offset()))
                                }
                                Err(e) => {
                                    warn!(partition = %hosted.tp, error = %e, "appending replicated records failed");
                                    backoff_until.insert(
                                        hosted.tp.clone(),
                                        Instant::now() + PARTITION_BACKOFF,
                                    );
                                    continue;
                                }
                            }
                        }
                        let actions = part.on_leader_high_watermark(pd.high_watermark);
                        manager.process(hosted, &mut part, actions);
                        // The leader's log start moved (retention, DeleteRecords): follow it, up to
                        // what this replica knows is committed (Kafka's
                        // maybeIncrementLogStartOffset).
                        let log = &hosted.log;
                        if pd.log_start_offset > log.log_start_offset() {
                            let to = pd.log_start_offset.min(log.high_watermark());
                            if to > log.log_start_offset() {
                                if let Err(e) = log.delete_records_before(to) {
                                    warn!(partition = %hosted.tp, error = %e, "following the leader's log start failed");
                                }
                            }
                        }
                    }
                    codes::OFFSET_OUT_OF_RANGE => {
                        if let Err(e) = part.on_fetch_out_of_range(pd.log_start_offset) {
                            warn!(partition = %hosted.tp, error = ?e, "restarting the log failed");
                        }
                        backoff_until.insert(hosted.tp.clone(), Instant::now() + PARTITION_BACKOFF);
                    }
                    code => {
                        debug!(partition = %hosted.tp, code, "replica fetch error; waiting for metadata");
                        backoff_until.insert(hosted.tp.clone(), Instant::now() + PARTITION_BACKOFF);
                    }
                }
            }
        }
        // Fetch again only from a durable position.
        for (hosted, offset) in to_sync {
            if let Err(e) = hosted.log.wait_durable(offset).await {
                warn!(partition = %hosted.tp, error = %e, "replicated records did not become durable");
            }
        }
    }
}

/// The request for the partitions `session` says to send (all of them without a session).
fn build_request(
    manager: &ReplicaManager,
    state: &[(PartitionKey, PartitionFetch)],
    session: crate::fetch_session::SessionRequest,
) -> FetchRequest {
    let by_key: HashMap<&PartitionKey, &PartitionFetch> =
        state.iter().map(|(k, f)| (k, f)).collect();
    let mut topics: Vec<FetchTopic> = Vec::new();
    for key in &session.send {
        let Some(f) = by_key.get(key) else {
            continue;
        };
        let partition = FetchPartition::default()
            .with_partition(key.1)
            .with_current_leader_epoch(f.current_leader_epoch)
            .with_fetch_offset(f.fetch_offset)
            .with_last_fetched_epoch(f.last_fetched_epoch)
            .with_log_start_offset(f.log_start_offset)
            .with_partition_max_bytes(f.partition_max_bytes);
        match topics.iter_mut().find(|t| t.topic_id == key.0) {
            Some(t) => t.partitions.push(partition),
            None => topics.push(
                FetchTopic::default()
                    .with_topic_id(key.0)
                    .with_partitions(vec![partition]),
            ),
        }
    }
    let mut forgotten: Vec<ForgottenTopic> = Vec::new();
    for (topic_id, partition) in &session.forget {
        match forgotten.iter_mut().find(|t| t.topic_id == *topic_id) {
            Some(t) => t.partitions.push(*partition),
            None => forgotten.push(
                ForgottenTopic::default()
                    .with_topic_id(*topic_id)
                    .with_partitions(vec![*partition]),
            ),
        }
    }
    FetchRequest::default()
        .with_replica_state(
            ReplicaState::default()
                .with_replica_id(BrokerId(manager.node_id()))
                .with_replica_epoch(manager.broker_epoch.load(Ordering::SeqCst)),
        )
        .with_max_wait_ms(manager.config.replica_fetch_wait_max_ms())
        .with_min_bytes(manager.config.replica_fetch_min_bytes())
        .with_max_bytes(manager.config.replica_fetch_response_max_bytes())
        .with_isolation_level(0)
        .with_session_id(session.session_id)
        .with_session_epoch(session.session_epoch)
        .with_topics(topics)
        .with_forgotten_topics_data(forgotten)
}

async fn pause(stop: &CancellationToken, wake: &Notify, d: Duration) {
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = wake.notified() => {}
        _ = tokio::time::sleep(d) => {}
    }
}
