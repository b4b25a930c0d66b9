//! What an operator can ask the broker over HTTP (`--http-listen`, config
//! `millrace.http.listen`): `GET /metrics` (Prometheus text format 0.0.4), `GET /health` (200
//! while the process serves HTTP at all) and `GET /ready` (200 once the store is open, the node is
//! registered and unfenced with its replicas following the metadata, and every
//! `__consumer_offsets` partition led here is loaded; 503 with the reason otherwise). A ready
//! broker lists what is degraded (a full log dir, the metadata log's space reserve spent) as
//! `degraded: …` lines after `ready` (`disk_space`).
//!
//! What it owns: the operator's routes ([`route`]; the listener itself is `millrace-rest`'s
//! server, which also serves the HTTP API), the registry, and the scrape-time collector. The event metrics
//! (counters, histograms) live in `millrace_metrics` and are bumped where things happen; the
//! state metrics (offsets, high watermarks, sizes, ISR health, group states and consumer lag) are
//! read here when scraped, from the replica manager, the metadata image and the coordinator, so
//! keeping them costs nothing between scrapes. `millrace.metrics.partition.level=false` leaves out
//! every series labelled by partition.
//!
//! The listener starts before the store opens, so `/health` answers (and `/ready` says why not)
//! during a long recovery; the broker's parts are handed over with [`Observer::attach`].
//! No request body is read.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use millrace_cluster::Cluster;
use millrace_controller::raft::RaftQuorum;
use millrace_frontend::fetch_session::FetchSessionCache;
use millrace_groups::{GroupCoordinator, GroupState, PartitionStatus, OFFSETS_TOPIC};
use millrace_metrics::prometheus_client::collector::Collector;
use millrace_metrics::prometheus_client::encoding::{
    prometheus_text, DescriptorEncoder, EncodeMetric,
};
use millrace_metrics::prometheus_client::metrics::counter::ConstCounter;
use millrace_metrics::prometheus_client::metrics::gauge::ConstGauge;
use millrace_metrics::prometheus_client::metrics::MetricType;
use millrace_metrics::prometheus_client::registry::Registry;
use millrace_replication::ReplicaManager;
use tokio::sync::watch;

use crate::disk_space::DiskDirs;

/// The broker's parts the collector and `/ready` read; handed over once they exist.
pub struct BrokerView {
    pub cluster: Arc<Cluster>,
    pub replicas: Arc<ReplicaManager>,
    pub groups: Arc<GroupCoordinator>,
    pub quorum: Arc<RaftQuorum>,
    /// True once registered, unfenced and following the metadata image.
    pub node_ready: watch::Receiver<bool>,
    /// `millrace.metrics.partition.level`.
    pub partition_level: bool,
    /// Incremental fetch sessions (KIP-227).
    pub fetch_sessions: Arc<FetchSessionCache>,
    /// Share groups' partitions and sessions (KIP-932).
    pub shares: Arc<millrace_frontend::share_partitions::ShareState>,
    /// The log dirs' free space and the produce low-water mark (`disk_space`).
    pub disk: DiskDirs,
    /// Tiered storage's remote log manager, when on.
    pub tiered: Option<Arc<millrace_tiered::rlm::RemoteLogManager>>,
}

/// The HTTP side's shared state.
pub struct Observer {
    registry: Registry,
    view: Arc<OnceLock<BrokerView>>,
}

impl Observer {
    pub fn new() -> Arc<Self> {
        let view = Arc::new(OnceLock::new());
        let mut registry = Registry::with_prefix("millrace");
        millrace_metrics::global().register(&mut registry);
        registry.register_collector(Box::new(StateCollector { view: view.clone() }));
        Arc::new(Self { registry, view })
    }

    /// Hands over the broker's parts (once; a second call is ignored).
    pub fn attach(&self, view: BrokerView) {
        let _ = self.view.set(view);
    }

    /// `Ok` when ready, else why not.
    pub fn readiness(&self) -> Result<(), String> {
        readiness(self.view.get())
    }

    /// What is degraded while ready (a full disk, the metadata log's reserve spent, damaged
    /// batches awaiting repair), one line each; read now.
    pub fn degraded(&self) -> Vec<String> {
        self.view.get().map_or_else(Vec::new, |v| {
            let mut lines = v.disk.degraded(v.quorum.quorum().space_state());
            lines.extend(
                v.replicas
                    .damaged_replicas()
                    .into_iter()
                    .map(|(tp, ranges)| {
                        let offsets: Vec<String> = ranges
                            .iter()
                            .map(|r| format!("[{}, {})", r.from, r.to))
                            .collect();
                        format!(
                    "{tp} offsets {} damaged, not served until repaired from an in-sync replica",
                    offsets.join(" ")
                )
                    }),
            );
            if let Some(stats) = v.tiered.as_ref().map(|t| t.stats()) {
                if stats.backlog_full {
                    lines.push(format!(
                        "tiered storage: {} bytes of closed segments wait for upload, above millrace.remote.storage.max.pending.bytes; produce to tiered topics is refused until uploads catch up",
                        stats.pending_bytes
                    ));
                }
            }
            lines
        })
    }

