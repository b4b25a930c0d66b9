//! One partition's replica state machine on one broker (the leader half of Kafka's `Partition`):
//! the high watermark, the followers' fetch state, and the ISR changes the leader proposes.
//!
//! Rules (Kafka's, after KIP-101/279/497/841/903/966):
//! - The high watermark (HW) is the smallest log end offset over the *maximal* ISR (the committed
//!   ISR plus members of a pending expansion), counting the leader's *durable* log end, and it
//!   advances only while the committed ISR has at least `min.insync.replicas` members (KIP-966's
//!   strict rule). It never moves back.
//! - A follower's log end offset is the offset it fetches from, and counts only after the driver
//!   checked that its log agrees with ours (no diverging epoch), and only as durable (followers
//!   fetch again only once what they appended is as durable as the flush policy promises).
//! - A new leader knows nothing of its followers: their log ends are unknown until they fetch, so
//!   the HW cannot rise on stale information from a previous epoch.
//! - ISR expansion: a follower outside the maximal ISR that is eligible (active broker, current
//!   broker epoch) and whose log end is at or past both the HW and the start of this leader epoch.
//! - ISR shrink: a committed ISR member that has not caught up for `replica.lag.time.max.ms`.
//! - One ISR change in flight at a time; it is used for the HW only as "maximal ISR" until the
//!   controller commits it (never compute a HW from an uncommitted shrink). While its outcome is
//!   unknown (a lost or stale answer: an earlier attempt may have been committed) it keeps
//!   counting, and a lost one is sent again; only a committed state or INELIGIBLE_REPLICA ends it.
//! - ISR expansion also requires the follower to have caught up within `replica.lag.time.max.ms`
//!   (what the shrink rule checks), so a follower known only from stale fetch state is not added
//!   back and shrunk again on every tick.
//!
//! Pure: no I/O, no clock; `step` takes an event and returns actions. Read first:
//! [`PartitionReplica::step`].

use std::collections::BTreeMap;

/// Unknown log end offset (a follower that has not fetched in this leader epoch).
pub const UNKNOWN_OFFSET: i64 = -1;

/// A partition's committed state, as the metadata image (or an AlterPartition answer) says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
    pub replicas: Vec<i32>,
}

/// Settings of one partition's replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaConfig {
    /// replica.lag.time.max.ms
    pub replica_lag_time_max_ms: i64,
    /// The topic's min.insync.replicas.
    pub min_insync_replicas: usize,
}

/// Why an AlterPartition failed, as far as the state machine cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlterPartitionError {
    /// The state moved (INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH, NOT_LEADER...): wait for the
    /// metadata that says how.
    Stale,
    /// A proposed member cannot join (INELIGIBLE_REPLICA): try again later.
    Ineligible,
    /// Could not reach the controller or it timed out: try again.
    Retriable,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The committed partition state changed (or first became known). `log_end_offset` and
    /// `durable_end_offset` are the local log's; `high_watermark` the local log's current one.
    Metadata {
        state: PartitionState,
        log_end_offset: i64,
        durable_end_offset: i64,
        high_watermark: i64,
        config: ReplicaConfig,
        now_ms: i64,
    },
    /// The local log's durable end moved (an append became durable, or was made under `never`).
    LocalDurable { durable_end_offset: i64 },
    /// A follower fetched from `fetch_offset`; the driver already checked that its log agrees
    /// with ours up to there. `eligible`: its broker is active with `broker_epoch` (KIP-841/903).
    FollowerFetch {
        replica_id: i32,
        broker_epoch: i64,
        fetch_offset: i64,
        eligible: bool,
        /// The leader's log end offset when the fetch was served.
        leader_log_end_offset: i64,
        now_ms: i64,
    },
    /// The controller answered our AlterPartition.
    AlterPartitionDone {
        result: Result<PartitionState, AlterPartitionError>,
        now_ms: i64,
    },
    /// Time passed (ISR shrink checks, retries).
    Tick { now_ms: i64 },
    /// The metadata says these brokers are fenced, shutting down or unregistered: whatever their
    /// last fetch said, they cannot join the ISR until they fetch again as an eligible broker
    /// (Kafka checks eligibility against the metadata when it proposes, KIP-841).
    Ineligible { replicas: Vec<i32> },
    /// The local log was truncated (follower divergence): the HW cannot exceed its new end.
    Truncated { log_end_offset: i64 },
    /// As a follower, a fetch answer arrived with the leader's HW; `log_end_offset` is ours after
    /// appending what came with it.
    LeaderHighWatermark {
        leader_high_watermark: i64,
        log_end_offset: i64,
    },
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Set the log's high watermark (only ever larger).
    SetHighWatermark(i64),
    /// Send AlterPartition to the controller.
    AlterPartition {
        leader_epoch: i32,
        partition_epoch: i32,
        /// (broker id, broker epoch or -1)
        isr: Vec<(i32, i64)>,
    },
}

