//! DeleteGroups (key 42): removes Empty groups and their offsets (tombstones in
//! `__consumer_offsets`), answering once the tombstones are durable. A group with members gets
//! NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND.
//!
//! A share group's share state goes first, as in Kafka 4.4 (`GroupCoordinatorService.deleteGroups`
//! → `deleteShareGroups`): DeleteShareGroupState of each of its initialized partitions through
//! the persister (the share partitions held here are dropped), and only then the group's
//! tombstones. A deletion that fails leaves the group in place and answers the persister's error
//! code (Kafka answers the failed partition's code, e.g. COORDINATOR_NOT_AVAILABLE; asking again
//! deletes what is left).

use std::future::Future;
use std::sync::Arc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use crate::authz::Authz;
use crate::error_codes::GROUP_AUTHORIZATION_FAILED;
use crate::error_codes::{self, NONE};
use crate::handler::{api_handler, response_fields, Reply};
use crate::share_partitions::ShareKey;
use crate::share_persister::Persister;
use crate::BrokerContext;
use millrace_cluster::acl::AclOperation;
use millrace_groups::ShareGroupDeletion;

api_handler! {
    /// DeleteGroups: its key, versions, handler and error codes, for [`crate::registry`].
    DeleteGroups, versions 0..=3, DeleteGroupsRequest,
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
    let ctx = Arc::clone(ctx);
    async move {
        let names: Vec<String> = ids.iter().map(|g| g.0.to_string()).collect();
        let failed = delete_share_state(&ctx, &names).await;
        let mut kept = Vec::with_capacity(ids.len());
        let mut share_failed = Vec::new();
        for (id, failure) in ids.into_iter().zip(failed) {
            match failure {
                None => kept.push(id),
                Some(code) => share_failed.push((id, Err(code))),
            }
        }
        let results = ctx
            .groups
            .delete_groups(kept.iter().map(|g| g.0.to_string()).collect())
            .await;
        let denied = denied
            .into_iter()
            .map(|id| (id, Err(GROUP_AUTHORIZATION_FAILED)));
        let results = kept
            .into_iter()
            .zip(results)
            .map(|(id, r)| {
                (
                    id,
                    r.map(|_| ())
                        .map_err(|e| error_codes::from_group(&e, "DeleteGroups").code),
                )
            })
            .chain(share_failed)
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

/// Deletes the share state of each Empty share group among `group_ids` (the other groups are
/// left to DeleteGroups as they are); answers, per group, the error code of a deletion that
/// failed.
async fn delete_share_state(ctx: &Arc<BrokerContext>, group_ids: &[String]) -> Vec<Option<i16>> {
    let plans = ctx.groups.share_groups_to_delete(group_ids);
    let persister = ctx.shares.persister();
    let deadline = Persister::retry_deadline();
    let mut failed = Vec::with_capacity(group_ids.len());
    for (group_id, plan) in group_ids.iter().zip(plans) {
        let Ok(ShareGroupDeletion::Delete(partitions)) = plan else {
            failed.push(None);
            continue;
        };
        let mut code = None;
        'topics: for (topic_id, (_, indexes)) in partitions {
            for partition in indexes {
                let key = ShareKey {
                    group_id: Arc::from(group_id.as_str()),
                    topic_id,
                    partition,
                };
                if let Some(persister) = persister {
                    let deleted = persister
                        .retrying(deadline, || persister.delete(group_id, topic_id, partition))
                        .await;
                    if let Err(e) = deleted {
                        tracing::warn!(group = %group_id, partition, error = %e, "deleting a share group's state failed");
                        code = Some(e.code);
                        break 'topics;
                    }
                }
                ctx.shares.forget(&key);
            }
        }
        failed.push(code);
    }
    failed
}
