//! The HTTP API's broker settings (`millrace.rest.*`), read once from [`BrokerConfig`] for the
//! `rest` crate. Confluent's REST Proxy names them `consumer.instance.timeout.ms` and so on; here
//! they carry the `millrace.rest.` prefix so that they cannot be mistaken for a Kafka client's.
//!
//! The HTTP listener's transport and authentication are `millrace.http.*` (the listener also
//! serves the operator's `/metrics`, `/health`, `/ready`): `millrace.http.listener.security.protocol`
//! (PLAINTEXT or SSL), `millrace.http.listener.name` (the listener name whose
//! `listener.name.<name>.ssl.*` and `listener.name.<name>.plain.sasl.jaas.config` the HTTP listener
//! uses, the broker-wide `ssl.*` below them; `HTTP` by default, or a Kafka listener's name to share
//! its certificates and PLAIN users), `millrace.http.authentication` (none or basic) and
//! `millrace.http.authentication.operator.routes`.

use std::time::Duration;

use crate::config::BrokerConfig;

/// `millrace.rest.consumer.instance.timeout.ms` default: Confluent's 5 minutes.
const CONSUMER_INSTANCE_TIMEOUT_MS: u64 = 300_000;
/// `millrace.rest.consumer.instances.max` default.
const CONSUMER_INSTANCES_MAX: usize = 1000;
/// `millrace.rest.request.bytes.max` default: 64 MiB.
const REQUEST_BYTES_MAX: usize = 64 * 1024 * 1024;
/// `connection.failed.authentication.delay.ms` default: Kafka's 100 ms.
const FAILED_AUTHENTICATION_DELAY_MS: u64 = 100;

/// `millrace.http.listener.name` default: the HTTP listener's own `listener.name.http.*` keys.
pub const HTTP_LISTENER_NAME_DEFAULT: &str = "HTTP";

/// `millrace.http.listener.security.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpSecurityProtocol {
    /// HTTP/1.1 and h2c (HTTP/2 by prior knowledge).
    Plaintext,
    /// TLS, then HTTP/1.1 or HTTP/2 as ALPN chose.
    Ssl,
}

/// `millrace.http.authentication`: how an HTTP client says who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpAuthentication {
    /// Nobody is asked: the principal is the client certificate's (mTLS) or `User:ANONYMOUS`.
    None,
    /// HTTP Basic against the broker's SASL/PLAIN and SCRAM users (a verified client certificate
    /// also counts).
    Basic,
}

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
    /// `millrace.http.listener.security.protocol`.
    pub security_protocol: HttpSecurityProtocol,
    /// `millrace.http.listener.name`, upper case: whose `listener.name.<name>.*` TLS settings and
    /// PLAIN users the HTTP listener reads.
    pub listener_name: String,
    /// `millrace.http.authentication`.
    pub authentication: HttpAuthentication,
    /// `millrace.http.authentication.operator.routes`: `/metrics`, `/health`, `/ready` and
    /// `/remote-log` ask for credentials too.
    pub authenticate_operator_routes: bool,
    /// `connection.failed.authentication.delay.ms`: how long a refused HTTP client waits for its
    /// 401, as a refused Kafka client waits for its answer.
    pub failed_authentication_delay: Duration,
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
            security_protocol: match self.get("millrace.http.listener.security.protocol") {
                Some("SSL") => HttpSecurityProtocol::Ssl,
                _ => HttpSecurityProtocol::Plaintext,
            },
            listener_name: self
                .get("millrace.http.listener.name")
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .unwrap_or(HTTP_LISTENER_NAME_DEFAULT)
                .to_ascii_uppercase(),
            authentication: match self.get("millrace.http.authentication") {
                Some("basic") => HttpAuthentication::Basic,
                _ => HttpAuthentication::None,
            },
            authenticate_operator_routes: self
                .bool_or("millrace.http.authentication.operator.routes", false),
            failed_authentication_delay: Duration::from_millis(
                positive("connection.failed.authentication.delay.ms")
                    .unwrap_or(FAILED_AUTHENTICATION_DELAY_MS),
            ),
        }
    }
}

impl Default for RestConfig {
    fn default() -> Self {
        Self {
            consumer_instance_timeout: Duration::from_millis(CONSUMER_INSTANCE_TIMEOUT_MS),
            consumer_instances_max: CONSUMER_INSTANCES_MAX,
            request_bytes_max: REQUEST_BYTES_MAX,
            security_protocol: HttpSecurityProtocol::Plaintext,
            listener_name: HTTP_LISTENER_NAME_DEFAULT.to_string(),
            authentication: HttpAuthentication::None,
            authenticate_operator_routes: false,
            failed_authentication_delay: Duration::from_millis(FAILED_AUTHENTICATION_DELAY_MS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn config(pairs: &[(&str, &str)]) -> Result<BrokerConfig, crate::config::ConfigError> {
        let layer: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        BrokerConfig::from_layers([&layer])
    }

    #[test]
    fn http_security_settings_are_read_and_bad_values_refused() {
        let defaults = config(&[]).expect("config").rest();
        assert_eq!(defaults, RestConfig::default());
        let set = config(&[
            ("millrace.http.listener.security.protocol", "SSL"),
            ("millrace.http.listener.name", "mtls"),
            ("millrace.http.authentication", "basic"),
            ("millrace.http.authentication.operator.routes", "true"),
            ("connection.failed.authentication.delay.ms", "0"),
        ])
        .expect("config")
        .rest();
        assert_eq!(set.security_protocol, HttpSecurityProtocol::Ssl);
        assert_eq!(set.listener_name, "MTLS");
        assert_eq!(set.authentication, HttpAuthentication::Basic);
        assert!(set.authenticate_operator_routes);
        assert_eq!(set.failed_authentication_delay, Duration::ZERO);
        for (key, value) in [
            ("millrace.http.listener.security.protocol", "SASL_SSL"),
            ("millrace.http.authentication", "digest"),
            ("millrace.http.authentication.operator.routes", "sometimes"),
        ] {
            let err = config(&[(key, value)]).expect_err(value).to_string();
            assert!(err.contains(key), "{err}");
        }
    }
}
