//! Every limit the quorum enforces, as a named constant.
//!
//! Each constant says its unit, why it exists and what enforces it. Lengths read from the network
//! or from disk are checked against these before anything is allocated; relations between them
//! are checked at compile time at the bottom of this file.

/// Bytes: largest payload of one proposed entry (`Quorum::propose`). The metadata log carries
/// small records; a bound keeps one entry from filling a frame or the log cache. Enforced by
/// `Quorum::propose` (before the entry reaches Raft) and by the log file reader.
pub const ENTRY_PAYLOAD_BYTES_MAX: usize = 1024 * 1024;

/// Voters: most voters in `controller.quorum.voters`. Raft needs a majority of them for every
/// commit, so more voters only slow commits; Kafka recommends 3 or 5. Enforced by
/// `QuorumConfig::validate`.
pub const VOTERS_MAX: usize = 9;

/// Nodes: most observers (broker-only nodes) one quorum accepts as learners. Bounds the size of a
/// membership entry. Enforced by the join handler in `server`.
pub const OBSERVERS_MAX: usize = 1024;

/// Bytes: longest node address (`host:port`) kept in a membership entry or the voter map.
/// Enforced by `QuorumConfig::validate` and the join handler in `server`.
pub const NODE_ADDR_BYTES_MAX: usize = 255;

/// Bytes: membership entries hold every node's id and address, twice during a joint change.
const MEMBERSHIP_BYTES_MAX: usize = 2 * (VOTERS_MAX + OBSERVERS_MAX) * (16 + NODE_ADDR_BYTES_MAX);

/// Bytes: largest encoded log record (one entry, its log id and envelope). Anything longer in
/// the log file is treated as a torn or corrupt tail. Enforced by `log_file` on write and read.
pub const LOG_RECORD_BYTES_MAX: usize = ENTRY_PAYLOAD_BYTES_MAX + MEMBERSHIP_BYTES_MAX + 4096;

/// Bytes: largest snapshot (`StateMachine::snapshot` output). The snapshot is held in memory while
/// it is written, sent and installed. Enforced by `state_machine` (build, read, install) and by
/// the InstallSnapshot handler in `server` (offset + chunk within this bound).
pub const SNAPSHOT_BYTES_MAX: usize = 256 * 1024 * 1024;

/// Bytes: snapshot bytes per InstallSnapshot RPC (openraft's `snapshot_max_chunk_size`).
pub const SNAPSHOT_CHUNK_BYTES: usize = 1024 * 1024;

/// Bytes: largest small record or file read whole: the vote file, the committed-index file and
/// the log file's header record. Enforced by `disk::read_small` and the readers of those files.
pub const SMALL_FILE_BYTES_MAX: usize = 64 * 1024;

/// Bytes: largest frame on the controller listener (4-byte length prefix excluded). Checked
/// before allocating on read and before sending on write (`wire`).
pub const FRAME_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Bytes: largest application RPC payload (`Quorum::call` request and `RpcHandler` response).
/// Enforced by `Quorum::call` and by the server before it answers.
pub const APP_RPC_BYTES_MAX: usize = 8 * 1024 * 1024;

/// Entries: most log entries in one AppendEntries RPC (openraft's `max_payload_entries`).
pub const APPEND_ENTRIES_PER_RPC_MAX: u64 = 64;

/// Bytes: an AppendEntries request of several entries that encodes past this is split
/// (PayloadTooLarge, openraft resends fewer). openraft 0.9 gives each AppendEntries one heartbeat
/// interval to travel, be fsynced by the follower and be answered; a request too big for that
/// times out on every retry and the follower never catches up. Enforced by `network`.
pub const APPEND_ENTRIES_BYTES_MAX: usize = 2 * 1024 * 1024;

/// Connections: most open inbound connections on the controller listener; more are refused
/// (closed at once). Enforced by the accept loop in `server`.
pub const INBOUND_CONNECTIONS_MAX: usize = 512;

/// Connections: most idle outbound connections kept per peer. Enforced by `network::Pool`.
pub const IDLE_CONNECTIONS_PER_PEER_MAX: usize = 4;

/// Milliseconds: an outbound connection idle longer than this is not reused (the server may have
/// closed it: `INBOUND_IDLE_MS_MAX`). Enforced by `network::Pool`.
pub const OUTBOUND_IDLE_MS_MAX: u64 = 20_000;

/// Milliseconds: an inbound connection with no request for this long is closed by the server.
pub const INBOUND_IDLE_MS_MAX: u64 = 60_000;

