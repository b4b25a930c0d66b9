//! The transaction coordinator (Kafka's `TransactionCoordinator` and `TransactionStateManager`):
//! per transactional id its producer id, epoch, timeout, status and partitions, kept in memory
//! for the `__transaction_state` partitions this broker leads and written to them, one record per
//! transition, before anyone acts on the transition.
//!
//! Ownership: one shard per `__transaction_state` partition (`partition_for(id)`), led in the
//! partition's leader epoch, which is the coordinator epoch every marker carries. A shard is
//! loaded by replaying its partition when this broker becomes its leader and dropped when it
//! resigns. I/O goes through [`TxnIo`]: appends to `__transaction_state`, markers on data
//! partitions and producer ids.
//!
//! Rules (Kafka 4.1, transaction version 0 clients):
//! - A transition is made by one task at a time: the transactional id is *pending* from the
//!   decision until its record is committed (others get CONCURRENT_TRANSACTIONS); the in-memory
//!   state changes only once the record is committed, and only if the shard is still led in the
//!   same epoch.
//! - InitProducerId: a new id gets a producer id and epoch 0; an Empty or completed one a bumped
//!   epoch (a new producer id when the epoch is exhausted); an Ongoing one is fenced — epoch
//!   bumped, transaction aborted with markers in the new epoch — and the caller retries
//!   (CONCURRENT_TRANSACTIONS); PrepareCommit/PrepareAbort → CONCURRENT_TRANSACTIONS.
//! - EndTxn: Ongoing → PrepareCommit/PrepareAbort (answered once committed), then markers on
//!   every partition of the transaction (each acks=all), then CompleteCommit/CompleteAbort.
//!   Markers are only written after the Prepare record committed; a loading coordinator finishes
//!   every transaction it finds in Prepare.
//! - A transaction Ongoing past its timeout is aborted as a fenced one (epoch bumped), checked
//!   every `abort_check_interval`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use millrace_store::batch_walk::{BatchWalk, Validation, WalkChecks, WalkedBatch};
use millrace_store::{records, Marker, PartitionLog, ReadUpperBound};
use parking_lot::Mutex;
use tracing::{debug, info, warn};

use crate::limits::{LOAD_READ_BYTES, MARKER_RETRY_BACKOFF};
use crate::records::{decode_record, encode_key, encode_value, TransactionLogValue, TxnPartitions};
use crate::state::TxnStatus;

/// The coordinator's internal topic.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// The `__transaction_state` partition of a transactional id: Kafka's `abs(hashCode) % n`, the
/// same rule as for groups.
pub use millrace_groups::partition_for;

