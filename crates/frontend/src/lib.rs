//! Millrace's Kafka front end: the connection loop, request decoding with `kafka-protocol`, the one
//! table of served APIs ([`registry`], from which the advertised versions derive), one module per
//! API, and the one mapping from internal errors to Kafka error codes.
//!
//! Data flow: [`server::run`] accepts connections; [`connection`] cuts length-prefixed frames, each
//! paid for from the broker-wide [`request_memory`] budget, and keeps responses in request order; [`dispatch`] decodes the header, finds the API in
//! [`registry`] and checks the version against what its [`handler::ApiHandler`] impl declares;
//! [`respond`] decodes the body and calls the API module, which translates the request into calls
//! on [`millrace_cluster::Cluster`] and [`millrace_store`] and builds the response.
//!
//! **Invariant:** this crate holds no state beyond a connection, except the fetch sessions
//! ([`fetch_session`], KIP-227), which are a wire-protocol artifact; topics, logs, groups and
//! committed offsets live in `cluster`, `store` and `groups`, which never see a Kafka wire type.
//!
//! Types to read first: [`BrokerContext`], [`dispatch::dispatch`], [`handler::ApiHandler`],
//! [`registry::APIS`].

pub mod api;
pub mod authz;
pub mod blocking;
pub mod clock;
pub mod connection;
pub mod constant_time;
pub mod dispatch;
pub mod envelope;
pub mod error_codes;
pub mod fetch_session;
pub mod group_settings;
pub mod handler;
pub mod inproc;
pub mod inter_broker;
pub mod internal_topics;
pub mod limits;
pub mod principal;
pub mod quota;
pub mod read_buffer;
pub mod registry;
pub mod request_memory;
pub mod respond;
pub mod sasl;
pub mod scram;
pub mod server;
pub mod session;
pub mod share_coordinator;
pub mod share_partitions;
pub mod share_persister;
pub mod share_session;
pub mod splice;
pub mod testing;
pub mod tiered;
pub mod tls;
pub mod versions;

use std::sync::Arc;

use millrace_cluster::Cluster;
use millrace_controller::{ControllerClient, ProducerIdAllocator};
use millrace_groups::GroupCoordinator;
use millrace_replication::ReplicaManager;
use tokio_util::sync::CancellationToken;

/// Everything a request handler may touch. Shared by all connections.
pub struct BrokerContext {
    /// This node and the committed metadata image.
    pub cluster: Arc<Cluster>,
    /// The partition replicas hosted here: appends, reads, follower fetches.
    pub replicas: Arc<ReplicaManager>,
    /// The active controller, for admin requests.
    pub controller: Arc<ControllerClient>,
    /// Producer ids for InitProducerId.
    pub producer_ids: Arc<ProducerIdAllocator>,
    /// The data directory as DescribeLogDirs reports it.
    pub data_dir: String,
    /// Classic groups and committed offsets.
    pub groups: Arc<GroupCoordinator>,
    /// Transactional ids and their transactions.
    pub transactions: Arc<millrace_transactions::TransactionCoordinator>,
    /// Cancelled when the broker begins to shut down; long polls return early on it.
    pub shutdown: CancellationToken,
    /// Incremental fetch sessions (KIP-227).
    pub fetch_sessions: Arc<fetch_session::FetchSessionCache>,
    /// Share groups' partitions and sessions (KIP-932).
    pub shares: Arc<share_partitions::ShareState>,
    /// The ACL authorizer (`authorizer.class.name`); `None`: every request is allowed.
    pub authorizer: Option<Arc<millrace_cluster::acl::Authorizer>>,
    /// The rates client quotas are enforced on.
    pub quotas: Arc<quota::QuotaManager>,
    /// Tiered storage's remote reads (`remote.log.storage.system.enable`); `None`: off.
    pub remote: Option<Arc<dyn tiered::RemoteReads>>,
}

impl BrokerContext {
    /// `remote.fetch.max.wait.ms`: how long a Fetch waits for a remote read (Kafka's 500 ms).
    pub fn remote_fetch_max_wait_ms(&self) -> u64 {
        self.replicas
            .config()
            .broker
            .remote_storage()
            .remote_fetch_max_wait_ms
    }
}