/// Milliseconds: connect plus handshake to a peer must finish within this (or the caller's
/// shorter deadline). Enforced by `network`.
pub const CONNECT_TIMEOUT_MS: u64 = 2_000;

/// Milliseconds: the server waits this long for a new connection's Hello. Enforced by `server`.
pub const HANDSHAKE_TIMEOUT_MS: u64 = 5_000;

/// Milliseconds: first wait before reconnecting to a peer that could not be reached; doubled per
/// failure up to `RECONNECT_BACKOFF_MS_MAX`. Enforced by `network::Pool`.
pub const RECONNECT_BACKOFF_MS_MIN: u64 = 20;

/// Milliseconds: longest wait between reconnect attempts to an unreachable peer.
pub const RECONNECT_BACKOFF_MS_MAX: u64 = 1_000;

/// Commands: storage writes queued for the log writer thread. openraft waits for every append to
/// be flushed before the next, so a handful is the normal depth. Enforced by the bounded channel
/// in `log_store`.
pub const WRITER_QUEUE_MAX: usize = 1024;

/// Bytes: chunk size used when reading the log file at start and copying it during a purge.
pub const LOG_READ_CHUNK_BYTES: usize = 1024 * 1024;

/// Milliseconds: `Quorum::shutdown` waits at most this long for the log writer thread to finish
/// the writes openraft already queued.
pub const SHUTDOWN_WAIT_MS: u64 = 10_000;

/// Bytes: the metadata log's space reserve (`reserve`), released when a log, vote or snapshot
/// write finds the disk full. Metadata entries are small (a DeleteTopics is a few hundred bytes)
/// and a snapshot of a small cluster's image a few KiB, so 8 MiB carries the quorum through
/// thousands of changes — the operator's deletes among them — on a disk the store has filled.
pub const RESERVE_BYTES: u64 = 8 * 1024 * 1024;

/// Milliseconds: a released reserve is written again no sooner than this after the last try;
/// also the period of the quorum's timer that tries it when no write comes.
pub const RESERVE_RETRY_INTERVAL_MS: u64 = 5_000;

/// Bytes: the least a top-up writes into the reserve (unless that completes it), so that a disk
/// hovering at full does not see the reserve file grow by a few KiB every few seconds.
pub const RESERVE_TOP_UP_MIN_BYTES: u64 = 1024 * 1024;

/// Milliseconds: first wait before a write that found no space (and no reserve) is retried; it
/// doubles up to `NO_SPACE_RETRY_MS_MAX`.
pub const NO_SPACE_RETRY_MS_MIN: u64 = 10;

/// Milliseconds: longest wait between two retries of a write that found no space.
pub const NO_SPACE_RETRY_MS_MAX: u64 = 1_000;

/// Milliseconds: while a write waits for space, a warning at most this often.
pub const NO_SPACE_LOG_INTERVAL_MS: u64 = 30_000;

const _: () = assert!(NO_SPACE_RETRY_MS_MIN >= 1 && NO_SPACE_RETRY_MS_MIN <= NO_SPACE_RETRY_MS_MAX);
const _: () = assert!(LOG_RECORD_BYTES_MAX + 64 <= FRAME_BYTES_MAX);
const _: () = assert!(ENTRY_PAYLOAD_BYTES_MAX < APPEND_ENTRIES_BYTES_MAX);
const _: () = assert!(APPEND_ENTRIES_BYTES_MAX <= FRAME_BYTES_MAX);
const _: () = assert!(SNAPSHOT_CHUNK_BYTES + 64 * 1024 <= FRAME_BYTES_MAX);
const _: () = assert!(APP_RPC_BYTES_MAX + 64 * 1024 <= FRAME_BYTES_MAX);
const _: () = assert!(SNAPSHOT_CHUNK_BYTES <= SNAPSHOT_BYTES_MAX);
const _: () = assert!(FRAME_BYTES_MAX <= u32::MAX as usize);
const _: () = assert!(LOG_RECORD_BYTES_MAX <= u32::MAX as usize);
const _: () = assert!(RECONNECT_BACKOFF_MS_MIN <= RECONNECT_BACKOFF_MS_MAX);
const _: () = assert!(OUTBOUND_IDLE_MS_MAX < INBOUND_IDLE_MS_MAX);
const _: () = assert!(VOTERS_MAX >= 1 && APPEND_ENTRIES_PER_RPC_MAX >= 1);
