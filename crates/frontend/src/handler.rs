//! What an API module implements to be served: [`ApiHandler`], one impl per Kafka API, which
//! declares in one place the API key, the versions served, the request and response types
//! (`kafka-protocol`'s), how a request is handled, and where its response carries error codes and
//! the throttle time.
//!
//! Data flow: [`crate::dispatch`] finds the API's entry in [`crate::registry`] (one registration
//! line per impl), [`crate::respond`] decodes the body into [`ApiHandler::Request`] and calls
//! [`ApiHandler::handle`] with a [`Call`], and turns the [`Reply`] into the frames to write.
//!
//! A handler never sees the request header or bytes and never encodes. Side effects that must
//! happen in request order (appends, topic changes) happen inside `handle`; what may wait
//! (durability, long poll, the controller) goes into the future of a [`Reply::Later`].
//!
//! This module names no API and no registry, so that every API module can depend on it.

use std::future::Future;
use std::ops::RangeInclusive;
use std::sync::Arc;

use futures::future::BoxFuture;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Encodable};
use millrace_store::FileSlice;

use crate::authz::Authz;
use crate::quota::QuotaType;
use crate::session::Session;
use crate::splice::Chunk;
use crate::BrokerContext;

/// The versions of an API that are advertised in ApiVersions and accepted, both ends included.
pub type Versions = RangeInclusive<i16>;

/// An advertised (key, min, max), as ApiVersions lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiRange {
    pub key: ApiKey,
    pub min: i16,
    pub max: i16,
}

/// One Kafka API as this broker serves it. Implemented by a unit struct named after the API in
/// the API's module (`api::heartbeat::Heartbeat`) and registered with one line in
/// [`crate::registry::APIS`].
pub trait ApiHandler {
    /// The API key.
    const KEY: ApiKey;
    /// The versions advertised in ApiVersions and accepted; a request at another version closes
    /// the connection (ApiVersions above them gets the v0 error reply instead).
    const VERSIONS: Versions;
    /// The lowest version actually served: a request below it, though advertised, closes the
    /// connection. Only Produce differs from the advertised minimum.
    const SERVED_MIN: i16 = *Self::VERSIONS.start();
    /// Answered on a SASL listener before the client has authenticated (Kafka's rule: only
    /// ApiVersions and the SASL exchange are).
    const BEFORE_AUTHENTICATION: bool = false;
    /// Never charged to the request quota (`request_percentage`).
    const REQUEST_QUOTA_EXEMPT: bool = false;

    /// The decoded request, at the version of the request header.
    type Request: Decodable;
    /// The response, encoded at the request's version.
    type Response: Encodable + Send + 'static;

    /// Handles one request: what must happen in request order happens here; the answer, now or
    /// later.
    fn handle(call: Call<'_>, request: Self::Request) -> Reply<Self::Response>;

    /// Calls `f` with every error code `response` carries — the top-level code and each
    /// per-topic, per-partition, per-group or per-member one — as Kafka's
    /// `AbstractResponse.errorCounts()` counts them, for the request-error metrics (Kafka's
    /// ErrorsPerSec). NONE may be passed; the caller skips it.
    fn for_each_error(response: &Self::Response, f: &mut dyn FnMut(i16));

    /// The response's `throttle_time_ms`, where a client quota's throttle goes; `None` for a
    /// response without one.
    fn throttle_time_ms(response: &mut Self::Response) -> Option<&mut i32>;
}

/// What a handler gets besides its request.
pub struct Call<'a> {
    /// The broker.
    pub ctx: &'a Arc<BrokerContext>,
    /// The connection's client: peer, listener, SASL state, throttle.
    pub session: &'a Session,
    /// Who asks, and the ACLs in force now.
    pub authz: Authz,
    /// The request's version.
    pub version: i16,
    /// The header's client id ("" when null).
    pub client_id: &'a str,
    /// The size of the whole request frame in bytes.
    pub frame_bytes: usize,
    /// Every API this broker serves, as ApiVersions lists them ([`crate::versions::ADVERTISED`]);
    /// handed in so that no API module depends on the registry that lists it.
    pub advertised: &'static [ApiRange],
}

impl Call<'_> {
    /// Records `value` against the client's `kind` quota, if one applies; the throttle time, which
    /// also mutes the connection.
    pub fn charge_quota(&self, kind: QuotaType, value: f64) -> i32 {
        let image = self.ctx.cluster.image();
        if image.client_quotas.is_empty() {
            return 0;
        }
        let throttle = self.ctx.quotas.record(
            &image,
            kind,
            &self.session.quota_user(),
            self.client_id,
            value,
        );
        self.session.throttle.extend(throttle);
        throttle
    }
}

/// A handler's answer.
pub enum Reply<R> {
    /// Complete now.
    Now(R),
    /// Completes later (a durability wait, a long poll, the controller's answer).
    Later(BoxFuture<'static, R>),
    /// Completes later and is not sent at all (Produce with acks=0).
    Unanswered(BoxFuture<'static, R>),
    /// Completes later, with record bytes written around the encoded rest instead of inside it
    /// (Fetch, see [`crate::splice`]).
    Spliced(Spliced<R>),
}

impl<R> Reply<R> {
    /// An answer that completes later.
    pub fn later(response: impl Future<Output = R> + Send + 'static) -> Self {
        Reply::Later(Box::pin(response))
    }

    /// Handled, but never answered.
    pub fn unanswered(response: impl Future<Output = R> + Send + 'static) -> Self {
        Reply::Unanswered(Box::pin(response))
    }
}

/// A response whose record bytes travel as chunks of their own ([`crate::splice`]).
pub struct Spliced<R> {
    /// The response and the segment file slices its file markers stand for.
    pub response: BoxFuture<'static, (R, Vec<FileSlice>)>,
    /// Takes the record bytes out of the response, leaving markers in their place.
    pub take_records: fn(&mut R, &[FileSlice]) -> Vec<Chunk>,
    /// Not charged to the request quota (a follower's fetch, which Kafka exempts).
    pub request_quota_exempt: bool,
}

/// The error codes of `response` that the request-error metrics count (every one but NONE), in
/// the order [`ApiHandler::for_each_error`] visits them.
#[cfg(test)]
pub(crate) fn counted_errors<H: ApiHandler>(response: &H::Response) -> Vec<i16> {
    let mut codes = Vec::new();
    H::for_each_error(response, &mut |code| {
        if code != crate::error_codes::NONE {
            codes.push(code);
        }
    });
    codes
}
