//! Broker and topic configuration under Kafka's own names.
//!
//! One registry ([`BROKER_CONFIGS`], [`TOPIC_CONFIGS`]) says which keys exist, their defaults,
//! their types and their bounds. Everything that reads a config goes through it, so an unknown
//! key or a bad value is rejected in one place with a message that names the key, and
//! DescribeConfigs lists every key with its value and source.
//!
//! Topic configs fall back to their broker synonym (`retention.ms` → `log.retention.ms` →
//! `log.retention.minutes` → `log.retention.hours`), as in Kafka; the few Kafka topic configs
//! without one (`remote.storage.enable`, `remote.log.copy.disable`,
//! `remote.log.delete.on.disable`) have their own default ([`TopicFallback::Fixed`]). The rules
//! between tiered-storage keys are in [`crate::config_tiered`], those between the share group
//! keys (`group.share.*`) in [`crate::config_share`].
//!
//! Millrace adds a few keys of its own, all prefixed as Kafka would name them:
//! `log.flush.policy`, `log.flush.batch.interval.ms`, `log.max.open.files`.
//!
//! Bounds that protect the store or the broker's memory are named in [`crate::limits`]: the batch
//! size keys (`message.max.bytes`, `max.message.bytes`, `replica.fetch.max.bytes`,
//! `socket.request.max.bytes`) stop at maxima tied to the store's `BATCH_BYTES_MAX`, and
//! `queued.max.request.bytes` is finite and at least `socket.request.max.bytes` plus the reserve
//! for small requests. The listener keys follow Kafka's rules (`BrokerConfig`'s listener methods
//! here; how a listener is written is [`crate::listeners`]), and `listener.name.<name>.<key>`
//! overrides a [`LISTENER_CONFIGS`] key for one listener. Secrets
//! (`ConfigType::Password`) are never shown by DescribeConfigs, as in Kafka.

use std::collections::BTreeMap;
use std::time::Duration;

use millrace_store::{CleanupPolicy, FlushPolicy, LogConfig, TimestampType};

use crate::config_error::invalid;
pub use crate::config_error::ConfigError;
use crate::limits::{
    MESSAGE_MAX_BYTES_MAX, QUEUED_MAX_REQUEST_BYTES_MAX, REPLICA_FETCH_MAX_BYTES_MAX,
    SMALL_REQUEST_RESERVE_BYTES, SOCKET_REQUEST_MAX_BYTES_MAX,
};
use crate::listeners::{
    parse_listener_list, Listener, ListenerAddress, SecurityProtocol, LISTENERS_DEFAULT,
    LISTENER_PREFIX, SECURITY_PROTOCOL_MAP_DEFAULT,
};

/// `millrace.remote.storage.max.pending.bytes` default: 10 GiB of closed local segments not yet
/// uploaded before produce to tiered topics is refused (a retriable error).
pub(crate) const MAX_PENDING_BYTES_DEFAULT: &str = "10737418240";
/// `millrace.remote.storage.cache.bytes` default: 64 MiB of remote segment data cached for reads.
pub(crate) const CACHE_BYTES_DEFAULT: &str = "67108864";
/// `millrace.remote.storage.orphan.grace.ms` default: ten minutes before an object no metadata
/// names (an upload that did not finish) may be deleted.
pub(crate) const ORPHAN_GRACE_MS_DEFAULT: &str = "600000";

/// Where a config value came from, with Kafka's DescribeConfigs source codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    DynamicTopicConfig = 1,
    /// This broker's own dynamic config (`kafka-configs --entity-name ID`).
    DynamicBrokerConfig = 2,
    /// The cluster-wide dynamic default (`kafka-configs --entity-default`).
    DynamicDefaultBrokerConfig = 3,
    StaticBrokerConfig = 4,
    DefaultConfig = 5,
    /// A group's own config (GROUP resources, Kafka's `DYNAMIC_GROUP_CONFIG`).
    DynamicGroupConfig = 8,
}

/// The kind of value a key holds, and its bounds.
#[derive(Debug, Clone, Copy)]
pub enum ConfigType {
    Int {
        min: i64,
        max: i64,
    },
    Long {
        min: i64,
        max: i64,
    },
    Bool,
    Double {
        min: f64,
        max: f64,
    },
    /// One of the listed words, compared case-sensitively as Kafka does.
    OneOf(&'static [&'static str]),
    CleanupPolicy,
    Str,
    /// A comma-separated list of any words (Kafka's LIST without a validator).
    List,
    /// A replication-throttle replica list (KIP-73): `*`, or `PARTITION:BROKER,...`, or empty.
    ThrottledReplicas,
    /// A Kafka listener list (`NAME://host:port,...`); which protocols are served is checked
    /// with the whole config ([`BrokerConfig::listeners`]).
    Listeners,
    /// A secret (a key, a password): validated as a string, never described.
    Password,
}

/// One known configuration key.
#[derive(Debug)]
pub struct ConfigDef {
    pub name: &'static str,
    /// `None` when Kafka's default is null (the key is derived from another).
    pub default: Option<&'static str>,
    pub ty: ConfigType,
}

const fn def(name: &'static str, default: &'static str, ty: ConfigType) -> ConfigDef {
    ConfigDef {
        name,
        default: Some(default),
        ty,
    }
}

const fn nodef(name: &'static str, ty: ConfigType) -> ConfigDef {
    ConfigDef {
        name,
        default: None,
        ty,
    }
}

const INT_POS: ConfigType = ConfigType::Int {
    min: 1,
    max: i32::MAX as i64,
};
/// Any 32-bit integer (a Kafka INT without a validator).
const INT_ANY: ConfigType = ConfigType::Int {
    min: i32::MIN as i64,
    max: i32::MAX as i64,
};

