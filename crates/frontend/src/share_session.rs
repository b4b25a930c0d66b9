//! Share sessions (KIP-932): what a share consumer's member fetches from this broker. ShareFetch
//! and ShareAcknowledge name only what changed; the session remembers the rest.
//!
//! Kafka's rules, as its clients rely on them:
//! - a session is keyed by (group, member), at most one per member on a broker, and belongs to
//!   the connection that opened it: when that connection closes, the session ends and the
//!   member's acquired records are released (`ShareConnection`'s drop);
//! - ShareFetch epoch 0 opens it (replacing the member's session if there is one; what the member
//!   acquired stays locked to it) with the
//!   request's partitions; the next request must carry epoch 1, then 2, … (after `i32::MAX`
//!   comes 1). A wrong epoch is INVALID_SHARE_SESSION_EPOCH, no session SHARE_SESSION_NOT_FOUND,
//!   a full cache (`group.share.max.share.sessions`) SHARE_SESSION_LIMIT_REACHED;
//! - a later request adds its partitions and drops its forgotten ones, and fetches from every
//!   partition of the session;
//! - epoch -1 closes the session (its epoch is not compared) after the request's
//!   acknowledgements; ShareAcknowledge shares the session's epoch counter but cannot open one.
//!
//! There is no idle expiry: a session lives as long as its connection, or until replaced.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use uuid::Uuid;

/// The epoch that opens (or resets) a session.
pub const OPEN_EPOCH: i32 = 0;
/// The epoch that closes a session.
pub const CLOSE_EPOCH: i32 = -1;

/// A partition of a share session: a topic by id and a partition index.
pub type SharePartitionId = (Uuid, i32);

/// Who holds a share session.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MemberKey {
    pub group_id: Arc<str>,
    pub member_id: Arc<str>,
}

/// Why a share session request was refused (Kafka's error names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ShareSessionError {
    /// SHARE_SESSION_NOT_FOUND (122).
    #[error("share session not found")]
    NotFound,
    /// INVALID_SHARE_SESSION_EPOCH (123).
    #[error("share session epoch out of order")]
    InvalidEpoch,
    /// SHARE_SESSION_LIMIT_REACHED (133).
    #[error("share session limit reached")]
    LimitReached,
}

#[derive(Debug)]
struct Session {
    /// The epoch the next request must carry.
    next_epoch: i32,
    /// The connection that owns the session.
    connection: u64,
    partitions: Vec<SharePartitionId>,
}

/// What a request may do once its session fields are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionStep {
    /// Every partition of the session after the request (for a close: before it ended).
    pub partitions: Vec<SharePartitionId>,
    /// The session ended with this request (epoch -1): the member's records are to be released.
    pub closed: bool,
    /// The session was opened (or reset) by this request.
    pub opened: bool,
    /// The partitions of a session this request replaced (the member's records stay locked to
    /// it: the member may still acknowledge them).
    pub replaced: Option<Vec<SharePartitionId>>,
}

/// The broker's share sessions.
#[derive(Debug)]
pub struct ShareSessionCache {
    max_sessions: usize,
    sessions: Mutex<HashMap<MemberKey, Session>>,
}

