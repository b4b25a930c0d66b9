//! Followers' fetchers (Kafka's `ReplicaFetcherThread`): one task per leader broker executes the
//! replication driver's [`LeaderFetcher`] for every partition this broker follows from that
//! leader — the driver decides when a fetch goes out and what each partition does with its answer
//! ([`apply_answer`]: truncate a diverging log, append as the leader stored, restart behind the
//! leader's log start, take the leader's HW); this task moves the bytes (Fetch v17 with our broker
//! epoch, `last_fetched_epoch`, topic ids) and waits for appended records to become durable when
//! the driver says so.
//!
//! Each fetcher keeps an incremental fetch session with its leader (KIP-227,
//! [`crate::fetch_session`]): after the first full request, a request names only the partitions
//! whose position changed, and the answer only the partitions with something new.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{
    FetchPartition, FetchTopic, ForgottenTopic, ReplicaState,
};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse};
use millrace_cluster::config::BrokerConfig;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::client::BrokerConnection;
use crate::driver::fetch::{apply_answer, FetchAnswer, FetchStep, Followed, LeaderFetcher};
use crate::fetch_session::{FetchSessionClient, PartitionFetch, PartitionKey};
use crate::manager::{FetcherHandle, HostedPartition, ReplicaManager};
use crate::partition::FetchPosition;

/// The Fetch version followers send.
pub const REPLICA_FETCH_VERSION: i16 = 17;

/// Kafka error codes the fetcher acts on.
mod codes {
    pub const NONE: i16 = 0;
    pub const OFFSET_OUT_OF_RANGE: i16 = 1;
}

