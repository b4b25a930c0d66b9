//! [`ReplicaLog`] over the store's `PartitionLog`: how replication reads and moves a real log.

use std::sync::Arc;

use bytes::Bytes;
use millrace_store::PartitionLog;

use crate::driver::fetch::FollowerLog;
use crate::partition::ReplicaLog;

/// A store partition log as replication sees it.
#[derive(Clone)]
pub struct StoreLog(pub Arc<PartitionLog>);

impl ReplicaLog for StoreLog {
    fn log_start_offset(&self) -> i64 {
        self.0.log_start_offset()
    }

    fn log_end_offset(&self) -> i64 {
        self.0.log_end_offset()
    }

    fn durable_end_offset(&self) -> i64 {
        self.0.durable_offset()
    }

    fn high_watermark(&self) -> i64 {
        self.0.high_watermark()
    }

    fn end_offset_for_leader_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        self.0.end_offset_for_leader_epoch(epoch)
    }

    fn latest_leader_epoch(&self) -> Option<i32> {
        self.0.latest_leader_epoch()
    }

    fn begin_leader_epoch(&self, epoch: i32) -> Result<(), String> {
        self.0.begin_leader_epoch(epoch).map_err(|e| e.to_string())
    }

    fn truncate_to(&self, offset: i64) -> Result<(), String> {
        self.0.truncate_to(offset).map_err(|e| e.to_string())
    }

    fn truncate_fully_and_start_at(&self, offset: i64) -> Result<(), String> {
        self.0
            .truncate_fully_and_start_at(offset)
            .map_err(|e| e.to_string())
    }

    fn set_high_watermark(&self, offset: i64) {
        if offset > self.0.high_watermark() {
            self.0.set_high_watermark(offset);
        }
    }
}

impl FollowerLog for StoreLog {
    type Records = Bytes;

    fn append_replicated(&self, _fetch_offset: i64, records: Bytes) -> Result<bool, String> {
        self.0
            .append_replicated(records)
            .map(|_| true)
            .map_err(|e| e.to_string())
    }

    fn follow_log_start(&self, offset: i64) -> Result<(), String> {
        let to = offset.min(self.0.high_watermark());
        if to > self.0.log_start_offset() {
            self.0
                .delete_records_before(to)
                .map(|_| ())
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}
