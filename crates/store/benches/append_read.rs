//! Append and read throughput of the store next to raw `write()`/`read()` of the same bytes to a
//! file, in the same run (plain `std::time`, no criterion). Run: `cargo bench -p millrace-store`.
//! Optional env: `MILLRACE_BENCH_MIB` (data per case, default 256), `MILLRACE_BENCH_DIR`,
//! `MILLRACE_BENCH_ONLY` (`1KiB` or `1MiB`).

use std::fs::File;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use millrace_store::{FlushPolicy, LogConfig, ReadUpperBound, Store, StoreConfig, TopicPartition};

fn mib_per_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / d.as_secs_f64()
}

fn batches(batch_bytes: usize, total: usize) -> Vec<BytesMut> {
    // One record whose value makes the whole batch `batch_bytes` long (header 61 + record ~10).
    let value = batch_bytes.saturating_sub(61 + 12);
    let one = millrace_store::testing::encode_filler_batch(1, value, 1_700_000_000_000);
    (0..total / one.len()).map(|_| one.clone()).collect()
}

fn raw(dir: &std::path::Path, data: &[BytesMut], read_chunk: usize) -> (f64, f64) {
    let path = dir.join("raw.bin");
    let bytes: u64 = data.iter().map(|b| b.len() as u64).sum();
    let mut f = File::create(&path).expect("create");
    // Same input form as the store: owned buffers, each freed after its write.
    let owned: Vec<BytesMut> = data.to_vec();
    let t = Instant::now();
    for b in owned {
        f.write_all(&b).expect("write");
    }
    let w = mib_per_s(bytes, t.elapsed());
    // Not timed: push the data to disk so background writeback does not hit the next case.
    f.sync_all().expect("sync");
    drop(f);
    let mut f = File::open(&path).expect("open");
    let mut buf = vec![0u8; read_chunk];
    let mut total = 0u64;
    let t = Instant::now();
    loop {
        let n = f.read(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    let r = mib_per_s(total, t.elapsed());
    assert_eq!(total, bytes);
    std::fs::remove_file(&path).expect("rm");
    (w, r)
}

fn store(
    dir: &std::path::Path,
    data: &[BytesMut],
    policy: FlushPolicy,
    read_chunk: usize,
) -> (f64, f64) {
    let sdir = dir.join(format!("store-{policy:?}"));
    let config = StoreConfig {
        flush_policy: policy,
        ..StoreConfig::new(&sdir)
    };
    let s = Store::open(config).expect("open");
    let tp = TopicPartition::new("bench", 0);
    let log = s
        .create_partition(
            &tp,
            LogConfig::default(),
            millrace_store::TopicId::from_bytes([7; 16]),
        )
        .expect("create");
    let bytes: u64 = data.iter().map(|b| b.len() as u64).sum();
    let owned: Vec<BytesMut> = data.to_vec();
    let t = Instant::now();
    for b in owned {
        log.append(b, 0).expect("append");
    }
    let w = mib_per_s(bytes, t.elapsed());
    // Not timed: as for the raw file, get the data to disk before reading and the next case.
    let durable = log.log_end_offset();
    drop(s.shutdown());
    let s = Store::open(StoreConfig {
        flush_policy: policy,
        ..StoreConfig::new(&sdir)
    })
    .expect("reopen");
    let log = s.partition(&tp).expect("partition");
    assert_eq!(log.log_end_offset(), durable);
    let end = log.log_end_offset();
    let mut offset = 0;
    let mut total = 0u64;
    let t = Instant::now();
    while offset < end {
        let r = log
            .read(offset, read_chunk, ReadUpperBound::LogEnd, true)
            .expect("read");
        total += r.records.len() as u64;
        // Next offset: after the last batch returned.
        let mut pos = 0;
        let mut last = offset;
        while pos < r.records.len() {
            let h = millrace_store::batch::BatchHeader::parse(&r.records[pos..]).expect("header");
            last = h.last_offset();
            pos += h.total_size();
        }
        offset = last + 1;
    }
    let r = mib_per_s(total, t.elapsed());
    assert_eq!(total, bytes);
    drop(log);
    s.shutdown().expect("shutdown");
    drop(s);
    std::fs::remove_dir_all(&sdir).expect("rm");
    (w, r)
}

fn main() {
    let mib: usize = std::env::var("MILLRACE_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let base = std::env::var("MILLRACE_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    let dir = tempfile::tempdir_in(base).expect("tmp");
    println!("data per case: {mib} MiB, dir {}", dir.path().display());
    println!(
        "{:<10} {:>12} {:>12} {:>14} {:>14} {:>8} {:>14} {:>14}",
        "batch",
        "raw write",
        "raw read",
        "append(never)",
        "read(store)",
        "ratio",
        "append(batch)",
        "append(always)"
    );
    let only = std::env::var("MILLRACE_BENCH_ONLY").unwrap_or_default();
    for (label, size) in [("1 KiB", 1024usize), ("1 MiB", 1024 * 1024)] {
        if !only.is_empty() && !label.replace(' ', "").eq_ignore_ascii_case(&only) {
            continue;
        }
        let data = batches(size, mib * 1024 * 1024);
        let read_chunk = 1024 * 1024;
        // Alternate raw and store runs and keep the best of each: the machine may be shared.
        let (mut rw, mut rr, mut sw, mut sr) = (0f64, 0f64, 0f64, 0f64);
        for _ in 0..3 {
            let (w, r) = raw(dir.path(), &data, read_chunk);
            rw = rw.max(w);
            rr = rr.max(r);
            let (w, r) = store(dir.path(), &data, FlushPolicy::Never, read_chunk);
            sw = sw.max(w);
            sr = sr.max(r);
        }
        let (bw, _) = store(dir.path(), &data, FlushPolicy::Batch, read_chunk);
        let small: Vec<BytesMut> = data
            .iter()
            .take((data.len() / 16).max(1))
            .cloned()
            .collect();
        let (aw, _) = store(dir.path(), &small, FlushPolicy::Always, read_chunk);
        println!(
            "{label:<10} {rw:>9.0} MB/s {rr:>9.0} MB/s {sw:>11.0} MB/s {sr:>11.0} MB/s {:>7.0}% {bw:>11.0} MB/s {aw:>11.0} MB/s",
            100.0 * sw / rw
        );
    }
    println!(
        "(MB = MiB; raw and append(never)/read(store): best of 3 alternating runs; ratio = \
         append(never) / raw write; append(batch): one run; append(always): one run, 1/16 of the data)"
    );
}
