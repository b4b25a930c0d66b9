//! The `acks=all` wait of one partition led here (Kafka's delayed-produce purgatory): every
//! append waiting for the high watermark, and the one rule that answers them. The broker and the
//! simulator both keep their waiters here and ask [`AckWaits::release`] after anything that moves
//! the high watermark, the leadership or the clock.
//!
//! Rules (in this order):
//! - the replica no longer leads in the epoch the records were appended in: NOT_LEADER_OR_FOLLOWER
//!   (the records may still commit under the next leader, or be truncated);
//! - the high watermark passed the records: committed — but a shrink below min.insync.replicas
//!   that happened meanwhile is still reported, as NOT_ENOUGH_REPLICAS_AFTER_APPEND (Kafka);
//! - the deadline passed: REQUEST_TIMED_OUT (the records may still commit).
//!
//! No I/O, no clock: the caller passes the time and delivers each answer to its waiter `W` (a
//! channel in the broker, a client's request id in the simulator).

/// Why an acknowledgement is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckError {
    /// REQUEST_TIMED_OUT: not replicated in time (the record may still commit).
    Timeout,
    /// NOT_LEADER_OR_FOLLOWER: leadership moved before the record committed.
    NotLeader,
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND
    NotEnoughReplicasAfterAppend,
    /// KAFKA_STORAGE_ERROR: the log went offline or was deleted.
    Storage,
}

/// One append waiting for the high watermark.
#[derive(Debug)]
struct PendingAck<W> {
    id: u64,
    waiter: W,
    /// The leader epoch the records were appended in.
    leader_epoch: i32,
    /// The offset after the append's last record: committed once the high watermark reaches it.
    end_offset: i64,
    /// When the wait gives up (ms, the caller's clock).
    deadline_ms: i64,
}

/// What the partition looks like when the waits are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckView {
    /// The leader epoch this replica leads in, `None` when it does not lead.
    pub leading_epoch: Option<i32>,
    pub high_watermark: i64,
    /// The ISR is below min.insync.replicas.
    pub under_min_isr: bool,
    pub now_ms: i64,
}

/// The waits of one partition.
#[derive(Debug)]
pub struct AckWaits<W> {
    pending: Vec<PendingAck<W>>,
    next_id: u64,
}

impl<W> Default for AckWaits<W> {
    fn default() -> Self {
        Self {
            pending: Vec::new(),
            next_id: 1,
        }
    }
}

impl<W> AckWaits<W> {
    /// Waits for the records before `end_offset`, appended in `leader_epoch`; returns the wait's
    /// id (for [`AckWaits::remove`]).
    pub fn add(&mut self, waiter: W, leader_epoch: i32, end_offset: i64, deadline_ms: i64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.pending.push(PendingAck {
            id,
            waiter,
            leader_epoch,
            end_offset,
            deadline_ms,
        });
        id
    }

    /// Answers every wait the rules above decide; the rest keep waiting.
    pub fn release(&mut self, view: AckView) -> Vec<(W, Result<(), AckError>)> {
        if self.pending.is_empty() {
            return Vec::new();
        }
        let mut answers = Vec::new();
        let mut waiting = Vec::with_capacity(self.pending.len());
        for p in self.pending.drain(..) {
            match decide(&p, view) {
                Some(result) => answers.push((p.waiter, result)),
                None => waiting.push(p),
            }
        }
        self.pending = waiting;
        answers
    }

    /// Answers every wait with `error` (the log is gone).
    pub fn fail_all(&mut self, error: AckError) -> Vec<(W, Result<(), AckError>)> {
        self.pending
            .drain(..)
            .map(|p| (p.waiter, Err(error)))
            .collect()
    }

    /// Takes wait `id` back unanswered (its waiter gave up); `None` when it was answered already.
    pub fn remove(&mut self, id: u64) -> Option<W> {
        let at = self.pending.iter().position(|p| p.id == id)?;
        Some(self.pending.swap_remove(at).waiter)
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

fn decide<W>(p: &PendingAck<W>, view: AckView) -> Option<Result<(), AckError>> {
    if view.leading_epoch != Some(p.leader_epoch) {
        Some(Err(AckError::NotLeader))
    } else if view.high_watermark >= p.end_offset {
        Some(if view.under_min_isr {
            Err(AckError::NotEnoughReplicasAfterAppend)
        } else {
            Ok(())
        })
    } else if view.now_ms >= p.deadline_ms {
        Some(Err(AckError::Timeout))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(epoch: Option<i32>, hw: i64, now: i64) -> AckView {
        AckView {
            leading_epoch: epoch,
            high_watermark: hw,
            under_min_isr: false,
            now_ms: now,
        }
    }

    #[test]
    fn committed_once_the_high_watermark_passes_the_records() {
        let mut w = AckWaits::default();
        w.add("a", 3, 10, 1_000);
        assert!(w.release(view(Some(3), 9, 0)).is_empty());
        assert_eq!(w.release(view(Some(3), 10, 0)), vec![("a", Ok(()))]);
        assert!(w.is_empty());
    }

    #[test]
    fn a_moved_leader_epoch_refuses_even_past_the_high_watermark() {
        let mut w = AckWaits::default();
        w.add("a", 3, 10, 1_000);
        w.add("b", 3, 5, 1_000);
        let answers = w.release(view(Some(4), 20, 0));
        assert_eq!(
            answers,
            vec![
                ("a", Err(AckError::NotLeader)),
                ("b", Err(AckError::NotLeader))
            ]
        );
        let mut w = AckWaits::default();
        w.add("c", 3, 10, 1_000);
        assert_eq!(
            w.release(view(None, 20, 0)),
            vec![("c", Err(AckError::NotLeader))]
        );
    }

    #[test]
    fn committed_under_min_isr_is_reported_and_the_deadline_times_out() {
        let mut w = AckWaits::default();
        w.add("a", 1, 10, 1_000);
        w.add("b", 1, 20, 1_000);
        let mut v = view(Some(1), 10, 999);
        v.under_min_isr = true;
        assert_eq!(
            w.release(v),
            vec![("a", Err(AckError::NotEnoughReplicasAfterAppend))]
        );
        assert_eq!(
            w.release(view(Some(1), 10, 1_000)),
            vec![("b", Err(AckError::Timeout))]
        );
    }

    #[test]
    fn a_removed_wait_is_not_answered() {
        let mut w = AckWaits::default();
        let id = w.add("a", 1, 10, 1_000);
        assert_eq!(w.remove(id), Some("a"));
        assert_eq!(w.remove(id), None);
        assert!(w.release(view(Some(1), 10, 0)).is_empty());
    }
}
