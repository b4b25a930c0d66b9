//! Share-group (KIP-932) requests the share tests send: ShareFetch and ShareAcknowledge of
//! partition 0 of one topic, and what a ShareFetch acquired.

use kafka_protocol::messages::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as AckBatch,
};
use kafka_protocol::messages::share_fetch_request::{
    AcknowledgementBatch as FetchAckBatch, FetchPartition, FetchTopic,
};
use kafka_protocol::messages::{
    GroupId, ShareAcknowledgeRequest, ShareFetchRequest, ShareFetchResponse,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// A ShareFetch of partition 0 of `topic_id` (1 MiB, 500 records) carrying `acks`
/// ((first, last, type) each).
pub fn share_fetch_request(
    group: &str,
    member: &str,
    epoch: i32,
    topic_id: Uuid,
    acks: &[(i64, i64, i8)],
    max_wait_ms: i32,
) -> ShareFetchRequest {
    ShareFetchRequest::default()
        .with_group_id(Some(GroupId(s(group))))
        .with_member_id(Some(s(member)))
        .with_share_session_epoch(epoch)
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_max_records(500)
        .with_batch_size(500)
        .with_topics(vec![FetchTopic::default()
            .with_topic_id(topic_id)
            .with_partitions(vec![FetchPartition::default()
                .with_partition_index(0)
                .with_acknowledgement_batches(
                    acks.iter()
                        .map(|(first, last, ty)| {
                            FetchAckBatch::default()
                                .with_first_offset(*first)
                                .with_last_offset(*last)
                                .with_acknowledge_types(vec![*ty])
                        })
                        .collect(),
                )])])
}

/// A ShareAcknowledge of partition 0 of `topic_id` with `acks` ((first, last, type) each).
pub fn share_ack_request(
    group: &str,
    member: &str,
    epoch: i32,
    topic_id: Uuid,
    acks: &[(i64, i64, i8)],
) -> ShareAcknowledgeRequest {
    ShareAcknowledgeRequest::default()
        .with_group_id(Some(GroupId(s(group))))
        .with_member_id(Some(s(member)))
        .with_share_session_epoch(epoch)
        .with_topics(vec![AcknowledgeTopic::default()
            .with_topic_id(topic_id)
            .with_partitions(vec![AcknowledgePartition::default()
                .with_partition_index(0)
                .with_acknowledgement_batches(
                    acks.iter()
                        .map(|(first, last, ty)| {
                            AckBatch::default()
                                .with_first_offset(*first)
                                .with_last_offset(*last)
                                .with_acknowledge_types(vec![*ty])
                        })
                        .collect(),
                )])])
}

/// (first, last, delivery count) of each range a ShareFetch acquired in its first partition.
pub fn acquired_ranges(response: &ShareFetchResponse) -> Vec<(i64, i64, i16)> {
    response
        .responses
        .first()
        .and_then(|t| t.partitions.first())
        .map(|p| {
            p.acquired_records
                .iter()
                .map(|r| (r.first_offset, r.last_offset, r.delivery_count))
                .collect()
        })
        .unwrap_or_default()
}
