//! The broker's disk space as an operator sees it: the free space of each log dir and the
//! metadata log's space reserve, as `/metrics` gauges and as the degraded-state lines of
//! `/ready`'s body (issue 30, docs/operations.md "A disk fills up").
//!
//! Everything is read when asked (a `statvfs` per dir per scrape or `/ready`), never kept up to
//! date on the request path (decision 0053). A full disk is a degraded state, not an unready
//! one: reads, metadata and space-freeing deletes keep working, so `/ready` stays 200 and says
//! what is degraded in its body.

use std::path::{Path, PathBuf};

use millrace_cluster::config::BrokerConfig;

use millrace_metrics::prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use millrace_metrics::prometheus_client::metrics::gauge::ConstGauge;
use millrace_metrics::prometheus_client::metrics::MetricType;
use millrace_quorum::limits::RESERVE_BYTES;
use millrace_quorum::SpaceState;
use millrace_store::free_space;

/// Below this many free bytes a log dir counts as full even with the low-water mark off.
const FULL_BYTES: u64 = 1024 * 1024;

/// The directories whose file systems the broker writes, and the produce low-water mark.
#[derive(Debug, Clone)]
pub struct DiskDirs {
    /// Every log dir (`log.dirs`, the data dir first), then the metadata log's root if it is
    /// elsewhere (`metadata.log.dir`).
    pub dirs: Vec<PathBuf>,
    /// `millrace.log.dir.min.free.bytes`.
    pub min_free: u64,
}

impl DiskDirs {
    /// Every log dir (`data_dir`, then `extra_log_dirs`) and (when `metadata.log.dir` puts it
    /// elsewhere) the metadata log's root.
    pub fn new(config: &BrokerConfig, data_dir: &Path, extra_log_dirs: &[PathBuf]) -> DiskDirs {
        let mut dirs = vec![data_dir.to_path_buf()];
        dirs.extend(extra_log_dirs.iter().cloned());
        let meta = millrace_cluster::node::metadata_log_root(config, data_dir);
        if !dirs.contains(&meta) {
            dirs.push(meta);
        }
        DiskDirs {
            dirs,
            min_free: config.log_dir_min_free_bytes(),
        }
    }

    /// One line per degraded state, for `/ready`'s body; empty when all is well.
    pub fn degraded(&self, space: SpaceState) -> Vec<String> {
        let mut lines = Vec::new();
        for dir in &self.dirs {
            let Ok(free) = free_space::free_bytes(dir) else {
                lines.push(format!("log dir {}: free space unreadable", dir.display()));
                continue;
            };
            if free < self.min_free.max(FULL_BYTES) {
                lines.push(format!(
                    "log dir {}: {free} bytes free (millrace.log.dir.min.free.bytes is {}): \
                     produce is refused with KAFKA_STORAGE_ERROR until space is freed",
                    dir.display(),
                    self.min_free
                ));
            }
        }
        if space.waiting_for_space {
            lines.push(
                "metadata log: a write is waiting for space (reserve spent): metadata changes \
                 stall until space is freed"
                    .to_string(),
            );
        } else if space.reserve_bytes < RESERVE_BYTES {
            lines.push(format!(
                "metadata log: space reserve at {} of {RESERVE_BYTES} bytes (spent or short on \
                 a full disk; refilled as space returns)",
                space.reserve_bytes
            ));
        }
        lines
    }

    /// The gauges: free and total bytes per dir, the low-water mark, the reserve.
    pub fn encode(&self, space: SpaceState, encoder: &mut DescriptorEncoder) -> std::fmt::Result {
        let readings: Vec<(String, u64, u64)> = self
            .dirs
            .iter()
            .filter_map(|d| {
                let (total, free) = free_space::total_and_free_bytes(d).ok()?;
                Some((d.display().to_string(), total, free))
            })
            .collect();
        for (name, help, pick) in [
            (
                "log_dir_free_bytes",
                "Bytes free for the broker on the file system of a log dir (statvfs f_bavail)",
                2usize,
            ),
            (
                "log_dir_total_bytes",
                "Size in bytes of the file system of a log dir",
                1usize,
            ),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (dir, total, free) in &readings {
                let value = if pick == 1 { *total } else { *free };
                let labels = [("dir", dir.as_str())];
                ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX))
                    .encode(family.encode_family(&labels)?)?;
            }
        }
        let singles = [
            (
                "log_dir_min_free_bytes",
                "millrace.log.dir.min.free.bytes: below it produce is refused",
                self.min_free,
            ),
            (
                "metadata_log_reserve_bytes",
                "Bytes held by the metadata log's space reserve (spent when its disk fills)",
                space.reserve_bytes,
            ),
            (
                "metadata_log_waiting_for_space",
                "1 while a metadata log write waits for space",
                u64::from(space.waiting_for_space),
            ),
        ];
        for (name, help, value) in singles {
            let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX)).encode(metric)?;
        }
        Ok(())
    }
}
