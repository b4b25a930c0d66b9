//! Loading a partition directory at startup, and recovery after an unclean stop.
//!
//! Steps (Kafka's `LogLoader`): finish or undo interrupted file operations (`.swap` files are
//! complete and replace their segments; `.cleaned`, `.deleted` and `.tmp` files are deleted);
//! discover segments; after an unclean stop validate every batch from the segment holding the
//! recovery point (length bounds, magic, CRC, increasing offsets), truncate the segment at the
//! first invalid byte and delete every later segment; rebuild their indexes; rebuild the
//! leader-epoch cache from batch headers; rebuild producer state from the newest usable snapshot
//! plus the batch headers after it. After a clean shutdown only the active segment's tail after
//! its last index entry is checked, and sealed segments are loaded lazily on first use.
//!
//! Runs before the partition is shared, so no locking concerns except the store's file cache.
//! It only reads and repairs files; the `PartitionLog` it hands what it found to
//! (`PartitionLog::open`) owns the partition from then on (and rebuilds producer state itself).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::checkpoint::{self, LEADER_EPOCH_FILE};
use crate::config::TopicPartition;
use crate::error::StoreError;
use crate::leader_epoch::LeaderEpochCache;
use crate::log::{list_snapshots, now_ms, snapshot_path, LoadedLog, PartitionLog};
use crate::partition_dir;
use crate::segment::{self, Segment, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::shared::{LogDir, StoreShared};

/// What the data-dir checkpoints say about one partition.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PartitionCheckpoints {
    pub(crate) recovery_point: Option<i64>,
    pub(crate) log_start_offset: Option<i64>,
    pub(crate) high_watermark: Option<i64>,
}

fn io_err(what: impl std::fmt::Display, e: std::io::Error) -> StoreError {
    StoreError::io(what, e)
}

/// The log segments in `dir` with their file sizes; deletes leftovers of interrupted operations
/// (temporary, cleaned and deleted files, index files without their segment).
fn discover_segments(
    storage: &dyn crate::storage::Storage,
    dir: &Path,
) -> Result<BTreeMap<i64, u64>, StoreError> {
    let mut sizes: BTreeMap<i64, u64> = BTreeMap::new();
    let mut index_files = Vec::new();
    let entries =
        std::fs::read_dir(dir).map_err(|e| io_err(format!("list {}", dir.display()), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_err(format!("list {}", dir.display()), e))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let path = entry.path();
        if name.ends_with(".tmp") || name.ends_with(".cleaned") || name.ends_with(".deleted") {
            storage
                .remove_file(&path)
                .map_err(|e| io_err(format!("remove {}", path.display()), e))?;
            continue;
        }
        match segment::parse_segment_name(&name) {
            Some((base, LOG_SUFFIX)) => {
                let len = entry
                    .metadata()
                    .map_err(|e| io_err(format!("stat {}", path.display()), e))?
                    .len();
                sizes.insert(base, len);
            }
            Some((base, INDEX_SUFFIX | TIME_INDEX_SUFFIX)) => index_files.push((base, path)),
            _ => {}
        }
    }
    for (base, path) in index_files {
        if !sizes.contains_key(&base) {
            storage
                .remove_file(&path)
                .map_err(|e| io_err(format!("remove {}", path.display()), e))?;
        }
    }
    Ok(sizes)
}

/// Deletes segment `base`'s log and index files (and forgets their open handles).
fn remove_segment_files(shared: &StoreShared, dir: &Path, base: i64) -> Result<(), StoreError> {
    for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
        let p = segment::segment_path(dir, base, suffix);
        shared.cache.invalidate(&p);
        shared
            .storage
            .remove_file(&p)
            .map_err(|e| io_err(format!("remove {}", p.display()), e))?;
    }
    Ok(())
}

/// Producer snapshots past the log end describe a future that was lost: deletes them.
fn remove_snapshots_past(
    storage: &dyn crate::storage::Storage,
    dir: &Path,
    log_end_offset: i64,
) -> Result<(), StoreError> {
    for snap in list_snapshots(dir) {
        if snap > log_end_offset {
            let p = snapshot_path(dir, snap);
            storage
                .remove_file(&p)
                .map_err(|e| io_err(format!("remove {}", p.display()), e))?;
        }
    }
    Ok(())
}

