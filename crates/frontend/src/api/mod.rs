//! One module per Kafka API. Each implements [`crate::handler::ApiHandler`] (its key, versions and
//! handler, mostly through `api_handler!`, registered with one line in [`crate::registry`]) and
//! says where its response's error codes sit (`response_fields!`): it takes the decoded
//! request and the version, talks to `cluster`/`store`, and returns the response with only the
//! fields that exist in that version. Helper modules without an API of their own: `forward`
//! (admin requests to the controller) and `leadership` (where a partition request belongs).

pub mod acls;
pub mod alter_configs;
pub mod alter_partition_reassignments;
pub mod alter_replica_log_dirs;
pub mod alter_share_group_offsets;
pub mod api_versions;
pub mod client_quotas;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_share_group_offsets;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_quorum;
pub mod describe_share_group_offsets;
pub mod describe_topic_partitions;
pub mod elect_leaders;
pub mod fetch;
pub mod find_coordinator;
pub mod forward;
pub mod heartbeat;
pub mod init_producer_id;
pub mod join_group;
pub mod leadership;
pub mod leave_group;
pub mod list_config_resources;
pub mod list_groups;
pub mod list_offsets;
pub mod list_partition_reassignments;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod sasl;
pub mod share_acknowledge;
pub(crate) mod share_common;
pub mod share_fetch;
pub mod share_group_describe;
pub mod share_group_heartbeat;
pub mod share_group_state;
pub mod sync_group;
pub mod transactions;
pub mod txn_offset_commit;
pub mod unregister_broker;
pub mod user_scram_credentials;
pub mod write_txn_markers;

use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

pub(crate) fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub(crate) fn topic_name(s: &str) -> TopicName {
    TopicName(str_bytes(s))
}
