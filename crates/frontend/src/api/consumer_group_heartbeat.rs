//! ConsumerGroupHeartbeat (key 68, KIP-848): the one request of the consumer group protocol —
//! join (epoch 0), stay and report owned partitions, leave (epoch -1, or -2 for a static member).
//! The coordinator steps the group against the current metadata image ([`ImageTopics`]) and
//! answers with the member's epoch and, when it changed, its assignment by topic id.
//!
//! v0 lets the coordinator pick the member id on join; v1 (Kafka 4.0+) has the client pick it and
//! adds `SubscribedTopicRegex` (server-side regular expressions).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse};
use millrace_cluster::image::MetadataImage;
use millrace_groups::{ConsumerHeartbeatRequest, TopicInfo, TopicsView};

use super::str_bytes;
use crate::authz::Authz;
use crate::error_codes::{GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED};
use millrace_cluster::acl::AclOperation;

use crate::error_codes;
use crate::handler::{api_handler, response_fields, Reply};
use crate::BrokerContext;

api_handler! {
    /// ConsumerGroupHeartbeat: its key, versions, handler and error codes, for [`crate::registry`].
    ConsumerGroupHeartbeat, versions 0..=1, ConsumerGroupHeartbeatRequest,
    |call, request| {
        let peer = call.session.peer;
        Reply::later(handle(call.ctx, &call.authz, request, call.version, call.client_id, peer))
    },
}

response_fields!(ConsumerGroupHeartbeatResponse: errors[error_code], throttle_time_ms);

/// Topics as the broker's metadata image has them, for the group coordinator.
pub struct ImageTopics(pub Arc<MetadataImage>);

impl TopicsView for ImageTopics {
    fn by_name(&self, name: &str) -> Option<TopicInfo> {
        self.0.topic(name).map(|t| TopicInfo {
            name: t.name.clone(),
            id: t.topic_id,
            partitions: t.partition_count(),
        })
    }

    fn version(&self) -> Option<u64> {
        Some(self.0.offset)
    }

    fn all(&self) -> Vec<TopicInfo> {
        // Internal topics included: Kafka's broker-side regexes match them too (franz-go's
        // Test848RegexBrokerResolves subscribes to `__consumer_offsets` by regex).
        self.0
            .topics
            .values()
            .map(|t| TopicInfo {
                name: t.name.clone(),
                id: t.topic_id,
                partitions: t.partition_count(),
            })
            .collect()
    }
}

/// The image's topics as one member sees them: a regular expression resolves only to topics its
/// principal may Describe (Kafka filters regex matches by the member's ACLs).
struct DescribableTopics<'a> {
    image: ImageTopics,
    authz: &'a Authz,
}

impl TopicsView for DescribableTopics<'_> {
    fn by_name(&self, name: &str) -> Option<TopicInfo> {
        self.image.by_name(name)
    }

    fn version(&self) -> Option<u64> {
        self.image.version()
    }

    fn all(&self) -> Vec<TopicInfo> {
        let mut all = self.image.all();
        if self.authz.enabled() {
            all.retain(|t| self.authz.topic(AclOperation::Describe, &t.name));
        }
        all
    }
}

pub fn handle(
    ctx: &Arc<BrokerContext>,
    authz: &Authz,
    request: ConsumerGroupHeartbeatRequest,
    version: i16,
    client_id: &str,
    peer: SocketAddr,
) -> impl Future<Output = ConsumerGroupHeartbeatResponse> + Send + 'static {
    // Read on the group, then Describe on every topic subscribed to by name (Kafka's order).
    let refusal = if !authz.group(AclOperation::Read, &request.group_id.0) {
        Some((GROUP_AUTHORIZATION_FAILED, None))
    } else {
        let denied: Vec<&str> = request
            .subscribed_topic_names
            .iter()
            .flatten()
            .map(|n| n.0.as_str())
            .filter(|n| !authz.topic(AclOperation::Describe, n))
            .collect();
        (!denied.is_empty()).then(|| {
            (
                TOPIC_AUTHORIZATION_FAILED,
                Some(format!(
                    "The following topics are not authorized: {}",
                    denied.join(", ")
                )),
            )
        })
    };
    if let Some((code, message)) = refusal {
        let response = ConsumerGroupHeartbeatResponse::default()
            .with_error_code(code)
            .with_error_message(message.as_deref().map(str_bytes));
        return futures::future::Either::Left(std::future::ready(response));
    }
    let owned = request.topic_partitions.map(|tps| {
        let mut out = millrace_groups::Assignment::new();
        for tp in tps {
            out.entry(tp.topic_id)
                .or_default()
                .extend(tp.partitions.iter().copied());
        }
        out
    });
    let req = ConsumerHeartbeatRequest {
        group_id: request.group_id.0.to_string(),
        member_id: request.member_id.to_string(),
        member_epoch: request.member_epoch,
        instance_id: request.instance_id.map(|s| s.to_string()),
        rack_id: request.rack_id.map(|s| s.to_string()),
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        subscribed_topic_names: request
            .subscribed_topic_names
            .map(|names| names.into_iter().map(|n| n.0.to_string()).collect()),
        subscribed_topic_regex: if version >= 1 {
            request.subscribed_topic_regex.map(|s| s.to_string())
        } else {
            None
        },
        server_assignor: request.server_assignor.map(|s| s.to_string()),
        owned,
        client_id: client_id.to_string(),
        client_host: format!("/{}", peer.ip()),
        timeouts: crate::group_settings::consumer_timeouts(ctx, &request.group_id.0),
    };
    let reply = if version >= 1 && req.member_epoch == 0 && req.member_id.is_empty() {
        None
    } else {
        let topics = DescribableTopics {
            image: ImageTopics(ctx.cluster.image()),
            authz,
        };
        Some(ctx.groups.consumer_heartbeat(&req, &topics))
    };
    futures::future::Either::Right(async move {
        let Some(reply) = reply else {
            return error(&millrace_groups::GroupError::InvalidRequest(
                "MemberId can't be empty.".to_string(),
            ));
        };
        respond(reply.await)
    })
}

fn respond(
    result: Result<millrace_groups::ConsumerHeartbeatResponse, millrace_groups::GroupError>,
) -> ConsumerGroupHeartbeatResponse {
    match result {
        Err(e) => error(&e),
        Ok(r) => ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(str_bytes(&r.member_id)))
            .with_member_epoch(r.member_epoch)
            .with_heartbeat_interval_ms(r.heartbeat_interval_ms)
            .with_assignment(r.assignment.map(|a| {
                Assignment::default().with_topic_partitions(
                    a.into_iter()
                        .map(|(topic_id, partitions)| {
                            TopicPartitions::default()
                                .with_topic_id(topic_id)
                                .with_partitions(partitions.into_iter().collect())
                        })
                        .collect(),
                )
            })),
    }
}

fn error(e: &millrace_groups::GroupError) -> ConsumerGroupHeartbeatResponse {
    let err = error_codes::from_group(e, "ConsumerGroupHeartbeat");
    ConsumerGroupHeartbeatResponse::default()
        .with_error_code(err.code)
        .with_error_message(Some(str_bytes(&e.to_string())))
}
