//! OffsetFetch (key 9): committed offsets of a group (v1-7) or of several groups (v8+). A
//! partition without a commit answers offset -1, empty metadata, NONE. Topics null (v2+) = every
//! committed offset of the group. With `require_stable` (v7+) a partition whose group has a
//! transactional offset pending (TxnOffsetCommit before its marker) answers UNSTABLE_OFFSET_COMMIT
//! and offset -1, as Kafka's (the coordinator checks and reads in one look at the group's shard);
//! without it the committed offset is answered. v9 requests from members of a KIP-848 consumer
//! group carry the member id and epoch, which must be current (UNKNOWN_MEMBER_ID,
//! STALE_MEMBER_EPOCH). v10 names topics by id alone (KIP-848), as Kafka 4.4 answers it: an id the
//! image does not know is UNKNOWN_TOPIC_ID on each partition asked for, and "every topic" leaves
//! out offsets of topics the image no longer has (they have no id to name them by).

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{GroupId, OffsetFetchRequest, OffsetFetchResponse};
use millrace_groups::{FetchTopics, FetchedOffset, GroupError};
use uuid::Uuid;

use super::{str_bytes, topic_name};
use crate::authz::Authz;
use crate::error_codes::{self, GROUP_AUTHORIZATION_FAILED, NONE, TOPIC_AUTHORIZATION_FAILED};
use crate::error_codes::{UNKNOWN_TOPIC_ID, UNSTABLE_OFFSET_COMMIT};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;
use millrace_cluster::acl::AclOperation;

api_handler! {
    /// OffsetFetch: its key, versions, handler and error codes, for [`crate::registry`].
    OffsetFetch, versions 1..=10, OffsetFetchRequest,
    |call, request| Reply::Now(handle(call.ctx, &call.authz, request, call.version)),
}

// v0-v7: one group, top-level code (v2+) and `topics`; v8+: `groups`, each with its own
// code and topics. A response fills one shape and leaves the other empty/zero.
response_fields!(
    OffsetFetchResponse:
    errors[
        error_code,
        topics[partitions[error_code]],
        groups[error_code, topics[partitions[error_code]]],
    ],
    throttle_time_ms
);

/// The first version that names topics by id alone (KIP-848).
const TOPIC_ID_VERSION_MIN: i16 = 10;

/// Committed offsets per topic, and the topics named but not authorized (their partitions); or
/// the group's error code.
type Fetched = Result<(FoundTopics, Vec<(String, Vec<i32>)>), i16>;
type FoundTopics = Vec<(String, Vec<(i32, FetchedOffset)>)>;

/// Reads a group's offsets as the client may see them (Kafka's rules): a group it may not
/// Describe is GROUP_AUTHORIZATION_FAILED; topics it may not Describe are left out of "every
/// topic", and named ones answer TOPIC_AUTHORIZATION_FAILED without being read.
fn fetch(
    authz: &Authz,
    group: &str,
    topics: FetchTopics,
    read: impl FnOnce(FetchTopics) -> Result<FoundTopics, GroupError>,
) -> Fetched {
    if !authz.group(AclOperation::Describe, group) {
        return Err(GROUP_AUTHORIZATION_FAILED);
    }
    let described = |t: &str| authz.topic(AclOperation::Describe, t);
    match topics {
        None => read(None)
            .map(|found| {
                (
                    found.into_iter().filter(|(t, _)| described(t)).collect(),
                    Vec::new(),
                )
            })
            .map_err(|e| code(&e)),
        Some(named) => {
            let (allowed, denied): (Vec<_>, Vec<_>) =
                named.into_iter().partition(|(t, _)| described(t));
            read(Some(allowed))
                .map(|found| (found, denied))
                .map_err(|e| code(&e))
        }
    }
}

fn code(e: &GroupError) -> i16 {
    error_codes::from_group(e, "OffsetFetch").code
}

/// (offset, leader epoch, metadata, error code) as the response carries them.
fn fields(o: &FetchedOffset) -> (i64, i32, String, i16) {
    match o {
        FetchedOffset::Stable(Some(o)) => (o.offset, o.leader_epoch, o.metadata.clone(), NONE),
        FetchedOffset::Stable(None) => (-1, -1, String::new(), NONE),
        FetchedOffset::Unstable => (-1, -1, String::new(), UNSTABLE_OFFSET_COMMIT),
    }
}

