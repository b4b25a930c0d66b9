//! Fuzz target: the store's record batch validator and record decoder through its public API
//! (`millrace_store::batch::validate`, `validate_stored`, `records::decode_records`). Checks: no
//! panic, no abort, and what the validator accepts stays within the input.

#![no_main]

use libfuzzer_sys::fuzz_target;
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
    // The decoder runs whether or not the CRC holds, so the fuzzer reaches the records without
    // having to forge CRC-32C.
    if let Ok((header, decoded)) = records::decode_records(data) {
        assert!(
            decoded.len() <= usize::try_from(header.record_count).unwrap_or(0),
            "more records than the header declares"
        );
    }
});