    /// Tiered storage's committed remote logs as this node's metadata image holds them (JSON:
    /// per tiered partition its remote log start and segments), for operators and the fault
    /// harness's checker.
    pub fn remote_log_json(&self) -> String {
        let Some(view) = self.view.get() else {
            return "[]\n".into();
        };
        let image = view.replicas.image();
        let mut out = Vec::new();
        for (topic_id, partitions) in image.remote_logs.iter() {
            let topic = image
                .topic_by_id(*topic_id)
                .map_or_else(|| topic_id.to_string(), |t| t.name.clone());
            for (partition, log) in partitions {
                out.push(serde_json::json!({
                    "topic": topic,
                    "partition": partition,
                    "log_start_offset": log.log_start_offset,
                    "segments": log.segments,
                }));
            }
        }
        let mut text = serde_json::Value::Array(out).to_string();
        text.push('\n');
        text
    }

    fn metrics_text(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

/// The operator's routes (`/metrics`, `/health`, `/ready`, `/remote-log`): `Some` answer for
/// them, `None` for every other path (the HTTP API's, `millrace-rest`).
pub fn route(observer: &Observer, request: &Request<Incoming>) -> Option<Response<Full<Bytes>>> {
    let path = request.uri().path();
    if !OPS_PATHS.contains(&path) {
        return None;
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return Some(reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n",
        ));
    }
    Some(match path {
        "/metrics" => match observer.metrics_text() {
            Ok(text) => reply(StatusCode::OK, prometheus_text::CONTENT_TYPE, text),
            Err(_) => reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain",
                "cannot encode the metrics\n",
            ),
        },
        "/ready" => match observer.readiness() {
            // Ready, and what is degraded (if anything) below: a full disk still serves reads,
            // metadata and the deletes that free it, so it is not a reason for 503.
            Ok(()) => {
                let mut body = String::from("ready\n");
                for line in observer.degraded() {
                    body.push_str("degraded: ");
                    body.push_str(&line);
                    body.push('\n');
                }
                reply(StatusCode::OK, "text/plain", body)
            }
            Err(reason) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("not ready: {reason}\n"),
            ),
        },
        "/remote-log" => reply(
            StatusCode::OK,
            "application/json",
            observer.remote_log_json(),
        ),
        _ => reply(StatusCode::OK, "text/plain", "ok\n"),
    })
}

/// The paths [`route`] answers.
const OPS_PATHS: [&str; 4] = ["/metrics", "/health", "/ready", "/remote-log"];

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

fn readiness(view: Option<&BrokerView>) -> Result<(), String> {
    let view = view.ok_or("the store is opening (log recovery)")?;
    if !*view.node_ready.borrow() {
        return Err(
            "not yet registered and unfenced, or replicas not yet following the metadata".into(),
        );
    }
    let mut loading = Vec::new();
    for hosted in view.replicas.hosted() {
        if hosted.tp.topic != OFFSETS_TOPIC || !hosted.progress().borrow().is_leader {
            continue;
        }
        match view.groups.partition_status(hosted.tp.partition) {
            Some(PartitionStatus::Loaded { .. }) => {}
            Some(PartitionStatus::Failed { .. }) => {
                return Err(format!(
                    "the group coordinator failed to load {OFFSETS_TOPIC}-{}",
                    hosted.tp.partition
                ))
            }
            _ => loading.push(hosted.tp.partition),
        }
    }
    if !loading.is_empty() {
        return Err(format!(
            "the group coordinator is loading {} {OFFSETS_TOPIC} partition(s) ({:?})",
            loading.len(),
            loading
        ));
    }
    Ok(())
}

/// The state metrics, read at scrape time.
#[derive(Debug)]
struct StateCollector {
    view: Arc<OnceLock<BrokerView>>,
}

impl std::fmt::Debug for BrokerView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerView")
            .field("partition_level", &self.partition_level)
            .finish_non_exhaustive()
    }
}

