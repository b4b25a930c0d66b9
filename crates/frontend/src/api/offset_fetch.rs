//! OffsetFetch (key 9): committed offsets of a group (v1-7) or of several groups (v8+). A
//! partition without a commit answers offset -1, empty metadata, NONE. Topics null (v2+) = every
//! committed offset of the group. `require_stable` (v7+) needs nothing: without transactions no
//! offset is ever pending. v9 requests from members of a KIP-848 consumer group carry the member
//! id and epoch, which must be current (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH).

use std::sync::Arc;

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{GroupId, OffsetFetchRequest, OffsetFetchResponse};
use millrace_groups::{CommittedOffset, FetchTopics, GroupError};

use super::{str_bytes, topic_name};
use crate::error_codes::{self, NONE};
use crate::BrokerContext;

type Fetched = Result<Vec<(String, Vec<(i32, Option<CommittedOffset>)>)>, GroupError>;

fn fetch(ctx: &BrokerContext, group: &str, topics: FetchTopics) -> Fetched {
    ctx.groups.fetch_offsets(group, topics)
}

fn code(e: &GroupError) -> i16 {
    error_codes::from_group(e, "OffsetFetch").code
}

/// (offset, leader epoch, metadata) as the response carries them.
fn fields(o: &Option<CommittedOffset>) -> (i64, i32, String) {
    match o {
        Some(o) => (o.offset, o.leader_epoch, o.metadata.clone()),
        None => (-1, -1, String::new()),
    }
}

pub fn handle(
    ctx: &Arc<BrokerContext>,
    request: OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    if version >= 8 {
        let groups = request
            .groups
            .into_iter()
            .map(|g| {
                let topics: FetchTopics = g.topics.map(|ts| {
                    ts.into_iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes))
                        .collect()
                });
                // v9: a consumer-group member names itself and its epoch (KIP-848).
                let member = g.member_id.as_ref().filter(|_| version >= 9);
                let fetched = ctx.groups.fetch_offsets_as(
                    &g.group_id.0,
                    member.map(|m| m.as_str()),
                    if version >= 9 { g.member_epoch } else { -1 },
                    topics,
                );
                group_v8(fetched, g.group_id)
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let topics: FetchTopics = match request.topics {
        Some(ts) => Some(
            ts.into_iter()
                .map(|t| (t.name.0.to_string(), t.partition_indexes))
                .collect(),
        ),
        None if version >= 2 => None,
        None => Some(Vec::new()),
    };
    match fetch(ctx, &request.group_id.0, topics.clone()) {
        Ok(found) => {
            let topics = found
                .into_iter()
                .map(|(topic, partitions)| {
                    let partitions = partitions
                        .into_iter()
                        .map(|(index, o)| {
                            let (offset, epoch, metadata) = fields(&o);
                            let mut p = OffsetFetchResponsePartition::default()
                                .with_partition_index(index)
                                .with_committed_offset(offset)
                                .with_metadata(Some(str_bytes(&metadata)));
                            if version >= 5 {
                                p.committed_leader_epoch = epoch;
                            }
                            p
                        })
                        .collect();
                    OffsetFetchResponseTopic::default()
                        .with_name(topic_name(&topic))
                        .with_partitions(partitions)
                })
                .collect();
            OffsetFetchResponse::default().with_topics(topics)
        }
        Err(e) => {
            let code = code(&e);
            if version >= 2 {
                return OffsetFetchResponse::default().with_error_code(code);
            }
            // v1 has no top-level error: put it on every requested partition.
            let topics = topics
                .unwrap_or_default()
                .into_iter()
                .map(|(topic, partitions)| {
                    OffsetFetchResponseTopic::default()
                        .with_name(topic_name(&topic))
                        .with_partitions(
                            partitions
                                .into_iter()
                                .map(|index| {
                                    OffsetFetchResponsePartition::default()
                                        .with_partition_index(index)
                                        .with_committed_offset(-1)
                                        .with_metadata(Some(str_bytes("")))
                                        .with_error_code(code)
                                })
                                .collect(),
                        )
                })
                .collect();
            OffsetFetchResponse::default().with_topics(topics)
        }
    }
}

fn group_v8(fetched: Fetched, group_id: GroupId) -> OffsetFetchResponseGroup {
    match fetched {
        Err(e) => OffsetFetchResponseGroup::default()
            .with_group_id(group_id)
            .with_error_code(code(&e)),
        Ok(found) => {
            let topics = found
                .into_iter()
                .map(|(topic, partitions)| {
                    let partitions = partitions
                        .into_iter()
                        .map(|(index, o)| {
                            let (offset, epoch, metadata) = fields(&o);
                            OffsetFetchResponsePartitions::default()
                                .with_partition_index(index)
                                .with_committed_offset(offset)
                                .with_committed_leader_epoch(epoch)
                                .with_metadata(Some(str_bytes(&metadata)))
                                .with_error_code(NONE)
                        })
                        .collect();
                    OffsetFetchResponseTopics::default()
                        .with_name(topic_name(&topic))
                        .with_partitions(partitions)
                })
                .collect();
            OffsetFetchResponseGroup::default()
                .with_group_id(group_id)
                .with_topics(topics)
        }
    }
}
