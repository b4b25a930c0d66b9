//! A request body as the HTTP API's handlers read it: every byte is paid for from its connection's
//! body budget before a handler sees it, a body larger than `millrace.rest.request.bytes.max`
//! fails, and a body that stops arriving for [`HTTP_BODY_IDLE_TIMEOUT`] fails.
//!
//! Why a budget per connection: HTTP/2 lets one connection interleave up to
//! [`H2_STREAMS_PER_CONNECTION_MAX`] request bodies, and a handler that collects its body keeps
//! what it has read. Without a bound, a client that starts many large bodies and finishes none
//! makes the broker hold all of them (PolarStreams hit exactly this). Here the bytes handlers hold
//! for one connection's requests never exceed the budget (`millrace.rest.request.bytes.max`, so
//! one largest request always fits alone): a frame that does not fit waits up to
//! [`HTTP_BODY_BUDGET_WAIT`] for another request of the connection to finish (the client's HTTP/2
//! flow control windows stop it from sending more meanwhile), and its request then answers 429.
//! The wait is short so that bodies that wait on each other (each holding part of the budget,
//! none able to finish) are undone in a second, not after the idle timeout.
//!
//! The server keeps a [`BodyLedger`] per request: it holds the budget paid until the request is
//! answered (a handler still holds what it read until then), and records how the body failed, so
//! that the answer is 413 or 408 with Confluent's body whatever the handler made of the error.
//!
//! [`HTTP_BODY_IDLE_TIMEOUT`]: crate::limits::HTTP_BODY_IDLE_TIMEOUT
//! [`HTTP_BODY_BUDGET_WAIT`]: crate::limits::HTTP_BODY_BUDGET_WAIT
//! [`H2_STREAMS_PER_CONNECTION_MAX`]: crate::limits::H2_STREAMS_PER_CONNECTION_MAX

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Bytes, HttpBody};
use hyper::body::{Frame, SizeHint};
use parking_lot::Mutex;
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio::time::{Instant, Sleep};

use crate::limits::HTTP_BODY_BUDGET_WAIT;

/// How a request body failed on the server's side of things.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFault {
    /// More than `millrace.rest.request.bytes.max` bytes (413).
    TooLarge,
    /// Nothing arrived for the idle timeout (408).
    Idle,
    /// A frame did not fit the connection's body budget in time (429).
    Busy,
}

/// Why reading a request body failed.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("the request body is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("no request body bytes for {after:?}")]
    Idle { after: Duration },
    #[error("the connection's request bodies hold {budget} bytes already")]
    Busy { budget: usize },
    #[error("the connection is closing")]
    Closed,
    #[error(transparent)]
    Transport(#[from] hyper::Error),
}

/// One connection's body budget: bytes of request bodies its handlers may hold at once.
#[derive(Clone)]
pub struct BodyBudget {
    bytes: Arc<Semaphore>,
    total: u32,
}

impl BodyBudget {
    /// A budget of `bytes` (clamped to what one semaphore can count).
    pub fn new(bytes: usize) -> Self {
        let total = u32::try_from(bytes.min(Semaphore::MAX_PERMITS)).unwrap_or(u32::MAX);
        Self {
            bytes: Arc::new(Semaphore::new(total as usize)),
            total,
        }
    }

    /// Bytes not paid for now.
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
    }

    /// The whole budget.
    pub fn total(&self) -> usize {
        self.total as usize
    }
}

#[derive(Default)]
struct Ledger {
    paid: Option<OwnedSemaphorePermit>,
    fault: Option<BodyFault>,
}

/// One request's account: the budget its body paid (returned when the ledger and the body are
/// both dropped, i.e. after the answer) and how the body failed, if it did.
#[derive(Clone, Default)]
pub struct BodyLedger(Arc<Mutex<Ledger>>);

impl BodyLedger {
    /// How the body failed, if it did.
    pub fn fault(&self) -> Option<BodyFault> {
        self.0.lock().fault
    }

    fn pay(&self, permit: OwnedSemaphorePermit) {
        let mut ledger = self.0.lock();
        match &mut ledger.paid {
            Some(paid) => paid.merge(permit),
            None => ledger.paid = Some(permit),
        }
    }

    fn fail(&self, fault: BodyFault) {
        self.0.lock().fault.get_or_insert(fault);
    }
}

/// A frame read from the client that waits for the connection's budget.
type Waiting = (
    Frame<Bytes>,
    Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>,
);

