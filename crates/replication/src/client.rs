//! A minimal Kafka client connection between brokers: one connection to another broker's
//! inter-broker listener, one request at a time, Kafka's framing and headers, bounded frames. The
//! follower's fetcher, repair, transaction markers, the share-state persister and the HTTP
//! gateway's forwarding use it.
//!
//! The connection speaks the listener's security protocol ([`InterBrokerSecurity`]): TLS first
//! where it asks for it, then SaslHandshake (v1) and SaslAuthenticate (v2) rounds with the
//! broker's own credentials. A session with a lifetime (KIP-368) authenticates again on the same
//! connection before it ends.
//!
//! Bad or oversized answers end the connection with an error; the caller reconnects.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use millrace_quorum::tls::server_name;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::client_security::InterBrokerSecurity;
use crate::limits::{INTER_BROKER_RESPONSE_BYTES_MAX, SASL_REAUTH_AT_PER_MILLE, SASL_ROUNDS_MAX};

/// SaslHandshake's version: 1, whose tokens travel in SaslAuthenticate requests.
const SASL_HANDSHAKE_VERSION: i16 = 1;
/// SaslAuthenticate's version: 2 (flexible, with the session lifetime of KIP-368).
const SASL_AUTHENTICATE_VERSION: i16 = 2;

/// Why a request to another broker failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("i/o with {addr}: {source}")]
    Io {
        addr: String,
        source: std::io::Error,
    },
    #[error("{addr} did not answer within {ms} ms")]
    Timeout { addr: String, ms: u128 },
    #[error("bad answer from {addr}: {reason}")]
    Protocol { addr: String, reason: String },
    #[error("TLS with {addr}: {reason}")]
    Tls { addr: String, reason: String },
    #[error("SASL authentication with {addr} failed: {reason}")]
    Authentication { addr: String, reason: String },
}

/// A connection's byte stream: TCP, or TLS over it.
trait PeerStream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> PeerStream for T {}

/// One connection to another broker.
pub struct BrokerConnection {
    addr: String,
    stream: Box<dyn PeerStream>,
    client_id: String,
    correlation_id: i32,
    security: InterBrokerSecurity,
    /// When the SASL session should be renewed (KIP-368), if the server gave it a lifetime.
    reauthenticate_at: Option<Instant>,
}

