//! What ShareFetch (key 78) and ShareAcknowledge (key 79) have in common: the checks of their
//! group and member fields, the connection that holds their share sessions, and applying a
//! partition's acknowledgement batches to its share partition (KIP-932).
//!
//! An acknowledgement is all or nothing per partition (Kafka's `SharePartition.acknowledge`):
//! the first bad batch fails the partition and nothing of it changes. The member's group
//! membership is not checked, as in Kafka: the records' owner is.

use std::sync::Arc;

use millrace_cluster::acl::AclOperation;
use millrace_share::{AckBatch, AckType, ShareError};
use millrace_store::TopicPartition;
use uuid::Uuid;

use super::leadership::{self, LeaderHint};
use crate::authz::Authz;
use crate::error_codes::{
    INVALID_REQUEST, NONE, TOPIC_AUTHORIZATION_FAILED, UNKNOWN_SERVER_ERROR, UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
};
use crate::session::Session;
use crate::share_partitions::{ShareConnection, ShareKey};
use crate::share_session::{MemberKey, SharePartitionId};
use crate::BrokerContext;

/// Kafka's INVALID_RECORD_STATE.
pub const INVALID_RECORD_STATE: i16 = 121;
/// Kafka's SHARE_SESSION_NOT_FOUND.
pub const SHARE_SESSION_NOT_FOUND: i16 = 122;
/// Kafka's INVALID_SHARE_SESSION_EPOCH.
pub const INVALID_SHARE_SESSION_EPOCH: i16 = 123;
/// Kafka's SHARE_SESSION_LIMIT_REACHED.
pub const SHARE_SESSION_LIMIT_REACHED: i16 = 133;

/// The answer's message while share groups are off (`millrace.share.groups.enable`).
pub const DISABLED_MESSAGE: &str =
    "Share groups are not enabled (millrace.share.groups.enable is false)";

/// The longest member id a share request may carry (Kafka: a UUID's 36 characters).
pub const MEMBER_ID_CHARS_MAX: usize = 36;

/// A partition-level answer: a code, a message, and where its leader is.
#[derive(Debug, Clone, Default)]
pub struct PartitionOutcome {
    pub code: i16,
    pub message: Option<String>,
    pub hint: Option<LeaderHint>,
}

impl PartitionOutcome {
    pub fn code(code: i16) -> Self {
        Self {
            code,
            ..Self::default()
        }
    }

    fn error(code: i16, message: impl Into<String>) -> Self {
        Self {
            code,
            message: Some(message.into()),
            hint: None,
        }
    }
}

/// The checks AlterShareGroupOffsets and DeleteShareGroupOffsets make before anything else, in
/// Kafka's order: share groups on, a group id, `operation` on the group, a persister. The
/// persister, or the code and message to refuse with.
pub fn share_offsets_admission(
    ctx: &BrokerContext,
    authz: &Authz,
    group_id: &str,
    operation: AclOperation,
) -> Result<Arc<crate::share_persister::Persister>, (i16, &'static str)> {
    if !ctx.shares.settings.enabled {
        return Err((crate::error_codes::UNSUPPORTED_VERSION, DISABLED_MESSAGE));
    }
    if group_id.is_empty() {
        return Err((
            crate::error_codes::INVALID_GROUP_ID,
            "The group id is invalid.",
        ));
    }
    if !authz.group(operation, group_id) {
        return Err((
            crate::error_codes::GROUP_AUTHORIZATION_FAILED,
            "Group authorization failed.",
        ));
    }
    ctx.shares.persister().cloned().ok_or((
        crate::error_codes::COORDINATOR_NOT_AVAILABLE,
        "Share state is not persisted here",
    ))
}

/// The member a request speaks for, or the top-level INVALID_REQUEST message: a group id, and
/// a member id of 1 to 36 characters.
pub fn member_key(
    group_id: Option<&str>,
    member_id: Option<&str>,
) -> Result<MemberKey, &'static str> {
    let group_id = group_id
        .filter(|g| !g.is_empty())
        .ok_or("Group id is required")?;
    let member_id = member_id
        .filter(|m| !m.is_empty() && m.chars().count() <= MEMBER_ID_CHARS_MAX)
        .ok_or("Invalid member id")?;
    Ok(MemberKey {
        group_id: Arc::from(group_id),
        member_id: Arc::from(member_id),
    })
}

