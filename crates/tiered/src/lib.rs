//! Tiered storage (KIP-405 semantics, decision 0073): closed segments of topics with
//! `remote.storage.enable=true` are copied to an object store and the local disk keeps only the
//! recent tail.
//!
//! - `layout`: where a remote segment's objects live in the bucket.
//! - `error`: `TieredError`.
//! - `store_url`: `millrace.remote.storage.url` and the AWS environment → a configured store.
//! - `remote_storage`: `RemoteStorage`, the object store's operations (put, get, ranged reads,
//!   delete, list, probe), bounded in time.
//! - `chunk_cache`: the bounded, single-flight cache of object chunks behind ranged reads.
//! - `segment_walk`: the checked pass over a local segment that plans its upload.
//! - `rlm`: the remote log manager: uploads, remote retention, orphans (one task per broker).
//! - `remote_read`: Fetch and timestamp lookups below the local log start.
//! - `testing`: a real SeaweedFS S3 server for tests (always compiled, for other crates' tests).

pub mod chunk_cache;
pub mod error;
pub mod layout;
pub mod remote_read;
pub mod remote_storage;
pub mod rlm;
pub mod segment_walk;
pub mod store_url;
pub mod testing;

pub use error::TieredError;
pub use layout::{ObjectKind, SegmentObjects};
pub use remote_storage::{ListedObject, RemoteStorage};