/// A Kafka INT with `Range.between(min, max)`.
const fn int_range(min: i64, max: i64) -> ConfigType {
    ConfigType::Int { min, max }
}
const INT_NONNEG: ConfigType = ConfigType::Int {
    min: 0,
    max: i32::MAX as i64,
};
const LONG_ANY: ConfigType = ConfigType::Long {
    min: -1,
    max: i64::MAX,
};
const LONG_NONNEG: ConfigType = ConfigType::Long {
    min: 0,
    max: i64::MAX,
};
const LONG_POS: ConfigType = ConfigType::Long {
    min: 1,
    max: i64::MAX,
};
/// A batch size limit: at most the store's largest batch.
const BATCH_SIZE: ConfigType = ConfigType::Int {
    min: 0,
    max: MESSAGE_MAX_BYTES_MAX,
};
/// `local.retention.ms` / `local.retention.bytes` and their broker synonyms: -2 means "as
/// `retention.*`", -1 unbounded (Kafka's `atLeast(-2)`).
const LOCAL_RETENTION: ConfigType = ConfigType::Long {
    min: -2,
    max: i64::MAX,
};
const TIMESTAMP_TYPES: ConfigType = ConfigType::OneOf(&["CreateTime", "LogAppendTime"]);
const COMPRESSION_TYPES: ConfigType =
    ConfigType::OneOf(&["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]);

/// Every broker key Millrace accepts (`--set`, `--config`, `MILLRACE_*`).
pub static BROKER_CONFIGS: &[ConfigDef] = &[
    def("node.id", "1", INT_NONNEG),
    nodef("log.dirs", ConfigType::Str),
    nodef("listeners", ConfigType::Listeners),
    nodef("advertised.listeners", ConfigType::Listeners),
    def(
        "listener.security.protocol.map",
        crate::listeners::SECURITY_PROTOCOL_MAP_DEFAULT,
        ConfigType::Str,
    ),
    nodef("inter.broker.listener.name", ConfigType::Str),
    def(
        "security.inter.broker.protocol",
        "PLAINTEXT",
        ConfigType::OneOf(&["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]),
    ),
    nodef("log.dir", ConfigType::Str),
    def("num.partitions", "1", INT_POS),
    def(
        "default.replication.factor",
        "1",
        ConfigType::Int {
            min: 1,
            max: i16::MAX as i64,
        },
    ),
    def("auto.create.topics.enable", "true", ConfigType::Bool),
    def("delete.topic.enable", "true", ConfigType::Bool),
    def("message.max.bytes", "1048588", BATCH_SIZE),
    def(
        "replica.fetch.max.bytes",
        "1048576",
        ConfigType::Int {
            min: 0,
            max: REPLICA_FETCH_MAX_BYTES_MAX,
        },
    ),
    def(
        "socket.request.max.bytes",
        "104857600",
        ConfigType::Int {
            min: 1,
            max: SOCKET_REQUEST_MAX_BYTES_MAX,
        },
    ),
    // Kafka's default is -1 (no bound); Millrace always bounds the memory of requests in flight.
    def(
        "queued.max.request.bytes",
        QUEUED_MAX_REQUEST_BYTES_DEFAULT,
        ConfigType::Long {
            min: 1,
            max: QUEUED_MAX_REQUEST_BYTES_MAX,
        },
    ),
    def("max.connections", "2147483647", INT_NONNEG),
    def("connections.max.idle.ms", "600000", LONG_ANY),
    def(
        "max.incremental.fetch.session.cache.slots",
        "1000",
        INT_NONNEG,
    ),
    nodef("log.retention.ms", LONG_ANY),
    nodef("log.retention.minutes", INT_POS),
    def("log.retention.hours", "168", INT_POS),
    def("log.retention.bytes", "-1", LONG_ANY),
    def("log.retention.check.interval.ms", "300000", LONG_POS),
    def(
        "log.segment.bytes",
        "1073741824",
        ConfigType::Int {
            min: 14,
            max: i32::MAX as i64,
        },
    ),
    nodef("log.roll.ms", LONG_POS),
    def("log.roll.hours", "168", INT_POS),
    def("log.roll.jitter.ms", "0", LONG_NONNEG),
    def(
        "log.index.size.max.bytes",
        "10485760",
        ConfigType::Int {
            min: 4,
            max: i32::MAX as i64,
        },
    ),
    def("log.index.interval.bytes", "4096", INT_NONNEG),
    def("log.cleanup.policy", "delete", ConfigType::CleanupPolicy),
    def("log.cleaner.enable", "true", ConfigType::Bool),
    def("log.cleaner.delete.retention.ms", "86400000", LONG_NONNEG),
    def(
        "log.cleaner.min.cleanable.ratio",
        "0.5",
        ConfigType::Double { min: 0.0, max: 1.0 },
    ),
    def("log.cleaner.min.compaction.lag.ms", "0", LONG_NONNEG),
    def(
        "log.cleaner.max.compaction.lag.ms",
        "9223372036854775807",
        LONG_POS,
    ),
    def("log.message.timestamp.type", "CreateTime", TIMESTAMP_TYPES),
    def(
        "log.message.timestamp.before.max.ms",
        "9223372036854775807",
        LONG_NONNEG,
    ),
    def("log.message.timestamp.after.max.ms", "3600000", LONG_NONNEG),
    def(
        "log.flush.interval.messages",
        "9223372036854775807",
        LONG_POS,
    ),
    nodef("log.flush.interval.ms", LONG_NONNEG),
    def("log.preallocate", "false", ConfigType::Bool),
    def("log.segment.delete.delay.ms", "60000", LONG_NONNEG),
    def(
        "log.flush.policy",
        "batch",
        ConfigType::OneOf(&["batch", "always", "never"]),
    ),
    def(
        "log.flush.batch.interval.ms",
        "2",
        ConfigType::Int {
            min: 1,
            max: 10_000,
        },
    ),
    def(
        "log.max.open.files",
        "1024",
        ConfigType::Int {
            min: 16,
            max: 1_000_000,
        },
    ),
    def("min.insync.replicas", "1", INT_POS),
    def("unclean.leader.election.enable", "false", ConfigType::Bool),
    def("compression.type", "producer", COMPRESSION_TYPES),
    def("offsets.topic.num.partitions", "50", INT_POS),
    def(
        "offsets.topic.replication.factor",
        "3",
        ConfigType::Int {
            min: 1,
            max: i16::MAX as i64,
        },
    ),
    def("offsets.retention.minutes", "10080", INT_POS),
    def("transaction.state.log.num.partitions", "50", INT_POS),
    def(
        "transaction.state.log.replication.factor",
        "3",
        ConfigType::Int {
            min: 1,
            max: i16::MAX as i64,
        },
    ),
    def("transaction.state.log.min.isr", "2", INT_POS),
    def("transaction.state.log.segment.bytes", "104857600", INT_POS),
    def("transaction.max.timeout.ms", "900000", INT_POS),
    def(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "10000",
        INT_POS,
    ),
    def("transactional.id.expiration.ms", "604800000", INT_POS),
    def("transaction.partition.verification.enable", "true", ConfigType::Bool),
    def("offsets.commit.timeout.ms", "5000", INT_POS),
    def("group.min.session.timeout.ms", "6000", INT_NONNEG),
    def("group.max.session.timeout.ms", "1800000", INT_NONNEG),
    def("group.initial.rebalance.delay.ms", "3000", INT_NONNEG),
    def("group.max.size", "2147483647", INT_POS),
    def("group.consumer.session.timeout.ms", "45000", INT_POS),
    def("group.consumer.min.session.timeout.ms", "45000", INT_POS),
    def("group.consumer.max.session.timeout.ms", "60000", INT_POS),
    def("group.consumer.heartbeat.interval.ms", "5000", INT_POS),
    def("group.consumer.min.heartbeat.interval.ms", "5000", INT_POS),
    def("group.consumer.max.heartbeat.interval.ms", "15000", INT_POS),
    def("group.consumer.max.size", "2147483647", INT_POS),
    def(
        "group.consumer.assignors",
        "org.apache.kafka.coordinator.group.assignor.UniformAssignor,org.apache.kafka.coordinator.group.assignor.RangeAssignor",
        ConfigType::Str,
    ),
    // KIP-932 share groups: Kafka's names, defaults and ranges (`ShareGroupConfig`,
    // `GroupCoordinatorConfig`); the rules between them are in `config_share.rs`.
    def("group.share.delivery.count.limit", "5", int_range(2, 10)),
    def("group.share.min.delivery.count.limit", "2", int_range(2, 5)),
    def("group.share.max.delivery.count.limit", "10", int_range(5, 25)),
    def(
        "group.share.record.lock.duration.ms",
        "30000",
        int_range(1_000, 3_600_000),
    ),
    def(
        "group.share.min.record.lock.duration.ms",
        "15000",
        int_range(1_000, 30_000),
    ),
    def(
        "group.share.max.record.lock.duration.ms",
        "60000",
        int_range(30_000, 3_600_000),
    ),
    def(
        "group.share.partition.max.record.locks",
        "2000",
        int_range(100, 10_000),
    ),
    def(
        "group.share.min.partition.max.record.locks",
        "100",
        int_range(100, 2_000),
    ),
    def(
        "group.share.max.partition.max.record.locks",
        "4000",
        int_range(2_000, 10_000),
    ),
    def("group.share.max.share.sessions", "2000", INT_POS),
    def("share.fetch.purgatory.purge.interval.requests", "1000", INT_ANY),
    def(
        "group.share.persister.class.name",
        "org.apache.kafka.server.share.persister.DefaultStatePersister",
        ConfigType::Str,
    ),
    def(
        "group.share.dlq.manager.class.name",
        "org.apache.kafka.server.share.dlq.DefaultShareGroupDLQManager",
        ConfigType::Str,
    ),
    def("group.share.session.timeout.ms", "45000", INT_POS),
    def("group.share.min.session.timeout.ms", "45000", INT_POS),
    def("group.share.max.session.timeout.ms", "60000", INT_POS),
    def("group.share.heartbeat.interval.ms", "5000", INT_POS),
    def("group.share.min.heartbeat.interval.ms", "5000", INT_POS),
    def("group.share.max.heartbeat.interval.ms", "15000", INT_POS),
    def("group.share.max.size", "200", int_range(1, 1_000)),
    // The share coordinator's `__share_group_state` (Kafka's `share.coordinator.*`).
    def("share.coordinator.state.topic.num.partitions", "50", INT_POS),
    def(
        "share.coordinator.state.topic.replication.factor",
        "3",
        ConfigType::Int {
            min: 1,
            max: i16::MAX as i64,
        },
    ),
    def("share.coordinator.state.topic.min.isr", "2", INT_POS),
    def("share.coordinator.state.topic.segment.bytes", "104857600", INT_POS),
    def(
        "share.coordinator.snapshot.update.records.per.snapshot",
        "500",
        int_range(0, 500),
    ),
    def("share.coordinator.write.timeout.ms", "5000", INT_POS),
    def("share.coordinator.state.topic.prune.interval.ms", "300000", INT_POS),
    def("group.share.assignors", "simple", ConfigType::Str),
    def("group.share.assignment.interval.ms", "1000", INT_NONNEG),
    def("group.share.min.assignment.interval.ms", "0", INT_NONNEG),
    def("group.share.max.assignment.interval.ms", "15000", INT_NONNEG),
    def("group.share.assignor.offload.enable", "true", ConfigType::Bool),
    def("group.share.initialize.retry.interval.ms", "30000", INT_POS),
    // The cluster: roles, the controller quorum, broker sessions, replication.
    def(
        "process.roles",
        "broker,controller",
        ConfigType::OneOf(&["broker,controller", "controller,broker", "broker"]),
    ),
    nodef("controller.quorum.voters", ConfigType::Str),
    nodef("controller.listener", ConfigType::Str),
    // Kafka's name of the controller listener: its protocol (PLAINTEXT or SSL) comes from
    // listener.security.protocol.map, its TLS settings from listener.name.<name>.ssl.*.
    nodef("controller.listener.names", ConfigType::Str),
    nodef("broker.rack", ConfigType::Str),
    def("broker.session.timeout.ms", "9000", INT_POS),
    def("broker.heartbeat.interval.ms", "2000", INT_POS),
    def("replica.lag.time.max.ms", "30000", LONG_POS),
    // Replication throttles (KIP-73), bytes per second; dynamic (config_broker).
    def(
        "leader.replication.throttled.rate",
        "9223372036854775807",
        LONG_NONNEG,
    ),
    def(
        "follower.replication.throttled.rate",
        "9223372036854775807",
        LONG_NONNEG,
    ),
    def("replica.fetch.wait.max.ms", "500", INT_NONNEG),
    def("replica.fetch.min.bytes", "1", INT_POS),
    def("replica.fetch.max.bytes", "1048576", INT_NONNEG),
    def("replica.fetch.response.max.bytes", "10485760", INT_NONNEG),
    def("replica.fetch.backoff.ms", "1000", INT_NONNEG),
    def("replica.socket.timeout.ms", "30000", INT_POS),
    def("auto.leader.rebalance.enable", "true", ConfigType::Bool),
    def("leader.imbalance.check.interval.seconds", "300", LONG_POS),
    def("leader.imbalance.per.broker.percentage", "10", INT_NONNEG),
    def("controlled.shutdown.enable", "true", ConfigType::Bool),
    // Millrace's own: the HTTP listener (metrics, health, readiness) and the metrics' cardinality.
    nodef("millrace.http.listen", ConfigType::Str),
    def("millrace.metrics.partition.level", "true", ConfigType::Bool),
    // Millrace's own: the scrubber of sealed segments (decision 0072).
    def(
        "millrace.log.scrub.interval.ms",
        SCRUB_INTERVAL_MS_DEFAULT,
        LONG_NONNEG,
    ),
    def(
        "millrace.log.scrub.max.bytes.per.sec",
        SCRUB_BYTES_PER_SEC_DEFAULT,
        LONG_POS,
    ),
    // Disk full (issue 30): the low-water mark below which client produce is refused, and where
    // the metadata log lives (Kafka's `metadata.log.dir`; default: under the first log dir).
    def(
        "millrace.log.dir.min.free.bytes",
        MIN_FREE_BYTES_DEFAULT,
        LONG_NONNEG,
    ),
    nodef("metadata.log.dir", ConfigType::Str),
    // Tiered storage (KIP-405, decision 0073): Kafka's keys, then Millrace's object store
    // (`config_tiered.rs` holds the rules between them).
    def("remote.log.storage.system.enable", "false", ConfigType::Bool),
    def("log.local.retention.ms", "-2", LOCAL_RETENTION),
    def("log.local.retention.bytes", "-2", LOCAL_RETENTION),
    def("remote.log.manager.task.interval.ms", "30000", LONG_POS),
    def("remote.fetch.max.wait.ms", "500", INT_POS),
    nodef("millrace.remote.storage.url", ConfigType::Str),
    def(
        "millrace.remote.storage.max.pending.bytes",
        MAX_PENDING_BYTES_DEFAULT,
        LONG_POS,
    ),
    def(
        "millrace.remote.storage.cache.bytes",
        CACHE_BYTES_DEFAULT,
        LONG_POS,
    ),
    def(
        "millrace.remote.storage.orphan.grace.ms",
        ORPHAN_GRACE_MS_DEFAULT,
        LONG_NONNEG,
    ),
    // Share groups (KIP-932; `config_share.rs`): on by default, as in Kafka 4.2+ (decision 0077).
    def("millrace.share.groups.enable", "true", ConfigType::Bool),
    // The HTTP API (REST Proxy v2/v3, stateless consumers; `config_rest.rs`).
    def(
        "millrace.rest.consumer.instance.timeout.ms",
        "300000",
        LONG_POS,
    ),
    def("millrace.rest.consumer.instances.max", "1000", INT_POS),
    def("millrace.rest.request.bytes.max", "67108864", LONG_POS),
    // The HTTP listener's transport and authentication (`config_rest.rs`, docs/http.md): TLS
    // from the `ssl.*` of listener `millrace.http.listener.name` (its `listener.name.<name>.ssl.*`,
    // else the broker-wide `ssl.*`), HTTP Basic against the SASL users.
    def(
        "millrace.http.listener.security.protocol",
        "PLAINTEXT",
        ConfigType::OneOf(&["PLAINTEXT", "SSL"]),
    ),
    def("millrace.http.listener.name", "HTTP", ConfigType::Str),
    def(
        "millrace.http.authentication",
        "none",
        ConfigType::OneOf(&["none", "basic"]),
    ),
    def(
        "millrace.http.authentication.operator.routes",
        "false",
        ConfigType::Bool,
    ),
    // TLS (also per listener, see LISTENER_CONFIGS).
    def("ssl.keystore.type", "JKS", KEYSTORE_TYPES),
    nodef("ssl.keystore.location", ConfigType::Str),
    nodef("ssl.keystore.certificate.chain", ConfigType::Password),
    nodef("ssl.keystore.key", ConfigType::Password),
    nodef("ssl.keystore.password", ConfigType::Password),
    nodef("ssl.key.password", ConfigType::Password),
    def("ssl.truststore.type", "JKS", KEYSTORE_TYPES),
    nodef("ssl.truststore.location", ConfigType::Str),
    nodef("ssl.truststore.certificates", ConfigType::Password),
    nodef("ssl.truststore.password", ConfigType::Password),
    def(
        "ssl.client.auth",
        "none",
        ConfigType::OneOf(&["none", "requested", "required"]),
    ),
    def("ssl.enabled.protocols", "TLSv1.2,TLSv1.3", ConfigType::Str),
    def(
        "ssl.protocol",
        "TLSv1.3",
        ConfigType::OneOf(&["TLSv1.2", "TLSv1.3", "TLS"]),
    ),
    def("ssl.endpoint.identification.algorithm", "https", ConfigType::Str),
    // SASL (also per listener, see LISTENER_CONFIGS; the JAAS lines are listener- and
    // mechanism-prefixed only: `listener.name.<name>.<mechanism>.sasl.jaas.config`).
    def("sasl.enabled.mechanisms", "GSSAPI", ConfigType::Str),
    def("sasl.mechanism.inter.broker.protocol", "GSSAPI", ConfigType::Str),
    def("connections.max.reauth.ms", "0", LONG_NONNEG),
    def("connection.failed.authentication.delay.ms", "100", INT_NONNEG),
    def("sasl.server.max.receive.size", "524288", INT_POS),
    // Kafka's default rule: the principal is the certificate's whole subject name.
    def("ssl.principal.mapping.rules", "DEFAULT", ConfigType::Str),
    // The authorizer: any non-empty class name turns Millrace's ACL authorizer on.
    def("authorizer.class.name", "", ConfigType::Str),
    def("super.users", "", ConfigType::Str),
    def("allow.everyone.if.no.acl.found", "false", ConfigType::Bool),
    // Client quotas: the rate is measured over `quota.window.num` samples of
    // `quota.window.size.seconds`.
    def("quota.window.num", "11", INT_POS),
    def("quota.window.size.seconds", "1", INT_POS),
];

const KEYSTORE_TYPES: ConfigType = ConfigType::OneOf(&["JKS", "PKCS12", "PEM"]);

/// Keys that `listener.name.<name>.<key>` may override for one listener.
pub const LISTENER_CONFIGS: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.truststore.password",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.protocol",
    "ssl.endpoint.identification.algorithm",
    "ssl.principal.mapping.rules",
    "sasl.enabled.mechanisms",
    "connections.max.reauth.ms",
    "sasl.server.max.receive.size",
];

/// `listener.name.<name>.<mechanism>.sasl.jaas.config`: a secret.
static SASL_JAAS_CONFIG: ConfigDef = ConfigDef {
    name: "sasl.jaas.config",
    default: None,
    ty: ConfigType::Password,
};

/// SASL mechanisms whose JAAS line a listener may carry (Kafka's names, lower case).
const JAAS_MECHANISMS: &[&str] = &[
    "plain",
    "scram-sha-256",
    "scram-sha-512",
    "gssapi",
    "oauthbearer",
];

/// The definition of a key, listener-prefixed keys included (`listener.name.<name>.<key>` has
/// `<key>`'s type and no default).
fn any_broker_def(key: &str) -> Option<&'static ConfigDef> {
    if let Some(def) = broker_def(key) {
        return Some(def);
    }
    let rest = key.strip_prefix(crate::listeners::LISTENER_PREFIX)?;
    let (name, suffix) = rest.split_once('.')?;
    if name.is_empty() {
        return None;
    }
    if let Some(mechanism) = suffix.strip_suffix(".sasl.jaas.config") {
        return JAAS_MECHANISMS
            .contains(&mechanism)
            .then_some(&SASL_JAAS_CONFIG);
    }
    if !LISTENER_CONFIGS.contains(&suffix) {
        return None;
    }
    broker_def(suffix)
}

/// Where a topic key's value comes from when the topic does not set it.
#[derive(Debug, Clone, Copy)]
pub enum TopicFallback {
    /// The broker key of the same meaning (Kafka's server synonym), which has the default.
    Broker(&'static str),
    /// No broker key (Kafka's `CONFIGS_WITH_NO_SERVER_DEFAULTS`, e.g. `remote.storage.enable`):
    /// this fixed default, described as DEFAULT_CONFIG with no synonyms.
    Fixed(&'static str),
}

/// One topic-level key and what it falls back to.
#[derive(Debug)]
pub struct TopicConfigDef {
    pub name: &'static str,
    pub ty: ConfigType,
    pub fallback: TopicFallback,
}

const fn topic(name: &'static str, ty: ConfigType, broker_synonym: &'static str) -> TopicConfigDef {
    TopicConfigDef {
        name,
        ty,
        fallback: TopicFallback::Broker(broker_synonym),
    }
}

/// A topic key without a broker synonym, with its own default.
const fn topic_only(name: &'static str, ty: ConfigType, default: &'static str) -> TopicConfigDef {
    TopicConfigDef {
        name,
        ty,
        fallback: TopicFallback::Fixed(default),
    }
}

impl TopicConfigDef {
    /// The broker key this topic key falls back to, if any.
    pub fn broker_synonym(&self) -> Option<&'static str> {
        match self.fallback {
            TopicFallback::Broker(key) => Some(key),
            TopicFallback::Fixed(_) => None,
        }
    }
}

/// Every topic key Millrace accepts at CreateTopics (and, later, AlterConfigs).
pub static TOPIC_CONFIGS: &[TopicConfigDef] = &[
    topic(
        "cleanup.policy",
        ConfigType::CleanupPolicy,
        "log.cleanup.policy",
    ),
    topic("compression.type", COMPRESSION_TYPES, "compression.type"),
    topic(
        "delete.retention.ms",
        LONG_NONNEG,
        "log.cleaner.delete.retention.ms",
    ),
    topic(
        "file.delete.delay.ms",
        LONG_NONNEG,
        "log.segment.delete.delay.ms",
    ),
    topic("flush.messages", LONG_POS, "log.flush.interval.messages"),
    topic("flush.ms", LONG_NONNEG, "log.flush.interval.ms"),
    topic(
        "index.interval.bytes",
        INT_NONNEG,
        "log.index.interval.bytes",
    ),
    topic(
        "max.compaction.lag.ms",
        LONG_POS,
        "log.cleaner.max.compaction.lag.ms",
    ),
    topic("max.message.bytes", BATCH_SIZE, "message.max.bytes"),
    topic(
        "message.timestamp.after.max.ms",
        LONG_NONNEG,
        "log.message.timestamp.after.max.ms",
    ),
    topic(
        "message.timestamp.before.max.ms",
        LONG_NONNEG,
        "log.message.timestamp.before.max.ms",
    ),
    topic(
        "message.timestamp.type",
        TIMESTAMP_TYPES,
        "log.message.timestamp.type",
    ),
    topic(
        "min.cleanable.dirty.ratio",
        ConfigType::Double { min: 0.0, max: 1.0 },
        "log.cleaner.min.cleanable.ratio",
    ),
    topic(
        "min.compaction.lag.ms",
        LONG_NONNEG,
        "log.cleaner.min.compaction.lag.ms",
    ),
    topic("min.insync.replicas", INT_POS, "min.insync.replicas"),
    topic("preallocate", ConfigType::Bool, "log.preallocate"),
    topic(
        "local.retention.bytes",
        LOCAL_RETENTION,
        "log.local.retention.bytes",
    ),
    topic(
        "local.retention.ms",
        LOCAL_RETENTION,
        "log.local.retention.ms",
    ),
    topic_only(
        "leader.replication.throttled.replicas",
        ConfigType::ThrottledReplicas,
        "",
    ),
    topic_only(
        "follower.replication.throttled.replicas",
        ConfigType::ThrottledReplicas,
        "",
    ),
    topic_only("remote.log.copy.disable", ConfigType::Bool, "false"),
    topic_only("remote.log.delete.on.disable", ConfigType::Bool, "false"),
    topic_only("remote.storage.enable", ConfigType::Bool, "false"),
    topic("retention.bytes", LONG_ANY, "log.retention.bytes"),
    topic("retention.ms", LONG_ANY, "log.retention.ms"),
    topic(
        "segment.bytes",
        ConfigType::Int {
            min: 14,
            max: i32::MAX as i64,
        },
        "log.segment.bytes",
    ),
    topic(
        "segment.index.bytes",
        ConfigType::Int {
            min: 4,
            max: i32::MAX as i64,
        },
        "log.index.size.max.bytes",
    ),
    topic("segment.jitter.ms", LONG_NONNEG, "log.roll.jitter.ms"),
    topic("segment.ms", LONG_POS, "log.roll.ms"),
    topic(
        "unclean.leader.election.enable",
        ConfigType::Bool,
        "unclean.leader.election.enable",
    ),
];

impl ConfigType {
    /// Kafka's DescribeConfigs `config_type` code (BOOLEAN 1, STRING 2, INT 3, LONG 5, DOUBLE 6,
    /// LIST 7).
    pub fn kafka_code(self) -> i8 {
        match self {
            ConfigType::Bool => 1,
            ConfigType::Str | ConfigType::OneOf(_) | ConfigType::Listeners => 2,
            ConfigType::Password => 9,
            ConfigType::Int { .. } => 3,
            ConfigType::Long { .. } => 5,
            ConfigType::Double { .. } => 6,
            ConfigType::CleanupPolicy | ConfigType::List | ConfigType::ThrottledReplicas => 7,
        }
    }
}

/// Another key that supplies (or could supply) a config's value, as DescribeConfigs lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigSynonym {
    pub name: String,
    pub value: Option<String>,
    pub source: ConfigSource,
}

/// One described config: effective value, where it comes from, and its synonyms in precedence order.
#[derive(Debug, Clone)]
pub struct ConfigEntry {
    pub name: &'static str,
    pub value: Option<String>,
    pub source: ConfigSource,
    pub read_only: bool,
    /// A secret: its value is never described.
    pub sensitive: bool,
    pub ty: ConfigType,
    pub synonyms: Vec<ConfigSynonym>,
}

/// The broker keys each topic key falls back to, most specific first (Kafka's synonym chains).
fn broker_chain(synonym: &'static str) -> &'static [&'static str] {
    match synonym {
        "log.retention.ms" => &[
            "log.retention.ms",
            "log.retention.minutes",
            "log.retention.hours",
        ],
        "log.roll.ms" => &["log.roll.ms", "log.roll.hours"],
        "log.cleanup.policy" => &["log.cleanup.policy"],
        _ => &[],
    }
}

/// Checks `value` against `ty`; the error names `key`.
pub fn validate_value(key: &str, value: &str, ty: ConfigType) -> Result<(), ConfigError> {
    let v = value.trim();
    match ty {
        ConfigType::Int { min, max } => {
            let n: i64 = v
                .parse()
                .map_err(|_| invalid(key, value, "not an integer"))?;
            check_range(key, value, n, min, max)?;
        }
        ConfigType::Long { min, max } => {
            let n: i64 = v.parse().map_err(|_| invalid(key, value, "not a long"))?;
            check_range(key, value, n, min, max)?;
        }
        ConfigType::Bool => {
            if !matches!(v.to_ascii_lowercase().as_str(), "true" | "false") {
                return Err(invalid(key, value, "expected true or false"));
            }
        }
        ConfigType::Double { min, max } => {
            let n: f64 = v.parse().map_err(|_| invalid(key, value, "not a number"))?;
            if !(min..=max).contains(&n) {
                return Err(invalid(key, value, format!("must be in [{min}, {max}]")));
            }
        }
        ConfigType::OneOf(options) => {
            if !options.contains(&v) {
                return Err(invalid(key, value, format!("must be one of {options:?}")));
            }
        }
        ConfigType::CleanupPolicy => {
            parse_cleanup_policy(v)
                .ok_or_else(|| invalid(key, value, "must be a list of delete, compact"))?;
        }
        ConfigType::Str | ConfigType::Password | ConfigType::List => {}
        ConfigType::ThrottledReplicas => {
            if parse_throttled_replicas(v).is_none() {
                return Err(invalid(
                    key,
                    value,
                    "must be * or a list of PARTITION:BROKER entries",
                ));
            }
        }
        ConfigType::Listeners => {
            crate::listeners::parse_listener_list(key, v)?;
        }
    }
    Ok(())
}

fn check_range(key: &str, value: &str, n: i64, min: i64, max: i64) -> Result<(), ConfigError> {
    if n > max {
        return Err(invalid(key, value, format!("the maximum is {max}")));
    }
    if n < min {
        return Err(invalid(key, value, format!("the minimum is {min}")));
    }
    Ok(())
}

/// Default of `queued.max.request.bytes`: 512 MiB, room for several requests of the default
/// `socket.request.max.bytes` (100 MiB) at once.
const QUEUED_MAX_REQUEST_BYTES_DEFAULT: &str = "536870912";
/// `millrace.log.dir.min.free.bytes` default: 64 MiB. Below it client produce stops, leaving
/// room for what must still be written on a nearly full disk: offset commits (coordinators'
/// appends are not held to the mark), checkpoints and producer snapshots, a segment roll's index
/// files (up to `segment.index.bytes`, 10 MiB, each), a follower catching up on the batches in
/// flight. Small next to any real disk; docs/configuration.md says more.
const MIN_FREE_BYTES_DEFAULT: &str = "67108864";
/// `millrace.log.scrub.interval.ms` default: one full scrub pass a day (decision 0072).
const SCRUB_INTERVAL_MS_DEFAULT: &str = "86400000";
/// `millrace.log.scrub.max.bytes.per.sec` default: 32 MiB/s, about 2.6 TiB a day.
const SCRUB_BYTES_PER_SEC_DEFAULT: &str = "33554432";

/// `delete`, `compact`, `compact,delete` (any order, spaces allowed). Kafka 4 also accepts an empty
/// list, meaning neither.
/// `v` within `min..=i32::MAX`.
fn clamp_i32(v: i64, min: i32) -> i32 {
    i32::try_from(v.clamp(i64::from(min), i64::from(i32::MAX))).unwrap_or(i32::MAX)
}

/// Which replicas a throttle-replica list names (KIP-73): `None` for a malformed list,
/// `Some(Throttled::All)` for `*`, else the (partition, broker) pairs (empty: none).
pub fn parse_throttled_replicas(v: &str) -> Option<ThrottledReplicas> {
    let v = v.trim();
    if v == "*" {
        return Some(ThrottledReplicas::All);
    }
    let mut pairs = Vec::new();
    for entry in v.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (partition, broker) = entry.split_once(':')?;
        pairs.push((
            partition.trim().parse::<i32>().ok()?,
            broker.trim().parse::<i32>().ok()?,
        ));
    }
    Some(ThrottledReplicas::Some(pairs))
}

/// A parsed `*.replication.throttled.replicas` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThrottledReplicas {
    All,
    Some(Vec<(i32, i32)>),
}

impl ThrottledReplicas {
    /// Whether the replica of `partition` on `broker` is throttled.
    pub fn contains(&self, partition: i32, broker: i32) -> bool {
        match self {
            Self::All => true,
            Self::Some(pairs) => pairs.contains(&(partition, broker)),
        }
    }
}

pub fn parse_cleanup_policy(v: &str) -> Option<CleanupPolicy> {
    let mut policy = CleanupPolicy {
        delete: false,
        compact: false,
    };
    for word in v.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        match word {
            "delete" => policy.delete = true,
            "compact" => policy.compact = true,
            _ => return None,
        }
    }
    Some(policy)
}

