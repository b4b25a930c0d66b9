//! Tiered storage (KIP-405 semantics, decision 0073): closed segments of topics with
//! `remote.storage.enable=true` are copied to an object store and the local disk keeps only the
//! recent tail.
//!
//! - `layout`: where a remote segment's objects live in the bucket.
//! - `error`: `TieredError`.

pub mod error;
pub mod layout;

pub use error::TieredError;
pub use layout::{ObjectKind, SegmentObjects};
