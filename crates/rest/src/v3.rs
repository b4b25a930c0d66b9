//! Confluent REST Proxy v3 (`/v3/clusters/…`), the admin half: clusters, brokers and their
//! configs (read only), topics (list, create, get, grow, delete) and their configs (list, get,
//! update, reset, batch alter), partitions, consumer groups with their consumers, assignments
//! and lags — as Confluent's published OpenAPI document (`api/v3/openapi.yaml` of
//! confluentinc/kafka-rest) defines paths, shapes and status codes. Millrace's own document for
//! exactly what is served is `docs/http-v3.openapi.yaml`; produce (`…/records`) is
//! [`crate::v3_records`].
//!
//! Data flow: an axum handler per path ([`clusters`], [`brokers`], [`broker_configs`],
//! [`topics`], [`topic_configs`], [`partitions`], [`consumer_groups`], [`lags`]) parses the
//! request once ([`request`]), makes the Kafka requests a Kafka admin client would make, as the
//! caller, through the [`crate::Gateway`], and answers Confluent's resource shapes ([`resource`]);
//! Kafka error codes become Confluent's error bodies in [`errors`].
//!
//! Invariants: every path first checks that `{cluster_id}` is this cluster's (404 if not);
//! nothing here reads broker state directly except the metadata image's routing facts (a
//! partition's leader, a group's coordinator), so ACLs hold exactly as on the Kafka listener.
//!
//! Not served (404): ACLs, cluster-wide broker configs (`/broker-configs`), broker config
//! changes, replicas, reassignments, partition offsets, `records:batch`; `docs/http.md` lists
//! them path by path.

mod broker_configs;
mod brokers;
mod clusters;
mod configs;
mod consumer_groups;
mod errors;
mod groups;
mod lags;
mod partitions;
mod request;
mod resource;
mod topic_configs;
mod topics;

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

use crate::RestApi;

/// The v3 routes.
pub fn routes() -> Router<Arc<RestApi>> {
    const CLUSTER: &str = "/v3/clusters/{cluster_id}";
    let at = |tail: &str| format!("{CLUSTER}{tail}");
    Router::new()
        .route("/v3/clusters", get(clusters::list))
        .route(CLUSTER, get(clusters::get))
        .route(&at("/brokers"), get(brokers::list))
        .route(&at("/brokers/{broker_id}"), get(brokers::get))
        .route(&at("/brokers/{broker_id}/configs"), get(broker_configs::list))
        .route(
            &at("/brokers/{broker_id}/configs/{name}"),
            get(broker_configs::get),
        )
        .route(&at("/topics"), get(topics::list).post(topics::create))
        .route(
            &at("/topics/{topic_name}"),
            get(topics::get)
                .patch(topics::update_partition_count)
                .delete(topics::delete),
        )
        .route(&at("/topics/{topic_name}/configs"), get(topic_configs::list))
        .route(
            &at("/topics/{topic_name}/configs:alter"),
            post(topic_configs::alter_batch),
        )
        .route(
            &at("/topics/{topic_name}/configs/{name}"),
            get(topic_configs::get)
                .put(topic_configs::update)
                .delete(topic_configs::reset),
        )
        .route(&at("/topics/{topic_name}/partitions"), get(partitions::list))
        .route(
            &at("/topics/{topic_name}/partitions/{partition_id}"),
            get(partitions::get),
        )
        .route(&at("/consumer-groups"), get(consumer_groups::list))
        .route(
            &at("/consumer-groups/{consumer_group_id}"),
            get(consumer_groups::get),
        )
        .route(
            &at("/consumer-groups/{consumer_group_id}/consumers"),
            get(consumer_groups::list_consumers),
        )
        .route(
            &at("/consumer-groups/{consumer_group_id}/consumers/{consumer_id}"),
            get(consumer_groups::get_consumer),
        )
        .route(
            &at("/consumer-groups/{consumer_group_id}/consumers/{consumer_id}/assignments"),
            get(consumer_groups::list_assignments),
        )
        .route(
            &at("/consumer-groups/{consumer_group_id}/consumers/{consumer_id}/assignments/{topic_name}/partitions/{partition_id}"),
            get(consumer_groups::get_assignment),
        )
        .route(
            &at("/consumer-groups/{consumer_group_id}/lag-summary"),
            get(lags::summary),
        )
        .route(
            &at("/consumer-groups/{consumer_group_id}/lags"),
            get(lags::list),
        )
        .route(
            &at("/consumer-groups/{consumer_group_id}/lags/{topic_name}/partitions/{partition_id}"),
            get(lags::get),
        )
}
