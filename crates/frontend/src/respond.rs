//! From a request's body to the frames of its response, for any [`ApiHandler`]: decode the body
//! once, call the handler, settle the request quota's charge into the throttle time, count the
//! response's error codes and its duration (Kafka's RequestMetrics), and encode the response with
//! the API's response header version — now, or in a task when the answer comes later.
//!
//! Sits between [`crate::dispatch`] (which checks the header and finds the API in
//! [`crate::registry`]) and the connection, which writes each [`Pending`] in request order.
//! Knows no API by name: everything API-specific comes through the [`ApiHandler`] impl.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use futures::future::BoxFuture;
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::task::JoinHandle;

use millrace_metrics::{ApiErrorLabels, ApiLabels};

use crate::error_codes::{error_name, NONE};
use crate::handler::{ApiHandler, Call, Reply, ResponseFields, Spliced};
use crate::quota::{QuotaType, Throttle};
use crate::splice::{self, Chunk};
use crate::BrokerContext;

/// A response being prepared, as the chunks to write in order (usually one; a Fetch response is
/// cut around its record bytes, see [`crate::splice`]): `Ok(None)` means "send nothing" (acks=0);
/// `Err` means the response could not be built and the connection must close.
pub type Pending = JoinHandle<Result<Option<Vec<Chunk>>, String>>;

/// Where a request is going, for encoding its response.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Route {
    pub(crate) key: ApiKey,
    pub(crate) version: i16,
    pub(crate) correlation_id: i32,
    /// When the whole request had been read (the request-duration metric starts here).
    pub(crate) started: Instant,
    /// The API's name, the metrics' label.
    pub(crate) api: &'static str,
}

/// What a request's handling time is charged to (`request_percentage`).
#[derive(Clone)]
pub struct RequestCharge {
    pub(crate) ctx: Arc<BrokerContext>,
    pub(crate) user: String,
    pub(crate) client_id: String,
    pub(crate) throttle: Throttle,
}

impl RequestCharge {
    /// Charges `spent` (in Kafka's unit: percent of one thread, per second); the throttle time,
    /// which also mutes the connection.
    pub(crate) fn settle(&self, spent: Duration) -> i32 {
        let image = self.ctx.cluster.image();
        let throttle = self.ctx.quotas.record(
            &image,
            QuotaType::Request,
            &self.user,
            &self.client_id,
            spent.as_secs_f64() * 100.0,
        );
        self.throttle.extend(throttle);
        throttle
    }
}

/// Decodes the body as `H`'s request, handles it and starts its response. `Err` carries the reason
/// to close the connection (an undecodable request).
pub(crate) fn serve<H: ApiHandler>(
    call: Call<'_>,
    mut body: Bytes,
    route: Route,
    charge: Option<&RequestCharge>,
) -> Result<Pending, String> {
    let request: H::Request = decode(&mut body, route)?;
    Ok(match H::handle(call, request) {
        Reply::Now(response) => ready::<H>(route, charge, response),
        Reply::Later(response) => later::<H>(route, charge, response, true),
        Reply::Unanswered(response) => later::<H>(route, charge, response, false),
        Reply::Spliced(spliced) => later_spliced::<H>(route, charge, spliced),
    })
}

fn decode<T: Decodable>(buf: &mut Bytes, route: Route) -> Result<T, String> {
    T::decode(buf, route.version)
        .map_err(|e| format!("{:?} v{}: malformed request: {e}", route.key, route.version))
}

/// Raises the response's throttle time to `ms` (the larger of two throttles wins).
fn throttle<H: ApiHandler>(response: &mut H::Response, ms: i32) {
    if let Some(throttle_time_ms) = ResponseFields::throttle_time_ms(response) {
        *throttle_time_ms = (*throttle_time_ms).max(ms);
    }
}

/// A response that is already complete.
pub(crate) fn ready<H: ApiHandler>(
    route: Route,
    charge: Option<&RequestCharge>,
    mut response: H::Response,
) -> Pending {
    if let Some(c) = charge {
        throttle::<H>(&mut response, c.settle(route.started.elapsed()));
    }
    let encoded = encode::<H>(route, &response).map(|frame| Some(vec![Chunk::Bytes(frame)]));
    tokio::spawn(async move { encoded })
}

