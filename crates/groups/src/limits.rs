//! Limits of the group coordinator. Each is a named constant with its unit, why it exists and what
//! enforces it. Operator-tunable bounds (`group.max.size`, `group.min.session.timeout.ms`,
//! `group.max.session.timeout.ms`, `offset.metadata.max.bytes`) are broker configs carried in
//! the coordinator's `CoordinatorConfig`; these are the hard ceilings above them.

/// Bytes of protocol metadata one member may send in a JoinGroup, summed over its protocols.
/// A consumer's subscription is a few hundred bytes; Connect's is smaller. Enforced in
/// `Group::join` (INVALID_REQUEST), so that one member cannot make the leader's JoinGroup
/// response or the group's metadata record unbounded.
pub const MEMBER_METADATA_BYTES_MAX: usize = 256 * 1024;

/// Protocols one member may offer in a JoinGroup (count). Clients offer one to three.
/// Enforced in `Group::join` (INVALID_REQUEST).
pub const PROTOCOLS_PER_MEMBER_MAX: usize = 32;

/// Bytes of one member's assignment in a SyncGroup from the leader. Enforced in `Group::sync`
/// (INVALID_REQUEST, and the group rebalances again so it is never stuck).
pub const ASSIGNMENT_BYTES_MAX: usize = 256 * 1024;

/// Members per group (count), whatever `group.max.size` says (its default is i32::MAX).
/// Enforced in `Group::join` (GROUP_MAX_SIZE_REACHED).
pub const MEMBERS_PER_GROUP_MAX: usize = 4096;

/// Members per group that got MEMBER_ID_REQUIRED and have not joined yet (count). Each expires
/// after its session timeout; this bounds what a client looping on empty member ids can pile up.
/// Enforced in `Group::join` (GROUP_MAX_SIZE_REACHED).
pub const PENDING_MEMBERS_PER_GROUP_MAX: usize = 4096;

/// Longest group id (bytes). Kafka's strings are at most i16::MAX bytes on the wire. Enforced in
/// the coordinator (INVALID_GROUP_ID).
pub const GROUP_ID_BYTES_MAX: usize = 32_767;

/// Longest rebalance timeout a member may ask for (ms). Java's default is max.poll.interval.ms =
/// 300 s; this keeps a hostile member from parking a rebalance for weeks. Enforced by clamping
/// in `Group::join`.
pub const REBALANCE_TIMEOUT_MS_MAX: i32 = 30 * 60 * 1000;

/// Partitions one OffsetCommit may write (count); all of them go into one record batch.
/// Enforced in the coordinator (INVALID_REQUEST for the whole request).
pub const COMMIT_PARTITIONS_MAX: usize = 100_000;

/// Bytes read from `__consumer_offsets` per read call during replay. The read returns at least
/// one whole batch whatever this says (`min_one_batch`), so it bounds memory, not progress.
pub const REPLAY_READ_BYTES: usize = 4 * 1024 * 1024;

/// Bytes asked for when reading the one batch a snapshot's mark names (`replay::batch_mark_before`);
/// the read returns that whole batch anyway (`min_one_batch`), so this only keeps it to one batch.
pub const MARK_READ_BYTES: usize = 1;

/// Threads replaying `__consumer_offsets` partitions at once (count). A broker that becomes
/// leader of every partition at once (start, failover of a whole broker) queues one load per
/// partition; this many blocking threads work through the queue. Kafka's coordinator loads on
/// its few coordinator threads for the same reason. Enforced by the coordinator's loader.
pub const LOADER_THREADS_MAX: usize = 2;

/// Bytes of one record key or value accepted during replay or snapshot load; anything longer is
/// skipped as corrupt. Enforced in `records::decode_*` and the coordinator's replay.
pub const RECORD_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Entries (members, protocols) in one decoded group metadata record. Enforced in
/// `records::decode_value`.
pub const RECORD_ARRAY_MAX: usize = 1_000_000;

/// Period of the coordinator's timer tick (ms): session expiry, rebalance and initial-delay
/// deadlines are honoured to within this.
pub const TIMER_TICK_MS: u64 = 100;

const _: () = assert!(MEMBER_METADATA_BYTES_MAX <= RECORD_BYTES_MAX);
const _: () = assert!(ASSIGNMENT_BYTES_MAX <= RECORD_BYTES_MAX);
const _: () = assert!(PENDING_MEMBERS_PER_GROUP_MAX <= MEMBERS_PER_GROUP_MAX);
const _: () = assert!(MARK_READ_BYTES <= REPLAY_READ_BYTES);
const _: () = assert!(LOADER_THREADS_MAX >= 1);

/// Bytes of metadata one committed offset may carry (Kafka's offset.metadata.max.bytes default).
/// Enforced in the coordinator's OffsetCommit (OFFSET_METADATA_TOO_LARGE for that partition).
pub const OFFSET_METADATA_BYTES_MAX: usize = 4096;

/// Longest subscription regular expression a ConsumerGroupHeartbeat may carry (bytes): the
/// pattern is compiled with the `regex` crate's own size limit as well.
pub const SUBSCRIPTION_REGEX_BYTES_MAX: usize = 4096;

/// Compiled size a subscription regex may reach (the `regex` crate's `size_limit`): bounds the
/// memory and compile time one member's pattern can cost the coordinator.
pub const SUBSCRIPTION_REGEX_COMPILED_BYTES_MAX: usize = 1 << 20;
