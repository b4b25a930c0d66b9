//! `ChunkCache`: the broker's memory of remote segment bytes, in fixed chunks of an object
//! (`CHUNK_BYTES`, the last chunk of an object shorter). Remote reads (`RemoteStorage::read_range`)
//! ask it for the chunks a byte range touches; a chunk it does not hold is fetched with one ranged
//! GET of exactly that chunk, so a consumer reading a remote segment front to back costs one GET
//! per chunk, not one per Fetch.
//!
//! Invariants:
//! - The bytes held (`held_bytes`) never exceed the capacity given at construction; the least
//!   recently used chunks are evicted first. A chunk larger than the whole capacity is served and
//!   not kept (a capacity of 0 turns the cache off and keeps single-flight).
//! - Single-flight: while a chunk is loading, every reader of it waits for that one load; two
//!   readers of a missing chunk cause one GET.
//! - A failed load is not cached: its waiters all get the error, the next reader tries again.
//! - A load runs in its own task, so it finishes (and fills the cache) even when every reader
//!   gave up waiting; a prefetch is such a load with no reader.
//! - `invalidate(key)` forgets the key's chunks and its loads in flight: a load that was started
//!   before does not put its bytes in afterwards (the object may have been replaced or deleted).
//!
//! Locking: one `parking_lot::Mutex` over the maps, held for map operations only, never across
//! an await or a load.
//!
//! Not done here: deciding what to load (the caller's closure issues the GET and checks sizes),
//! and any disk tier (Kafka's remote index cache is on disk; chunks here live in memory only).
//!
//! Read first: `ChunkId`, `ChunkCache::get_or_load`.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt, Shared};
use parking_lot::Mutex;

use crate::error::TieredError;

/// Bytes per cached chunk and per ranged GET of a remote object (the last chunk of an object is
/// shorter). 4 MiB: a few Fetch responses' worth, large enough that a GET's latency is spread
/// over many reads, small enough that a read touching one record does not pull a whole segment.
pub const CHUNK_BYTES: u64 = 4 * 1024 * 1024;

/// One chunk of one object: the object key (relative to the store's prefix) and the chunk's
/// index (its first byte is `index * CHUNK_BYTES`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChunkId {
    pub key: Arc<str>,
    pub index: u64,
}

impl ChunkId {
    pub fn new(key: &str, index: u64) -> ChunkId {
        ChunkId {
            key: Arc::from(key),
            index,
        }
    }
}

/// What the cache has done since it was made (the process-wide metrics sum every cache).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Reads served from a held chunk.
    pub hits: u64,
    /// Reads that started a load or waited for one in flight.
    pub misses: u64,
    /// Loads started (each one GET), prefetches included.
    pub loads: u64,
    /// Chunks evicted to stay under the capacity.
    pub evictions: u64,
}

/// A load's outcome as its waiters share it (the error behind an `Arc`, as several get it).
type LoadOutcome = Result<Bytes, Arc<TieredError>>;
type Load = Shared<BoxFuture<'static, LoadOutcome>>;

/// A bounded, single-flight cache of object chunks. Cheap to share (`Arc<ChunkCache>`).
#[derive(Debug)]
pub struct ChunkCache {
    capacity_bytes: u64,
    inner: Mutex<Inner>,
    hits: AtomicU64,
    misses: AtomicU64,
    loads: AtomicU64,
    evictions: AtomicU64,
}

#[derive(Debug)]
struct Held {
    bytes: Bytes,
    last_used: u64,
}

#[derive(Default)]
struct Inner {
    chunks: HashMap<ChunkId, Held>,
    /// `last_used` → chunk, oldest first: the eviction order.
    recency: BTreeMap<u64, ChunkId>,
    held_bytes: u64,
    /// A counter for `last_used` and for naming loads.
    tick: u64,
    /// Loads in flight, each with its serial: a load fills the cache only while its serial is
    /// still here (an `invalidate` removes it).
    loading: HashMap<ChunkId, (u64, Load)>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("chunks", &self.chunks.len())
            .field("held_bytes", &self.held_bytes)
            .field("loading", &self.loading.len())
            .finish()
    }
}

