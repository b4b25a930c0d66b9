//! Bytes → request → handler: decodes the request header, checks the API key and version against
//! [`crate::versions`], decodes the body once, calls the API's module, and encodes its response
//! with the right header version.
//!
//! Kafka's rules (protocol-checklist §1.2): an unknown or unserved key, a version outside the
//! advertised range (except ApiVersions) or an undecodable request closes the connection;
//! ApiVersions above our range gets the v0 error reply with our list; Produce with acks=0 gets no
//! response at all.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, AlterClientQuotasRequest,
    AlterConfigsRequest, AlterPartitionReassignmentsRequest, AlterUserScramCredentialsRequest,
    ApiKey, ApiVersionsRequest, ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest,
    CreateAclsRequest, CreatePartitionsRequest, CreateTopicsRequest, DeleteAclsRequest,
    DeleteGroupsRequest, DeleteRecordsRequest, DeleteTopicsRequest, DescribeAclsRequest,
    DescribeClientQuotasRequest, DescribeClusterRequest, DescribeConfigsRequest,
    DescribeGroupsRequest, DescribeLogDirsRequest, DescribeProducersRequest,
    DescribeTopicPartitionsRequest, DescribeTransactionsRequest,
    DescribeUserScramCredentialsRequest, ElectLeadersRequest, EndTxnRequest, FetchRequest,
    FindCoordinatorRequest, HeartbeatRequest, IncrementalAlterConfigsRequest,
    InitProducerIdRequest, JoinGroupRequest, LeaveGroupRequest, ListConfigResourcesRequest,
    ListGroupsRequest, ListOffsetsRequest, ListPartitionReassignmentsRequest,
    ListTransactionsRequest, MetadataRequest, OffsetCommitRequest, OffsetDeleteRequest,
    OffsetFetchRequest, OffsetForLeaderEpochRequest, ProduceRequest, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslHandshakeRequest, SyncGroupRequest, TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::task::JoinHandle;

use millrace_metrics::{ApiErrorLabels, ApiLabels};

use crate::api;
use crate::api::fetch::FetchQuota;
use crate::authz::Authz;
use crate::quota::{QuotaType, Throttle};
use crate::response_errors::{error_name, ResponseErrors, Throttled};
use crate::session::Session;
use crate::splice::{self, Chunk};
use crate::versions::{advertised, api_name, PRODUCE_VERSION_SERVED_MIN};
use crate::BrokerContext;

/// A response being prepared, as the chunks to write in order (usually one; a Fetch response is
/// cut around its record bytes, see [`crate::splice`]): `Ok(None)` means "send nothing" (acks=0);
/// `Err` means the response could not be built and the connection must close.
pub type Pending = JoinHandle<Result<Option<Vec<Chunk>>, String>>;

