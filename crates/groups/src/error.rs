//! What the coordinator refuses, in Kafka's words. The front end maps each variant to its Kafka
//! error code in `frontend/src/error_codes.rs`; nothing here knows the numbers.

/// A refusal by the group coordinator or the group state machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// The group id is empty (or longer than a Kafka string).
    #[error("The group id is invalid.")]
    InvalidGroupId,
    /// The coordinator is still replaying its `__consumer_offsets` partition.
    #[error("The coordinator is loading and hence can't process requests.")]
    CoordinatorLoadInProgress,
    /// This broker does not lead the group's `__consumer_offsets` partition (never did, resigned,
    /// or its replay failed); the client must find the coordinator again.
    #[error("This is not the correct coordinator.")]
    NotCoordinator,
    /// The group is being removed, the coordinator is shutting down, or a write to
    /// `__consumer_offsets` could not commit (too few in-sync replicas, or not in time).
    #[error("The coordinator is not available.")]
    CoordinatorNotAvailable,
    /// The session timeout is outside group.min/max.session.timeout.ms.
    #[error("The session timeout is not within the range allowed by the broker (as configured by group.min.session.timeout.ms and group.max.session.timeout.ms).")]
    InvalidSessionTimeout,
    /// The generation in the request is not the group's.
    #[error("Specified group generation id is not valid.")]
    IllegalGeneration,
    /// The member id is not (or no longer) in the group.
    #[error("The coordinator is not aware of this member.")]
    UnknownMemberId,
    /// The protocol type differs from the group's, or no protocol is shared by all members.
    #[error("The group member's supported protocols are incompatible with those of existing members or first group member tried to join with empty protocol type or empty protocol list.")]
    InconsistentGroupProtocol,
    /// The group is rebalancing; the member must rejoin.
    #[error("The group is rebalancing, so a rejoin is needed.")]
    RebalanceInProgress,
    /// JoinGroup v4+ with an empty member id: rejoin with the id in the response.
    #[error("The group member needs to have a valid member id before actually entering a consumer group.")]
    MemberIdRequired,
    /// The group already has group.max.size members.
    #[error("The group has reached its maximum size.")]
    GroupMaxSizeReached,
    /// Another member with the same group.instance.id took over.
    #[error("The broker rejected this static consumer since another consumer with the same group.instance.id has registered with a different member.id.")]
    FencedInstanceId,
    /// The group does not exist (DeleteGroups, OffsetDelete).
    #[error("The group id does not exist.")]
    GroupIdNotFound,
    /// GROUP_ID_NOT_FOUND with Kafka's message saying why: the group is missing ("Share group X
    /// not found.") or is of another type ("Group X is not a share group.").
    #[error("{0}")]
    GroupIdNotFoundWith(String),
    /// The group has members (DeleteGroups, OffsetDelete on a non-consumer group).
    #[error("The group is not empty.")]
    NonEmptyGroup,
    /// The group is subscribed to the topic (OffsetDelete).
    #[error("The consumer group is actively subscribed to the topic.")]
    GroupSubscribedToTopic,
    /// Commit metadata longer than offset.metadata.max.bytes.
    #[error("The metadata field of the offset request was too large.")]
    OffsetMetadataTooLarge,
    /// ConsumerGroupHeartbeat: the member epoch is neither the member's current one nor (with the
    /// partitions it owns matching) the previous one; the member must rejoin with epoch 0.
    #[error("The member epoch is fenced by the group coordinator. The member must abandon all its partitions and rejoin.")]
    FencedMemberEpoch,
    /// OffsetCommit/OffsetFetch of a consumer-protocol member with an epoch other than its
    /// current one.
    #[error("The member epoch is stale. The member must retry after receiving its updated member epoch via the ConsumerGroupHeartbeat API.")]
    StaleMemberEpoch,
    /// A static member joins with the group.instance.id of a member that has not left.
    #[error("The instance ID is still used by another member in the consumer group. That member must leave first.")]
    UnreleasedInstanceId,
    /// The server assignor named is not one of group.consumer.assignors.
    #[error("The assignor or its version range is not supported by the consumer group.")]
    UnsupportedAssignor,
    /// A subscription regular expression that does not compile or is too long.
    #[error("{0}")]
    InvalidRegularExpression(String),
    /// The request breaks a limit or is self-contradictory.
    #[error("{0}")]
    InvalidRequest(String),
    /// Writing to `__consumer_offsets` failed or did not become durable.
    #[error("{0}")]
    Storage(String),
}
