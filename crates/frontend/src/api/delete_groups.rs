//! DeleteGroups (key 42): removes Empty groups and their offsets (tombstones in
//! `__consumer_offsets`), answering once the tombstones are durable. A group with members gets
//! NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND.

use std::future::Future;
use std::sync::Arc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use crate::error_codes::{self, NONE};
use crate::BrokerContext;

pub fn handle(
    ctx: &Arc<BrokerContext>,
    request: DeleteGroupsRequest,
    _version: i16,
) -> impl Future<Output = DeleteGroupsResponse> + Send + 'static {
    let ids = request.groups_names;
    let reply = ctx
        .groups
        .delete_groups(ids.iter().map(|g| g.0.to_string()).collect());
    async move {
        let results = reply.await;
        let results = ids
            .into_iter()
            .zip(results)
            .map(|(id, r)| {
                let code = match r {
                    Ok(()) => NONE,
                    Err(e) => error_codes::from_group(&e, "DeleteGroups").code,
                };
                DeletableGroupResult::default()
                    .with_group_id(id)
                    .with_error_code(code)
            })
            .collect();
        DeleteGroupsResponse::default().with_results(results)
    }
}