/// The broker keys that fall back through a chain (Kafka's synonyms), beyond the topic
/// configs' direct broker synonyms.
const CHAIN_KEYS: &[&str] = &[
    "log.retention.minutes",
    "log.retention.hours",
    "log.roll.hours",
];

/// The replication throttles (KIP-73), bytes per second, read by the replica manager's quotas.
const THROTTLE_RATES: &[&str] = &[
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
];

/// Whether `key` may be set as a dynamic broker config, per broker or as the cluster default
/// (`config_broker`): the broker synonyms of topic configs (Kafka's `DynamicLogConfig`) and the
/// replication throttles.
pub fn is_dynamic_broker_key(key: &str) -> bool {
    CHAIN_KEYS.contains(&key)
        || THROTTLE_RATES.contains(&key)
        || TOPIC_CONFIGS
            .iter()
            .filter_map(|d| d.broker_synonym())
            .any(|s| s == key)
}

pub(crate) fn broker_def(key: &str) -> Option<&'static ConfigDef> {
    BROKER_CONFIGS.iter().find(|d| d.name == key)
}

fn topic_def(key: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == key)
}

/// The broker's configuration: every key set by the operator, validated; the rest default.
#[derive(Debug, Clone, Default)]
pub struct BrokerConfig {
    set: BTreeMap<String, String>,
    /// This broker's dynamic configs, then the cluster default's, from the metadata image
    /// (`config_broker`; empty until [`BrokerConfig::with_dynamic_layers`] sets them). They win over
    /// `set`, in that order.
    dynamic_broker: BTreeMap<String, String>,
    dynamic_default: BTreeMap<String, String>,
}

