//! Millrace's event metrics: the counters and histograms that the front end, the store, the
//! replication layer and the group coordinator bump as things happen (requests, bytes in and out,
//! flushes, ISR changes, rebalances), in `prometheus-client` types.
//!
//! What it owns: one process-wide [`Metrics`] ([`global`]) and its registration into a
//! `prometheus_client` [`Registry`] ([`Metrics::register`]). State that can be read when scraped
//! (offsets, high watermarks, lag, group states) is not kept here: the broker's collector reads it
//! from the store and the coordinator at scrape time, so nothing on the hot path maintains it.
//!
//! Names follow Kafka's metric meanings in Prometheus style (`millrace_…`, counters end in
//! `_total`, durations in seconds); the list with meanings and units is in docs/operations.md.
//!
//! Cost: a counter or histogram update is one atomic operation; a labelled one first looks its
//! series up in a read-locked map (the label set is built on the stack for static labels; topic
//! labels are one `Arc<str>` clone).
//!
//! Invariant: every metric is registered exactly once by [`Metrics::register`]; code that records
//! never registers.

use std::sync::{Arc, OnceLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

pub use prometheus_client;

/// Request latency buckets: 0.5 ms doubling to ~16 s (16 buckets).
const REQUEST_SECONDS_FIRST_BUCKET: f64 = 0.000_5;
const REQUEST_SECONDS_BUCKETS: u16 = 16;
/// fsync latency buckets: 50 µs doubling to ~1.6 s.
const FLUSH_SECONDS_FIRST_BUCKET: f64 = 0.000_05;
const FLUSH_SECONDS_BUCKETS: u16 = 16;
/// Bytes per flush: 1 KiB, ×4 up to 256 GiB.
const FLUSH_BYTES_FIRST_BUCKET: f64 = 1024.0;
const FLUSH_BYTES_BUCKETS: u16 = 14;
/// Object store request latency buckets: 1 ms doubling to ~33 s (16 buckets), past the remote
/// storage's 30 s request timeout.
const REMOTE_REQUEST_SECONDS_FIRST_BUCKET: f64 = 0.001;
const REMOTE_REQUEST_SECONDS_BUCKETS: u16 = 16;

/// One API at one version.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    pub api: &'static str,
    pub version: i16,
}

/// One API and one Kafka error name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiErrorLabels {
    pub api: &'static str,
    pub error: &'static str,
}

/// One topic.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicLabels {
    pub topic: Arc<str>,
}

/// The kinds of object store request (tiered storage), the values of `RemoteOpLabels::op`.
pub const REMOTE_OPS: [&str; 4] = ["put", "get", "delete", "list"];

/// One kind of object store request (tiered storage): one of `REMOTE_OPS`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RemoteOpLabels {
    pub op: &'static str,
}

fn remote_request_histogram() -> Histogram {
    Histogram::new(exponential_buckets(
        REMOTE_REQUEST_SECONDS_FIRST_BUCKET,
        2.0,
        REMOTE_REQUEST_SECONDS_BUCKETS,
    ))
}

fn request_histogram() -> Histogram {
    Histogram::new(exponential_buckets(
        REQUEST_SECONDS_FIRST_BUCKET,
        2.0,
        REQUEST_SECONDS_BUCKETS,
    ))
}

