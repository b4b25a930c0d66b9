//! The share-state RPCs (KIP-932), broker to broker: InitializeShareGroupState (key 83),
//! ReadShareGroupState (84), WriteShareGroupState (85), DeleteShareGroupState (86) and
//! ReadShareGroupStateSummary (87), answered by this broker's share coordinator
//! ([`crate::share_coordinator`]) for the keys whose `__share_group_state` partition it leads.
//!
//! As in Kafka 4.4: each needs ClusterAction on the cluster (else every partition
//! CLUSTER_AUTHORIZATION_FAILED); a topic id not in the image, or a partition past its count, is
//! UNKNOWN_TOPIC_OR_PARTITION; an empty group id INVALID_REQUEST; a key whose state partition is
//! led elsewhere NOT_COORDINATOR, one still loading COORDINATOR_LOAD_IN_PROGRESS; the RPC's own
//! refusals (FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH, INVALID_REQUEST for an uninitialized key)
//! are `millrace_share::coordinator`'s. Partitions are handled one after the other; each answer
//! comes once its record is committed. Not gated on `millrace.share.groups.enable`, as Kafka does
//! not gate them on `share.version`.

use std::sync::Arc;

use kafka_protocol::messages::{
    delete_share_group_state_response, initialize_share_group_state_response,
    read_share_group_state_response, read_share_group_state_summary_response,
    write_share_group_state_response, DeleteShareGroupStateRequest, DeleteShareGroupStateResponse,
    InitializeShareGroupStateRequest, InitializeShareGroupStateResponse,
    ReadShareGroupStateRequest, ReadShareGroupStateResponse, ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse, WriteShareGroupStateRequest, WriteShareGroupStateResponse,
};
use millrace_cluster::acl::AclOperation;
use millrace_groups::partition_for;
use millrace_share::records::ShareStateKey;
use millrace_share::{StateBatch, StateWrite, SHARE_GROUP_STATE_TOPIC};
use uuid::Uuid;

use super::str_bytes;
use crate::authz::Authz;
use crate::error_codes::{
    CLUSTER_AUTHORIZATION_FAILED, COORDINATOR_NOT_AVAILABLE, INVALID_REQUEST, NONE,
    UNKNOWN_TOPIC_OR_PARTITION,
};
use crate::handler::{api_handler, response_fields, Reply};
use crate::share_coordinator::{ShareCoordinator, StateError};
use crate::share_persister::{coordinator_key, state_key};
use crate::BrokerContext;

api_handler! {
    /// InitializeShareGroupState: its key, versions, handler and error codes.
    InitializeShareGroupState, versions 0..=0, InitializeShareGroupStateRequest,
    |call, request| Reply::later(initialize(call.ctx.clone(), call.authz.clone(), request)),
}

api_handler! {
    /// ReadShareGroupState: its key, versions, handler and error codes.
    ReadShareGroupState, versions 0..=0, ReadShareGroupStateRequest,
    |call, request| Reply::later(read(call.ctx.clone(), call.authz.clone(), request)),
}

api_handler! {
    /// WriteShareGroupState: its key, versions, handler and error codes.
    WriteShareGroupState, versions 0..=1, WriteShareGroupStateRequest,
    |call, request| Reply::later(write(call.ctx.clone(), call.authz.clone(), request)),
}

api_handler! {
    /// DeleteShareGroupState: its key, versions, handler and error codes.
    DeleteShareGroupState, versions 0..=0, DeleteShareGroupStateRequest,
    |call, request| Reply::later(delete(call.ctx.clone(), call.authz.clone(), request)),
}

api_handler! {
    /// ReadShareGroupStateSummary: its key, versions, handler and error codes.
    ReadShareGroupStateSummary, versions 0..=1, ReadShareGroupStateSummaryRequest,
    |call, request| Reply::later(read_summary(call.ctx.clone(), call.authz.clone(), request)),
}

