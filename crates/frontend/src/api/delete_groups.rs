//! DeleteGroups (key 42): removes Empty groups and their offsets (tombstones in
//! `__consumer_offsets`), answering once the tombstones are durable. A group with members gets
//! NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND.

use std::future::Future;
use std::sync::Arc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use crate::authz::Authz;
use crate::error_codes::GROUP_AUTHORIZATION_FAILED;
use crate::error_codes::{self, NONE};
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;
use millrace_cluster::acl::AclOperation;

api_handler! {
    /// DeleteGroups: its key, versions, handler and error codes, for [`crate::registry`].
    DeleteGroups, versions 0..=2, DeleteGroupsRequest,
    |call, request| Reply::later(handle(call.ctx, &call.authz, request, call.version)),
}

response_fields!(DeleteGroupsResponse: errors[results[error_code]], throttle_time_ms);

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: DeleteGroupsRequest,
    _version: i16,
) -> impl Future<Output = DeleteGroupsResponse> + Send + 'static {
    // Deleting needs Delete on each group; the others are answered without being touched.
    let (ids, denied): (Vec<_>, Vec<_>) = request
        .groups_names
        .into_iter()
        .partition(|g| authz.group(AclOperation::Delete, &g.0));
    let reply = ctx
        .groups
        .delete_groups(ids.iter().map(|g| g.0.to_string()).collect());
    async move {
        let results = reply.await;
        let denied = denied
            .into_iter()
            .map(|id| (id, Err(GROUP_AUTHORIZATION_FAILED)));
        let results = ids
            .into_iter()
            .zip(results)
            .map(|(id, r)| {
                // A deleted share group's share partitions (`DeletedGroup`) are the
                // share-partition state's to drop; nothing here keeps any.
                (
                    id,
                    r.map(|_| ())
                        .map_err(|e| error_codes::from_group(&e, "DeleteGroups").code),
                )
            })
            .chain(denied)
            .map(|(id, r)| {
                let code = match r {
                    Ok(()) => NONE,
                    Err(code) => code,
                };
                DeletableGroupResult::default()
                    .with_group_id(id)
                    .with_error_code(code)
            })
            .collect();
        DeleteGroupsResponse::default().with_results(results)
    }
}
