//! The broker-wide budget for bytes of requests being read and queued (Kafka's
//! `queued.max.request.bytes`).
//!
//! Where it sits: a connection has read a request's 4-byte size (already checked against
//! `socket.request.max.bytes`) and asks for that many bytes here before it allocates the request's
//! buffer or reads its body. The [`Grant`] travels inside the request's buffer
//! ([`Grant::into_bytes`]): it is released when the last slice of the request is dropped, which is
//! after the request was decoded, applied and answered (slices kept in a pending response keep it).
//!
//! Invariants: the bytes granted never exceed the budget. A request above
//! [`SMALL_REQUEST_BYTES_MAX`] is admitted only while at least [`SMALL_REQUEST_RESERVE_BYTES`]
//! stay free after it, so large half-sent requests cannot take the last of the budget: heartbeats,
//! metadata and ordinary produce requests of other clients keep being read. A request that can
//! never fit (larger than the budget allows for its class) is refused at once rather than left
//! waiting; the broker config keeps `socket.request.max.bytes` below that.
//!
//! Locking: one short `Mutex` around the count of bytes granted, never held across an `.await`;
//! waiters park on a `Notify` and retry after every release. Admission is not first-come
//! first-served: a small request may pass a large one that is waiting for room.
//!
//! Not done here: the time a half-sent request may hold its grant is bounded by the connection's
//! `connections.max.idle.ms` (`connection.rs`), not by this module. Response bytes (Fetch) are not
//! counted; `limits::FETCH_RESPONSE_BYTES_MAX` bounds those per request.

use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use millrace_cluster::limits::{SMALL_REQUEST_BYTES_MAX, SMALL_REQUEST_RESERVE_BYTES};
use tokio::sync::Notify;

/// The budget and the bytes currently granted from it.
#[derive(Debug)]
pub struct RequestMemory {
    budget: usize,
    granted: Mutex<usize>,
    released: Notify,
}

/// Why a request cannot be admitted at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a request of {bytes} bytes can never fit a request budget of {budget} bytes")]
pub struct NeverFits {
    pub bytes: usize,
    pub budget: usize,
}

/// Bytes granted to one request; given back on drop.
#[derive(Debug)]
pub struct Grant {
    memory: Arc<RequestMemory>,
    bytes: usize,
}

impl RequestMemory {
    /// A budget of `budget` bytes (`queued.max.request.bytes`).
    pub fn new(budget: usize) -> Arc<Self> {
        Arc::new(Self {
            budget,
            granted: Mutex::new(0),
            released: Notify::new(),
        })
    }

    /// Bytes currently granted.
    pub fn granted(&self) -> usize {
        *self.lock()
    }

    /// The most bytes that may be granted in all once a request of `bytes` is admitted.
    fn ceiling_for(&self, bytes: usize) -> usize {
        if bytes <= small_request_bytes_max() {
            self.budget
        } else {
            self.budget.saturating_sub(small_request_reserve_bytes())
        }
    }

    /// Waits until `bytes` fit the budget and grants them.
    pub async fn reserve(self: &Arc<Self>, bytes: usize) -> Result<Grant, NeverFits> {
        let ceiling = self.ceiling_for(bytes);
        if bytes > ceiling {
            return Err(NeverFits {
                bytes,
                budget: self.budget,
            });
        }
        loop {
            // Registered before the check, so a release between the check and the wait wakes us.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if self.try_take(bytes, ceiling) {
                return Ok(Grant {
                    memory: self.clone(),
                    bytes,
                });
            }
            released.await;
        }
    }

    fn try_take(&self, bytes: usize, ceiling: usize) -> bool {
        let mut granted = self.lock();
        match granted.checked_add(bytes) {
            Some(total) if total <= ceiling => {
                *granted = total;
                set_queue_gauge(total);
                true
            }
            _ => false,
        }
    }

    fn give_back(&self, bytes: usize) {
        {
            let mut granted = self.lock();
            *granted = granted.saturating_sub(bytes);
            set_queue_gauge(*granted);
        }
        self.released.notify_waiters();
    }

    /// The count stays consistent even if a holder panicked: every update is one assignment.
    fn lock(&self) -> MutexGuard<'_, usize> {
        self.granted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Grant {
    /// Bytes this grant holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The request's buffer as `Bytes` that give the grant back when the last slice is dropped.
    pub fn into_bytes(self, buffer: Vec<u8>) -> Bytes {
        Bytes::from_owner(GrantedBuffer {
            buffer,
            _grant: self,
        })
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        self.memory.give_back(self.bytes);
    }
}

