//! The transaction coordinator's client APIs: AddPartitionsToTxn (key 24, v0–3: one
//! transaction per request, as clients send it), AddOffsetsToTxn (25, v0–4: the group's
//! `__consumer_offsets` partition joins the transaction), EndTxn (26, v0–4),
//! DescribeTransactions (65, v0) and ListTransactions (66, v0–2; v2 filters by a transactional-id
//! pattern, KIP-1152: a whole-name match, as Kafka's Java `matches`), over
//! `millrace_transactions::TransactionCoordinator`; InitProducerId with a transactional id is in
//! `init_producer_id`, TxnOffsetCommit in `txn_offset_commit`.
//!
//! Kafka's checks, in Kafka's order: Write on the transactional id (else every partition or the
//! request TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then per partition Write on its topic and
//! that it exists (TOPIC_AUTHORIZATION_FAILED / UNKNOWN_TOPIC_OR_PARTITION, the rest
//! OPERATION_NOT_ATTEMPTED), then the coordinator. Versions before KIP-588 hear
//! INVALID_PRODUCER_EPOCH where newer ones hear PRODUCER_FENCED.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::list_transactions_response::TransactionState as ListedTransaction;
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, DescribeTransactionsRequest, DescribeTransactionsResponse,
    EndTxnRequest, EndTxnResponse, ListTransactionsRequest, ListTransactionsResponse, ProducerId,
    TransactionalId,
};
use millrace_cluster::acl::AclOperation;
use millrace_groups::{partition_for, whole_match_regex, OFFSETS_TOPIC};
use millrace_transactions::{TxnError, TxnStatus};

use super::{str_bytes, topic_name};
use crate::authz::Authz;
use crate::error_codes::{
    CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
    GROUP_AUTHORIZATION_FAILED, INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_ID_MAPPING,
    INVALID_REGULAR_EXPRESSION, INVALID_REQUEST, INVALID_TRANSACTION_TIMEOUT, INVALID_TXN_STATE,
    NONE, NOT_COORDINATOR, NOT_ENOUGH_REPLICAS, PRODUCER_FENCED, TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_NOT_FOUND, UNKNOWN_SERVER_ERROR,
    UNKNOWN_TOPIC_OR_PARTITION,
};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// AddPartitionsToTxn: its key, versions, handler and error codes, for [`crate::registry`].
    AddPartitionsToTxn, versions 0..=3, AddPartitionsToTxnRequest,
    |call, request| {
        Reply::later(add_partitions_to_txn(call.ctx.clone(), call.authz, request, call.version))
    },
}

response_fields!(
    AddPartitionsToTxnResponse:
    errors[error_code, results_by_topic_v3_and_below[results_by_partition[partition_error_code]]],
    throttle_time_ms
);

api_handler! {
    /// AddOffsetsToTxn: its key, versions, handler and error codes, for [`crate::registry`].
    AddOffsetsToTxn, versions 0..=4, AddOffsetsToTxnRequest,
    |call, request| {
        Reply::later(add_offsets_to_txn(call.ctx.clone(), call.authz, request, call.version))
    },
}

response_fields!(AddOffsetsToTxnResponse: errors[error_code], throttle_time_ms);

api_handler! {
    /// EndTxn: its key, versions, handler and error codes, for [`crate::registry`].
    EndTxn, versions 0..=4, EndTxnRequest,
    |call, request| Reply::later(end_txn(call.ctx.clone(), call.authz, request, call.version)),
}

response_fields!(EndTxnResponse: errors[error_code], throttle_time_ms);

api_handler! {
    /// DescribeTransactions: its key, versions, handler and error codes, for [`crate::registry`].
    DescribeTransactions, versions 0..=0, DescribeTransactionsRequest,
    |call, request| Reply::Now(describe_transactions(call.ctx, &call.authz, request)),
}

response_fields!(
    DescribeTransactionsResponse:
    errors[transaction_states[error_code]],
    throttle_time_ms
);

api_handler! {
    /// ListTransactions: its key, versions, handler and error codes, for [`crate::registry`].
    ListTransactions, versions 0..=2, ListTransactionsRequest,
    |call, request| Reply::Now(list_transactions(call.ctx, &call.authz, request, call.version)),
}

response_fields!(ListTransactionsResponse: errors[error_code], throttle_time_ms);

/// OPERATION_NOT_ATTEMPTED: the request failed on another of its partitions.
const OPERATION_NOT_ATTEMPTED: i16 = 55;

