//! Repair of damaged batches (decision 0072): which replicas a hosted replica asks for a good copy
//! of batches its scrubber found damaged, which ranges it may repair now, and whether an answer
//! is a copy it may use. Pure; the broker's executor is `crate::repair`.
//!
//! Below the high watermark every in-sync replica holds the same batches at the same offsets
//! (followers store the leader's bytes as they are), so any of them is a source: a follower asks
//! its leader first, then the other in-sync replicas; a leader asks the in-sync followers. A
//! range that reaches past the high watermark waits: above it, replicas may still diverge, and a
//! follower's own truncation handles what the leader does not hold.

/// The replicas to ask for a copy, in order: the leader (when it is not `local`), then the other
/// members of `isr`.
pub fn repair_sources(local: i32, leader: Option<i32>, isr: &[i32]) -> Vec<i32> {
    let mut sources: Vec<i32> = leader
        .filter(|l| *l != local && *l >= 0)
        .into_iter()
        .collect();
    for r in isr {
        if *r != local && !sources.contains(r) {
            sources.push(*r);
        }
    }
    sources
}

/// Whether damaged offsets `[from, to)` may be repaired now: all of them are below the high
/// watermark.
pub fn repairable(to: i64, high_watermark: i64) -> bool {
    to <= high_watermark
}

/// Collects a source's answer for damaged offsets `[from, to)`: the whole batches of `records`
/// (as a Fetch answers: starting with the batch holding the fetch offset) that lie in the range.
/// `Ok(next)`: the offset to fetch next (== `to` once the range is covered); `Err` if the answer
/// does not continue the range exactly (a batch boundary elsewhere than ours, a gap).
pub fn take_batches(records: &[u8], next: i64, to: i64, out: &mut Vec<u8>) -> Result<i64, String> {
    let mut pos = 0usize;
    let mut next = next;
    while pos < records.len() && next < to {
        if records.len() - pos < millrace_store::limits::BATCH_HEADER_BYTES {
            // A partial batch header at the end of a Fetch answer: fetch again from `next`.
            break;
        }
        let h = millrace_store::batch::BatchHeader::parse(records.get(pos..).unwrap_or(&[]))
            .map_err(|e| format!("batch at {pos}: {e}"))?;
        let total = h.total_size();
        let Some(bytes) = records.get(pos..pos + total) else {
            // A partial batch at the end of a Fetch answer: fetch again from `next`.
            break;
        };
        if h.base_offset != next {
            return Err(format!(
                "batch at offset {} where {next} was expected",
                h.base_offset
            ));
        }
        if h.next_offset() > to {
            return Err(format!(
                "batch [{}, {}) runs past {to}",
                h.base_offset,
                h.next_offset()
            ));
        }
        out.extend_from_slice(bytes);
        next = h.next_offset();
        pos += total;
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use millrace_store::testing::encode_batch;

    #[test]
    fn followers_ask_the_leader_first_and_leaders_their_isr() {
        assert_eq!(repair_sources(2, Some(1), &[1, 2, 3]), vec![1, 3]);
        assert_eq!(repair_sources(1, Some(1), &[1, 2, 3]), vec![2, 3]);
        assert_eq!(repair_sources(1, Some(1), &[1]), Vec::<i32>::new());
        assert_eq!(repair_sources(2, Some(-1), &[3]), vec![3]);
        assert_eq!(repair_sources(2, None, &[]), Vec::<i32>::new());
    }

    #[test]
    fn only_ranges_below_the_high_watermark_are_repaired() {
        assert!(repairable(10, 10));
        assert!(!repairable(11, 10));
    }

    fn batch_at(base: i64, records: usize) -> Vec<u8> {
        let recs: Vec<millrace_store::testing::TestRecord<'_>> =
            (0..records).map(|_| (None, Some(&b"v"[..]), 1)).collect();
        let mut b = encode_batch(&recs, -1, -1, -1);
        millrace_store::batch::set_base_offset(&mut b, base);
        b.to_vec()
    }

    #[test]
    fn answers_must_continue_the_range_exactly() {
        let (a, b, c) = (batch_at(10, 2), batch_at(12, 3), batch_at(15, 1));
        let answer = [a.clone(), b.clone(), c.clone()].concat();
        let mut out = Vec::new();
        // Covers [10, 15) and stops there.
        assert_eq!(take_batches(&answer, 10, 15, &mut out), Ok(15));
        assert_eq!(out, [a.clone(), b.clone()].concat());
        // A partial batch at the end: what came whole, and where to continue.
        let mut out = Vec::new();
        let cut = &answer[..a.len() + 5];
        assert_eq!(take_batches(cut, 10, 15, &mut out), Ok(12));
        assert_eq!(out, a);
        // A boundary that is not ours, or a batch running past the range: refused.
        assert!(take_batches(&answer, 11, 15, &mut Vec::new()).is_err());
        assert!(take_batches(&answer, 10, 14, &mut Vec::new()).is_err());
    }
}
