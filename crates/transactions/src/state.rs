//! Kafka's transaction state machine: the status of a transactional id as the coordinator keeps
//! it, the i8 id stored in `__transaction_state` values (TransactionStatus), the name
//! DescribeTransactions and ListTransactions return (and ListTransactions' state filter takes),
//! and which transitions are valid.
//!
//! Verified against Apache Kafka 4.1.1 (`org.apache.kafka.coordinator.transaction.TransactionState`
//! in kafka-transaction-coordinator-4.1.1.jar): ids 0-7 in the order below; the names are those of
//! the admin client's `TransactionState` ("Empty", "Ongoing", ...), except Dead, which the admin
//! client does not know and which the coordinator names "Dead". Kafka 4.1 lets Empty,
//! CompleteCommit and CompleteAbort move to PrepareAbort (transactions v2: a client unsure of the
//! server's state may send EndTxn(abort)); older brokers allowed only Ongoing and
//! PrepareEpochFence there.

use std::fmt;

/// The status of a transactional id. The discriminants are Kafka's TransactionStatus ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(i8)]
pub enum TxnStatus {
    /// No transaction yet (after InitProducerId), or none since the last one completed and
    /// expired from the cache.
    Empty = 0,
    /// Partitions or offsets were added; EndTxn has not come.
    Ongoing = 1,
    /// EndTxn(commit) came; markers are being written.
    PrepareCommit = 2,
    /// EndTxn(abort) came, or the transaction timed out or was fenced; markers are being written.
    PrepareAbort = 3,
    /// Every commit marker is written.
    CompleteCommit = 4,
    /// Every abort marker is written.
    CompleteAbort = 5,
    /// The transactional id expired and is about to be removed (its tombstone follows).
    Dead = 6,
    /// A newer producer is fencing this one: the epoch is being bumped before the abort.
    PrepareEpochFence = 7,
}

impl TxnStatus {
    /// Every status, in id order.
    pub const ALL: [TxnStatus; 8] = [
        TxnStatus::Empty,
        TxnStatus::Ongoing,
        TxnStatus::PrepareCommit,
        TxnStatus::PrepareAbort,
        TxnStatus::CompleteCommit,
        TxnStatus::CompleteAbort,
        TxnStatus::Dead,
        TxnStatus::PrepareEpochFence,
    ];

    /// The status with TransactionStatus id `id`; `None` for an id Kafka does not define.
    pub fn from_i8(id: i8) -> Option<TxnStatus> {
        usize::try_from(id)
            .ok()
            .and_then(|i| TxnStatus::ALL.get(i))
            .copied()
    }

    /// The TransactionStatus id stored in `__transaction_state`.
    pub fn as_i8(self) -> i8 {
        self as i8
    }

    /// The name DescribeTransactions and ListTransactions return for this status.
    pub fn name(self) -> &'static str {
        match self {
            TxnStatus::Empty => "Empty",
            TxnStatus::Ongoing => "Ongoing",
            TxnStatus::PrepareCommit => "PrepareCommit",
            TxnStatus::PrepareAbort => "PrepareAbort",
            TxnStatus::CompleteCommit => "CompleteCommit",
            TxnStatus::CompleteAbort => "CompleteAbort",
            TxnStatus::Dead => "Dead",
            TxnStatus::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// The status named `name` (exact, case-sensitive, as Kafka matches ListTransactions' state
    /// filters); `None` for a name Kafka does not define, which matches no transaction.
    pub fn from_name(name: &str) -> Option<TxnStatus> {
        TxnStatus::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The statuses Kafka accepts a transition into `self` from (`validPreviousStates`).
    pub fn valid_previous(self) -> &'static [TxnStatus] {
        use TxnStatus::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[
                Ongoing,
                PrepareEpochFence,
                Empty,
                CompleteCommit,
                CompleteAbort,
            ],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteAbort, CompleteCommit],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// Whether a transactional id in this status may expire (`transactional.id.expiration.ms`):
    /// no transaction is in flight.
    pub fn is_expiration_allowed(self) -> bool {
        matches!(
            self,
            TxnStatus::Empty | TxnStatus::CompleteCommit | TxnStatus::CompleteAbort
        )
    }
}

impl fmt::Display for TxnStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether Kafka's coordinator accepts moving a transactional id from `from` to `to`.
pub fn can_transition(from: TxnStatus, to: TxnStatus) -> bool {
    to.valid_previous().contains(&from)
}

#[cfg(test)]
mod tests {
    use super::TxnStatus::*;
    use super::*;

