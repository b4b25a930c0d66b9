//! `RemoteStorage`: the broker's one handle on the object store that holds remote segments
//! (Kafka's RemoteStorageManager, the store side of it). The remote log manager uploads a closed
//! segment's files with `put_file`/`put_bytes`, remote reads fetch byte ranges of a segment with
//! `read_range` (through the `ChunkCache`), and retention removes objects with `delete`. Keys
//! are relative to the store's prefix (`layout::SegmentObjects::key`).
//!
//! Invariants:
//! - Every call ends within bounded time (`store_url`'s timeouts and retry bounds): an outage is
//!   a transient `TieredError::Store` within seconds, never a hang.
//! - A read never returns fewer bytes than asked for: a range past the object size the caller
//!   knows, or an object of another size, is `Corrupt`; an absent object is `Missing`.
//! - An upload never holds a whole segment in memory: up to `PUT_SINGLE_BYTES_MAX` it is one PUT,
//!   above it a multipart upload of `MULTIPART_PART_BYTES` parts, at most
//!   `MULTIPART_PARTS_IN_FLIGHT` at a time; a failed multipart upload is aborted.
//! - Replacing or deleting an object through this handle drops its cached chunks.
//!
//! Locking: none of its own (the chunk cache has one short lock); clones share the store and the
//! cache.
//!
//! Not done here: deciding what to upload or delete (the remote log manager), parsing what is
//! read (remote reads), retries beyond the store client's bounded ones (the caller's schedule).
//! `get` is deliberately not cached: it reads small whole objects (indexes, snapshots) that
//! callers parse once and keep in their own form.
//!
//! Read first: `RemoteStorage::from_url`, `RemoteStorage::read_range`.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use tracing::debug;
use uuid::Uuid;

use crate::chunk_cache::{CacheStats, ChunkCache, ChunkId, CHUNK_BYTES};
use crate::error::TieredError;
use crate::store_url::{self, StoreTarget};

/// Files up to this size are uploaded with one PUT; larger ones as a multipart upload.
pub const PUT_SINGLE_BYTES_MAX: u64 = 16 * 1024 * 1024;
/// The size of each multipart part but the last (S3 wants 5 MiB at least).
pub const MULTIPART_PART_BYTES: u64 = 8 * 1024 * 1024;
/// Parts of one upload in flight at a time: the upload's memory is about this many parts.
pub const MULTIPART_PARTS_IN_FLIGHT: usize = 4;
/// Chunks one `read_range` fetches at a time.
pub const READ_CHUNKS_IN_FLIGHT: usize = 4;
/// The largest object `get` reads whole (indexes, snapshots, checkpoints are far smaller; a
/// larger one is not what the metadata says it is).
pub const GET_OBJECT_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// The most objects one `list` returns (about 166,000 segments of one partition).
pub const LIST_OBJECTS_MAX: usize = 1_000_000;

const _: () = assert!(MULTIPART_PART_BYTES >= 5 * 1024 * 1024);
const _: () = assert!(PUT_SINGLE_BYTES_MAX >= MULTIPART_PART_BYTES);

/// The folder (under the prefix) of the probe's objects.
const PROBE_FOLDER: &str = "_millrace";

/// One object of a `list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedObject {
    /// The key after `folder/` (may contain further `/`).
    pub name: String,
    pub size: u64,
    pub last_modified_ms: i64,
}

/// The object store of remote segments, with its chunk cache. Cheap to clone.
#[derive(Debug, Clone)]
pub struct RemoteStorage {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    description: String,
    cache: Arc<ChunkCache>,
}

/// The kinds of request, as the metrics label them.
#[derive(Debug, Clone, Copy)]
enum Op {
    Put,
    Get,
    Delete,
    List,
}

impl Op {
    fn label(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::Get => "get",
            Op::Delete => "delete",
            Op::List => "list",
        }
    }
}