/// One gauge family with label pairs, written at once.
struct Series<'a> {
    name: &'a str,
    help: &'a str,
    rows: Vec<(Vec<(&'static str, String)>, i64)>,
}

impl<'a> Series<'a> {
    fn gauge(name: &'a str, help: &'a str) -> Self {
        Self {
            name,
            help,
            rows: Vec::new(),
        }
    }
    fn push(&mut self, labels: Vec<(&'static str, String)>, value: i64) {
        self.rows.push((labels, value));
    }
    fn encode(self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family =
            encoder.encode_descriptor(self.name, self.help, None, MetricType::Gauge)?;
        for (labels, value) in &self.rows {
            ConstGauge::new(*value).encode(family.encode_family(labels)?)?;
        }
        Ok(())
    }
}

fn single(name: &str, help: &str, value: i64, encoder: &mut DescriptorEncoder) -> std::fmt::Result {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}

/// Share groups' partitions and sessions on this broker (KIP-932), zeros while share groups
/// are off.
fn encode_shares(
    stats: &millrace_frontend::share_partitions::ShareStats,
    encoder: &mut DescriptorEncoder,
) -> std::fmt::Result {
    let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    for (name, help, value) in [
        (
            "share_sessions",
            "Share sessions held (KIP-932), at most group.share.max.share.sessions",
            stats.sessions,
        ),
        (
            "share_partitions",
            "Share partitions (group, topic, partition) this broker holds as leader",
            stats.partitions,
        ),
        (
            "share_in_flight_records",
            "Records between each share partition's start and end offsets",
            stats.in_flight_records,
        ),
        (
            "share_acquired_records",
            "Records acquired by share group members now (locked)",
            stats.acquired_records,
        ),
    ] {
        single(name, help, gauge(value), encoder)?;
    }
    for (name, help, value) in [
        (
            "share_records_redelivered",
            "Records acquired again after an earlier delivery (released or lock expired)",
            stats.redelivered_total,
        ),
        (
            "share_records_archived",
            "Records archived by share groups: rejected, gaps, the delivery-count limit, below the log start",
            stats.archived_total,
        ),
    ] {
        let metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        ConstCounter::new(value).encode(metric)?;
    }
    Ok(())
}

/// Tiered storage's upload lag and work counts (Kafka's RemoteCopyLagBytes and
/// RemoteCopyLagSegments, and the copy/delete counts), read from the manager at scrape time.
fn encode_tiered(
    stats: &millrace_tiered::rlm::RlmStats,
    encoder: &mut DescriptorEncoder,
) -> std::fmt::Result {
    let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    single(
        "remote_upload_lag_bytes",
        "Bytes of closed local segments of tiered partitions hosted here not yet in the object store (Kafka RemoteCopyLagBytes)",
        gauge(stats.pending_bytes),
        encoder,
    )?;
    single(
        "remote_upload_lag_segments",
        "Closed local segments of tiered partitions hosted here not yet in the object store (Kafka RemoteCopyLagSegments)",
        gauge(stats.pending_segments),
        encoder,
    )?;
    for (name, help, value) in [
        (
            "remote_segments_copied",
            "Segments this broker uploaded and committed as leader",
            stats.segments_copied,
        ),
        (
            "remote_segments_deleted",
            "Remote segments this broker deleted by retention as leader",
            stats.segments_deleted,
        ),
        (
            "remote_copy_failures",
            "Segment uploads or commits that failed (retried next round)",
            stats.copy_errors,
        ),
        (
            "remote_orphans_deleted",
            "Objects no committed segment named, deleted after the grace period",
            stats.orphans_deleted,
        ),
    ] {
        let metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        ConstCounter::new(value).encode(metric)?;
    }
    Ok(())
}

fn tp_labels(topic: &str, partition: i32) -> Vec<(&'static str, String)> {
    vec![
        ("topic", topic.to_string()),
        ("partition", partition.to_string()),
    ]
}

impl Collector for StateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let view = self.view.get();
        let ready = i64::from(readiness(view).is_ok());
        single("ready", "1 when /ready answers 200", ready, &mut encoder)?;
        let Some(view) = view else {
            return Ok(());
        };
        let damaged: usize = view
            .replicas
            .damaged_replicas()
            .iter()
            .map(|(_, ranges)| ranges.len())
            .sum();
        single(
            "log_damaged_ranges",
            "Damaged stretches of sealed segments awaiting repair (not served meanwhile)",
            i64::try_from(damaged).unwrap_or(i64::MAX),
            &mut encoder,
        )?;
        view.disk
            .encode(view.quorum.quorum().space_state(), &mut encoder)?;
        // Served by every broker (zeros with tiered storage off), so the set of metric families
        // is the same everywhere (docs/operations.md's table).
        let tiered = view.tiered.as_ref().map(|t| t.stats()).unwrap_or_default();
        encode_tiered(&tiered, &mut encoder)?;
        let (sessions, session_partitions) = view.fetch_sessions.stats();
        single(
            "fetch_sessions",
            "Incremental fetch sessions held (KIP-227)",
            i64::try_from(sessions).unwrap_or(i64::MAX),
            &mut encoder,
        )?;
        single(
            "fetch_session_partitions",
            "Partitions held by the incremental fetch sessions",
            i64::try_from(session_partitions).unwrap_or(i64::MAX),
            &mut encoder,
        )?;
        encode_shares(&view.shares.stats(), &mut encoder)?;
        let per_partition = view.partition_level;
        let mut log_end = Series::gauge(
            "log_end_offset",
            "Offset after the last record of the local log",
        );
        let mut log_start = Series::gauge("log_start_offset", "First offset of the local log");
        let mut high_watermark = Series::gauge(
            "high_watermark",
            "Offset up to which records are committed (readable by consumers)",
        );
        let mut log_size = Series::gauge("log_size_bytes", "Bytes of the local log's segments");
        let mut fetch_lag = Series::gauge(
            "replica_fetch_lag",
            "Records: leader log end minus the slowest follower's, for partitions led here",
        );
        let (mut hosted_count, mut leaders, mut under_replicated, mut under_min_isr) = (0, 0, 0, 0);
        let mut max_lag = 0i64;
        let mut high_watermarks: HashMap<(String, i32), i64> = HashMap::new();
        for hosted in view.replicas.hosted() {
            hosted_count += 1;
            let tp = &hosted.tp;
            let progress = *hosted.progress().borrow();
            let leo = hosted.log.log_end_offset();
            high_watermarks.insert((tp.topic.clone(), tp.partition), progress.high_watermark);
            if progress.is_leader {
                leaders += 1;
                if let Some(health) = hosted.leader_health() {
                    under_replicated += i64::from(health.isr < health.replicas);
                    under_min_isr += i64::from(health.under_min_isr);
                    if let Some(slowest) = health.slowest_follower_log_end {
                        let lag = (leo - slowest).max(0);
                        max_lag = max_lag.max(lag);
                        if per_partition {
                            fetch_lag.push(tp_labels(&tp.topic, tp.partition), lag);
                        }
                    }
                }
            }
            if per_partition {
                log_end.push(tp_labels(&tp.topic, tp.partition), leo);
                log_start.push(
                    tp_labels(&tp.topic, tp.partition),
                    hosted.log.log_start_offset(),
                );
                high_watermark.push(tp_labels(&tp.topic, tp.partition), progress.high_watermark);
                log_size.push(
                    tp_labels(&tp.topic, tp.partition),
                    i64::try_from(hosted.log.size_bytes()).unwrap_or(i64::MAX),
                );
            }
        }
        if per_partition {
            log_end.encode(&mut encoder)?;
            log_start.encode(&mut encoder)?;
            high_watermark.encode(&mut encoder)?;
            log_size.encode(&mut encoder)?;
            fetch_lag.encode(&mut encoder)?;
        }
        single(
            "partitions",
            "Partition replicas hosted here",
            hosted_count,
            &mut encoder,
        )?;
        single(
            "leader_partitions",
            "Partitions led here",
            leaders,
            &mut encoder,
        )?;
        single(
            "under_replicated_partitions",
            "Partitions led here whose ISR is smaller than their replica set",
            under_replicated,
            &mut encoder,
        )?;
        single(
            "under_min_isr_partitions",
            "Partitions led here whose ISR is below min.insync.replicas",
            under_min_isr,
            &mut encoder,
        )?;
        single(
            "replica_max_lag",
            "Records: the largest replica_fetch_lag of the partitions led here",
            max_lag,
            &mut encoder,
        )?;
        let image = view.cluster.image();
        let offline = image
            .topics
            .values()
            .flat_map(|t| t.partitions.iter())
            .filter(|p| p.leader < 0)
            .count();
        single(
            "offline_partitions",
            "Partitions in the metadata image without a leader",
            i64::try_from(offline).unwrap_or(i64::MAX),
            &mut encoder,
        )?;
        let quorum = view.quorum.quorum();
        single(
            "active_controller",
            "1 on the node that is the active controller",
            i64::from(quorum.leader() == Some(quorum.node_id())),
            &mut encoder,
        )?;
        encode_share_lag(view, &high_watermarks, &mut encoder)?;
        self.encode_groups(view, &high_watermarks, &mut encoder)
    }
}

