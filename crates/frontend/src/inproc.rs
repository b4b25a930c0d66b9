//! Kafka APIs called in process, by typed request, for the broker's other front end (the HTTP
//! API): the same [`ApiHandler`], the same authorizer and the same quotas as a Kafka connection
//! of the same principal would meet, without the wire (no frame is encoded or decoded). The
//! caller's [`Session`] says who asks ([`Session::authenticated`]).
//!
//! A Fetch's record bytes come back inside the response (file slices are read into memory): the
//! caller decodes the batches anyway.

use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::protocol::Encodable;

use crate::authz::Authz;
use crate::handler::{ApiHandler, Call, Reply, ResponseFields};
use crate::respond::RequestCharge;
use crate::session::Session;
use crate::versions::ADVERTISED;
use crate::BrokerContext;

/// A request header's fixed part (key, version, correlation id, client id length).
const REQUEST_HEADER_BYTES: usize = 10;

/// Why an in-process call has no response.
#[derive(Debug, thiserror::Error)]
pub enum InProcessError {
    #[error("{api:?} v{version} is not served (served: {min}..={max})")]
    Version {
        api: kafka_protocol::messages::ApiKey,
        version: i16,
        min: i16,
        max: i16,
    },
    #[error("cannot read record bytes from a segment: {0}")]
    Read(#[from] std::io::Error),
}

/// Calls `H` with `request` at `version` for `session`'s principal; the response, its
/// `throttle_time_ms` already raised by the request quota where one applies.
pub async fn call<H: ApiHandler>(
    ctx: &Arc<BrokerContext>,
    session: &Session,
    client_id: &str,
    version: i16,
    request: H::Request,
) -> Result<H::Response, InProcessError> {
    if version < H::SERVED_MIN || version > *H::VERSIONS.end() {
        return Err(InProcessError::Version {
            api: H::KEY,
            version,
            min: H::SERVED_MIN,
            max: *H::VERSIONS.end(),
        });
    }
    let started = Instant::now();
    // What the request would weigh on the wire (produce quotas charge the whole request, as
    // Kafka does): its body's size plus a request header's.
    let frame_bytes = request
        .compute_size(version)
        .map_or(0, |size| size + REQUEST_HEADER_BYTES + client_id.len());
    let charge =
        (!H::REQUEST_QUOTA_EXEMPT && !ctx.cluster.image().client_quotas.is_empty()).then(|| {
            RequestCharge {
                ctx: ctx.clone(),
                user: session.quota_user(),
                client_id: client_id.to_string(),
                throttle: session.throttle.clone(),
            }
        });
    let call = Call {
        ctx,
        session,
        authz: Authz::for_session(ctx, session),
        version,
        client_id,
        frame_bytes,
        advertised: ADVERTISED,
    };
    let mut response = match H::handle(call, request) {
        Reply::Now(response) => response,
        Reply::Later(response) | Reply::Unanswered(response) => response.await,
        Reply::Spliced(spliced) => {
            let (mut response, files) = spliced.response.await;
            (spliced.inline_records)(&mut response, &files)?;
            response
        }
    };
    if let Some(charge) = charge {
        let throttle = charge.settle(started.elapsed());
        if let Some(ms) = response.throttle_time_ms() {
            *ms = (*ms).max(throttle);
        }
    }
    Ok(response)
}
