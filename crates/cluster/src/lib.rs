//! Cluster metadata for Millrace: the metadata image (brokers, topics, partitions, topic ids,
//! topic configs, cluster id) and the broker/topic configuration registry under Kafka's names.
//!
//! Where it sits: the front end asks this crate what exists and where it leads; the broker binary
//! builds a [`BrokerConfig`] from flags, files and the environment through [`config`].
//! The image is built by applying the metadata log's [`records`] (committed by the controller
//! quorum, `millrace-quorum`); the legacy single-node JSON file ([`metadata`]) is only read to
//! seed a new metadata log.
//!
//! **Invariant:** this crate never sees Kafka wire types (`kafka-protocol`).
//!
//! Types to read first: [`image::MetadataImage`], [`Cluster`], [`records::MetadataRecord`],
//! [`BrokerConfig`], [`TopicConfigs`].

pub mod acl;
pub mod config;
pub mod config_broker;
mod config_error;
pub mod config_group;
pub mod config_rest;
pub mod config_share;
pub mod config_tiered;
pub mod image;
pub mod limits;
pub mod listeners;
pub mod metadata;
pub mod quota;
pub mod records;
pub mod recover;
pub mod remote_log;
pub mod scram;
pub mod topic_name;

pub use config::{
    BrokerConfig, ConfigChange, ConfigEntry, ConfigError, ConfigOp, ConfigSource, ConfigSynonym,
    TopicConfigs,
};
pub use config_group::{GroupConfigs, GroupSettings, ShareAutoOffsetReset, ShareIsolationLevel};
pub use metadata::{ClusterMetadata, MetadataError, TopicMetadata};
pub use topic_name::validate_topic_name;

pub mod node;
pub use node::{BrokerEndpoint, Cluster};