// Inter-broker: none carries a throttle time.
response_fields!(
    InitializeShareGroupStateResponse: errors[results[partitions[error_code]]],
    no throttle_time_ms
);
response_fields!(
    ReadShareGroupStateResponse: errors[results[partitions[error_code]]],
    no throttle_time_ms
);
response_fields!(
    WriteShareGroupStateResponse: errors[results[partitions[error_code]]],
    no throttle_time_ms
);
response_fields!(
    DeleteShareGroupStateResponse: errors[results[partitions[error_code]]],
    no throttle_time_ms
);
response_fields!(
    ReadShareGroupStateSummaryResponse: errors[results[partitions[error_code]]],
    no throttle_time_ms
);

/// The coordinator, its `__share_group_state` partition and the record key of one
/// share partition, or the error every RPC answers for it.
fn resolve(
    ctx: &BrokerContext,
    authz: &Authz,
    group_id: &str,
    topic_id: Uuid,
    partition: i32,
) -> Result<(Arc<ShareCoordinator>, i32, ShareStateKey), StateError> {
    if !authz.cluster(AclOperation::ClusterAction) {
        return Err(StateError::new(CLUSTER_AUTHORIZATION_FAILED, ""));
    }
    if group_id.is_empty() {
        return Err(StateError::new(
            INVALID_REQUEST,
            "Group id must be specified and non-empty",
        ));
    }
    let image = ctx.cluster.image();
    let known = image
        .topic_by_id(topic_id)
        .is_some_and(|t| partition >= 0 && partition < t.partition_count());
    if !known {
        return Err(StateError::new(
            UNKNOWN_TOPIC_OR_PARTITION,
            "This server does not host this topic-partition.",
        ));
    }
    let unavailable = || {
        StateError::new(
            COORDINATOR_NOT_AVAILABLE,
            "The share coordinator is not available",
        )
    };
    let coordinator = ctx.shares.coordinator().ok_or_else(unavailable)?;
    let state_topic = image
        .topic(SHARE_GROUP_STATE_TOPIC)
        .ok_or_else(unavailable)?;
    let state_partition = partition_for(
        &coordinator_key(group_id, topic_id, partition),
        state_topic.partition_count(),
    );
    Ok((
        Arc::clone(coordinator),
        state_partition,
        state_key(group_id, topic_id, partition),
    ))
}

/// (code, message) of an outcome.
fn outcome<T>(r: &Result<T, StateError>) -> (i16, Option<kafka_protocol::protocol::StrBytes>) {
    match r {
        Ok(_) => (NONE, None),
        Err(e) => (e.code, Some(str_bytes(&e.message))),
    }
}

async fn initialize(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: InitializeShareGroupStateRequest,
) -> InitializeShareGroupStateResponse {
    let group = request.group_id.to_string();
    let mut results = Vec::with_capacity(request.topics.len());
    for t in &request.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let r = match resolve(&ctx, &authz, &group, t.topic_id, p.partition) {
                Ok((c, sp, key)) => c.initialize(sp, &key, p.state_epoch, p.start_offset).await,
                Err(e) => Err(e),
            };
            let (code, message) = outcome(&r);
            partitions.push(
                initialize_share_group_state_response::PartitionResult::default()
                    .with_partition(p.partition)
                    .with_error_code(code)
                    .with_error_message(message),
            );
        }
        results.push(
            initialize_share_group_state_response::InitializeStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    InitializeShareGroupStateResponse::default().with_results(results)
}

async fn read(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: ReadShareGroupStateRequest,
) -> ReadShareGroupStateResponse {
    let group = request.group_id.to_string();
    let mut results = Vec::with_capacity(request.topics.len());
    for t in &request.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let r = match resolve(&ctx, &authz, &group, t.topic_id, p.partition) {
                Ok((c, sp, key)) => c.read(sp, &key, p.leader_epoch).await,
                Err(e) => Err(e),
            };
            let (code, message) = outcome(&r);
            let mut answer = read_share_group_state_response::PartitionResult::default()
                .with_partition(p.partition)
                .with_error_code(code)
                .with_error_message(message)
                .with_state_epoch(0)
                .with_start_offset(-1);
            if let Ok(state) = r {
                answer = answer
                    .with_state_epoch(state.state_epoch)
                    .with_start_offset(state.start_offset)
                    .with_state_batches(
                        state
                            .batches
                            .iter()
                            .map(|b| {
                                read_share_group_state_response::StateBatch::default()
                                    .with_first_offset(b.first)
                                    .with_last_offset(b.last)
                                    .with_delivery_state(i8::try_from(b.state).unwrap_or(i8::MAX))
                                    .with_delivery_count(b.delivery_count)
                            })
                            .collect(),
                    );
            }
            partitions.push(answer);
        }
        results.push(
            read_share_group_state_response::ReadStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    ReadShareGroupStateResponse::default().with_results(results)
}

