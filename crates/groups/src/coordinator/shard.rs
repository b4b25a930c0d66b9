//! The state of one `__consumer_offsets` partition on this broker, Kafka's coordinator shard:
//! [`Shard`] holds the partition's leadership as the coordinator acts on it ([`Leadership`],
//! reported as [`PartitionStatus`]), its groups ([`GroupEntry`]: the classic group with the
//! committed offsets, the KIP-848 consumer group or KIP-932 share group if it is one, and the
//! JoinGroup/SyncGroup requests parked on the group) and the offsets of transactions not yet ended there.
//!
//! Where it sits: the coordinator keeps one shard per partition behind its own mutex, and each
//! part of the coordinator (classic, consumer, offsets, admin, timers) steps a shard under that
//! lock. Locking: none here; whoever holds a `&mut Shard` holds its lock.
//!
//! Invariant: this module names nothing of the coordinator that owns it, so that the coordinator
//! and each of its parts can use these types without an import cycle.
//!
//! Not here: stepping the groups (the coordinator's parts), appends and replay (I/O).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use millrace_store::PartitionLog;
use tokio::sync::oneshot;

use crate::consumer_group::ConsumerGroup;
use crate::error::GroupError;
use crate::group::{Group, JoinResponse, SyncResponse};
use crate::share_group::ShareGroup;
use crate::txn_offsets::TxnOffsets;

/// Where a `__consumer_offsets` partition stands on this broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionStatus {
    /// Not led here (never was, or resigned): its groups get NOT_COORDINATOR.
    NotLeader,
    /// Led here in `leader_epoch`, replay running: COORDINATOR_LOAD_IN_PROGRESS.
    Loading { leader_epoch: i32 },
    /// Led here in `leader_epoch` and served.
    Loaded { leader_epoch: i32 },
    /// Led here in `leader_epoch`, but its replay failed: NOT_COORDINATOR until a newer epoch.
    Failed { leader_epoch: i32 },
}

/// One group id's state. A group is a classic group, or (with `consumer` set) a KIP-848
/// consumer group whose classic half stays Empty; either way `group` keeps the committed offsets.
/// Both halves are written to the log (and the snapshot) as Kafka's records. With `share` set it
/// is a KIP-932 share group: its classic half stays Empty and holds no offsets, and `consumer`
/// is never set beside it.
pub(super) struct GroupEntry {
    pub(super) group: Group,
    pub(super) consumer: Option<ConsumerGroup>,
    pub(super) share: Option<ShareGroup>,
    pub(super) joins: HashMap<String, oneshot::Sender<JoinResponse>>,
    pub(super) syncs: HashMap<String, oneshot::Sender<SyncResponse>>,
}

impl GroupEntry {
    pub(super) fn new(group: Group) -> Self {
        Self {
            group,
            consumer: None,
            share: None,
            joins: HashMap::new(),
            syncs: HashMap::new(),
        }
    }

    /// Whether any member (classic, consumer or share protocol) is in the group.
    pub(super) fn has_members(&self) -> bool {
        !self.group.is_empty()
            || self.consumer.as_ref().is_some_and(|c| !c.is_empty())
            || self.share.as_ref().is_some_and(|s| !s.is_empty())
    }

    /// A classic group with nothing in it at all (no member, offset, protocol or modern group):
    /// what a refused first request may leave behind, which any group type may take over.
    pub(super) fn is_bare(&self) -> bool {
        self.consumer.is_none()
            && self.share.is_none()
            && self.group.is_empty()
            && self.group.offsets.is_empty()
            && self.group.protocol_type().is_none()
    }

    /// A consumer group with members.
    pub(super) fn active_consumer(&self) -> Option<&ConsumerGroup> {
        self.consumer.as_ref().filter(|c| !c.is_empty())
    }
}

/// One leadership of a partition as this coordinator acts on it.
#[derive(Clone)]
pub(super) struct Led {
    pub(super) leader_epoch: i32,
    /// Which `become_leader` call this is (coordinator-wide counter): a replay, or a reply
    /// waiting on a record, acts only while the shard still holds the same load.
    pub(super) load_id: u64,
    pub(super) log: Arc<PartitionLog>,
}

pub(super) enum Leadership {
    NotLeader,
    Loading(Led),
    Loaded(Led),
    Failed { leader_epoch: i32 },
}

impl Leadership {
    /// The leader epoch this broker leads (or tried to lead) the partition in.
    pub(super) fn leader_epoch(&self) -> Option<i32> {
        match self {
            Leadership::NotLeader => None,
            Leadership::Loading(l) | Leadership::Loaded(l) => Some(l.leader_epoch),
            Leadership::Failed { leader_epoch } => Some(*leader_epoch),
        }
    }

    pub(super) fn status(&self) -> PartitionStatus {
        match self {
            Leadership::NotLeader => PartitionStatus::NotLeader,
            Leadership::Loading(l) => PartitionStatus::Loading {
                leader_epoch: l.leader_epoch,
            },
            Leadership::Loaded(l) => PartitionStatus::Loaded {
                leader_epoch: l.leader_epoch,
            },
            Leadership::Failed { leader_epoch } => PartitionStatus::Failed {
                leader_epoch: *leader_epoch,
            },
        }
    }

    pub(super) fn loaded(&self) -> Option<&Led> {
        match self {
            Leadership::Loaded(l) => Some(l),
            _ => None,
        }
    }
}

pub(super) struct Shard {
    pub(super) partition: i32,
    pub(super) leadership: Leadership,
    /// While not leading: the lowest leader epoch a `become_leader` must name to load (the epoch
    /// of the last resign, one above a failed load's).
    pub(super) epoch_floor: i32,
    /// Set by every change, cleared when the snapshot is written.
    pub(super) dirty: bool,
    pub(super) groups: BTreeMap<String, GroupEntry>,
    /// Offsets committed inside transactions not yet ended here.
    pub(super) txn: TxnOffsets,
}

impl Shard {
    /// Drops the groups and returns their parked responders (to answer NOT_COORDINATOR).
    pub(super) fn unload(&mut self) -> Parked {
        let mut parked = Parked::default();
        self.txn = TxnOffsets::default();
        for (_, mut entry) in std::mem::take(&mut self.groups) {
            parked.joins.extend(entry.joins.drain());
            parked.syncs.extend(entry.syncs.drain().map(|(_, tx)| tx));
        }
        self.dirty = false;
        parked
    }

    pub(super) fn load_id(&self) -> Option<u64> {
        match &self.leadership {
            Leadership::Loading(l) | Leadership::Loaded(l) => Some(l.load_id),
            _ => None,
        }
    }
}

/// Parked JoinGroup/SyncGroup responders taken out of unloaded groups.
#[derive(Default)]
pub(super) struct Parked {
    joins: Vec<(String, oneshot::Sender<JoinResponse>)>,
    syncs: Vec<oneshot::Sender<SyncResponse>>,
}

impl Parked {
    pub(super) fn answer(self, error: &GroupError) {
        for (member_id, tx) in self.joins {
            let _ = tx.send(JoinResponse::error(error.clone(), &member_id));
        }
        for tx in self.syncs {
            let _ = tx.send(SyncResponse::error(error.clone()));
        }
    }
}