/// The coordinator's refusal as Kafka's error code; `fenced_code` is what PRODUCER_FENCED is at
/// the request's version.
pub(crate) fn error_code(e: TxnError, fenced_code: i16) -> i16 {
    match e {
        TxnError::NotCoordinator => NOT_COORDINATOR,
        TxnError::LoadInProgress => COORDINATOR_LOAD_IN_PROGRESS,
        TxnError::CoordinatorNotAvailable => COORDINATOR_NOT_AVAILABLE,
        TxnError::ConcurrentTransactions => CONCURRENT_TRANSACTIONS,
        TxnError::InvalidProducerIdMapping => INVALID_PRODUCER_ID_MAPPING,
        TxnError::ProducerFenced => fenced_code,
        TxnError::InvalidProducerEpoch => INVALID_PRODUCER_EPOCH,
        TxnError::InvalidTxnState => INVALID_TXN_STATE,
        TxnError::InvalidTransactionTimeout => INVALID_TRANSACTION_TIMEOUT,
        TxnError::TransactionalIdNotFound => TRANSACTIONAL_ID_NOT_FOUND,
        TxnError::InvalidRequest => INVALID_REQUEST,
        TxnError::NotEnoughReplicas => NOT_ENOUGH_REPLICAS,
        TxnError::Unknown => UNKNOWN_SERVER_ERROR,
    }
}

/// PRODUCER_FENCED from `first_version` on (KIP-588), INVALID_PRODUCER_EPOCH before.
pub(crate) fn fenced_code(version: i16, first_version: i16) -> i16 {
    if version >= first_version {
        PRODUCER_FENCED
    } else {
        INVALID_PRODUCER_EPOCH
    }
}

/// First AddPartitionsToTxn / AddOffsetsToTxn / EndTxn version that hears PRODUCER_FENCED.
const FENCED_VERSION_MIN: i16 = 2;
/// The first ListTransactions version with a transactional-id pattern (KIP-1152).
const PATTERN_VERSION_MIN: i16 = 2;
/// The most bytes a ListTransactions pattern may compile to (the `regex` crate's own default).
const PATTERN_COMPILED_BYTES_MAX: usize = 10 * 1024 * 1024;

pub async fn add_partitions_to_txn(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    let id = request.v3_and_below_transactional_id.0.to_string();
    let topics = request.v3_and_below_topics;
    let answer = |codes: &dyn Fn(&str, i32) -> i16| -> AddPartitionsToTxnResponse {
        let results = topics
            .iter()
            .map(|t| {
                AddPartitionsToTxnTopicResult::default()
                    .with_name(t.name.clone())
                    .with_results_by_partition(
                        t.partitions
                            .iter()
                            .map(|p| {
                                AddPartitionsToTxnPartitionResult::default()
                                    .with_partition_index(*p)
                                    .with_partition_error_code(codes(&t.name.0, *p))
                            })
                            .collect(),
                    )
            })
            .collect();
        AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results)
    };
    if !authz.transactional_id(AclOperation::Write, &id) {
        return answer(&|_, _| TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    }
    let image = ctx.cluster.image();
    let mut refused: BTreeMap<(String, i32), i16> = BTreeMap::new();
    let mut wanted = Vec::new();
    for t in &topics {
        let name = t.name.0.to_string();
        // Kafka leaves internal topics out of transactions (as if not authorized).
        let allowed = authz.topic(AclOperation::Write, &name)
            && !super::metadata::INTERNAL_TOPICS.contains(&name.as_str());
        let meta = image.topic(&name);
        for p in &t.partitions {
            let code = if !allowed {
                TOPIC_AUTHORIZATION_FAILED
            } else if meta.is_none_or(|m| m.partition(*p).is_none()) {
                UNKNOWN_TOPIC_OR_PARTITION
            } else {
                wanted.push((name.clone(), *p));
                continue;
            };
            refused.insert((name.clone(), *p), code);
        }
    }
    if !refused.is_empty() {
        return answer(&|t, p| {
            refused
                .get(&(t.to_string(), p))
                .copied()
                .unwrap_or(OPERATION_NOT_ATTEMPTED)
        });
    }
    let code = match ctx
        .transactions
        .add_partitions(
            &id,
            request.v3_and_below_producer_id.0,
            request.v3_and_below_producer_epoch,
            &wanted,
        )
        .await
    {
        Ok(()) => NONE,
        Err(e) => error_code(e, fenced_code(version, FENCED_VERSION_MIN)),
    };
    answer(&|_, _| code)
}

