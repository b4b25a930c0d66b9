//! Metadata records: the entries of the metadata log (Kafka's `metadata` record types, in our own
//! encoding). The active controller decides which records to write; the quorum commits them; every
//! node applies the committed records, in log order, to its [`crate::image::MetadataImage`].
//!
//! One log entry carries a [`MetadataBatch`]: the records of one controller decision, applied
//! atomically (a CreateTopics is its topic record plus one record per partition). A decision too
//! large for one entry spans several, opened by [`MetadataRecord::BeginTransaction`] and closed by
//! [`MetadataRecord::EndTransaction`] (Kafka's KIP-868 metadata transactions): its records take
//! effect together, at the offset of the entry that ends it, or not at all
//! ([`MetadataRecord::AbortTransaction`]).
//!
//! A partition's replica state, [`PartitionRegistration`], is defined here with the records: it is
//! the payload of the `Partition` record, and [`PartitionRegistration::apply_change`] is what a
//! `PartitionChange` record does to it (the other side of [`PartitionChangeBuilder`]). The image
//! holds one per partition and re-exports it (`image::PartitionRegistration`).
//!
//! **Invariant:** applying a batch is deterministic: it reads nothing but the image and the
//! entry's log offset, so every node that applies the same log holds the same image.
//!
//! Encoding: JSON (serde). Metadata is small and rare next to data; a readable log is worth more
//! than the bytes. The format is versioned by [`MetadataBatch::version`].

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::config::TopicConfigs;

/// Version of the batch encoding this build writes and reads.
pub const METADATA_BATCH_VERSION: u16 = 1;

/// Bytes: the largest encoded batch a node accepts (a CreateTopics of the largest allowed topic is
/// about 1 MB; the quorum has its own, larger frame bound).
pub const METADATA_BATCH_BYTES_MAX: usize = 16 * 1024 * 1024;

/// A metadata structure that serde could not encode (a map key it cannot write, say): a bug,
/// reported instead of encoding nothing.
#[derive(Debug, thiserror::Error)]
#[error("cannot encode metadata: {0}")]
pub struct EncodeError(#[from] serde_json::Error);

/// The records of one controller decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetadataBatch {
    pub version: u16,
    pub records: Vec<MetadataRecord>,
}

impl MetadataBatch {
    pub fn new(records: Vec<MetadataRecord>) -> Self {
        Self {
            version: METADATA_BATCH_VERSION,
            records,
        }
    }

    /// Encodes the batch for the metadata log. An error is never an empty entry: the caller
    /// refuses the decision instead.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        Ok(serde_json::to_vec(self)?)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() > METADATA_BATCH_BYTES_MAX {
            return Err(format!(
                "metadata batch of {} bytes exceeds {METADATA_BATCH_BYTES_MAX}",
                bytes.len()
            ));
        }
        let batch: MetadataBatch = serde_json::from_slice(bytes)
            .map_err(|e| format!("undecodable metadata batch: {e}"))?;
        if batch.version != METADATA_BATCH_VERSION {
            return Err(format!(
                "metadata batch version {} is not {METADATA_BATCH_VERSION}",
                batch.version
            ));
        }
        Ok(batch)
    }
}