impl RemoteStorage {
    /// From `millrace.remote.storage.url` and an environment lookup (the broker passes
    /// `|k| std::env::var(k).ok()`, tests a map). `cache_bytes` bounds the chunk cache.
    pub fn from_url(
        url: &str,
        env: impl Fn(&str) -> Option<String>,
        cache_bytes: u64,
    ) -> Result<RemoteStorage, TieredError> {
        let StoreTarget {
            store,
            prefix,
            description,
        } = store_url::open(url, &env)?;
        Ok(RemoteStorage {
            shared: Arc::new(Shared {
                store,
                prefix,
                description,
                cache: ChunkCache::new(cache_bytes),
            }),
        })
    }

    /// Where the objects go, for logs: `s3://bucket/prefix via http://127.0.0.1:8333`. Never
    /// holds a secret.
    pub fn describe(&self) -> String {
        self.shared.description.clone()
    }

    /// Checks that the store takes a write, a read and a delete under the prefix (at startup,
    /// so a wrong bucket or credentials show at once). Credentials the store refuses are a
    /// `Config` error that says so, with the store's answer.
    pub async fn probe(&self) -> Result<(), TieredError> {
        let key = format!("{PROBE_FOLDER}/probe-{}", Uuid::new_v4());
        let body = Bytes::from(format!("millrace probe of {}", self.describe()));
        let outcome = async {
            self.put_bytes(&key, body.clone()).await?;
            let read = self.get(&key).await?;
            if read != body {
                return Err(TieredError::Corrupt {
                    key: key.clone(),
                    detail: format!(
                        "read {} bytes back that differ from those written",
                        read.len()
                    ),
                });
            }
            self.delete(&key).await
        }
        .await;
        outcome.map_err(|e| match e {
            TieredError::Store { detail, .. } if detail.starts_with(REFUSED) => {
                TieredError::Config(format!("{} ({}): {detail}", self.describe(), key))
            }
            other => other,
        })
    }

    /// Uploads the file at `path` as `key`, streaming it; returns the bytes written.
    pub async fn put_file(&self, key: &str, path: &Path) -> Result<u64, TieredError> {
        let location = self.location(key)?;
        let file = std::fs::File::open(path).map_err(|e| local(path, e))?;
        let size = file.metadata().map_err(|e| local(path, e))?.len();
        let file = Arc::new(file);
        self.shared.cache.invalidate(key);
        if size <= PUT_SINGLE_BYTES_MAX {
            let bytes = read_at(&file, path, 0, size).await?;
            self.put_payload(key, &location, bytes).await?;
        } else {
            self.put_multipart(key, &location, &file, path, size)
                .await?;
        }
        millrace_metrics::global()
            .remote_bytes_uploaded
            .inc_by(size);
        debug!(key, size, "uploaded to remote storage");
        Ok(size)
    }

    /// Uploads bytes `range` of the file at `path` as `key`, streaming them; returns the bytes
    /// written (a segment's slice: an upload may start inside a local segment).
    pub async fn put_file_range(
        &self,
        key: &str,
        path: &Path,
        range: std::ops::Range<u64>,
    ) -> Result<u64, TieredError> {
        let location = self.location(key)?;
        let file = std::fs::File::open(path).map_err(|e| local(path, e))?;
        let file = Arc::new(file);
        let size = range.end.saturating_sub(range.start);
        self.shared.cache.invalidate(key);
        if size <= PUT_SINGLE_BYTES_MAX {
            let bytes = read_at(&file, path, range.start, size).await?;
            self.put_payload(key, &location, bytes).await?;
        } else {
            self.put_multipart_from(key, &location, &file, path, range.start, size)
                .await?;
        }
        millrace_metrics::global()
            .remote_bytes_uploaded
            .inc_by(size);
        debug!(key, size, "uploaded to remote storage");
        Ok(size)
    }

    /// `put_bytes` with an owned key (for uploads joined together).
    pub async fn put_bytes_owned(&self, key: String, bytes: Bytes) -> Result<(), TieredError> {
        self.put_bytes(&key, bytes).await
    }