impl BrokerConfig {
    /// Validates and merges layers in order (later layers win). Unknown keys and bad values are
    /// errors naming the key.
    pub fn from_layers<'a>(
        layers: impl IntoIterator<Item = &'a BTreeMap<String, String>>,
    ) -> Result<Self, ConfigError> {
        let mut set = BTreeMap::new();
        for layer in layers {
            for (key, value) in layer {
                let def =
                    any_broker_def(key).ok_or_else(|| ConfigError::UnknownKey(key.clone()))?;
                validate_value(key, value, def.ty)?;
                set.insert(key.clone(), value.trim().to_string());
            }
        }
        let config = Self {
            set,
            ..Self::default()
        };
        config.check_request_budget()?;
        config.check_consumer_group_timeouts()?;
        config.check_consumer_group_assignors()?;
        config.check_share_groups()?;
        config.check_listeners()?;
        config.check_remote_storage()?;
        Ok(config)
    }

    /// `group.consumer.assignors` names only assignors Millrace has (by Kafka class name or short
    /// name); Kafka refuses to start on a class it cannot load.
    fn check_consumer_group_assignors(&self) -> Result<(), ConfigError> {
        let key = "group.consumer.assignors";
        let Some(value) = self.get(key) else {
            return Ok(());
        };
        let mut known = 0;
        for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let short = name.rsplit('.').next().unwrap_or_default();
            let short = short.trim_end_matches("Assignor");
            if !(short.eq_ignore_ascii_case("uniform") || short.eq_ignore_ascii_case("range")) {
                return Err(invalid(
                    key,
                    value,
                    format!("unknown assignor {name}: uniform and range are available"),
                ));
            }
            known += 1;
        }
        if known == 0 {
            return Err(invalid(key, value, "must name at least one assignor"));
        }
        Ok(())
    }

    /// Kafka's start-up checks of the KIP-848 timeouts: each within its min and max, and the
    /// heartbeat interval below the session timeout.
    fn check_consumer_group_timeouts(&self) -> Result<(), ConfigError> {
        let get = |key: &str, fallback: i64| self.long_or(key, fallback);
        for (key, min_key, max_key, fallback, min, max) in [
            (
                "group.consumer.session.timeout.ms",
                "group.consumer.min.session.timeout.ms",
                "group.consumer.max.session.timeout.ms",
                45_000,
                45_000,
                60_000,
            ),
            (
                "group.consumer.heartbeat.interval.ms",
                "group.consumer.min.heartbeat.interval.ms",
                "group.consumer.max.heartbeat.interval.ms",
                5_000,
                5_000,
                15_000,
            ),
        ] {
            let (value, lo, hi) = (get(key, fallback), get(min_key, min), get(max_key, max));
            if value < lo || value > hi {
                return Err(invalid(
                    key,
                    &value.to_string(),
                    format!("must be in [{min_key} = {lo}, {max_key} = {hi}]"),
                ));
            }
        }
        let (interval, session) = (
            get("group.consumer.heartbeat.interval.ms", 5_000),
            get("group.consumer.session.timeout.ms", 45_000),
        );
        if interval >= session {
            return Err(invalid(
                "group.consumer.heartbeat.interval.ms",
                &interval.to_string(),
                format!("must be below group.consumer.session.timeout.ms ({session})"),
            ));
        }
        Ok(())
    }

    /// `queued.max.request.bytes` must hold the largest request plus the small-request reserve,
    /// or a request of `socket.request.max.bytes` could never be read (Kafka's rule is the same
    /// without the reserve).
    fn check_request_budget(&self) -> Result<(), ConfigError> {
        let request_max = self.long_or("socket.request.max.bytes", 104_857_600);
        let budget = self.queued_max_request_bytes();
        let needed = request_max.saturating_add(SMALL_REQUEST_RESERVE_BYTES);
        if i64::try_from(budget).unwrap_or(i64::MAX) < needed {
            return Err(invalid(
                "queued.max.request.bytes",
                &budget.to_string(),
                format!(
                    "must be at least socket.request.max.bytes ({request_max}) plus \
                     {SMALL_REQUEST_RESERVE_BYTES} reserved for small requests, i.e. {needed}"
                ),
            ));
        }
        Ok(())
    }

    /// This config with dynamic layers over it: this broker's own dynamic configs, then the
    /// cluster default's (Kafka's precedence). `config_broker::DynamicBrokerConfigs::layer_over`
    /// picks them from the image.
    pub fn with_dynamic_layers(
        &self,
        own: &BTreeMap<String, String>,
        default: &BTreeMap<String, String>,
    ) -> Self {
        Self {
            set: self.set.clone(),
            dynamic_broker: own.clone(),
            dynamic_default: default.clone(),
        }
    }

    /// The explicit values of a key, highest precedence first: this broker's dynamic value, the
    /// cluster default's, the static one.
    fn layers(&self, key: &str) -> Vec<(&str, ConfigSource)> {
        [
            (&self.dynamic_broker, ConfigSource::DynamicBrokerConfig),
            (
                &self.dynamic_default,
                ConfigSource::DynamicDefaultBrokerConfig,
            ),
            (&self.set, ConfigSource::StaticBrokerConfig),
        ]
        .into_iter()
        .filter_map(|(layer, source)| layer.get(key).map(|v| (v.as_str(), source)))
        .collect()
    }

    /// The value of a key: dynamic, set, or its default; `None` for an unknown or null key.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.dynamic_broker
            .get(key)
            .or_else(|| self.dynamic_default.get(key))
            .or_else(|| self.set.get(key))
            .map(String::as_str)
            .or_else(|| broker_def(key).and_then(|d| d.default))
    }

    /// Where the key's value comes from.
    pub fn source(&self, key: &str) -> ConfigSource {
        self.layers(key)
            .first()
            .map_or(ConfigSource::DefaultConfig, |(_, source)| *source)
    }

    pub(crate) fn long(&self, key: &str) -> Option<i64> {
        self.get(key).and_then(|v| v.parse().ok())
    }

    /// A LONG key's value, `i64::MAX` when unset or unparsable (the replication throttles'
    /// "no bound").
    pub fn long_or_max(&self, key: &str) -> i64 {
        self.long_or(key, i64::MAX)
    }

    pub(crate) fn long_or(&self, key: &str, fallback: i64) -> i64 {
        self.long(key).unwrap_or(fallback)
    }

    pub(crate) fn bool_or(&self, key: &str, fallback: bool) -> bool {
        self.get(key)
            .map(|v| v.eq_ignore_ascii_case("true"))
            .unwrap_or(fallback)
    }

    pub fn node_id(&self) -> i32 {
        self.long_or("node.id", 1) as i32
    }
    pub fn num_partitions(&self) -> i32 {
        self.long_or("num.partitions", 1) as i32
    }
    pub fn default_replication_factor(&self) -> i16 {
        self.long_or("default.replication.factor", 1) as i16
    }
    /// The ACL authorizer, when `authorizer.class.name` names one.
    pub fn authorizer(&self) -> Option<crate::acl::Authorizer> {
        let class = self.get("authorizer.class.name").unwrap_or_default();
        if class.trim().is_empty() {
            return None;
        }
        Some(crate::acl::Authorizer::new(
            self.get("super.users").unwrap_or_default(),
            self.get("allow.everyone.if.no.acl.found")
                .is_some_and(|v| v.eq_ignore_ascii_case("true")),
        ))
    }

    /// `millrace.log.dir.min.free.bytes`: client produce is refused (KAFKA_STORAGE_ERROR) while
    /// a log dir's file system has less free space than this; 0 turns the check off.
    pub fn log_dir_min_free_bytes(&self) -> u64 {
        u64::try_from(self.long_or("millrace.log.dir.min.free.bytes", 0)).unwrap_or(0)
    }

    /// `metadata.log.dir`, if the operator set it.
    pub fn metadata_log_dir(&self) -> Option<String> {
        self.set
            .get("metadata.log.dir")
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    /// `millrace.metrics.partition.level`: serve the series labelled by partition.
    pub fn metrics_partition_level(&self) -> bool {
        self.bool_or("millrace.metrics.partition.level", true)
    }
    pub fn auto_create_topics(&self) -> bool {
        self.bool_or("auto.create.topics.enable", true)
    }
    pub fn delete_topic_enable(&self) -> bool {
        self.bool_or("delete.topic.enable", true)
    }
    pub fn socket_request_max_bytes(&self) -> usize {
        self.long_or("socket.request.max.bytes", 104_857_600) as usize
    }
    /// `queued.max.request.bytes`: the broker-wide budget for bytes of requests being read and
    /// queued.
    pub fn queued_max_request_bytes(&self) -> usize {
        let fallback = QUEUED_MAX_REQUEST_BYTES_DEFAULT.parse().unwrap_or(i64::MAX);
        usize::try_from(self.long_or("queued.max.request.bytes", fallback)).unwrap_or(usize::MAX)
    }
    /// `replica.lag.time.max.ms` (30 s; at least 1 ms).
    pub fn replica_lag_time_max_ms(&self) -> i64 {
        self.long_or("replica.lag.time.max.ms", 30_000).max(1)
    }
    /// `replica.fetch.wait.max.ms` (500 ms; at most 30 s).
    pub fn replica_fetch_wait_max_ms(&self) -> i32 {
        i32::try_from(
            self.long_or("replica.fetch.wait.max.ms", 500)
                .clamp(0, 30_000),
        )
        .unwrap_or(500)
    }
    /// `replica.fetch.min.bytes` (1).
    pub fn replica_fetch_min_bytes(&self) -> i32 {
        clamp_i32(self.long_or("replica.fetch.min.bytes", 1), 0)
    }
    /// `replica.fetch.max.bytes` (1 MiB), per partition.
    pub fn replica_fetch_max_bytes(&self) -> i32 {
        clamp_i32(self.long_or("replica.fetch.max.bytes", 1_048_576), 1)
    }
    /// `replica.fetch.response.max.bytes` (10 MiB).
    pub fn replica_fetch_response_max_bytes(&self) -> i32 {
        clamp_i32(
            self.long_or("replica.fetch.response.max.bytes", 10_485_760),
            1,
        )
    }
    /// `replica.socket.timeout.ms` (30 s; at least 1 ms).
    pub fn replica_socket_timeout(&self) -> Duration {
        Duration::from_millis(
            u64::try_from(self.long_or("replica.socket.timeout.ms", 30_000).max(1))
                .unwrap_or(30_000),
        )
    }
    /// `replica.fetch.backoff.ms` (1 s).
    pub fn replica_fetch_backoff(&self) -> Duration {
        Duration::from_millis(
            u64::try_from(self.long_or("replica.fetch.backoff.ms", 1_000).max(0)).unwrap_or(1_000),
        )
    }
    pub fn max_connections(&self) -> usize {
        self.long_or("max.connections", i32::MAX as i64) as usize
    }
    /// Fetch sessions the broker keeps (KIP-227); 0 = none.
    pub fn fetch_session_slots(&self) -> usize {
        usize::try_from(self.long_or("max.incremental.fetch.session.cache.slots", 1000))
            .unwrap_or(0)
    }
    /// `None` = connections never expire for idleness (Kafka's -1).
    pub fn connections_max_idle(&self) -> Option<Duration> {
        let ms = self.long_or("connections.max.idle.ms", 600_000);
        (ms >= 0).then(|| Duration::from_millis(ms as u64))
    }
    pub fn retention_check_interval(&self) -> Duration {
        Duration::from_millis(self.long_or("log.retention.check.interval.ms", 300_000) as u64)
    }
    pub fn flush_policy(&self) -> FlushPolicy {
        match self.get("log.flush.policy") {
            Some("always") => FlushPolicy::Always,
            Some("never") => FlushPolicy::Never,
            _ => FlushPolicy::Batch,
        }
    }
    pub fn flush_batch_interval(&self) -> Duration {
        Duration::from_millis(self.long_or("log.flush.batch.interval.ms", 2) as u64)
    }
    /// `millrace.log.scrub.interval.ms`: time between the starts of two scrub passes (zero: none).
    pub fn log_scrub_interval(&self) -> Duration {
        Duration::from_millis(
            self.long_or("millrace.log.scrub.interval.ms", 86_400_000)
                .max(0) as u64,
        )
    }

    /// `millrace.log.scrub.max.bytes.per.sec`: the scrubber's read rate limit.
    pub fn log_scrub_bytes_per_sec(&self) -> u64 {
        self.long_or("millrace.log.scrub.max.bytes.per.sec", 33_554_432)
            .max(1) as u64
    }

    pub fn max_open_files(&self) -> usize {
        self.long_or("log.max.open.files", 1024) as usize
    }
    /// A key the operator set explicitly (no default).
    pub fn explicit(&self, key: &str) -> Option<&str> {
        self.set.get(key).map(String::as_str)
    }

    /// Every entry of `log.dirs` (comma-separated, trimmed, empty entries skipped) or `log.dir`,
    /// in order; empty if the operator set neither. Kafka's rule: `log.dirs` wins over `log.dir`.
    pub fn log_dirs(&self) -> Vec<String> {
        self.set
            .get("log.dirs")
            .or_else(|| self.set.get("log.dir"))
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `log.dirs` (first entry) or `log.dir`, if the operator set either.
    pub fn log_dir(&self) -> Option<String> {
        self.set
            .get("log.dirs")
            .or_else(|| self.set.get("log.dir"))
            .and_then(|v| v.split(',').next())
            .map(|s| s.trim().to_string())
    }

    /// The broker-level default of a topic key, following Kafka's synonym chains.
    pub fn topic_default(&self, topic_key: &str) -> Option<String> {
        let def = topic_def(topic_key)?;
        let synonym = match def.fallback {
            TopicFallback::Fixed(default) => return Some(default.to_string()),
            TopicFallback::Broker(synonym) => synonym,
        };
        let value = match synonym {
            "log.retention.ms" => self
                .long("log.retention.ms")
                .or_else(|| self.long("log.retention.minutes").map(|m| m * 60_000))
                .unwrap_or(self.long_or("log.retention.hours", 168) * 3_600_000)
                .to_string(),
            "log.roll.ms" => self
                .long("log.roll.ms")
                .unwrap_or(self.long_or("log.roll.hours", 168) * 3_600_000)
                .to_string(),
            "log.flush.interval.ms" => self
                .long("log.flush.interval.ms")
                .unwrap_or(i64::MAX)
                .to_string(),
            synonym => self.get(synonym)?.to_string(),
        };
        Some(value)
    }

    /// The cluster-wide dynamic defaults alone (DescribeConfigs of the BROKER resource "",
    /// `kafka-configs --entity-default --describe`), as Kafka answers it.
    pub fn describe_broker_default(&self) -> Vec<ConfigEntry> {
        BROKER_CONFIGS
            .iter()
            .filter_map(|d| {
                let v = self.dynamic_default.get(d.name)?;
                let sensitive = matches!(d.ty, ConfigType::Password);
                let shown = (!sensitive).then(|| v.clone());
                Some(ConfigEntry {
                    name: d.name,
                    value: shown.clone(),
                    source: ConfigSource::DynamicDefaultBrokerConfig,
                    read_only: false,
                    sensitive,
                    ty: d.ty,
                    synonyms: vec![ConfigSynonym {
                        name: d.name.to_string(),
                        value: shown,
                        source: ConfigSource::DynamicDefaultBrokerConfig,
                    }],
                })
            })
            .collect()
    }

    /// Every broker key with its value and source (DescribeConfigs for a BROKER resource).
    pub fn describe_broker(&self) -> Vec<ConfigEntry> {
        BROKER_CONFIGS
            .iter()
            .map(|d| {
                // A secret's value is never sent (Kafka: null value, is_sensitive).
                let sensitive = matches!(d.ty, ConfigType::Password);
                let shown = |v: &str| (!sensitive).then(|| v.to_string());
                let mut synonyms: Vec<ConfigSynonym> = self
                    .layers(d.name)
                    .into_iter()
                    .map(|(v, source)| ConfigSynonym {
                        name: d.name.to_string(),
                        value: shown(v),
                        source,
                    })
                    .collect();
                if let Some(v) = d.default {
                    synonyms.push(ConfigSynonym {
                        name: d.name.to_string(),
                        value: shown(v),
                        source: ConfigSource::DefaultConfig,
                    });
                }
                ConfigEntry {
                    name: d.name,
                    value: self.get(d.name).and_then(shown),
                    source: self.source(d.name),
                    read_only: !is_dynamic_broker_key(d.name),
                    sensitive,
                    ty: d.ty,
                    synonyms,
                }
            })
            .collect()
    }

    /// Every topic key with its effective value for a topic with `overrides` (DescribeConfigs for
    /// a TOPIC resource). Kafka's rule: the topic's own value, else the broker's, else the default.
    pub fn describe_topic(&self, overrides: &TopicConfigs) -> Vec<ConfigEntry> {
        TOPIC_CONFIGS
            .iter()
            .map(|d| {
                let mut synonyms = Vec::new();
                if let Some(v) = overrides.get(d.name) {
                    synonyms.push(ConfigSynonym {
                        name: d.name.to_string(),
                        value: Some(v.to_string()),
                        source: ConfigSource::DynamicTopicConfig,
                    });
                }
                let chain: &[&'static str] = match &d.fallback {
                    TopicFallback::Fixed(_) => &[],
                    TopicFallback::Broker(synonym) => match broker_chain(synonym) {
                        [] => std::slice::from_ref(synonym),
                        chain => chain,
                    },
                };
                // Kafka's order: each layer (this broker's dynamic, the cluster default's,
                // static), the chain's keys most specific first within it.
                for source in [
                    ConfigSource::DynamicBrokerConfig,
                    ConfigSource::DynamicDefaultBrokerConfig,
                    ConfigSource::StaticBrokerConfig,
                ] {
                    for key in chain {
                        if let Some((v, _)) =
                            self.layers(key).into_iter().find(|(_, s)| *s == source)
                        {
                            synonyms.push(ConfigSynonym {
                                name: key.to_string(),
                                value: Some(v.to_string()),
                                source,
                            });
                        }
                    }
                }
                if let Some(default) = chain
                    .iter()
                    .find_map(|k| broker_def(k).and_then(|b| b.default.map(|v| (*k, v))))
                {
                    synonyms.push(ConfigSynonym {
                        name: default.0.to_string(),
                        value: Some(default.1.to_string()),
                        source: ConfigSource::DefaultConfig,
                    });
                }
                let (value, source) = match overrides.get(d.name) {
                    Some(v) => (Some(v.to_string()), ConfigSource::DynamicTopicConfig),
                    None => {
                        let source = synonyms
                            .iter()
                            .find(|s| s.source != ConfigSource::DynamicTopicConfig)
                            .map_or(ConfigSource::DefaultConfig, |s| s.source);
                        (self.topic_default(d.name), source)
                    }
                };
                ConfigEntry {
                    name: d.name,
                    value,
                    source,
                    read_only: false,
                    sensitive: false,
                    ty: d.ty,
                    synonyms,
                }
            })
            .collect()
    }

    /// A topic key's value: the topic's override, else the broker default (synonyms followed).
    pub fn topic_value(&self, overrides: &TopicConfigs, key: &str) -> Option<String> {
        overrides
            .get(key)
            .map(str::to_string)
            .or_else(|| self.topic_default(key))
    }

    /// A topic's `min.insync.replicas` (at least 1) — the one place it is parsed.
    pub fn min_insync_replicas(&self, overrides: &TopicConfigs) -> usize {
        self.topic_value(overrides, "min.insync.replicas")
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(1)
            .max(1)
    }

    /// A topic's `unclean.leader.election.enable` — the one place it is parsed.
    pub fn unclean_leader_election_enable(&self, overrides: &TopicConfigs) -> bool {
        self.topic_value(overrides, "unclean.leader.election.enable")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    }

    /// The store's view of a topic: its overrides on top of the broker defaults.
    pub fn log_config(&self, overrides: &TopicConfigs) -> LogConfig {
        let get = |key: &str| -> String {
            overrides
                .get(key)
                .map(str::to_string)
                .or_else(|| self.topic_default(key))
                .unwrap_or_default()
        };
        let long = |key: &str, fallback: i64| get(key).trim().parse::<i64>().unwrap_or(fallback);
        let flag = |key: &str| get(key).trim().eq_ignore_ascii_case("true");
        let defaults = LogConfig::default();
        LogConfig {
            segment_bytes: long("segment.bytes", defaults.segment_bytes as i64).max(14) as u64,
            segment_ms: long("segment.ms", defaults.segment_ms),
            segment_index_bytes: long("segment.index.bytes", defaults.segment_index_bytes as i64)
                .max(4) as u64,
            index_interval_bytes: long("index.interval.bytes", defaults.index_interval_bytes as i64)
                .clamp(0, u32::MAX as i64) as u32,
            // Clamped again here: metadata written before the bound existed may hold more.
            max_message_bytes: long("max.message.bytes", defaults.max_message_bytes as i64)
                .clamp(0, MESSAGE_MAX_BYTES_MAX) as u32,
            retention_ms: long("retention.ms", defaults.retention_ms),
            retention_bytes: long("retention.bytes", defaults.retention_bytes),
            cleanup_policy: parse_cleanup_policy(&get("cleanup.policy"))
                .unwrap_or(defaults.cleanup_policy),
            delete_retention_ms: long("delete.retention.ms", defaults.delete_retention_ms),
            min_cleanable_dirty_ratio: get("min.cleanable.dirty.ratio")
                .trim()
                .parse()
                .unwrap_or(defaults.min_cleanable_dirty_ratio),
            min_compaction_lag_ms: long("min.compaction.lag.ms", defaults.min_compaction_lag_ms),
            message_timestamp_type: if get("message.timestamp.type") == "LogAppendTime" {
                TimestampType::LogAppendTime
            } else {
                TimestampType::CreateTime
            },
            message_timestamp_before_max_ms: long(
                "message.timestamp.before.max.ms",
                defaults.message_timestamp_before_max_ms,
            ),
            message_timestamp_after_max_ms: long(
                "message.timestamp.after.max.ms",
                defaults.message_timestamp_after_max_ms,
            ),
            flush_messages: long("flush.messages", defaults.flush_messages),
            flush_ms: long("flush.ms", defaults.flush_ms),
            remote_storage_enable: flag("remote.storage.enable"),
            local_retention_ms: long("local.retention.ms", defaults.local_retention_ms),
            local_retention_bytes: long("local.retention.bytes", defaults.local_retention_bytes),
            remote_log_copy_disable: flag("remote.log.copy.disable"),
            remote_log_delete_on_disable: flag("remote.log.delete.on.disable"),
        }
    }
}

/// Kafka's listener rules over a whole configuration (what a listener is, and how one is written,
/// is `listeners.rs`):
///
/// - Each listener name maps to a security protocol through `listener.security.protocol.map` (by
///   default each protocol's own name maps to itself), so `MTLS://…` with `MTLS:SSL` is a second
///   TLS listener with its own settings.
/// - `advertised.listeners` names a subset of the listeners; a listener it leaves out advertises
///   its own address.
/// - The inter-broker listener is `inter.broker.listener.name`, else the listener named after
///   `security.inter.broker.protocol` (PLAINTEXT). Brokers connect to it with its protocol's TLS
///   and SASL settings (`millrace_frontend::inter_broker`).
/// - Per-listener settings: `listener.name.<name>.<key>` (the name in lower case) overrides `<key>`
///   for that listener only ([`BrokerConfig::listener_get`]).
impl BrokerConfig {
    /// `listener.security.protocol.map`: listener name (upper case) → protocol.
    pub fn security_protocol_map(&self) -> Result<BTreeMap<String, SecurityProtocol>, ConfigError> {
        let key = "listener.security.protocol.map";
        let value = self.get(key).unwrap_or(SECURITY_PROTOCOL_MAP_DEFAULT);
        let mut map = BTreeMap::new();
        for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, protocol) = entry
                .split_once(':')
                .ok_or_else(|| invalid(key, value, format!("{entry}: expected NAME:PROTOCOL")))?;
            let protocol = SecurityProtocol::parse(protocol).ok_or_else(|| {
                invalid(
                    key,
                    value,
                    format!("{entry}: unknown security protocol {protocol}"),
                )
            })?;
            if map
                .insert(name.trim().to_ascii_uppercase(), protocol)
                .is_some()
            {
                return Err(invalid(key, value, format!("{name} appears twice")));
            }
        }
        Ok(map)
    }

    /// The listeners to bind, in the order given, each with its security protocol.
    pub fn listeners(&self) -> Result<Vec<Listener>, ConfigError> {
        let key = "listeners";
        let value = self.get(key).unwrap_or(LISTENERS_DEFAULT);
        let map = self.security_protocol_map()?;
        let addresses = parse_listener_list(key, value)?;
        if addresses.is_empty() {
            return Err(invalid(key, value, "no listener"));
        }
        let mut out = Vec::with_capacity(addresses.len());
        for address in addresses {
            let protocol = *map.get(&address.name).ok_or_else(|| {
                invalid(
                    key,
                    value,
                    format!(
                        "listener {}: no security protocol for it in \
                         listener.security.protocol.map",
                        address.name
                    ),
                )
            })?;
            if address.port != 0
                && out
                    .iter()
                    .any(|l: &Listener| l.address.port == address.port)
            {
                return Err(invalid(
                    key,
                    value,
                    format!("port {} is used by two listeners", address.port),
                ));
            }
            out.push(Listener { address, protocol });
        }
        Ok(out)
    }

    /// `advertised.listeners` as set (each a listener's name); listeners it leaves out advertise
    /// their bound address.
    pub fn advertised_listeners(&self) -> Result<Vec<ListenerAddress>, ConfigError> {
        let key = "advertised.listeners";
        let Some(value) = self.explicit(key) else {
            return Ok(Vec::new());
        };
        let listeners = self.listeners()?;
        let advertised = parse_listener_list(key, value)?;
        for a in &advertised {
            if !listeners.iter().any(|l| l.address.name == a.name) {
                return Err(invalid(
                    key,
                    value,
                    format!("{} is not a listener in 'listeners'", a.name),
                ));
            }
            if a.host == "0.0.0.0" || a.host == "::" {
                return Err(invalid(
                    key,
                    value,
                    format!("{}: a wildcard address cannot be advertised", a.name),
                ));
            }
        }
        Ok(advertised)
    }

    /// The listener the brokers reach each other on.
    pub fn inter_broker_listener(&self) -> Result<Listener, ConfigError> {
        let listeners = self.listeners()?;
        let (key, name) = match self.explicit("inter.broker.listener.name") {
            Some(name) => (
                "inter.broker.listener.name",
                name.trim().to_ascii_uppercase(),
            ),
            None => (
                "security.inter.broker.protocol",
                self.get("security.inter.broker.protocol")
                    .unwrap_or("PLAINTEXT")
                    .trim()
                    .to_ascii_uppercase(),
            ),
        };
        let listener = listeners
            .into_iter()
            .find(|l| l.address.name == name)
            .ok_or_else(|| {
                invalid(
                    key,
                    &name,
                    "must name a listener in 'listeners' (the brokers' own listener)",
                )
            })?;
        Ok(listener)
    }

    /// A setting for one listener: `listener.name.<name>.<key>` if set, else `<key>` (set or
    /// default), as Kafka resolves listener-prefixed configs.
    pub fn listener_get(&self, listener: &str, key: &str) -> Option<&str> {
        let prefixed = format!("{LISTENER_PREFIX}{}.{key}", listener.to_ascii_lowercase());
        self.explicit(&prefixed).or_else(|| self.get(key))
    }

    /// Every listener rule at once; run when the config is built.
    pub(crate) fn check_listeners(&self) -> Result<(), ConfigError> {
        self.advertised_listeners()?;
        self.inter_broker_listener()?;
        Ok(())
    }
}

