//! Bytes → request → handler: decodes the request header, finds the API in [`crate::registry`]
//! and checks the version against the versions its handler declares, applies the SASL gate on a
//! SASL listener, builds the request's [`crate::authz::Authz`] and its request-quota charge, then
//! hands the body to the entry, which decodes it once, calls the API's
//! [`crate::handler::ApiHandler`] and encodes its response with the right header version
//! ([`crate::respond`]).
//!
//! Kafka's rules (protocol-checklist §1.2): an unknown or unserved key, a version outside the
//! advertised range (except ApiVersions), a version advertised but not served (Produce v0-2) or an
//! undecodable request closes the connection;
//! ApiVersions above our range gets the v0 error reply with our list; Produce with acks=0 gets no
//! response at all.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::Decodable;

use millrace_metrics::ApiLabels;

use crate::api::api_versions::{self, ApiVersions};
use crate::authz::Authz;
use crate::handler::Call;
use crate::registry;
use crate::respond::{self, Pending, RequestCharge, Route};
use crate::session::Session;
use crate::versions::{api_name, ADVERTISED};
use crate::BrokerContext;

/// Decodes and starts one request. `Err` carries the reason to close the connection.
pub fn dispatch(
    ctx: &Arc<BrokerContext>,
    frame: Bytes,
    session: &Session,
) -> Result<Pending, String> {
    let started = Instant::now();
    let (Some(key_bytes), Some(version_bytes)) = (frame.get(0..2), frame.get(2..4)) else {
        return Err(format!(
            "frame of {} bytes is shorter than a request header",
            frame.len()
        ));
    };
    let raw_key = i16::from_be_bytes([key_bytes[0], key_bytes[1]]);
    let version = i16::from_be_bytes([version_bytes[0], version_bytes[1]]);
    let key = ApiKey::try_from(raw_key).map_err(|_| format!("unknown API key {raw_key}"))?;
    if key == ApiKey::Envelope {
        return crate::envelope::serve(ctx, frame, session, version, dispatch);
    }
    let api =
        registry::find(key).ok_or_else(|| format!("API {key:?} ({raw_key}) is not served"))?;
    let frame_bytes = frame.len();
    let mut buf = frame;

    if key == ApiKey::ApiVersions && version > api.max {
        let header = RequestHeader::decode(&mut buf, key.request_header_version(version))
            .map_err(|e| format!("ApiVersions v{version}: bad header: {e}"))?;
        let reply = api_versions::unsupported_version_response(ADVERTISED);
        let route = Route {
            key,
            version: 0,
            correlation_id: header.correlation_id,
            started,
            api: api_name(key),
        };
        count_request(route);
        return Ok(respond::ready::<ApiVersions>(route, None, reply));
    }
    if version < api.min || version > api.max {
        return Err(format!(
            "{key:?} v{version} is outside the served range {}..={}",
            api.min, api.max
        ));
    }
    if version < api.served_min {
        return Err(format!(
            "{key:?} v{version} is advertised but no longer served (v{} and above are)",
            api.served_min
        ));
    }
    let header = RequestHeader::decode(&mut buf, key.request_header_version(version))
        .map_err(|e| format!("{key:?} v{version}: bad request header: {e}"))?;
    let route = Route {
        key,
        version,
        correlation_id: header.correlation_id,
        started,
        api: api_name(key),
    };
    count_request(route);
    // On a SASL listener only ApiVersions and the SASL exchange come before authentication, and
    // nothing but re-authentication after the session ended (Kafka closes the connection).
    if let Some(sasl) = &session.sasl {
        if !api.before_authentication {
            sasl.lock()
                .admits(Instant::now())
                .map_err(|reason| format!("{key:?}: {reason}"))?;
        }
    }

    // Who asks, and the ACLs in force now (everything allowed without an authorizer).
    let authz = Authz::for_session(ctx, session);

    // The request quota (`request_percentage`), when one may apply: the time this request takes
    // to handle is charged once it is done, and decides its answer's throttle (Kafka's order).
    let client_id = header.client_id.as_deref().unwrap_or_default();
    let charge =
        (!api.request_quota_exempt && !ctx.cluster.image().client_quotas.is_empty()).then(|| {
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
        authz,
        version,
        client_id,
        frame_bytes,
        advertised: ADVERTISED,
    };
    (api.serve)(call, buf, route, charge.as_ref())
}

/// Kafka's RequestsPerSec, by API and version.
fn count_request(route: Route) {
    millrace_metrics::global()
        .requests
        .get_or_create(&ApiLabels {
            api: route.api,
            version: route.version,
        })
        .inc();
}
