//! Confluent REST Proxy v2, as Confluent documents it and as Redpanda's pandaproxy serves it:
//! topics and partitions with their leaders and offsets, produce, brokers ([`topics`]), and
//! consumer instances ([`consumers`]) that live in this broker's memory ([`State`], in
//! [`instances`]).
//!
//! Content types are Confluent's: `application/vnd.kafka.v2+json` (or `application/json`) for
//! bodies without records; `application/vnd.kafka.binary.v2+json` (base64 keys and values) and
//! `application/vnd.kafka.json.v2+json` (any JSON value, kept in Kafka as its compact
//! serialization) for produce and for reading records. Avro, Protobuf and JSON Schema need a
//! schema registry, which Millrace does not have: they answer Confluent's 42207 (422) as Confluent's
//! proxy does without one. Any other Content-Type is 415. JSON that does not fit a request's shape
//! is 422 with the field named ([`body`]).
//!
//! Beside Confluent's paths, Redpanda's pandaproxy's `GET /topics/{t}/partitions/{p}/records`
//! (`offset`, `timeout`, `max_bytes`) reads one partition without a consumer instance.
//!
//! Every call reaches the broker through the [`crate::gateway`], with the HTTP client's
//! principal: a v2 request is authorized, throttled and validated exactly as the Kafka request
//! behind it.

pub mod body;
pub mod consumers;
pub mod instances;
pub mod time;
pub mod topics;

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

pub use instances::State;

use crate::RestApi;

/// The v2 routes.
pub fn routes() -> Router<Arc<RestApi>> {
    Router::new()
        .route("/topics", get(topics::list))
        .route(
            "/topics/{topic}",
            get(topics::describe).post(topics::produce),
        )
        .route("/topics/{topic}/partitions", get(topics::partitions))
        .route(
            "/topics/{topic}/partitions/{partition}",
            get(topics::partition).post(topics::produce_to_partition),
        )
        .route(
            "/topics/{topic}/partitions/{partition}/offsets",
            get(topics::offsets),
        )
        .route(
            "/topics/{topic}/partitions/{partition}/records",
            get(topics::partition_records),
        )
        .route("/brokers", get(topics::brokers))
        .route("/consumers/{group}", post(consumers::create))
        // Confluent's reference writes the creation path with a trailing slash.
        .route("/consumers/{group}/", post(consumers::create))
        .route(
            "/consumers/{group}/instances/{instance}",
            axum::routing::delete(consumers::delete),
        )
        .route(
            "/consumers/{group}/instances/{instance}/subscription",
            post(consumers::subscribe)
                .get(consumers::subscription)
                .delete(consumers::unsubscribe),
        )
        .route(
            "/consumers/{group}/instances/{instance}/assignments",
            post(consumers::assign).get(consumers::assignment),
        )
        .route(
            "/consumers/{group}/instances/{instance}/positions",
            post(consumers::seek),
        )
        .route(
            "/consumers/{group}/instances/{instance}/positions/beginning",
            post(consumers::seek_to_beginning),
        )
        .route(
            "/consumers/{group}/instances/{instance}/positions/end",
            post(consumers::seek_to_end),
        )
        .route(
            "/consumers/{group}/instances/{instance}/records",
            get(consumers::records),
        )
        .route(
            "/consumers/{group}/instances/{instance}/offsets",
            post(consumers::commit).get(consumers::committed),
        )
}
