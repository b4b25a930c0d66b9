//! Every limit the store enforces, as a named constant.
//!
//! Each constant says its unit, why it exists and what enforces it. Lengths read from the wire or
//! from disk are checked against these before anything is allocated.

/// Bytes: the v2 record batch header (baseOffset .. recordCount). Fixed by the Kafka format.
pub const BATCH_HEADER_BYTES: usize = 61;

/// Bytes: baseOffset (8) + batchLength (4), the part of a batch not counted in `batchLength`.
pub const LOG_OVERHEAD_BYTES: usize = 12;

/// Bytes: smallest legal `batchLength` (the header after the 12-byte prefix, no records).
pub const BATCH_LENGTH_MIN: usize = BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES;

/// Bytes: largest batch (with its 12-byte prefix) the store accepts on append and reads back in
/// recovery, 100 MiB: Kafka's default `socket.request.max.bytes`, so every batch that fits a
/// default request fits here. Append refuses a larger batch with `MessageTooLarge` whatever the
/// topic's `max.message.bytes` says (`log::append`), and a scan (recovery, index rebuild)
/// treats a larger `batchLength` on disk as corruption (`segment::scan_batches`), so the two
/// agree: recovery accepts every batch append could have accepted. The broker's
/// `message.max.bytes`/`max.message.bytes` settings are validated against it at start.
pub const BATCH_BYTES_MAX: usize = 100 * 1024 * 1024;

/// Bytes: largest output of one decompression (the produce-time record walk, compaction, exact
/// timestamp lookup). A batch that inflates beyond this is refused as a decompression bomb
/// (CORRUPT_MESSAGE on produce). Enforced by `compression::decompress` and `validator`.
pub const DECOMPRESSED_BYTES_MAX: usize = 128 * 1024 * 1024;

/// Records: most records decoded from one batch. Enforced by `records::decode_records`.
pub const RECORDS_PER_BATCH_MAX: usize = 4 * 1024 * 1024;

/// Headers: most headers on one record. Enforced by `records::decode_records`.
pub const HEADERS_PER_RECORD_MAX: usize = 64 * 1024;

/// Batches: per producer id, how many recent batches are kept for duplicate detection. Kafka's
/// value; clients keep at most 5 requests in flight for the same reason.
pub const PRODUCER_BATCH_CACHE: usize = 5;

/// Bytes: largest producer-state snapshot, offset checkpoint or leader-epoch checkpoint file the
/// store will read. Enforced by `checkpoint::read_bounded`.
pub const CHECKPOINT_FILE_BYTES_MAX: usize = 256 * 1024 * 1024;

/// Entries: most producer ids one snapshot may hold. Enforced by `producer_state` decoding.
pub const PRODUCERS_PER_SNAPSHOT_MAX: usize = 4 * 1024 * 1024;

/// Entries: most aborted (or completed, not yet stable) transactions one snapshot may hold; at
/// 32 bytes each the snapshot stays under `CHECKPOINT_FILE_BYTES_MAX`.
pub const ABORTED_TXNS_PER_SNAPSHOT_MAX: usize = 4 * 1024 * 1024;

/// Producer snapshots kept per partition (the newest ones); older ones are deleted.
pub const PRODUCER_SNAPSHOTS_KEPT: usize = 2;

/// Bytes: how much the reader fetches per `pread` while scanning batch headers.
pub const SCAN_CHUNK_BYTES: usize = 64 * 1024;

/// Offsets: largest `offset - segment base offset` a segment may hold. Index entries store the
/// relative offset in 32 bits; Kafka rolls at `i32::MAX` for the same reason.
pub const SEGMENT_RELATIVE_OFFSET_MAX: i64 = i32::MAX as i64;

/// Bytes: largest `.log` segment; positions are stored as u32 in the offset index.
pub const SEGMENT_BYTES_MAX: u64 = i32::MAX as u64;

/// Bytes: `segment.bytes` is clamped to at least this, so that a roll always makes progress.
pub const SEGMENT_BYTES_MIN: u64 = 14;

/// Bytes: `segment.index.bytes` is clamped to at least this (room for a few entries).
pub const SEGMENT_INDEX_BYTES_MIN: u64 = 64;

/// Files: floor on the open file cache so that a partition's active segment always fits.
pub const OPEN_FILES_MIN: usize = 8;

/// Bytes: most log bytes the cleaner reads per partition per maintenance tick; bounds the time one
/// tick holds the cleaner (never the partition lock).
pub const CLEANER_BYTES_PER_TICK: u64 = 256 * 1024 * 1024;

