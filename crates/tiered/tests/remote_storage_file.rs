//! RemoteStorage's contract on a `file://` store: uploads (one PUT and multipart) read back byte
//! for byte through the chunk cache, listings, deletes, and the errors a reader must get
//! (Missing, Corrupt) instead of short or stale bytes.

use std::time::Duration;

use bytes::Bytes;
use millrace_tiered::chunk_cache::CHUNK_BYTES;
use millrace_tiered::remote_storage::PUT_SINGLE_BYTES_MAX;
use millrace_tiered::{RemoteStorage, TieredError};

/// Deterministic bytes that differ at every offset of a chunk, so a misplaced chunk shows.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn storage(dir: &tempfile::TempDir, cache_bytes: u64) -> RemoteStorage {
    let url = format!("file://{}/remote", dir.path().display());
    RemoteStorage::from_url(&url, no_env, cache_bytes).expect("a file:// store")
}

#[tokio::test]
async fn a_multipart_upload_reads_back_across_chunk_boundaries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let remote = storage(&dir, 64 << 20);
    let len = PUT_SINGLE_BYTES_MAX as usize + 3 * CHUNK_BYTES as usize + 12_345;
    let data = pattern(len, 7);
    let path = dir.path().join("00000000000000000000.log");
    std::fs::write(&path, &data).expect("write segment");
    let key = "t-id/0/00000000000000000000-x.log";
    let written = remote.put_file(key, &path).await.expect("upload");
    assert_eq!(written, len as u64);
    let size = len as u64;
    let chunk = CHUNK_BYTES;
    for range in [
        0..10,
        chunk - 100..chunk + 100,
        3 * chunk - 5..5 * chunk + 7,
        size - 1000..size,
        0..size,
        chunk..2 * chunk,
    ] {
        let read = remote
            .read_range(key, size, range.clone(), false)
            .await
            .expect("read");
        assert_eq!(
            &read[..],
            &data[range.start as usize..range.end as usize],
            "{range:?}"
        );
    }
    let empty = remote
        .read_range(key, size, 5..5, false)
        .await
        .expect("read");
    assert!(empty.is_empty());
}

#[tokio::test]
async fn small_objects_list_and_delete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let remote = storage(&dir, 1 << 20);
    remote.probe().await.expect("probe");
    let path = dir.path().join("small.index");
    std::fs::write(&path, b"index bytes").expect("write");
    assert_eq!(
        remote.put_file("p/0/a.index", &path).await.expect("put"),
        11
    );
    remote
        .put_bytes("p/0/b.snapshot", Bytes::from_static(b"snap"))
        .await
        .expect("put");
    remote
        .put_bytes("p/1/c.log", Bytes::from_static(b"other partition"))
        .await
        .expect("put");
    assert_eq!(
        &remote.get("p/0/a.index").await.expect("get")[..],
        b"index bytes"
    );
    let mut listed = remote.list("p/0").await.expect("list");
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<(&str, u64)> = listed.iter().map(|o| (o.name.as_str(), o.size)).collect();
    assert_eq!(names, [("a.index", 11), ("b.snapshot", 4)]);
    assert!(listed.iter().all(|o| o.last_modified_ms > 0));
    remote.delete("p/0/a.index").await.expect("delete");
    remote
        .delete("p/0/a.index")
        .await
        .expect("deleting twice is fine");
    assert!(matches!(
        remote.get("p/0/a.index").await,
        Err(TieredError::Missing { .. })
    ));
    let listed = remote.list("p/0").await.expect("list");
    assert_eq!(listed.len(), 1);
    assert!(remote.list("nothing/here").await.expect("list").is_empty());
    // The probe left nothing behind.
    assert!(remote.list("_millrace").await.expect("list").is_empty());
}

#[tokio::test]
async fn deleted_and_truncated_objects_are_errors_not_short_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let remote = storage(&dir, 64 << 20);
    let data = Bytes::from(pattern(2 * CHUNK_BYTES as usize + 10, 3));
    let size = data.len() as u64;
    remote.put_bytes("k.log", data.clone()).await.expect("put");
    let read = remote
        .read_range("k.log", size, 0..100, false)
        .await
        .expect("read");
    assert_eq!(&read[..], &data[..100]);
    assert!(matches!(
        remote.read_range("k.log", size, 0..size + 1, false).await,
        Err(TieredError::Corrupt { .. })
    ));
    // Re-put shorter through another handle, so this one's cache is not told.
    let other = storage(&dir, 0);
    other
        .put_bytes("k.log", data.slice(..CHUNK_BYTES as usize + 50))
        .await
        .expect("re-put shorter");
    for range in [CHUNK_BYTES..CHUNK_BYTES + 100, 2 * CHUNK_BYTES..size] {
        let outcome = remote.read_range("k.log", size, range.clone(), false).await;
        assert!(
            matches!(outcome, Err(TieredError::Corrupt { .. })),
            "{range:?}: {outcome:?}"
        );
    }
    remote.delete("k.log").await.expect("delete");
    let outcome = remote.read_range("k.log", size, 0..100, false).await;
    assert!(
        matches!(outcome, Err(TieredError::Missing { .. })),
        "cached chunks are dropped on delete: {outcome:?}"
    );
}

#[tokio::test]
async fn prefetch_loads_the_next_chunk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let remote = storage(&dir, 64 << 20);
    let data = Bytes::from(pattern(3 * CHUNK_BYTES as usize, 5));
    let size = data.len() as u64;
    remote.put_bytes("k.log", data.clone()).await.expect("put");
    remote
        .read_range("k.log", size, 0..10, true)
        .await
        .expect("read");
    let mut cached = false;
    for _ in 0..200 {
        cached = remote.is_chunk_cached("k.log", 1);
        if cached {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(cached, "chunk 1 was prefetched");
    assert!(!remote.is_chunk_cached("k.log", 2), "only the next chunk");
    let before = remote.cache_stats();
    let read = remote
        .read_range("k.log", size, CHUNK_BYTES..CHUNK_BYTES + 10, false)
        .await
        .expect("read");
    assert_eq!(
        &read[..],
        &data[CHUNK_BYTES as usize..CHUNK_BYTES as usize + 10]
    );
    let after = remote.cache_stats();
    assert_eq!(after.hits, before.hits + 1);
    assert_eq!(after.loads, before.loads);
}
