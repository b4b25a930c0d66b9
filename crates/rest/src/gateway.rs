//! The way from an HTTP request into the broker: Kafka API handlers called in process with the
//! HTTP client's principal ([`millrace_frontend::inproc`]), so that ACLs, quotas and validation
//! are exactly the Kafka listener's; and, for what another broker must do (a partition's leader,
//! a group's coordinator), the same request forwarded to that broker inside an Envelope (key 58)
//! carrying the principal, over its inter-broker listener — Kafka's own forwarding mechanism.
//!
//! Also the lookups that decide where a request goes: a partition's leader, a group's
//! coordinator, from the committed metadata image.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, EnvelopeRequest, EnvelopeResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use millrace_cluster::image::MetadataImage;
use millrace_frontend::handler::{ApiHandler, ResponseFields};
use millrace_frontend::session::Session;
use millrace_frontend::{error_codes, inproc, BrokerContext};
use parking_lot::Mutex;
use tracing::debug;

use crate::error::RestError;
use crate::limits::{CLIENT_ID, THROTTLE_MS_MAX};

/// How long a forwarded request may take, the connection included.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(60);
/// Idle connections kept per other broker.
const FORWARD_CONNECTIONS_IDLE_MAX: usize = 8;
/// Envelope's only version.
const ENVELOPE_VERSION: i16 = 0;

/// Who sends an HTTP request, as the authentication layer found (`User:ANONYMOUS` without one).
#[derive(Debug, Clone)]
pub struct Caller {
    /// `User:<name>`, as a Kafka listener would name the same client.
    pub principal: String,
    /// The client's address.
    pub peer: SocketAddr,
}

/// The broker, once it serves, and the connections to the other brokers.
pub struct Gateway {
    ctx: OnceLock<Arc<BrokerContext>>,
    /// The Kafka listener whose addresses responses carry (Metadata's brokers, v3's hosts).
    listener: Arc<str>,
    /// Idle forwarding connections, by node id.
    idle: Mutex<Vec<(i32, millrace_replication::client::BrokerConnection)>>,
}