    #[test]
    fn ids_and_names_are_kafkas() {
        let expected = [
            (0, "Empty"),
            (1, "Ongoing"),
            (2, "PrepareCommit"),
            (3, "PrepareAbort"),
            (4, "CompleteCommit"),
            (5, "CompleteAbort"),
            (6, "Dead"),
            (7, "PrepareEpochFence"),
        ];
        for (s, (id, name)) in TxnStatus::ALL.into_iter().zip(expected) {
            assert_eq!(s.as_i8(), id);
            assert_eq!(s.name(), name);
            assert_eq!(s.to_string(), name);
            assert_eq!(TxnStatus::from_i8(id), Some(s));
            assert_eq!(TxnStatus::from_name(name), Some(s));
        }
        for id in [-128, -1, 8, 9, 127] {
            assert_eq!(TxnStatus::from_i8(id), None);
        }
        assert_eq!(TxnStatus::from_name("ongoing"), None);
        assert_eq!(TxnStatus::from_name("Unknown"), None);
        assert_eq!(TxnStatus::from_name(""), None);
    }

    /// The full 8x8 table, written out as Kafka 4.1.1's `validPreviousStates` gives it: row =
    /// from, column = to, in id order.
    #[test]
    fn transition_table_is_kafkas() {
        #[rustfmt::skip]
        let table: [[u8; 8]; 8] = [
            //      Em On PC PA CC CA De PF    (to)
            /*Em*/ [1, 1, 0, 1, 0, 0, 1, 0],
            /*On*/ [0, 1, 1, 1, 0, 0, 0, 1],
            /*PC*/ [0, 0, 0, 0, 1, 0, 0, 0],
            /*PA*/ [0, 0, 0, 0, 0, 1, 0, 0],
            /*CC*/ [1, 1, 0, 1, 0, 0, 1, 0],
            /*CA*/ [1, 1, 0, 1, 0, 0, 1, 0],
            /*De*/ [0, 0, 0, 0, 0, 0, 0, 0],
            /*PF*/ [0, 0, 0, 1, 0, 0, 0, 0],
        ];
        for (i, from) in TxnStatus::ALL.into_iter().enumerate() {
            for (j, to) in TxnStatus::ALL.into_iter().enumerate() {
                assert_eq!(can_transition(from, to), table[i][j] == 1, "{from} -> {to}");
            }
        }
    }

    #[test]
    fn the_usual_paths_are_valid() {
        let commit = [
            Empty,
            Ongoing,
            Ongoing,
            PrepareCommit,
            CompleteCommit,
            Empty,
        ];
        let abort = [Empty, Ongoing, PrepareAbort, CompleteAbort, Ongoing];
        let fence = [
            Ongoing,
            PrepareEpochFence,
            PrepareAbort,
            CompleteAbort,
            Dead,
        ];
        for path in [&commit[..], &abort[..], &fence[..]] {
            for w in path.windows(2) {
                assert!(can_transition(w[0], w[1]), "{} -> {}", w[0], w[1]);
            }
        }
        assert!(!can_transition(PrepareCommit, PrepareAbort));
        assert!(!can_transition(Dead, Empty));
        assert!(!can_transition(Empty, PrepareCommit));
    }

    #[test]
    fn expiration_is_allowed_only_when_idle() {
        let allowed: Vec<_> = TxnStatus::ALL
            .into_iter()
            .filter(|s| s.is_expiration_allowed())
            .collect();
        assert_eq!(allowed, [Empty, CompleteCommit, CompleteAbort]);
    }
}