async fn write(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: WriteShareGroupStateRequest,
) -> WriteShareGroupStateResponse {
    let group = request.group_id.to_string();
    let mut results = Vec::with_capacity(request.topics.len());
    for t in &request.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let write = StateWrite {
                state_epoch: p.state_epoch,
                leader_epoch: p.leader_epoch,
                start_offset: p.start_offset,
                delivery_complete_count: p.delivery_complete_count,
                batches: p
                    .state_batches
                    .iter()
                    .map(|b| StateBatch {
                        first: b.first_offset,
                        last: b.last_offset,
                        // A negative state is no state: the coordinator keeps what it reads.
                        state: u8::try_from(b.delivery_state).unwrap_or(u8::MAX),
                        delivery_count: b.delivery_count,
                    })
                    .collect(),
            };
            let r = match resolve(&ctx, &authz, &group, t.topic_id, p.partition) {
                Ok((c, sp, key)) => c.write(sp, &key, &write).await,
                Err(e) => Err(e),
            };
            let (code, message) = outcome(&r);
            partitions.push(
                write_share_group_state_response::PartitionResult::default()
                    .with_partition(p.partition)
                    .with_error_code(code)
                    .with_error_message(message),
            );
        }
        results.push(
            write_share_group_state_response::WriteStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    WriteShareGroupStateResponse::default().with_results(results)
}

async fn delete(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: DeleteShareGroupStateRequest,
) -> DeleteShareGroupStateResponse {
    let group = request.group_id.to_string();
    let mut results = Vec::with_capacity(request.topics.len());
    for t in &request.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let r = match resolve(&ctx, &authz, &group, t.topic_id, p.partition) {
                Ok((c, sp, key)) => c.delete(sp, &key).await,
                Err(e) => Err(e),
            };
            let (code, message) = outcome(&r);
            partitions.push(
                delete_share_group_state_response::PartitionResult::default()
                    .with_partition(p.partition)
                    .with_error_code(code)
                    .with_error_message(message),
            );
        }
        results.push(
            delete_share_group_state_response::DeleteStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    DeleteShareGroupStateResponse::default().with_results(results)
}

async fn read_summary(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: ReadShareGroupStateSummaryRequest,
) -> ReadShareGroupStateSummaryResponse {
    let group = request.group_id.to_string();
    let mut results = Vec::with_capacity(request.topics.len());
    for t in &request.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let r = match resolve(&ctx, &authz, &group, t.topic_id, p.partition) {
                Ok((c, sp, key)) => c.read_summary(sp, &key).await,
                Err(e) => Err(e),
            };
            let (code, message) = outcome(&r);
            let mut answer = read_share_group_state_summary_response::PartitionResult::default()
                .with_partition(p.partition)
                .with_error_code(code)
                .with_error_message(message)
                .with_start_offset(-1)
                .with_delivery_complete_count(-1);
            if let Ok(s) = r {
                answer = answer
                    .with_state_epoch(s.state_epoch)
                    .with_leader_epoch(s.leader_epoch)
                    .with_start_offset(s.start_offset)
                    .with_delivery_complete_count(s.delivery_complete_count);
            }
            partitions.push(answer);
        }
        results.push(
            read_share_group_state_summary_response::ReadStateSummaryResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    ReadShareGroupStateSummaryResponse::default().with_results(results)
}