/// A request body paid from its connection's budget, bounded in size and in idle time.
pub struct RequestBody<B> {
    inner: B,
    budget: BodyBudget,
    ledger: BodyLedger,
    limit: usize,
    received: usize,
    idle_timeout: Duration,
    idle: Pin<Box<Sleep>>,
    waiting: Option<Waiting>,
    /// When a frame waiting for the budget gives up (armed when it starts waiting).
    budget_wait: Pin<Box<Sleep>>,
    failed: bool,
}

impl<B> RequestBody<B> {
    /// `inner`, paid from `budget`, at most `limit` bytes, failing after `idle_timeout` without a
    /// byte; `ledger` is the request's account.
    pub fn new(
        inner: B,
        budget: BodyBudget,
        ledger: BodyLedger,
        limit: usize,
        idle_timeout: Duration,
    ) -> Self {
        Self {
            inner,
            budget,
            ledger,
            limit,
            received: 0,
            idle_timeout,
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            waiting: None,
            budget_wait: Box::pin(tokio::time::sleep(HTTP_BODY_BUDGET_WAIT)),
            failed: false,
        }
    }

    fn fail(&mut self, fault: BodyFault) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.failed = true;
        self.waiting = None;
        self.ledger.fail(fault);
        Poll::Ready(Some(Err(match fault {
            BodyFault::TooLarge => BodyError::TooLarge { limit: self.limit },
            BodyFault::Idle => BodyError::Idle {
                after: self.idle_timeout,
            },
            BodyFault::Busy => BodyError::Busy {
                budget: self.budget.total(),
            },
        })))
    }

    /// Pending, unless the idle timeout has passed.
    fn pending(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        if self.idle.as_mut().poll(cx).is_ready() {
            return self.fail(BodyFault::Idle);
        }
        Poll::Pending
    }

    fn restart_idle(&mut self) {
        let deadline = Instant::now() + self.idle_timeout;
        self.idle.as_mut().reset(deadline);
    }
}