pub async fn add_offsets_to_txn(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: AddOffsetsToTxnRequest,
    version: i16,
) -> AddOffsetsToTxnResponse {
    let id = request.transactional_id.0.to_string();
    let response = AddOffsetsToTxnResponse::default();
    if !authz.transactional_id(AclOperation::Write, &id) {
        return response.with_error_code(TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    }
    if !authz.group(AclOperation::Read, &request.group_id.0) {
        return response.with_error_code(GROUP_AUTHORIZATION_FAILED);
    }
    let partition = partition_for(&request.group_id.0, ctx.groups.partition_count());
    match ctx
        .transactions
        .add_partitions(
            &id,
            request.producer_id.0,
            request.producer_epoch,
            &[(OFFSETS_TOPIC.to_string(), partition)],
        )
        .await
    {
        Ok(()) => response,
        Err(e) => response.with_error_code(error_code(e, fenced_code(version, FENCED_VERSION_MIN))),
    }
}

pub async fn end_txn(
    ctx: Arc<BrokerContext>,
    authz: Authz,
    request: EndTxnRequest,
    version: i16,
) -> EndTxnResponse {
    let id = request.transactional_id.0.to_string();
    let response = EndTxnResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if !authz.transactional_id(AclOperation::Write, &id) {
        return response.with_error_code(TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    }
    match ctx
        .transactions
        .end_txn(
            &id,
            request.producer_id.0,
            request.producer_epoch,
            request.committed,
        )
        .await
    {
        Ok(()) => response,
        Err(e) => response.with_error_code(error_code(e, fenced_code(version, FENCED_VERSION_MIN))),
    }
}

pub fn describe_transactions(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let states = request
        .transactional_ids
        .into_iter()
        .map(|id| {
            let name = id.0.to_string();
            let out = TransactionState::default()
                .with_transactional_id(id)
                .with_transaction_state(str_bytes(""))
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
                .with_transaction_start_time_ms(-1);
            if name.is_empty() {
                return out.with_error_code(INVALID_REQUEST);
            }
            if !authz.transactional_id(AclOperation::Describe, &name) {
                return out.with_error_code(TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
            }
            match ctx.transactions.describe(&name) {
                Ok(d) => out
                    .with_transaction_state(str_bytes(d.status.name()))
                    .with_transaction_timeout_ms(d.timeout_ms)
                    .with_transaction_start_time_ms(d.start_ms)
                    .with_producer_id(ProducerId(d.producer_id))
                    .with_producer_epoch(d.producer_epoch)
                    .with_topics(
                        d.partitions
                            .into_iter()
                            // Kafka lists only the topics the caller may describe.
                            .filter(|(t, _)| authz.topic(AclOperation::Describe, t))
                            .map(|(t, ps)| {
                                TopicData::default()
                                    .with_topic(topic_name(&t))
                                    .with_partitions(ps.into_iter().collect())
                            })
                            .collect(),
                    ),
                Err(e) => out.with_error_code(error_code(e, PRODUCER_FENCED)),
            }
        })
        .collect();
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

pub fn list_transactions(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: ListTransactionsRequest,
    version: i16,
) -> ListTransactionsResponse {
    let mut unknown = Vec::new();
    let mut states = BTreeSet::new();
    for name in &request.state_filters {
        match TxnStatus::from_name(name) {
            Some(s) => {
                states.insert(s);
            }
            None => unknown.push(name.clone()),
        }
    }
    let response = ListTransactionsResponse::default().with_unknown_state_filters(unknown.clone());
    if !unknown.is_empty() && states.is_empty() {
        // Only unknown states: nothing can match.
        return response;
    }
    // v2: a pattern the whole id must match; null or empty lists every id. One that does not
    // compile is INVALID_REGULAR_EXPRESSION, as Kafka answers a bad Java pattern.
    let pattern = match request
        .transactional_id_pattern
        .as_ref()
        .filter(|p| version >= PATTERN_VERSION_MIN && !p.is_empty())
    {
        None => None,
        Some(source) => match whole_match_regex(source, PATTERN_COMPILED_BYTES_MAX) {
            Ok(pattern) => Some(pattern),
            Err(_) => return response.with_error_code(INVALID_REGULAR_EXPRESSION),
        },
    };
    let producer_ids: BTreeSet<i64> = request.producer_id_filters.iter().map(|p| p.0).collect();
    let min_duration = if version >= 1 {
        request.duration_filter
    } else {
        -1
    };
    let listed = ctx
        .transactions
        .list(&states, &producer_ids, min_duration)
        .into_iter()
        .filter(|(id, _, _)| pattern.as_ref().is_none_or(|p| p.is_match(id)))
        .filter(|(id, _, _)| authz.transactional_id(AclOperation::Describe, id))
        .map(|(id, pid, status)| {
            ListedTransaction::default()
                .with_transactional_id(TransactionalId(str_bytes(&id)))
                .with_producer_id(ProducerId(pid))
                .with_transaction_state(str_bytes(status.name()))
        })
        .collect();
    response.with_transaction_states(listed)
}
