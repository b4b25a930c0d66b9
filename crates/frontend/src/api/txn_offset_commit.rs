//! TxnOffsetCommit (key 28, v0–4): a transactional producer commits a consumer group's offsets
//! inside its transaction (`sendOffsetsToTransaction`). The group coordinator writes them to
//! `__consumer_offsets` in a transactional batch under the producer's id and epoch; they stay
//! pending (invisible to OffsetFetch) until the transaction's marker commits or aborts them.
//!
//! Kafka's checks, in order: Write on the transactional id (else every partition
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED), Read on the group (GROUP_AUTHORIZATION_FAILED), Read
//! on each topic (TOPIC_AUTHORIZATION_FAILED) and that the partition exists
//! (UNKNOWN_TOPIC_OR_PARTITION); then the transaction must hold the group's offsets partition
//! (AddOffsetsToTxn first; INVALID_TXN_STATE, or INVALID_PRODUCER_EPOCH for a stale epoch;
//! COORDINATOR_LOAD_IN_PROGRESS, retried, while the transaction coordinator here is loading or the
//! transaction is being ended or fenced), and the group checks the member and generation when the
//! request names them (v3+). A write adding other partitions to the transaction does not hold the
//! check up: it looks at the partitions already committed, as Kafka's verification does.

use std::future::Future;
use std::sync::Arc;

use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use millrace_cluster::acl::AclOperation;
use millrace_groups::{partition_for, CommitRequest, OFFSETS_TOPIC};
use millrace_transactions::TxnError;

use super::offset_commit::{answer, check_partitions};
use super::transactions;
use crate::authz::Authz;
use crate::error_codes::{
    self, COORDINATOR_LOAD_IN_PROGRESS, GROUP_AUTHORIZATION_FAILED, INVALID_PRODUCER_EPOCH,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// TxnOffsetCommit: its key, versions, handler and error codes, for [`crate::registry`].
    TxnOffsetCommit, versions 0..=4, TxnOffsetCommitRequest,
    |call, request| Reply::later(handle(call.ctx, &call.authz, request, call.version)),
}

response_fields!(TxnOffsetCommitResponse: errors[topics[partitions[error_code]]], throttle_time_ms);

/// First version that names the member, generation and group instance (KIP-447).
const MEMBER_VERSION_MIN: i16 = 3;
/// First version with the committed leader epoch.
const LEADER_EPOCH_VERSION_MIN: i16 = 2;

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: TxnOffsetCommitRequest,
    version: i16,
) -> impl Future<Output = TxnOffsetCommitResponse> + Send + 'static {
    let id = request.transactional_id.0.to_string();
    let group_id = request.group_id.0.to_string();
    let whole = if !authz.transactional_id(AclOperation::Write, &id) {
        Some(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    } else if !authz.group(AclOperation::Read, &group_id) {
        Some(GROUP_AUTHORIZATION_FAILED)
    } else {
        let offsets_partition = partition_for(&group_id, ctx.groups.partition_count());
        ctx.transactions
            .verify(
                &id,
                request.producer_id.0,
                request.producer_epoch,
                OFFSETS_TOPIC,
                offsets_partition,
            )
            .err()
            .map(|e| match e {
                // Not checkable yet (the coordinator is loading, or the transaction is being
                // ended or fenced): a code every client retries on TxnOffsetCommit (librdkafka
                // gives up on NOT_ENOUGH_REPLICAS here).
                TxnError::NotEnoughReplicas => COORDINATOR_LOAD_IN_PROGRESS,
                e => transactions::error_code(e, INVALID_PRODUCER_EPOCH),
            })
    };
    let topics = request
        .topics
        .into_iter()
        .map(|t| (t.name, None, t.partitions));
    let with_leader_epoch = version >= LEADER_EPOCH_VERSION_MIN;
    let (layout, partitions) = check_partitions(ctx, authz, whole, with_leader_epoch, topics);
    let members = version >= MEMBER_VERSION_MIN;
    let commit = CommitRequest {
        group_id,
        generation_id: if members {
            request.generation_id_or_member_epoch
        } else {
            -1
        },
        member_id: if members {
            request.member_id.to_string()
        } else {
            String::new()
        },
        group_instance_id: request
            .group_instance_id
            .filter(|_| members)
            .map(|s| s.to_string()),
        retention_time_ms: -1,
        partitions,
    };
    let reply = (!commit.partitions.is_empty()).then(|| {
        ctx.groups
            .commit_txn_offsets(commit, request.producer_id.0, request.producer_epoch)
    });
    async move {
        let results = match reply {
            Some(reply) => reply.await,
            None => Vec::new(),
        };
        let topics = answer(layout, results, |e| {
            error_codes::from_group(e, "TxnOffsetCommit").code
        });
        TxnOffsetCommitResponse::default().with_topics(topics)
    }
}