/// Share groups' lag (KIP-932) for the share partitions this broker holds as leader: high
/// watermark − share-partition start offset − delivery-complete count, as Kafka's
/// DescribeShareGroupOffsets computes it; per partition (with partition-level metrics) and
/// summed per group. A share partition not held here (never fetched, or dropped when its group's
/// last session here ended) has no series.
fn encode_share_lag(
    view: &BrokerView,
    high_watermarks: &HashMap<(String, i32), i64>,
    encoder: &mut DescriptorEncoder,
) -> std::fmt::Result {
    let image = view.cluster.image();
    let mut lag = Series::gauge(
        "share_group_lag",
        "Records: high watermark minus the share-partition start offset and the records delivered above it, share partitions held here",
    );
    let mut sums: std::collections::BTreeMap<String, i64> = std::collections::BTreeMap::new();
    for p in view.shares.progress() {
        let Some(topic) = image.topic_by_id(p.topic_id) else {
            continue;
        };
        let Some(&hw) = high_watermarks.get(&(topic.name.clone(), p.partition)) else {
            continue;
        };
        let behind = hw
            .saturating_sub(p.start_offset)
            .saturating_sub(i64::from(p.delivery_complete_count.max(0)))
            .max(0);
        *sums.entry(p.group_id.to_string()).or_default() += behind;
        if view.partition_level {
            let mut labels = tp_labels(&topic.name, p.partition);
            labels.insert(0, ("group", p.group_id.to_string()));
            lag.push(labels, behind);
        }
    }
    if view.partition_level {
        lag.encode(encoder)?;
    }
    let mut lag_sum = Series::gauge(
        "share_group_lag_sum",
        "Records: share_group_lag summed over the group's share partitions held here",
    );
    for (group, sum) in sums {
        lag_sum.push(vec![("group", group)], sum);
    }
    lag_sum.encode(encoder)
}

