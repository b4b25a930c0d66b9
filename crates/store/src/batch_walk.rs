//! Walking a buffer of v2 record batches, one after the other: the one loop behind a leader's
//! and a follower's append and the coordinators' replays, each choosing its checks
//! ([`WalkChecks`]).
//!
//! A walk yields each batch with its position and bytes, and stops at the end of the buffer or
//! at the first batch that fails its checks, which it yields as an error (an incomplete tail is
//! `WalkError::Invalid(BatchError::Truncated(_))`); nothing after it is read. The buffer is never
//! sized by a length read from it: each batch is checked against the bytes that are there.

use crate::batch::{self, BatchError, BatchHeader};

/// What a batch must pass before a walk yields it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validation {
    /// The header parses (61 bytes, `batchLength` at least the header's) and the whole batch is
    /// in the buffer; nothing else (no magic, no CRC).
    Header,
    /// `batch::validate_stored`: magic 2, CRC, and counts as the cleaner may leave them.
    Stored,
    /// `batch::validate`: magic 2, CRC, and counts as a client must send them.
    Client,
}

/// The checks of a walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalkChecks {
    /// What each batch must pass.
    pub validation: Validation,
    /// The largest batch (whole size, prefix included) accepted: checked first, once the header
    /// parses, so that a batch too large to accept is never read whole. `None`: no bound but
    /// the buffer.
    pub batch_bytes_max: Option<usize>,
}

/// Why a walk stopped before the end of its buffer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WalkError {
    /// A batch larger than `WalkChecks::batch_bytes_max`.
    #[error("batch of {size} bytes, at most {max}")]
    TooLarge {
        /// The batch's whole size.
        size: usize,
        /// The bound.
        max: usize,
    },
    /// A batch that failed `WalkChecks::validation`, or an incomplete one at the end.
    #[error("{0}")]
    Invalid(BatchError),
}

/// One batch of a walk.
#[derive(Debug, Clone, Copy)]
pub struct WalkedBatch<'a> {
    /// Where the batch starts in the buffer.
    pub position: usize,
    /// Its header.
    pub header: BatchHeader,
    /// The whole batch, `header.total_size()` bytes.
    pub bytes: &'a [u8],
}

impl WalkChecks {
    /// Checks the batch at the start of `rest` → its header; the batch is
    /// `rest[..header.total_size()]`, which is in `rest`.
    pub fn check(&self, rest: &[u8]) -> Result<BatchHeader, WalkError> {
        if let Some(max) = self.batch_bytes_max {
            if let Ok(h) = BatchHeader::parse(rest) {
                if h.total_size() > max {
                    return Err(WalkError::TooLarge {
                        size: h.total_size(),
                        max,
                    });
                }
            }
        }
        match self.validation {
            Validation::Header => BatchHeader::parse(rest).and_then(|h| {
                if h.total_size() > rest.len() {
                    return Err(BatchError::Truncated(format!(
                        "batch of {} bytes, {} left",
                        h.total_size(),
                        rest.len()
                    )));
                }
                Ok(h)
            }),
            Validation::Stored => batch::validate_stored(rest),
            Validation::Client => batch::validate(rest),
        }
        .map_err(WalkError::Invalid)
    }
}

/// The batches of a buffer, in order; see the module comment. Fused: after an error it yields
/// nothing more.
#[derive(Debug, Clone)]
pub struct BatchWalk<'a> {
    buf: &'a [u8],
    position: usize,
    checks: WalkChecks,
    stopped: bool,
}

impl<'a> BatchWalk<'a> {
    /// A walk over `buf` from its first byte.
    pub fn new(buf: &'a [u8], checks: WalkChecks) -> Self {
        Self {
            buf,
            position: 0,
            checks,
            stopped: false,
        }
    }

    /// Where the next batch starts: after an error, where the batch that failed starts.
    pub fn position(&self) -> usize {
        self.position
    }
}

impl<'a> Iterator for BatchWalk<'a> {
    type Item = Result<WalkedBatch<'a>, WalkError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.stopped {
            return None;
        }
        let rest = self.buf.get(self.position..).filter(|r| !r.is_empty())?;
        let header = match self.checks.check(rest) {
            Ok(h) => h,
            Err(e) => {
                self.stopped = true;
                return Some(Err(e));
            }
        };
        let position = self.position;
        let total = header.total_size();
        self.position += total;
        Some(Ok(WalkedBatch {
            position,
            header,
            bytes: rest.get(..total).unwrap_or(&[]),
        }))
    }
}

impl std::iter::FusedIterator for BatchWalk<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::encode_batch;

    fn two_batches() -> Vec<u8> {
        let mut b = encode_batch(&[(Some(b"k"), Some(b"v"), 1000)], -1, -1, -1).to_vec();
        let mut second = encode_batch(&[(None, Some(b"w"), 1001)], -1, -1, -1).to_vec();
        batch::set_base_offset(&mut second, 1);
        b.extend_from_slice(&second);
        b
    }

    const STORED: WalkChecks = WalkChecks {
        validation: Validation::Stored,
        batch_bytes_max: None,
    };

    #[test]
    fn walks_every_batch_in_order() {
        let b = two_batches();
        let walked: Vec<_> = BatchWalk::new(&b, STORED)
            .map(|w| w.map(|w| (w.position, w.header.base_offset, w.bytes.len())))
            .collect::<Result<_, _>>()
            .expect("valid");
        let first = walked[0].2;
        assert_eq!(walked, vec![(0, 0, first), (first, 1, b.len() - first)]);
        assert_eq!(BatchWalk::new(&[], STORED).count(), 0);
    }

    #[test]
    fn stops_at_a_torn_tail_or_a_bad_crc() {
        let b = two_batches();
        let mut walk = BatchWalk::new(&b[..b.len() - 1], STORED);
        assert!(walk.next().is_some_and(|w| w.is_ok()));
        let at = walk.position();
        assert!(matches!(
            walk.next(),
            Some(Err(WalkError::Invalid(BatchError::Truncated(_))))
        ));
        assert_eq!((walk.position(), walk.next().is_none()), (at, true));

        let mut bad = b.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        let results: Vec<_> = BatchWalk::new(&bad, STORED).collect();
        assert!(matches!(
            results[..],
            [Ok(_), Err(WalkError::Invalid(BatchError::BadCrc { .. }))]
        ));
        // Header-only walks do not look at the CRC (nor the magic).
        let header_only = WalkChecks {
            validation: Validation::Header,
            batch_bytes_max: None,
        };
        assert_eq!(BatchWalk::new(&bad, header_only).flatten().count(), 2);
    }

    #[test]
    fn refuses_a_batch_over_the_bound_before_validating_it() {
        let mut b = two_batches();
        b[17] ^= 0xff; // the CRC: the size check comes first
        let checks = WalkChecks {
            validation: Validation::Client,
            batch_bytes_max: Some(10),
        };
        assert!(matches!(
            BatchWalk::new(&b, checks).next(),
            Some(Err(WalkError::TooLarge { max: 10, .. }))
        ));
    }
}
