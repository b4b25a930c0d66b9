//! Fuzz target: the store's decompressors (gzip, snappy in both framings, lz4, zstd, and unknown
//! codec ids) through `millrace_store::compression::decompress_limited`. The first input byte
//! picks the codec, the rest is the payload. Checks: no panic, no abort, and the output limit
//! holds whatever the input claims.

#![no_main]

use libfuzzer_sys::fuzz_target;
use millrace_store::compression::{decompress_limited, DecompressError};

/// Small enough that a bomb costs milliseconds, large enough for real batches' records.
const OUTPUT_LIMIT_BYTES: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, payload)) = data.split_first() else {
        return;
    };
    // Ids 0-4 are the codecs; 5-7 are unknown ids a batch's attribute bits can still carry.
    let codec = selector % 8;
    match decompress_limited(codec, payload, OUTPUT_LIMIT_BYTES) {
        Ok(out) => assert!(out.len() <= OUTPUT_LIMIT_BYTES, "limit exceeded"),
        Err(DecompressError::UnknownCodec(id)) => assert!(id > 4, "codec {id} is known"),
        Err(_) => {}
    }
});