impl StateCollector {
    fn encode_groups(
        &self,
        view: &BrokerView,
        high_watermarks: &HashMap<(String, i32), i64>,
        encoder: &mut DescriptorEncoder,
    ) -> std::fmt::Result {
        let snapshot = view.groups.metrics_snapshot();
        let mut by_state: Vec<(GroupState, i64)> = [
            GroupState::Empty,
            GroupState::PreparingRebalance,
            GroupState::CompletingRebalance,
            GroupState::Stable,
            GroupState::Dead,
        ]
        .into_iter()
        .map(|s| (s, 0))
        .collect();
        let mut lag = Series::gauge(
            "consumer_group_lag",
            "Records: high watermark minus the group's committed offset, partitions hosted here",
        );
        let mut lag_sum = Series::gauge(
            "consumer_group_lag_sum",
            "Records: consumer_group_lag summed over the group's committed partitions hosted here",
        );
        for group in &snapshot.groups {
            if let Some((_, n)) = by_state.iter_mut().find(|(s, _)| *s == group.state) {
                *n += 1;
            }
            let mut sum = 0i64;
            let mut any = false;
            for (topic, partition, committed) in &group.offsets {
                let Some(&hw) = high_watermarks.get(&(topic.clone(), *partition)) else {
                    continue;
                };
                let behind = (hw - committed).max(0);
                sum += behind;
                any = true;
                if view.partition_level {
                    let mut labels = tp_labels(topic, *partition);
                    labels.insert(0, ("group", group.group_id.clone()));
                    lag.push(labels, behind);
                }
            }
            if any {
                lag_sum.push(vec![("group", group.group_id.clone())], sum);
            }
        }
        let mut groups = Series::gauge("groups", "Groups this coordinator owns, by state");
        for (state, n) in by_state {
            groups.push(vec![("state", state.name().to_string())], n);
        }
        groups.encode(encoder)?;
        if view.partition_level {
            lag.encode(encoder)?;
        }
        lag_sum.encode(encoder)?;
        single(
            "group_coordinator_loading_partitions",
            "__consumer_offsets partitions led here still being loaded",
            i64::try_from(snapshot.loading_partitions).unwrap_or(i64::MAX),
            encoder,
        )
    }
}

/// Writes `text` for tests and debugging: every metric line whose name starts with `prefix`.
#[cfg(test)]
fn lines_with(text: &str, prefix: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for line in text.lines().filter(|l| l.starts_with(prefix)) {
        let _ = writeln!(out, "{line}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn before_attach_only_the_event_metrics_and_not_ready() {
        let observer = Observer::new();
        let text = observer.metrics_text().expect("encode");
        assert!(
            lines_with(&text, "millrace_ready").contains("millrace_ready 0"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE millrace_connections_accepted_total counter"),
            "{text}"
        );
        let reason = observer.readiness().expect_err("not ready");
        assert!(reason.contains("store"), "{reason}");
    }
}