/// A response that completes later (durability wait, long poll); `respond = false` drops it.
pub(crate) fn later<H: ApiHandler>(
    route: Route,
    charge: Option<&RequestCharge>,
    response: BoxFuture<'static, H::Response>,
    respond: bool,
) -> Pending {
    let charge = charge.cloned();
    let sync = route.started.elapsed();
    tokio::spawn(async move {
        let (mut response, polled) = poll_timed(response).await;
        if let Some(c) = &charge {
            throttle::<H>(&mut response, c.settle(sync + polled));
        }
        if respond {
            encode::<H>(route, &response).map(|frame| Some(vec![Chunk::Bytes(frame)]))
        } else {
            observe::<H>(route, None);
            Ok(None)
        }
    })
}

/// A response that completes later, its record bytes spliced in around the encoded rest.
fn later_spliced<H: ApiHandler>(
    route: Route,
    charge: Option<&RequestCharge>,
    spliced: Spliced<H::Response>,
) -> Pending {
    let Spliced {
        response,
        take_records,
        request_quota_exempt,
        ..
    } = spliced;
    let charge = charge.cloned().filter(|_| !request_quota_exempt);
    let sync = route.started.elapsed();
    tokio::spawn(async move {
        let ((mut response, files), polled) = poll_timed(response).await;
        if let Some(c) = &charge {
            throttle::<H>(&mut response, c.settle(sync + polled));
        }
        let records = take_records(&mut response, &files);
        let skeleton = encode::<H>(route, &response)?;
        splice::splice(skeleton, records, route.version).map(Some)
    })
}

/// Size prefix + response header (at the API's response header version) + body.
fn encode<H: ApiHandler>(route: Route, response: &H::Response) -> Result<Bytes, String> {
    observe::<H>(route, Some(response));
    let header = ResponseHeader::default().with_correlation_id(route.correlation_id);
    let header_version = route.key.response_header_version(route.version);
    let fail = |e: anyhow::Error| {
        format!(
            "{:?} v{}: cannot encode response: {e}",
            route.key, route.version
        )
    };
    let size = header.compute_size(header_version).map_err(fail)?
        + response.compute_size(route.version).map_err(fail)?;
    let mut buf = BytesMut::with_capacity(4 + size);
    buf.put_i32(i32::try_from(size).map_err(|_| format!("response of {size} bytes is too large"))?);
    header.encode(&mut buf, header_version).map_err(fail)?;
    response.encode(&mut buf, route.version).map_err(fail)?;
    Ok(buf.freeze())
}

/// Kafka's TotalTimeMs and ErrorsPerSec for one answered request (`None`: acks=0, no response).
fn observe<H: ApiHandler>(route: Route, response: Option<&H::Response>) {
    let metrics = millrace_metrics::global();
    let api = route.api;
    metrics
        .request_duration
        .get_or_create(&ApiLabels {
            api,
            version: route.version,
        })
        .observe(route.started.elapsed().as_secs_f64());
    if let Some(response) = response {
        response.for_each_error(&mut |code| {
            if code != NONE {
                metrics
                    .request_errors
                    .get_or_create(&ApiErrorLabels {
                        api,
                        error: error_name(code),
                    })
                    .inc();
            }
        });
    }
}

/// A future's output with the time spent inside its `poll` (its work, not its waits).
struct PollTimed<T> {
    inner: BoxFuture<'static, T>,
    spent: Duration,
}

impl<T> Future for PollTimed<T> {
    type Output = (T, Duration);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let start = Instant::now();
        let polled = self.inner.as_mut().poll(cx);
        self.spent += start.elapsed();
        let spent = self.spent;
        polled.map(|out| (out, spent))
    }
}

fn poll_timed<T>(inner: BoxFuture<'static, T>) -> PollTimed<T> {
    PollTimed {
        inner,
        spent: Duration::ZERO,
    }
}