/// Every event metric of the process.
#[derive(Debug)]
pub struct Metrics {
    // ----- requests and connections (Kafka's RequestMetrics and SocketServer) -----
    pub requests: Family<ApiLabels, Counter>,
    pub request_errors: Family<ApiErrorLabels, Counter>,
    pub request_duration: Family<ApiLabels, Histogram, fn() -> Histogram>,
    pub requests_in_flight: Gauge,
    pub request_queue_bytes: Gauge,
    pub connections: Gauge,
    pub connections_accepted: Counter,
    pub connections_closed: Counter,
    pub connections_refused: Counter,
    pub tls_handshake_failures: Counter,
    pub authentication_failures: Counter,
    // ----- topics (Kafka's BrokerTopicMetrics) -----
    pub topic_bytes_in: Family<TopicLabels, Counter>,
    pub topic_records_in: Family<TopicLabels, Counter>,
    pub topic_bytes_out: Family<TopicLabels, Counter>,
    // ----- store (Kafka's LogFlushStats) -----
    pub log_flush_duration: Histogram,
    pub log_flush_bytes: Histogram,
    pub log_flush_grouped: Counter,
    pub log_corrupt_batches: Counter,
    pub log_repaired_batches: Counter,
    pub log_scrubbed_bytes: Counter,
    /// Log dirs offline after an I/O error (Kafka's OfflineLogDirectoryCount).
    pub log_offline_dirs: Gauge,
    // ----- replication -----
    pub isr_shrinks: Counter,
    pub isr_expands: Counter,
    pub leader_elections: Counter,
    // ----- groups -----
    pub group_rebalances: Counter,
    // ----- controller -----
    pub controller_decisions_refused: Counter,
    pub controller_metadata_transactions: Counter,
    pub controller_metadata_transactions_aborted: Counter,
    // ----- tiered storage (Kafka's RemoteStorageMetrics) -----
    pub remote_bytes_uploaded: Counter,
    pub remote_bytes_fetched: Counter,
    pub remote_requests: Family<RemoteOpLabels, Counter>,
    pub remote_errors: Family<RemoteOpLabels, Counter>,
    pub remote_request_duration: Family<RemoteOpLabels, Histogram, fn() -> Histogram>,
    pub remote_cache_hits: Counter,
    pub remote_cache_misses: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let metrics = Self::without_series();
        // The op labels are a closed set: their series exist from the start, so the families
        // are served (and documented) whether or not tiered storage is in use.
        for op in REMOTE_OPS {
            let labels = RemoteOpLabels { op };
            drop(metrics.remote_requests.get_or_create(&labels));
            drop(metrics.remote_errors.get_or_create(&labels));
            drop(metrics.remote_request_duration.get_or_create(&labels));
        }
        metrics
    }
}

impl Metrics {
    fn without_series() -> Self {
        Self {
            requests: Family::default(),
            request_errors: Family::default(),
            request_duration: Family::new_with_constructor(request_histogram),
            requests_in_flight: Gauge::default(),
            request_queue_bytes: Gauge::default(),
            connections: Gauge::default(),
            connections_accepted: Counter::default(),
            connections_closed: Counter::default(),
            connections_refused: Counter::default(),
            tls_handshake_failures: Counter::default(),
            authentication_failures: Counter::default(),
            topic_bytes_in: Family::default(),
            topic_records_in: Family::default(),
            topic_bytes_out: Family::default(),
            log_flush_duration: Histogram::new(exponential_buckets(
                FLUSH_SECONDS_FIRST_BUCKET,
                2.0,
                FLUSH_SECONDS_BUCKETS,
            )),
            log_flush_bytes: Histogram::new(exponential_buckets(
                FLUSH_BYTES_FIRST_BUCKET,
                4.0,
                FLUSH_BYTES_BUCKETS,
            )),
            log_flush_grouped: Counter::default(),
            log_corrupt_batches: Counter::default(),
            log_repaired_batches: Counter::default(),
            log_scrubbed_bytes: Counter::default(),
            log_offline_dirs: Gauge::default(),
            isr_shrinks: Counter::default(),
            isr_expands: Counter::default(),
            leader_elections: Counter::default(),
            group_rebalances: Counter::default(),
            controller_decisions_refused: Counter::default(),
            controller_metadata_transactions: Counter::default(),
            controller_metadata_transactions_aborted: Counter::default(),
            remote_bytes_uploaded: Counter::default(),
            remote_bytes_fetched: Counter::default(),
            remote_requests: Family::default(),
            remote_errors: Family::default(),
            remote_request_duration: Family::new_with_constructor(remote_request_histogram),
            remote_cache_hits: Counter::default(),
            remote_cache_misses: Counter::default(),
        }
    }
}

/// The process's metrics.
pub fn global() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::default)
}

/// Registers each `name [Unit] => field: help` of `$m` in `$registry` (the unit is optional).
macro_rules! register_metrics {
    ($registry:ident, $m:ident, $($name:literal $([$unit:ident])? => $field:ident: $help:literal;)*) => {
        $(register_metrics!(@one $registry, $name, $help, $m.$field $(, $unit)?);)*
    };
    (@one $registry:ident, $name:literal, $help:literal, $metric:expr) => {
        $registry.register($name, $help, $metric.clone())
    };
    (@one $registry:ident, $name:literal, $help:literal, $metric:expr, $unit:ident) => {
        $registry.register_with_unit($name, $help, Unit::$unit, $metric.clone())
    };
}