/// A list config's value after an APPEND (items not yet in it, at the end) or a SUBTRACT (every
/// copy of each item removed) of `change`'s comma-separated items to `current`.
pub(crate) fn list_with_change(current: &str, change: &ConfigChange) -> String {
    let mut items: Vec<String> = current
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let given = change.value.as_deref().unwrap_or("");
    for item in given.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if change.op == ConfigOp::Append {
            if !items.iter().any(|i| i == item) {
                items.push(item.to_string());
            }
        } else {
            items.retain(|i| i != item);
        }
    }
    items.join(",")
}

/// IncrementalAlterConfigs operation (Kafka codes 0..=3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigOp {
    Set,
    Delete,
    Append,
    Subtract,
}

impl ConfigOp {
    pub fn from_code(code: i8) -> Option<Self> {
        match code {
            0 => Some(Self::Set),
            1 => Some(Self::Delete),
            2 => Some(Self::Append),
            3 => Some(Self::Subtract),
            _ => None,
        }
    }
}

/// One IncrementalAlterConfigs change.
#[derive(Debug, Clone)]
pub struct ConfigChange {
    pub name: String,
    pub op: ConfigOp,
    pub value: Option<String>,
}

/// A topic's config overrides (only the keys set on that topic), validated.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TopicConfigs(BTreeMap<String, String>);

