//! Envelope (key 58): a request another broker forwards on behalf of one of its clients — the
//! HTTP API of another Millrace broker (`millrace-rest`'s gateway) sending a produce, fetch or
//! group request to the partition's leader or the group's coordinator here. Kafka's rules: the
//! forwarding connection needs ClusterAction on the cluster (a broker's own principal), the
//! wrapped request is handled as its client's principal (ACLs and quotas are the client's), and
//! an Envelope inside an Envelope is refused. Not advertised in ApiVersions: only brokers send it.
//!
//! The principal travels as UTF-8 `Type:name` (`User:alice`): only Millrace brokers read it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, EnvelopeRequest, EnvelopeResponse, RequestHeader};
use kafka_protocol::protocol::Decodable;
use millrace_cluster::acl::AclOperation;

use crate::authz::Authz;
use crate::error_codes::{
    CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, NONE, PRINCIPAL_DESERIALIZATION_FAILURE,
};
use crate::handler::{response_fields, ApiHandler, Call, Reply};
use crate::respond::{self, Pending, Route};
use crate::session::Session;
use crate::splice::Chunk;
use crate::versions::api_name;
use crate::BrokerContext;

/// What dispatches the wrapped request ([`crate::dispatch::dispatch`]).
pub type Dispatch = fn(&Arc<BrokerContext>, Bytes, &Session) -> Result<Pending, String>;

/// Envelope's one version.
const VERSION: i16 = 0;

/// Envelope, for [`crate::respond`]'s encoding; never in the registry (dispatch finds it first).
pub struct Envelope;

impl ApiHandler for Envelope {
    const KEY: ApiKey = ApiKey::Envelope;
    const VERSIONS: crate::handler::Versions = VERSION..=VERSION;
    type Request = EnvelopeRequest;
    type Response = EnvelopeResponse;

    fn handle(_call: Call<'_>, _request: EnvelopeRequest) -> Reply<EnvelopeResponse> {
        Reply::Now(EnvelopeResponse::default().with_error_code(INVALID_REQUEST))
    }
}

response_fields!(EnvelopeResponse: errors[error_code], no throttle_time_ms);

/// Serves one Envelope frame (header and body) that came in on `session`. `Err` closes the
/// connection (an undecodable envelope); a refused or undecodable inner request is answered with
/// the envelope's error code.
pub fn serve(
    ctx: &Arc<BrokerContext>,
    mut frame: Bytes,
    session: &Session,
    version: i16,
    dispatch: Dispatch,
) -> Result<Pending, String> {
    let started = Instant::now();
    if version != VERSION {
        return Err(format!("Envelope v{version} is not served"));
    }
    let header =
        RequestHeader::decode(&mut frame, ApiKey::Envelope.request_header_version(version))
            .map_err(|e| format!("Envelope: bad request header: {e}"))?;
    let request = EnvelopeRequest::decode(&mut frame, version)
        .map_err(|e| format!("Envelope: malformed request: {e}"))?;
    let route = Route {
        key: ApiKey::Envelope,
        version,
        correlation_id: header.correlation_id,
        started,
        api: api_name(ApiKey::Envelope),
    };
    let refuse = |code: i16| {
        Ok(respond::ready::<Envelope>(
            route,
            None,
            EnvelopeResponse::default().with_error_code(code),
        ))
    };
    if let Some(sasl) = &session.sasl {
        sasl.lock()
            .admits(Instant::now())
            .map_err(|reason| format!("Envelope: {reason}"))?;
    }
    // Kafka's `fromPrivilegedListener`: only the brokers' own listener carries envelopes, so a
    // client of another listener cannot speak as someone else even where no authorizer runs.
    let privileged = ctx
        .cluster
        .config
        .inter_broker_listener()
        .is_ok_and(|l| *l.address.name == *session.listener);
    if !privileged || !Authz::for_session(ctx, session).cluster(AclOperation::ClusterAction) {
        return refuse(CLUSTER_AUTHORIZATION_FAILED);
    }
    let Some(principal) = request
        .request_principal
        .as_ref()
        .and_then(|p| std::str::from_utf8(p).ok())
        .filter(|p| p.contains(':'))
    else {
        return refuse(PRINCIPAL_DESERIALIZATION_FAILURE);
    };
    let inner = request.request_data;
    if inner.get(0..2) == Some(&(ApiKey::Envelope as i16).to_be_bytes()[..]) {
        return refuse(INVALID_REQUEST);
    }
    let client = Session::authenticated(
        SocketAddr::new(client_ip(&request.client_host_address), 0),
        session.listener.clone(),
        principal.to_string(),
    );
    let Ok(pending) = dispatch(ctx, inner, &client) else {
        return refuse(INVALID_REQUEST);
    };
    Ok(respond::later::<Envelope>(
        route,
        None,
        Box::pin(async move {
            let response = match pending.await {
                Ok(Ok(Some(chunks))) => match concatenate(chunks) {
                    Ok(data) => EnvelopeResponse::default().with_response_data(Some(data)),
                    Err(_) => EnvelopeResponse::default().with_error_code(INVALID_REQUEST),
                },
                _ => EnvelopeResponse::default().with_error_code(INVALID_REQUEST),
            };
            debug_assert!(response.error_code == NONE || response.response_data.is_none());
            response
        }),
        true,
    ))
}

/// A response's chunks as one buffer without the 4-byte size (what Envelope's `response_data`
/// holds: the response header and body).
fn concatenate(chunks: Vec<Chunk>) -> std::io::Result<Bytes> {
    let mut out = BytesMut::new();
    for chunk in chunks {
        match chunk {
            Chunk::Bytes(b) => out.extend_from_slice(&b),
            Chunk::File(f) => out.extend_from_slice(&f.read_to_bytes()?),
        }
    }
    let mut data = out.freeze();
    if data.len() < 4 {
        return Err(std::io::Error::other("response shorter than its size"));
    }
    Ok(data.split_off(4))
}

/// The client's address as the envelope carries it (4 or 16 bytes; unspecified otherwise).
fn client_ip(bytes: &[u8]) -> IpAddr {
    if let Ok(v4) = <[u8; 4]>::try_from(bytes) {
        IpAddr::V4(Ipv4Addr::from(v4))
    } else if let Ok(v6) = <[u8; 16]>::try_from(bytes) {
        IpAddr::V6(Ipv6Addr::from(v6))
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    }
}
