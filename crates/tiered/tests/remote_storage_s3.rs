//! RemoteStorage against a real S3 server (SeaweedFS, started per test): a 40 MB segment goes
//! up as a multipart upload and reads back byte for byte across chunk boundaries, prefetch
//! turns the next chunk into a cache hit, deleted and truncated objects are errors, refused and
//! missing credentials say so, and an outage is a transient error within seconds that ends when
//! the server is back. Each test prints how long it took.

use std::time::{Duration, Instant};

use bytes::Bytes;
use millrace_tiered::chunk_cache::CHUNK_BYTES;
use millrace_tiered::remote_storage::MULTIPART_PART_BYTES;
use millrace_tiered::testing::SeaweedFs;
use millrace_tiered::{RemoteStorage, TieredError};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStoreExt;

/// The longest an operation may take to fail while the store is down.
const OUTAGE_ERROR_WITHIN: Duration = Duration::from_secs(20);
const SEGMENT_BYTES: usize = 40_000_000;

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

fn start_seaweedfs() -> SeaweedFs {
    SeaweedFs::start().unwrap_or_else(|e| panic!("SeaweedFS did not start: {e}"))
}

fn storage(s3: &SeaweedFs, prefix: &str, cache_bytes: u64) -> RemoteStorage {
    RemoteStorage::from_url(&s3.url(prefix), s3.env_lookup(), cache_bytes).expect("an s3:// store")
}

