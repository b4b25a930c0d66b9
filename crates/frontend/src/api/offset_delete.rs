//! OffsetDelete (key 47): deletes committed offsets of a group. Allowed for Empty groups, and for
//! consumer groups on topics none of their members subscribe to (else
//! GROUP_SUBSCRIBED_TO_TOPIC for that partition).

use std::future::Future;
use std::sync::Arc;

use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};

use crate::authz::Authz;
use crate::error_codes::{self, NONE};
use crate::error_codes::{GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;
use millrace_cluster::acl::AclOperation;

api_handler! {
    /// OffsetDelete: its key, versions, handler and error codes, for [`crate::registry`].
    OffsetDelete, versions 0..=0, OffsetDeleteRequest,
    |call, request| Reply::later(handle(call.ctx, &call.authz, request, call.version)),
}

response_fields!(
    OffsetDeleteResponse:
    errors[error_code, topics[partitions[error_code]]],
    throttle_time_ms
);

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: OffsetDeleteRequest,
    _version: i16,
) -> impl Future<Output = OffsetDeleteResponse> + Send + 'static {
    // Delete on the group, then Read on each topic; a refused topic is answered, not deleted.
    let group_allowed = authz.group(AclOperation::Delete, &request.group_id.0);
    let topic_allowed = |name: &str| authz.topic(AclOperation::Read, name);
    let layout: Vec<(kafka_protocol::messages::TopicName, Vec<i32>)> = request
        .topics
        .into_iter()
        .map(|t| {
            (
                t.name,
                t.partitions
                    .into_iter()
                    .map(|p| p.partition_index)
                    .collect(),
            )
        })
        .collect();
    let allowed: Vec<bool> = layout
        .iter()
        .map(|(name, _)| topic_allowed(&name.0))
        .collect();
    let partitions = layout
        .iter()
        .zip(&allowed)
        .filter(|(_, allowed)| **allowed)
        .flat_map(|((name, ps), _)| ps.iter().map(|p| (name.0.to_string(), *p)))
        .collect();
    let reply = group_allowed.then(|| ctx.groups.delete_offsets(&request.group_id.0, partitions));
    async move {
        let code =
            |e: &millrace_groups::GroupError| error_codes::from_group(e, "OffsetDelete").code;
        let Some(reply) = reply else {
            return OffsetDeleteResponse::default().with_error_code(GROUP_AUTHORIZATION_FAILED);
        };
        match reply.await {
            Err(e) => OffsetDeleteResponse::default().with_error_code(code(&e)),
            Ok(results) => {
                let mut results = results.into_iter();
                let topics = layout
                    .into_iter()
                    .zip(allowed)
                    .map(|((name, ps), allowed)| {
                        let partitions = ps
                            .into_iter()
                            .map(|index| {
                                let c = if !allowed {
                                    TOPIC_AUTHORIZATION_FAILED
                                } else {
                                    match results.next() {
                                        Some(Err(e)) => code(&e),
                                        _ => NONE,
                                    }
                                };
                                OffsetDeleteResponsePartition::default()
                                    .with_partition_index(index)
                                    .with_error_code(c)
                            })
                            .collect();
                        OffsetDeleteResponseTopic::default()
                            .with_name(name)
                            .with_partitions(partitions)
                    })
                    .collect();
                OffsetDeleteResponse::default().with_topics(topics)
            }
        }
    }
}