impl Inner {
    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// The held chunk, marked most recently used.
    fn touch(&mut self, id: &ChunkId) -> Option<Bytes> {
        let tick = self.next_tick();
        let held = self.chunks.get_mut(id)?;
        self.recency.remove(&held.last_used);
        held.last_used = tick;
        self.recency.insert(tick, id.clone());
        Some(held.bytes.clone())
    }

    fn remove(&mut self, id: &ChunkId) {
        if let Some(held) = self.chunks.remove(id) {
            self.recency.remove(&held.last_used);
            self.held_bytes -= held.bytes.len() as u64;
        }
    }
}

/// What a reader found when it asked for a chunk.
enum Lookup {
    Held(Bytes),
    Wait(Load),
}

impl ChunkCache {
    /// A cache that holds at most `capacity_bytes` of chunks.
    pub fn new(capacity_bytes: u64) -> Arc<ChunkCache> {
        Arc::new(ChunkCache {
            capacity_bytes,
            inner: Mutex::new(Inner::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            loads: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        })
    }

    /// The chunk `id`: held, or being loaded by someone else (wait for that load), or loaded now
    /// by `load` (which must fetch exactly the chunk). Must run inside a Tokio runtime (the load
    /// is its own task).
    pub async fn get_or_load<F, Fut>(
        self: &Arc<Self>,
        id: ChunkId,
        load: F,
    ) -> Result<Bytes, TieredError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Bytes, TieredError>> + Send + 'static,
    {
        let metrics = millrace_metrics::global();
        let pending = match self.lookup_or_start(id, load) {
            Lookup::Held(bytes) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                metrics.remote_cache_hits.inc();
                return Ok(bytes);
            }
            Lookup::Wait(pending) => pending,
        };
        self.misses.fetch_add(1, Ordering::Relaxed);
        metrics.remote_cache_misses.inc();
        pending.await.map_err(|e| duplicate(&e))
    }

    /// Starts loading the chunk `id` unless it is held or loading already; does not wait.
    pub fn prefetch<F, Fut>(self: &Arc<Self>, id: ChunkId, load: F)
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Bytes, TieredError>> + Send + 'static,
    {
        // The load runs in its own task; its outcome reaches the cache, nobody else.
        drop(self.lookup_or_start(id, load));
    }

    /// True when the chunk is held now (not merely loading).
    pub fn contains(&self, id: &ChunkId) -> bool {
        self.inner.lock().chunks.contains_key(id)
    }

    /// Forgets every chunk of `key` and its loads in flight (called when the object is replaced
    /// or deleted).
    pub fn invalidate(&self, key: &str) {
        let mut inner = self.inner.lock();
        let doomed: Vec<ChunkId> = inner
            .chunks
            .keys()
            .filter(|id| &*id.key == key)
            .cloned()
            .collect();
        for id in &doomed {
            inner.remove(id);
        }
        inner.loading.retain(|id, _| &*id.key != key);
    }

    /// Bytes held now.
    pub fn held_bytes(&self) -> u64 {
        self.inner.lock().held_bytes
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            loads: self.loads.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }

    fn lookup_or_start<F, Fut>(self: &Arc<Self>, id: ChunkId, load: F) -> Lookup
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Bytes, TieredError>> + Send + 'static,
    {
        let mut inner = self.inner.lock();
        if let Some(bytes) = inner.touch(&id) {
            return Lookup::Held(bytes);
        }
        if let Some((_, pending)) = inner.loading.get(&id) {
            return Lookup::Wait(pending.clone());
        }
        let serial = inner.next_tick();
        let cache = Arc::clone(self);
        let chunk = id.clone();
        let fetch = load();
        let pending: Load = async move {
            let outcome = fetch.await.map_err(Arc::new);
            cache.finish(&chunk, serial, &outcome);
            outcome
        }
        .boxed()
        .shared();
        inner.loading.insert(id, (serial, pending.clone()));
        self.loads.fetch_add(1, Ordering::Relaxed);
        // Driven by its own task, so it completes (and leaves `loading`) whatever the readers do.
        tokio::spawn(pending.clone());
        Lookup::Wait(pending)
    }

