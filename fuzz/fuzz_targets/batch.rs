//! Fuzz target: the store's record batch validator, its produce-time record walk and the record
//! decoder through the public API (`millrace_store::batch::validate`, `validate_stored`,
//! `validator::check_client_batch`, `records::decode_records`). Checks: no panic, no abort, and
//! what the validators accept stays within the input.

#![no_main]

use libfuzzer_sys::fuzz_target;
use millrace_store::validator::{self, RecordRules, TimestampWindow};
use millrace_store::{batch, records};

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = batch::validate(data) {
        assert!(
            header.total_size() <= data.len(),
            "validated past the input"
        );
    }
    if let Ok(header) = batch::validate_stored(data) {
        assert!(
            header.total_size() <= data.len(),
            "validated past the input"
        );
    }
    // The record walk runs on any parsable header, CRC or not (the fuzzer cannot forge CRC-32C),
    // with both rules on.
    if let Ok(header) = batch::BatchHeader::parse(data) {
        let rules = RecordRules {
            require_keys: true,
            timestamps: Some(TimestampWindow {
                now_ms: 1_700_000_000_000,
                before_max_ms: 3_600_000,
                after_max_ms: 3_600_000,
            }),
        };
        if validator::check_client_batch(data, &header, &rules).is_ok() {
            assert!(header.total_size() <= data.len(), "walked past the input");
        }
    }
    // The decoder runs whether or not the CRC holds, so the fuzzer reaches the records without
    // having to forge CRC-32C.
    if let Ok((header, decoded)) = records::decode_records(data) {
        assert!(
            decoded.len() <= usize::try_from(header.record_count).unwrap_or(0),
            "more records than the header declares"
        );
    }
});