/// Where a request is going, for encoding its response.
#[derive(Debug, Clone, Copy)]
struct Route {
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    /// When the whole request had been read (the request-duration metric starts here).
    started: Instant,
    /// The API's name, the metrics' label.
    api: &'static str,
}

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
    let range = advertised(key).ok_or_else(|| format!("API {key:?} ({raw_key}) is not served"))?;
    let frame_bytes = frame.len();
    let mut buf = frame;

    if key == ApiKey::ApiVersions && version > range.max {
        let header = RequestHeader::decode(&mut buf, key.request_header_version(version))
            .map_err(|e| format!("ApiVersions v{version}: bad header: {e}"))?;
        let reply = api::api_versions::unsupported_version_response();
        let route = Route {
            key,
            version: 0,
            correlation_id: header.correlation_id,
            started,
            api: api_name(key),
        };
        count_request(route);
        return Ok(ready(route, &None, reply));
    }
    if version < range.min || version > range.max {
        return Err(format!(
            "{key:?} v{version} is outside the served range {}..={}",
            range.min, range.max
        ));
    }
    if key == ApiKey::Produce && version < PRODUCE_VERSION_SERVED_MIN {
        return Err(format!(
            "Produce v{version} (message format v0/v1) is no longer supported"
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
        if !matches!(
            key,
            ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
        ) {
            sasl.lock()
                .admits(Instant::now())
                .map_err(|reason| format!("{key:?}: {reason}"))?;
        }
    }

    // Who asks, and the ACLs in force now (everything allowed without an authorizer).
    let authz = Authz::for_session(ctx, session);

    // The request quota (`request_percentage`), when one may apply: the time this request takes
    // to handle is charged once it is done, and decides its answer's throttle (Kafka's order).
    let charge = (!matches!(
        key,
        ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
    ) && !ctx.cluster.image().client_quotas.is_empty())
    .then(|| RequestCharge {
        ctx: ctx.clone(),
        user: session.quota_user(),
        client_id: header.client_id.as_deref().unwrap_or_default().to_string(),
        throttle: session.throttle.clone(),
    });
    let incoming = Incoming {
        header: &header,
        body: buf,
        frame_bytes,
    };
    route_request(ctx, session, incoming, authz, route, &charge)
}

/// What a request's handling time is charged to (`request_percentage`).
#[derive(Clone)]
struct RequestCharge {
    ctx: Arc<BrokerContext>,
    user: String,
    client_id: String,
    throttle: Throttle,
}

impl RequestCharge {
    /// Charges `spent` (in Kafka's unit: percent of one thread, per second); the throttle time,
    /// which also mutes the connection.
    fn settle(&self, spent: Duration) -> i32 {
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

/// A future's output with the time spent inside its `poll` (its work, not its waits).
struct PollTimed<F> {
    inner: std::pin::Pin<Box<F>>,
    spent: Duration,
}

impl<F: Future> Future for PollTimed<F> {
    type Output = (F::Output, Duration);

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let start = Instant::now();
        let polled = self.inner.as_mut().poll(cx);
        self.spent += start.elapsed();
        let spent = self.spent;
        polled.map(|out| (out, spent))
    }
}

fn poll_timed<F: Future>(inner: F) -> PollTimed<F> {
    PollTimed {
        inner: Box::pin(inner),
        spent: Duration::ZERO,
    }
}

/// A request after its header: the body still to decode, and the whole frame's size.
struct Incoming<'a> {
    header: &'a RequestHeader,
    body: Bytes,
    frame_bytes: usize,
}

/// Calls the API's module with the decoded request.
fn route_request(
    ctx: &Arc<BrokerContext>,
    session: &Session,
    incoming: Incoming,
    authz: Authz,
    route: Route,
    charge: &Option<RequestCharge>,
) -> Result<Pending, String> {
    let (version, peer) = (route.version, session.peer);
    let Incoming {
        header,
        body: mut buf,
        frame_bytes,
    } = incoming;
    let client_id = header.client_id.as_deref().unwrap_or_default();
    match route.key {
        ApiKey::CreateAcls => {
            let request: CreateAclsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::acls::create(ctx.clone(), authz, request),
                true,
            ))
        }
        ApiKey::DescribeAcls => {
            let request: DescribeAclsRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::acls::describe(ctx, &authz, request),
            ))
        }
        ApiKey::DeleteAcls => {
            let request: DeleteAclsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::acls::delete(ctx.clone(), authz, request),
                true,
            ))
        }
        ApiKey::SaslHandshake => {
            let request: SaslHandshakeRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::sasl::handshake(session, request, version),
            ))
        }
        ApiKey::SaslAuthenticate => {
            let request: SaslAuthenticateRequest = decode(&mut buf, route)?;
            let (response, delay) = api::sasl::authenticate(ctx, session, request, version);
            Ok(spawn(
                route,
                charge,
                async move {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    response
                },
                true,
            ))
        }
        ApiKey::AlterUserScramCredentials => {
            let request: AlterUserScramCredentialsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::user_scram_credentials::alter(ctx.clone(), authz, request),
                true,
            ))
        }
        ApiKey::DescribeUserScramCredentials => {
            let request: DescribeUserScramCredentialsRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::user_scram_credentials::describe(ctx, &authz, request),
            ))
        }
        ApiKey::DescribeClientQuotas => {
            let request: DescribeClientQuotasRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::client_quotas::describe(ctx, &authz, request),
            ))
        }
        ApiKey::AlterClientQuotas => {
            let request: AlterClientQuotasRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::client_quotas::alter(ctx.clone(), authz, request),
                true,
            ))
        }
        ApiKey::Produce => {
            let request: ProduceRequest = decode(&mut buf, route)?;
            let acks = request.acks;
            // Kafka charges a produce request's whole size against `producer_byte_rate`.
            let throttle = charge_quota(
                ctx,
                session,
                QuotaType::Produce,
                client_id,
                frame_bytes as f64,
            );
            let response =
                api::produce::handle(ctx, authz, request, version, session.listener.clone());
            let response = async move {
                let mut response = response.await;
                response.throttle_time_ms = throttle;
                response
            };
            Ok(spawn(route, charge, response, acks != 0))
        }
        ApiKey::Fetch => {
            let request: FetchRequest = decode(&mut buf, route)?;
            let follower = request.replica_id.0 >= 0 || request.replica_state.replica_id.0 >= 0;
            let quota = (!ctx.cluster.image().client_quotas.is_empty()).then(|| FetchQuota {
                user: session.quota_user(),
                client_id: client_id.to_string(),
                throttle: session.throttle.clone(),
            });
            let response = api::fetch::handle(
                ctx.clone(),
                authz,
                quota,
                request,
                version,
                session.listener.clone(),
            );
            // A follower's fetches are not charged to a request quota (Kafka exempts them).
            let charge = charge.clone().filter(|_| !follower);
            let sync = route.started.elapsed();
            Ok(tokio::spawn(async move {
                let ((mut response, files), polled) = poll_timed(response).await;
                if let Some(c) = &charge {
                    response.throttle(c.settle(sync + polled));
                }
                let records = splice::take_records(&mut response, &files);
                let skeleton = encode(route, &response)?;
                splice::splice(skeleton, records, route.version).map(Some)
            }))
        }
        ApiKey::ListOffsets => {
            let request: ListOffsetsRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::list_offsets::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::Metadata => {
            let request: MetadataRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::metadata::handle(
                    ctx.clone(),
                    authz,
                    request,
                    version,
                    session.listener.clone(),
                ),
                true,
            ))
        }
        ApiKey::FindCoordinator => {
            let request: FindCoordinatorRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::find_coordinator::handle(ctx, &authz, request, version, &session.listener),
            ))
        }
        ApiKey::ApiVersions => {
            let request: ApiVersionsRequest = decode(&mut buf, route)?;
            let epoch = i64::try_from(ctx.cluster.image().offset).unwrap_or(i64::MAX);
            Ok(ready(
                route,
                charge,
                api::api_versions::handle(request, version, epoch),
            ))
        }
        ApiKey::CreateTopics => {
            let request: CreateTopicsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::create_topics::handle(ctx.clone(), authz, request, version),
                true,
            ))
        }
        ApiKey::DeleteTopics => {
            let request: DeleteTopicsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::delete_topics::handle(ctx.clone(), authz, request, version),
                true,
            ))
        }
        ApiKey::CreatePartitions => {
            let request: CreatePartitionsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::create_partitions::handle(ctx.clone(), authz, request, version),
                true,
            ))
        }
        ApiKey::DescribeCluster => {
            let request: DescribeClusterRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::describe_cluster::handle(ctx, &authz, request, version, &session.listener),
            ))
        }
        ApiKey::InitProducerId => {
            let request: InitProducerIdRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::init_producer_id::handle(ctx.clone(), authz, request, version),
                true,
            ))
        }
        ApiKey::ListConfigResources => {
            let request: ListConfigResourcesRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::list_config_resources::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::DescribeConfigs => {
            let request: DescribeConfigsRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::describe_configs::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::AlterConfigs => {
            let request: AlterConfigsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::alter_configs::handle(ctx.clone(), authz, request, version),
                true,
            ))
        }
        ApiKey::IncrementalAlterConfigs => {
            let request: IncrementalAlterConfigsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::alter_configs::handle_incremental(ctx.clone(), authz, request, version),
                true,
            ))
        }
        ApiKey::DeleteRecords => {
            let request: DeleteRecordsRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::delete_records::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::OffsetForLeaderEpoch => {
            let request: OffsetForLeaderEpochRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::offset_for_leader_epoch::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::DescribeLogDirs => {
            let request: DescribeLogDirsRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::describe_log_dirs::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::AddPartitionsToTxn => {
            let request: AddPartitionsToTxnRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::transactions::add_partitions_to_txn(ctx.clone(), authz, request, version),
                true,
            ))
        }
        ApiKey::AddOffsetsToTxn => {
            let request: AddOffsetsToTxnRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::transactions::add_offsets_to_txn(ctx.clone(), authz, request, version),
                true,
            ))
        }
        ApiKey::TxnOffsetCommit => {
            let request: TxnOffsetCommitRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::txn_offset_commit::handle(ctx, &authz, request, version),
                true,
            ))
        }
        ApiKey::EndTxn => {
            let request: EndTxnRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::transactions::end_txn(ctx.clone(), authz, request, version),
                true,
            ))
        }
        ApiKey::WriteTxnMarkers => {
            let request: WriteTxnMarkersRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::write_txn_markers::handle(ctx, &authz, request),
                true,
            ))
        }
        ApiKey::DescribeTransactions => {
            let request: DescribeTransactionsRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::transactions::describe_transactions(ctx, &authz, request),
            ))
        }
        ApiKey::ListTransactions => {
            let request: ListTransactionsRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::transactions::list_transactions(ctx, &authz, request, version),
            ))
        }
        ApiKey::DescribeProducers => {
            let request: DescribeProducersRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::describe_producers::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::DescribeTopicPartitions => {
            let request: DescribeTopicPartitionsRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::describe_topic_partitions::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::JoinGroup => {
            let request: JoinGroupRequest = decode(&mut buf, route)?;
            let client_id = header.client_id.as_deref().unwrap_or_default();
            Ok(spawn(
                route,
                charge,
                api::join_group::handle(ctx, &authz, request, version, client_id, peer),
                true,
            ))
        }
        ApiKey::SyncGroup => {
            let request: SyncGroupRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::sync_group::handle(ctx, &authz, request, version),
                true,
            ))
        }
        ApiKey::ConsumerGroupHeartbeat => {
            let request: ConsumerGroupHeartbeatRequest = decode(&mut buf, route)?;
            let client_id = header.client_id.as_deref().unwrap_or_default();
            Ok(spawn(
                route,
                charge,
                api::consumer_group_heartbeat::handle(
                    ctx, &authz, request, version, client_id, peer,
                ),
                true,
            ))
        }
        ApiKey::ConsumerGroupDescribe => {
            let request: ConsumerGroupDescribeRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::consumer_group_describe::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::Heartbeat => {
            let request: HeartbeatRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::heartbeat::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::LeaveGroup => {
            let request: LeaveGroupRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::leave_group::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::OffsetCommit => {
            let request: OffsetCommitRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::offset_commit::handle(ctx, &authz, request, version),
                true,
            ))
        }
        ApiKey::OffsetFetch => {
            let request: OffsetFetchRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::offset_fetch::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::ListGroups => {
            let request: ListGroupsRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::list_groups::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::DescribeGroups => {
            let request: DescribeGroupsRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                charge,
                api::describe_groups::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::DeleteGroups => {
            let request: DeleteGroupsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::delete_groups::handle(ctx, &authz, request, version),
                true,
            ))
        }
        ApiKey::OffsetDelete => {
            let request: OffsetDeleteRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::offset_delete::handle(ctx, &authz, request, version),
                true,
            ))
        }
        ApiKey::ElectLeaders => {
            let request: ElectLeadersRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::elect_leaders::handle(ctx.clone(), authz, request, version),
                true,
            ))
        }
        ApiKey::AlterPartitionReassignments => {
            let request: AlterPartitionReassignmentsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::alter_partition_reassignments::handle(ctx.clone(), authz, request, version),
                true,
            ))
        }
        ApiKey::ListPartitionReassignments => {
            let request: ListPartitionReassignmentsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                charge,
                api::list_partition_reassignments::handle(ctx.clone(), authz, request, version),
                true,
            ))
        }
        other => Err(format!("{other:?} is advertised but has no handler")),
    }
}