impl<B> HttpBody for RequestBody<B>
where
    B: HttpBody<Data = Bytes, Error = hyper::Error> + Unpin,
{
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if this.failed {
            return Poll::Ready(None);
        }
        if let Some((_, acquire)) = &mut this.waiting {
            return match acquire.as_mut().poll(cx) {
                Poll::Ready(Ok(permit)) => {
                    this.ledger.pay(permit);
                    this.restart_idle();
                    match this.waiting.take() {
                        Some((frame, _)) => Poll::Ready(Some(Ok(frame))),
                        None => Poll::Ready(None),
                    }
                }
                Poll::Ready(Err(_)) => {
                    this.failed = true;
                    Poll::Ready(Some(Err(BodyError::Closed)))
                }
                Poll::Pending => {
                    if this.budget_wait.as_mut().poll(cx).is_ready() {
                        return this.fail(BodyFault::Busy);
                    }
                    this.pending(cx)
                }
            };
        }
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            Poll::Ready(Some(Err(e))) => {
                this.failed = true;
                return Poll::Ready(Some(Err(BodyError::Transport(e))));
            }
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => return this.pending(cx),
        };
        this.restart_idle();
        let Some(len) = frame.data_ref().map(Bytes::len).filter(|len| *len > 0) else {
            return Poll::Ready(Some(Ok(frame)));
        };
        this.received = this.received.saturating_add(len);
        let cost = u32::try_from(len).ok().filter(|c| *c <= this.budget.total);
        let Some(cost) = cost.filter(|_| this.received <= this.limit) else {
            return this.fail(BodyFault::TooLarge);
        };
        match this.budget.bytes.clone().try_acquire_many_owned(cost) {
            Ok(permit) => {
                this.ledger.pay(permit);
                Poll::Ready(Some(Ok(frame)))
            }
            Err(TryAcquireError::NoPermits) => {
                let acquire = this.budget.bytes.clone().acquire_many_owned(cost);
                this.waiting = Some((frame, Box::pin(acquire)));
                let deadline = Instant::now() + HTTP_BODY_BUDGET_WAIT;
                this.budget_wait.as_mut().reset(deadline);
                Pin::new(this).poll_frame(cx)
            }
            Err(TryAcquireError::Closed) => {
                this.failed = true;
                Poll::Ready(Some(Err(BodyError::Closed)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        !self.failed && self.waiting.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        if self.waiting.is_some() {
            return SizeHint::default();
        }
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    /// A body of `chunks` frames, then the end (or, with `stall`, nothing more for ever).
    fn body(
        chunks: Vec<usize>,
        stall: bool,
    ) -> impl HttpBody<Data = Bytes, Error = hyper::Error> + Unpin {
        let frames = chunks
            .into_iter()
            .map(|n| Ok::<_, hyper::Error>(Frame::data(Bytes::from(vec![7u8; n]))));
        let tail = futures::stream::iter(frames);
        let stream: Pin<Box<dyn futures::Stream<Item = _> + Send>> = if stall {
            Box::pin(futures::StreamExt::chain(tail, futures::stream::pending()))
        } else {
            Box::pin(tail)
        };
        StreamBody::new(stream)
    }

    async fn collect<B>(body: RequestBody<B>) -> Result<usize, BodyError>
    where
        B: HttpBody<Data = Bytes, Error = hyper::Error> + Unpin,
    {
        body.collect().await.map(|c| c.to_bytes().len())
    }

    #[tokio::test(start_paused = true)]
    async fn bodies_pay_from_the_budget_until_answered_and_fail_past_the_limit_or_idle() {
        let budget = BodyBudget::new(100);
        let idle = Duration::from_secs(30);
        // 60 bytes paid and held by the first request's ledger until it is dropped.
        let first = BodyLedger::default();
        let got = collect(RequestBody::new(
            body(vec![20, 40], false),
            budget.clone(),
            first.clone(),
            100,
            idle,
        ))
        .await;
        assert!(matches!(got, Ok(60)), "{got:?}");
        assert_eq!(budget.available(), 40);
        // A second request of 50 bytes waits for the first to be answered.
        let second = BodyLedger::default();
        let waiting = tokio::spawn(collect(RequestBody::new(
            body(vec![50], false),
            budget.clone(),
            second.clone(),
            100,
            idle,
        )));
        tokio::time::sleep(HTTP_BODY_BUDGET_WAIT / 2).await;
        assert!(!waiting.is_finished(), "it waits for the budget");
        drop(first);
        let got = waiting.await.expect("task");
        assert!(matches!(got, Ok(50)), "{got:?}");
        assert_eq!(budget.available(), 50);
        drop(second);
        assert_eq!(budget.available(), 100);

        // A frame that does not fit for HTTP_BODY_BUDGET_WAIT: Busy, and nothing is kept.
        let holder = BodyLedger::default();
        let got = collect(RequestBody::new(
            body(vec![80], false),
            budget.clone(),
            holder.clone(),
            100,
            idle,
        ))
        .await;
        assert!(matches!(got, Ok(80)), "{got:?}");
        let ledger = BodyLedger::default();
        let started = Instant::now();
        let got = collect(RequestBody::new(
            body(vec![10, 30], false),
            budget.clone(),
            ledger.clone(),
            100,
            idle,
        ))
        .await;
        assert!(
            matches!(got, Err(BodyError::Busy { budget: 100 })),
            "{got:?}"
        );
        assert_eq!(started.elapsed(), HTTP_BODY_BUDGET_WAIT);
        assert_eq!(ledger.fault(), Some(BodyFault::Busy));
        drop((holder, ledger));
        assert_eq!(budget.available(), 100);

        // Past the limit: TooLarge, recorded in the ledger.
        let ledger = BodyLedger::default();
        let got = collect(RequestBody::new(
            body(vec![30, 30], false),
            budget.clone(),
            ledger.clone(),
            50,
            idle,
        ))
        .await;
        assert!(
            matches!(got, Err(BodyError::TooLarge { limit: 50 })),
            "{got:?}"
        );
        assert_eq!(ledger.fault(), Some(BodyFault::TooLarge));
        drop(ledger);

        // A stalled body fails after the idle timeout, and pays back what it held.
        let ledger = BodyLedger::default();
        let started = Instant::now();
        let got = collect(RequestBody::new(
            body(vec![10], true),
            budget.clone(),
            ledger.clone(),
            100,
            idle,
        ))
        .await;
        assert!(matches!(got, Err(BodyError::Idle { .. })), "{got:?}");
        assert!(started.elapsed() >= idle);
        assert_eq!(ledger.fault(), Some(BodyFault::Idle));
        drop(ledger);
        assert_eq!(budget.available(), 100);
    }
}