impl TopicConfigs {
    /// Validates every key and value; unknown keys are errors, as in Kafka.
    pub fn new(entries: BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let mut out = BTreeMap::new();
        for (key, value) in entries {
            let def = topic_def(&key).ok_or_else(|| ConfigError::UnknownKey(key.clone()))?;
            validate_value(&key, &value, def.ty)?;
            out.insert(key, value.trim().to_string());
        }
        Ok(Self(out))
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// Applies IncrementalAlterConfigs operations and validates the result. APPEND and SUBTRACT
    /// start from the topic's override or, without one, from `default` (the broker's value), as
    /// Kafka does: appending `compact` to a topic that inherits `delete` gives `delete,compact`.
    pub fn with_changes(
        &self,
        changes: &[ConfigChange],
        default: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let mut next = self.0.clone();
        for change in changes {
            let def = topic_def(&change.name)
                .ok_or_else(|| ConfigError::UnknownKey(change.name.clone()))?;
            let list_only = |op: &str| {
                if matches!(def.ty, ConfigType::CleanupPolicy) {
                    Ok(())
                } else {
                    Err(invalid(
                        &change.name,
                        change.value.as_deref().unwrap_or(""),
                        format!("{op} applies only to list configs"),
                    ))
                }
            };
            match change.op {
                ConfigOp::Set => {
                    let value = change
                        .value
                        .clone()
                        .ok_or_else(|| invalid(&change.name, "null", "SET needs a value"))?;
                    next.insert(change.name.clone(), value);
                }
                ConfigOp::Delete => {
                    next.remove(&change.name);
                }
                ConfigOp::Append | ConfigOp::Subtract => {
                    list_only(if change.op == ConfigOp::Append {
                        "APPEND"
                    } else {
                        "SUBTRACT"
                    })?;
                    let current = next
                        .get(&change.name)
                        .cloned()
                        .or_else(|| default(&change.name))
                        .unwrap_or_default();
                    next.insert(change.name.clone(), list_with_change(&current, change));
                }
            }
        }
        Self::new(next)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Every known topic key with its effective value and source, in name order.
    pub fn describe<'a>(
        &'a self,
        broker: &'a BrokerConfig,
    ) -> impl Iterator<Item = (&'static str, Option<String>, ConfigSource)> + 'a {
        TOPIC_CONFIGS.iter().map(move |d| match self.get(d.name) {
            Some(v) => (
                d.name,
                Some(v.to_string()),
                ConfigSource::DynamicTopicConfig,
            ),
            None => (
                d.name,
                broker.topic_default(d.name),
                d.broker_synonym()
                    .map_or(ConfigSource::DefaultConfig, |k| broker.source(k)),
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn unknown_broker_key_is_named() {
        let err = BrokerConfig::from_layers([&layer(&[("no.such.key", "1")])]).unwrap_err();
        assert_eq!(err, ConfigError::UnknownKey("no.such.key".into()));
    }

    #[test]
    fn bad_value_is_named() {
        let err = BrokerConfig::from_layers([&layer(&[("num.partitions", "zero")])]).unwrap_err();
        assert!(
            matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "num.partitions")
        );
        assert!(BrokerConfig::from_layers([&layer(&[("num.partitions", "0")])]).is_err());
    }

    #[test]
    fn later_layers_win() {
        let c = BrokerConfig::from_layers([
            &layer(&[("num.partitions", "3")]),
            &layer(&[("num.partitions", "5")]),
        ])
        .unwrap();
        assert_eq!(c.num_partitions(), 5);
    }

    #[test]
    fn retention_synonyms() {
        let c = BrokerConfig::default();
        assert_eq!(
            c.topic_default("retention.ms").as_deref(),
            Some("604800000")
        );
        let c = BrokerConfig::from_layers([&layer(&[("log.retention.minutes", "2")])]).unwrap();
        assert_eq!(c.topic_default("retention.ms").as_deref(), Some("120000"));
        let c = BrokerConfig::from_layers([&layer(&[
            ("log.retention.minutes", "2"),
            ("log.retention.ms", "5"),
        ])])
        .unwrap();
        assert_eq!(c.log_config(&TopicConfigs::default()).retention_ms, 5);
    }

    #[test]
    fn topic_overrides_reach_the_log_config() {
        let t = TopicConfigs::new(layer(&[
            ("cleanup.policy", "compact"),
            ("message.timestamp.type", "LogAppendTime"),
            ("segment.bytes", "1024"),
        ]))
        .unwrap();
        let lc = BrokerConfig::default().log_config(&t);
        assert!(lc.cleanup_policy.compact && !lc.cleanup_policy.delete);
        assert!(matches!(
            lc.message_timestamp_type,
            TimestampType::LogAppendTime
        ));
        assert_eq!(lc.segment_bytes, 1024);
    }

    #[test]
    fn describe_topic_sources_and_synonyms() {
        let broker = BrokerConfig::from_layers([&layer(&[("log.retention.hours", "1")])]).unwrap();
        let topic = TopicConfigs::new(layer(&[("cleanup.policy", "compact")])).unwrap();
        let entries = broker.describe_topic(&topic);
        let find = |n: &str| entries.iter().find(|e| e.name == n).unwrap().clone();
        let cp = find("cleanup.policy");
        assert_eq!(cp.value.as_deref(), Some("compact"));
        assert_eq!(cp.source, ConfigSource::DynamicTopicConfig);
        assert_eq!(cp.synonyms.len(), 2);
        let rm = find("retention.ms");
        assert_eq!(rm.value.as_deref(), Some("3600000"));
        assert_eq!(rm.source, ConfigSource::StaticBrokerConfig);
        let sb = find("segment.bytes");
        assert_eq!(sb.source, ConfigSource::DefaultConfig);
    }

    #[test]
    fn describe_tiered_storage_keys_as_kafka() {
        let broker =
            BrokerConfig::from_layers([&layer(&[("log.local.retention.bytes", "1000")])]).unwrap();
        let topic = TopicConfigs::new(layer(&[("local.retention.ms", "60000")])).unwrap();
        let entries = broker.describe_topic(&topic);
        let find = |n: &str| entries.iter().find(|e| e.name == n).unwrap().clone();
        // No broker synonym (Kafka's configs without a server default): the default, no synonyms.
        for key in [
            "remote.storage.enable",
            "remote.log.copy.disable",
            "remote.log.delete.on.disable",
        ] {
            let e = find(key);
            assert_eq!(e.value.as_deref(), Some("false"), "{key}");
            assert_eq!(e.source, ConfigSource::DefaultConfig, "{key}");
            assert!(e.synonyms.is_empty(), "{key}: {:?}", e.synonyms);
            assert_eq!(e.ty.kafka_code(), 1, "{key} is a BOOLEAN");
        }
        let ms = find("local.retention.ms");
        assert_eq!(ms.value.as_deref(), Some("60000"));
        assert_eq!(ms.source, ConfigSource::DynamicTopicConfig);
        assert_eq!(ms.ty.kafka_code(), 5, "LONG");
        let names: Vec<_> = ms.synonyms.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["local.retention.ms", "log.local.retention.ms"]);
        assert_eq!(ms.synonyms[1].value.as_deref(), Some("-2"));
        let bytes = find("local.retention.bytes");
        assert_eq!(bytes.value.as_deref(), Some("1000"));
        assert_eq!(bytes.source, ConfigSource::StaticBrokerConfig);
        // The broker resource lists the new keys with their defaults.
        let described = BrokerConfig::default().describe_broker();
        for (key, default) in [
            ("remote.log.storage.system.enable", Some("false")),
            ("log.local.retention.ms", Some("-2")),
            ("log.local.retention.bytes", Some("-2")),
            ("remote.log.manager.task.interval.ms", Some("30000")),
            ("remote.fetch.max.wait.ms", Some("500")),
            ("millrace.remote.storage.url", None),
            (
                "millrace.remote.storage.max.pending.bytes",
                Some("10737418240"),
            ),
            ("millrace.remote.storage.cache.bytes", Some("67108864")),
            ("millrace.remote.storage.orphan.grace.ms", Some("600000")),
        ] {
            let e = described
                .iter()
                .find(|e| e.name == key)
                .unwrap_or_else(|| panic!("{key} not described"));
            assert_eq!(e.value.as_deref(), default, "{key}");
            assert_eq!(e.source, ConfigSource::DefaultConfig, "{key}");
        }
        // And the store sees them.
        let t = TopicConfigs::new(layer(&[
            ("remote.storage.enable", "true"),
            ("remote.log.copy.disable", "true"),
            ("local.retention.ms", "60000"),
        ]))
        .unwrap();
        let lc = broker.log_config(&t);
        assert!(lc.remote_storage_enable && lc.remote_log_copy_disable);
        assert!(!lc.remote_log_delete_on_disable);
        assert_eq!(
            (lc.local_retention_ms, lc.local_retention_bytes),
            (60_000, 1000)
        );
        assert!(TopicConfigs::new(layer(&[("local.retention.ms", "-3")])).is_err());
    }

    #[test]
    fn incremental_changes() {
        let t = TopicConfigs::new(layer(&[
            ("cleanup.policy", "delete"),
            ("retention.ms", "5"),
        ]))
        .unwrap();
        let change = |name: &str, op, value: Option<&str>| ConfigChange {
            name: name.into(),
            op,
            value: value.map(str::to_string),
        };
        let none = |_: &str| None;
        let t2 = t
            .with_changes(
                &[
                    change("cleanup.policy", ConfigOp::Append, Some("compact")),
                    change("retention.ms", ConfigOp::Delete, None),
                    change("segment.bytes", ConfigOp::Set, Some("1000")),
                ],
                none,
            )
            .unwrap();
        assert_eq!(t2.get("cleanup.policy"), Some("delete,compact"));
        assert_eq!(t2.get("retention.ms"), None);
        assert_eq!(t2.get("segment.bytes"), Some("1000"));
        let t3 = t2
            .with_changes(
                &[change("cleanup.policy", ConfigOp::Subtract, Some("delete"))],
                none,
            )
            .unwrap();
        assert_eq!(t3.get("cleanup.policy"), Some("compact"));
        assert!(t
            .with_changes(&[change("retention.ms", ConfigOp::Append, Some("1"))], none)
            .is_err());
        assert!(t
            .with_changes(&[change("segment.bytes", ConfigOp::Set, Some("x"))], none)
            .is_err());
        // Without an override, APPEND and SUBTRACT start from the inherited value.
        let broker = BrokerConfig::default();
        let inherited = |op, value| {
            TopicConfigs::default()
                .with_changes(&[change("cleanup.policy", op, Some(value))], |k| {
                    broker.topic_default(k)
                })
                .unwrap()
        };
        assert_eq!(
            inherited(ConfigOp::Append, "compact").get("cleanup.policy"),
            Some("delete,compact")
        );
        assert_eq!(
            inherited(ConfigOp::Subtract, "delete").get("cleanup.policy"),
            Some("")
        );
    }

    #[test]
    fn batch_size_keys_stop_at_the_store_bound() {
        let max = crate::limits::MESSAGE_MAX_BYTES_MAX;
        let above = (max + 1).to_string();
        for key in [
            "message.max.bytes",
            "replica.fetch.max.bytes",
            "socket.request.max.bytes",
        ] {
            let limit = if key == "socket.request.max.bytes" {
                SOCKET_REQUEST_MAX_BYTES_MAX
            } else {
                max
            };
            let too_big = (limit + 1).to_string();
            let err = BrokerConfig::from_layers([&layer(&[
                (key, too_big.as_str()),
                ("queued.max.request.bytes", "68719476736"),
            ])])
            .unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains(key) && text.contains(&limit.to_string()),
                "{key}: {text}"
            );
            let at_limit = limit.to_string();
            assert!(
                BrokerConfig::from_layers([&layer(&[
                    (key, at_limit.as_str()),
                    ("queued.max.request.bytes", "68719476736"),
                ])])
                .is_ok(),
                "{key} at its maximum"
            );
        }
        let err = TopicConfigs::new(layer(&[("max.message.bytes", above.as_str())])).unwrap_err();
        assert!(
            err.to_string().contains("max.message.bytes")
                && err.to_string().contains(&max.to_string()),
            "{err}"
        );
        assert!(TopicConfigs::new(layer(&[("max.message.bytes", &max.to_string())])).is_ok());
    }

    #[test]
    fn consumer_group_timeouts_are_checked_as_kafka() {
        assert!(BrokerConfig::from_layers([&layer(&[])]).is_ok());
        let err =
            BrokerConfig::from_layers([&layer(&[("group.consumer.session.timeout.ms", "6000")])])
                .unwrap_err();
        assert!(
            err.to_string()
                .contains("group.consumer.min.session.timeout.ms"),
            "{err}"
        );
        assert!(BrokerConfig::from_layers([&layer(&[
            ("group.consumer.session.timeout.ms", "6000"),
            ("group.consumer.min.session.timeout.ms", "6000"),
            ("group.consumer.heartbeat.interval.ms", "500"),
            ("group.consumer.min.heartbeat.interval.ms", "500"),
        ])])
        .is_ok());
        let err = BrokerConfig::from_layers([&layer(&[
            ("group.consumer.session.timeout.ms", "6000"),
            ("group.consumer.min.session.timeout.ms", "6000"),
            ("group.consumer.heartbeat.interval.ms", "6000"),
            ("group.consumer.min.heartbeat.interval.ms", "500"),
        ])])
        .unwrap_err();
        assert!(err.to_string().contains("below"), "{err}");
        assert!(BrokerConfig::from_layers([&layer(&[(
            "group.consumer.assignors",
            "range,org.apache.kafka.coordinator.group.assignor.UniformAssignor"
        )])])
        .is_ok());
        assert!(BrokerConfig::from_layers([&layer(&[(
            "group.consumer.assignors",
            "com.example.MyAssignor"
        )])])
        .is_err());
    }

    #[test]
    fn request_budget_holds_the_largest_request() {
        let c = BrokerConfig::default();
        assert!(c.queued_max_request_bytes() >= c.socket_request_max_bytes());
        let err = BrokerConfig::from_layers([&layer(&[("queued.max.request.bytes", "104857600")])])
            .unwrap_err();
        assert!(
            err.to_string().contains("queued.max.request.bytes")
                && err.to_string().contains("socket.request.max.bytes"),
            "{err}"
        );
        assert!(
            BrokerConfig::from_layers([&layer(&[("queued.max.request.bytes", "-1"),])]).is_err()
        );
        let c = BrokerConfig::from_layers([&layer(&[
            ("socket.request.max.bytes", "1048576"),
            ("queued.max.request.bytes", "20971520"),
        ])])
        .unwrap();
        assert_eq!(c.queued_max_request_bytes(), 20_971_520);
    }

    #[test]
    fn listeners_must_use_a_served_security_protocol() {
        for ok in [
            "PLAINTEXT://127.0.0.1:9092",
            "plaintext://:9092",
            "127.0.0.1:9092",
        ] {
            assert!(
                BrokerConfig::from_layers([&layer(&[("listeners", ok)])]).is_ok(),
                "{ok}"
            );
        }
        // A listener name without a security protocol in the map is refused.
        for (key, bad) in [
            ("listeners", "CLIENTS://:9092"),
            ("listeners", "PLAINTEXT://:9092,INTERNAL://:9093"),
        ] {
            let err = BrokerConfig::from_layers([&layer(&[(key, bad)])]).unwrap_err();
            assert!(
                matches!(err, ConfigError::InvalidValue { key: ref k, .. } if k == key),
                "{bad}: {err}"
            );
            assert!(err.to_string().contains("no security protocol"), "{err}");
        }
        // SASL listener names map to SASL; mechanism-prefixed JAAS lines are secrets.
        let c = BrokerConfig::from_layers([&layer(&[
            ("listeners", "PLAINTEXT://:9092,SASL_SSL://:9093"),
            (
                "listener.name.sasl_ssl.plain.sasl.jaas.config",
                "M required user_a=\"b\";",
            ),
        ])])
        .unwrap();
        assert!(c
            .explicit("listener.name.sasl_ssl.plain.sasl.jaas.config")
            .is_some());
        assert!(BrokerConfig::from_layers([&layer(&[(
            "listener.name.sasl_ssl.kerberos.sasl.jaas.config",
            "x"
        )])])
        .is_err());
    }

    fn config(pairs: &[(&str, &str)]) -> Result<BrokerConfig, ConfigError> {
        let layer: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        BrokerConfig::from_layers([&layer])
    }

    #[test]
    fn listeners_map_names_to_protocols() {
        let c = config(&[
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9092,SSL://:9093,mtls://[::1]:9094",
            ),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
            ),
        ])
        .unwrap();
        let l = c.listeners().unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l[1].address.host, "0.0.0.0");
        assert_eq!(l[1].protocol, SecurityProtocol::Ssl);
        assert_eq!(l[2].address.name, "MTLS");
        assert_eq!(l[2].address.host, "::1");
        assert_eq!(l[2].protocol, SecurityProtocol::Ssl);
        assert_eq!(c.inter_broker_listener().unwrap().address.port, 9092);
        assert_eq!(l[2].address.to_string(), "MTLS://[::1]:9094");
    }

