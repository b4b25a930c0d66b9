//! OffsetDelete (key 47): deletes committed offsets of a group. Allowed for Empty groups, and for
//! consumer groups on topics none of their members subscribe to (else
//! GROUP_SUBSCRIBED_TO_TOPIC for that partition).

use std::future::Future;
use std::sync::Arc;

use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};

use crate::error_codes::{self, NONE};
use crate::BrokerContext;

pub fn handle(
    ctx: &Arc<BrokerContext>,
    request: OffsetDeleteRequest,
    _version: i16,
) -> impl Future<Output = OffsetDeleteResponse> + Send + 'static {
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
    let partitions = layout
        .iter()
        .flat_map(|(name, ps)| ps.iter().map(|p| (name.0.to_string(), *p)))
        .collect();
    let reply = ctx.groups.delete_offsets(&request.group_id.0, partitions);
    async move {
        let code =
            |e: &millrace_groups::GroupError| error_codes::from_group(e, "OffsetDelete").code;
        match reply.await {
            Err(e) => OffsetDeleteResponse::default().with_error_code(code(&e)),
            Ok(results) => {
                let mut results = results.into_iter();
                let topics = layout
                    .into_iter()
                    .map(|(name, ps)| {
                        let partitions = ps
                            .into_iter()
                            .map(|index| {
                                let c = match results.next() {
                                    Some(Err(e)) => code(&e),
                                    _ => NONE,
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