/// Settings (Kafka's broker configs of the same names).
#[derive(Debug, Clone)]
pub struct TxnConfig {
    /// `transaction.state.log.num.partitions`.
    pub partitions: i32,
    /// `transaction.max.timeout.ms`.
    pub max_timeout_ms: i32,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`.
    pub abort_check_interval: Duration,
}

/// Why an I/O of the coordinator failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxnIoError {
    /// This broker does not lead the partition (any more).
    #[error("not the partition's leader")]
    NotLeader,
    /// Too few in-sync replicas, or the append was not replicated in time.
    #[error("not enough replicas")]
    NotEnoughReplicas,
    /// The partition does not exist.
    #[error("unknown partition")]
    UnknownPartition,
    /// The partition refused the marker: a newer producer epoch or coordinator wrote there.
    #[error("fenced: {0}")]
    Fenced(String),
    /// Anything else (storage).
    #[error("{0}")]
    Other(String),
}

/// A pending I/O.
pub type IoFuture<T> = Pin<Box<dyn Future<Output = Result<T, TxnIoError>> + Send>>;

/// What the coordinator writes through; the broker implements it over replication.
pub trait TxnIo: Send + Sync + 'static {
    /// Appends one record to `__transaction_state` partition `partition` as its leader in
    /// `leader_epoch`; resolves once committed (acks=all).
    fn append_state(
        &self,
        partition: i32,
        leader_epoch: i32,
        key: Bytes,
        value: Option<Bytes>,
    ) -> IoFuture<()>;
    /// Writes `marker` for the producer on a data partition; resolves once committed.
    fn write_marker(
        &self,
        topic: &str,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        marker: Marker,
    ) -> IoFuture<()>;
    /// A producer id never handed out before.
    fn next_producer_id(&self) -> IoFuture<i64>;
}

/// A refusal, mapped to Kafka's error code at the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    /// NOT_COORDINATOR.
    #[error("not the coordinator")]
    NotCoordinator,
    /// COORDINATOR_LOAD_IN_PROGRESS.
    #[error("coordinator loading")]
    LoadInProgress,
    /// COORDINATOR_NOT_AVAILABLE.
    #[error("coordinator not available")]
    CoordinatorNotAvailable,
    /// CONCURRENT_TRANSACTIONS.
    #[error("concurrent transactions")]
    ConcurrentTransactions,
    /// INVALID_PRODUCER_ID_MAPPING.
    #[error("invalid producer id mapping")]
    InvalidProducerIdMapping,
    /// PRODUCER_FENCED (INVALID_PRODUCER_EPOCH for versions before KIP-588).
    #[error("producer fenced")]
    ProducerFenced,
    /// INVALID_PRODUCER_EPOCH.
    #[error("invalid producer epoch")]
    InvalidProducerEpoch,
    /// INVALID_TXN_STATE.
    #[error("invalid transaction state")]
    InvalidTxnState,
    /// INVALID_TRANSACTION_TIMEOUT.
    #[error("invalid transaction timeout")]
    InvalidTransactionTimeout,
    /// TRANSACTIONAL_ID_NOT_FOUND.
    #[error("transactional id not found")]
    TransactionalIdNotFound,
    /// INVALID_REQUEST.
    #[error("invalid request")]
    InvalidRequest,
    /// NOT_ENOUGH_REPLICAS (a transactional produce whose transaction is being decided or
    /// whose coordinator is loading: the producer retries).
    #[error("transaction not verifiable yet")]
    NotEnoughReplicas,
    /// UNKNOWN_SERVER_ERROR.
    #[error("unknown server error")]
    Unknown,
}

/// Kafka's `isEpochExhausted`: no epoch can follow (a new producer id is needed).
fn epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

fn from_io(e: &TxnIoError) -> TxnError {
    match e {
        TxnIoError::NotLeader => TxnError::NotCoordinator,
        TxnIoError::NotEnoughReplicas | TxnIoError::UnknownPartition => {
            TxnError::CoordinatorNotAvailable
        }
        // Kafka's `appendTransactionToLog`: a storage failure means "ask another coordinator".
        TxnIoError::Other(_) => TxnError::NotCoordinator,
        TxnIoError::Fenced(_) => TxnError::Unknown,
    }
}

/// A transaction as DescribeTransactions reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnDescription {
    pub status: TxnStatus,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub start_ms: i64,
    pub partitions: TxnPartitions,
}

#[derive(Debug, Clone)]
struct Txn {
    value: TransactionLogValue,
    /// The epoch before the last bump (a retried InitProducerId names it; KIP-360).
    last_epoch: i16,
    /// A transition is being written.
    pending: bool,
    /// The pending transition only adds partitions to the (maybe new) Ongoing transaction: the
    /// committed partitions stay verifiable meanwhile (Kafka's verification looks past a pending
    /// transition to Ongoing).
    adding: bool,
}

#[derive(Debug, Clone)]
struct Led {
    leader_epoch: i32,
    load_id: u64,
    loaded: bool,
}

#[derive(Debug, Default)]
struct Shard {
    led: Option<Led>,
    txns: HashMap<String, Txn>,
}

/// The transaction coordinator of this broker.
pub struct TransactionCoordinator {
    config: TxnConfig,
    io: Arc<dyn TxnIo>,
    shards: Vec<Mutex<Shard>>,
    next_load_id: AtomicU64,
    closed: AtomicBool,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Whether `from` may still be moved to `to` by this coordinator (Kafka's table).
fn allowed(from: TxnStatus, to: TxnStatus) -> bool {
    crate::state::can_transition(from, to)
}

impl TransactionCoordinator {
    /// A coordinator leading nothing yet.
    pub fn new(config: TxnConfig, io: Arc<dyn TxnIo>) -> Arc<Self> {
        let shards = (0..config.partitions.max(1))
            .map(|_| Mutex::new(Shard::default()))
            .collect();
        Arc::new(TransactionCoordinator {
            config,
            io,
            shards,
            next_load_id: AtomicU64::new(1),
            closed: AtomicBool::new(false),
        })
    }

    /// Partitions of `__transaction_state`.
    pub fn partitions(&self) -> i32 {
        self.config.partitions.max(1)
    }

    /// Stops the timeout checker and new loads.
    pub fn shutdown(&self) {
        self.closed.store(true, Ordering::Release);
    }

    fn shard(&self, partition: i32) -> Option<&Mutex<Shard>> {
        usize::try_from(partition)
            .ok()
            .and_then(|i| self.shards.get(i))
    }

    /// The shard of `id` and its coordinator epoch, if it is led here and loaded.
    fn leading(&self, id: &str) -> Result<(i32, i32), TxnError> {
        let partition = partition_for(id, self.partitions());
        let shard = self.shard(partition).ok_or(TxnError::NotCoordinator)?;
        match &shard.lock().led {
            None => Err(TxnError::NotCoordinator),
            Some(l) if !l.loaded => Err(TxnError::LoadInProgress),
            Some(l) => Ok((partition, l.leader_epoch)),
        }
    }

    /// Whether `id`'s coordinator is here and ready (for FindCoordinator).
    pub fn check_coordinator(&self, id: &str) -> Result<(), TxnError> {
        self.leading(id).map(|_| ())
    }

    /// Runs `f` on the shard of `partition` if it is still led in `leader_epoch`.
    fn in_epoch<R>(
        &self,
        partition: i32,
        leader_epoch: i32,
        f: impl FnOnce(&mut Shard) -> R,
    ) -> Result<R, TxnError> {
        let shard = self.shard(partition).ok_or(TxnError::NotCoordinator)?;
        let mut shard = shard.lock();
        match &shard.led {
            Some(l) if l.leader_epoch == leader_epoch && l.loaded => Ok(f(&mut shard)),
            _ => Err(TxnError::NotCoordinator),
        }
    }

    /// Writes `value` as `id`'s new state (the id is pending) and applies it once committed;
    /// the pending mark is cleared either way.
    async fn persist(
        &self,
        partition: i32,
        leader_epoch: i32,
        id: &str,
        value: TransactionLogValue,
        last_epoch: Option<i16>,
    ) -> Result<(), TxnError> {
        let written = self
            .io
            .append_state(
                partition,
                leader_epoch,
                encode_key(id),
                Some(encode_value(&value)),
            )
            .await;
        self.in_epoch(partition, leader_epoch, |shard| match &written {
            Ok(()) => {
                let txn = shard.txns.entry(id.to_string()).or_insert_with(|| Txn {
                    value: value.clone(),
                    last_epoch: -1,
                    pending: false,
                    adding: false,
                });
                txn.value = value;
                txn.pending = false;
                txn.adding = false;
                if let Some(e) = last_epoch {
                    txn.last_epoch = e;
                }
            }
            Err(_) => {
                if let Some(txn) = shard.txns.get_mut(id) {
                    txn.pending = false;
                    txn.adding = false;
                    if txn.value.producer_id < 0 {
                        shard.txns.remove(id);
                    }
                }
            }
        })?;
        written.map_err(|e| {
            debug!(transactional_id = id, error = %e, "__transaction_state append failed");
            from_io(&e)
        })
    }

    /// InitProducerId with a transactional id → (producer id, epoch). `expected`: the producer
    /// id and epoch the client names (KIP-360), `(-1, -1)` for none.
    pub async fn init_producer_id(
        self: &Arc<Self>,
        id: &str,
        timeout_ms: i32,
        expected: (i64, i16),
    ) -> Result<(i64, i16), TxnError> {
        if timeout_ms <= 0 || timeout_ms > self.config.max_timeout_ms {
            return Err(TxnError::InvalidTransactionTimeout);
        }
        if (expected.0 >= 0) != (expected.1 >= 0) {
            return Err(TxnError::InvalidRequest);
        }
        let (partition, leader_epoch) = self.leading(id)?;
        let now = now_ms();
        enum Plan {
            New,
            /// The state before, and the last epoch to remember.
            Bump(TransactionLogValue, i16),
            Current(i64, i16),
            Fence(TransactionLogValue),
        }
        let plan = self.in_epoch(partition, leader_epoch, |shard| {
            let Some(txn) = shard.txns.get_mut(id) else {
                shard.txns.insert(
                    id.to_string(),
                    Txn {
                        value: TransactionLogValue::default(),
                        last_epoch: -1,
                        pending: true,
                        adding: false,
                    },
                );
                return Ok(Plan::New);
            };
            if txn.pending {
                return Err(TxnError::ConcurrentTransactions);
            }
            let v = &txn.value;
            let (req_pid, req_epoch) = expected;
            let given = req_pid >= 0;
            // Kafka's `isValidProducerId`: the current producer id, or the previous one with an
            // exhausted epoch.
            if given
                && req_pid != v.producer_id
                && !(req_pid == v.previous_producer_id && epoch_exhausted(req_epoch))
            {
                return Err(TxnError::ProducerFenced);
            }
            match v.status {
                TxnStatus::PrepareCommit | TxnStatus::PrepareAbort => {
                    Err(TxnError::ConcurrentTransactions)
                }
                TxnStatus::Ongoing => {
                    txn.pending = true;
                    Ok(Plan::Fence(v.clone()))
                }
                // Kafka's `prepareIncrementProducerEpoch`: a new instance bumps (and remembers no
                // last epoch); the current epoch bumps (remembering it); the last epoch is a retry
                // of a bump that committed and gets the current epoch again; anything else is
                // fenced.
                _ if !given
                    || req_epoch == v.producer_epoch
                    || epoch_exhausted(v.producer_epoch) =>
                {
                    txn.pending = true;
                    Ok(Plan::Bump(
                        v.clone(),
                        if given { v.producer_epoch } else { -1 },
                    ))
                }
                _ if req_epoch == txn.last_epoch => {
                    Ok(Plan::Current(v.producer_id, v.producer_epoch))
                }
                _ => Err(TxnError::ProducerFenced),
            }
        })??;
        match plan {
            Plan::Current(pid, epoch) => Ok((pid, epoch)),
            Plan::New => {
                let pid = match self.io.next_producer_id().await {
                    Ok(pid) => pid,
                    Err(e) => {
                        let _ = self.in_epoch(partition, leader_epoch, |shard| {
                            shard.txns.remove(id);
                        });
                        return Err(from_io(&e));
                    }
                };
                let value = TransactionLogValue {
                    producer_id: pid,
                    producer_epoch: 0,
                    timeout_ms,
                    status: TxnStatus::Empty,
                    last_update_ms: now,
                    start_ms: -1,
                    ..TransactionLogValue::default()
                };
                self.persist(partition, leader_epoch, id, value, Some(-1))
                    .await?;
                info!(
                    transactional_id = id,
                    producer_id = pid,
                    "new transactional id"
                );
                Ok((pid, 0))
            }
            Plan::Bump(old, last_epoch) => {
                let mut value = TransactionLogValue {
                    producer_id: old.producer_id,
                    producer_epoch: old.producer_epoch.saturating_add(1),
                    previous_producer_id: old.previous_producer_id,
                    timeout_ms,
                    status: TxnStatus::Empty,
                    last_update_ms: now,
                    start_ms: -1,
                    ..TransactionLogValue::default()
                };
                if epoch_exhausted(old.producer_epoch) {
                    // Epoch exhausted: a new producer id.
                    match self.io.next_producer_id().await {
                        Ok(pid) => {
                            value.previous_producer_id = old.producer_id;
                            value.producer_id = pid;
                            value.producer_epoch = 0;
                        }
                        Err(e) => {
                            let _ = self.in_epoch(partition, leader_epoch, |shard| {
                                if let Some(t) = shard.txns.get_mut(id) {
                                    t.pending = false;
                                }
                            });
                            return Err(from_io(&e));
                        }
                    }
                }
                let answer = (value.producer_id, value.producer_epoch);
                self.persist(partition, leader_epoch, id, value, Some(last_epoch))
                    .await?;
                Ok(answer)
            }
            Plan::Fence(ongoing) => {
                info!(
                    transactional_id = id,
                    producer_id = ongoing.producer_id,
                    epoch = ongoing.producer_epoch,
                    "fencing the ongoing transaction of a new producer instance"
                );
                let me = Arc::clone(self);
                let id = id.to_string();
                tokio::spawn(async move {
                    me.abort_fenced(partition, leader_epoch, &id, ongoing).await;
                });
                Err(TxnError::ConcurrentTransactions)
            }
        }
    }

    /// Aborts `ongoing` (the id is pending) with its epoch bumped: PrepareAbort, markers,
    /// CompleteAbort.
    async fn abort_fenced(
        self: &Arc<Self>,
        partition: i32,
        leader_epoch: i32,
        id: &str,
        ongoing: TransactionLogValue,
    ) {
        let prepared = TransactionLogValue {
            producer_epoch: ongoing.producer_epoch.saturating_add(1),
            status: TxnStatus::PrepareAbort,
            last_update_ms: now_ms(),
            ..ongoing.clone()
        };
        if let Err(e) = self
            .persist(partition, leader_epoch, id, prepared.clone(), Some(-1))
            .await
        {
            warn!(transactional_id = id, error = %e, "fencing abort not written");
            return;
        }
        self.complete(partition, leader_epoch, id, prepared).await;
    }

    /// AddPartitionsToTxn (and AddOffsetsToTxn, with the group's offsets partition).
    pub async fn add_partitions(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
    ) -> Result<(), TxnError> {
        let (partition, leader_epoch) = self.leading(id)?;
        let now = now_ms();
        let next = self.in_epoch(partition, leader_epoch, |shard| {
            let txn = self.check_producer(shard, id, producer_id, producer_epoch)?;
            let v = &txn.value;
            match v.status {
                TxnStatus::PrepareCommit | TxnStatus::PrepareAbort => {
                    return Err(TxnError::ConcurrentTransactions)
                }
                TxnStatus::Ongoing
                    if partitions
                        .iter()
                        .all(|(t, p)| v.partitions.get(t).is_some_and(|ps| ps.contains(p))) =>
                {
                    return Ok(None);
                }
                s if !allowed(s, TxnStatus::Ongoing) => return Err(TxnError::InvalidTxnState),
                _ => {}
            }
            let mut value = v.clone();
            if value.status != TxnStatus::Ongoing {
                value.partitions = BTreeMap::new();
                value.start_ms = now;
            }
            value.status = TxnStatus::Ongoing;
            value.last_update_ms = now;
            for (t, p) in partitions {
                value.partitions.entry(t.clone()).or_default().insert(*p);
            }
            txn.pending = true;
            txn.adding = true;
            Ok(Some(value))
        })??;
        match next {
            None => Ok(()),
            Some(value) => self.persist(partition, leader_epoch, id, value, None).await,
        }
    }

    /// The id's state for a client naming `producer_id`/`producer_epoch`, not pending.
    fn check_producer<'a>(
        &self,
        shard: &'a mut Shard,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<&'a mut Txn, TxnError> {
        let txn = shard
            .txns
            .get_mut(id)
            .filter(|t| t.value.producer_id >= 0)
            .ok_or(TxnError::InvalidProducerIdMapping)?;
        if txn.value.producer_id != producer_id {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        if txn.value.producer_epoch != producer_epoch {
            return Err(TxnError::ProducerFenced);
        }
        if txn.pending {
            return Err(TxnError::ConcurrentTransactions);
        }
        Ok(txn)
    }

    /// EndTxn: commit (`commit`) or abort the ongoing transaction. Answered once the Prepare
    /// record is committed; the markers and the Complete record follow in the background.
    pub async fn end_txn(
        self: &Arc<Self>,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<(), TxnError> {
        let (partition, leader_epoch) = self.leading(id)?;
        let prepared = self.in_epoch(partition, leader_epoch, |shard| {
            let txn = self.check_producer(shard, id, producer_id, producer_epoch)?;
            let v = &txn.value;
            match (v.status, commit) {
                (TxnStatus::Ongoing, _) => {
                    txn.pending = true;
                    Ok(Some(TransactionLogValue {
                        status: if commit {
                            TxnStatus::PrepareCommit
                        } else {
                            TxnStatus::PrepareAbort
                        },
                        last_update_ms: now_ms(),
                        ..v.clone()
                    }))
                }
                (TxnStatus::CompleteCommit, true) | (TxnStatus::CompleteAbort, false) => Ok(None),
                (TxnStatus::PrepareCommit, true) | (TxnStatus::PrepareAbort, false) => {
                    Err(TxnError::ConcurrentTransactions)
                }
                _ => Err(TxnError::InvalidTxnState),
            }
        })??;
        let Some(prepared) = prepared else {
            return Ok(());
        };
        self.persist(partition, leader_epoch, id, prepared.clone(), None)
            .await?;
        let me = Arc::clone(self);
        let id = id.to_string();
        tokio::spawn(async move {
            me.complete(partition, leader_epoch, &id, prepared).await;
        });
        Ok(())
    }

    /// Writes the markers of a prepared transaction (retrying until each is written, the
    /// partition is gone, or this shard is no longer led in `leader_epoch`), then its Complete
    /// record.
    async fn complete(
        self: &Arc<Self>,
        partition: i32,
        leader_epoch: i32,
        id: &str,
        prepared: TransactionLogValue,
    ) {
        let commit = prepared.status == TxnStatus::PrepareCommit;
        let marker = Marker {
            commit,
            coordinator_epoch: leader_epoch,
        };
        let targets: Vec<(String, i32)> = prepared
            .partitions
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
            .collect();
        let writes = targets.iter().map(|(topic, p)| {
            let me = Arc::clone(self);
            async move {
                loop {
                    if me.closed.load(Ordering::Acquire)
                        || me.in_epoch(partition, leader_epoch, |_| ()).is_err()
                    {
                        return false;
                    }
                    match me
                        .io
                        .write_marker(
                            topic,
                            *p,
                            prepared.producer_id,
                            prepared.producer_epoch,
                            marker,
                        )
                        .await
                    {
                        Ok(()) | Err(TxnIoError::UnknownPartition) => return true,
                        Err(TxnIoError::Fenced(why)) => {
                            warn!(transactional_id = id, topic = %topic, partition = p, why, "marker refused; dropped");
                            return true;
                        }
                        Err(e) => {
                            debug!(transactional_id = id, topic = %topic, partition = p, error = %e, "marker not written; retrying");
                            tokio::time::sleep(MARKER_RETRY_BACKOFF).await;
                        }
                    }
                }
            }
        });
        let written = futures::future::join_all(writes).await;
        if !written.iter().all(|w| *w) {
            return;
        }
        let completed = TransactionLogValue {
            status: if commit {
                TxnStatus::CompleteCommit
            } else {
                TxnStatus::CompleteAbort
            },
            partitions: BTreeMap::new(),
            last_update_ms: now_ms(),
            ..prepared.clone()
        };
        // Written until it commits, or this shard is led elsewhere (the next coordinator finishes
        // the transaction from its Prepare record): a transaction is never left in Prepare.
        loop {
            let marked = self.in_epoch(partition, leader_epoch, |shard| {
                match shard.txns.get_mut(id) {
                    Some(t) if t.value == prepared => {
                        t.pending = true;
                        true
                    }
                    _ => false,
                }
            });
            if marked != Ok(true) || self.closed.load(Ordering::Acquire) {
                return;
            }
            match self
                .persist(partition, leader_epoch, id, completed.clone(), None)
                .await
            {
                Ok(()) => return,
                Err(e) => {
                    warn!(transactional_id = id, error = %e, "transaction completion not written; retrying");
                    tokio::time::sleep(MARKER_RETRY_BACKOFF).await;
                }
            }
        }
    }

    /// Whether a transactional batch of `producer_id`/`producer_epoch` for `topic`/`partition`
    /// belongs to `id`'s ongoing transaction (Kafka's produce-side verification, KIP-890 part
    /// 1). Ids not coordinated here are not checked.
    pub fn verify(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        topic: &str,
        partition: i32,
    ) -> Result<(), TxnError> {
        let (p, leader_epoch) = match self.leading(id) {
            Ok(led) => led,
            // Kafka's produce answers NOT_ENOUGH_REPLICAS (retriable) while the coordinator cannot
            // verify; an id coordinated on another broker is not checked here.
            Err(TxnError::LoadInProgress) => return Err(TxnError::NotEnoughReplicas),
            Err(_) => return Ok(()),
        };
        self.in_epoch(p, leader_epoch, |shard| {
            let Some(txn) = shard.txns.get(id).filter(|t| t.value.producer_id >= 0) else {
                return Err(TxnError::InvalidProducerIdMapping);
            };
            let v = &txn.value;
            if v.producer_id != producer_id {
                return Err(TxnError::InvalidProducerIdMapping);
            }
            if v.producer_epoch != producer_epoch {
                return Err(TxnError::InvalidProducerEpoch);
            }
            if (txn.pending && !txn.adding)
                || matches!(v.status, TxnStatus::PrepareCommit | TxnStatus::PrepareAbort)
            {
                return Err(TxnError::NotEnoughReplicas);
            }
            let added = v
                .partitions
                .get(topic)
                .is_some_and(|ps| ps.contains(&partition));
            if v.status == TxnStatus::Ongoing && added {
                Ok(())
            } else {
                Err(TxnError::InvalidTxnState)
            }
        })
        .unwrap_or(Err(TxnError::NotEnoughReplicas))
    }

    /// DescribeTransactions.
    pub fn describe(&self, id: &str) -> Result<TxnDescription, TxnError> {
        let (partition, leader_epoch) = self.leading(id)?;
        self.in_epoch(partition, leader_epoch, |shard| {
            let txn = shard
                .txns
                .get(id)
                .filter(|t| t.value.producer_id >= 0 && t.value.status != TxnStatus::Dead)
                .ok_or(TxnError::TransactionalIdNotFound)?;
            let v = &txn.value;
            Ok(TxnDescription {
                status: v.status,
                producer_id: v.producer_id,
                producer_epoch: v.producer_epoch,
                timeout_ms: v.timeout_ms,
                start_ms: v.start_ms,
                partitions: v.partitions.clone(),
            })
        })?
    }

    /// ListTransactions: (id, producer id, status) of every transaction coordinated here that
    /// passes the filters (empty = any); `min_duration_ms` ≥ 0 keeps only transactions running
    /// at least that long.
    pub fn list(
        &self,
        states: &BTreeSet<TxnStatus>,
        producer_ids: &BTreeSet<i64>,
        min_duration_ms: i64,
    ) -> Vec<(String, i64, TxnStatus)> {
        let now = now_ms();
        let mut out = Vec::new();
        for shard in &self.shards {
            let shard = shard.lock();
            if !shard.led.as_ref().is_some_and(|l| l.loaded) {
                continue;
            }
            for (id, txn) in &shard.txns {
                let v = &txn.value;
                if v.producer_id < 0 || v.status == TxnStatus::Dead {
                    continue;
                }
                if (!states.is_empty() && !states.contains(&v.status))
                    || (!producer_ids.is_empty() && !producer_ids.contains(&v.producer_id))
                {
                    continue;
                }
                // Kafka's filter: transactions running longer than the duration, in any state.
                if min_duration_ms >= 0 && now.saturating_sub(v.start_ms) <= min_duration_ms {
                    continue;
                }
                out.push((id.clone(), v.producer_id, v.status));
            }
        }
        out.sort();
        out
    }

    /// This broker became the leader of `__transaction_state` partition `partition` in
    /// `leader_epoch`: replay it, then serve its transactional ids.
    pub fn become_leader(
        self: &Arc<Self>,
        partition: i32,
        log: Arc<PartitionLog>,
        leader_epoch: i32,
    ) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let Some(shard) = self.shard(partition) else {
            warn!(
                partition,
                "leadership of an unknown __transaction_state partition ignored"
            );
            return;
        };
        let load_id = self.next_load_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut shard = shard.lock();
            if shard
                .led
                .as_ref()
                .is_some_and(|l| l.leader_epoch >= leader_epoch)
            {
                return;
            }
            shard.led = Some(Led {
                leader_epoch,
                load_id,
                loaded: false,
            });
            shard.txns.clear();
        }
        info!(
            partition,
            leader_epoch, "loading __transaction_state partition"
        );
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let loaded = tokio::task::spawn_blocking(move || replay(&log)).await;
            let txns = match loaded {
                Ok(Ok(txns)) => txns,
                Ok(Err(e)) => {
                    warn!(partition, error = %e, "__transaction_state replay failed");
                    return;
                }
                Err(e) => {
                    warn!(partition, error = %e, "__transaction_state replay task failed");
                    return;
                }
            };
            let mut unfinished = Vec::new();
            if let Some(shard) = me.shard(partition) {
                let mut shard = shard.lock();
                match &mut shard.led {
                    Some(l) if l.load_id == load_id => l.loaded = true,
                    _ => return,
                }
                for (id, value) in txns {
                    if matches!(
                        value.status,
                        TxnStatus::PrepareCommit | TxnStatus::PrepareAbort
                    ) {
                        unfinished.push((id.clone(), value.clone()));
                    }
                    let pending = matches!(
                        value.status,
                        TxnStatus::PrepareCommit | TxnStatus::PrepareAbort
                    );
                    shard.txns.insert(
                        id,
                        Txn {
                            value,
                            last_epoch: -1,
                            pending,
                            adding: false,
                        },
                    );
                }
            }
            info!(
                partition,
                leader_epoch,
                unfinished = unfinished.len(),
                "__transaction_state partition loaded"
            );
            for (id, prepared) in unfinished {
                let me = Arc::clone(&me);
                tokio::spawn(async move {
                    me.complete(partition, leader_epoch, &id, prepared).await;
                });
            }
        });
    }

    /// This broker no longer leads `partition`.
    pub fn resign(&self, partition: i32) {
        if let Some(shard) = self.shard(partition) {
            let mut shard = shard.lock();
            shard.led = None;
            shard.txns.clear();
        }
    }

    /// Aborts every transaction Ongoing past its timeout; runs until `shutdown`.
    pub async fn run_timeouts(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.config.abort_check_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !self.closed.load(Ordering::Acquire) {
            tick.tick().await;
            let now = now_ms();
            for partition in 0..self.partitions() {
                let expired: Vec<(i32, String, TransactionLogValue)> = self
                    .shard(partition)
                    .map(|shard| {
                        let mut shard = shard.lock();
                        let Some(epoch) = shard
                            .led
                            .as_ref()
                            .filter(|l| l.loaded)
                            .map(|l| l.leader_epoch)
                        else {
                            return Vec::new();
                        };
                        shard
                            .txns
                            .iter_mut()
                            .filter(|(_, t)| {
                                !t.pending
                                    && t.value.status == TxnStatus::Ongoing
                                    && t.value
                                        .start_ms
                                        .saturating_add(i64::from(t.value.timeout_ms))
                                        <= now
                            })
                            .map(|(id, t)| {
                                t.pending = true;
                                (epoch, id.clone(), t.value.clone())
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                for (leader_epoch, id, ongoing) in expired {
                    info!(transactional_id = %id, producer_id = ongoing.producer_id, "aborting a transaction past its timeout");
                    let me = Arc::clone(&self);
                    tokio::spawn(async move {
                        me.abort_fenced(partition, leader_epoch, &id, ongoing).await;
                    });
                }
            }
        }
    }
}

/// The latest state of every transactional id in a `__transaction_state` partition.
fn replay(log: &PartitionLog) -> Result<HashMap<String, TransactionLogValue>, String> {
    let mut out = HashMap::new();
    let mut offset = log.log_start_offset();
    let end = log.log_end_offset();
    while offset < end {
        let read = log
            .read(offset, LOAD_READ_BYTES, ReadUpperBound::LogEnd, true)
            .map_err(|e| e.to_string())?;
        let bytes = read.records;
        if bytes.is_empty() {
            break;
        }
        let before = offset;
        // Header checks only (no magic, no CRC); a batch whose header does not parse, or that
        // the read cut short, ends this read.
        let checks = WalkChecks {
            validation: Validation::Header,
            batch_bytes_max: None,
        };
        for walked in BatchWalk::new(&bytes, checks) {
            let Ok(WalkedBatch {
                header: h,
                bytes: batch,
                ..
            }) = walked
            else {
                break;
            };
            offset = offset.max(h.next_offset());
            if h.is_control() {
                continue;
            }
            let (_, recs) = records::decode_records(batch).map_err(|e| e.to_string())?;
            for r in recs {
                let Some(key) = r.key.as_deref() else {
                    continue;
                };
                match decode_record(key, r.value.as_deref()) {
                    Ok(rec) => match rec.value {
                        Some(v) => {
                            out.insert(rec.transactional_id, v);
                        }
                        None => {
                            out.remove(&rec.transactional_id);
                        }
                    },
                    Err(e) => {
                        warn!(offset = r.offset, error = %e, "skipping an unreadable __transaction_state record")
                    }
                }
            }
        }
        if offset == before {
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    //! The coordinator's rules over an in-memory `TxnIo` whose state records go to a real
    //! partition log (so that a second coordinator can replay them).
    use super::*;
    use millrace_store::records::{encode_records, BatchFields, Record};
    use millrace_store::{FlushPolicy, LogConfig, Store, StoreConfig, TopicId, TopicPartition};
    use std::sync::atomic::AtomicI64;

    /// (topic, partition, producer id, epoch, marker) of a marker written.
    type Written = (String, i32, i64, i16, Marker);

    struct FakeIo {
        log: Arc<PartitionLog>,
        next_pid: AtomicI64,
        markers: Mutex<Vec<Written>>,
        markers_fail: AtomicBool,
        /// State appends wait for a read lock: a test holding the write lock holds them.
        hold: Arc<tokio::sync::RwLock<()>>,
        /// State appends started (held or not).
        appends: std::sync::atomic::AtomicUsize,
    }

    impl TxnIo for FakeIo {
        fn append_state(&self, _: i32, _: i32, key: Bytes, value: Option<Bytes>) -> IoFuture<()> {
            let batch = encode_records(
                &BatchFields {
                    base_offset: 0,
                    partition_leader_epoch: -1,
                    attributes: 0,
                    last_offset_delta: 0,
                    base_timestamp: 1,
                    max_timestamp: 1,
                    producer_id: -1,
                    producer_epoch: -1,
                    base_sequence: -1,
                },
                &[Record {
                    offset: 0,
                    timestamp: 1,
                    key: Some(key),
                    value,
                    headers: Vec::new(),
                }],
            );
            self.appends.fetch_add(1, Ordering::SeqCst);
            let (log, hold) = (Arc::clone(&self.log), Arc::clone(&self.hold));
            Box::pin(async move {
                let _held = hold.read().await;
                log.append(batch, 0)
                    .map(|_| ())
                    .map_err(|e| TxnIoError::Other(e.to_string()))
            })
        }

        fn write_marker(&self, t: &str, p: i32, pid: i64, epoch: i16, m: Marker) -> IoFuture<()> {
            if self.markers_fail.load(Ordering::SeqCst) {
                return Box::pin(async { Err(TxnIoError::NotEnoughReplicas) });
            }
            self.markers.lock().push((t.to_string(), p, pid, epoch, m));
            Box::pin(async { Ok(()) })
        }

        fn next_producer_id(&self) -> IoFuture<i64> {
            let pid = self.next_pid.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move { Ok(pid) })
        }
    }

    fn setup(dir: &std::path::Path) -> (Arc<Store>, Arc<PartitionLog>) {
        let store = Store::open(StoreConfig {
            data_dir: dir.to_path_buf(),
            extra_log_dirs: Vec::new(),
            flush_policy: FlushPolicy::Never,
            flush_interval: Duration::from_millis(1),
            max_open_files: 64,
            high_watermark_follows_durable: true,
        })
        .expect("store");
        let tp = TopicPartition::new(TRANSACTION_STATE_TOPIC, 0);
        let log = match store.partition(&tp) {
            Some(log) => log,
            None => store
                .create_partition(&tp, LogConfig::default(), TopicId::from_bytes([1; 16]))
                .expect("partition"),
        };
        (store, log)
    }

    async fn coordinator(
        log: &Arc<PartitionLog>,
        epoch: i32,
    ) -> (Arc<TransactionCoordinator>, Arc<FakeIo>) {
        let io = Arc::new(FakeIo {
            log: Arc::clone(log),
            next_pid: AtomicI64::new(1000),
            markers: Mutex::new(Vec::new()),
            markers_fail: AtomicBool::new(false),
            hold: Arc::new(tokio::sync::RwLock::new(())),
            appends: std::sync::atomic::AtomicUsize::new(0),
        });
        let c = TransactionCoordinator::new(
            TxnConfig {
                partitions: 1,
                max_timeout_ms: 60_000,
                abort_check_interval: Duration::from_secs(3600),
            },
            Arc::clone(&io) as Arc<dyn TxnIo>,
        );
        c.become_leader(0, Arc::clone(log), epoch);
        eventually(|| c.check_coordinator("x").is_ok()).await;
        (c, io)
    }

    async fn eventually(mut done: impl FnMut() -> bool) {
        for _ in 0..500 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("condition not reached within 5 s");
    }

    fn status(c: &TransactionCoordinator, id: &str) -> Option<TxnStatus> {
        c.describe(id).ok().map(|d| d.status)
    }

    #[tokio::test]
    async fn verification_looks_past_a_pending_add_but_not_past_a_pending_end() {
        let dir = tempfile::tempdir().expect("tmp");
        let (_store, log) = setup(dir.path());
        let (c, io) = coordinator(&log, 1).await;
        let (pid, epoch) = c
            .init_producer_id("t", 60_000, (-1, -1))
            .await
            .expect("init");
        c.add_partitions("t", pid, epoch, &[("a".to_string(), 0)])
            .await
            .expect("add a-0");
        assert_eq!(c.verify("t", pid, epoch, "a", 0), Ok(()));

        // Adding b-0 is being written: a-0 (committed) still verifies, b-0 not yet.
        let held = Arc::clone(&io.hold).write_owned().await;
        let started = io.appends.load(Ordering::SeqCst);
        let adding = {
            let c = Arc::clone(&c);
            tokio::spawn(async move {
                c.add_partitions("t", pid, epoch, &[("b".to_string(), 0)])
                    .await
            })
        };
        eventually(|| io.appends.load(Ordering::SeqCst) > started).await;
        assert_eq!(c.verify("t", pid, epoch, "a", 0), Ok(()));
        assert_eq!(
            c.verify("t", pid, epoch, "b", 0),
            Err(TxnError::InvalidTxnState)
        );
        drop(held);
        adding.await.expect("join").expect("add b-0");
        assert_eq!(c.verify("t", pid, epoch, "b", 0), Ok(()));

        // Ending the transaction is being written: nothing verifies (retriable).
        let held = Arc::clone(&io.hold).write_owned().await;
        let started = io.appends.load(Ordering::SeqCst);
        let ending = {
            let c = Arc::clone(&c);
            tokio::spawn(async move { c.end_txn("t", pid, epoch, true).await })
        };
        eventually(|| io.appends.load(Ordering::SeqCst) > started).await;
        assert_eq!(
            c.verify("t", pid, epoch, "a", 0),
            Err(TxnError::NotEnoughReplicas)
        );
        drop(held);
        ending.await.expect("join").expect("end");
    }

    #[tokio::test]
    async fn init_producer_id_follows_kafkas_epoch_rules() {
        let dir = tempfile::tempdir().expect("tmp");
        let (_store, log) = setup(dir.path());
        let (c, _) = coordinator(&log, 1).await;
        assert_eq!(
            c.init_producer_id("t", 0, (-1, -1)).await,
            Err(TxnError::InvalidTransactionTimeout)
        );
        assert_eq!(
            c.init_producer_id("t", 60_001, (-1, -1)).await,
            Err(TxnError::InvalidTransactionTimeout)
        );
        assert_eq!(c.init_producer_id("t", 1000, (-1, -1)).await, Ok((1000, 0)));
        assert_eq!(
            c.init_producer_id("t", 1000, (-1, -1)).await,
            Ok((1000, 1)),
            "a new instance bumps"
        );
        assert_eq!(
            c.init_producer_id("t", 1000, (1000, 1)).await,
            Ok((1000, 2)),
            "the current epoch bumps"
        );
        assert_eq!(
            c.init_producer_id("t", 1000, (1000, 1)).await,
            Ok((1000, 2)),
            "a retry gets it again"
        );
        assert_eq!(
            c.init_producer_id("t", 1000, (1000, 0)).await,
            Err(TxnError::ProducerFenced)
        );
        assert_eq!(
            c.init_producer_id("t", 1000, (7, 2)).await,
            Err(TxnError::ProducerFenced)
        );
        assert_eq!(
            c.init_producer_id("t", 1000, (1000, -1)).await,
            Err(TxnError::InvalidRequest)
        );
        // A new instance (no epoch named) leaves nothing for the old epoch to retry with.
        assert_eq!(c.init_producer_id("t", 1000, (-1, -1)).await, Ok((1000, 3)));
        assert_eq!(
            c.init_producer_id("t", 1000, (1000, 2)).await,
            Err(TxnError::ProducerFenced)
        );
    }

    #[tokio::test]
    async fn commit_writes_markers_then_completes_and_fencing_aborts() {
        let dir = tempfile::tempdir().expect("tmp");
        let (_store, log) = setup(dir.path());
        let (c, io) = coordinator(&log, 3).await;
        let (pid, epoch) = c.init_producer_id("t", 1000, (-1, -1)).await.expect("init");
        assert_eq!(
            c.end_txn("t", pid, epoch, true).await,
            Err(TxnError::InvalidTxnState),
            "nothing open"
        );
        let parts = [("a".to_string(), 0), ("a".to_string(), 1)];
        c.add_partitions("t", pid, epoch, &parts)
            .await
            .expect("add");
        assert_eq!(c.verify("t", pid, epoch, "a", 1), Ok(()));
        assert_eq!(
            c.verify("t", pid, epoch, "a", 2),
            Err(TxnError::InvalidTxnState)
        );
        assert_eq!(
            c.verify("t", pid, epoch + 1, "a", 1),
            Err(TxnError::InvalidProducerEpoch)
        );
        assert_eq!(
            c.add_partitions("t", pid, epoch + 1, &parts).await,
            Err(TxnError::ProducerFenced)
        );
        assert_eq!(
            c.add_partitions("t", pid + 1, epoch, &parts).await,
            Err(TxnError::InvalidProducerIdMapping)
        );
        c.end_txn("t", pid, epoch, true).await.expect("commit");
        eventually(|| status(&c, "t") == Some(TxnStatus::CompleteCommit)).await;
        let commit = Marker {
            commit: true,
            coordinator_epoch: 3,
        };
        assert_eq!(
            *io.markers.lock(),
            vec![
                ("a".to_string(), 0, pid, epoch, commit),
                ("a".to_string(), 1, pid, epoch, commit)
            ]
        );
        assert_eq!(
            c.end_txn("t", pid, epoch, true).await,
            Ok(()),
            "a retry after completion"
        );
        assert_eq!(
            c.end_txn("t", pid, epoch, false).await,
            Err(TxnError::InvalidTxnState)
        );

        // An Ongoing transaction is fenced by a new instance: aborted in a bumped epoch.
        c.add_partitions("t", pid, epoch, &parts[..1])
            .await
            .expect("add");
        assert_eq!(
            c.init_producer_id("t", 1000, (-1, -1)).await,
            Err(TxnError::ConcurrentTransactions)
        );
        eventually(|| status(&c, "t") == Some(TxnStatus::CompleteAbort)).await;
        let abort = Marker {
            commit: false,
            coordinator_epoch: 3,
        };
        assert_eq!(
            io.markers.lock().last().cloned(),
            Some(("a".to_string(), 0, pid, epoch + 1, abort))
        );
        assert_eq!(
            c.init_producer_id("t", 1000, (-1, -1)).await,
            Ok((pid, epoch + 2))
        );
        assert_eq!(
            c.end_txn("t", pid, epoch, true).await,
            Err(TxnError::ProducerFenced)
        );
    }

    #[tokio::test]
    async fn a_new_coordinator_finishes_a_prepared_transaction() {
        let dir = tempfile::tempdir().expect("tmp");
        let (_store, log) = setup(dir.path());
        let (c, io) = coordinator(&log, 1).await;
        let (pid, epoch) = c.init_producer_id("t", 1000, (-1, -1)).await.expect("init");
        c.add_partitions("t", pid, epoch, &[("a".to_string(), 0)])
            .await
            .expect("add");
        io.markers_fail.store(true, Ordering::SeqCst);
        c.end_txn("t", pid, epoch, false)
            .await
            .expect("abort answered once prepared");
        assert_eq!(status(&c, "t"), Some(TxnStatus::PrepareAbort));
        assert_eq!(
            c.init_producer_id("t", 1000, (-1, -1)).await,
            Err(TxnError::ConcurrentTransactions)
        );
        // Leadership moves (the old coordinator's marker retries stop) and a new one loads.
        c.resign(0);
        c.shutdown();
        let (c2, io2) = coordinator(&log, 2).await;
        eventually(|| status(&c2, "t") == Some(TxnStatus::CompleteAbort)).await;
        let abort = Marker {
            commit: false,
            coordinator_epoch: 2,
        };
        assert_eq!(
            *io2.markers.lock(),
            vec![("a".to_string(), 0, pid, epoch, abort)]
        );
        assert_eq!(
            c2.init_producer_id("t", 1000, (-1, -1)).await,
            Ok((pid, epoch + 1))
        );
    }
}