/// Polls `done` every 10 ms for at most ten seconds.
async fn eventually(done: impl Fn() -> bool) -> bool {
    for _ in 0..1000 {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    done()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_round_trip_and_bad_objects_are_errors() {
    let began = Instant::now();
    let s3 = start_seaweedfs();
    let started_in = began.elapsed();
    let remote = storage(&s3, "cluster-a/tiered", 64 << 20);
    assert_eq!(
        remote.describe(),
        format!(
            "s3://{}/cluster-a/tiered via {}",
            s3.bucket(),
            s3.endpoint()
        )
    );
    remote.probe().await.expect("probe");

    // A 40 MB segment: a multipart upload, read back across chunk boundaries.
    let dir = tempfile::tempdir().expect("tempdir");
    let data = pattern(SEGMENT_BYTES, 11);
    let path = dir.path().join("00000000000000000000.log");
    std::fs::write(&path, &data).expect("write segment");
    let key = "orders-id/0/00000000000000000000-seg.log";
    let uploaded = Instant::now();
    assert_eq!(
        remote.put_file(key, &path).await.expect("upload"),
        SEGMENT_BYTES as u64
    );
    let upload_took = uploaded.elapsed();
    let raw = AmazonS3Builder::new()
        .with_endpoint(s3.endpoint())
        .with_bucket_name(s3.bucket())
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id(s3.env_lookup()("AWS_ACCESS_KEY_ID").expect("key id"))
        .with_secret_access_key(s3.env_lookup()("AWS_SECRET_ACCESS_KEY").expect("secret"))
        .build()
        .expect("a raw S3 client");
    let head = raw
        .head(&ObjectPath::from(format!("cluster-a/tiered/{key}")))
        .await
        .expect("the object is under the prefix");
    assert_eq!(head.size, SEGMENT_BYTES as u64);
    let parts = (SEGMENT_BYTES as u64).div_ceil(MULTIPART_PART_BYTES);
    let etag = head.e_tag.expect("an ETag");
    assert!(
        etag.trim_matches('"').ends_with(&format!("-{parts}")),
        "a multipart upload of {parts} parts has an ETag ending -{parts}: {etag}"
    );
    let size = SEGMENT_BYTES as u64;
    let chunk = CHUNK_BYTES;
    for range in [
        0..10,
        chunk - 100..chunk + 100,
        3 * chunk - 5..5 * chunk + 7,
        size - 1000..size,
        2 * chunk..3 * chunk,
    ] {
        let read = remote
            .read_range(key, size, range.clone(), false)
            .await
            .expect("read");
        assert!(
            read[..] == data[range.start as usize..range.end as usize],
            "{range:?} differs"
        );
    }

    // Prefetch: reading chunk 6 loads chunk 7 too; reading chunk 7 is then a hit, no GET.
    assert!(!remote.is_chunk_cached(key, 7));
    remote
        .read_range(key, size, 6 * chunk..6 * chunk + 10, true)
        .await
        .expect("read");
    assert!(
        eventually(|| remote.is_chunk_cached(key, 7)).await,
        "chunk 7 prefetched"
    );
    let before = remote.cache_stats();
    let read = remote
        .read_range(key, size, 7 * chunk + 1..7 * chunk + 11, false)
        .await
        .expect("read");
    assert!(read[..] == data[7 * chunk as usize + 1..7 * chunk as usize + 11]);
    let after = remote.cache_stats();
    assert_eq!((after.hits, after.loads), (before.hits + 1, before.loads));

    // List, delete, and a deleted object is Missing (its cached chunks are gone too).
    remote
        .put_bytes(
            "orders-id/0/00000000000000000000-seg.index",
            Bytes::from_static(b"idx"),
        )
        .await
        .expect("put index");
    let mut listed = remote.list("orders-id/0").await.expect("list");
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<(&str, u64)> = listed.iter().map(|o| (o.name.as_str(), o.size)).collect();
    assert_eq!(
        names,
        [
            ("00000000000000000000-seg.index", 3),
            ("00000000000000000000-seg.log", size)
        ]
    );
    remote.delete(key).await.expect("delete");
    remote
        .delete(key)
        .await
        .expect("deleting a missing object is fine");
    let listed = remote.list("orders-id/0").await.expect("list");
    assert_eq!(listed.len(), 1);
    let outcome = remote.read_range(key, size, 0..10, false).await;
    assert!(
        matches!(outcome, Err(TieredError::Missing { .. })),
        "{outcome:?}"
    );
    assert!(matches!(
        remote.get(key).await,
        Err(TieredError::Missing { .. })
    ));

    // Truncated: re-put shorter behind this handle's back; reads that reach the lost bytes, or
    // any chunk of an object of the wrong size, are Corrupt.
    let short = Bytes::from(pattern(2 * chunk as usize + 10, 4));
    let full_size = 3 * chunk;
    remote.put_bytes("t.log", short.clone()).await.expect("put");
    let other = storage(&s3, "cluster-a/tiered", 0);
    for range in [0..10, chunk + 5..chunk + 15, 2 * chunk + 20..full_size] {
        let outcome = other
            .read_range("t.log", full_size, range.clone(), false)
            .await;
        assert!(
            matches!(outcome, Err(TieredError::Corrupt { .. })),
            "{range:?}: {outcome:?}"
        );
    }
    let outcome = other
        .read_range("t.log", 2 * chunk + 10, 0..2 * chunk + 11, false)
        .await;
    assert!(
        matches!(outcome, Err(TieredError::Corrupt { .. })),
        "{outcome:?}"
    );
    println!(
        "SeaweedFS round trip: {:.1} s (start {:.1} s, 40 MB multipart upload {:.1} s)",
        began.elapsed().as_secs_f64(),
        started_in.as_secs_f64(),
        upload_took.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_and_missing_credentials_say_so() {
    let began = Instant::now();
    let s3 = start_seaweedfs();
    let wrong_secret = {
        let lookup = s3.env_lookup();
        move |name: &str| match name {
            "AWS_SECRET_ACCESS_KEY" => Some("not-the-secret".to_string()),
            other => lookup(other),
        }
    };
    let remote = RemoteStorage::from_url(&s3.url("p"), wrong_secret, 0).expect("configured");
    let outcome = remote.probe().await;
    let Err(TieredError::Config(message)) = outcome else {
        panic!("a wrong secret fails the probe as Config, got {outcome:?}");
    };
    assert!(message.contains("refused the credentials"), "{message}");
    assert!(message.contains("403"), "the store's status: {message}");
    assert!(
        !message.contains("not-the-secret"),
        "no secret in errors: {message}"
    );
    println!("a wrong secret reads: {message}");

    let no_key_id = {
        let lookup = s3.env_lookup();
        move |name: &str| match name {
            "AWS_ACCESS_KEY_ID" => None,
            other => lookup(other),
        }
    };
    let outcome = RemoteStorage::from_url(&s3.url("p"), no_key_id, 0);
    let Err(TieredError::Config(message)) = outcome else {
        panic!(
            "a missing key id is Config, got {:?}",
            outcome.map(|r| r.describe())
        );
    };
    assert!(
        message.starts_with("AWS_ACCESS_KEY_ID not set"),
        "{message}"
    );
    assert!(
        !message.contains("AWS_SECRET_ACCESS_KEY"),
        "only the missing one: {message}"
    );
    println!(
        "SeaweedFS credentials: {:.1} s",
        began.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_a_transient_error_within_seconds_and_ends() {
    let began = Instant::now();
    let mut s3 = start_seaweedfs();
    let remote = storage(&s3, "outage", 16 << 20);
    let data = Bytes::from(pattern(2 * CHUNK_BYTES as usize, 9));
    let size = data.len() as u64;
    remote.put_bytes("k.log", data.clone()).await.expect("put");

    s3.stop();
    let failing = Instant::now();
    let outcome = remote.read_range("k.log", size, 0..10, false).await;
    let read_failed_in = failing.elapsed();
    let Err(error) = outcome else {
        panic!("a read with the store down fails");
    };
    assert!(error.is_transient(), "{error}");
    assert!(read_failed_in < OUTAGE_ERROR_WITHIN, "{read_failed_in:?}");
    let failing = Instant::now();
    let outcome = remote
        .put_bytes("other.log", Bytes::from_static(b"x"))
        .await;
    let put_failed_in = failing.elapsed();
    let Err(error) = outcome else {
        panic!("a put with the store down fails");
    };
    assert!(error.is_transient(), "{error}");
    assert!(put_failed_in < OUTAGE_ERROR_WITHIN, "{put_failed_in:?}");
    let failing = Instant::now();
    assert!(remote.probe().await.is_err_and(|e| e.is_transient()));
    assert!(failing.elapsed() < OUTAGE_ERROR_WITHIN);

    let restarting = Instant::now();
    s3.start_again().expect("SeaweedFS starts again");
    let restarted_in = restarting.elapsed();
    let read = remote
        .read_range("k.log", size, CHUNK_BYTES - 5..CHUNK_BYTES + 5, false)
        .await
        .expect("the store is back with its data");
    assert!(read[..] == data[CHUNK_BYTES as usize - 5..CHUNK_BYTES as usize + 5]);
    remote
        .put_bytes("other.log", Bytes::from_static(b"x"))
        .await
        .expect("puts work again");
    println!(
        "SeaweedFS outage: {:.1} s (read failed in {:.2} s, put in {:.2} s, restart {:.1} s)",
        began.elapsed().as_secs_f64(),
        read_failed_in.as_secs_f64(),
        put_failed_in.as_secs_f64(),
        restarted_in.as_secs_f64()
    );
}