/// How often an idle fetcher looks again without being woken.
const IDLE_RECHECK: Duration = Duration::from_secs(1);

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
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
    let mut fetcher: LeaderFetcher<PartitionKey> = LeaderFetcher::new(leader);
    let backoff_ms =
        i64::try_from(manager.config.broker.replica_fetch_backoff().as_millis()).unwrap_or(1_000);
    let client_id = format!("broker-{}-fetcher-{leader}", manager.node_id());
    loop {
        if stop.is_cancelled() {
            return;
        }
        let hosted: HashMap<PartitionKey, Arc<HostedPartition>> = manager
            .following(leader)
            .into_iter()
            .map(|h| ((h.topic_id, h.tp.partition), h))
            .collect();
        // A replica on an offline log dir is not fetched for (Kafka stops its fetcher): it can
        // store nothing until the broker restarts. A throttled replica out of the ISR waits
        // while the follower bound is exceeded (KIP-73; `throttle`).
        let image = manager.image.current();
        let throttled = |h: &HostedPartition| {
            h.follower_throttled()
                && !image
                    .partition(&h.tp.topic, h.tp.partition)
                    .is_some_and(|p| p.isr.contains(&manager.node_id()))
        };
        let held_back = manager.follower_quota.exceeded(now_ms());
        let followed: Vec<Followed<PartitionKey>> = hosted
            .iter()
            .filter(|(_, h)| !h.log.is_offline())
            .filter(|(_, h)| !(held_back && throttled(h)))
            .filter_map(|(key, h)| {
                let position = manager.lock_partition(h).partition.fetch_position()?;
                Some(Followed {
                    key: *key,
                    position,
                    unsynced: h.log.durable_offset() < h.log.log_end_offset(),
                })
            })
            .collect();
        let (fetch_id, partitions) = match fetcher.next(now_ms(), followed) {
            FetchStep::Idle { retry_at_ms } => {
                let wait = retry_at_ms.map_or(IDLE_RECHECK, |at| {
                    Duration::from_millis(u64::try_from(at - now_ms()).unwrap_or(0))
                });
                pause(&stop, &wake, wait).await;
                continue;
            }
            FetchStep::WaitDurable => {
                // Fetch again only from a durable position.
                for h in hosted.values() {
                    if let Err(e) = h.log.wait_durable(h.log.log_end_offset()).await {
                        warn!(partition = %h.tp, error = %e, "replicated records did not become durable");
                    }
                }
                fetcher.on_durable();
                continue;
            }
            FetchStep::Send {
                fetch_id,
                partitions,
            } => (fetch_id, partitions),
        };
        let connected = match conn.take() {
            Some(c) => Some(c),
            // (A failed request reset the session, so a new connection starts a new one.)
            None => match manager.broker_address(leader) {
                Some(addr) => {
                    match manager
                        .connect_to(
                            &addr,
                            &client_id,
                            manager.config.broker.replica_socket_timeout(),
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
            fetcher.on_failure(Some(fetch_id), now_ms(), backoff_ms);
            continue;
        };
        let max_bytes = manager.config.broker.replica_fetch_max_bytes();
        let state: Vec<(PartitionKey, PartitionFetch)> = partitions
            .iter()
            .map(|(key, pos)| {
                let log_start = hosted
                    .get(key)
                    .map_or(pos.fetch_offset, |h| h.log.log_start_offset());
                (
                    *key,
                    PartitionFetch {
                        fetch_offset: pos.fetch_offset,
                        current_leader_epoch: pos.leader_epoch,
                        last_fetched_epoch: pos.last_fetched_epoch,
                        log_start_offset: log_start,
                        partition_max_bytes: max_bytes,
                    },
                )
            })
            .collect();
        let replica = ReplicaState::default()
            .with_replica_id(BrokerId(manager.node_id()))
            .with_replica_epoch(manager.broker_epoch.load(Ordering::SeqCst));
        let request = build_request(
            replica,
            &manager.config.broker,
            &state,
            session.next_request(&state),
        );
        let timeout = manager.config.broker.replica_socket_timeout()
            + Duration::from_millis(u64::try_from(request.max_wait_ms.max(0)).unwrap_or(0));
        let response: FetchResponse = match c
            .send(ApiKey::Fetch, REPLICA_FETCH_VERSION, &request, timeout)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                debug!(leader, error = %e, "replica fetch failed");
                session.reset();
                fetcher.on_failure(Some(fetch_id), now_ms(), backoff_ms);
                continue;
            }
        };
        conn = Some(c);
        let Some(sent) = fetcher.on_answer(fetch_id) else {
            continue;
        };
        session.on_response(response.error_code, response.session_id);
        if response.error_code != codes::NONE {
            debug!(
                leader,
                code = response.error_code,
                "fetch session refused; fetching in full"
            );
            continue;
        }
        let sent: HashMap<PartitionKey, FetchPosition> = sent.into_iter().collect();
        let mut appended = false;
        for topic in response.responses {
            for pd in topic.partitions {
                let key = (topic.topic_id, pd.partition_index);
                let (Some(h), Some(position)) = (hosted.get(&key), sent.get(&key)) else {
                    continue;
                };
                if throttled(h) {
                    let bytes = pd.records.as_ref().map_or(0, |r| r.len());
                    manager.follower_quota.record(bytes, now_ms());
                }
                let mut slot = manager.lock_partition(h);
                let outcome = apply_answer(&mut slot.partition, position, answer_of(pd));
                appended |= outcome.appended;
                if outcome.back_off {
                    fetcher.back_off_partition(key, now_ms());
                }
                if let Some((before, after)) = outcome.truncated {
                    info!(partition = %h.tp, log_end_before = before, truncated_to = after, "truncated a diverging log");
                }
                if let Some(start) = outcome.restarted_at {
                    info!(partition = %h.tp, log_start = start, "behind the leader's log start: log restarted there");
                }
                if let Some(failure) = &outcome.failure {
                    warn!(partition = %h.tp, error = %failure, "replica fetch answer not applied");
                }
                manager.process(h, &mut slot, outcome.actions);
            }
        }
        fetcher.answered(appended);
    }
}

/// One partition's part of a Fetch response, as the driver reads it.
fn answer_of(pd: PartitionData) -> FetchAnswer<Bytes> {
    match pd.error_code {
        codes::NONE if pd.diverging_epoch.epoch >= 0 || pd.diverging_epoch.end_offset >= 0 => {
            FetchAnswer::Diverging {
                epoch: pd.diverging_epoch.epoch,
                end_offset: pd.diverging_epoch.end_offset,
            }
        }
        codes::NONE => FetchAnswer::Records {
            records: pd.records.filter(|r| !r.is_empty()),
            high_watermark: pd.high_watermark,
            log_start_offset: pd.log_start_offset,
        },
        codes::OFFSET_OUT_OF_RANGE => FetchAnswer::OutOfRange {
            log_start_offset: pd.log_start_offset,
        },
        code => {
            debug!(
                partition = pd.partition_index,
                code, "replica fetch error; waiting for metadata"
            );
            FetchAnswer::Error
        }
    }
}