    /// Uploads `bytes` as `key` with one PUT (for small objects).
    pub async fn put_bytes(&self, key: &str, bytes: Bytes) -> Result<(), TieredError> {
        let location = self.location(key)?;
        self.shared.cache.invalidate(key);
        let len = bytes.len() as u64;
        self.put_payload(key, &location, bytes).await?;
        millrace_metrics::global().remote_bytes_uploaded.inc_by(len);
        Ok(())
    }

    /// The whole object `key` (small objects only: at most `GET_OBJECT_BYTES_MAX`). Not cached.
    pub async fn get(&self, key: &str) -> Result<Bytes, TieredError> {
        let location = self.location(key)?;
        let bytes = timed(Op::Get, async {
            let result = self
                .shared
                .store
                .get_opts(&location, GetOptions::default())
                .await?;
            if result.meta.size > GET_OBJECT_BYTES_MAX {
                return Ok(Err(result.meta.size));
            }
            result.bytes().await.map(Ok)
        })
        .await
        .map_err(|e| store_error(key, e))?
        .map_err(|size| TieredError::Corrupt {
            key: key.to_string(),
            detail: format!(
                "{size} bytes, more than the {GET_OBJECT_BYTES_MAX} a whole-object read takes"
            ),
        })?;
        millrace_metrics::global()
            .remote_bytes_fetched
            .inc_by(bytes.len() as u64);
        Ok(bytes)
    }

    /// Bytes `range` of the object `key`, which the caller knows to be `object_size` bytes long,
    /// through the chunk cache. With `prefetch`, the chunk after the range's last one starts
    /// loading (not awaited) if the object has one.
    pub async fn read_range(
        &self,
        key: &str,
        object_size: u64,
        range: Range<u64>,
        prefetch: bool,
    ) -> Result<Bytes, TieredError> {
        if range.start > range.end || range.end > object_size {
            return Err(TieredError::Corrupt {
                key: key.to_string(),
                detail: format!(
                    "bytes {}..{} asked for, past the object's size of {object_size}",
                    range.start, range.end
                ),
            });
        }
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let first = range.start / CHUNK_BYTES;
        let last = (range.end - 1) / CHUNK_BYTES;
        let chunks: Vec<Bytes> = futures::stream::iter(first..=last)
            .map(|index| self.chunk(key, object_size, index))
            .buffered(READ_CHUNKS_IN_FLIGHT)
            .try_collect()
            .await?;
        let next = last + 1;
        if prefetch && next * CHUNK_BYTES < object_size {
            let loader = self.chunk_loader(key, object_size, next);
            self.shared.cache.prefetch(ChunkId::new(key, next), loader);
        }
        Ok(slice_of_chunks(&chunks, first * CHUNK_BYTES, range))
    }

    /// Deletes `key`; an object that is not there is not an error. Drops its cached chunks.
    pub async fn delete(&self, key: &str) -> Result<(), TieredError> {
        let location = self.location(key)?;
        self.shared.cache.invalidate(key);
        let outcome = timed(Op::Delete, async {
            match self.shared.store.delete(&location).await {
                Err(object_store::Error::NotFound { .. }) => Ok(()),
                other => other,
            }
        })
        .await;
        outcome.map_err(|e| store_error(key, e))
    }

    /// Every object under `folder` (relative to the prefix), at any depth.
    pub async fn list(&self, folder: &str) -> Result<Vec<ListedObject>, TieredError> {
        let location = self.location(folder)?;
        let strip = format!("{}/", location.as_ref());
        let outcome = timed(Op::List, async {
            let mut listing = self.shared.store.list(Some(&location));
            let mut objects = Vec::new();
            while let Some(meta) = listing.next().await {
                let meta = meta?;
                if objects.len() == LIST_OBJECTS_MAX {
                    return Ok(Err(()));
                }
                let full = meta.location.as_ref();
                let name = full.strip_prefix(&strip).unwrap_or(full).to_string();
                objects.push(ListedObject {
                    name,
                    size: meta.size,
                    last_modified_ms: meta.last_modified.timestamp_millis(),
                });
            }
            Ok(Ok(objects))
        })
        .await;
        outcome
            .map_err(|e| store_error(folder, e))?
            .map_err(|()| TieredError::Store {
                key: folder.to_string(),
                detail: format!("more than {LIST_OBJECTS_MAX} objects (LIST_OBJECTS_MAX)"),
            })
    }

