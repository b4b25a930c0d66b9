//! The HTTP API's broker settings (`millrace.rest.*`), read once from [`BrokerConfig`] for the
//! `rest` crate. Confluent's REST Proxy names them `consumer.instance.timeout.ms` and so on; here
//! they carry the `millrace.rest.` prefix so that they cannot be mistaken for a Kafka client's.

use std::time::Duration;

use crate::config::BrokerConfig;

/// `millrace.rest.consumer.instance.timeout.ms` default: Confluent's 5 minutes.
const CONSUMER_INSTANCE_TIMEOUT_MS: u64 = 300_000;
/// `millrace.rest.consumer.instances.max` default.
const CONSUMER_INSTANCES_MAX: usize = 1000;
/// `millrace.rest.request.bytes.max` default: 64 MiB.
const REQUEST_BYTES_MAX: usize = 64 * 1024 * 1024;

/// The HTTP API's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestConfig {
    /// `millrace.rest.consumer.instance.timeout.ms`: a v2 consumer instance not used for this long
    /// is closed (its group membership ends).
    pub consumer_instance_timeout: Duration,
    /// `millrace.rest.consumer.instances.max`: v2 consumer instances this broker holds at most;
    /// creating one more is refused.
    pub consumer_instances_max: usize,
    /// `millrace.rest.request.bytes.max`: the largest request body accepted (413 above it).
    pub request_bytes_max: usize,
}

impl BrokerConfig {
    /// Every HTTP API setting of this broker.
    pub fn rest(&self) -> RestConfig {
        let positive = |key: &str| self.long(key).and_then(|v| u64::try_from(v).ok());
        RestConfig {
            consumer_instance_timeout: Duration::from_millis(
                positive("millrace.rest.consumer.instance.timeout.ms")
                    .unwrap_or(CONSUMER_INSTANCE_TIMEOUT_MS),
            ),
            consumer_instances_max: positive("millrace.rest.consumer.instances.max")
                .and_then(|v| usize::try_from(v).ok())
                .unwrap_or(CONSUMER_INSTANCES_MAX),
            request_bytes_max: positive("millrace.rest.request.bytes.max")
                .and_then(|v| usize::try_from(v).ok())
                .unwrap_or(REQUEST_BYTES_MAX),
        }
    }
}

impl Default for RestConfig {
    fn default() -> Self {
        Self {
            consumer_instance_timeout: Duration::from_millis(CONSUMER_INSTANCE_TIMEOUT_MS),
            consumer_instances_max: CONSUMER_INSTANCES_MAX,
            request_bytes_max: REQUEST_BYTES_MAX,
        }
    }
}
