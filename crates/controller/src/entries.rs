//! How one controller decision becomes metadata log entries (Kafka's `QuorumController` record
//! batching, with KIP-868's metadata transactions).
//!
//! Where it sits: between [`crate::Controller`], which decides records without any bound, and the
//! quorum, which refuses an entry larger than its bound. The service (`service.rs`) and the
//! simulator's quorum both call [`entries_of`], so the seeds test the split that ships.
//!
//! A decision whose records fit one entry is that one entry, which Raft commits atomically. A
//! larger one (a broker registering or being fenced while it hosts thousands of partitions, a
//! topic of thousands of partitions, an election over every partition) is spread over as many
//! entries as it needs, between a `BeginTransaction` record and an `EndTransaction` record. Every
//! node's image holds a transaction's records back and applies them together at its end
//! (`MetadataImage::transaction`), so **every prefix of the log is an image that whole decisions
//! made**: never a broker registered anew while the image still names it leader, a topic with part
//! of its partitions, a broker unfenced before the leaderships it was unfenced for. A controller
//! that loses its leadership, or the outcome of a proposal, in the middle leaves the transaction
//! open; the next active controller aborts it before its first decision ([`activation_records`])
//! and the requester retries against the image as it is.
//!
//! Kafka's controller writes most such decisions as non-atomic batches ordered so that each prefix
//! is valid, and keeps transactions for a few. One mechanism for every decision is simpler to get
//! right (no per-decision ordering rule to keep valid as decisions change) and leaves nothing
//! half-done behind a controller crash; see docs/decisions/0066-large-decisions-as-metadata-
//! transactions.md.
//!
//! Broker epochs: a broker's epoch is the offset at which its `RegisterBroker` takes effect — in a
//! transaction, the offset of the entry that ends it, which is the decision's last entry and so
//! the offset the service answers the registration with.
//!
//! Read first: [`entries_of`].

use millrace_cluster::image::MetadataImage;
use millrace_cluster::records::{MetadataBatch, MetadataRecord};

use crate::limits::DECISION_BYTES_MAX;

/// Why a decision cannot be committed at all (retrying cannot help).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// One record does not fit an entry, even alone with the transaction markers.
    #[error(
        "a {kind} record of {bytes} bytes does not fit a metadata entry of at most {max} bytes"
    )]
    RecordTooLarge {
        kind: &'static str,
        bytes: usize,
        max: usize,
    },
    /// The decision as a whole exceeds `DECISION_BYTES_MAX`.
    #[error("a decision of {bytes} bytes in {records} records exceeds the limit of {max} bytes")]
    DecisionTooLarge {
        records: usize,
        bytes: usize,
        max: usize,
    },
}

/// Encoded length of one record inside a batch (serde_json writes a record the same way alone and
/// as an array element).
fn record_bytes(record: &MetadataRecord) -> usize {
    serde_json::to_vec(record).map_or(usize::MAX / 4, |v| v.len())
}

/// Encoded length of a batch of no records (as `record_bytes`, a failure counts as too large).
fn envelope_bytes() -> usize {
    MetadataBatch::new(Vec::new())
        .encode()
        .map_or(usize::MAX / 4, |v| v.len())
}

/// One entry being filled, with its exact encoded length.
struct Entry {
    records: Vec<MetadataRecord>,
    bytes: usize,
}

impl Entry {
    fn new() -> Self {
        Self {
            records: Vec::new(),
            bytes: envelope_bytes(),
        }
    }

    /// Bytes the entry would have with one more record of `size` bytes (a comma after the first).
    fn with(&self, size: usize) -> usize {
        self.bytes + size + usize::from(!self.records.is_empty())
    }

    fn push(&mut self, record: MetadataRecord, size: usize) {
        self.bytes = self.with(size);
        self.records.push(record);
    }
}

/// The entries `records` (one decision, in order) are committed in, each encoding to at most
/// `entry_bytes_max` bytes: the records themselves when they fit one entry, else a metadata
/// transaction over as many entries as needed, filled in order.
pub fn entries_of(
    records: Vec<MetadataRecord>,
    entry_bytes_max: usize,
) -> Result<Vec<Vec<MetadataRecord>>, SplitError> {
    let sizes: Vec<usize> = records.iter().map(record_bytes).collect();
    let total = sizes
        .iter()
        .fold(envelope_bytes(), |acc, s| acc.saturating_add(s + 1));
    if records.len() <= 1 || total <= entry_bytes_max + 1 {
        // One entry (the fold counted one comma too many). A single record too large for it is
        // left to the quorum's own bound: the error names it the same way below.
        if let (Some(record), Some(&size)) = (records.first(), sizes.first()) {
            if envelope_bytes() + size > entry_bytes_max {
                return Err(SplitError::RecordTooLarge {
                    kind: record.kind(),
                    bytes: size,
                    max: entry_bytes_max,
                });
            }
        }
        return Ok(vec![records]);
    }
    if total > DECISION_BYTES_MAX {
        return Err(SplitError::DecisionTooLarge {
            records: records.len(),
            bytes: total,
            max: DECISION_BYTES_MAX,
        });
    }
    let begin = MetadataRecord::BeginTransaction {
        name: transaction_name(&records),
    };
    let end = MetadataRecord::EndTransaction;
    let (begin_bytes, end_bytes) = (record_bytes(&begin), record_bytes(&end));
    // Every record must fit an entry with both markers: then filling greedily always succeeds.
    let room = entry_bytes_max.saturating_sub(envelope_bytes() + begin_bytes + end_bytes + 2);
    if let Some((record, &size)) = records.iter().zip(&sizes).find(|(_, &s)| s > room) {
        return Err(SplitError::RecordTooLarge {
            kind: record.kind(),
            bytes: size,
            max: entry_bytes_max,
        });
    }
    let mut entries = Vec::new();
    let mut entry = Entry::new();
    entry.push(begin, begin_bytes);
    for (record, size) in records.into_iter().zip(sizes) {
        if entry.with(size) > entry_bytes_max {
            entries.push(std::mem::replace(&mut entry, Entry::new()).records);
        }
        entry.push(record, size);
    }
    if entry.with(end_bytes) > entry_bytes_max {
        entries.push(std::mem::replace(&mut entry, Entry::new()).records);
    }
    entry.push(end, end_bytes);
    entries.push(entry.records);
    Ok(entries)
}

