//! SaslHandshake (key 17, v0–1) and SaslAuthenticate (key 36, v0–2): the wire side of
//! [`crate::sasl`]. On a listener without SASL both answer ILLEGAL_SASL_STATE, as Kafka does. A
//! refusal on a SASL listener is the connection's last answer; a failed authentication is answered
//! after `connection.failed.authentication.delay.ms`.
//!
//! After SaslHandshake v0 (librdkafka before 2.11.1 needs v0 advertised to use PLAIN at all) the
//! tokens travel in bare length-prefixed frames, as before KIP-152 ([`raw_token`]): the server's
//! token goes back the same way (empty for PLAIN), and a failure closes the connection without an
//! answer, as Kafka does.

use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use tracing::info;

use super::str_bytes;
use crate::error_codes::{ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED};
use crate::handler::{response_fields, ApiHandler, Call, Reply, Versions};
use crate::respond::Pending;
use crate::sasl::Step;
use crate::session::Session;
use crate::splice::Chunk;
use crate::BrokerContext;

/// SaslHandshake: its key, versions, handler and error codes, for [`crate::registry`].
pub struct SaslHandshake;

impl ApiHandler for SaslHandshake {
    const KEY: ApiKey = ApiKey::SaslHandshake;
    /// v0 stays: librdkafka before 2.11.1 needs it advertised to use PLAIN at all.
    const VERSIONS: Versions = 0..=1;
    const BEFORE_AUTHENTICATION: bool = true;
    const REQUEST_QUOTA_EXEMPT: bool = true;
    type Request = SaslHandshakeRequest;
    type Response = SaslHandshakeResponse;

    fn handle(call: Call<'_>, request: SaslHandshakeRequest) -> Reply<SaslHandshakeResponse> {
        Reply::Now(handshake(call.session, request, call.version))
    }
}

response_fields!(SaslHandshakeResponse: errors[error_code], no throttle_time_ms);

/// SaslAuthenticate: its key, versions, handler and error codes, for [`crate::registry`].
pub struct SaslAuthenticate;

impl ApiHandler for SaslAuthenticate {
    const KEY: ApiKey = ApiKey::SaslAuthenticate;
    const VERSIONS: Versions = 0..=2;
    const BEFORE_AUTHENTICATION: bool = true;
    const REQUEST_QUOTA_EXEMPT: bool = true;
    type Request = SaslAuthenticateRequest;
    type Response = SaslAuthenticateResponse;

    fn handle(call: Call<'_>, request: SaslAuthenticateRequest) -> Reply<SaslAuthenticateResponse> {
        let (response, delay) = authenticate(call.ctx, call.session, request, call.version);
        Reply::later(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            response
        })
    }
}

response_fields!(SaslAuthenticateResponse: errors[error_code], no throttle_time_ms);

/// First SaslAuthenticate version with `session_lifetime_ms` (KIP-368).
const SESSION_LIFETIME_VERSION_MIN: i16 = 1;

pub fn handshake(
    session: &Session,
    request: SaslHandshakeRequest,
    version: i16,
) -> SaslHandshakeResponse {
    let Some(sasl) = &session.sasl else {
        return SaslHandshakeResponse::default().with_error_code(ILLEGAL_SASL_STATE);
    };
    let mut auth = sasl.lock();
    let step = auth.handshake(request.mechanism.as_str(), version == 0);
    let response = SaslHandshakeResponse::default().with_mechanisms(
        auth.settings()
            .mechanism_names()
            .into_iter()
            .map(str_bytes)
            .collect(),
    );
    match step {
        Step::Ok { .. } => response,
        Step::Refuse { code, message } => {
            info!(peer = %session.peer, listener = %session.listener, %message, "SASL handshake refused; closing connection");
            session.close_after_this();
            response.with_error_code(code)
        }
    }
}

/// The answer, and how long to hold it back (a failed authentication's delay).
pub fn authenticate(
    ctx: &BrokerContext,
    session: &Session,
    request: SaslAuthenticateRequest,
    version: i16,
) -> (SaslAuthenticateResponse, Duration) {
    let Some(sasl) = &session.sasl else {
        return (
            SaslAuthenticateResponse::default()
                .with_error_code(ILLEGAL_SASL_STATE)
                .with_error_message(Some(str_bytes(
                    "SaslAuthenticate on a listener without SASL",
                )))
                .with_auth_bytes(Bytes::new()),
            Duration::ZERO,
        );
    };
    let mut auth = sasl.lock();
    let image = ctx.cluster.image();
    let credentials = |user: &str, mechanism| image.scram_credential(user, mechanism).cloned();
    match auth.authenticate(&request.auth_bytes, Instant::now(), &credentials) {
        Step::Ok {
            session_lifetime_ms,
            auth_bytes,
        } => {
            let mut response =
                SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(auth_bytes));
            if version >= SESSION_LIFETIME_VERSION_MIN {
                response.session_lifetime_ms = session_lifetime_ms;
            }
            (response, Duration::ZERO)
        }
        Step::Refuse { code, message } => {
            info!(peer = %session.peer, listener = %session.listener, %message, "SASL authentication failed; closing connection");
            millrace_metrics::global().authentication_failures.inc();
            session.close_after_this();
            let delay = if code == SASL_AUTHENTICATION_FAILED {
                auth.settings().failed_delay
            } else {
                Duration::ZERO
            };
            (
                SaslAuthenticateResponse::default()
                    .with_error_code(code)
                    .with_error_message(Some(str_bytes(&message)))
                    .with_auth_bytes(Bytes::new()),
                delay,
            )
        }
    }
}

/// A bare SASL token (after SaslHandshake v0): the server's token in a bare frame, or — on a
/// failure — nothing, and the connection closes after the failure delay.
pub fn raw_token(ctx: &BrokerContext, session: &Session, token: Bytes) -> Pending {
    let step = match &session.sasl {
        Some(sasl) => {
            let mut auth = sasl.lock();
            let image = ctx.cluster.image();
            let credentials =
                |user: &str, mechanism| image.scram_credential(user, mechanism).cloned();
            let step = auth.authenticate(&token, Instant::now(), &credentials);
            (step, auth.settings().failed_delay)
        }
        None => (
            Step::Refuse {
                code: ILLEGAL_SASL_STATE,
                message: "a bare SASL token on a listener without SASL".to_string(),
            },
            Duration::ZERO,
        ),
    };
    match step {
        (Step::Ok { auth_bytes, .. }, _) => {
            let mut frame = BytesMut::with_capacity(4 + auth_bytes.len());
            frame.put_u32(u32::try_from(auth_bytes.len()).unwrap_or(u32::MAX));
            frame.put_slice(&auth_bytes);
            let frame = frame.freeze();
            tokio::spawn(async move { Ok(Some(vec![Chunk::Bytes(frame)])) })
        }
        (Step::Refuse { message, .. }, delay) => {
            info!(peer = %session.peer, listener = %session.listener, %message, "SASL authentication (v0 tokens) failed; closing connection");
            millrace_metrics::global().authentication_failures.inc();
            session.close_after_this();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                Ok(None)
            })
        }
    }
}