/// The request for the partitions `session` says to send (all of them without a session).
fn build_request(
    replica: ReplicaState,
    config: &BrokerConfig,
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
        .with_replica_state(replica)
        .with_max_wait_ms(config.replica_fetch_wait_max_ms())
        .with_min_bytes(config.replica_fetch_min_bytes())
        .with_max_bytes(config.replica_fetch_response_max_bytes())
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

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::fetch_response::EpochEndOffset;
    use uuid::Uuid;

    use super::*;
    use crate::fetch_session::SessionRequest;

    fn fetch(offset: i64) -> PartitionFetch {
        PartitionFetch {
            fetch_offset: offset,
            current_leader_epoch: 3,
            last_fetched_epoch: 2,
            log_start_offset: 0,
            partition_max_bytes: 1024,
        }
    }

    #[test]
    fn a_request_names_what_the_session_sends_by_topic_and_forgets_the_rest() {
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let state = vec![
            ((a, 0), fetch(10)),
            ((b, 1), fetch(20)),
            ((a, 2), fetch(30)),
        ];
        let session = SessionRequest {
            session_id: 9,
            session_epoch: 4,
            send: vec![(a, 0), (b, 1), (a, 2)],
            forget: vec![(b, 7)],
        };
        let replica = ReplicaState::default()
            .with_replica_id(BrokerId(2))
            .with_replica_epoch(11);
        let r = build_request(replica, &BrokerConfig::default(), &state, session);
        assert_eq!(r.replica_state.replica_id, BrokerId(2));
        assert_eq!(r.replica_state.replica_epoch, 11);
        assert_eq!((r.session_id, r.session_epoch), (9, 4));
        assert_eq!(r.max_wait_ms, 500);
        let topics: Vec<(Uuid, Vec<(i32, i64)>)> = r
            .topics
            .iter()
            .map(|t| {
                let parts = t
                    .partitions
                    .iter()
                    .map(|p| (p.partition, p.fetch_offset))
                    .collect();
                (t.topic_id, parts)
            })
            .collect();
        assert_eq!(
            topics,
            vec![(a, vec![(0, 10), (2, 30)]), (b, vec![(1, 20)])]
        );
        let p = &r.topics[0].partitions[0];
        assert_eq!((p.current_leader_epoch, p.last_fetched_epoch), (3, 2));
        assert_eq!(r.forgotten_topics_data.len(), 1);
        assert_eq!(r.forgotten_topics_data[0].partitions, vec![7]);
    }

    #[test]
    fn a_partitions_answer_is_read_as_the_driver_expects() {
        let diverging = PartitionData::default()
            .with_diverging_epoch(EpochEndOffset::default().with_epoch(2).with_end_offset(40));
        assert!(matches!(
            answer_of(diverging),
            FetchAnswer::Diverging {
                epoch: 2,
                end_offset: 40
            }
        ));
        let empty = PartitionData::default()
            .with_high_watermark(5)
            .with_log_start_offset(1)
            .with_records(Some(Bytes::new()));
        assert!(matches!(
            answer_of(empty),
            FetchAnswer::Records {
                records: None,
                high_watermark: 5,
                log_start_offset: 1
            }
        ));
        let out_of_range = PartitionData::default()
            .with_error_code(codes::OFFSET_OUT_OF_RANGE)
            .with_log_start_offset(100);
        assert!(matches!(
            answer_of(out_of_range),
            FetchAnswer::OutOfRange {
                log_start_offset: 100
            }
        ));
        // NOT_LEADER_OR_FOLLOWER (6), FENCED_LEADER_EPOCH (74): wait for metadata.
        for code in [6, 74] {
            assert!(matches!(
                answer_of(PartitionData::default().with_error_code(code)),
                FetchAnswer::Error
            ));
        }
    }
}
