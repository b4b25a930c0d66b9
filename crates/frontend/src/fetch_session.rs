//! Incremental fetch sessions (KIP-227): the broker remembers what a fetcher asked for last time,
//! so that the next Fetch names only the partitions whose position changed and the answer carries
//! only the partitions that have something new (records, a moved high watermark, last stable
//! offset or log start offset, an error, a leader hint).
//!
//! Kafka's rules, as clients rely on them:
//! - session id 0 with epoch -1 (FINAL): no session, a full fetch every time;
//! - epoch 0 (INITIAL): a new full session (closing `session_id` first if set); the answer's
//!   session id is the new one, or 0 when the cache has no slot (the client goes on sessionless);
//! - epoch > 0: the next request of that session: FETCH_SESSION_ID_NOT_FOUND when the cache no
//!   longer has it, INVALID_FETCH_SESSION_EPOCH when the epoch is not the one expected; the request's
//!   partitions are added or updated, `forgotten_topics_data` removed;
//! - a non-zero session id with epoch -1 closes that session and fetches without one.
//!
//! The cache holds `max.incremental.fetch.session.cache.slots` sessions. A new session takes a free
//! slot, or evicts the least recently used session idle for longer than [`EVICTION_IDLE_MS`], or
//! else a smaller session (more partitions win, as in Kafka; a follower's session is evicted only
//! for another follower's). Partitions that returned records move to the end of their session's
//! order, so that `max_bytes` does not starve the last ones.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use uuid::Uuid;

/// The epoch that ends a session (or asks for none).
pub const FINAL_EPOCH: i32 = -1;
/// The epoch that starts a session.
pub const INITIAL_EPOCH: i32 = 0;
/// A session idle this long may be evicted for any new one (Kafka's
/// `min.incremental.fetch.session.eviction.ms`, fixed at 120 s there too).
pub const EVICTION_IDLE_MS: i64 = 120_000;

/// One partition of a session: what the fetcher asked for, and what the last answer told it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionPartition {
    /// The topic's name (empty for requests that name topics by id).
    pub topic: Arc<str>,
    /// The topic's id (nil for requests that name topics by name).
    pub topic_id: Uuid,
    pub partition: i32,
    pub fetch_offset: i64,
    pub current_leader_epoch: i32,
    pub last_fetched_epoch: i32,
    pub partition_max_bytes: i32,
    /// What the last answer that included this partition said (`None`: never answered).
    pub answered: Option<Answered>,
}

/// The fields of a partition's answer whose change makes an incremental answer include it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered {
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
}

impl SessionPartition {
    fn key(&self) -> (Uuid, &str, i32) {
        (self.topic_id, &self.topic, self.partition)
    }
}

/// A session's partitions in fetch order.
#[derive(Debug, Clone)]
struct Session {
    epoch: i32,
    follower: bool,
    last_used_ms: i64,
    partitions: Vec<SessionPartition>,
}

/// What a Fetch is, once its session fields are read.
#[derive(Debug)]
pub enum FetchContext {
    /// No session: every requested partition, every time.
    Sessionless,
    /// A new session (`id` 0 when none could be made): every requested partition.
    Full { id: i32 },
    /// The next request of session `id`: every partition of the session, in its order; the answer
    /// keeps only the partitions with something new.
    Incremental {
        id: i32,
        partitions: Vec<SessionPartition>,
    },
    /// The request cannot go on (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH).
    Error(SessionError),
}

/// Why a session's request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    #[error("fetch session not found")]
    NotFound,
    #[error("fetch session epoch out of order")]
    InvalidEpoch,
}

/// The broker's fetch sessions.
#[derive(Debug)]
pub struct FetchSessionCache {
    slots: usize,
    sessions: Mutex<HashMap<i32, Session>>,
}

