//! Fuzz target: request decode + dispatch. The input is one request frame without its 4-byte
//! size (header and body), exactly what `connection.rs` hands to `dispatch`; it runs against an
//! in-process broker (store in a temporary directory, cluster metadata, group coordinator) and
//! the response task is driven to completion. Checks: no panic (in dispatch or in the response
//! task), no abort, and a response that could not be encoded is reported, never a crash.
//!
//! Harness rules, so that executions stay fast and the disk bounded:
//! - the runtime's clock is paused, so long polls and durability timeouts end at once;
//! - CreateTopics and CreatePartitions asking for more than `PARTITIONS_PER_INPUT_MAX` partitions
//!   are decoded but not dispatched (creating 10,000 partition directories takes seconds);
//! - the broker is rebuilt on a fresh directory every `INPUTS_PER_BROKER` inputs or once it holds
//!   `PARTITIONS_PER_BROKER_MAX` partitions.

#![no_main]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreateTopicsRequest, RequestHeader,
};
use kafka_protocol::protocol::Decodable;
use libfuzzer_sys::fuzz_target;
use millrace_cluster::BrokerConfig;
use millrace_frontend::dispatch::dispatch;
use millrace_frontend::testing::single_node_context;
use millrace_frontend::BrokerContext;
use millrace_store::{FlushPolicy, Store, StoreConfig};

const PARTITIONS_PER_INPUT_MAX: i64 = 64;
const INPUTS_PER_BROKER: u64 = 20_000;
const PARTITIONS_PER_BROKER_MAX: usize = 2_000;
/// Virtual time a response may take (the clock is paused: this costs no real time).
const RESPONSE_WAIT: Duration = Duration::from_secs(600);

struct Harness {
    runtime: tokio::runtime::Runtime,
    ctx: Arc<BrokerContext>,
    store: Arc<Store>,
    inputs: u64,
    _dir: tempfile::TempDir,
}

impl Harness {
    fn new() -> Harness {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("runtime");
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(StoreConfig {
            data_dir: dir.path().to_path_buf(),
            extra_log_dirs: Vec::new(),
            flush_policy: FlushPolicy::Never,
            flush_interval: Duration::from_millis(2),
            max_open_files: 64,
            high_watermark_follows_durable: false,
        })
        .expect("store");
        let layer: BTreeMap<String, String> = [
            ("num.partitions", "2"),
            ("offsets.topic.num.partitions", "3"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let config = BrokerConfig::from_layers([&layer]).expect("config");
        // The topic the captured seeds use; the context adds the group coordinator's partitions.
        let (ctx, _no_hold) = runtime.block_on(async {
            single_node_context(store.clone(), dir.path(), config, &[("fuzz", 2)], false)
        });
        Harness {
            runtime,
            ctx,
            store,
            inputs: 0,
            _dir: dir,
        }
    }

    fn worn_out(&self) -> bool {
        self.inputs >= INPUTS_PER_BROKER
            || self.store.partitions().len() > PARTITIONS_PER_BROKER_MAX
    }
}

static HARNESS: Mutex<Option<Harness>> = Mutex::new(None);

/// Partitions a CreateTopics or CreatePartitions request would create; 0 for other requests or
/// for frames the decoder refuses (dispatch refuses them too).
fn partitions_requested(frame: &[u8]) -> i64 {
    let Some(key) = frame.get(0..4).map(|b| {
        (
            i16::from_be_bytes([b[0], b[1]]),
            i16::from_be_bytes([b[2], b[3]]),
        )
    }) else {
        return 0;
    };
    let (Ok(api), version) = (ApiKey::try_from(key.0), key.1) else {
        return 0;
    };
    if !matches!(api, ApiKey::CreateTopics | ApiKey::CreatePartitions) {
        return 0;
    }
    let mut buf = Bytes::copy_from_slice(frame);
    if RequestHeader::decode(&mut buf, api.request_header_version(version)).is_err() {
        return 0;
    }
    match api {
        ApiKey::CreateTopics => CreateTopicsRequest::decode(&mut buf, version)
            .map(|r| {
                r.topics
                    .iter()
                    .map(|t| i64::from(t.num_partitions.max(1)).max(t.assignments.len() as i64))
                    .sum()
            })
            .unwrap_or(0),
        _ => CreatePartitionsRequest::decode(&mut buf, version)
            .map(|r| r.topics.iter().map(|t| i64::from(t.count.max(0))).sum())
            .unwrap_or(0),
    }
}

fuzz_target!(|data: &[u8]| {
    if partitions_requested(data) > PARTITIONS_PER_INPUT_MAX {
        return;
    }
    let mut slot = HARNESS.lock().unwrap_or_else(|e| e.into_inner());
    if slot.as_ref().map_or(true, Harness::worn_out) {
        *slot = None; // drop the old broker (and its directory) before building the next
        *slot = Some(Harness::new());
    }
    let Some(harness) = slot.as_mut() else {
        return;
    };
    harness.inputs += 1;
    let peer: SocketAddr = ([127, 0, 0, 1], 40_000).into();
    let session = millrace_frontend::session::Session::plaintext(peer);
    let ctx = harness.ctx.clone();
    let frame = Bytes::copy_from_slice(data);
    harness.runtime.block_on(async move {
        // dispatch spawns the response task, so it runs inside the runtime.
        let Ok(pending) = dispatch(&ctx, frame, &session) else {
            return; // refused: the connection would be closed
        };
        match tokio::time::timeout(RESPONSE_WAIT, pending).await {
            Ok(Ok(_encoded_or_refused)) => {}
            Ok(Err(join)) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            Ok(Err(_cancelled)) => {}
            // Parked group requests wait for other members or timers this harness does not run.
            Err(_elapsed) => {}
        }
    });
});
