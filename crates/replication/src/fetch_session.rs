//! The follower's side of an incremental fetch session (KIP-227; Kafka's `FetchSessionHandler`):
//! what a replica fetcher tells its leader in each Fetch.
//!
//! Without a session the fetcher sends every partition with session id 0 and epoch 0, asking the
//! leader for a session. Once the leader answers with a session id, each next request carries
//! that id, the next epoch, only the partitions whose fetch state changed (new ones included) and
//! the partitions it no longer wants as `forgotten_topics_data`; the leader answers only the
//! partitions with something new. A session error (FETCH_SESSION_ID_NOT_FOUND,
//! INVALID_FETCH_SESSION_EPOCH), a failed request or a new connection drops the session, and the
//! next request is a full one again — naming the old session with epoch 0, which closes it on the
//! leader (unless the leader said it does not know it), so it does not hold a cache slot until it
//! idles out. Pure bookkeeping: the fetcher does the I/O.
//!
//! Each request costs O(partitions) with hash lookups, whatever the number of partitions.

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

/// FETCH_SESSION_ID_NOT_FOUND.
pub const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
/// INVALID_FETCH_SESSION_EPOCH.
pub const INVALID_FETCH_SESSION_EPOCH: i16 = 71;

/// What the leader is told about one partition; a change of any field is sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionFetch {
    pub fetch_offset: i64,
    pub current_leader_epoch: i32,
    pub last_fetched_epoch: i32,
    pub log_start_offset: i64,
    pub partition_max_bytes: i32,
}

/// (topic id, partition).
pub type PartitionKey = (Uuid, i32);

/// What a request told the leader: the partitions sent (with their state) and those forgotten.
type Told = (Vec<(PartitionKey, PartitionFetch)>, Vec<PartitionKey>);

/// One request's session part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRequest {
    pub session_id: i32,
    pub session_epoch: i32,
    /// The partitions to put in the request, in the order wanted.
    pub send: Vec<PartitionKey>,
    /// Partitions the session holds that are no longer wanted.
    pub forget: Vec<PartitionKey>,
}

/// The session with one leader.
#[derive(Debug, Default)]
pub struct FetchSessionClient {
    /// 0: none.
    id: i32,
    /// The epoch of the next request (1.. once a session exists).
    epoch: i32,
    /// What the leader's session holds for each partition.
    sent: HashMap<PartitionKey, PartitionFetch>,
    /// A session to close with the next (full) request; 0: none.
    close: i32,
    /// What the request in flight told the leader, applied to `sent` once it is answered.
    in_flight: Option<Told>,
}

impl FetchSessionClient {
    /// The session part of the next request for `wanted` (every partition the fetcher wants now).
    pub fn next_request(&mut self, wanted: &[(PartitionKey, PartitionFetch)]) -> SessionRequest {
        if self.id == 0 {
            self.in_flight = Some((wanted.to_vec(), Vec::new()));
            return SessionRequest {
                session_id: std::mem::take(&mut self.close),
                session_epoch: 0,
                send: wanted.iter().map(|(k, _)| *k).collect(),
                forget: Vec::new(),
            };
        }
        let changed: Vec<(PartitionKey, PartitionFetch)> = wanted
            .iter()
            .filter(|(k, f)| self.sent.get(k) != Some(f))
            .copied()
            .collect();
        let wanted_keys: HashSet<&PartitionKey> = wanted.iter().map(|(k, _)| k).collect();
        let forget: Vec<PartitionKey> = self
            .sent
            .keys()
            .filter(|k| !wanted_keys.contains(k))
            .copied()
            .collect();
        let request = SessionRequest {
            session_id: self.id,
            session_epoch: self.epoch,
            send: changed.iter().map(|(k, _)| *k).collect(),
            forget: forget.clone(),
        };
        self.in_flight = Some((changed, forget));
        request
    }

    /// The leader answered the request built last: `error` is the response's top-level error
    /// code, `session_id` the id it gave.
    pub fn on_response(&mut self, error: i16, session_id: i32) {
        let Some((sent, forgotten)) = self.in_flight.take() else {
            return;
        };
        if error != 0 {
            // Session errors and any other top-level error: start over with a full request
            // (one the leader does not know needs no closing).
            let close = if error == FETCH_SESSION_ID_NOT_FOUND {
                0
            } else {
                self.id
            };
            self.reset();
            self.close = close;
            return;
        }
        if self.id == 0 {
            if session_id == 0 {
                // The leader keeps no session for us (cache full, or sessions off): stay full.
                return;
            }
            self.id = session_id;
            self.epoch = 1;
            self.sent = sent.into_iter().collect();
            return;
        }
        if session_id != self.id {
            let close = self.id;
            self.reset();
            self.close = close;
            return;
        }
        for key in forgotten {
            self.sent.remove(&key);
        }
        self.sent.extend(sent);
        self.epoch = if self.epoch == i32::MAX {
            1
        } else {
            self.epoch + 1
        };
    }