/// The connection's share sessions' holder, made on its first share request.
pub fn connection<'a>(ctx: &Arc<BrokerContext>, session: &'a Session) -> &'a ShareConnection {
    session
        .share
        .get_or_init(|| ShareConnection::new(Arc::clone(&ctx.shares)))
}

/// The topic and partition `topic_id`/`partition` names, checked for READ, and the leader
/// epoch this broker leads it in.
pub fn led_partition(
    ctx: &BrokerContext,
    authz: &Authz,
    topic_id: Uuid,
    partition: i32,
) -> Result<
    (
        TopicPartition,
        Arc<millrace_replication::HostedPartition>,
        i32,
    ),
    PartitionOutcome,
> {
    let name = {
        let image = ctx.cluster.image();
        let topic = image
            .topic_by_id(topic_id)
            .ok_or(PartitionOutcome::code(UNKNOWN_TOPIC_ID))?;
        topic.name.to_string()
    };
    if !authz.topic(AclOperation::Read, &name) {
        return Err(PartitionOutcome::code(TOPIC_AUTHORIZATION_FAILED));
    }
    let tp = TopicPartition::new(&name, partition);
    let refuse = |r: leadership::Refusal| PartitionOutcome {
        code: r.error.code,
        message: r.error.message,
        hint: r.hint,
    };
    let hosted = leadership::leader_replica(ctx, &tp, -1).map_err(refuse)?;
    let epoch = hosted.check_leader(-1).map_err(|e| {
        refuse(leadership::refusal(
            ctx,
            &tp,
            &millrace_replication::ReplicaError::Partition(e),
        ))
    })?;
    Ok((tp, hosted, epoch))
}

/// One wire acknowledgement batch (first, last, type ids).
pub type WireAck<'a> = (i64, i64, &'a [i8]);

/// Applies `batches` of `member` to its share partition (topic id, partition) and waits for
/// the change to be written (persist before answering, as Kafka); the partition's
/// acknowledgement outcome. An empty list succeeds. A failed write answers the coordinator's
/// error and drops the share partition (see `ShareState::persist`).
pub async fn acknowledge(
    ctx: &BrokerContext,
    authz: &Authz,
    member: &MemberKey,
    (topic_id, partition): SharePartitionId,
    batches: &[WireAck<'_>],
    is_renew: bool,
    now_ms: i64,
) -> PartitionOutcome {
    if batches.is_empty() {
        return PartitionOutcome::code(NONE);
    }
    let (_, _, leader_epoch) = match led_partition(ctx, authz, topic_id, partition) {
        Ok(led) => led,
        Err(outcome) => return outcome,
    };
    let mut acks = Vec::with_capacity(batches.len());
    for (first, last, types) in batches {
        let Some(types) = types
            .iter()
            .map(|t| AckType::from_id(*t))
            .collect::<Option<Vec<_>>>()
        else {
            return PartitionOutcome::error(INVALID_REQUEST, "Invalid acknowledge type");
        };
        acks.push(AckBatch {
            first: *first,
            last: *last,
            types,
        });
    }
    let key = ShareKey {
        group_id: Arc::clone(&member.group_id),
        topic_id,
        partition,
    };
    let shares = &ctx.shares;
    match shares.with_partition(&key, leader_epoch, now_ms, |sp, epochs| {
        sp.acknowledge(&member.member_id, &acks, is_renew, now_ms)
            .map(|change| (change, epochs))
    }) {
        None => PartitionOutcome::code(UNKNOWN_TOPIC_OR_PARTITION),
        Some(Ok((change, epochs))) => {
            if !change.batches.is_empty() {
                // A release makes records available to the members waiting for some.
                shares.notify_released();
            }
            match shares.persist(&key, epochs, &change).await {
                Ok(()) => PartitionOutcome::code(NONE),
                Err(e) => PartitionOutcome::error(e.code, e.message),
            }
        }
        Some(Err(e)) => share_error(&e),
    }
}

/// A share partition's refusal as Kafka answers it.
pub fn share_error(e: &ShareError) -> PartitionOutcome {
    match e {
        ShareError::InvalidRequest(m) => PartitionOutcome::error(INVALID_REQUEST, m.clone()),
        ShareError::InvalidRecordState(m) => {
            PartitionOutcome::error(INVALID_RECORD_STATE, m.clone())
        }
        other => {
            tracing::warn!(error = %other, "share partition failed");
            PartitionOutcome::error(UNKNOWN_SERVER_ERROR, other.to_string())
        }
    }
}