    #[test]
    fn bad_listener_sets_are_refused_naming_the_key() {
        for (pairs, key) in [
            (
                vec![("listeners", "PLAINTEXT://h:1,PLAINTEXT://h:2")],
                "listeners",
            ),
            (
                vec![("listeners", "PLAINTEXT://h:1,SSL://h:1")],
                "listeners",
            ),
            (
                vec![("listeners", "PLAINTEXT://h:1,OTHER://h:2")],
                "listeners",
            ),
            (vec![("listeners", "PLAINTEXT://h")], "listeners"),
            (
                vec![
                    ("listeners", "PLAINTEXT://h:1"),
                    ("advertised.listeners", "SSL://h:2"),
                ],
                "advertised.listeners",
            ),
            (
                vec![
                    ("listeners", "PLAINTEXT://h:1"),
                    ("advertised.listeners", "PLAINTEXT://0.0.0.0:1"),
                ],
                "advertised.listeners",
            ),
            (
                vec![("listeners", "SSL://h:1")],
                "security.inter.broker.protocol",
            ),
            (
                vec![
                    ("listeners", "PLAINTEXT://h:1"),
                    ("inter.broker.listener.name", "SSL"),
                ],
                "inter.broker.listener.name",
            ),
            (
                vec![("listener.security.protocol.map", "PLAINTEXT:TLS")],
                "listener.security.protocol.map",
            ),
        ] {
            let err = config(&pairs).expect_err(&format!("{pairs:?}")).to_string();
            assert!(err.contains(&format!("'{key}'")), "{pairs:?}: {err}");
        }
        // A TLS listener may be the inter-broker one, on a single node and in a cluster.
        config(&[
            ("listeners", "SSL://h:1"),
            ("inter.broker.listener.name", "SSL"),
        ])
        .unwrap();
        config(&[
            ("listeners", "PLAINTEXT://h:1,SSL://h:2"),
            ("inter.broker.listener.name", "SSL"),
            ("controller.quorum.voters", "1@h:3"),
        ])
        .unwrap();
    }

    #[test]
    fn listener_prefixed_settings_override_for_that_listener_only() {
        let c = config(&[
            ("listeners", "PLAINTEXT://h:1,SSL://h:2,MTLS://h:3"),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
            ),
            ("listener.name.mtls.ssl.client.auth", "required"),
        ])
        .unwrap();
        assert_eq!(c.listener_get("MTLS", "ssl.client.auth"), Some("required"));
        assert_eq!(c.listener_get("SSL", "ssl.client.auth"), Some("none"));
        let err = config(&[("listener.name.mtls.ssl.client.auth", "sometimes")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("listener.name.mtls.ssl.client.auth"), "{err}");
        let err = config(&[("listener.name.mtls.num.partitions", "3")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown config key"), "{err}");
    }

    #[test]
    fn bad_topic_configs() {
        assert!(TopicConfigs::new(layer(&[("cleanup.policy", "shred")])).is_err());
        assert!(TopicConfigs::new(layer(&[("not.a.topic.key", "1")])).is_err());
        assert!(TopicConfigs::new(layer(&[("retention.ms", "abc")])).is_err());
    }
}
