//! The HTTP API's errors, as Confluent's REST Proxy writes them: an HTTP status and a body
//! `{"error_code": <status × 100 + n>, "message": "…"}` (40401 topic not found, 40402 partition
//! not found, 40403 consumer instance not found, 422xx validation, 50002 a Kafka error, 50003 a
//! retriable one). Kafka error codes from the handlers map onto them in [`RestError::kafka`].

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use millrace_frontend::error_codes;

/// Confluent's error codes (kafka-rest's `Errors`), by name.
pub mod code {
    pub const UNAUTHORIZED: i32 = 40101;
    pub const FORBIDDEN: i32 = 40301;
    pub const TOPIC_NOT_FOUND: i32 = 40401;
    pub const PARTITION_NOT_FOUND: i32 = 40402;
    pub const CONSUMER_INSTANCE_NOT_FOUND: i32 = 40403;
    pub const LEADER_NOT_AVAILABLE: i32 = 40404;
    pub const NOT_FOUND: i32 = 404;
    pub const METHOD_NOT_ALLOWED: i32 = 405;
    pub const NOT_ACCEPTABLE: i32 = 406;
    pub const CONSUMER_FORMAT_MISMATCH: i32 = 40601;
    pub const CONSUMER_ALREADY_SUBSCRIBED: i32 = 40901;
    pub const CONSUMER_ALREADY_EXISTS: i32 = 40902;
    pub const ILLEGAL_STATE: i32 = 40903;
    pub const PAYLOAD_TOO_LARGE: i32 = 413;
    pub const UNSUPPORTED_MEDIA_TYPE: i32 = 415;
    pub const UNPROCESSABLE_ENTITY: i32 = 422;
    pub const INVALID_CONSUMER_CONFIG: i32 = 42204;
    pub const TOO_MANY_REQUESTS: i32 = 429;
    pub const INTERNAL: i32 = 500;
    pub const KAFKA_BAD_REQUEST: i32 = 40002;
    pub const KAFKA_ERROR: i32 = 50002;
    pub const KAFKA_RETRIABLE_ERROR: i32 = 50003;
    pub const UNAVAILABLE: i32 = 503;
}

/// Kafka error codes that say the request itself is wrong (an existing topic, a bad config, a
/// record the log refuses): the client's mistake, answered 400 with Confluent's 40002 rather than
/// 500. Kafka's RECORD_LIST_TOO_LARGE (18) has no constant in the front end.
pub fn is_bad_request(kafka_code: i16) -> bool {
    const RECORD_LIST_TOO_LARGE: i16 = 18;
    matches!(
        kafka_code,
        error_codes::TOPIC_ALREADY_EXISTS
            | error_codes::INVALID_PARTITIONS
            | error_codes::INVALID_REPLICATION_FACTOR
            | error_codes::INVALID_REPLICA_ASSIGNMENT
            | error_codes::INVALID_CONFIG
            | error_codes::INVALID_REQUEST
            | error_codes::INVALID_TOPIC_EXCEPTION
            | error_codes::POLICY_VIOLATION
            | error_codes::UNSUPPORTED_VERSION
            | error_codes::SECURITY_DISABLED
            | error_codes::TOPIC_DELETION_DISABLED
            | error_codes::CORRUPT_MESSAGE
            | error_codes::MESSAGE_TOO_LARGE
            | RECORD_LIST_TOO_LARGE
            | error_codes::INVALID_TIMESTAMP
            | error_codes::INVALID_RECORD
    )
}

/// One failed HTTP request: its status and Confluent's error body.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status} ({error_code}): {message}")]
pub struct RestError {
    pub status: StatusCode,
    pub error_code: i32,
    pub message: String,
    /// The Kafka error code behind it, when a handler answered one ([`RestError::kafka`]).
    pub kafka_code: Option<i16>,
}

impl RestError {
    pub fn new(status: StatusCode, error_code: i32, message: impl Into<String>) -> Self {
        Self {
            status,
            error_code,
            message: message.into(),
            kafka_code: None,
        }
    }

    /// Whether the Kafka error code behind this one is among `codes`.
    pub fn is_kafka(&self, codes: &[i16]) -> bool {
        self.kafka_code.is_some_and(|c| codes.contains(&c))
    }

    /// 404 40401.
    pub fn topic_not_found(topic: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            code::TOPIC_NOT_FOUND,
            format!("Topic {topic} not found."),
        )
    }

    /// 404 40402.
    pub fn partition_not_found(topic: &str, partition: i32) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            code::PARTITION_NOT_FOUND,
            format!("Partition {partition} of topic {topic} not found."),
        )
    }

    /// 404 40403.
    pub fn consumer_instance_not_found() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            code::CONSUMER_INSTANCE_NOT_FOUND,
            "Consumer instance not found.",
        )
    }

    /// 422 with Confluent's generic validation code; `message` names the field.
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            code::UNPROCESSABLE_ENTITY,
            message,
        )
    }

    /// 400, a request that cannot be read at all.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, 400, message)
    }

    /// 503: the broker is not serving yet (or no longer).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, code::UNAVAILABLE, message)
    }

    /// 500: something that is not the client's fault and not a Kafka error code.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, code::INTERNAL, message)
    }

    /// The REST error for a Kafka error code from a handler (`code` is not NONE); `what` says what
    /// was asked for ("topic t", "group g").
    pub fn kafka(kafka_code: i16, what: &str) -> Self {
        Self {
            kafka_code: Some(kafka_code),
            ..Self::from_kafka(kafka_code, what)
        }
    }

    fn from_kafka(kafka_code: i16, what: &str) -> Self {
        let name = error_codes::error_name(kafka_code);
        let message = format!("{what}: {name}");
        match kafka_code {
            error_codes::UNKNOWN_TOPIC_OR_PARTITION | error_codes::UNKNOWN_TOPIC_ID => {
                Self::new(StatusCode::NOT_FOUND, code::TOPIC_NOT_FOUND, message)
            }
            error_codes::TOPIC_AUTHORIZATION_FAILED
            | error_codes::GROUP_AUTHORIZATION_FAILED
            | error_codes::CLUSTER_AUTHORIZATION_FAILED
            | error_codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED => {
                Self::new(StatusCode::FORBIDDEN, code::FORBIDDEN, message)
            }
            error_codes::SASL_AUTHENTICATION_FAILED => {
                Self::new(StatusCode::UNAUTHORIZED, code::UNAUTHORIZED, message)
            }
            c if is_bad_request(c) => {
                Self::new(StatusCode::BAD_REQUEST, code::KAFKA_BAD_REQUEST, message)
            }
            error_codes::LEADER_NOT_AVAILABLE => {
                Self::new(StatusCode::NOT_FOUND, code::LEADER_NOT_AVAILABLE, message)
            }
            c if error_codes::is_retriable(c) => Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                code::KAFKA_RETRIABLE_ERROR,
                message,
            ),
            _ => Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                code::KAFKA_ERROR,
                message,
            ),
        }
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error_code": self.error_code,
            "message": self.message,
        });
        (self.status, axum::Json(body)).into_response()
    }
}
