//! REST v3's errors: Kafka error codes from the handlers mapped as Confluent's REST Proxy maps the
//! admin client's exceptions (rest-utils' `KafkaExceptionMapper`), and v3's own answers: an
//! unknown cluster, resource or config is 404 with `error_code` 404; a payload that parses but
//! cannot be used is 422 with 42206.
//!
//! Where Confluent's mapping is an accident of exact-class matching (an invalid topic name or a
//! bad replica assignment answering 500), the client's mistake answers 400 here.

use axum::http::StatusCode;
use millrace_frontend::error_codes as kafka;

use crate::error::{code, is_bad_request, RestError};

/// Confluent's code for a request Kafka refused as invalid (an existing topic, a bad config).
pub const BAD_REQUEST: i32 = code::KAFKA_BAD_REQUEST;
/// Confluent's code for a topic or partition Kafka does not know (v3; v2 says 40401/40402).
pub const UNKNOWN_TOPIC_OR_PARTITION: i32 = 40403;
/// Confluent's code for a payload that parses but cannot be used.
pub const INVALID_PAYLOAD: i32 = 42206;
/// Confluent's code for a broker that cannot be reached.
pub const BROKER_NOT_AVAILABLE: i32 = 50302;
/// Kafka's BROKER_NOT_AVAILABLE (the front end names no constant for it).
const BROKER_NOT_AVAILABLE_KAFKA: i16 = 8;

/// 404 with the generic code, `message` saying what was not found.
pub fn not_found(message: impl Into<String>) -> RestError {
    RestError::new(StatusCode::NOT_FOUND, code::NOT_FOUND, message)
}

/// 404: the cluster id is not this cluster's.
pub fn cluster_not_found(cluster_id: &str) -> RestError {
    not_found(format!("Cluster {cluster_id} cannot be found."))
}

/// 404 40403: the topic (or its partition) does not exist.
pub fn unknown_topic_or_partition() -> RestError {
    RestError::new(
        StatusCode::NOT_FOUND,
        UNKNOWN_TOPIC_OR_PARTITION,
        "This server does not host this topic-partition.",
    )
}

/// 422 42206: the payload parsed but says something unusable.
pub fn invalid_payload(message: &str) -> RestError {
    RestError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        INVALID_PAYLOAD,
        format!("Payload error. {message}"),
    )
}

/// The answer for Kafka error `kafka_code` (not NONE) from a handler, with the handler's message
/// when it gave one, else `what` and the code's name.
pub fn kafka(kafka_code: i16, message: Option<&str>, what: &str) -> RestError {
    let message = match message {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => format!("{what}: {}", kafka::error_name(kafka_code)),
    };
    let (status, error_code) = match kafka_code {
        kafka::UNKNOWN_TOPIC_OR_PARTITION | kafka::UNKNOWN_TOPIC_ID => {
            return unknown_topic_or_partition();
        }
        kafka::SASL_AUTHENTICATION_FAILED => (StatusCode::UNAUTHORIZED, code::UNAUTHORIZED),
        kafka::TOPIC_AUTHORIZATION_FAILED
        | kafka::GROUP_AUTHORIZATION_FAILED
        | kafka::CLUSTER_AUTHORIZATION_FAILED
        | kafka::TRANSACTIONAL_ID_AUTHORIZATION_FAILED => (StatusCode::FORBIDDEN, code::FORBIDDEN),
        c if is_bad_request(c) => (StatusCode::BAD_REQUEST, BAD_REQUEST),
        BROKER_NOT_AVAILABLE_KAFKA => (StatusCode::SERVICE_UNAVAILABLE, BROKER_NOT_AVAILABLE),
        c if kafka::is_retriable(c) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            code::KAFKA_RETRIABLE_ERROR,
        ),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, code::KAFKA_ERROR),
    };
    RestError::new(status, error_code, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(kafka_code: i16, status: u16, error_code: i32) {
        let e = kafka(kafka_code, None, "topic t");
        assert_eq!(
            (e.status.as_u16(), e.error_code),
            (status, error_code),
            "{kafka_code}"
        );
    }

    #[test]
    fn kafka_codes_map_as_confluent_maps_them() {
        check(kafka::UNKNOWN_TOPIC_OR_PARTITION, 404, 40403);
        check(kafka::TOPIC_AUTHORIZATION_FAILED, 403, 40301);
        check(kafka::GROUP_AUTHORIZATION_FAILED, 403, 40301);
        check(kafka::TOPIC_ALREADY_EXISTS, 400, 40002);
        check(kafka::INVALID_REPLICATION_FACTOR, 400, 40002);
        check(kafka::INVALID_CONFIG, 400, 40002);
        check(kafka::REQUEST_TIMED_OUT, 500, 50003);
        check(kafka::UNKNOWN_SERVER_ERROR, 500, 50002);
        check(8, 503, 50302);
    }

    #[test]
    fn the_handlers_message_is_kept() {
        let e = kafka(
            kafka::TOPIC_ALREADY_EXISTS,
            Some("Topic 't' already exists."),
            "t",
        );
        assert_eq!(e.message, "Topic 't' already exists.");
        let e = kafka(kafka::INVALID_CONFIG, None, "topic t");
        assert_eq!(
            e.message,
            format!("topic t: {}", kafka::error_name(kafka::INVALID_CONFIG))
        );
    }
}
