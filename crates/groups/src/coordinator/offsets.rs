//! Committed offsets, Kafka's `OffsetMetadataManager`: OffsetCommit, TxnOffsetCommit and the
//! transaction markers that end it ([`GroupCoordinator::complete_txn`]), OffsetFetch and
//! OffsetDelete.
//!
//! A commit is validated against the group (classic generation or consumer member epoch),
//! appended as offset records under the shard lock, applied to the group, and answered once the
//! records are committed. A transactional commit stays pending in the shard's
//! [`crate::txn_offsets::TxnOffsets`] until its producer's marker commits or aborts it.
//! Every commit is bounded by `COMMIT_PARTITIONS_MAX` partitions and each partition's metadata
//! by `OFFSET_METADATA_BYTES_MAX`.
//!
//! Not here: offset expiry (`timers.rs`), the tombstones of a deleted group (`admin.rs`).

use std::collections::BTreeMap;

use super::shard::GroupEntry;
use super::share::not_a_consumer_group;
use super::{now_ms, CommitRequest, Committed, FetchTopics, FetchedOffset, GroupCoordinator};
use crate::error::GroupError;
use crate::group::{CommittedOffset, Group, GroupState};
use crate::limits::{COMMIT_PARTITIONS_MAX, OFFSET_METADATA_BYTES_MAX};
use crate::records::{self, OffsetValue, RecordKey};
use crate::reply::{ready, Reply};

impl GroupCoordinator {
    /// OffsetCommit: one result per partition, in request order, answered once committed.
    pub fn commit_offsets(&self, req: CommitRequest) -> Reply<Vec<Result<(), GroupError>>> {
        self.commit(req, None)
    }

