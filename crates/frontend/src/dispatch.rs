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
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterPartitionReassignmentsRequest, AlterUserScramCredentialsRequest,
    ApiKey, ApiVersionsRequest, ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest,
    CreateAclsRequest, CreatePartitionsRequest, CreateTopicsRequest, DeleteAclsRequest,
    DeleteGroupsRequest, DeleteRecordsRequest, DeleteTopicsRequest, DescribeAclsRequest,
    DescribeClientQuotasRequest, DescribeClusterRequest, DescribeConfigsRequest,
    DescribeGroupsRequest, DescribeLogDirsRequest, DescribeProducersRequest,
    DescribeTopicPartitionsRequest, DescribeUserScramCredentialsRequest, ElectLeadersRequest,
    FetchRequest, FindCoordinatorRequest, HeartbeatRequest, IncrementalAlterConfigsRequest,
    InitProducerIdRequest, JoinGroupRequest, LeaveGroupRequest, ListConfigResourcesRequest,
    ListGroupsRequest, ListOffsetsRequest, ListPartitionReassignmentsRequest, MetadataRequest,
    OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest, OffsetForLeaderEpochRequest,
    ProduceRequest, RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslHandshakeRequest,
    SyncGroupRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::task::JoinHandle;

use millrace_metrics::{ApiErrorLabels, ApiLabels};

