//! Every limit the controller enforces, as a named constant.

/// Partitions: most partitions one topic may have (Kafka has no hard limit; this bounds what one
/// CreateTopics or CreatePartitions can ask for). Enforced by `controller::check_partition_count`.
pub const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;

/// Producer ids handed to a broker per AllocateProducerIds (Kafka's block size).
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// Requests: most controller requests queued on the active controller; more are refused at once
/// (the broker retries), so a burst cannot grow memory without bound. Enforced by
/// `ControllerService::submit`.
pub const CONTROLLER_QUEUE_MAX: usize = 4096;

/// Milliseconds between two controller ticks (session expiry checks, elections of leaderless
/// partitions).
pub const CONTROLLER_TICK_MS: u64 = 250;

/// Milliseconds: a gap this long between two controller ticks means the controller itself did
/// not run (a stop signal, a stalled machine, a commit waiting on a lost quorum). Heartbeats could
/// not be heard meanwhile, so the gap is credited to every broker's session instead of fencing
/// the whole cluster on resume. Twelve ticks: far above scheduling jitter, far below
/// `broker.session.timeout.ms` (9 s by default). Enforced by `Controller::tick`.
pub const CONTROLLER_STALL_MS: i64 = 3_000;

/// Milliseconds a decision may take to commit before its outcome is reported unknown.
pub const PROPOSE_TIMEOUT_MS: u64 = 10_000;

/// Milliseconds between retries while no controller is known or it moved.
pub const CONTROLLER_RETRY_MS: u64 = 50;

/// Milliseconds between heartbeats while the broker is fenced or shutting down (it wants the
/// controller's next answer soon); otherwise broker.heartbeat.interval.ms applies.
pub const FAST_HEARTBEAT_MS: u64 = 50;

/// Records: most partition records one admin request (ElectLeaders, AlterPartitionReassignments)
/// may produce; more is refused as a whole with POLICY_VIOLATION (Kafka's
/// `MAX_RECORDS_PER_USER_OP`). Keeps one decision's entry far below the metadata batch bound (a
/// partition change is a few hundred bytes). Enforced by `Controller::elect_leaders` and
/// `Controller::alter_partition_reassignments`.
pub const RECORDS_PER_USER_OP_MAX: usize = 10_000;

/// Partitions: most ISR changes one `AlterPartitions` request may carry (a broker sends more as
/// several requests, one after another); more are refused as a whole with POLICY_VIOLATION. One
/// change is a few hundred bytes, so a request stays far below `APP_RPC_BYTES_MAX`. Enforced by
/// `Controller::alter_partitions` and the sender in `millrace-replication`.
pub const ISR_CHANGES_PER_REQUEST_MAX: usize = 5_000;

/// Partitions: most preferred-leader elections one automatic rebalance pass makes; a pass that
/// reaches it runs again at the next tick instead of after `leader.imbalance.check.interval.seconds`
/// (Kafka's `MAX_ELECTIONS_PER_IMBALANCE`). Enforced by `Controller::rebalance_leaders`.
pub const LEADER_REBALANCE_ELECTIONS_MAX: usize = 1_000;

/// Bytes: most bytes one metadata entry of a decision may encode to. A decision larger than this
/// is committed as a metadata transaction over several entries (`entries::entries_of`). Half the
/// quorum's bound on one entry, so an AppendEntries of one full entry stays small next to
/// `APPEND_ENTRIES_BYTES_MAX` (a leader and ISR change is ~240 bytes: ~2,000 per entry).
pub const DECISION_ENTRY_BYTES_TARGET: usize = 512 * 1024;

/// Bytes: most bytes one decision's records may encode to in all. Every node holds an open
/// metadata transaction in its image (and its snapshot) until it ends, so a decision is bounded
/// well inside a snapshot; one larger (over 250,000 partition changes) is refused with one error
/// line and `millrace_controller_decisions_refused_total`. Enforced by `entries::entries_of`.
pub const DECISION_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Milliseconds: first pause before a broker retries a registration that failed; doubled after
/// each failure up to `REGISTRATION_RETRY_MS_MAX`. Enforced by `lifecycle`.
pub const REGISTRATION_RETRY_MS_MIN: u64 = 200;

/// Milliseconds: longest pause between two registration attempts, so a controller that keeps
/// refusing is asked (and logged about) at most this often.
pub const REGISTRATION_RETRY_MS_MAX: u64 = 2_000;

const _: () = assert!(LEADER_REBALANCE_ELECTIONS_MAX <= RECORDS_PER_USER_OP_MAX);
const _: () =
    assert!(2 * DECISION_ENTRY_BYTES_TARGET <= millrace_quorum::limits::ENTRY_PAYLOAD_BYTES_MAX);
const _: () = assert!(DECISION_ENTRY_BYTES_TARGET < DECISION_BYTES_MAX);
const _: () = assert!(2 * DECISION_BYTES_MAX <= millrace_quorum::limits::SNAPSHOT_BYTES_MAX);
const _: () = assert!(REGISTRATION_RETRY_MS_MIN <= REGISTRATION_RETRY_MS_MAX);
const _: () = assert!(ISR_CHANGES_PER_REQUEST_MAX <= RECORDS_PER_USER_OP_MAX);

/// Replicas: most offline replicas one BrokerHeartbeat may report (a broker's replicas on failed
/// log dirs). Bounds the controller's soft state per broker; a heartbeat naming more is refused
/// (INVALID_REQUEST). Enforced by `Controller::heartbeat`.
pub const OFFLINE_REPLICAS_PER_HEARTBEAT_MAX: usize = 1_000_000;

/// Groups: most GROUP resources with dynamic configs at once. Every config lives in the metadata
/// image and its snapshots on every node; Kafka sets no bound, Millrace refuses a new group's
/// configs past this one (INVALID_REQUEST). Enforced by `Controller::set_group_configs`.
pub const GROUPS_WITH_CONFIGS_MAX: usize = 10_000;

/// Bytes: most one group's configs may hold (names, values and the group id), so that one
/// group's record fits a metadata entry and all of them fit a snapshot. Enforced by
/// `Controller::set_group_configs` (INVALID_CONFIG).
pub const GROUP_CONFIG_BYTES_MAX: usize = 8 * 1024;

const _: () = assert!(GROUP_CONFIG_BYTES_MAX * 2 <= DECISION_ENTRY_BYTES_TARGET);
const _: () = assert!(
    GROUPS_WITH_CONFIGS_MAX * GROUP_CONFIG_BYTES_MAX * 2
        <= millrace_quorum::limits::SNAPSHOT_BYTES_MAX
);