impl BrokerConnection {
    /// Connects to `addr` (`host:port`) and runs `security`'s handshakes, all within `timeout`.
    pub async fn connect(
        addr: &str,
        client_id: &str,
        timeout: Duration,
        security: &InterBrokerSecurity,
    ) -> Result<Self, ClientError> {
        let started = Instant::now();
        let timed_out = || ClientError::Timeout {
            addr: addr.to_string(),
            ms: timeout.as_millis(),
        };
        let tcp = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| timed_out())?
            .map_err(|source| ClientError::Connect {
                addr: addr.to_string(),
                source,
            })?;
        let _ = tcp.set_nodelay(true);
        let stream: Box<dyn PeerStream> = match &security.tls {
            None => Box::new(tcp),
            Some(tls) => {
                let tls_error = |reason: String| ClientError::Tls {
                    addr: addr.to_string(),
                    reason,
                };
                let connector = tls.connector().map_err(tls_error)?;
                let name = server_name(addr).map_err(tls_error)?;
                let left = timeout.saturating_sub(started.elapsed());
                let stream = tokio::time::timeout(left, connector.connect(name, tcp))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| tls_error(e.to_string()))?;
                Box::new(stream)
            }
        };
        let mut connection = Self {
            addr: addr.to_string(),
            stream,
            client_id: client_id.to_string(),
            correlation_id: 0,
            security: security.clone(),
            reauthenticate_at: None,
        };
        if connection.security.sasl.is_some() {
            connection
                .authenticate(timeout.saturating_sub(started.elapsed()))
                .await?;
        }
        Ok(connection)
    }

    /// One SASL exchange: SaslHandshake, then SaslAuthenticate rounds until the mechanism is
    /// done. Also how a session is renewed (KIP-368: the same requests on the same connection).
    async fn authenticate(&mut self, timeout: Duration) -> Result<(), ClientError> {
        let Some(sasl) = self.security.sasl.clone() else {
            return Ok(());
        };
        let addr = self.addr.clone();
        let failed = |reason: String| ClientError::Authentication {
            addr: addr.clone(),
            reason,
        };
        let handshake: SaslHandshakeResponse = self
            .send_now(
                ApiKey::SaslHandshake,
                SASL_HANDSHAKE_VERSION,
                &SaslHandshakeRequest::default()
                    .with_mechanism(StrBytes::from_string(sasl.mechanism().to_string())),
                timeout,
            )
            .await?;
        if handshake.error_code != 0 {
            let enabled: Vec<&str> = handshake.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(failed(format!(
                "mechanism {} refused (error code {}; the listener enables {enabled:?})",
                sasl.mechanism(),
                handshake.error_code
            )));
        }
        let mut exchange = sasl.start();
        let mut token = exchange.respond(None).map_err(failed)?;
        for _ in 0..SASL_ROUNDS_MAX {
            let Some(next) = token else {
                return Ok(());
            };
            let answer: SaslAuthenticateResponse = self
                .send_now(
                    ApiKey::SaslAuthenticate,
                    SASL_AUTHENTICATE_VERSION,
                    &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(next)),
                    timeout,
                )
                .await?;
            if answer.error_code != 0 {
                return Err(failed(format!(
                    "error code {}: {}",
                    answer.error_code,
                    answer.error_message.as_deref().unwrap_or("")
                )));
            }
            self.reauthenticate_at = u64::try_from(answer.session_lifetime_ms)
                .ok()
                .filter(|ms| *ms > 0)
                .map(|ms| {
                    Instant::now() + Duration::from_millis(ms) * SASL_REAUTH_AT_PER_MILLE / 1000
                });
            token = exchange.respond(Some(&answer.auth_bytes)).map_err(failed)?;
        }
        Err(failed(format!(
            "the exchange took more than {SASL_ROUNDS_MAX} rounds"
        )))
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends `request` at `version` and decodes the answer (renewing the SASL session first when
    /// it is about to end).
    pub async fn send<Req, Resp>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, ClientError>
    where
        Req: Encodable,
        Resp: Decodable,
    {
        if self
            .reauthenticate_at
            .is_some_and(|at| Instant::now() >= at)
        {
            self.authenticate(timeout).await?;
        }
        self.send_now(key, version, request, timeout).await
    }

    async fn send_now<Req, Resp>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, ClientError>
    where
        Req: Encodable,
        Resp: Decodable,
    {
        let protocol = |reason: String| ClientError::Protocol {
            addr: self.addr.clone(),
            reason,
        };
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let correlation_id = self.correlation_id;
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_string(self.client_id.clone())));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, key.request_header_version(version))
            .map_err(|e| protocol(format!("encode header: {e}")))?;
        request
            .encode(&mut body, version)
            .map_err(|e| protocol(format!("encode request: {e}")))?;
        let len = u32::try_from(body.len()).map_err(|_| protocol("request too large".into()))?;
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_u32(len);
        frame.extend_from_slice(&body);
        let io = |source| ClientError::Io {
            addr: self.addr.clone(),
            source,
        };
        let exchange = async {
            self.stream.write_all(&frame).await.map_err(io)?;
            let mut len_buf = [0u8; 4];
            self.stream.read_exact(&mut len_buf).await.map_err(io)?;
            let len = u32::from_be_bytes(len_buf) as usize;
            if len > INTER_BROKER_RESPONSE_BYTES_MAX {
                return Err(protocol(format!(
                    "answer of {len} bytes exceeds {INTER_BROKER_RESPONSE_BYTES_MAX}"
                )));
            }
            let mut buf = vec![0u8; len];
            self.stream.read_exact(&mut buf).await.map_err(io)?;
            Ok(Bytes::from(buf))
        };
        let mut answer = tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| ClientError::Timeout {
                addr: self.addr.clone(),
                ms: timeout.as_millis(),
            })??;
        let header = ResponseHeader::decode(&mut answer, key.response_header_version(version))
            .map_err(|e| protocol(format!("decode header: {e}")))?;
        if header.correlation_id != correlation_id {
            return Err(protocol(format!(
                "correlation id {} for request {correlation_id}",
                header.correlation_id
            )));
        }
        let response =
            Resp::decode(&mut answer, version).map_err(|e| protocol(format!("decode: {e}")))?;
        if answer.has_remaining() {
            return Err(protocol(format!("{} trailing bytes", answer.remaining())));
        }
        Ok(response)
    }
}