    /// What the chunk cache has done (hits, misses, loads).
    pub fn cache_stats(&self) -> CacheStats {
        self.shared.cache.stats()
    }

    /// True when chunk `index` of `key` is in the cache now.
    pub fn is_chunk_cached(&self, key: &str, index: u64) -> bool {
        self.shared.cache.contains(&ChunkId::new(key, index))
    }

    /// Bytes the chunk cache holds now.
    pub fn cached_bytes(&self) -> u64 {
        self.shared.cache.held_bytes()
    }

    fn location(&self, key: &str) -> Result<ObjectPath, TieredError> {
        let full = if self.shared.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}/{key}", self.shared.prefix)
        };
        ObjectPath::parse(&full)
            .map_err(|e| TieredError::Config(format!("{key:?} is not a valid object key: {e}")))
    }

    async fn put_payload(
        &self,
        key: &str,
        location: &ObjectPath,
        bytes: Bytes,
    ) -> Result<(), TieredError> {
        timed(
            Op::Put,
            self.shared.store.put(location, PutPayload::from(bytes)),
        )
        .await
        .map(drop)
        .map_err(|e| store_error(key, e))
    }

    async fn put_multipart(
        &self,
        key: &str,
        location: &ObjectPath,
        file: &Arc<std::fs::File>,
        path: &Path,
        size: u64,
    ) -> Result<(), TieredError> {
        self.put_multipart_from(key, location, file, path, 0, size)
            .await
    }

    /// Multipart upload of `size` bytes of `file` from byte `start`.
    async fn put_multipart_from(
        &self,
        key: &str,
        location: &ObjectPath,
        file: &Arc<std::fs::File>,
        path: &Path,
        start: u64,
        size: u64,
    ) -> Result<(), TieredError> {
        let upload = timed(Op::Put, self.shared.store.put_multipart(location))
            .await
            .map_err(|e| store_error(key, e))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, MULTIPART_PART_BYTES as usize);
        let mut offset = 0;
        // One pass per part: `size / MULTIPART_PART_BYTES + 1` at most.
        while offset < size {
            let len = MULTIPART_PART_BYTES.min(size - offset);
            let part = match read_at(file, path, start + offset, len).await {
                Ok(part) => part,
                Err(e) => return Err(abort(key, writer, e).await),
            };
            if let Err(e) = writer
                .wait_for_capacity(MULTIPART_PARTS_IN_FLIGHT - 1)
                .await
            {
                return Err(abort(key, writer, store_error(key, e)).await);
            }
            writer.put(part);
            offset += len;
        }
        let started = Instant::now();
        let finished = writer.finish().await;
        record(Op::Put, started, finished.is_err());
        finished.map(drop).map_err(|e| store_error(key, e))
    }

    /// Fetches chunk `index` of `key` through the cache.
    async fn chunk(&self, key: &str, object_size: u64, index: u64) -> Result<Bytes, TieredError> {
        let loader = self.chunk_loader(key, object_size, index);
        self.shared
            .cache
            .get_or_load(ChunkId::new(key, index), loader)
            .await
    }

    /// The load of one chunk: a ranged GET of exactly its bytes, checked against `object_size`.
    fn chunk_loader(
        &self,
        key: &str,
        object_size: u64,
        index: u64,
    ) -> impl FnOnce() -> futures::future::BoxFuture<'static, Result<Bytes, TieredError>> {
        let store = Arc::clone(&self.shared.store);
        let location = self.location(key);
        let key = key.to_string();
        move || {
            Box::pin(async move {
                let location = location?;
                let start = index * CHUNK_BYTES;
                let range = start..object_size.min(start + CHUNK_BYTES);
                fetch_chunk(&*store, &key, &location, object_size, range).await
            })
        }
    }
}