impl ShareSessionCache {
    /// A cache of at most `max_sessions` sessions (`group.share.max.share.sessions`).
    pub fn new(max_sessions: usize) -> Self {
        Self {
            max_sessions,
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

    /// Whether any member of `group_id` holds a session here.
    pub fn has_group(&self, group_id: &str) -> bool {
        self.sessions
            .lock()
            .keys()
            .any(|k| &*k.group_id == group_id)
    }

    /// ShareFetch's session step: `added` are the request's partitions, `forgotten` those to drop.
    pub fn fetch(
        &self,
        key: &MemberKey,
        epoch: i32,
        connection: u64,
        added: &[SharePartitionId],
        forgotten: &[SharePartitionId],
    ) -> Result<SessionStep, ShareSessionError> {
        let mut sessions = self.sessions.lock();
        match epoch {
            OPEN_EPOCH => {
                let replaced = sessions.remove(key).map(|s| s.partitions);
                if sessions.len() >= self.max_sessions {
                    return Err(ShareSessionError::LimitReached);
                }
                let mut partitions = Vec::with_capacity(added.len());
                for p in added {
                    if !partitions.contains(p) {
                        partitions.push(*p);
                    }
                }
                sessions.insert(
                    key.clone(),
                    Session {
                        next_epoch: 1,
                        connection,
                        partitions: partitions.clone(),
                    },
                );
                Ok(SessionStep {
                    partitions,
                    closed: false,
                    opened: true,
                    replaced,
                })
            }
            CLOSE_EPOCH => close(&mut sessions, key),
            _ => {
                let session = advance(&mut sessions, key, epoch)?;
                for p in added {
                    if !session.partitions.contains(p) {
                        session.partitions.push(*p);
                    }
                }
                session.partitions.retain(|p| !forgotten.contains(p));
                Ok(SessionStep {
                    partitions: session.partitions.clone(),
                    closed: false,
                    opened: false,
                    replaced: None,
                })
            }
        }
    }

    /// ShareAcknowledge's session step: it cannot open a session (epoch 0 is
    /// INVALID_SHARE_SESSION_EPOCH); epoch -1 closes it.
    pub fn acknowledge(
        &self,
        key: &MemberKey,
        epoch: i32,
    ) -> Result<SessionStep, ShareSessionError> {
        let mut sessions = self.sessions.lock();
        match epoch {
            OPEN_EPOCH => Err(ShareSessionError::InvalidEpoch),
            CLOSE_EPOCH => close(&mut sessions, key),
            _ => {
                let session = advance(&mut sessions, key, epoch)?;
                Ok(SessionStep {
                    partitions: session.partitions.clone(),
                    closed: false,
                    opened: false,
                    replaced: None,
                })
            }
        }
    }

    /// Drops the sessions `connection` owns (it closed); returns them, so that their members'
    /// records are released. A session another connection took over meanwhile stays.
    pub fn connection_closed(
        &self,
        connection: u64,
        members: &[MemberKey],
    ) -> Vec<(MemberKey, Vec<SharePartitionId>)> {
        let mut sessions = self.sessions.lock();
        let mut ended = Vec::new();
        for key in members {
            if sessions
                .get(key)
                .is_some_and(|s| s.connection == connection)
            {
                if let Some(session) = sessions.remove(key) {
                    ended.push((key.clone(), session.partitions));
                }
            }
        }
        ended
    }
}

/// Epoch -1: the session ends (its epoch is not compared).
fn close(
    sessions: &mut HashMap<MemberKey, Session>,
    key: &MemberKey,
) -> Result<SessionStep, ShareSessionError> {
    let session = sessions.remove(key).ok_or(ShareSessionError::NotFound)?;
    Ok(SessionStep {
        partitions: session.partitions,
        closed: true,
        opened: false,
        replaced: None,
    })
}

/// A later epoch: the session's next one, which it moves past.
fn advance<'a>(
    sessions: &'a mut HashMap<MemberKey, Session>,
    key: &MemberKey,
    epoch: i32,
) -> Result<&'a mut Session, ShareSessionError> {
    let session = sessions.get_mut(key).ok_or(ShareSessionError::NotFound)?;
    if session.next_epoch != epoch {
        return Err(ShareSessionError::InvalidEpoch);
    }
    session.next_epoch = next_epoch(epoch);
    Ok(session)
}