impl Metrics {
    /// Registers every event metric in `registry` (expected to carry the `millrace` prefix).
    /// Counters get their `_total` suffix from the encoder.
    pub fn register(&self, registry: &mut Registry) {
        // One line per metric: name [unit] => field: help. (A brace macro: rustfmt keeps the
        // table as written.)
        register_metrics! { registry, self,
            "requests" => requests: "Requests decoded, by API and version (Kafka RequestsPerSec)";
            "request_errors" => request_errors: "Non-zero error codes in responses, one per code, by API and Kafka error name (Kafka ErrorsPerSec)";
            "request_duration" [Seconds] => request_duration: "Time from a request's arrival to its response being ready to write (Kafka TotalTimeMs)";
            "requests_in_flight" => requests_in_flight: "Requests read and not yet answered, all connections";
            "request_queue" [Bytes] => request_queue_bytes: "Request bytes held against queued.max.request.bytes";
            "connections" => connections: "Open client connections";
            "connections_accepted" => connections_accepted: "Client connections accepted";
            "connections_closed" => connections_closed: "Client connections closed";
            "connections_refused" => connections_refused: "Client connections refused at max.connections";
            "tls_handshake_failures" => tls_handshake_failures: "TLS handshakes that failed or timed out on TLS listeners (Kafka's failed-authentication-total for SSL)";
            "authentication_failures" => authentication_failures: "SASL authentications refused (Kafka's failed-authentication-total)";
            "topic_bytes_in" => topic_bytes_in: "Record batch bytes appended as leader from producers (Kafka BytesInPerSec)";
            "topic_records_in" => topic_records_in: "Records appended as leader from producers (Kafka MessagesInPerSec)";
            "topic_bytes_out" => topic_bytes_out: "Record bytes returned to consumers (Kafka BytesOutPerSec)";
            "log_flush_duration" [Seconds] => log_flush_duration: "Duration of one flush round of the store (Kafka LogFlushRateAndTimeMs)";
            "log_flush" [Bytes] => log_flush_bytes: "Bytes made durable by one flush round of the store";
            "log_flush_grouped" => log_flush_grouped: "Flush rounds made durable by one syncfs of the data directory's file system";
            "log_corrupt_batches" => log_corrupt_batches: "Damaged stretches of sealed segments found by the scrubber (each one batch or more; not served until repaired)";
            "log_repaired_batches" => log_repaired_batches: "Damaged stretches of sealed segments replaced with a replica's bytes";
            "log_scrubbed" [Bytes] => log_scrubbed_bytes: "Bytes of sealed segments the scrubber read and checked";
            "log_offline_dirs" => log_offline_dirs: "Log dirs offline after an I/O error, until the broker restarts (Kafka OfflineLogDirectoryCount)";
            "isr_shrinks" => isr_shrinks: "ISR shrinks of partitions led here (Kafka IsrShrinksPerSec)";
            "isr_expands" => isr_expands: "ISR expansions of partitions led here (Kafka IsrExpandsPerSec)";
            "leader_elections" => leader_elections: "Leaderships this broker took up";
            "group_rebalances" => group_rebalances: "Rebalances completed by groups this coordinator owns";
            "controller_decisions_refused" => controller_decisions_refused: "Controller decisions that could never be committed (too large for the metadata log) and were answered with an error";
            "controller_metadata_transactions" => controller_metadata_transactions: "Controller decisions too large for one metadata entry, committed as a metadata transaction over several";
            "controller_metadata_transactions_aborted" => controller_metadata_transactions_aborted: "Metadata transactions this node aborted on becoming the active controller (its predecessor began and did not end them)";
            "remote_bytes_uploaded" => remote_bytes_uploaded: "Bytes written to the remote (object) store, tiered storage (Kafka RemoteCopyBytesPerSec)";
            "remote_bytes_fetched" => remote_bytes_fetched: "Bytes read from the remote store, tiered storage (Kafka RemoteFetchBytesPerSec)";
            "remote_requests" => remote_requests: "Requests to the remote store, by op (put, get, delete, list)";
            "remote_errors" => remote_errors: "Requests to the remote store that failed, by op (Kafka RemoteCopyErrorsPerSec, RemoteFetchErrorsPerSec)";
            "remote_request" [Seconds] => remote_request_duration: "Duration of one request to the remote store, retries included, by op";
            "remote_cache_hits" => remote_cache_hits: "Remote segment chunks read from the broker's chunk cache";
            "remote_cache_misses" => remote_cache_misses: "Remote segment chunks that a read had to fetch from the remote store (or wait for)";
        }
    }