/// What a store error's detail starts with when the store refused the credentials.
const REFUSED: &str = "the object store refused the credentials";

/// Maps an object store error on `key`: absent → `Missing`; refused credentials and everything
/// else → `Store` (transient: permissions and outages can be fixed without a restart).
fn store_error(key: &str, error: object_store::Error) -> TieredError {
    match error {
        object_store::Error::NotFound { .. } => TieredError::Missing {
            key: key.to_string(),
        },
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => TieredError::Store {
            key: key.to_string(),
            detail: format!("{REFUSED}: {}", refusal_summary(&error.to_string())),
        },
        other => TieredError::Store {
            key: key.to_string(),
            detail: other.to_string(),
        },
    }
}

/// The status and S3's error code and message out of a refusal's text ("403 Forbidden,
/// SignatureDoesNotMatch: The request signature ..."), or the whole text when it has no status.
fn refusal_summary(text: &str) -> String {
    let between = |open: &str, close: &str| {
        let start = text.find(open)? + open.len();
        let len = text[start..].find(close)?;
        Some(text[start..start + len].trim().to_string())
    };
    let Some(status) = between("status code: ", ":") else {
        return text.to_string();
    };
    match (
        between("<Code>", "</Code>"),
        between("<Message>", "</Message>"),
    ) {
        (Some(code), Some(message)) => format!("{status}, {code}: {message}"),
        (Some(code), None) => format!("{status}, {code}"),
        _ => status,
    }
}

/// True for an error that says the bytes asked for lie past the object's end (S3's 416, the
/// local store's range check): the object is shorter than the caller believes.
/// (object_store keeps the status in a private type, so the words of its messages are what is
/// left to look at; the chain of sources is at most `ERROR_SOURCES_MAX` deep.)
fn is_past_the_end(error: &object_store::Error) -> bool {
    const ERROR_SOURCES_MAX: usize = 8;
    const SIGNS: [&str; 5] = [
        "416 Range Not Satisfiable",
        "<Code>InvalidRange</Code>",
        "Requested range was invalid",
        "Wanted range starting at",
        "Out of range of file",
    ];
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    for _ in 0..ERROR_SOURCES_MAX {
        let Some(current) = source else { break };
        let text = current.to_string();
        if SIGNS.iter().any(|sign| text.contains(sign)) {
            return true;
        }
        source = current.source();
    }
    false
}

async fn fetch_chunk(
    store: &dyn ObjectStore,
    key: &str,
    location: &ObjectPath,
    object_size: u64,
    range: Range<u64>,
) -> Result<Bytes, TieredError> {
    let wanted = range.end - range.start;
    let options = GetOptions {
        range: Some(GetRange::Bounded(range.clone())),
        ..GetOptions::default()
    };
    let outcome = timed(Op::Get, async {
        let result = store.get_opts(location, options).await?;
        let size = result.meta.size;
        Ok((size, result.bytes().await?))
    })
    .await;
    let (size, bytes) = match outcome {
        Ok(fetched) => fetched,
        Err(e) if is_past_the_end(&e) => {
            return Err(TieredError::Corrupt {
                key: key.to_string(),
                detail: format!(
                    "bytes {}..{} lie past its end, but it should be {object_size} bytes ({e})",
                    range.start, range.end
                ),
            })
        }
        Err(e) => return Err(store_error(key, e)),
    };
    millrace_metrics::global()
        .remote_bytes_fetched
        .inc_by(bytes.len() as u64);
    if size != object_size || bytes.len() as u64 != wanted {
        return Err(TieredError::Corrupt {
            key: key.to_string(),
            detail: format!(
                "{size} bytes in the store, {object_size} expected; a read of {wanted} bytes at \
                 {} returned {}",
                range.start,
                bytes.len()
            ),
        });
    }
    Ok(bytes)
}

