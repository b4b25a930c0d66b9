//! What an API module implements to be served: [`ApiHandler`], one impl per Kafka API, which
//! declares in one place the API key, the versions served, the request and response types
//! (`kafka-protocol`'s) and how a request is handled; and [`ResponseFields`], one
//! `response_fields!` line per response type next to it, which says where the response carries
//! error codes and the throttle time.
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

    /// The decoded request, at the version of the request header (also encodable: the HTTP API
    /// forwards requests to other brokers and weighs in-process ones, `crate::inproc`).
    type Request: Decodable + Encodable;
    /// The response, encoded at the request's version.
    type Response: Encodable + ResponseFields + Send + 'static;

    /// Handles one request: what must happen in request order happens here; the answer, now or
    /// later.
    fn handle(call: Call<'_>, request: Self::Request) -> Reply<Self::Response>;
}

/// Declares a Kafka API served the common way: a unit struct named after the API and its
/// `ApiKey` variant, the versions advertised, the request type (the response type is the one
/// `kafka-protocol` pairs with it), and what [`ApiHandler::handle`] does, as a closure of the
/// [`Call`] and the request — usually a call of the module's own `handle`:
///
/// ```ignore
/// api_handler! {
///     /// Heartbeat: its key, versions and handler, for [`crate::registry`].
///     Heartbeat, versions 0..=4, HeartbeatRequest,
///     |call, request| Reply::Now(handle(call.ctx, &call.authz, request, call.version))
/// }
/// ```
///
/// An API that sets `SERVED_MIN`, `BEFORE_AUTHENTICATION` or `REQUEST_QUOTA_EXEMPT`, or does more
/// than one call in `handle`, implements [`ApiHandler`] by hand.
macro_rules! api_handler {
    (
        $(#[$doc:meta])*
        $name:ident, versions $versions:expr, $request:ty,
        |$call:ident, $req:ident| $handle:expr $(,)?
    ) => {
        $(#[$doc])*
        pub struct $name;

        impl $crate::handler::ApiHandler for $name {
            const KEY: ::kafka_protocol::messages::ApiKey =
                ::kafka_protocol::messages::ApiKey::$name;
            const VERSIONS: $crate::handler::Versions = $versions;
            type Request = $request;
            type Response = <$request as ::kafka_protocol::protocol::Request>::Response;

            fn handle(
                $call: $crate::handler::Call<'_>,
                $req: $request,
            ) -> $crate::handler::Reply<Self::Response> {
                $handle
            }
        }
    };
}
pub(crate) use api_handler;

/// Where a response carries its error codes and its throttle time. Implemented for each response
/// type by one `response_fields!` line in its API's module (by hand only where a rule decides
/// which codes count, FindCoordinator's).
pub trait ResponseFields {
    /// Calls `f` with every error code the response carries — the top-level code and each
    /// per-topic, per-partition, per-group or per-member one — as Kafka's
    /// `AbstractResponse.errorCounts()` counts them, for the request-error metrics (Kafka's
    /// ErrorsPerSec). NONE may be passed; the caller skips it.
    fn for_each_error(&self, f: &mut dyn FnMut(i16));

    /// The response's `throttle_time_ms`, where a client quota's throttle goes; `None` for a
    /// response without one.
    fn throttle_time_ms(&mut self) -> Option<&mut i32>;
}

/// Implements [`ResponseFields`] for a response type from where its error codes sit and whether
/// it has a `throttle_time_ms`. In `errors[...]`, a field name is an error code at that level and
/// `list[...]` visits each element of `list` with what the brackets hold, in the order written
/// (the order Kafka's `errorCounts()` visits them):
///
/// ```ignore
/// response_fields!(HeartbeatResponse: errors[error_code], throttle_time_ms);
/// response_fields!(MetadataResponse: errors[error_code, topics[error_code, partitions[error_code]]], throttle_time_ms);
/// response_fields!(SaslHandshakeResponse: errors[error_code], no throttle_time_ms);
/// ```
macro_rules! response_fields {
    ($response:ty: errors[$($errors:tt)*], throttle_time_ms) => {
        impl $crate::handler::ResponseFields for $response {
            fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
                $crate::handler::visit_errors!(self, f; $($errors)*);
            }

            fn throttle_time_ms(&mut self) -> Option<&mut i32> {
                Some(&mut self.throttle_time_ms)
            }
        }
    };
    ($response:ty: errors[$($errors:tt)*], no throttle_time_ms) => {
        impl $crate::handler::ResponseFields for $response {
            fn for_each_error(&self, f: &mut dyn FnMut(i16)) {
                $crate::handler::visit_errors!(self, f; $($errors)*);
            }

            fn throttle_time_ms(&mut self) -> Option<&mut i32> {
                None
            }
        }
    };
}
pub(crate) use response_fields;

/// [`response_fields!`]'s walk: calls `$f` with each code that `$errors` names in `$node`.
macro_rules! visit_errors {
    ($node:expr, $f:ident;) => {};
    ($node:expr, $f:ident; $list:ident[$($inner:tt)*] $(, $($rest:tt)*)?) => {
        for item in &$node.$list {
            $crate::handler::visit_errors!(item, $f; $($inner)*);
        }
        $crate::handler::visit_errors!($node, $f; $($($rest)*)?);
    };
    ($node:expr, $f:ident; $code:ident $(, $($rest:tt)*)?) => {
        $f($node.$code);
        $crate::handler::visit_errors!($node, $f; $($($rest)*)?);
    };
}
pub(crate) use visit_errors;

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
    /// Puts the record bytes back inside the response, reading each file slice into memory (an
    /// in-process caller, [`crate::inproc`], wants the whole response).
    pub inline_records: fn(&mut R, &[FileSlice]) -> std::io::Result<()>,
    /// Not charged to the request quota (a follower's fetch, which Kafka exempts).
    pub request_quota_exempt: bool,
}

/// The error codes of `response` that the request-error metrics count (every one but NONE), in
/// the order [`ResponseFields::for_each_error`] visits them.
#[cfg(test)]
pub(crate) fn counted_errors<H: ApiHandler>(response: &H::Response) -> Vec<i16> {
    let mut codes = Vec::new();
    response.for_each_error(&mut |code| {
        if code != crate::error_codes::NONE {
            codes.push(code);
        }
    });
    codes
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::metadata_response::{
        MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::{MetadataResponse, SaslHandshakeResponse};

    use super::ResponseFields;

    fn codes(response: &impl ResponseFields) -> Vec<i16> {
        let mut codes = Vec::new();
        response.for_each_error(&mut |code| codes.push(code));
        codes
    }

    #[test]
    fn response_fields_visits_nested_codes_in_order() {
        let topic = |code: i16, partitions: &[i16]| {
            MetadataResponseTopic::default()
                .with_error_code(code)
                .with_partitions(
                    partitions
                        .iter()
                        .map(|&p| MetadataResponsePartition::default().with_error_code(p))
                        .collect(),
                )
        };
        let mut response = MetadataResponse::default()
            .with_error_code(1)
            .with_topics(vec![topic(2, &[3, 4]), topic(5, &[6])])
            .with_throttle_time_ms(7);
        // Each topic's code, then its partitions', as Kafka's MetadataResponse.errorCounts.
        assert_eq!(codes(&response), vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(response.throttle_time_ms().copied(), Some(7));
    }

    #[test]
    fn response_fields_without_throttle_time() {
        let mut response = SaslHandshakeResponse::default().with_error_code(33);
        assert_eq!(codes(&response), vec![33]);
        assert!(response.throttle_time_ms().is_none());
    }
}
