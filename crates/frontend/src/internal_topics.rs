//! The internal topics the coordinators keep their state in — `__consumer_offsets`,
//! `__transaction_state`, `__share_group_state` — and their creation on first use: asked of the
//! controller in the background, once at a time per topic, sized by the topic's own broker
//! configs.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use millrace_controller::messages::TopicSpec;
use millrace_controller::{ControllerRequest, ControllerResponse};
use millrace_groups::OFFSETS_TOPIC;
use millrace_transactions::TRANSACTION_STATE_TOPIC;
use tracing::{info, warn};

/// How long a creation may wait for the controller.
const CREATE_TOPIC_TIMEOUT: Duration = Duration::from_secs(30);

/// `__consumer_offsets` and `__transaction_state` keep the last record of each key.
const COMPACTED: &[(&str, &str)] = &[("cleanup.policy", "compact")];

/// An internal topic a coordinator keeps its state in, with the configs that size it.
pub(crate) struct InternalTopic {
    pub(crate) name: &'static str,
    /// The topic's own configs besides the sizes: Kafka compacts `__consumer_offsets` and
    /// `__transaction_state`; `__share_group_state` holds deltas (ShareUpdate records replayed
    /// onto their snapshot), which compaction would lose, so Kafka keeps it with
    /// `cleanup.policy=delete` and `retention.ms=-1`.
    configs: &'static [(&'static str, &'static str)],
    partitions_key: &'static str,
    replication_key: &'static str,
    min_isr_key: Option<&'static str>,
    segment_bytes_key: Option<&'static str>,
    /// At most one creation in flight from this broker.
    creating: &'static AtomicBool,
}

static CREATING_OFFSETS: AtomicBool = AtomicBool::new(false);
static CREATING_TRANSACTION_STATE: AtomicBool = AtomicBool::new(false);
static CREATING_SHARE_GROUP_STATE: AtomicBool = AtomicBool::new(false);

pub(crate) const OFFSETS: InternalTopic = InternalTopic {
    name: OFFSETS_TOPIC,
    configs: COMPACTED,
    partitions_key: "offsets.topic.num.partitions",
    replication_key: "offsets.topic.replication.factor",
    min_isr_key: None,
    segment_bytes_key: None,
    creating: &CREATING_OFFSETS,
};

pub(crate) const TRANSACTION_STATE: InternalTopic = InternalTopic {
    name: TRANSACTION_STATE_TOPIC,
    configs: COMPACTED,
    partitions_key: "transaction.state.log.num.partitions",
    replication_key: "transaction.state.log.replication.factor",
    min_isr_key: Some("transaction.state.log.min.isr"),
    segment_bytes_key: Some("transaction.state.log.segment.bytes"),
    creating: &CREATING_TRANSACTION_STATE,
};

/// The share coordinator's `__share_group_state` (`share.coordinator.state.topic.*`).
pub(crate) const SHARE_GROUP_STATE: InternalTopic = InternalTopic {
    name: millrace_share::SHARE_GROUP_STATE_TOPIC,
    configs: &[("cleanup.policy", "delete"), ("retention.ms", "-1")],
    partitions_key: "share.coordinator.state.topic.num.partitions",
    replication_key: "share.coordinator.state.topic.replication.factor",
    min_isr_key: Some("share.coordinator.state.topic.min.isr"),
    segment_bytes_key: Some("share.coordinator.state.topic.segment.bytes"),
    creating: &CREATING_SHARE_GROUP_STATE,
};

/// Asks the controller to create a coordinator's internal topic, once at a time, in the
/// background: compacted, partitions and replication factor from its configs (replication
/// factor 1 on a single-node broker, `min.insync.replicas` at most the replication factor).
pub(crate) fn create_internal_topic(
    cluster: &millrace_cluster::Cluster,
    controller: &Arc<millrace_controller::ControllerClient>,
    topic: &'static InternalTopic,
) {
    if topic.creating.swap(true, Ordering::SeqCst) {
        return;
    }
    let long = |key: &str, fallback: i64| {
        cluster
            .config
            .get(key)
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or(fallback)
    };
    let partitions = i32::try_from(long(topic.partitions_key, 50).clamp(1, 10_000)).unwrap_or(50);
    let mut rf = i16::try_from(long(topic.replication_key, 3).clamp(1, 32)).unwrap_or(3);
    if cluster.is_single_node() {
        rf = 1;
    }
    let segment_bytes = topic
        .segment_bytes_key
        .map_or(104_857_600, |k| long(k, 104_857_600));
    let mut configs: BTreeMap<String, String> = topic
        .configs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    configs.insert("segment.bytes".to_string(), segment_bytes.to_string());
    if let Some(key) = topic.min_isr_key {
        let min_isr = long(key, 2).clamp(1, i64::from(rf));
        configs.insert("min.insync.replicas".to_string(), min_isr.to_string());
    }
    let name = topic.name;
    let request = ControllerRequest::CreateTopics {
        topics: vec![TopicSpec {
            name: name.to_string(),
            partitions: Some(partitions),
            replication_factor: Some(rf),
            assignments: BTreeMap::new(),
            configs,
        }],
        validate_only: false,
    };
    let controller = Arc::clone(controller);
    let creating = topic.creating;
    tokio::spawn(async move {
        match controller.request(request, CREATE_TOPIC_TIMEOUT).await {
            ControllerResponse::CreateTopics { results } => match results.first() {
                Some((_, Ok(created))) => {
                    info!(
                        partitions = created.partitions,
                        replication_factor = created.replication_factor,
                        "created {name}"
                    );
                }
                Some((_, Err(e))) => {
                    info!(error = %e, "{name} not created yet");
                }
                None => {}
            },
            other => warn!(answer = ?other, "creating {name} failed"),
        }
        creating.store(false, Ordering::SeqCst);
    });
}
