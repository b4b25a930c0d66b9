//! CreatePartitions (key 37): grow a topic's partition count, optionally with manual assignments.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};

use super::str_bytes;
use crate::error_codes;
use crate::BrokerContext;

pub fn handle(
    ctx: &Arc<BrokerContext>,
    request: CreatePartitionsRequest,
    _version: i16,
) -> CreatePartitionsResponse {
    let cluster = &ctx.cluster;
    let results = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.name.0.to_string();
            let current = cluster.metadata.topic(&name).map_or(0, |t| t.partitions);
            let assignments: Option<BTreeMap<i32, Vec<i32>>> =
                topic.assignments.as_ref().map(|list| {
                    list.iter()
                        .enumerate()
                        .map(|(i, a)| {
                            (
                                current + i as i32,
                                a.broker_ids.iter().map(|b| b.0).collect(),
                            )
                        })
                        .collect()
                });
            let mut result = CreatePartitionsTopicResult::default().with_name(topic.name);
            if let Err(e) = cluster.create_partitions(
                &name,
                topic.count,
                assignments.as_ref(),
                request.validate_only,
            ) {
                let err = error_codes::from_admin(&e, &name);
                result.error_code = err.code;
                result.error_message = err.message.as_deref().map(str_bytes);
            }
            result
        })
        .collect();
    CreatePartitionsResponse::default().with_results(results)
}
