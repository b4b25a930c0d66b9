//! The Kafka APIs Millrace serves: [`APIS`], one registration line per API, each naming the
//! [`ApiHandler`] impl in the API's module. The line's position is the API's place in the
//! ApiVersions answer ([`crate::versions::ADVERTISED`] is derived from this table).
//!
//! [`crate::dispatch`] finds a request's entry here by API key; a key without an entry closes the
//! connection. Everything an entry says comes from the impl's consts, so an API's key and
//! versions are written once, in its module.
//!
//! Adding an API: a module under `api/` with a unit struct implementing [`ApiHandler`], and its
//! line here.

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use crate::api::{
    acls, alter_configs, alter_partition_reassignments, alter_replica_log_dirs,
    alter_share_group_offsets, api_versions, client_quotas, consumer_group_describe,
    consumer_group_heartbeat, create_partitions, create_topics, delete_groups, delete_records,
    delete_share_group_offsets, delete_topics, describe_cluster, describe_configs, describe_groups,
    describe_log_dirs, describe_producers, describe_quorum, describe_share_group_offsets,
    describe_topic_partitions, elect_leaders, fetch, find_coordinator, heartbeat, init_producer_id,
    join_group, leave_group, list_config_resources, list_groups, list_offsets,
    list_partition_reassignments, metadata, offset_commit, offset_delete, offset_fetch,
    offset_for_leader_epoch, produce, sasl, share_acknowledge, share_fetch, share_group_describe,
    share_group_heartbeat, share_group_state, sync_group, transactions, txn_offset_commit,
    unregister_broker, user_scram_credentials, write_txn_markers,
};
use crate::handler::{ApiHandler, Call};
use crate::respond::{self, Pending, RequestCharge, Route};

/// Decodes a request's body, handles it and starts its response (`respond::serve::<H>`).
pub(crate) type Serve =
    for<'a> fn(Call<'a>, Bytes, Route, Option<&RequestCharge>) -> Result<Pending, String>;

/// One served API: what its [`ApiHandler`] impl declares, and the function that serves it.
#[derive(Clone, Copy)]
pub struct ApiEntry {
    /// [`ApiHandler::KEY`].
    pub key: ApiKey,
    /// The lowest advertised version ([`ApiHandler::VERSIONS`]).
    pub min: i16,
    /// The highest advertised version ([`ApiHandler::VERSIONS`]).
    pub max: i16,
    /// [`ApiHandler::SERVED_MIN`].
    pub served_min: i16,
    /// [`ApiHandler::BEFORE_AUTHENTICATION`].
    pub before_authentication: bool,
    /// [`ApiHandler::REQUEST_QUOTA_EXEMPT`].
    pub request_quota_exempt: bool,
    pub(crate) serve: Serve,
}

impl std::fmt::Debug for ApiEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiEntry")
            .field("key", &self.key)
            .field("min", &self.min)
            .field("max", &self.max)
            .field("served_min", &self.served_min)
            .finish_non_exhaustive()
    }
}

/// The entry of the API `H` implements.
const fn api<H: ApiHandler>() -> ApiEntry {
    ApiEntry {
        key: H::KEY,
        min: *H::VERSIONS.start(),
        max: *H::VERSIONS.end(),
        served_min: H::SERVED_MIN,
        before_authentication: H::BEFORE_AUTHENTICATION,
        request_quota_exempt: H::REQUEST_QUOTA_EXEMPT,
        serve: respond::serve::<H>,
    }
}

