//! Log divergence by leader epoch (KIP-101, KIP-279, KIP-595's Fetch-based truncation): on the
//! leader, whether a follower's fetch position agrees with the leader's log; on the follower,
//! where to truncate when it does not.
//!
//! A replica's log is summarised by its leader-epoch cache: for each leader epoch, the offset its
//! records start at. "End offset of epoch E" = the start offset of the next larger epoch (or the
//! log end for the latest): the query `end_offset_for(E)` answers the largest epoch ≤ E the log
//! knows and that epoch's end offset.
//!
//! Pure functions over those queries; the partition driver and the simulator call them with the
//! store's and the simulated log's answers.

/// What the leader answers a follower's fetch position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowerFetchCheck {
    /// The follower's log agrees with ours up to `fetch_offset`: serve records from there.
    Consistent,
    /// The follower must truncate: our largest epoch ≤ its last fetched epoch, and that epoch's end.
    Diverging { epoch: i32, end_offset: i64 },
    /// The fetch offset is outside our log (below its start or above its end).
    OutOfRange,
}

/// The leader's check of a follower fetch (`last_fetched_epoch` < 0: the follower has no epoch
/// yet, i.e. an empty log, and nothing can diverge).
pub fn check_follower_fetch(
    log_start_offset: i64,
    log_end_offset: i64,
    end_offset_for: impl Fn(i32) -> Option<(i32, i64)>,
    fetch_offset: i64,
    last_fetched_epoch: i32,
) -> FollowerFetchCheck {
    if last_fetched_epoch >= 0 {
        match end_offset_for(last_fetched_epoch) {
            Some((epoch, end_offset))
                if epoch == last_fetched_epoch && end_offset >= fetch_offset => {}
            Some((epoch, end_offset)) => {
                return FollowerFetchCheck::Diverging {
                    epoch,
                    end_offset: end_offset.min(fetch_offset),
                }
            }
            // We know no epoch that old: everything the follower has may differ from our log.
            None => {
                return FollowerFetchCheck::Diverging {
                    epoch: -1,
                    end_offset: log_start_offset,
                }
            }
        }
    }
    if fetch_offset < log_start_offset || fetch_offset > log_end_offset {
        return FollowerFetchCheck::OutOfRange;
    }
    FollowerFetchCheck::Consistent
}

