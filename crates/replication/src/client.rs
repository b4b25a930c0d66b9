//! A minimal Kafka client connection between brokers: one TCP connection to another broker's
//! Kafka listener, one request at a time, Kafka's framing and headers, bounded frames. The
//! follower's fetcher uses it for replica Fetch (the only client request format this crate knows).
//!
//! Bad or oversized answers end the connection with an error; the caller reconnects.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::limits::INTER_BROKER_RESPONSE_BYTES_MAX;

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
}

/// One connection to another broker.
pub struct BrokerConnection {
    addr: String,
    stream: TcpStream,
    client_id: String,
    correlation_id: i32,
}

impl BrokerConnection {
    pub async fn connect(
        addr: &str,
        client_id: &str,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| ClientError::Timeout {
                addr: addr.to_string(),
                ms: timeout.as_millis(),
            })?
            .map_err(|source| ClientError::Connect {
                addr: addr.to_string(),
                source,
            })?;
        let _ = stream.set_nodelay(true);
        Ok(Self {
            addr: addr.to_string(),
            stream,
            client_id: client_id.to_string(),
            correlation_id: 0,
        })
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends `request` at `version` and decodes the answer.
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