/// Every API Millrace answers, in the order ApiVersions lists them.
pub const APIS: &[ApiEntry] = &[
    api::<produce::Produce>(),
    api::<fetch::Fetch>(),
    api::<list_offsets::ListOffsets>(),
    api::<metadata::Metadata>(),
    api::<find_coordinator::FindCoordinator>(),
    api::<api_versions::ApiVersions>(),
    api::<sasl::SaslHandshake>(),
    api::<sasl::SaslAuthenticate>(),
    api::<user_scram_credentials::DescribeUserScramCredentials>(),
    api::<user_scram_credentials::AlterUserScramCredentials>(),
    api::<client_quotas::DescribeClientQuotas>(),
    api::<client_quotas::AlterClientQuotas>(),
    api::<acls::DescribeAcls>(),
    api::<acls::CreateAcls>(),
    api::<acls::DeleteAcls>(),
    api::<create_topics::CreateTopics>(),
    api::<delete_topics::DeleteTopics>(),
    api::<create_partitions::CreatePartitions>(),
    api::<elect_leaders::ElectLeaders>(),
    api::<alter_partition_reassignments::AlterPartitionReassignments>(),
    api::<list_partition_reassignments::ListPartitionReassignments>(),
    api::<init_producer_id::InitProducerId>(),
    api::<describe_configs::DescribeConfigs>(),
    api::<list_config_resources::ListConfigResources>(),
    api::<alter_configs::AlterConfigs>(),
    api::<alter_configs::IncrementalAlterConfigs>(),
    api::<delete_records::DeleteRecords>(),
    api::<offset_for_leader_epoch::OffsetForLeaderEpoch>(),
    api::<describe_log_dirs::DescribeLogDirs>(),
    api::<alter_replica_log_dirs::AlterReplicaLogDirs>(),
    api::<describe_producers::DescribeProducers>(),
    api::<transactions::AddPartitionsToTxn>(),
    api::<transactions::AddOffsetsToTxn>(),
    api::<txn_offset_commit::TxnOffsetCommit>(),
    api::<transactions::EndTxn>(),
    api::<write_txn_markers::WriteTxnMarkers>(),
    api::<transactions::DescribeTransactions>(),
    api::<transactions::ListTransactions>(),
    api::<describe_topic_partitions::DescribeTopicPartitions>(),
    api::<describe_cluster::DescribeCluster>(),
    api::<describe_quorum::DescribeQuorum>(),
    api::<unregister_broker::UnregisterBroker>(),
    api::<offset_commit::OffsetCommit>(),
    api::<offset_fetch::OffsetFetch>(),
    api::<join_group::JoinGroup>(),
    api::<heartbeat::Heartbeat>(),
    api::<leave_group::LeaveGroup>(),
    api::<sync_group::SyncGroup>(),
    api::<describe_groups::DescribeGroups>(),
    api::<list_groups::ListGroups>(),
    api::<delete_groups::DeleteGroups>(),
    api::<offset_delete::OffsetDelete>(),
    api::<consumer_group_heartbeat::ConsumerGroupHeartbeat>(),
    api::<consumer_group_describe::ConsumerGroupDescribe>(),
    api::<share_group_heartbeat::ShareGroupHeartbeat>(),
    api::<share_group_describe::ShareGroupDescribe>(),
    api::<share_fetch::ShareFetch>(),
    api::<share_acknowledge::ShareAcknowledge>(),
    api::<share_group_state::InitializeShareGroupState>(),
    api::<share_group_state::ReadShareGroupState>(),
    api::<share_group_state::WriteShareGroupState>(),
    api::<share_group_state::DeleteShareGroupState>(),
    api::<share_group_state::ReadShareGroupStateSummary>(),
    api::<describe_share_group_offsets::DescribeShareGroupOffsets>(),
    api::<alter_share_group_offsets::AlterShareGroupOffsets>(),
    api::<delete_share_group_offsets::DeleteShareGroupOffsets>(),
];

/// The entry of `key`, if it is served at all.
pub fn find(key: ApiKey) -> Option<&'static ApiEntry> {
    APIS.iter().find(|api| api.key == key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_is_registered_once() {
        for (i, api) in APIS.iter().enumerate() {
            assert!(
                APIS.iter().skip(i + 1).all(|other| other.key != api.key),
                "{:?} is registered twice",
                api.key
            );
        }
    }

    #[test]
    fn served_versions_are_advertised() {
        for api in APIS {
            assert!(
                api.min <= api.served_min && api.served_min <= api.max,
                "{api:?}"
            );
        }
    }
}