use crate::api;
use crate::authz::Authz;
use crate::response_errors::{error_name, ResponseErrors};
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
    let peer = session.peer;
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
        return Ok(ready(route, reply));
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

    match key {
        ApiKey::CreateAcls => {
            let request: CreateAclsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                api::acls::create(ctx.clone(), authz, request),
                true,
            ))
        }
        ApiKey::DescribeAcls => {
            let request: DescribeAclsRequest = decode(&mut buf, route)?;
            Ok(ready(route, api::acls::describe(ctx, &authz, request)))
        }
        ApiKey::DeleteAcls => {
            let request: DeleteAclsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                api::acls::delete(ctx.clone(), authz, request),
                true,
            ))
        }
        ApiKey::SaslHandshake => {
            let request: SaslHandshakeRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                api::sasl::handshake(session, request, version),
            ))
        }
        ApiKey::SaslAuthenticate => {
            let request: SaslAuthenticateRequest = decode(&mut buf, route)?;
            let (response, delay) = api::sasl::authenticate(ctx, session, request, version);
            Ok(spawn(
                route,
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
                api::user_scram_credentials::alter(ctx.clone(), authz, request),
                true,
            ))
        }
        ApiKey::DescribeUserScramCredentials => {
            let request: DescribeUserScramCredentialsRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                api::user_scram_credentials::describe(ctx, &authz, request),
            ))
        }
        ApiKey::DescribeClientQuotas => {
            let request: DescribeClientQuotasRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                api::describe_client_quotas::handle(&authz, request),
            ))
        }
        ApiKey::Produce => {
            let request: ProduceRequest = decode(&mut buf, route)?;
            let acks = request.acks;
            let response =
                api::produce::handle(ctx, authz, request, version, session.listener.clone());
            Ok(spawn(route, response, acks != 0))
        }
        ApiKey::Fetch => {
            let request: FetchRequest = decode(&mut buf, route)?;
            let response = api::fetch::handle(
                ctx.clone(),
                authz,
                request,
                version,
                session.listener.clone(),
            );
            Ok(tokio::spawn(async move {
                let (mut response, files) = response.await;
                let records = splice::take_records(&mut response, &files);
                let skeleton = encode(route, &response)?;
                splice::splice(skeleton, records, route.version).map(Some)
            }))
        }
        ApiKey::ListOffsets => {
            let request: ListOffsetsRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                api::list_offsets::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::Metadata => {
            let request: MetadataRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
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
                api::find_coordinator::handle(ctx, &authz, request, version, &session.listener),
            ))
        }
        ApiKey::ApiVersions => {
            let request: ApiVersionsRequest = decode(&mut buf, route)?;
            let epoch = i64::try_from(ctx.cluster.image().offset).unwrap_or(i64::MAX);
            Ok(ready(
                route,
                api::api_versions::handle(request, version, epoch),
            ))
        }
        ApiKey::CreateTopics => {
            let request: CreateTopicsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                api::create_topics::handle(ctx.clone(), authz, request, version),
                true,
            ))
        }
        ApiKey::DeleteTopics => {
            let request: DeleteTopicsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                api::delete_topics::handle(ctx.clone(), authz, request, version),
                true,
            ))
        }
        ApiKey::CreatePartitions => {
            let request: CreatePartitionsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                api::create_partitions::handle(ctx.clone(), authz, request, version),
                true,
            ))
        }
        ApiKey::DescribeCluster => {
            let request: DescribeClusterRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                api::describe_cluster::handle(ctx, &authz, request, version, &session.listener),
            ))
        }
        ApiKey::InitProducerId => {
            let request: InitProducerIdRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                api::init_producer_id::handle(ctx.clone(), authz, request, version),
                true,
            ))
        }
        ApiKey::ListConfigResources => {
            let request: ListConfigResourcesRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                api::list_config_resources::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::DescribeConfigs => {
            let request: DescribeConfigsRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                api::describe_configs::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::AlterConfigs => {
            let request: AlterConfigsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                api::alter_configs::handle(ctx.clone(), authz, request, version),
                true,
            ))
        }
        ApiKey::IncrementalAlterConfigs => {
            let request: IncrementalAlterConfigsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                api::alter_configs::handle_incremental(ctx.clone(), authz, request, version),
                true,
            ))
        }
        ApiKey::DeleteRecords => {
            let request: DeleteRecordsRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                api::delete_records::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::OffsetForLeaderEpoch => {
            let request: OffsetForLeaderEpochRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                api::offset_for_leader_epoch::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::DescribeLogDirs => {
            let request: DescribeLogDirsRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                api::describe_log_dirs::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::DescribeProducers => {
            let request: DescribeProducersRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                api::describe_producers::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::DescribeTopicPartitions => {
            let request: DescribeTopicPartitionsRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                api::describe_topic_partitions::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::JoinGroup => {
            let request: JoinGroupRequest = decode(&mut buf, route)?;
            let client_id = header.client_id.as_deref().unwrap_or_default();
            Ok(spawn(
                route,
                api::join_group::handle(ctx, &authz, request, version, client_id, peer),
                true,
            ))
        }
        ApiKey::SyncGroup => {
            let request: SyncGroupRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                api::sync_group::handle(ctx, &authz, request, version),
                true,
            ))
        }
        ApiKey::ConsumerGroupHeartbeat => {
            let request: ConsumerGroupHeartbeatRequest = decode(&mut buf, route)?;
            let client_id = header.client_id.as_deref().unwrap_or_default();
            Ok(spawn(
                route,
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
                api::consumer_group_describe::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::Heartbeat => {
            let request: HeartbeatRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                api::heartbeat::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::LeaveGroup => {
            let request: LeaveGroupRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                api::leave_group::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::OffsetCommit => {
            let request: OffsetCommitRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                api::offset_commit::handle(ctx, &authz, request, version),
                true,
            ))
        }
        ApiKey::OffsetFetch => {
            let request: OffsetFetchRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                api::offset_fetch::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::ListGroups => {
            let request: ListGroupsRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                api::list_groups::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::DescribeGroups => {
            let request: DescribeGroupsRequest = decode(&mut buf, route)?;
            Ok(ready(
                route,
                api::describe_groups::handle(ctx, &authz, request, version),
            ))
        }
        ApiKey::DeleteGroups => {
            let request: DeleteGroupsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                api::delete_groups::handle(ctx, &authz, request, version),
                true,
            ))
        }
        ApiKey::OffsetDelete => {
            let request: OffsetDeleteRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                api::offset_delete::handle(ctx, &authz, request, version),
                true,
            ))
        }
        ApiKey::ElectLeaders => {
            let request: ElectLeadersRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                api::elect_leaders::handle(ctx.clone(), authz, request, version),
                true,
            ))
        }
        ApiKey::AlterPartitionReassignments => {
            let request: AlterPartitionReassignmentsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                api::alter_partition_reassignments::handle(ctx.clone(), authz, request, version),
                true,
            ))
        }
        ApiKey::ListPartitionReassignments => {
            let request: ListPartitionReassignmentsRequest = decode(&mut buf, route)?;
            Ok(spawn(
                route,
                api::list_partition_reassignments::handle(ctx.clone(), authz, request, version),
                true,
            ))
        }
        other => Err(format!("{other:?} is advertised but has no handler")),
    }
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
fn ready<R: Encodable + ResponseErrors + Send + 'static>(route: Route, response: R) -> Pending {
    let encoded = encode(route, &response).map(|frame| Some(vec![Chunk::Bytes(frame)]));
    tokio::spawn(async move { encoded })
}

/// A response that completes later (durability wait, long poll); `respond = false` drops it.
fn spawn<R, F>(route: Route, response: F, respond: bool) -> Pending
where
    R: Encodable + ResponseErrors + Send + 'static,
    F: Future<Output = R> + Send + 'static,
{
    tokio::spawn(async move {
        let response = response.await;
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