/// The epoch after `epoch`: `i32::MAX` wraps to 1, as in Kafka.
fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(member: &str) -> MemberKey {
        MemberKey {
            group_id: Arc::from("g"),
            member_id: Arc::from(member),
        }
    }

    fn tp(p: i32) -> SharePartitionId {
        (Uuid::from_u128(7), p)
    }

    #[test]
    fn epochs_open_advance_and_close() {
        let cache = ShareSessionCache::new(10);
        let k = key("m");
        assert_eq!(
            cache.fetch(&k, 1, 1, &[tp(0)], &[]),
            Err(ShareSessionError::NotFound)
        );
        let open = cache.fetch(&k, 0, 1, &[tp(0), tp(0)], &[]).expect("open");
        assert!(open.opened && open.replaced.is_none());
        assert_eq!(open.partitions, vec![tp(0)]);
        assert_eq!(
            cache.fetch(&k, 2, 1, &[], &[]),
            Err(ShareSessionError::InvalidEpoch)
        );
        let next = cache.fetch(&k, 1, 1, &[tp(1)], &[]).expect("epoch 1");
        assert_eq!(next.partitions, vec![tp(0), tp(1)]);
        // ShareAcknowledge shares the counter.
        cache.acknowledge(&k, 2).expect("ack at 2");
        let forgot = cache.fetch(&k, 3, 1, &[], &[tp(0)]).expect("epoch 3");
        assert_eq!(forgot.partitions, vec![tp(1)]);
        let closed = cache.fetch(&k, -1, 1, &[], &[]).expect("close");
        assert!(closed.closed);
        assert_eq!(closed.partitions, vec![tp(1)]);
        assert!(cache.is_empty());
        assert_eq!(
            cache.fetch(&k, -1, 1, &[], &[]),
            Err(ShareSessionError::NotFound)
        );
    }

    #[test]
    fn a_group_has_sessions_until_its_last_one_ends() {
        let cache = ShareSessionCache::new(10);
        let other = MemberKey {
            group_id: Arc::from("other"),
            member_id: Arc::from("o"),
        };
        cache
            .fetch(&key("a"), 0, 1, &[tp(0)], &[])
            .expect("a opens");
        cache
            .fetch(&key("b"), 0, 2, &[tp(0)], &[])
            .expect("b opens");
        cache
            .fetch(&other, 0, 3, &[tp(0)], &[])
            .expect("other opens");
        cache.fetch(&key("a"), -1, 1, &[], &[]).expect("a closes");
        assert!(cache.has_group("g"));
        assert_eq!(cache.connection_closed(2, &[key("b")]).len(), 1);
        assert!(!cache.has_group("g"));
        assert!(cache.has_group("other"));
    }

    #[test]
    fn acknowledge_cannot_open_and_reopening_replaces() {
        let cache = ShareSessionCache::new(10);
        let k = key("m");
        assert_eq!(
            cache.acknowledge(&k, 0),
            Err(ShareSessionError::InvalidEpoch)
        );
        assert_eq!(cache.acknowledge(&k, 1), Err(ShareSessionError::NotFound));
        cache.fetch(&k, 0, 1, &[tp(0)], &[]).expect("open");
        let again = cache.fetch(&k, 0, 2, &[tp(1)], &[]).expect("reopen");
        assert_eq!(again.replaced, Some(vec![tp(0)]));
        assert_eq!(cache.len(), 1);
        // The first connection no longer owns it.
        assert!(cache
            .connection_closed(1, std::slice::from_ref(&k))
            .is_empty());
        assert_eq!(cache.connection_closed(2, &[k]).len(), 1);
        assert!(cache.is_empty());
    }

    #[test]
    fn the_cache_is_bounded() {
        let cache = ShareSessionCache::new(1);
        cache.fetch(&key("a"), 0, 1, &[], &[]).expect("first");
        assert_eq!(
            cache.fetch(&key("b"), 0, 1, &[], &[]),
            Err(ShareSessionError::LimitReached)
        );
        // The same member may reset its own session.
        cache.fetch(&key("a"), 0, 1, &[], &[]).expect("reset");
    }

    #[test]
    fn epochs_wrap_to_one() {
        assert_eq!(next_epoch(i32::MAX), 1);
        assert_eq!(next_epoch(5), 6);
    }
}