/// One metadata record (Kafka's record of the same name in brackets).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum MetadataRecord {
    /// The cluster's identity, written once by the first active controller (what Kafka's
    /// `kafka-storage format` fixes on disk).
    Bootstrap { cluster_id: String },
    /// \[RegisterBrokerRecord\] A broker (re)registers. Its broker epoch is the log offset of the
    /// entry holding this record; it starts fenced.
    RegisterBroker {
        node_id: i32,
        incarnation_id: Uuid,
        host: String,
        port: u16,
        rack: Option<String>,
        /// Whether the broker's previous run ended with a clean shutdown (KIP-966: an unclean
        /// restart removes the broker from every ELR).
        clean_shutdown: bool,
        /// Every listener clients may reach the broker on (Kafka's endpoints); `host`/`port`
        /// above are the inter-broker one. Empty in records written before listeners were
        /// registered: that broker serves `host`/`port` under every listener name.
        #[serde(default)]
        listeners: Vec<crate::listeners::ListenerAddress>,
    },
    /// \[UserScramCredentialRecord\] A user's credential for one mechanism, added or replaced.
    UserScramCredential {
        name: String,
        credential: crate::scram::ScramCredential,
    },
    /// \[RemoveUserScramCredentialRecord\]
    RemoveUserScramCredential {
        name: String,
        mechanism: crate::scram::ScramMechanism,
    },
    /// \[AccessControlEntryRecord\] An ACL added (a no-op when it exists).
    AccessControlEntry { acl: crate::acl::StandardAcl },
    /// \[RemoveAccessControlEntryRecord\]
    RemoveAccessControlEntry { acl: crate::acl::StandardAcl },
    /// \[ClientQuotaRecord\] One quota key of an entity set (`Some`) or removed (`None`).
    ClientQuota {
        entity: crate::quota::QuotaEntity,
        key: String,
        value: Option<f64>,
    },
    /// \[FenceBrokerRecord\] The broker's session expired or it finished a controlled shutdown.
    FenceBroker { node_id: i32, broker_epoch: i64 },
    /// \[UnfenceBrokerRecord\] The broker caught up with the metadata log.
    UnfenceBroker { node_id: i32, broker_epoch: i64 },
    /// \[BrokerRegistrationChangeRecord\] The broker asked for a controlled shutdown (KIP-841: it
    /// may not join an ISR or be elected from now on).
    BeginControlledShutdown { node_id: i32, broker_epoch: i64 },
    /// \[UnregisterBrokerRecord\]
    UnregisterBroker { node_id: i32, broker_epoch: i64 },
    /// \[TopicRecord\] + its \[ConfigRecord\]s.
    Topic {
        name: String,
        topic_id: Uuid,
        configs: TopicConfigs,
    },
    /// \[PartitionRecord\] A partition's whole registration (new partition).
    Partition {
        topic_id: Uuid,
        partition: i32,
        registration: PartitionRegistration,
    },
    /// \[PartitionChangeRecord\] Fields that change; `None` = unchanged. Every change raises the
    /// partition epoch; a change of leader (or `bump_leader_epoch`) raises the leader epoch.
    PartitionChange {
        topic_id: Uuid,
        partition: i32,
        #[serde(default)]
        leader: Option<i32>,
        #[serde(default)]
        isr: Option<Vec<i32>>,
        #[serde(default)]
        elr: Option<Vec<i32>>,
        #[serde(default)]
        last_known_elr: Option<Vec<i32>>,
        #[serde(default)]
        replicas: Option<Vec<i32>>,
        #[serde(default)]
        adding_replicas: Option<Vec<i32>>,
        #[serde(default)]
        removing_replicas: Option<Vec<i32>>,
        #[serde(default)]
        bump_leader_epoch: bool,
    },
    /// \[RemoveTopicRecord\]
    RemoveTopic { topic_id: Uuid },
    /// \[ConfigRecord\]s of one topic, replaced as a whole.
    TopicConfigs {
        topic_id: Uuid,
        configs: TopicConfigs,
    },
    /// \[ProducerIdsRecord\] The next producer id not yet handed out in a block.
    ProducerIds { next_producer_id: i64 },
    /// \[ConfigRecord\]s of one GROUP resource, replaced as a whole; empty removes them. A
    /// group's configs need not name an existing group (Kafka allows configs first).
    GroupConfigs {
        group_id: String,
        configs: crate::config_group::GroupConfigs,
    },
    /// \[ConfigRecord\]s of one BROKER resource, replaced as a whole; empty removes them.
    /// `broker` `None` is the cluster-wide default (Kafka's resource name ""). Checked by the
    /// controller (`config_broker::check`).
    BrokerConfigs {
        broker: Option<i32>,
        configs: std::collections::BTreeMap<String, String>,
    },
    /// \[RemoteLogSegmentMetadataRecord, COPY_SEGMENT_FINISHED\] A tiered partition's leader
    /// uploaded a segment and the controller accepted it (decision 0073): from this entry on the
    /// segment is part of the remote log, readable and counted by retention.
    RemoteSegmentCommitted {
        topic_id: Uuid,
        partition: i32,
        segment: crate::remote_log::RemoteSegment,
    },
    /// \[RemoteLogSegmentMetadataUpdateRecord, DELETE_SEGMENT_STARTED\] Total retention let go
    /// of the remote segments ending at or below `through_end_offset`; the leader deletes their
    /// objects after this commits (a crash in between leaves orphans, which it cleans later).
    RemoteSegmentsDeleted {
        topic_id: Uuid,
        partition: i32,
        through_end_offset: i64,
        log_start_offset: i64,
    },
    /// The remote objects of a deleted topic are gone (until then the image keeps the topic's
    /// name in `remote_purges`, so some broker deletes them).
    RemoteTopicPurged { topic_id: Uuid },
    /// \[BeginTransactionRecord\] The records that follow, up to the matching `EndTransaction`, are
    /// one decision spread over several entries: nothing of it is applied until its end.
    BeginTransaction { name: String },
    /// \[EndTransactionRecord\] The open transaction's records take effect, all at this entry's
    /// offset.
    EndTransaction,
    /// \[AbortTransactionRecord\] The open transaction's records are dropped: the controller that
    /// began it lost its leadership (or its outcome) before ending it.
    AbortTransaction { reason: String },
}

