//! WriteTxnMarkers (key 27, v1): a transaction coordinator on another broker asks this broker,
//! as the leader of data partitions, to write a transaction's COMMIT or ABORT marker to each of
//! them. Kafka's handling: ClusterAction on the cluster (else every partition
//! CLUSTER_AUTHORIZATION_FAILED); each marker is an acks=all append answered once the in-sync
//! replicas hold it (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, … for the coordinator to retry;
//! INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED when a newer producer epoch or
//! coordinator already wrote there); a committed marker on `__consumer_offsets` ends the producer's
//! pending transactional offsets of that partition. The whole answer is due within
//! [`MARKER_COMMIT_TIMEOUT`] of the request (one deadline, not one per partition), and the sending
//! coordinator waits longer than that, so a request it gave up on has already been answered.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use kafka_protocol::protocol::StrBytes;
use millrace_cluster::acl::AclOperation;
use millrace_groups::OFFSETS_TOPIC;
use millrace_store::{Marker, TopicPartition};

use crate::authz::Authz;
use crate::error_codes::{self, CLUSTER_AUTHORIZATION_FAILED, NONE};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// WriteTxnMarkers: its key, versions, handler and error codes, for [`crate::registry`].
    WriteTxnMarkers, versions 1..=1, WriteTxnMarkersRequest,
    |call, request| Reply::later(handle(call.ctx, &call.authz, request)),
}

// Inter-broker only, and Kafka exempts it from quotas.
response_fields!(
    WriteTxnMarkersResponse:
    errors[markers[topics[partitions[error_code]]]],
    no throttle_time_ms
);

/// How long the markers of one request may take to reach the in-sync replicas (Kafka waits
/// `request.timeout.ms`, 30 s by default). A coordinator sending WriteTxnMarkers must wait longer
/// for the answer (`txn_io` in the broker does), or a request it abandoned could still append.
pub const MARKER_COMMIT_TIMEOUT: Duration = Duration::from_secs(30);

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: WriteTxnMarkersRequest,
) -> impl Future<Output = WriteTxnMarkersResponse> + Send + 'static {
    let allowed = authz.cluster(AclOperation::ClusterAction);
    // Every partition's append is started here, in request order; the waits follow.
    let mut pending = Vec::new();
    for m in request.markers {
        let marker = Marker {
            commit: m.transaction_result,
            coordinator_epoch: m.coordinator_epoch,
        };
        let producer_id = m.producer_id.0;
        let mut topics = Vec::with_capacity(m.topics.len());
        for t in m.topics {
            let name = t.name.0.to_string();
            let mut partitions = Vec::with_capacity(t.partition_indexes.len());
            for p in t.partition_indexes {
                let tp = TopicPartition::new(name.as_str(), p);
                let appended = if allowed {
                    ctx.replicas
                        .append_marker(&tp, producer_id, m.producer_epoch, marker)
                        .map(|(_, wait)| wait)
                        .map_err(|e| error_codes::from_replica(&e, "transaction marker").code)
                } else {
                    Err(CLUSTER_AUTHORIZATION_FAILED)
                };
                partitions.push((p, appended));
            }
            topics.push((name, partitions));
        }
        pending.push((producer_id, marker.commit, topics));
    }
    let groups = Arc::clone(&ctx.groups);
    let deadline = Instant::now() + MARKER_COMMIT_TIMEOUT;
    async move {
        let mut markers = Vec::with_capacity(pending.len());
        for (producer_id, commit, topics) in pending {
            let mut topic_results = Vec::with_capacity(topics.len());
            for (name, partitions) in topics {
                let mut results = Vec::with_capacity(partitions.len());
                for (p, appended) in partitions {
                    let code = match appended {
                        Ok(Some(wait)) => match wait
                            .wait(deadline.saturating_duration_since(Instant::now()))
                            .await
                        {
                            Ok(()) => NONE,
                            Err(e) => error_codes::from_ack(e).code,
                        },
                        Ok(None) => NONE,
                        Err(code) => code,
                    };
                    if code == NONE && name == OFFSETS_TOPIC {
                        groups.complete_txn(p, producer_id, commit);
                    }
                    results.push(
                        WritableTxnMarkerPartitionResult::default()
                            .with_partition_index(p)
                            .with_error_code(code),
                    );
                }
                topic_results.push(
                    WritableTxnMarkerTopicResult::default()
                        .with_name(TopicName(StrBytes::from_string(name)))
                        .with_partitions(results),
                );
            }
            markers.push(
                WritableTxnMarkerResult::default()
                    .with_producer_id(producer_id.into())
                    .with_topics(topic_results),
            );
        }
        WriteTxnMarkersResponse::default().with_markers(markers)
    }
}