/// A v1-v7 topic whose every partition gets `code` and no offset.
fn refused_topic(topic: &str, partitions: Vec<i32>, code: i16) -> OffsetFetchResponseTopic {
    let partitions = partitions
        .into_iter()
        .map(|index| {
            OffsetFetchResponsePartition::default()
                .with_partition_index(index)
                .with_committed_offset(-1)
                .with_metadata(Some(str_bytes("")))
                .with_error_code(code)
        })
        .collect();
    OffsetFetchResponseTopic::default()
        .with_name(topic_name(topic))
        .with_partitions(partitions)
}

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    if version >= 8 {
        let groups = request
            .groups
            .into_iter()
            .map(|g| {
                let by_id = version >= TOPIC_ID_VERSION_MIN;
                // v10: the ids asked for, by the name the image gives them; and those it lacks.
                let mut ids: HashMap<String, Uuid> = HashMap::new();
                let mut unknown_ids: Vec<(Uuid, Vec<i32>)> = Vec::new();
                let topics: FetchTopics = g.topics.map(|ts| {
                    ts.into_iter()
                        .filter_map(|t| {
                            if !by_id {
                                return Some((t.name.0.to_string(), t.partition_indexes));
                            }
                            match ctx.cluster.topic_by_id(t.topic_id) {
                                Some(topic) => {
                                    ids.insert(topic.name.clone(), t.topic_id);
                                    Some((topic.name.clone(), t.partition_indexes))
                                }
                                None => {
                                    unknown_ids.push((t.topic_id, t.partition_indexes));
                                    None
                                }
                            }
                        })
                        .collect()
                });
                // v9: a consumer-group member names itself and its epoch (KIP-848).
                let member = g.member_id.as_ref().filter(|_| version >= 9);
                let fetched = fetch(authz, &g.group_id.0, topics, |topics| {
                    ctx.groups.fetch_offsets_as(
                        &g.group_id.0,
                        member.map(|m| m.as_str()),
                        if version >= 9 { g.member_epoch } else { -1 },
                        request.require_stable,
                        topics,
                    )
                });
                let mut group = group_v8(fetched, g.group_id.clone());
                if by_id && group.error_code == NONE {
                    name_topics_by_id(ctx, &mut group, ids, unknown_ids);
                }
                group
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
    let stable = version >= 7 && request.require_stable;
    match fetch(authz, &request.group_id.0, topics.clone(), |topics| {
        ctx.groups
            .fetch_offsets_as(&request.group_id.0, None, -1, stable, topics)
    }) {
        Ok((found, denied)) => {
            let denied = denied.into_iter().map(|(topic, partitions)| {
                refused_topic(&topic, partitions, TOPIC_AUTHORIZATION_FAILED)
            });
            let topics = found
                .into_iter()
                .map(|(topic, partitions)| {
                    let partitions = partitions
                        .into_iter()
                        .map(|(index, o)| {
                            let (offset, epoch, metadata, code) = fields(&o);
                            let mut p = OffsetFetchResponsePartition::default()
                                .with_partition_index(index)
                                .with_committed_offset(offset)
                                .with_metadata(Some(str_bytes(&metadata)))
                                .with_error_code(code);
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
                .chain(denied)
                .collect();
            OffsetFetchResponse::default().with_topics(topics)
        }
        Err(code) => {
            if version >= 2 {
                return OffsetFetchResponse::default().with_error_code(code);
            }
            // v1 has no top-level error: put it on every requested partition.
            let topics = topics
                .unwrap_or_default()
                .into_iter()
                .map(|(topic, partitions)| refused_topic(&topic, partitions, code))
                .collect();
            OffsetFetchResponse::default().with_topics(topics)
        }
    }
}

/// v10: gives each topic of a group's answer its id (the one asked for, else the image's), leaves
/// out topics the image no longer has, and adds the ids it does not know, each partition
/// UNKNOWN_TOPIC_ID.
fn name_topics_by_id(
    ctx: &BrokerContext,
    group: &mut OffsetFetchResponseGroup,
    asked: HashMap<String, Uuid>,
    unknown: Vec<(Uuid, Vec<i32>)>,
) {
    group.topics.retain_mut(|topic| {
        let id = asked
            .get(topic.name.0.as_str())
            .copied()
            .or_else(|| ctx.cluster.topic(&topic.name.0).map(|t| t.topic_id));
        match id {
            Some(id) => {
                topic.topic_id = id;
                true
            }
            None => false,
        }
    });
    group
        .topics
        .extend(unknown.into_iter().map(|(id, partitions)| {
            OffsetFetchResponseTopics::default()
                .with_topic_id(id)
                .with_partitions(refused_partitions(partitions, UNKNOWN_TOPIC_ID))
        }));
}

/// v8+ partitions that each get `code` and no offset.
fn refused_partitions(partitions: Vec<i32>, code: i16) -> Vec<OffsetFetchResponsePartitions> {
    partitions
        .into_iter()
        .map(|index| {
            OffsetFetchResponsePartitions::default()
                .with_partition_index(index)
                .with_committed_offset(-1)
                .with_committed_leader_epoch(-1)
                .with_metadata(Some(str_bytes("")))
                .with_error_code(code)
        })
        .collect()
}

/// One group's answer (v8+).
fn group_v8(fetched: Fetched, group_id: GroupId) -> OffsetFetchResponseGroup {
    match fetched {
        Err(code) => OffsetFetchResponseGroup::default()
            .with_group_id(group_id)
            .with_error_code(code),
        Ok((found, denied)) => {
            let denied = denied.into_iter().map(|(topic, partitions)| {
                OffsetFetchResponseTopics::default()
                    .with_name(topic_name(&topic))
                    .with_partitions(refused_partitions(partitions, TOPIC_AUTHORIZATION_FAILED))
            });
            let topics = found
                .into_iter()
                .map(|(topic, partitions)| {
                    let partitions = partitions
                        .into_iter()
                        .map(|(index, o)| {
                            let (offset, epoch, metadata, code) = fields(&o);
                            OffsetFetchResponsePartitions::default()
                                .with_partition_index(index)
                                .with_committed_offset(offset)
                                .with_committed_leader_epoch(epoch)
                                .with_metadata(Some(str_bytes(&metadata)))
                                .with_error_code(code)
                        })
                        .collect();
                    OffsetFetchResponseTopics::default()
                        .with_name(topic_name(&topic))
                        .with_partitions(partitions)
                })
                .chain(denied)
                .collect();
            OffsetFetchResponseGroup::default()
                .with_group_id(group_id)
                .with_topics(topics)
        }
    }
}