/// Segments: most segments deleted by retention per partition per maintenance tick.
pub const RETENTION_SEGMENTS_PER_TICK: usize = 1024;

/// Keys: most distinct keys the cleaner holds in its offset map for one cleaning pass; the dirty
/// range of a pass ends at the segment where the map filled up.
pub const CLEANER_KEYS_MAX: usize = 4 * 1024 * 1024;

/// Bytes: most key bytes the cleaner's offset map holds (same rule as `CLEANER_KEYS_MAX`).
pub const CLEANER_MAP_BYTES_MAX: usize = 256 * 1024 * 1024;

/// Passes: most cleaning passes started per maintenance tick.
pub const CLEANER_PASSES_PER_TICK: usize = 16;

/// Bytes: the cleaner writes its output in chunks of this size.
pub const CLEANER_WRITE_CHUNK_BYTES: usize = 1024 * 1024;

/// Threads: most threads the flusher uses to fdatasync the partitions of one round in parallel.
pub const FLUSHER_THREADS: usize = 4;

/// Partitions: a flush round with at least this many dirty partitions is one `syncfs` of the data
/// directory's file system instead of one `fdatasync` per file (issue 15 item 4; W5 has 1,000).
pub const SYNCFS_ROUND_PARTITIONS_MIN: usize = 32;

/// Threads: most threads `Store::shutdown` closes partitions on at once. Closing is mostly
/// waiting on fsyncs (five or six per partition); fsyncs of different files overlap in the
/// device queue and share journal commits, so 10,000 partitions stop in a few seconds instead of
/// one fsync after another for a minute. Enforced by `Store::shutdown`.
pub const SHUTDOWN_THREADS: usize = 16;

/// Bytes: per `pread` while a fetch skips from an index entry to the fetch offset (about two index
/// intervals at the default `index.interval.bytes`).
pub const READ_SKIP_CHUNK_BYTES: usize = 8 * 1024;

/// Bytes: a thread keeps the buffer it checks sealed-segment reads in (`log/read.rs`) while it is
/// no larger than this; a larger read's buffer is freed after it.
pub const READ_SCRATCH_RETAIN_BYTES: usize = 16 * 1024 * 1024;

/// Bytes: the buffer through which `compression::reader` streams gzip and zstd output (snappy and
/// lz4 stream from their own block buffer); the produce-time record walk never holds more of the
/// decompressed payload than this plus the codec's own window or block.
pub const DECOMPRESS_SCRATCH_BYTES: usize = 64 * 1024;

/// Batches: most batches one `append` call may carry.
pub const BATCHES_PER_APPEND_MAX: usize = 1024;

const _: () = assert!(BATCH_LENGTH_MIN == 49);
const _: () = assert!(SCAN_CHUNK_BYTES >= BATCH_HEADER_BYTES);
const _: () = assert!(BATCH_BYTES_MAX as u64 <= SEGMENT_BYTES_MAX);
const _: () = assert!(PRODUCER_BATCH_CACHE >= 1);
const _: () = assert!(SHUTDOWN_THREADS >= 1);

/// Most refused records one append names in `AppendError::InvalidRecords` (count). Kafka lists
/// every one; a batch can hold millions of records, and a client needs the list only to fail
/// those records, so the rest are counted in the message instead.
pub const RECORD_ERRORS_MAX: usize = 1000;

/// Milliseconds: the scrubber thread looks for requested scans, a due pass and its stop flag
/// at least this often (and sleeps for its rate limit in steps of at most this).
pub const SCRUB_POLL_MS: u64 = 100;

/// Milliseconds: the scrubber's rate limit is measured over windows of this length.
pub const SCRUB_RATE_WINDOW_MS: u64 = 1_000;

/// Milliseconds: how long one `statvfs` reading of a log dir's free space serves the produce
/// path's low-water-mark check (`free_space`).
pub const FREE_SPACE_CACHE_MS: u64 = 100;

/// Directories whose free-space reading is cached at once (the cache is cleared beyond it).
pub const FREE_SPACE_CACHE_DIRS_MAX: usize = 4096;

/// Bytes: the buffer of one read/write step when a replica move copies a file between log dirs
/// (`log/relocate.rs`), and when a repair rewrites a segment around its damaged batches
/// (`log/damage.rs`). Bounds their memory; 1 MiB keeps the syscall count low.
pub const COPY_CHUNK_BYTES: usize = 1024 * 1024;

/// Attempts of a replica move whose log was truncated under its lock-free copy before it gives
/// up (`replica_move`); each attempt copies the sealed segments again.
pub const MOVE_COPY_ATTEMPTS: usize = 3;