    /// Counts one produced batch set of `topic`.
    pub fn record_bytes_in(&self, topic: &Arc<str>, bytes: u64, records: u64) {
        let labels = TopicLabels {
            topic: topic.clone(),
        };
        self.topic_bytes_in.get_or_create(&labels).inc_by(bytes);
        self.topic_records_in.get_or_create(&labels).inc_by(records);
    }

    /// Counts one request to the remote store: its op, how long it took, whether it failed.
    pub fn record_remote_request(&self, op: &'static str, seconds: f64, failed: bool) {
        let labels = RemoteOpLabels { op };
        self.remote_requests.get_or_create(&labels).inc();
        self.remote_request_duration
            .get_or_create(&labels)
            .observe(seconds);
        if failed {
            self.remote_errors.get_or_create(&labels).inc();
        }
    }

    /// Counts record bytes returned to a consumer from `topic`.
    pub fn record_bytes_out(&self, topic: &Arc<str>, bytes: u64) {
        let labels = TopicLabels {
            topic: topic.clone(),
        };
        self.topic_bytes_out.get_or_create(&labels).inc_by(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::prometheus_text::encode;

    #[test]
    fn registered_names_are_kafka_meanings_in_prometheus_style() {
        let m = Metrics::default();
        m.requests
            .get_or_create(&ApiLabels {
                api: "Produce",
                version: 9,
            })
            .inc();
        m.request_duration
            .get_or_create(&ApiLabels {
                api: "Produce",
                version: 9,
            })
            .observe(0.002);
        m.record_bytes_in(&Arc::from("t"), 100, 3);
        m.log_flush_bytes.observe(4096.0);
        m.record_remote_request("get", 0.004, true);
        m.remote_bytes_uploaded.inc_by(7);
        let mut registry = Registry::with_prefix("millrace");
        m.register(&mut registry);
        let mut text = String::new();
        encode(&mut text, &registry).expect("encode");
        for line in [
            "millrace_requests_total{api=\"Produce\",version=\"9\"} 1",
            "millrace_topic_bytes_in_total{topic=\"t\"} 100",
            "millrace_topic_records_in_total{topic=\"t\"} 3",
            "millrace_request_duration_seconds_count{api=\"Produce\",version=\"9\"} 1",
            "millrace_log_flush_bytes_count 1",
            "millrace_remote_requests_total{op=\"get\"} 1",
            "millrace_remote_errors_total{op=\"get\"} 1",
            "millrace_remote_request_seconds_count{op=\"get\"} 1",
            "millrace_remote_bytes_uploaded_total 7",
            "millrace_remote_bytes_fetched_total 0",
            "millrace_remote_cache_hits_total 0",
            "millrace_remote_cache_misses_total 0",
            "# TYPE millrace_connections gauge",
            "# TYPE millrace_log_flush_duration_seconds histogram",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    /// docs/operations.md lists every family as served: the remote families are there before
    /// any request (no tiered storage in use), one series per op.
    #[test]
    fn remote_families_are_served_before_any_request() {
        let m = Metrics::default();
        let mut registry = Registry::with_prefix("millrace");
        m.register(&mut registry);
        let mut text = String::new();
        encode(&mut text, &registry).expect("encode");
        for line in [
            "millrace_remote_requests_total{op=\"put\"} 0",
            "millrace_remote_errors_total{op=\"list\"} 0",
            "millrace_remote_request_seconds_count{op=\"delete\"} 0",
            "millrace_remote_bytes_uploaded_total 0",
            "millrace_remote_cache_misses_total 0",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