/// What recovery learned about leader epochs from the batches it read.
struct EpochEvidence {
    first_base: i64,
    log_end_offset: i64,
    /// (leader epoch, base offset) of every batch read from `first_recovered_offset` on.
    headers: Vec<(i32, i64)>,
    first_recovered_offset: Option<i64>,
}

/// The leader epoch cache after recovery: the checkpointed one, with what recovery re-read
/// replaced by the batch headers (rebuilt from every batch when the checkpoint is missing or
/// corrupt), cut at the log end; rewritten only if recovery changed it.
fn recover_epoch_cache(
    shared: &StoreShared,
    dir: &Path,
    segments: &BTreeMap<i64, Segment>,
    mut ev: EpochEvidence,
) -> Result<(LeaderEpochCache, bool), StoreError> {
    let stored = checkpoint::read_bounded(&dir.join(LEADER_EPOCH_FILE))
        .ok()
        .flatten()
        .and_then(|b| checkpoint::decode_epochs(&b));
    let stored_entries = stored.clone();
    let mut epochs = match stored {
        Some(entries) => LeaderEpochCache::from_entries(entries),
        None if ev.log_end_offset > ev.first_base => {
            // Missing or corrupt: rebuild from every batch header.
            ev.headers.clear();
            ev.first_recovered_offset = Some(ev.first_base);
            for seg in segments.values() {
                let file = shared
                    .cache
                    .get(&seg.log_path(dir), false)
                    .map_err(|e| io_err("open segment", e))?;
                segment::scan_batches(&file, 0, seg.size, seg.base_offset, i64::MIN, |_, h, _| {
                    ev.headers.push((h.partition_leader_epoch, h.base_offset));
                })
                .map_err(|e| io_err("scan segment", e))?;
            }
            LeaderEpochCache::default()
        }
        None => LeaderEpochCache::default(),
    };
    if let Some(from) = ev.first_recovered_offset {
        let begun: Vec<(i32, i64)> = epochs
            .entries()
            .iter()
            .copied()
            .filter(|(_, s)| *s >= from)
            .collect();
        epochs.truncate_from_end(from);
        for (epoch, offset) in ev.headers {
            epochs.assign(epoch, offset);
        }
        // An epoch a leader began at the log end has no batch to rebuild it from; it stays if
        // the log still ends where it began (`begin_leader_epoch` wrote it before returning).
        for (epoch, start) in begun {
            if start == ev.log_end_offset {
                epochs.assign(epoch, start);
            }
        }
    }
    epochs.truncate_past(ev.log_end_offset);
    // Rewrite the checkpoint only if recovery changed it (saves an fsync per partition).
    let mut unwritten = false;
    if stored_entries.as_deref() != Some(epochs.entries()) {
        let bytes = checkpoint::encode_epochs(epochs.entries());
        let path = dir.join(LEADER_EPOCH_FILE);
        match checkpoint::write_atomic(&*shared.storage, &path, &bytes)
            .map_err(|e| io_err(format!("write {}", path.display()), e))
        {
            // A full disk must not keep the partition (or the broker) from starting: the
            // flusher writes it once there is room (`LoadedLog::epochs_unwritten`).
            Err(e) if e.is_no_space() => {
                tracing::warn!(file = %path.display(), "no space to rewrite the leader-epoch checkpoint at start; retried later");
                unwritten = true;
            }
            other => other?,
        }
    }

    Ok((epochs, unwritten))
}