impl FetchSessionCache {
    /// A cache of `slots` sessions (`max.incremental.fetch.session.cache.slots`; 0 = none).
    pub fn new(slots: usize) -> Self {
        Self {
            slots,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// Sessions held now.
    pub fn len(&self) -> usize {
        self.sessions.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// (sessions, partitions they hold), for the metrics.
    pub fn stats(&self) -> (usize, usize) {
        let sessions = self.sessions.lock();
        let partitions = sessions.values().map(|s| s.partitions.len()).sum();
        (sessions.len(), partitions)
    }

    /// Reads a request's session fields. `requested` are the request's partitions (for an
    /// incremental request, the ones to add or update), `forgotten` the ones to remove.
    pub fn begin(
        &self,
        session_id: i32,
        epoch: i32,
        follower: bool,
        requested: &[SessionPartition],
        forgotten: &[(Uuid, String, i32)],
        now_ms: i64,
    ) -> FetchContext {
        let mut sessions = self.sessions.lock();
        match epoch {
            FINAL_EPOCH => {
                if session_id != 0 {
                    sessions.remove(&session_id);
                }
                FetchContext::Sessionless
            }
            INITIAL_EPOCH => {
                if session_id != 0 {
                    sessions.remove(&session_id);
                }
                let id = self
                    .make_room(&mut sessions, follower, requested.len(), now_ms)
                    .map(|()| new_id(&sessions))
                    .unwrap_or(0);
                if id != 0 {
                    sessions.insert(
                        id,
                        Session {
                            epoch: 1,
                            follower,
                            last_used_ms: now_ms,
                            partitions: requested.to_vec(),
                        },
                    );
                }
                FetchContext::Full { id }
            }
            _ => {
                let Some(session) = sessions.get_mut(&session_id) else {
                    return FetchContext::Error(SessionError::NotFound);
                };
                if session.epoch != epoch {
                    return FetchContext::Error(SessionError::InvalidEpoch);
                }
                session.epoch = if epoch == i32::MAX { 1 } else { epoch + 1 };
                session.last_used_ms = now_ms;
                session.partitions.retain(|p| {
                    !forgotten
                        .iter()
                        .any(|(id, topic, partition)| p.key() == (*id, topic.as_str(), *partition))
                });
                for wanted in requested {
                    match session
                        .partitions
                        .iter_mut()
                        .find(|p| p.key() == wanted.key())
                    {
                        Some(p) => {
                            p.fetch_offset = wanted.fetch_offset;
                            p.current_leader_epoch = wanted.current_leader_epoch;
                            p.last_fetched_epoch = wanted.last_fetched_epoch;
                            p.partition_max_bytes = wanted.partition_max_bytes;
                        }
                        None => session.partitions.push(wanted.clone()),
                    }
                }
                FetchContext::Incremental {
                    id: session_id,
                    partitions: session.partitions.clone(),
                }
            }
        }
    }

    /// Records what the answer of session `id` said: `answered` has one entry per partition the
    /// answer included, with whether it carried records (those move to the end of the order).
    /// Forgets a session (a full fetch that was answered throttled: Kafka creates none then).
    pub fn remove(&self, id: i32) {
        self.sessions.lock().remove(&id);
    }

    pub fn answered(&self, id: i32, answered: &[((Uuid, String, i32), Answered, bool)]) {
        let mut sessions = self.sessions.lock();
        let Some(session) = sessions.get_mut(&id) else {
            return;
        };
        let mut moved = Vec::new();
        for (key, values, had_records) in answered {
            let Some(index) = session
                .partitions
                .iter()
                .position(|p| p.key() == (key.0, key.1.as_str(), key.2))
            else {
                continue;
            };
            session.partitions[index].answered = Some(*values);
            if *had_records {
                moved.push(index);
            }
        }
        // Partitions that returned records go last next time, in the order they came.
        moved.sort_unstable();
        let mut tail = Vec::with_capacity(moved.len());
        for index in moved.into_iter().rev() {
            tail.push(session.partitions.remove(index));
        }
        session.partitions.extend(tail.into_iter().rev());
    }

    /// Frees a slot for a new session of `size` partitions, if the rules allow.
    fn make_room(
        &self,
        sessions: &mut HashMap<i32, Session>,
        follower: bool,
        size: usize,
        now_ms: i64,
    ) -> Option<()> {
        if self.slots == 0 {
            return None;
        }
        if sessions.len() < self.slots {
            return Some(());
        }
        let stale = sessions
            .iter()
            .filter(|(_, s)| now_ms.saturating_sub(s.last_used_ms) >= EVICTION_IDLE_MS)
            .min_by_key(|(_, s)| s.last_used_ms)
            .map(|(id, _)| *id);
        let victim = stale.or_else(|| {
            sessions
                .iter()
                .filter(|(_, s)| (follower || !s.follower) && s.partitions.len() < size)
                .min_by_key(|(_, s)| (s.follower, s.partitions.len(), s.last_used_ms))
                .map(|(id, _)| *id)
        })?;
        sessions.remove(&victim);
        Some(())
    }
}

/// A positive session id not in use.
fn new_id(sessions: &HashMap<i32, Session>) -> i32 {
    loop {
        let id = (Uuid::new_v4().as_u128() as u32 >> 1) as i32;
        if id != 0 && !sessions.contains_key(&id) {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(topic: &str, partition: i32, offset: i64) -> SessionPartition {
        SessionPartition {
            topic: Arc::from(topic),
            topic_id: Uuid::nil(),
            partition,
            fetch_offset: offset,
            current_leader_epoch: -1,
            last_fetched_epoch: -1,
            partition_max_bytes: 1 << 20,
            answered: None,
        }
    }

    fn offsets(ctx: &FetchContext) -> Vec<(String, i32, i64)> {
        match ctx {
            FetchContext::Incremental { partitions, .. } => partitions
                .iter()
                .map(|p| (p.topic.to_string(), p.partition, p.fetch_offset))
                .collect(),
            other => panic!("not incremental: {other:?}"),
        }
    }

    #[test]
    fn a_session_adds_updates_and_forgets_partitions_and_checks_its_epoch() {
        let cache = FetchSessionCache::new(10);
        let FetchContext::Full { id } = cache.begin(
            0,
            INITIAL_EPOCH,
            false,
            &[part("a", 0, 0), part("a", 1, 0)],
            &[],
            0,
        ) else {
            panic!("no session");
        };
        assert_ne!(id, 0);
        // Epoch 1: update a-0, add b-0.
        let ctx = cache.begin(id, 1, false, &[part("a", 0, 5), part("b", 0, 0)], &[], 1);
        assert_eq!(
            offsets(&ctx),
            vec![("a".into(), 0, 5), ("a".into(), 1, 0), ("b".into(), 0, 0)]
        );
        // Epoch 2: forget a-1; nothing else named keeps its offset.
        let ctx = cache.begin(id, 2, false, &[], &[(Uuid::nil(), "a".into(), 1)], 2);
        assert_eq!(offsets(&ctx), vec![("a".into(), 0, 5), ("b".into(), 0, 0)]);
        // Re-add a-1 at a new offset.
        let ctx = cache.begin(id, 3, false, &[part("a", 1, 7)], &[], 3);
        assert_eq!(
            offsets(&ctx),
            vec![("a".into(), 0, 5), ("b".into(), 0, 0), ("a".into(), 1, 7)]
        );
        // A replayed epoch, a skipped one, an unknown id.
        assert!(matches!(
            cache.begin(id, 3, false, &[], &[], 4),
            FetchContext::Error(SessionError::InvalidEpoch)
        ));
        assert!(matches!(
            cache.begin(id, 9, false, &[], &[], 4),
            FetchContext::Error(SessionError::InvalidEpoch)
        ));
        assert!(matches!(
            cache.begin(id ^ 1, 1, false, &[], &[], 4),
            FetchContext::Error(SessionError::NotFound)
        ));
        // FINAL closes it.
        assert!(matches!(
            cache.begin(id, FINAL_EPOCH, false, &[], &[], 5),
            FetchContext::Sessionless
        ));
        assert!(cache.is_empty());
    }

    #[test]
    fn partitions_that_returned_records_go_last() {
        let cache = FetchSessionCache::new(1);
        let all = vec![part("t", 0, 0), part("t", 1, 0), part("t", 2, 0)];
        let FetchContext::Full { id } = cache.begin(0, INITIAL_EPOCH, false, &all, &[], 0) else {
            panic!("no session");
        };
        let seen = Answered {
            high_watermark: 3,
            last_stable_offset: 3,
            log_start_offset: 0,
        };
        cache.answered(
            id,
            &[
                ((Uuid::nil(), "t".into(), 0), seen, true),
                ((Uuid::nil(), "t".into(), 1), seen, false),
            ],
        );
        let ctx = cache.begin(id, 1, false, &[], &[], 1);
        assert_eq!(
            offsets(&ctx),
            vec![("t".into(), 1, 0), ("t".into(), 2, 0), ("t".into(), 0, 0)]
        );
        let FetchContext::Incremental { partitions, .. } = ctx else {
            unreachable!()
        };
        assert_eq!(partitions[0].answered, Some(seen));
        assert_eq!(partitions[1].answered, None);
    }

    #[test]
    fn a_full_cache_evicts_the_idle_then_the_smaller_and_never_for_a_smaller_one() {
        let cache = FetchSessionCache::new(2);
        let start = |size: usize, follower: bool, now: i64| {
            let parts: Vec<SessionPartition> = (0..size as i32).map(|p| part("t", p, 0)).collect();
            match cache.begin(0, INITIAL_EPOCH, follower, &parts, &[], now) {
                FetchContext::Full { id } => id,
                other => panic!("{other:?}"),
            }
        };
        let small = start(2, false, 0);
        let big = start(5, true, 0);
        assert!(small != 0 && big != 0);
        // Full: a consumer session of 1 partition evicts nobody.
        assert_eq!(start(1, false, 10), 0);
        // A consumer of 3 evicts the consumer session of 2, not the follower's.
        let three = start(3, false, 20);
        assert_ne!(three, 0);
        assert!(matches!(
            cache.begin(small, 1, false, &[], &[], 21),
            FetchContext::Error(SessionError::NotFound)
        ));
        // Idle past the eviction time, any session makes way, even for a small one.
        let later = EVICTION_IDLE_MS + 100;
        assert!(matches!(
            cache.begin(three, 1, false, &[], &[], later - 50),
            FetchContext::Incremental { .. }
        ));
        assert_ne!(
            start(1, false, later),
            0,
            "the follower's idle session is evicted"
        );
        assert_eq!(cache.len(), 2);
        // No cache at all.
        let none = FetchSessionCache::new(0);
        assert!(matches!(
            none.begin(0, INITIAL_EPOCH, false, &[part("t", 0, 0)], &[], 0),
            FetchContext::Full { id: 0 }
        ));
    }
}