/// A request buffer and the grant that pays for it.
struct GrantedBuffer {
    buffer: Vec<u8>,
    _grant: Grant,
}

impl AsRef<[u8]> for GrantedBuffer {
    fn as_ref(&self) -> &[u8] {
        &self.buffer
    }
}

/// The request-queue metric follows the budget's use (set under the budget's lock).
fn set_queue_gauge(granted: usize) {
    millrace_metrics::global()
        .request_queue_bytes
        .set(i64::try_from(granted).unwrap_or(i64::MAX));
}

fn small_request_bytes_max() -> usize {
    usize::try_from(SMALL_REQUEST_BYTES_MAX).unwrap_or(usize::MAX)
}

fn small_request_reserve_bytes() -> usize {
    usize::try_from(SMALL_REQUEST_RESERVE_BYTES).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MIB: usize = 1024 * 1024;
    const SHORT: Duration = Duration::from_millis(50);

    /// `reserve` either grants at once (`Some`) or is still waiting after a short while (`None`).
    async fn check(memory: &Arc<RequestMemory>, bytes: usize) -> Option<Grant> {
        tokio::time::timeout(SHORT, memory.reserve(bytes))
            .await
            .ok()
            .map(|r| r.expect("fits the budget"))
    }

    #[tokio::test]
    async fn large_requests_leave_the_reserve_to_small_ones() {
        let memory = RequestMemory::new(100 * MIB);
        let reserve = small_request_reserve_bytes();
        let large = check(&memory, 100 * MIB - reserve).await;
        assert!(
            large.is_some(),
            "a large request up to budget - reserve fits"
        );
        assert!(
            check(&memory, 2 * MIB).await.is_none(),
            "a second large request must wait"
        );
        let mut small = Vec::new();
        for _ in 0..reserve / MIB {
            small.push(
                check(&memory, MIB)
                    .await
                    .expect("small requests use the reserve"),
            );
        }
        assert_eq!(memory.granted(), 100 * MIB);
        assert!(check(&memory, 1).await.is_none(), "the budget is spent");
        drop(small);
        drop(large);
        assert_eq!(memory.granted(), 0);
    }

    #[tokio::test]
    async fn a_waiting_request_is_admitted_when_room_is_given_back() {
        let memory = RequestMemory::new(64 * MIB);
        let first = check(&memory, 40 * MIB).await.expect("fits");
        let waiting = tokio::spawn({
            let memory = memory.clone();
            async move { memory.reserve(40 * MIB).await.map(|g| g.bytes()) }
        });
        tokio::time::sleep(SHORT).await;
        assert!(!waiting.is_finished(), "admitted over the budget");
        drop(first);
        let admitted = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("admitted after the release")
            .expect("task");
        assert_eq!(admitted, Ok(40 * MIB));
    }

    #[tokio::test]
    async fn a_request_that_can_never_fit_is_refused_at_once() {
        let memory = RequestMemory::new(20 * MIB);
        let err = memory.reserve(20 * MIB).await.expect_err("large class");
        assert_eq!(err.budget, 20 * MIB);
        assert!(memory.reserve(20 * MIB + 1).await.is_err());
    }

    #[tokio::test]
    async fn the_grant_lives_as_long_as_any_slice_of_the_request() {
        let memory = RequestMemory::new(64 * MIB);
        let grant = check(&memory, 1000).await.expect("fits");
        let request = grant.into_bytes(vec![7u8; 1000]);
        let slice = request.slice(10..20);
        drop(request);
        assert_eq!(memory.granted(), 1000);
        assert_eq!(&slice[..], &[7u8; 10]);
        drop(slice);
        assert_eq!(memory.granted(), 0);
    }
}
