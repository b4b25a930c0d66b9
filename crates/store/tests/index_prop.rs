//! Goal: a lookup through the sparse offset index (what `read` does) finds the same batch as a
//! linear scan of the log, for random logs, index intervals, segment sizes and offsets — also
//! after the index files were deleted (or garbled) and rebuilt.

mod common;

use common::*;
use millrace_store::{FlushPolicy, LogConfig, ReadUpperBound};
use proptest::prelude::*;

fn containing(batches: &[(i64, i64)], offset: i64) -> (i64, i64) {
    *batches
        .iter()
        .find(|(b, l)| *b <= offset && offset <= *l)
        .expect("offset inside the log")
}

fn check_all(
    store: &millrace_store::Store,
    t: &millrace_store::TopicPartition,
    expected: &[(i64, i64)],
    offsets: &[i64],
) {
    let log = store.partition(t).expect("partition");
    let end = log.log_end_offset();
    for &o in offsets {
        let o = o.rem_euclid(end.max(1));
        let r = log.read(o, 1, ReadUpperBound::LogEnd, true).expect("read");
        let h = millrace_store::batch::validate_stored(&r.records).expect("one whole batch");
        assert_eq!(
            (h.base_offset, h.last_offset()),
            containing(expected, o),
            "offset {o}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn index_lookup_equals_linear_scan(
        batches in prop::collection::vec((1usize..6, 0usize..400), 1..120),
        interval in 1u32..2000,
        segment_bytes in 300u64..6000,
        offsets in prop::collection::vec(0i64..1_000_000, 1..40),
        garble in 0u8..3,
    ) {
        let dir = tempfile::tempdir().expect("tmp");
        let t = tp("prop", 0);
        let mut expected = Vec::new();
        {
            let store = open(dir.path(), FlushPolicy::Never);
            let log = store
                .create_partition(&t, LogConfig { index_interval_bytes: interval, segment_bytes, ..LogConfig::default() }, millrace_store::TopicId::from_bytes([7; 16]))
                .expect("create");
            for (i, (count, value_bytes)) in batches.iter().enumerate() {
                let b = millrace_store::testing::encode_filler_batch(*count, *value_bytes, i as i64);
                let info = log.append(b, 0).expect("append");
                expected.push((info.base_offset, info.last_offset));
            }
            check_all(&store, &t, &expected, &offsets);
            store.shutdown().expect("shutdown");
        }
        // Lose (or garble) every index file, then reopen cleanly and uncleanly.
        for unclean in [false, true] {
            let pdir = dir.path().join(t.to_string());
            for e in std::fs::read_dir(&pdir).expect("ls") {
                let p = e.expect("entry").path();
                if p.extension().is_some_and(|x| x == "index") {
                    match garble {
                        0 => std::fs::remove_file(&p).expect("rm"),
                        1 => std::fs::write(&p, [0u8, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 2]).expect("garble"),
                        _ => {
                            // Plausible but wrong: the first entry points one byte into a batch,
                            // the last entry stays right (so only a lookup can notice).
                            let mut b = std::fs::read(&p).expect("read");
                            if b.len() >= 16 {
                                b[7] = b[7].wrapping_add(1);
                                std::fs::write(&p, b).expect("write");
                            }
                        }
                    }
                }
            }
            let store = open(dir.path(), FlushPolicy::Never);
            check_all(&store, &t, &expected, &offsets);
            if unclean {
                drop(store);
            } else {
                store.shutdown().expect("shutdown");
            }
        }
    }
}