/// Where the follower truncates after the leader said its log diverges at (`epoch`, `end_offset`):
/// the smaller of the leader's end for that epoch and our own end for it (or 0 — everything —
/// when we know no epoch that old), never past our log end; the caller keeps it at or above its
/// log start. The next fetch carries our new last epoch, so a deeper divergence is found on the
/// next round. (`epoch < 0` — the leader knows none of our epochs — is no truncation point: our
/// last epoch would survive it and the question repeat; `Partition::on_diverging_epoch` restarts
/// the log at the leader's log start instead.)
pub fn follower_truncation_offset(
    log_end_offset: i64,
    own_end_offset_for: impl Fn(i32) -> Option<(i32, i64)>,
    epoch: i32,
    end_offset: i64,
) -> i64 {
    let target = if epoch < 0 {
        end_offset
    } else {
        match own_end_offset_for(epoch) {
            Some((_, own_end)) => own_end.min(end_offset),
            // We know no epoch at or below the leader's: every record we hold is of an epoch the
            // leader does not have below `end_offset`, so none of them agrees (Kafka's
            // `endOffsetFor` answers the start of our first epoch). Everything goes.
            None => 0,
        }
    };
    target.clamp(0, log_end_offset.max(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An epoch cache: (epoch, start offset) ascending, and the log end.
    fn end_offset_for(cache: &[(i32, i64)], leo: i64) -> impl Fn(i32) -> Option<(i32, i64)> + '_ {
        move |wanted| {
            let idx = cache.iter().rposition(|(e, _)| *e <= wanted)?;
            let end = cache.get(idx + 1).map_or(leo, |(_, start)| *start);
            Some((cache[idx].0, end))
        }
    }

    #[test]
    fn a_follower_in_agreement_reads_on() {
        let leader = [(0, 0), (2, 50)];
        let check = check_follower_fetch(0, 80, end_offset_for(&leader, 80), 60, 2);
        assert_eq!(check, FollowerFetchCheck::Consistent);
        let check = check_follower_fetch(0, 80, end_offset_for(&leader, 80), 50, 0);
        assert_eq!(check, FollowerFetchCheck::Consistent);
    }

    #[test]
    fn a_follower_with_an_uncommitted_tail_of_an_old_epoch_truncates_to_the_epoch_end() {
        // Leader: epoch 0 up to 50, then epoch 2. Follower: epoch 0 up to 60 (its tail 50..60 was
        // never committed and the new leader does not have it), then epoch 1 (a leader that died).
        let leader = [(0, 0), (2, 50)];
        let follower = [(0, 0), (1, 60)];
        let check = check_follower_fetch(0, 80, end_offset_for(&leader, 80), 70, 1);
        assert_eq!(
            check,
            FollowerFetchCheck::Diverging {
                epoch: 0,
                end_offset: 50
            }
        );
        let FollowerFetchCheck::Diverging { epoch, end_offset } = check else {
            unreachable!()
        };
        let at = follower_truncation_offset(70, end_offset_for(&follower, 70), epoch, end_offset);
        assert_eq!(at, 50);
        // After truncating to 50 the follower's last epoch is 0 and it fetches from 50: agreed.
        let check = check_follower_fetch(0, 80, end_offset_for(&leader, 80), 50, 0);
        assert_eq!(check, FollowerFetchCheck::Consistent);
    }

    #[test]
    fn a_follower_ahead_within_the_same_epoch_is_cut_back_to_the_leaders_end() {
        let leader = [(0, 0)];
        let check = check_follower_fetch(0, 40, end_offset_for(&leader, 40), 45, 0);
        assert_eq!(
            check,
            FollowerFetchCheck::Diverging {
                epoch: 0,
                end_offset: 40
            }
        );
        let at = follower_truncation_offset(45, end_offset_for(&[(0, 0)], 45), 0, 40);
        assert_eq!(at, 40);
    }

    #[test]
    fn a_follower_whose_epochs_the_leader_never_saw_truncates_to_the_leaders_start() {
        let leader = [(5, 100)];
        let check = check_follower_fetch(100, 120, end_offset_for(&leader, 120), 30, 3);
        assert_eq!(
            check,
            FollowerFetchCheck::Diverging {
                epoch: -1,
                end_offset: 100
            }
        );
        let at = follower_truncation_offset(30, end_offset_for(&[(3, 0)], 30), -1, 100);
        assert_eq!(
            at, 30,
            "never past our own end; the next fetch is then out of range"
        );
        let check = check_follower_fetch(100, 120, end_offset_for(&leader, 120), 30, -1);
        assert_eq!(check, FollowerFetchCheck::OutOfRange);
    }

    #[test]
    fn a_follower_that_knows_no_epoch_as_old_as_the_leaders_truncates_everything() {
        // Leader: epoch 0 at 0, epoch 2 from 1. Follower: only epoch 1, written at 0 by a leader
        // whose record nobody else got.
        let leader = [(0, 0), (2, 1)];
        let check = check_follower_fetch(0, 5, end_offset_for(&leader, 5), 1, 1);
        assert_eq!(
            check,
            FollowerFetchCheck::Diverging {
                epoch: 0,
                end_offset: 1
            }
        );
        let at = follower_truncation_offset(1, end_offset_for(&[(1, 0)], 1), 0, 1);
        assert_eq!(at, 0);
    }

    #[test]
    fn an_empty_follower_starts_anywhere_in_range() {
        let leader = [(0, 0)];
        assert_eq!(
            check_follower_fetch(0, 10, end_offset_for(&leader, 10), 0, -1),
            FollowerFetchCheck::Consistent
        );
        assert_eq!(
            check_follower_fetch(0, 10, end_offset_for(&leader, 10), 11, -1),
            FollowerFetchCheck::OutOfRange
        );
    }
}
