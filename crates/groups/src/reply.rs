//! [`Reply`]: an answer that may complete later. The group coordinator returns one from the
//! calls whose answer waits (JoinGroup, SyncGroup, commits waiting for `__consumer_offsets`), and
//! a `GroupLog` append returns one for the commit of its records.
//!
//! It sits below both the coordinator and the group log, so that neither has to import the other
//! for it (they used to import each other); its public path stays `coordinator::Reply`, which
//! re-exports it. Imports nothing from this crate.

use std::future::Future;
use std::pin::Pin;

/// A response that may complete later.
pub type Reply<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A [`Reply`] that is already complete.
pub(crate) fn ready<T: Send + 'static>(value: T) -> Reply<T> {
    Box::pin(std::future::ready(value))
}