/// See [`PartitionReplica::leader_health`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderHealth {
    pub replicas: usize,
    pub isr: usize,
    pub under_min_isr: bool,
    /// `None` with no followers.
    pub slowest_follower_log_end: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FollowerState {
    log_end_offset: i64,
    broker_epoch: i64,
    eligible: bool,
    last_caught_up_ms: i64,
    last_fetch_ms: i64,
    last_fetch_leader_log_end_offset: i64,
}

impl FollowerState {
    fn unknown(last_caught_up_ms: i64) -> Self {
        Self {
            log_end_offset: UNKNOWN_OFFSET,
            broker_epoch: -1,
            eligible: false,
            last_caught_up_ms,
            last_fetch_ms: 0,
            last_fetch_leader_log_end_offset: UNKNOWN_OFFSET,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct LeaderState {
    state: PartitionState,
    /// The log end offset when this leader epoch began: records from here on are this epoch's.
    epoch_start_offset: i64,
    durable_end_offset: i64,
    followers: BTreeMap<i32, FollowerState>,
    /// The ISR proposed to the controller whose outcome is not known yet: it counts as the
    /// maximal ISR until an answer or the metadata settles it.
    pending_isr: Option<Vec<i32>>,
    /// The last answer about `pending_isr` was lost or retriable: send the same change again.
    resend_pending: bool,
    /// No new proposal before this time (after an ineligible/retriable failure).
    retry_after_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Role {
    /// Not a replica of this partition, or its state is not known yet.
    None,
    Leader(LeaderState),
    Follower {
        leader: i32,
        leader_epoch: i32,
    },
}

/// One partition's replica on this broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionReplica {
    local_id: i32,
    role: Role,
    config: ReplicaConfig,
    high_watermark: i64,
}

/// How long to wait before proposing again after a refused or lost AlterPartition.
pub const ALTER_PARTITION_RETRY_MS: i64 = 500;

impl PartitionReplica {
    pub fn new(local_id: i32, config: ReplicaConfig) -> Self {
        Self {
            local_id,
            role: Role::None,
            config,
            high_watermark: 0,
        }
    }

    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// The broker this replica lives on.
    pub fn local_id(&self) -> i32 {
        self.local_id
    }

    pub fn is_leader(&self) -> bool {
        matches!(self.role, Role::Leader(_))
    }

    /// (leader, leader epoch) as this replica acts on it; `None` before any metadata.
    pub fn leader(&self) -> Option<(i32, i32)> {
        match &self.role {
            Role::None => None,
            Role::Leader(l) => Some((self.local_id, l.state.leader_epoch)),
            Role::Follower {
                leader,
                leader_epoch,
            } => Some((*leader, *leader_epoch)),
        }
    }

    /// As leader: the offset this leader epoch started at.
    pub fn epoch_start_offset(&self) -> Option<i64> {
        match &self.role {
            Role::Leader(l) => Some(l.epoch_start_offset),
            _ => None,
        }
    }

    /// As leader: the committed ISR.
    pub fn isr(&self) -> Option<&[i32]> {
        match &self.role {
            Role::Leader(l) => Some(&l.state.isr),
            _ => None,
        }
    }

    /// As leader, for the metrics: (replicas, committed ISR size, whether under min ISR, the
    /// smallest follower log end offset known — 0 for a follower not heard from).
    pub fn leader_health(&self) -> Option<LeaderHealth> {
        match &self.role {
            Role::Leader(l) => Some(LeaderHealth {
                replicas: l.state.replicas.len(),
                isr: l.state.isr.len(),
                under_min_isr: l.state.isr.len() < self.config.min_insync_replicas,
                slowest_follower_log_end: l
                    .followers
                    .values()
                    .map(|f| f.log_end_offset.max(0))
                    .min(),
            }),
            _ => None,
        }
    }

    /// As leader: whether `acks=all` must be refused (KIP-966 strict min ISR).
    pub fn is_under_min_isr(&self) -> bool {
        match &self.role {
            Role::Leader(l) => l.state.isr.len() < self.config.min_insync_replicas,
            _ => true,
        }
    }

    /// Applies one event.
    pub fn step(&mut self, event: Event) -> Vec<Action> {
        let mut actions = Vec::new();
        match event {
            Event::Metadata {
                state,
                log_end_offset,
                durable_end_offset,
                high_watermark,
                config,
                now_ms,
            } => {
                self.config = config;
                self.on_metadata(
                    state,
                    log_end_offset,
                    durable_end_offset,
                    high_watermark,
                    now_ms,
                );
            }
            Event::LocalDurable { durable_end_offset } => {
                if let Role::Leader(l) = &mut self.role {
                    l.durable_end_offset = l.durable_end_offset.max(durable_end_offset);
                }
            }
            Event::FollowerFetch {
                replica_id,
                broker_epoch,
                fetch_offset,
                eligible,
                leader_log_end_offset,
                now_ms,
            } => {
                if let Role::Leader(l) = &mut self.role {
                    if let Some(f) = l.followers.get_mut(&replica_id) {
                        if fetch_offset >= leader_log_end_offset {
                            f.last_caught_up_ms = f.last_caught_up_ms.max(now_ms);
                        } else if fetch_offset >= f.last_fetch_leader_log_end_offset
                            && f.last_fetch_leader_log_end_offset != UNKNOWN_OFFSET
                        {
                            f.last_caught_up_ms = f.last_caught_up_ms.max(f.last_fetch_ms);
                        }
                        f.last_fetch_leader_log_end_offset = leader_log_end_offset;
                        f.last_fetch_ms = now_ms;
                        f.log_end_offset = fetch_offset;
                        f.broker_epoch = broker_epoch;
                        f.eligible = eligible;
                    }
                    self.maybe_expand_isr(now_ms, &mut actions);
                }
            }
            Event::AlterPartitionDone { result, now_ms } => {
                if let Role::Leader(l) = &mut self.role {
                    match result {
                        Ok(state)
                            if state.leader == self.local_id
                                && state.leader_epoch == l.state.leader_epoch
                                && state.partition_epoch > l.state.partition_epoch =>
                        {
                            l.pending_isr = None;
                            l.resend_pending = false;
                            count_isr_change(&l.state.isr, &state.isr);
                            l.state = state;
                        }
                        // Not newer than what the metadata already settled (which cleared the
                        // change it answers); a change pending now is a later one.
                        Ok(_) => {}
                        // Not applied, but the partition moved — possibly by an earlier attempt of
                        // this very change: keep counting it until the metadata says (Kafka:
                        // "awaiting the latest metadata").
                        Err(AlterPartitionError::Stale) => {}
                        // Not applied and nothing moved (INELIGIBLE_REPLICA): the committed ISR
                        // stands.
                        Err(AlterPartitionError::Ineligible) => {
                            l.pending_isr = None;
                            l.resend_pending = false;
                            l.retry_after_ms = now_ms.saturating_add(ALTER_PARTITION_RETRY_MS);
                        }
                        // Outcome unknown (lost answer, timeout, no controller): it may have been
                        // committed, so it keeps counting; send the same change again.
                        Err(AlterPartitionError::Retriable) => {
                            l.resend_pending = l.pending_isr.is_some();
                            l.retry_after_ms = now_ms.saturating_add(ALTER_PARTITION_RETRY_MS);
                        }
                    }
                }
            }
            Event::Ineligible { replicas } => {
                if let Role::Leader(l) = &mut self.role {
                    for r in replicas {
                        if let Some(f) = l.followers.get_mut(&r) {
                            f.eligible = false;
                        }
                    }
                }
                return actions;
            }
            Event::Tick { now_ms } => {
                self.maybe_resend(now_ms, &mut actions);
                self.maybe_shrink_isr(now_ms, &mut actions);
                self.maybe_expand_isr(now_ms, &mut actions);
            }
            Event::Truncated { log_end_offset } => {
                self.high_watermark = self.high_watermark.min(log_end_offset);
                if let Role::Leader(l) = &mut self.role {
                    l.durable_end_offset = l.durable_end_offset.min(log_end_offset);
                }
                return actions;
            }
            Event::LeaderHighWatermark {
                leader_high_watermark,
                log_end_offset,
            } => {
                if matches!(self.role, Role::Follower { .. }) {
                    let hw = leader_high_watermark.min(log_end_offset);
                    if hw > self.high_watermark {
                        self.high_watermark = hw;
                        actions.push(Action::SetHighWatermark(hw));
                    }
                }
                return actions;
            }
        }
        self.maybe_advance_high_watermark(&mut actions);
        actions
    }

    fn on_metadata(
        &mut self,
        state: PartitionState,
        log_end_offset: i64,
        durable_end_offset: i64,
        high_watermark: i64,
        now_ms: i64,
    ) {
        self.high_watermark = self.high_watermark.max(high_watermark.min(log_end_offset));
        if state.leader != self.local_id {
            self.role = if state.replicas.contains(&self.local_id) {
                Role::Follower {
                    leader: state.leader,
                    leader_epoch: state.leader_epoch,
                }
            } else {
                Role::None
            };
            return;
        }
        match &mut self.role {
            Role::Leader(l) if l.state.leader_epoch == state.leader_epoch => {
                // Same epoch: the ISR or replicas moved. Take the newer state.
                if state.partition_epoch > l.state.partition_epoch {
                    // Whether it is ours or not, a committed change settles the one in flight.
                    l.pending_isr = None;
                    l.resend_pending = false;
                    for &r in &state.replicas {
                        if r != self.local_id {
                            l.followers
                                .entry(r)
                                .or_insert_with(|| FollowerState::unknown(0));
                        }
                    }
                    l.followers.retain(|r, _| state.replicas.contains(r));
                    count_isr_change(&l.state.isr, &state.isr);
                    l.state = state;
                }
            }
            _ => {
                // A new leader epoch: start it at our log end, forget every follower's progress.
                let followers = state
                    .replicas
                    .iter()
                    .filter(|&&r| r != self.local_id)
                    .map(|&r| {
                        let caught_up = if state.isr.contains(&r) { now_ms } else { 0 };
                        (r, FollowerState::unknown(caught_up))
                    })
                    .collect();
                millrace_metrics::global().leader_elections.inc();
                self.role = Role::Leader(LeaderState {
                    state,
                    epoch_start_offset: log_end_offset,
                    durable_end_offset,
                    followers,
                    pending_isr: None,
                    resend_pending: false,
                    retry_after_ms: 0,
                });
            }
        }
    }

    /// The maximal ISR: committed plus a pending expansion.
    fn maximal_isr(l: &LeaderState) -> Vec<i32> {
        let mut isr = l.state.isr.clone();
        if let Some(p) = &l.pending_isr {
            for &b in p {
                if !isr.contains(&b) {
                    isr.push(b);
                }
            }
        }
        isr
    }

    fn maybe_advance_high_watermark(&mut self, actions: &mut Vec<Action>) {
        let Role::Leader(l) = &self.role else {
            return;
        };
        if l.state.isr.len() < self.config.min_insync_replicas {
            return;
        }
        let mut hw = l.durable_end_offset;
        for b in Self::maximal_isr(l) {
            if b == self.local_id {
                continue;
            }
            let leo = l
                .followers
                .get(&b)
                .map_or(UNKNOWN_OFFSET, |f| f.log_end_offset);
            hw = hw.min(leo);
        }
        if hw > self.high_watermark {
            self.high_watermark = hw;
            actions.push(Action::SetHighWatermark(hw));
        }
    }

    /// Sends a change whose outcome is unknown again, once the retry time has come.
    fn maybe_resend(&mut self, now_ms: i64, actions: &mut Vec<Action>) {
        let local_id = self.local_id;
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        if !l.resend_pending || now_ms < l.retry_after_ms {
            return;
        }
        l.resend_pending = false;
        if let Some(isr) = l.pending_isr.clone() {
            Self::propose(local_id, l, isr, actions);
        }
    }

    fn maybe_expand_isr(&mut self, now_ms: i64, actions: &mut Vec<Action>) {
        let hw = self.high_watermark;
        let lag = self.config.replica_lag_time_max_ms;
        let local_id = self.local_id;
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        if l.pending_isr.is_some() || now_ms < l.retry_after_ms {
            return;
        }
        let maximal = Self::maximal_isr(l);
        let joining: Vec<i32> = l
            .followers
            .iter()
            .filter(|(b, f)| {
                !maximal.contains(b)
                    && f.eligible
                    && f.log_end_offset != UNKNOWN_OFFSET
                    && f.log_end_offset >= hw
                    && f.log_end_offset >= l.epoch_start_offset
                    // What the shrink rule would remove at once (a follower that stopped
                    // fetching, known only from stale state) is not proposed: no flapping.
                    && now_ms.saturating_sub(f.last_caught_up_ms) <= lag
            })
            .map(|(b, _)| *b)
            .collect();
        if joining.is_empty() {
            return;
        }
        let mut isr = l.state.isr.clone();
        isr.extend(joining);
        Self::propose(local_id, l, isr, actions);
    }

    fn maybe_shrink_isr(&mut self, now_ms: i64, actions: &mut Vec<Action>) {
        let lag = self.config.replica_lag_time_max_ms;
        let local_id = self.local_id;
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        if l.pending_isr.is_some() || now_ms < l.retry_after_ms {
            return;
        }
        let out: Vec<i32> = l
            .state
            .isr
            .iter()
            .copied()
            .filter(|&b| b != local_id)
            .filter(|b| {
                l.followers
                    .get(b)
                    .is_none_or(|f| now_ms.saturating_sub(f.last_caught_up_ms) > lag)
            })
            .collect();
        if out.is_empty() {
            return;
        }
        let isr: Vec<i32> = l
            .state
            .isr
            .iter()
            .copied()
            .filter(|b| !out.contains(b))
            .collect();
        Self::propose(local_id, l, isr, actions);
    }

    fn propose(local_id: i32, l: &mut LeaderState, isr: Vec<i32>, actions: &mut Vec<Action>) {
        let with_epochs = isr
            .iter()
            .map(|&b| {
                let epoch = if b == local_id {
                    -1
                } else {
                    l.followers.get(&b).map_or(-1, |f| f.broker_epoch)
                };
                (b, epoch)
            })
            .collect();
        l.pending_isr = Some(isr);
        actions.push(Action::AlterPartition {
            leader_epoch: l.state.leader_epoch,
            partition_epoch: l.state.partition_epoch,
            isr: with_epochs,
        });
    }
}

/// Kafka's IsrShrinksPerSec / IsrExpandsPerSec: one committed ISR change of a partition led here.
fn count_isr_change(before: &[i32], after: &[i32]) {
    let metrics = millrace_metrics::global();
    if after.len() < before.len() {
        metrics.isr_shrinks.inc();
    } else if after.len() > before.len() {
        metrics.isr_expands.inc();
    }
}

#[cfg(test)]
mod tests;
