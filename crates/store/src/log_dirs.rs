//! Several log dirs (Kafka's `log.dirs`, "JBOD"): what `Store::open` finds in each dir, where a
//! new partition goes, and each dir's offset checkpoints and clean-shutdown marker.
//!
//! Where it sits: called by `Store` (`lib.rs`) at open, at partition creation and at each
//! maintenance tick; uses `shared::LogDir` (one per dir: path, offline state, checkpoint table).
//!
//! Layout: every dir holds `<topic>-<partition>` directories, its own three offset checkpoints
//! and its own clean-shutdown marker, as a Kafka log dir does. A replica being moved between dirs
//! (`replica_move`) adds `<topic>-<partition>.<id>-future` in the target dir while it copies and,
//! for the instant of the swap, `<topic>-<partition>.<id>-moved` in the source dir.
//!
//! Rules at open (decision 0071):
//! - a dir that cannot be created or listed starts offline; if every dir fails, the open fails;
//! - a partition live in two dirs fails the open (`StoreError::DuplicateLog`), as Kafka refuses
//!   to start ("Duplicate log directories found");
//! - a `-moved` dir is the source of a swap that a crash interrupted: if the partition is live in
//!   another dir the swap finished (the `-moved` copy is removed), else it is renamed back (both
//!   copies were complete and equal; the source wins) — but only while every dir is online: with
//!   a dir offline the finished swap's live copy may be there, newer, so it is kept unloaded;
//! - a `-future` dir is a move that did not finish: it is dropped (the live replica is
//!   authoritative; the operator reissues AlterReplicaLogDirs), but only while every dir is
//!   online: with a dir offline it may be the best copy left, and is kept unloaded.
//!
//! Placement: a new partition goes to the online dir holding the fewest partitions (future
//! replicas of moves in progress included), the first such in `log.dirs` order on a tie: Kafka's
//! `LogManager.nextLogDirs` rule.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::checkpoint::{
    CLEAN_SHUTDOWN_FILE, HIGH_WATERMARK_FILE, LOG_START_FILE, RECOVERY_POINT_FILE,
};
use crate::config::TopicPartition;
use crate::error::StoreError;
use crate::partition_dir::{partition_dirs, DELETE_SUFFIX};
use crate::recovery::PartitionCheckpoints;
use crate::shared::{LogDir, StoreShared};
use crate::Store;

/// Suffix of a future replica: the copy a move is writing into the target dir.
pub(crate) const FUTURE_SUFFIX: &str = "-future";

/// Suffix of the source of a move between the two renames of its swap.
pub(crate) const MOVED_SUFFIX: &str = "-moved";

/// A partition directory found at open, to be loaded.
pub(crate) struct Found {
    pub(crate) tp: TopicPartition,
    pub(crate) dir: PathBuf,
    pub(crate) checkpoints: PartitionCheckpoints,
    /// Its log dir had the clean-shutdown marker.
    pub(crate) clean: bool,
}

/// What `scan` found in every dir.
pub(crate) struct Scanned {
    /// Every online dir had the clean-shutdown marker.
    pub(crate) clean: bool,
    /// The markers to remove once every partition is loaded.
    pub(crate) markers: Vec<(Arc<LogDir>, PathBuf)>,
    pub(crate) partitions: Vec<(Arc<LogDir>, Found)>,
}

/// `<topic>-<partition>.<id><suffix>` → the partition and the id.
pub(crate) fn parse_tagged(name: &str, suffix: &str) -> Option<(TopicPartition, String)> {
    let stem = name.strip_suffix(suffix)?;
    let (tp, id) = stem.rsplit_once('.')?;
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some((TopicPartition::from_dir_name(tp)?, id.to_string()))
}

/// What one dir holds: its live partitions and the leftovers of moves.
#[derive(Default)]
struct DirListing {
    live: Vec<(TopicPartition, PathBuf)>,
    moved: Vec<(TopicPartition, String, PathBuf)>,
    future: Vec<PathBuf>,
}