/// Recovered sealed segments get fresh index files (the old ones may be stale).
fn rewrite_recovered_indexes(
    shared: &StoreShared,
    dir: &Path,
    segments: &BTreeMap<i64, Segment>,
    recovered_bases: &[i64],
    active_base: i64,
) -> Result<(), StoreError> {
    for base in recovered_bases.iter().filter(|b| **b != active_base) {
        let Some(seg) = segments.get(base) else {
            continue;
        };
        if let Some((index, time_index)) = seg.encoded_indexes() {
            for (suffix, bytes) in [(INDEX_SUFFIX, index), (TIME_INDEX_SUFFIX, time_index)] {
                let p = segment::segment_path(dir, *base, suffix);
                shared.cache.invalidate(&p);
                match segment::write_index_file(&*shared.storage, &p, &bytes)
                    .map_err(|e| io_err(format!("write {}", p.display()), e))
                {
                    // No space for a fresh index: drop the stale one (which costs no space) so
                    // that nothing trusts it; the segment's indexes are in memory, and a later
                    // load rebuilds a missing index file from the log.
                    Err(e) if e.is_no_space() => {
                        tracing::warn!(file = %p.display(), "no space to rewrite a recovered index; removed it");
                        let _ = shared.storage.remove_file(&p);
                    }
                    other => {
                        other?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Loads (and if needed recovers) the partition in `dir`.
pub(crate) fn load_partition(
    shared: &Arc<StoreShared>,
    log_dir: &Arc<LogDir>,
    tp: TopicPartition,
    dir: &Path,
    ckpt: PartitionCheckpoints,
    clean: bool,
) -> Result<Arc<PartitionLog>, StoreError> {
    let persisted_config = partition_dir::read_config(dir);
    let config = persisted_config.clone().unwrap_or_default();
    let storage = &*shared.storage;
    crate::cleaner::finish_interrupted_swaps(storage, dir)?;

    let mut sizes = discover_segments(storage, dir)?;
    let now = now_ms();
    if sizes.is_empty() {
        let base = ckpt.log_start_offset.unwrap_or(0).max(0);
        let path = segment::segment_path(dir, base, LOG_SUFFIX);
        shared
            .cache
            .get(&path, true)
            .map_err(|e| io_err(format!("create {}", path.display()), e))?;
        sizes.insert(base, 0);
    }
    let bases: Vec<i64> = sizes.keys().copied().collect();
    let mut segments: BTreeMap<i64, Segment> = BTreeMap::new();
    for (i, base) in bases.iter().enumerate() {
        let next = bases.get(i + 1).copied().unwrap_or(*base);
        let size = sizes.get(base).copied().unwrap_or(0);
        segments.insert(*base, Segment::new_unloaded(*base, size, next, now));
    }

    // Which segments to validate batch by batch.
    let last_base = *bases.last().unwrap_or(&0);
    let recover_from = if clean {
        last_base
    } else {
        let rp = ckpt.recovery_point.unwrap_or(i64::MIN);
        segments
            .range(..=rp)
            .next_back()
            .map_or(bases.first().copied().unwrap_or(0), |(b, _)| *b)
    };
    let mut epoch_headers: Vec<(i32, i64)> = Vec::new();
    let mut cut_after: Option<i64> = None;
    let mut prev_next: Option<i64> = segments
        .range(..recover_from)
        .next_back()
        .map(|(_, s)| s.next_offset);
    let mut first_recovered_offset: Option<i64> = None;
    let mut recovered_bases = Vec::new();
    for base in bases.iter().filter(|b| **b >= recover_from) {
        let Some(seg) = segments.get_mut(base) else {
            continue;
        };
        if prev_next.is_some_and(|p| *base != p) {
            // Does not start where the previous segment ended: this and everything after it is
            // invalid (segments, like batches, cover one contiguous offset range).
            cut_after = Some(*base);
            break;
        }
        let path = seg.log_path(dir);
        let file = shared
            .cache
            .get(&path, false)
            .map_err(|e| io_err(format!("open {}", path.display()), e))?;
        let file_size = seg.size;
        if clean {
            seg.ensure_loaded(dir, &file, &config)
                .map_err(|e| io_err(format!("load {}", path.display()), e))?;
        } else {
            let mut seen = Vec::new();
            let mut fresh = Segment::new_empty(*base, &config, now);
            fresh.size = file_size;
            let end = segment::scan_batches(&file, 0, file_size, *base, *base, |pos, h, _| {
                seen.push((h.partition_leader_epoch, h.base_offset));
                fresh.track_batch(pos, h, config.index_interval_bytes);
            })
            .map_err(|e| io_err(format!("recover {}", path.display()), e))?;
            fresh.size = end.valid_end;
            fresh.next_offset = end.next_offset;
            // The scan checked every batch's CRC: a read may send these bytes from the file.
            fresh.checked = segment::Checked::prefix(end.valid_end);
            fresh.finish_time_index();
            *seg = fresh;
            if first_recovered_offset.is_none() {
                first_recovered_offset = Some(*base);
            }
            epoch_headers.extend(seen);
            recovered_bases.push(*base);
        }
        if seg.size < file_size {
            tracing::warn!(partition = %tp, segment = base, valid = seg.size, file = file_size, "truncating log at the first invalid batch");
            storage
                .set_len(&file, seg.size)
                .map_err(|e| io_err(format!("truncate {}", path.display()), e))?;
            cut_after = Some(base + 1);
            break;
        }
        prev_next = Some(seg.next_offset);
    }
    if let Some(cut) = cut_after {
        let doomed: Vec<i64> = segments.range(cut..).map(|(b, _)| *b).rev().collect();
        for base in doomed {
            remove_segment_files(shared, dir, base)?;
            segments.remove(&base);
        }
    }
    // The active segment must be loaded (appends need its indexes).
    let active_base = segments.keys().next_back().copied().unwrap_or(0);
    if let Some(active) = segments.get_mut(&active_base) {
        if active.indexes.is_none() {
            let path = active.log_path(dir);
            let file = shared
                .cache
                .get(&path, false)
                .map_err(|e| io_err(format!("open {}", path.display()), e))?;
            active
                .ensure_loaded(dir, &file, &config)
                .map_err(|e| io_err(format!("load {}", path.display()), e))?;
        }
    }
    rewrite_recovered_indexes(shared, dir, &segments, &recovered_bases, active_base)?;
    let mut log_end_offset = segments.values().next_back().map_or(0, |s| s.next_offset);
    let mut first_base = segments.keys().next().copied().unwrap_or(0);
    let mut active_base = active_base;
    let checkpointed_start = ckpt.log_start_offset.unwrap_or(first_base).max(first_base);
    let started_over = checkpointed_start > log_end_offset;
    if started_over {
        // Everything left lies below a log start offset that was acknowledged (DeleteRecords,
        // retention) and checkpointed, while the end of the log was lost (flush policy `never`
        // and a power cut). Kafka's rule: start the log over at the log start offset, so offsets
        // below it are never handed out again.
        tracing::warn!(partition = %tp, log_start = checkpointed_start, log_end = log_end_offset, "log ends below its log start offset; starting it over at the log start offset");
        let doomed: Vec<i64> = segments.keys().rev().copied().collect();
        for base in doomed {
            remove_segment_files(shared, dir, base)?;
        }
        segments.clear();
        recovered_bases.clear();
        let path = segment::segment_path(dir, checkpointed_start, LOG_SUFFIX);
        shared
            .cache
            .get(&path, true)
            .map_err(|e| io_err(format!("create {}", path.display()), e))?;
        segments.insert(
            checkpointed_start,
            Segment::new_empty(checkpointed_start, &config, now),
        );
        log_end_offset = checkpointed_start;
        first_base = checkpointed_start;
        active_base = checkpointed_start;
        epoch_headers.clear();
        first_recovered_offset = None;
    }
    let log_start_offset = checkpointed_start.min(log_end_offset);

    let (epochs, epochs_unwritten) = recover_epoch_cache(
        shared,
        dir,
        &segments,
        EpochEvidence {
            first_base,
            log_end_offset,
            headers: epoch_headers,
            first_recovered_offset,
        },
    )?;

    remove_snapshots_past(storage, dir, log_end_offset)?;
    let recovery_point = if clean {
        log_end_offset
    } else {
        ckpt.recovery_point
            .unwrap_or(first_base)
            .clamp(first_base, log_end_offset)
            .min(recover_from)
    };
    let high_watermark = if shared.config.high_watermark_follows_durable {
        log_end_offset
    } else {
        ckpt.high_watermark
            .unwrap_or(log_start_offset)
            .clamp(log_start_offset, log_end_offset)
    };
    let mut unsynced = Vec::new();
    if !clean {
        // What recovery read may still be only in the page cache: let the flusher sync it.
        for base in &recovered_bases {
            if segments.contains_key(base) {
                for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
                    if *base != active_base || suffix == LOG_SUFFIX {
                        unsynced.push(segment::segment_path(dir, *base, suffix));
                    }
                }
            }
        }
    }
    let cleaner_point = crate::cleaner::read_cleaner_point(dir).unwrap_or(log_start_offset);
    PartitionLog::open(
        Arc::clone(shared),
        Arc::clone(log_dir),
        LoadedLog {
            tp,
            dir: dir.to_path_buf(),
            topic_id: partition_dir::read_topic_id(dir),
            config: persisted_config,
            segments,
            log_start_offset,
            high_watermark,
            recovery_point,
            epochs,
            cleaner_point,
            unsynced,
            sync_dir: !clean || started_over,
            epochs_unwritten,
        },
    )
}
