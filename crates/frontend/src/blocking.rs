//! Work that may block a thread for milliseconds (an `fdatasync` under `log.flush.policy=always`,
//! a timestamp lookup that reads segments) done without stalling the other connections served by
//! the same runtime thread: on the broker's multi-threaded runtime the thread hands its other
//! tasks to another one for the duration (`tokio::task::block_in_place`); order is kept, since
//! the calling task still waits for the result. Elsewhere (a current-thread runtime in tests, or
//! no runtime) the work simply runs.

use tokio::runtime::{Handle, RuntimeFlavor};

/// Runs `work`, letting the runtime move this thread's other tasks elsewhere meanwhile.
pub fn run<R>(work: impl FnOnce() -> R) -> R {
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}