fn list_dir(shared: &StoreShared, path: &Path) -> Result<DirListing, StoreError> {
    let io = |what: &str, e| StoreError::io(format!("{what} {}", path.display()), e);
    shared
        .storage
        .create_dir_all(path)
        .map_err(|e| io("create", e))?;
    let mut listing = DirListing::default();
    for entry in std::fs::read_dir(path).map_err(|e| io("list", e))? {
        let entry = entry.map_err(|e| io("list", e))?;
        let child = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if !child.is_dir() {
            continue;
        }
        if name.ends_with(DELETE_SUFFIX) {
            shared
                .storage
                .remove_dir_all(&child)
                .map_err(|e| StoreError::io(format!("remove {}", child.display()), e))?;
        } else if let Some((tp, id)) = parse_tagged(&name, MOVED_SUFFIX) {
            listing.moved.push((tp, id, child));
        } else if parse_tagged(&name, FUTURE_SUFFIX).is_some() {
            listing.future.push(child);
        }
    }
    listing.live = partition_dirs(path).map_err(|e| io("list", e))?;
    Ok(listing)
}

/// Scans every log dir (see the module comment for the rules).
pub(crate) fn scan(shared: &StoreShared) -> Result<Scanned, StoreError> {
    let mut listings: Vec<(Arc<LogDir>, DirListing)> = Vec::new();
    for log_dir in &shared.dirs {
        match list_dir(shared, log_dir.path()) {
            Ok(listing) => listings.push((Arc::clone(log_dir), listing)),
            Err(e) => log_dir.mark_offline(e.to_string()),
        }
    }
    if listings.is_empty() {
        return Err(StoreError::Offline(format!(
            "no log dir could be opened: {}",
            shared
                .dirs
                .iter()
                .filter_map(|d| d.offline_reason())
                .collect::<Vec<_>>()
                .join("; ")
        )));
    }
    resolve_moves(shared, &mut listings)?;
    let mut seen: HashMap<TopicPartition, PathBuf> = HashMap::new();
    let mut scanned = Scanned {
        clean: listings.len() == shared.dirs.len(),
        markers: Vec::new(),
        partitions: Vec::new(),
    };
    for (log_dir, listing) in listings {
        let marker = log_dir.path().join(CLEAN_SHUTDOWN_FILE);
        let clean = marker.exists();
        scanned.clean &= clean;
        if clean {
            scanned.markers.push((Arc::clone(&log_dir), marker));
        }
        let recovery_points = log_dir.read_offset_checkpoint(RECOVERY_POINT_FILE);
        let log_starts = log_dir.read_offset_checkpoint(LOG_START_FILE);
        let high_watermarks = log_dir.read_offset_checkpoint(HIGH_WATERMARK_FILE);
        for (tp, dir) in listing.live {
            if let Some(other) = seen.insert(tp.clone(), dir.clone()) {
                return Err(StoreError::DuplicateLog {
                    partition: tp,
                    first: other.display().to_string(),
                    second: dir.display().to_string(),
                });
            }
            let checkpoints = PartitionCheckpoints {
                recovery_point: recovery_points.get(&tp).copied(),
                log_start_offset: log_starts.get(&tp).copied(),
                high_watermark: high_watermarks.get(&tp).copied(),
            };
            scanned.partitions.push((
                Arc::clone(&log_dir),
                Found {
                    tp,
                    dir,
                    checkpoints,
                    clean,
                },
            ));
        }
    }
    Ok(scanned)
}

/// Finishes or undoes swaps a crash interrupted, and drops unfinished future replicas.
fn resolve_moves(
    shared: &StoreShared,
    listings: &mut [(Arc<LogDir>, DirListing)],
) -> Result<(), StoreError> {
    let storage = &*shared.storage;
    let io = |what: &str, p: &Path, e| StoreError::io(format!("{what} {}", p.display()), e);
    let live: std::collections::HashSet<TopicPartition> = listings
        .iter()
        .flat_map(|(_, l)| l.live.iter().map(|(tp, _)| tp.clone()))
        .collect();
    let all_online = listings.len() == shared.dirs.len();
    for (log_dir, listing) in listings.iter_mut() {
        for (tp, id, path) in std::mem::take(&mut listing.moved) {
            if !live.contains(&tp) && !all_online {
                // The live copy may be in the offline dir (the swap finished), newer than this.
                tracing::warn!(partition = %tp, dir = %path.display(), "keeping the source of an interrupted replica move unloaded while a log dir is offline");
                continue;
            }
            if live.contains(&tp) {
                let doomed = log_dir.path().join(format!("{tp}.{id}{DELETE_SUFFIX}"));
                storage
                    .rename(&path, &doomed)
                    .map_err(|e| io("rename", &path, e))?;
                storage
                    .remove_dir_all(&doomed)
                    .map_err(|e| io("remove", &doomed, e))?;
            } else {
                let back = log_dir.path().join(tp.to_string());
                tracing::warn!(partition = %tp, dir = %back.display(), "a replica move was interrupted before its swap finished: the source stays");
                storage
                    .rename(&path, &back)
                    .map_err(|e| io("rename", &path, e))?;
                storage
                    .sync_dir(log_dir.path())
                    .map_err(|e| io("fsync", log_dir.path(), e))?;
                listing.live.push((tp, back));
            }
        }
    }
    for (_, listing) in listings.iter_mut() {
        for future in std::mem::take(&mut listing.future) {
            if all_online {
                tracing::info!(dir = %future.display(), "dropping the copy of an unfinished replica move");
                storage
                    .remove_dir_all(&future)
                    .map_err(|e| io("remove", &future, e))?;
            } else {
                tracing::warn!(dir = %future.display(), "keeping the copy of an unfinished replica move while a log dir is offline");
            }
        }
    }
    Ok(())
}