impl MetadataRecord {
    /// The record's type, as Kafka names it without the `Record` suffix (log lines, transaction
    /// names).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Bootstrap { .. } => "Bootstrap",
            Self::RegisterBroker { .. } => "RegisterBroker",
            Self::UserScramCredential { .. } => "UserScramCredential",
            Self::RemoveUserScramCredential { .. } => "RemoveUserScramCredential",
            Self::AccessControlEntry { .. } => "AccessControlEntry",
            Self::RemoveAccessControlEntry { .. } => "RemoveAccessControlEntry",
            Self::ClientQuota { .. } => "ClientQuota",
            Self::FenceBroker { .. } => "FenceBroker",
            Self::UnfenceBroker { .. } => "UnfenceBroker",
            Self::BeginControlledShutdown { .. } => "BeginControlledShutdown",
            Self::UnregisterBroker { .. } => "UnregisterBroker",
            Self::Topic { .. } => "Topic",
            Self::Partition { .. } => "Partition",
            Self::PartitionChange { .. } => "PartitionChange",
            Self::RemoveTopic { .. } => "RemoveTopic",
            Self::TopicConfigs { .. } => "TopicConfigs",
            Self::ProducerIds { .. } => "ProducerIds",
            Self::GroupConfigs { .. } => "GroupConfigs",
            Self::BrokerConfigs { .. } => "BrokerConfigs",
            Self::RemoteSegmentCommitted { .. } => "RemoteSegmentCommitted",
            Self::RemoteSegmentsDeleted { .. } => "RemoteSegmentsDeleted",
            Self::RemoteTopicPurged { .. } => "RemoteTopicPurged",
            Self::BeginTransaction { .. } => "BeginTransaction",
            Self::EndTransaction => "EndTransaction",
            Self::AbortTransaction { .. } => "AbortTransaction",
        }
    }

    /// A partition change that only sets the given fields; build with struct update syntax.
    pub fn partition_change(topic_id: Uuid, partition: i32) -> PartitionChangeBuilder {
        PartitionChangeBuilder {
            topic_id,
            partition,
            leader: None,
            isr: None,
            elr: None,
            last_known_elr: None,
            replicas: None,
            adding_replicas: None,
            removing_replicas: None,
            bump_leader_epoch: false,
        }
    }
}

/// Builder for [`MetadataRecord::PartitionChange`].
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionChangeBuilder {
    pub topic_id: Uuid,
    pub partition: i32,
    pub leader: Option<i32>,
    pub isr: Option<Vec<i32>>,
    pub elr: Option<Vec<i32>>,
    pub last_known_elr: Option<Vec<i32>>,
    pub replicas: Option<Vec<i32>>,
    pub adding_replicas: Option<Vec<i32>>,
    pub removing_replicas: Option<Vec<i32>>,
    pub bump_leader_epoch: bool,
}

impl PartitionChangeBuilder {
    /// Whether the change would set anything.
    pub fn is_empty(&self) -> bool {
        self.leader.is_none()
            && self.isr.is_none()
            && self.elr.is_none()
            && self.last_known_elr.is_none()
            && self.replicas.is_none()
            && self.adding_replicas.is_none()
            && self.removing_replicas.is_none()
            && !self.bump_leader_epoch
    }