    /// The request failed (no answer): the next request is full, and closes this session.
    pub fn reset(&mut self) {
        let close = if self.id != 0 { self.id } else { self.close };
        *self = FetchSessionClient::default();
        self.close = close;
    }

    /// The session id (0: none).
    pub fn id(&self) -> i32 {
        self.id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(p: i32) -> PartitionKey {
        (Uuid::from_u128(7), p)
    }

    fn at(offset: i64) -> PartitionFetch {
        PartitionFetch {
            fetch_offset: offset,
            current_leader_epoch: 3,
            last_fetched_epoch: 3,
            log_start_offset: 0,
            partition_max_bytes: 1 << 20,
        }
    }

    #[test]
    fn a_session_sends_only_what_changed_and_forgets_what_is_gone() {
        let mut s = FetchSessionClient::default();
        let first = s.next_request(&[(key(0), at(0)), (key(1), at(0))]);
        assert_eq!((first.session_id, first.session_epoch), (0, 0));
        assert_eq!(first.send, vec![key(0), key(1)]);
        s.on_response(0, 42);
        assert_eq!(s.id(), 42);

        // Partition 0 moved, 1 did not, 2 is new.
        let second = s.next_request(&[(key(0), at(5)), (key(1), at(0)), (key(2), at(0))]);
        assert_eq!((second.session_id, second.session_epoch), (42, 1));
        assert_eq!(second.send, vec![key(0), key(2)]);
        assert!(second.forget.is_empty());
        s.on_response(0, 42);

        // Nothing moved: an empty incremental request; then partition 1 is no longer wanted.
        let third = s.next_request(&[(key(0), at(5)), (key(1), at(0)), (key(2), at(0))]);
        assert_eq!(third.session_epoch, 2);
        assert!(third.send.is_empty() && third.forget.is_empty());
        s.on_response(0, 42);
        let fourth = s.next_request(&[(key(0), at(5)), (key(2), at(0))]);
        assert_eq!(fourth.session_epoch, 3);
        assert_eq!(fourth.forget, vec![key(1)]);
        s.on_response(0, 42);

        // Wanted again after being forgotten: sent again.
        let fifth = s.next_request(&[(key(0), at(5)), (key(1), at(0)), (key(2), at(0))]);
        assert_eq!(fifth.send, vec![key(1)]);
    }

    #[test]
    fn a_session_error_or_failed_request_starts_over_with_a_full_request() {
        for error in [FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH] {
            let mut s = FetchSessionClient::default();
            s.next_request(&[(key(0), at(0))]);
            s.on_response(0, 9);
            s.next_request(&[(key(0), at(1))]);
            s.on_response(error, 0);
            let again = s.next_request(&[(key(0), at(1))]);
            // A session the leader does not know is not closed; one it refused an epoch of is.
            let closes = if error == FETCH_SESSION_ID_NOT_FOUND {
                0
            } else {
                9
            };
            assert_eq!((again.session_id, again.session_epoch), (closes, 0));
            assert_eq!(again.send, vec![key(0)]);
            s.on_response(0, 10);
            assert_eq!(s.next_request(&[(key(0), at(1))]).session_id, 10);
        }
        // A failed request: the next one is full and closes the old session, once.
        let mut s = FetchSessionClient::default();
        s.next_request(&[(key(0), at(0))]);
        s.on_response(0, 9);
        s.next_request(&[(key(0), at(1))]);
        s.reset();
        let full = s.next_request(&[(key(0), at(1))]);
        assert_eq!(
            (full.session_id, full.session_epoch, full.send.len()),
            (9, 0, 1)
        );
        s.reset();
        assert_eq!(s.next_request(&[(key(0), at(1))]).session_id, 0);
    }

    #[test]
    fn a_leader_without_a_slot_keeps_the_fetcher_on_full_requests() {
        let mut s = FetchSessionClient::default();
        s.next_request(&[(key(0), at(0))]);
        s.on_response(0, 0);
        let next = s.next_request(&[(key(0), at(1))]);
        assert_eq!((next.session_id, next.session_epoch), (0, 0));
        assert_eq!(next.send, vec![key(0)]);
    }
}