/// Removes the clean-shutdown markers once every partition is loaded.
pub(crate) fn remove_clean_markers(
    shared: &StoreShared,
    markers: &[(Arc<LogDir>, PathBuf)],
) -> Result<(), StoreError> {
    for (log_dir, marker) in markers {
        shared
            .storage
            .remove_file(marker)
            .map_err(|e| StoreError::io(format!("remove {}", marker.display()), e))?;
        shared
            .storage
            .sync_dir(log_dir.path())
            .map_err(|e| StoreError::io(format!("fsync {}", log_dir.path().display()), e))?;
    }
    Ok(())
}

/// Writes each online dir's offset checkpoints. A dir whose write fails goes offline (Kafka:
/// a checkpoint `IOException` fails the dir), except on a full disk (ENOSPC), which is only
/// logged: the checkpoints are an optimisation of recovery, and a full dir is not a failed one.
pub(crate) fn write_all_checkpoints(shared: &StoreShared) -> usize {
    let mut no_space = 0;
    for log_dir in &shared.dirs {
        if log_dir.is_offline() {
            continue;
        }
        if let Err(e) = log_dir.write_offset_checkpoints() {
            if e.is_no_space() {
                tracing::debug!(log_dir = %log_dir.path().display(), error = %e, "offset checkpoints not written: disk full");
                no_space += 1;
            } else {
                log_dir.mark_offline(e.to_string());
            }
        }
    }
    no_space
}

impl Store {
    /// The hosted partitions whose log dir is offline, with their topic ids (`None` for a
    /// directory written before topic ids were recorded): what the broker reports to the
    /// controller as offline replicas.
    pub fn offline_partitions(&self) -> Vec<(TopicPartition, Option<crate::TopicId>)> {
        let mut offline: Vec<_> = self
            .partitions
            .read()
            .values()
            .filter(|log| log.log_dir().is_offline())
            .map(|log| (log.topic_partition().clone(), log.topic_id()))
            .collect();
        offline.sort();
        offline
    }

    /// The dir a new partition goes to (see the module comment); `Offline` if none is online.
    pub(crate) fn place_new_partition(&self) -> Result<Arc<LogDir>, StoreError> {
        let futures = self.moves.targets();
        self.shared
            .dirs
            .iter()
            .filter(|d| !d.is_offline())
            .min_by_key(|d| {
                let moving_in = futures.iter().filter(|t| Arc::ptr_eq(t, d)).count();
                d.partition_count() + moving_in
            })
            .cloned()
            .ok_or_else(|| {
                StoreError::Offline(self.offline_reason().unwrap_or_else(|| "no log dir".into()))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagged_names_parse() {
        let check = |name: &str, suffix: &str, want: Option<(&str, i32, &str)>| {
            let got = parse_tagged(name, suffix);
            let want = want.map(|(t, p, id)| (TopicPartition::new(t, p), id.to_string()));
            assert_eq!(got, want, "{name}");
        };
        check(
            "orders-3.0af1-future",
            FUTURE_SUFFIX,
            Some(("orders", 3, "0af1")),
        );
        check("a.b-0.ff-moved", MOVED_SUFFIX, Some(("a.b", 0, "ff")));
        check("orders-3-future", FUTURE_SUFFIX, None);
        check("orders-3.zz-future", FUTURE_SUFFIX, None);
        check("orders-3.0af1-delete", FUTURE_SUFFIX, None);
    }
}