    pub fn build(self) -> MetadataRecord {
        MetadataRecord::PartitionChange {
            topic_id: self.topic_id,
            partition: self.partition,
            leader: self.leader,
            isr: self.isr,
            elr: self.elr,
            last_known_elr: self.last_known_elr,
            replicas: self.replicas,
            adding_replicas: self.adding_replicas,
            removing_replicas: self.removing_replicas,
            bump_leader_epoch: self.bump_leader_epoch,
        }
    }
}

/// "No leader" in a partition registration (Kafka's -1).
pub const NO_LEADER: i32 = -1;

/// One partition's replica state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRegistration {
    /// Assigned replicas, preferred leader first.
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// Eligible leader replicas (KIP-966): out of the ISR, but known to hold every committed record.
    #[serde(default)]
    pub elr: Vec<i32>,
    /// KIP-966: the replicas last in the ELR when it emptied (the "last known leader" fallback).
    #[serde(default)]
    pub last_known_elr: Vec<i32>,
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// Reassignment in progress: replicas being added / removed.
    #[serde(default)]
    pub adding_replicas: Vec<i32>,
    #[serde(default)]
    pub removing_replicas: Vec<i32>,
}

impl PartitionRegistration {
    /// A new partition: every replica in the ISR, the first one leads, epochs 0.
    pub fn new(replicas: Vec<i32>) -> Self {
        let leader = replicas.first().copied().unwrap_or(NO_LEADER);
        Self {
            isr: replicas.clone(),
            replicas,
            elr: Vec::new(),
            last_known_elr: Vec::new(),
            leader,
            leader_epoch: 0,
            partition_epoch: 0,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }
    }

    pub fn has_leader(&self) -> bool {
        self.leader != NO_LEADER
    }

    /// Applies a `PartitionChange` record (other records are ignored): set fields replace, every
    /// change raises the partition epoch, a new leader (or a forced bump) the leader epoch.
    pub fn apply_change(&mut self, record: &MetadataRecord) {
        let MetadataRecord::PartitionChange {
            leader,
            isr,
            elr,
            last_known_elr,
            replicas,
            adding_replicas,
            removing_replicas,
            bump_leader_epoch,
            ..
        } = record
        else {
            return;
        };
        let mut leader_changed = *bump_leader_epoch;
        if let Some(l) = leader {
            leader_changed |= *l != self.leader;
            self.leader = *l;
        }
        if let Some(v) = isr {
            self.isr = v.clone();
        }
        if let Some(v) = elr {
            self.elr = v.clone();
        }
        if let Some(v) = last_known_elr {
            self.last_known_elr = v.clone();
        }
        if let Some(v) = replicas {
            self.replicas = v.clone();
        }
        if let Some(v) = adding_replicas {
            self.adding_replicas = v.clone();
        }
        if let Some(v) = removing_replicas {
            self.removing_replicas = v.clone();
        }
        if leader_changed {
            self.leader_epoch = self.leader_epoch.saturating_add(1);
        }
        self.partition_epoch = self.partition_epoch.saturating_add(1);
    }

    /// The preferred leader: the first assigned replica.
    pub fn preferred_leader(&self) -> i32 {
        self.replicas.first().copied().unwrap_or(NO_LEADER)
    }
}

/// A Kafka-style cluster id: 16 random bytes in URL-safe base64 without padding (22 characters).
pub fn new_cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(22);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for b in Uuid::new_v4().into_bytes() {
        acc = (acc << 8) | u32::from(b);
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            out.push(char::from(ALPHABET[((acc >> bits) & 63) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((acc << (6 - bits)) & 63) as usize]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_round_trips_and_rejects_garbage() {
        let batch = MetadataBatch::new(vec![
            MetadataRecord::Bootstrap {
                cluster_id: "abc".into(),
            },
            MetadataRecord::partition_change(Uuid::nil(), 3)
                .clone_with_leader(2)
                .build(),
        ]);
        let bytes = batch.encode().expect("encodes");
        assert_eq!(MetadataBatch::decode(&bytes), Ok(batch));
        assert!(MetadataBatch::decode(b"{not json").is_err());
        assert!(MetadataBatch::decode(br#"{"version":99,"records":[]}"#).is_err());
    }

    impl PartitionChangeBuilder {
        fn clone_with_leader(mut self, leader: i32) -> Self {
            self.leader = Some(leader);
            self
        }
    }
}
