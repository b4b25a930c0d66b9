//! Log compaction (`cleanup.policy=compact`). Filled in by milestone 2.

use std::path::Path;

use crate::error::StoreError;
use crate::storage::Storage;

/// Completes or undoes a cleaner swap interrupted by a crash.
pub(crate) fn finish_interrupted_swaps(
    _storage: &dyn Storage,
    _dir: &Path,
) -> Result<(), StoreError> {
    Ok(())
}

/// The persisted cleaner point of a partition, if any.
pub(crate) fn read_cleaner_point(_dir: &Path) -> Option<i64> {
    None
}

/// Cursor of the cleaner across maintenance ticks.
#[derive(Debug, Default)]
pub(crate) struct CleanerState {}

impl CleanerState {
    /// Cleans what is due within this tick's budget → (partitions cleaned, bytes read).
    pub(crate) fn run(
        &mut self,
        _logs: &[std::sync::Arc<crate::log::PartitionLog>],
        _now_ms: i64,
    ) -> Result<(usize, u64), StoreError> {
        Ok((0, 0))
    }
}