impl Gateway {
    pub fn new(listener: Arc<str>) -> Self {
        Self {
            ctx: OnceLock::new(),
            listener,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// The broker serves from now on.
    pub fn attach(&self, ctx: Arc<BrokerContext>) {
        let _ = self.ctx.set(ctx);
    }

    /// The broker; 503 until it serves.
    pub fn context(&self) -> Result<&Arc<BrokerContext>, RestError> {
        self.ctx
            .get()
            .ok_or_else(|| RestError::unavailable("the broker is starting"))
    }

    /// The committed metadata image.
    pub fn image(&self) -> Result<Arc<MetadataImage>, RestError> {
        Ok(self.context()?.cluster.image())
    }

    /// This broker's node id.
    pub fn node_id(&self) -> Result<i32, RestError> {
        Ok(self.context()?.cluster.node_id())
    }

    /// The Kafka listener whose addresses the HTTP API reports.
    pub fn listener(&self) -> &Arc<str> {
        &self.listener
    }

    /// What `caller` may do, by the ACLs in force now (everything without an authorizer), for the
    /// checks a route makes before calling a handler (Kafka's: a topic the caller may not
    /// Describe is "not authorized", never "not found").
    pub fn authz(&self, caller: &Caller) -> Result<millrace_frontend::authz::Authz, RestError> {
        Ok(millrace_frontend::authz::Authz::for_session(
            self.context()?,
            &self.session(caller),
        ))
    }

    /// The session a Kafka handler sees for `caller`.
    pub fn session(&self, caller: &Caller) -> Session {
        Session::authenticated(caller.peer, self.listener.clone(), caller.principal.clone())
    }

    /// Holds the HTTP answer back for a Kafka response's `throttle_time_ms` (at most
    /// [`THROTTLE_MS_MAX`]; at once when the broker shuts down), as a Kafka client's connection is
    /// muted for it (KIP-219): a principal over its quota gets its answers that much later, so a
    /// client that waits for each answer is slowed to its quota. [`Gateway::call`] and
    /// [`Gateway::call_on`] call it for every Kafka response they return. A delay, not 429 with
    /// `Retry-After`: the request was served (the records are written), so refusing it would be
    /// wrong, and a delay needs nothing of the client.
    pub async fn throttle(&self, throttle_time_ms: i32) {
        let Some(ms) = u64::try_from(throttle_time_ms).ok().filter(|ms| *ms > 0) else {
            return;
        };
        let delay = tokio::time::sleep(Duration::from_millis(ms.min(THROTTLE_MS_MAX)));
        match self.ctx.get() {
            Some(ctx) => {
                tokio::select! {
                    _ = delay => {}
                    _ = ctx.shutdown.cancelled() => {}
                }
            }
            None => delay.await,
        }
    }

    /// Calls `H` on this broker at `version` as `caller`. A response with a throttle time is
    /// answered that much later ([`Gateway::throttle`]): every route honours the caller's quotas
    /// as a Kafka client's muted connection does.
    pub async fn call<H: ApiHandler>(
        &self,
        caller: &Caller,
        version: i16,
        request: H::Request,
    ) -> Result<H::Response, RestError> {
        let ctx = self.context()?;
        let session = self.session(caller);
        let mut response = inproc::call::<H>(ctx, &session, CLIENT_ID, version, request)
            .await
            .map_err(|e| RestError::internal(e.to_string()))?;
        self.throttled(&mut response).await;
        Ok(response)
    }

    /// Waits out `response`'s throttle time, if it has one.
    async fn throttled<R: ResponseFields>(&self, response: &mut R) {
        if let Some(ms) = response.throttle_time_ms().map(|ms| *ms) {
            self.throttle(ms).await;
        }
    }

    /// Calls `H` on broker `node` (this one in process, another through an Envelope) at `version`
    /// as `caller`.
    pub async fn call_on<H>(
        &self,
        node: i32,
        caller: &Caller,
        version: i16,
        request: H::Request,
    ) -> Result<H::Response, RestError>
    where
        H: ApiHandler,
        H::Request: Encodable,
        H::Response: Decodable,
    {
        if node == self.node_id()? {
            return self.call::<H>(caller, version, request).await;
        }
        let mut response = self
            .forward::<H>(node, caller, version, &request)
            .await
            .map_err(|reason| {
                RestError::kafka(
                    error_codes::REQUEST_TIMED_OUT,
                    &format!("broker {node} ({reason})"),
                )
            })?;
        self.throttled(&mut response).await;
        Ok(response)
    }

    /// The leader of `topic`'s `partition`: 40401 for an unknown topic, 40402 for an unknown
    /// partition, 40404 while it has none.
    pub fn leader_of(&self, topic: &str, partition: i32) -> Result<i32, RestError> {
        let image = self.image()?;
        let Some(t) = image.topic(topic) else {
            return Err(RestError::topic_not_found(topic));
        };
        let Some(p) = t.partition(partition) else {
            return Err(RestError::partition_not_found(topic, partition));
        };
        if p.leader < 0 {
            return Err(RestError::kafka(
                error_codes::LEADER_NOT_AVAILABLE,
                &format!("partition {topic}-{partition}"),
            ));
        }
        Ok(p.leader)
    }

    /// The coordinator of group `group` (the leader of its `__consumer_offsets` partition);
    /// retriable 50003 while there is none (the offsets topic does not exist until a group
    /// coordinator is first asked for, which the caller does with FindCoordinator).
    pub fn coordinator_of(&self, group: &str) -> Result<i32, RestError> {
        let image = self.image()?;
        let topic = image.topic(millrace_groups::OFFSETS_TOPIC).ok_or_else(|| {
            RestError::kafka(
                error_codes::COORDINATOR_NOT_AVAILABLE,
                &format!("group {group}"),
            )
        })?;
        let partition = millrace_groups::partition_for(group, topic.partition_count());
        match topic.partition(partition).map(|p| p.leader) {
            Some(leader) if leader >= 0 => Ok(leader),
            _ => Err(RestError::kafka(
                error_codes::COORDINATOR_NOT_AVAILABLE,
                &format!("group {group}"),
            )),
        }
    }

    /// Sends `request` to broker `node` wrapped in an Envelope that names `caller`'s principal;
    /// the inner response.
    async fn forward<H>(
        &self,
        node: i32,
        caller: &Caller,
        version: i16,
        request: &H::Request,
    ) -> Result<H::Response, String>
    where
        H: ApiHandler,
        H::Request: Encodable,
        H::Response: Decodable,
    {
        let ctx = self.context().map_err(|e| e.message)?;
        let broker = ctx
            .cluster
            .broker(node)
            .ok_or_else(|| format!("broker {node} is not registered"))?;
        let header = RequestHeader::default()
            .with_request_api_key(H::KEY as i16)
            .with_request_api_version(version)
            .with_correlation_id(0)
            .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
        let mut inner = BytesMut::new();
        header
            .encode(&mut inner, H::KEY.request_header_version(version))
            .map_err(|e| format!("encode header: {e}"))?;
        request
            .encode(&mut inner, version)
            .map_err(|e| format!("encode request: {e}"))?;
        let envelope = EnvelopeRequest::default()
            .with_request_data(inner.freeze())
            .with_request_principal(Some(Bytes::from(caller.principal.clone().into_bytes())))
            .with_client_host_address(ip_bytes(caller.peer));

        // A pooled connection may have been closed by the other broker while idle
        // (`connections.max.idle.ms`): when its socket fails it is dropped and the request sent
        // once more on a new connection, as a Kafka client reconnects.
        let pooled = {
            let mut idle = self.idle.lock();
            idle.iter()
                .position(|(n, _)| *n == node)
                .map(|i| idle.swap_remove(i).1)
        };
        let sent = match pooled {
            Some(mut c) => match c
                .send(
                    ApiKey::Envelope,
                    ENVELOPE_VERSION,
                    &envelope,
                    FORWARD_TIMEOUT,
                )
                .await
            {
                Ok(answer) => Ok((c, answer)),
                // Only a closed or reset socket is retried: a timeout may be a request the other
                // broker is still working on.
                Err(e @ millrace_replication::client::ClientError::Io { .. }) => {
                    debug!(node, error = %e, "pooled forwarding connection failed; reconnecting");
                    Err(())
                }
                Err(e) => return Err(e.to_string()),
            },
            None => Err(()),
        };
        let (connection, answer): (_, EnvelopeResponse) = match sent {
            Ok(done) => done,
            Err(()) => {
                let mut c = ctx
                    .replicas
                    .connect_to(
                        &format!("{}:{}", broker.host, broker.port),
                        CLIENT_ID,
                        FORWARD_TIMEOUT,
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                let answer = c
                    .send(
                        ApiKey::Envelope,
                        ENVELOPE_VERSION,
                        &envelope,
                        FORWARD_TIMEOUT,
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                (c, answer)
            }
        };
        {
            let mut idle = self.idle.lock();
            if idle.iter().filter(|(n, _)| *n == node).count() < FORWARD_CONNECTIONS_IDLE_MAX {
                idle.push((node, connection));
            }
        }
        if answer.error_code != error_codes::NONE {
            return Err(format!(
                "the envelope was refused: {}",
                error_codes::error_name(answer.error_code)
            ));
        }
        let mut data = answer
            .response_data
            .ok_or_else(|| "the envelope carried no response".to_string())?;
        ResponseHeader::decode(&mut data, H::KEY.response_header_version(version))
            .map_err(|e| format!("decode inner header: {e}"))?;
        let response =
            H::Response::decode(&mut data, version).map_err(|e| format!("decode: {e}"))?;
        if data.has_remaining() {
            debug!(
                node,
                trailing = data.remaining(),
                "forwarded response with trailing bytes"
            );
        }
        Ok(response)
    }
}

/// The client's IP address as Envelope carries it (4 or 16 bytes).
fn ip_bytes(peer: SocketAddr) -> Bytes {
    let mut out = BytesMut::new();
    match peer.ip() {
        std::net::IpAddr::V4(ip) => out.put_slice(&ip.octets()),
        std::net::IpAddr::V6(ip) => out.put_slice(&ip.octets()),
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn throttle_waits_the_throttle_time_up_to_its_bound() {
        let gateway = Gateway::new(Arc::from("PLAINTEXT"));
        for (throttle_time_ms, want) in [
            (0, Duration::ZERO),
            (-5, Duration::ZERO),
            (250, Duration::from_millis(250)),
            (i32::MAX, Duration::from_millis(THROTTLE_MS_MAX)),
        ] {
            let started = tokio::time::Instant::now();
            gateway.throttle(throttle_time_ms).await;
            assert_eq!(started.elapsed(), want, "{throttle_time_ms}");
        }
    }
}