/// What a decision spread over entries is called in its `BeginTransaction` (and in log lines).
fn transaction_name(records: &[MetadataRecord]) -> String {
    let first = records.first().map_or("nothing", MetadataRecord::kind);
    format!(
        "{first} and {} more records",
        records.len().saturating_sub(1)
    )
}

/// The records a newly active controller commits after its barrier and before its first
/// decision: the abort of a transaction its predecessor began and did not end (its requester
/// was never answered and retries).
pub fn activation_records(image: &MetadataImage) -> Vec<MetadataRecord> {
    match &image.transaction {
        Some(open) => vec![MetadataRecord::AbortTransaction {
            reason: format!(
                "\"{}\" began at offset {} and its controller did not end it",
                open.name, open.start_offset
            ),
        }],
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn change(partition: i32) -> MetadataRecord {
        millrace_cluster::records::PartitionChangeBuilder {
            leader: Some(-1),
            isr: Some(vec![2, 3]),
            ..MetadataRecord::partition_change(Uuid::from_bytes([7; 16]), partition)
        }
        .build()
    }

    fn check(records: Vec<MetadataRecord>, max: usize) -> Vec<Vec<MetadataRecord>> {
        let entries = entries_of(records.clone(), max).expect("splits");
        for e in &entries {
            let bytes = MetadataBatch::new(e.clone())
                .encode()
                .expect("encodes")
                .len();
            assert!(bytes <= max, "entry of {bytes} bytes > {max}");
            assert!(!e.is_empty());
        }
        let flat: Vec<MetadataRecord> = entries.iter().flatten().cloned().collect();
        if entries.len() == 1 {
            assert_eq!(flat, records);
        } else {
            // Begin first, end last, the decision's records in order between.
            assert!(matches!(
                flat.first(),
                Some(MetadataRecord::BeginTransaction { .. })
            ));
            assert_eq!(flat.last(), Some(&MetadataRecord::EndTransaction));
            assert_eq!(flat[1..flat.len() - 1], records[..]);
        }
        entries
    }

    #[test]
    fn a_decision_that_fits_is_one_entry_without_markers() {
        let mut records = vec![MetadataRecord::FenceBroker {
            node_id: 1,
            broker_epoch: 5,
        }];
        records.extend((0..4).map(change));
        let exact = MetadataBatch::new(records.clone())
            .encode()
            .expect("encodes")
            .len();
        assert_eq!(check(records.clone(), exact).len(), 1);
        assert!(check(records, exact - 1).len() > 1);
        // The barrier: one empty entry.
        assert_eq!(entries_of(Vec::new(), 100), Ok(vec![Vec::new()]));
    }

    #[test]
    fn a_large_decision_is_a_transaction_of_full_entries() {
        let mut records = vec![MetadataRecord::FenceBroker {
            node_id: 1,
            broker_epoch: 5,
        }];
        records.extend((0..10_000).map(change));
        let whole = MetadataBatch::new(records.clone())
            .encode()
            .expect("encodes")
            .len();
        let entries = check(records, 512 * 1024);
        // No entry but the last is less than nearly full.
        assert_eq!(entries.len(), whole.div_ceil(512 * 1024));
        // Scaled down, as the simulator runs it: every boundary, including one right before
        // the end marker, holds.
        for max in 700..900 {
            check((0..5).map(change).collect(), max);
        }
    }

    #[test]
    fn what_can_never_fit_is_refused() {
        let one = change(0);
        let size = record_bytes(&one);
        assert!(matches!(
            entries_of(vec![one.clone()], size),
            Err(SplitError::RecordTooLarge {
                kind: "PartitionChange",
                ..
            })
        ));
        // Fits alone, but not with the transaction markers around it.
        assert!(matches!(
            entries_of(vec![one.clone(), one], size + 40),
            Err(SplitError::RecordTooLarge { .. })
        ));
        let huge: Vec<MetadataRecord> = (0..(DECISION_BYTES_MAX / size + 1) as i32)
            .map(change)
            .collect();
        assert!(matches!(
            entries_of(huge, 512 * 1024),
            Err(SplitError::DecisionTooLarge { .. })
        ));
    }

    #[test]
    fn an_open_transaction_is_aborted_on_activation() {
        let mut image = MetadataImage::default();
        assert!(activation_records(&image).is_empty());
        image.apply_batch(
            1,
            &MetadataBatch::new(vec![MetadataRecord::BeginTransaction { name: "x".into() }]),
        );
        let abort = activation_records(&image);
        assert!(matches!(
            abort.as_slice(),
            [MetadataRecord::AbortTransaction { .. }]
        ));
        image.apply_batch(2, &MetadataBatch::new(abort));
        assert!(image.transaction.is_none());
    }
}