    /// TxnOffsetCommit: as `commit_offsets`, but written in a transactional batch of producer
    /// `producer_id`/`producer_epoch` and pending until the transaction's marker
    /// (`complete_txn`).
    pub fn commit_txn_offsets(
        &self,
        req: CommitRequest,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Reply<Vec<Result<(), GroupError>>> {
        self.commit(req, Some((producer_id, producer_epoch)))
    }

    /// A transaction marker of `producer_id` was committed on `__consumer_offsets` partition
    /// `partition`: its pending offsets there become committed (`commit`) or are dropped.
    pub fn complete_txn(&self, partition: i32, producer_id: i64, commit: bool) {
        let Some(shard) = usize::try_from(partition)
            .ok()
            .and_then(|i| self.shards.get(i))
        else {
            return;
        };
        let mut shard = shard.lock();
        if shard.leadership.loaded().is_none() {
            return;
        }
        let now = now_ms();
        let config = &self.config.group;
        for ((group, topic, p), value) in shard.txn.complete(producer_id, commit) {
            shard
                .groups
                .entry(group.clone())
                .or_insert_with(|| GroupEntry::new(Group::new(&group, config, now)))
                .group
                .offsets
                .insert((topic, p), value);
        }
        shard.dirty = true;
    }

    fn commit(
        &self,
        req: CommitRequest,
        producer: Option<(i64, i16)>,
    ) -> Reply<Vec<Result<(), GroupError>>> {
        let count = req.partitions.len();
        let all = move |e: GroupError| -> Reply<Vec<Result<(), GroupError>>> {
            ready(vec![Err(e); count])
        };
        if count > COMMIT_PARTITIONS_MAX {
            return all(GroupError::InvalidRequest(format!(
                "OffsetCommit carries more than {COMMIT_PARTITIONS_MAX} partitions"
            )));
        }
        let now = now_ms();
        let mut shard = match self.loaded_shard(&req.group_id) {
            Ok(s) => s,
            Err(e) => return all(e),
        };
        let config = self.config.group.clone();
        if !shard.groups.contains_key(&req.group_id) {
            // Kafka: a generation < 0 creates a "simple" group; otherwise the group must exist
            // (the front end answers ILLEGAL_GENERATION to versions before 9).
            if req.generation_id >= 0 {
                return all(GroupError::GroupIdNotFound);
            }
            shard.groups.insert(
                req.group_id.clone(),
                GroupEntry::new(Group::new(&req.group_id, &config, now)),
            );
        }
        let Some(entry) = shard.groups.get_mut(&req.group_id) else {
            return all(GroupError::CoordinatorNotAvailable);
        };
        if entry.share.is_some() {
            // Kafka's `ShareGroup.validateOffsetCommit`.
            return all(not_a_consumer_group(&req.group_id));
        }
        let valid = match &entry.consumer {
            Some(consumer) => consumer.validate_commit(&req.member_id, req.generation_id),
            None => entry.group.validate_commit(
                req.generation_id,
                &req.member_id,
                req.group_instance_id.as_deref(),
                now,
            ),
        };
        // A transactional commit naming no member is not checked against the group (Kafka's
        // `validateTransactionalOffsetCommit`).
        let unchecked = producer.is_some() && req.member_id.is_empty() && req.generation_id < 0;
        if let Err(e) = valid.or_else(|e| if unchecked { Ok(()) } else { Err(e) }) {
            return all(e);
        }
        let mut results: Vec<Result<(), GroupError>> = Vec::with_capacity(count);
        let mut writes = Vec::new();
        let mut applied = Vec::new();
        for p in &req.partitions {
            let metadata = p.metadata.clone().unwrap_or_default();
            if metadata.len() > OFFSET_METADATA_BYTES_MAX {
                results.push(Err(GroupError::OffsetMetadataTooLarge));
                continue;
            }
            let value = OffsetValue {
                offset: p.offset,
                leader_epoch: p.leader_epoch,
                metadata,
                commit_timestamp_ms: now,
                expire_timestamp_ms: if req.retention_time_ms >= 0 {
                    now.saturating_add(req.retention_time_ms)
                } else {
                    -1
                },
            };
            let key = RecordKey::Offset {
                group: req.group_id.clone(),
                topic: p.topic.clone(),
                partition: p.partition,
            };
            writes.push((
                records::encode_key(&key),
                Some(records::encode_offset_value(&value)),
            ));
            applied.push(((p.topic.clone(), p.partition), value));
            results.push(Ok(()));
        }
        if writes.is_empty() {
            return ready(results);
        }
        let (first, committed) = match self.append_as(&mut shard, &writes, producer) {
            Ok(appended) => appended,
            Err(e) => return all(e),
        };
        for (i, ((topic, p), value)) in applied.iter().enumerate() {
            let key = (req.group_id.clone(), topic.clone(), *p);
            let record_offset = first.saturating_add(i64::try_from(i).unwrap_or(0));
            match producer {
                Some((producer_id, _)) => {
                    shard
                        .txn
                        .add_pending(producer_id, key, record_offset, value.clone())
                }
                None => shard.txn.note_plain(key, record_offset),
            }
        }
        if producer.is_none() {
            if let Some(entry) = shard.groups.get_mut(&req.group_id) {
                for (tp, value) in applied {
                    entry.group.offsets.insert(tp, value);
                }
            }
        }
        drop(shard);
        Box::pin(async move {
            match committed.await {
                Ok(()) => results,
                Err(e) => {
                    // Partitions refused on their own (metadata too large) keep their error, as
                    // in Kafka; the others get the append's.
                    let e = GroupError::from(e);
                    results
                        .into_iter()
                        .map(|r| r.and_then(|()| Err(e.clone())))
                        .collect()
                }
            }
        })
    }

    /// OffsetFetch for one group: per topic, per partition, the committed offset (`None` =
    /// nothing committed, which the front end answers as -1).
    #[allow(clippy::type_complexity)]
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        topics: FetchTopics,
    ) -> Result<Vec<(String, Vec<(i32, Option<CommittedOffset>)>)>, GroupError> {
        let fetched = self.fetch_offsets_as(group_id, None, -1, false, topics)?;
        Ok(fetched
            .into_iter()
            .map(|(topic, partitions)| {
                let partitions = partitions
                    .into_iter()
                    .map(|(p, o)| match o {
                        FetchedOffset::Stable(o) => (p, o),
                        FetchedOffset::Unstable => (p, None),
                    })
                    .collect();
                (topic, partitions)
            })
            .collect())
    }