/// `range` (absolute) out of consecutive chunks whose first byte is at `chunks_start`.
fn slice_of_chunks(chunks: &[Bytes], chunks_start: u64, range: Range<u64>) -> Bytes {
    let from = (range.start - chunks_start) as usize;
    let len = (range.end - range.start) as usize;
    if let [only] = chunks {
        return only.slice(from..from + len);
    }
    let mut out = BytesMut::with_capacity(len);
    let mut skip = from;
    for chunk in chunks {
        let want = len - out.len();
        if skip >= chunk.len() {
            skip -= chunk.len();
            continue;
        }
        let take = (chunk.len() - skip).min(want);
        out.extend_from_slice(&chunk[skip..skip + take]);
        skip = 0;
    }
    out.freeze()
}

/// Runs one request, recording its op, duration and failure.
async fn timed<T>(
    op: Op,
    request: impl std::future::Future<Output = object_store::Result<T>>,
) -> object_store::Result<T> {
    let started = Instant::now();
    let outcome = request.await;
    record(op, started, outcome.is_err());
    outcome
}

fn record(op: Op, started: Instant, failed: bool) {
    millrace_metrics::global().record_remote_request(
        op.label(),
        started.elapsed().as_secs_f64(),
        failed,
    );
}

/// Aborts a multipart upload after `error`, returning the error (an abort that fails too is
/// logged: the store's lifecycle rule for incomplete uploads cleans up after it).
async fn abort(key: &str, writer: WriteMultipart, error: TieredError) -> TieredError {
    if let Err(abort_error) = writer.abort().await {
        tracing::warn!(key, %abort_error, "could not abort a failed multipart upload");
    }
    error
}

fn local(path: &Path, source: std::io::Error) -> TieredError {
    TieredError::Local {
        path: path.display().to_string(),
        source,
    }
}

/// `len` bytes of `file` from `offset`, read off the runtime threads (decision 0057). A file
/// shorter than that is an error (closed segments do not shrink).
async fn read_at(
    file: &Arc<std::fs::File>,
    path: &Path,
    offset: u64,
    len: u64,
) -> Result<Bytes, TieredError> {
    let file = Arc::clone(file);
    let read = tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt;
        let mut buffer = vec![0; len as usize];
        file.read_exact_at(&mut buffer, offset).map(|()| buffer)
    })
    .await
    .map_err(|e| local(path, std::io::Error::other(e)))?;
    read.map(Bytes::from).map_err(|e| local(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(chunks: &[&[u8]], chunks_start: u64, range: Range<u64>, expected: &[u8]) {
        let chunks: Vec<Bytes> = chunks.iter().map(|c| Bytes::copy_from_slice(c)).collect();
        assert_eq!(&slice_of_chunks(&chunks, chunks_start, range)[..], expected);
    }

    #[test]
    fn a_refusal_is_summed_up_by_status_and_code() {
        let text = "Error performing PUT http://h/b/k in 1ms - Server returned non-2xx status \
                    code: 403 Forbidden: <?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch\
                    </Code><Message>The signature does not match.</Message></Error>";
        assert_eq!(
            refusal_summary(text),
            "403 Forbidden, SignatureDoesNotMatch: The signature does not match."
        );
        assert_eq!(refusal_summary("connection reset"), "connection reset");
    }

    #[test]
    fn ranges_are_cut_out_of_chunks() {
        check(&[b"abcd"], 0, 1..3, b"bc");
        check(&[b"abcd"], 8, 8..12, b"abcd");
        check(&[b"abcd", b"efgh"], 4, 6..10, b"cdef");
        check(&[b"abcd", b"efgh", b"ij"], 0, 3..10, b"defghij");
        check(&[b"abcd", b"efgh", b"ij"], 0, 4..9, b"efghi");
    }
}