/// Records `value` against the client's `kind` quota, if one applies; the throttle time, which
/// also mutes the connection.
fn charge_quota(
    ctx: &BrokerContext,
    session: &Session,
    kind: QuotaType,
    client_id: &str,
    value: f64,
) -> i32 {
    let image = ctx.cluster.image();
    if image.client_quotas.is_empty() {
        return 0;
    }
    let throttle = ctx
        .quotas
        .record(&image, kind, &session.quota_user(), client_id, value);
    session.throttle.extend(throttle);
    throttle
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

/// Kafka's TotalTimeMs and ErrorsPerSec for one answered request (`None`: acks=0, no response).
fn observe<R: ResponseErrors>(route: Route, response: Option<&R>) {
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
            metrics
                .request_errors
                .get_or_create(&ApiErrorLabels {
                    api,
                    error: error_name(code),
                })
                .inc();
        });
    }
}

fn decode<T: Decodable>(buf: &mut Bytes, route: Route) -> Result<T, String> {
    T::decode(buf, route.version)
        .map_err(|e| format!("{:?} v{}: malformed request: {e}", route.key, route.version))
}

/// A response that is already complete.
fn ready<R: Encodable + ResponseErrors + Throttled + Send + 'static>(
    route: Route,
    charge: &Option<RequestCharge>,
    mut response: R,
) -> Pending {
    if let Some(c) = charge {
        response.throttle(c.settle(route.started.elapsed()));
    }
    let encoded = encode(route, &response).map(|frame| Some(vec![Chunk::Bytes(frame)]));
    tokio::spawn(async move { encoded })
}

/// A response that completes later (durability wait, long poll); `respond = false` drops it.
fn spawn<R, F>(route: Route, charge: &Option<RequestCharge>, response: F, respond: bool) -> Pending
where
    R: Encodable + ResponseErrors + Throttled + Send + 'static,
    F: Future<Output = R> + Send + 'static,
{
    let charge = charge.clone();
    let sync = route.started.elapsed();
    tokio::spawn(async move {
        let (mut response, polled) = poll_timed(response).await;
        if let Some(c) = &charge {
            response.throttle(c.settle(sync + polled));
        }
        if respond {
            encode(route, &response).map(|frame| Some(vec![Chunk::Bytes(frame)]))
        } else {
            observe(route, None::<&R>);
            Ok(None)
        }
    })
}

/// Size prefix + response header (at the API's response header version) + body.
fn encode<R: Encodable + ResponseErrors>(route: Route, response: &R) -> Result<Bytes, String> {
    observe(route, Some(response));
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