    /// OffsetFetch, as the front end serves it. v9+ from a member of a consumer group
    /// (`member_id`, `member_epoch`): the member must be current (UNKNOWN_MEMBER_ID,
    /// STALE_MEMBER_EPOCH), as in Kafka. With `require_stable` a partition whose transactional
    /// offset is still pending answers [`FetchedOffset::Unstable`]; the check and the read are
    /// one look at the shard, so a marker landing in between cannot pass off the offset it
    /// replaces as stable.
    #[allow(clippy::type_complexity)]
    pub fn fetch_offsets_as(
        &self,
        group_id: &str,
        member_id: Option<&str>,
        member_epoch: i32,
        require_stable: bool,
        topics: FetchTopics,
    ) -> Result<Vec<(String, Vec<(i32, FetchedOffset)>)>, GroupError> {
        let shard = self.loaded_shard(group_id)?;
        if shard
            .groups
            .get(group_id)
            .is_some_and(|e| e.share.is_some())
        {
            // Kafka's `ShareGroup.validateOffsetFetch`.
            return Err(not_a_consumer_group(group_id));
        }
        if let Some(consumer) = shard.groups.get(group_id).and_then(|e| e.consumer.as_ref()) {
            consumer.validate_fetch(member_id, member_epoch)?;
        }
        let group = shard.groups.get(group_id).map(|e| &e.group);
        let stable_only = require_stable && shard.txn.any_pending();
        let answer = |topic: &str, p: i32, o: Option<&CommittedOffset>| {
            if stable_only && shard.txn.is_pending(group_id, topic, p) {
                FetchedOffset::Unstable
            } else {
                FetchedOffset::Stable(o.cloned())
            }
        };
        Ok(match topics {
            Some(topics) => topics
                .into_iter()
                .map(|(topic, partitions)| {
                    let found = partitions
                        .into_iter()
                        .map(|p| {
                            let o = group.and_then(|g| g.offsets.get(&(topic.clone(), p)));
                            (p, answer(&topic, p, o))
                        })
                        .collect();
                    (topic, found)
                })
                .collect(),
            None => {
                let mut by_topic: BTreeMap<String, Vec<(i32, FetchedOffset)>> = BTreeMap::new();
                if let Some(g) = group {
                    for ((topic, p), o) in &g.offsets {
                        by_topic
                            .entry(topic.clone())
                            .or_default()
                            .push((*p, answer(topic, *p, Some(o))));
                    }
                }
                by_topic.into_iter().collect()
            }
        })
    }

    /// OffsetDelete: per partition, NONE or GROUP_SUBSCRIBED_TO_TOPIC; group-level errors fail all.
    pub fn delete_offsets(
        &self,
        group_id: &str,
        partitions: Vec<(String, i32)>,
    ) -> Reply<Result<Vec<Result<(), GroupError>>, GroupError>> {
        let result = self.delete_offsets_now(group_id, &partitions);
        match result {
            Err(e) => ready(Err(e)),
            Ok((results, None)) => ready(Ok(results)),
            Ok((results, Some(committed))) => Box::pin(async move {
                match committed.await {
                    Ok(()) => Ok(results),
                    Err(e) => Err(e.into()),
                }
            }),
        }
    }

    #[allow(clippy::type_complexity)]
    fn delete_offsets_now(
        &self,
        group_id: &str,
        partitions: &[(String, i32)],
    ) -> Result<(Vec<Result<(), GroupError>>, Option<Committed>), GroupError> {
        let mut shard = self.loaded_shard(group_id)?;
        let entry = shard
            .groups
            .get(group_id)
            .ok_or(GroupError::GroupIdNotFound)?;
        if entry.share.is_some() {
            // Kafka's `ShareGroup.validateOffsetDelete`.
            return Err(not_a_consumer_group(group_id));
        }
        let g = &entry.group;
        let active_consumer = entry.active_consumer();
        let consumer = g.protocol_type() == Some("consumer") || active_consumer.is_some();
        match g.state() {
            GroupState::Dead => return Err(GroupError::GroupIdNotFound),
            GroupState::Empty => {}
            _ if !consumer => return Err(GroupError::NonEmptyGroup),
            _ => {}
        }
        let empty = g.state() == GroupState::Empty && active_consumer.is_none();
        let mut results = Vec::with_capacity(partitions.len());
        let mut tombstones = Vec::new();
        let mut removed = Vec::new();
        for (topic, partition) in partitions {
            let subscribed = match active_consumer {
                Some(c) => c.is_subscribed(topic),
                None => g.is_subscribed(topic),
            };
            if !empty && subscribed {
                results.push(Err(GroupError::GroupSubscribedToTopic));
                continue;
            }
            if g.offsets.contains_key(&(topic.clone(), *partition)) {
                tombstones.push((
                    records::encode_key(&RecordKey::Offset {
                        group: group_id.to_string(),
                        topic: topic.clone(),
                        partition: *partition,
                    }),
                    None,
                ));
                removed.push((topic.clone(), *partition));
            }
            results.push(Ok(()));
        }
        if tombstones.is_empty() {
            return Ok((results, None));
        }
        let committed = self.append(&mut shard, &tombstones)?;
        if let Some(entry) = shard.groups.get_mut(group_id) {
            for tp in removed {
                entry.group.offsets.remove(&tp);
            }
        }
        Ok((results, Some(committed)))
    }
}