    /// A load ended: it leaves `loading`, and its bytes are kept if it is still the current
    /// load of the chunk and they fit.
    fn finish(&self, id: &ChunkId, serial: u64, outcome: &LoadOutcome) {
        let mut inner = self.inner.lock();
        match inner.loading.get(id) {
            Some((current, _)) if *current == serial => {
                inner.loading.remove(id);
            }
            // Invalidated while loading (and perhaps loading again): keep nothing.
            _ => return,
        }
        let Ok(bytes) = outcome else { return };
        let len = bytes.len() as u64;
        if len > self.capacity_bytes {
            return;
        }
        inner.remove(id);
        while inner.held_bytes + len > self.capacity_bytes {
            let Some((_, oldest)) = inner.recency.pop_first() else {
                break;
            };
            if let Some(held) = inner.chunks.remove(&oldest) {
                inner.held_bytes -= held.bytes.len() as u64;
                self.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
        let tick = inner.next_tick();
        inner.recency.insert(tick, id.clone());
        inner.chunks.insert(
            id.clone(),
            Held {
                bytes: bytes.clone(),
                last_used: tick,
            },
        );
        inner.held_bytes += len;
    }
}

/// A waiter's own copy of a shared load error (`TieredError` is not `Clone`: an I/O error is
/// carried over as its kind and message).
fn duplicate(error: &TieredError) -> TieredError {
    match error {
        TieredError::Config(message) => TieredError::Config(message.clone()),
        TieredError::Missing { key } => TieredError::Missing { key: key.clone() },
        TieredError::Corrupt { key, detail } => TieredError::Corrupt {
            key: key.clone(),
            detail: detail.clone(),
        },
        TieredError::Store { key, detail } => TieredError::Store {
            key: key.clone(),
            detail: detail.clone(),
        },
        TieredError::Local { path, source } => TieredError::Local {
            path: path.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;
    use tokio::sync::Notify;

    fn chunk(key: &str, index: u64) -> ChunkId {
        ChunkId::new(key, index)
    }

    /// A loader that counts its calls and returns `len` bytes of `fill`.
    fn counting(
        calls: &Arc<AtomicUsize>,
        len: usize,
        fill: u8,
    ) -> impl FnOnce() -> BoxFuture<'static, Result<Bytes, TieredError>> {
        let calls = Arc::clone(calls);
        move || {
            calls.fetch_add(1, Ordering::SeqCst);
            async move { Ok(Bytes::from(vec![fill; len])) }.boxed()
        }
    }

    /// Polls `done` every few milliseconds for at most two seconds.
    async fn eventually(done: impl Fn() -> bool) -> bool {
        for _ in 0..400 {
            if done() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        done()
    }

    #[tokio::test]
    async fn two_readers_of_a_missing_chunk_cause_one_load() {
        let cache = ChunkCache::new(1 << 20);
        let calls = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(Notify::new());
        let slow = {
            let calls = Arc::clone(&calls);
            let gate = Arc::clone(&gate);
            move || {
                calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    gate.notified().await;
                    Ok(Bytes::from_static(b"chunk"))
                }
                .boxed()
            }
        };
        let first = {
            let cache = Arc::clone(&cache);
            tokio::spawn(async move { cache.get_or_load(chunk("k", 0), slow).await })
        };
        assert!(eventually(|| cache.stats().loads == 1).await);
        let second = {
            let cache = Arc::clone(&cache);
            let calls = Arc::clone(&calls);
            tokio::spawn(async move {
                cache
                    .get_or_load(chunk("k", 0), counting(&calls, 1, 0))
                    .await
            })
        };
        assert!(eventually(|| cache.stats().misses == 2).await);
        gate.notify_one();
        assert_eq!(&first.await.expect("join").expect("load")[..], b"chunk");
        assert_eq!(&second.await.expect("join").expect("load")[..], b"chunk");
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one GET for two readers");
        let third = cache
            .get_or_load(chunk("k", 0), counting(&calls, 1, 0))
            .await
            .expect("held");
        assert_eq!(&third[..], b"chunk");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(cache.stats().hits, 1);
    }

    #[tokio::test]
    async fn a_failed_load_is_not_cached() {
        let cache = ChunkCache::new(1 << 20);
        let failing = || async {
            Err(TieredError::Store {
                key: "k".into(),
                detail: "down".into(),
            })
        };
        let error = cache
            .get_or_load(chunk("k", 0), failing)
            .await
            .expect_err("the load failed");
        assert!(matches!(error, TieredError::Store { .. }));
        assert!(!cache.contains(&chunk("k", 0)));
        let calls = Arc::new(AtomicUsize::new(0));
        let bytes = cache
            .get_or_load(chunk("k", 0), counting(&calls, 3, 7))
            .await
            .expect("a second try loads again");
        assert_eq!(&bytes[..], &[7, 7, 7]);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn least_recently_used_chunks_leave_first_and_bytes_stay_under_capacity() {
        let cache = ChunkCache::new(30);
        let calls = Arc::new(AtomicUsize::new(0));
        for index in 0..3 {
            cache
                .get_or_load(chunk("k", index), counting(&calls, 10, index as u8))
                .await
                .expect("load");
        }
        assert_eq!(cache.held_bytes(), 30);
        // Chunk 0 is used again, so chunk 1 is now the oldest.
        cache
            .get_or_load(chunk("k", 0), counting(&calls, 10, 0))
            .await
            .expect("hit");
        cache
            .get_or_load(chunk("k", 3), counting(&calls, 10, 3))
            .await
            .expect("load");
        assert_eq!(cache.held_bytes(), 30);
        assert!(cache.contains(&chunk("k", 0)));
        assert!(!cache.contains(&chunk("k", 1)));
        assert!(cache.contains(&chunk("k", 2)));
        assert!(cache.contains(&chunk("k", 3)));
        assert_eq!(cache.stats().evictions, 1);
        // Larger than the whole cache: served, not kept, nothing evicted for it.
        let big = cache
            .get_or_load(chunk("big", 0), counting(&calls, 31, 9))
            .await
            .expect("load");
        assert_eq!(big.len(), 31);
        assert!(!cache.contains(&chunk("big", 0)));
        assert_eq!(cache.held_bytes(), 30);
    }

    #[tokio::test]
    async fn prefetch_fills_the_cache_without_a_reader_and_invalidate_forgets() {
        let cache = ChunkCache::new(1 << 20);
        let calls = Arc::new(AtomicUsize::new(0));
        cache.prefetch(chunk("k", 1), counting(&calls, 4, 1));
        assert!(eventually(|| cache.contains(&chunk("k", 1))).await);
        cache.prefetch(chunk("k", 1), counting(&calls, 4, 1));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "a held chunk is not fetched again"
        );
        cache
            .get_or_load(chunk("k", 1), counting(&calls, 4, 1))
            .await
            .expect("hit");
        assert_eq!(cache.stats().hits, 1);
        cache
            .get_or_load(chunk("other", 0), counting(&calls, 4, 2))
            .await
            .expect("load");
        cache.invalidate("k");
        assert!(!cache.contains(&chunk("k", 1)));
        assert!(cache.contains(&chunk("other", 0)));
        assert_eq!(cache.held_bytes(), 4);
    }

    #[tokio::test]
    async fn a_load_invalidated_in_flight_does_not_fill_the_cache() {
        let cache = ChunkCache::new(1 << 20);
        let gate = Arc::new(Notify::new());
        let slow = {
            let gate = Arc::clone(&gate);
            move || {
                async move {
                    gate.notified().await;
                    Ok(Bytes::from_static(b"old bytes"))
                }
                .boxed()
            }
        };
        let reader = {
            let cache = Arc::clone(&cache);
            tokio::spawn(async move { cache.get_or_load(chunk("k", 0), slow).await })
        };
        assert!(eventually(|| cache.stats().loads == 1).await);
        cache.invalidate("k");
        gate.notify_one();
        assert_eq!(
            &reader.await.expect("join").expect("load")[..],
            b"old bytes"
        );
        assert!(!cache.contains(&chunk("k", 0)));
    }
}
