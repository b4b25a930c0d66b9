//! The `__share_group_state` codec: byte-compatible with Kafka 4.4, round trips, and corrupt
//! input is an error, never a panic.

use super::*;

// Test vectors made by Kafka 4.4.0's own generated classes: a throwaway Java program (not
// committed) built `ShareSnapshotKey/Value` and `ShareUpdateKey/Value` with the values of
// `kafka_key()` and the `*_value()` functions below, wrapped them in `CoordinatorRecord`s and
// serialized them with `org.apache.kafka.coordinator.share.ShareCoordinatorRecordSerde`
// (`serializeKey` / `serializeValue`), run against the jars in
// compat-tests/.work/kafka-ref/libs (kafka-share-coordinator-4.4.0.jar, kafka-clients-4.4.0.jar,
// kafka-coordinator-common-4.4.0.jar, kafka-server-common-4.4.0.jar). The serde's own
// `deserialize` read the snapshot back equal. Topic id = Uuid(0x0102030405060708,
// 0x090a0b0c0d0e0f10).
const KAFKA_SNAPSHOT_KEY: &str = "0000000267310102030405060708090a0b0c0d0e0f1000000007";
const KAFKA_SNAPSHOT_VALUE: &str = "000000000002000000010000000500000000000000640000018bcfe568000000018bcfe56be8030000000000000064000000000000006802000100000000000000006900000000000000690000030001000400000003";
const KAFKA_SNAPSHOT_DEFAULT_VALUE: &str =
    "0000000000000000000000000000ffffffffffffffff000000000000000500000000000000060100";
const KAFKA_UPDATE_KEY: &str = "0001000267310102030405060708090a0b0c0d0e0f1000000007";
const KAFKA_UPDATE_VALUE: &str =
    "00000000000200000005ffffffffffffffff02000000000000006a000000000000006e0400050001000400000007";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn kafka_key() -> ShareStateKey {
    ShareStateKey {
        group_id: "g1".into(),
        topic_id: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16],
        partition: 7,
    }
}

fn batch(first: i64, last: i64, state: u8, delivery_count: i16) -> StateBatch {
    StateBatch {
        first,
        last,
        state,
        delivery_count,
    }
}

fn snapshot_value() -> ShareSnapshotValue {
    ShareSnapshotValue {
        snapshot_epoch: 2,
        state_epoch: 1,
        leader_epoch: 5,
        start_offset: 100,
        delivery_complete_count: 3,
        create_timestamp_ms: 1_700_000_000_000,
        write_timestamp_ms: 1_700_000_001_000,
        state_batches: vec![batch(100, 104, 2, 1), batch(105, 105, 0, 3)],
    }
}

fn snapshot_default_value() -> ShareSnapshotValue {
    ShareSnapshotValue {
        snapshot_epoch: 0,
        state_epoch: 0,
        leader_epoch: 0,
        start_offset: -1,
        delivery_complete_count: -1,
        create_timestamp_ms: 5,
        write_timestamp_ms: 6,
        state_batches: vec![],
    }
}

fn update_value() -> ShareUpdateValue {
    ShareUpdateValue {
        snapshot_epoch: 2,
        leader_epoch: 5,
        start_offset: -1,
        delivery_complete_count: 7,
        state_batches: vec![batch(106, 110, 4, 5)],
    }
}

fn encoded(record: &ShareStateRecord) -> (String, Option<String>) {
    let (k, v) = encode_record(record).expect("encode");
    (hex(&k), v.map(|v| hex(&v)))
}

#[test]
fn snapshot_bytes_match_kafka() {
    let record = ShareStateRecord::Snapshot(kafka_key(), snapshot_value());
    assert_eq!(
        encoded(&record),
        (KAFKA_SNAPSHOT_KEY.into(), Some(KAFKA_SNAPSHOT_VALUE.into()))
    );
    let decoded = decode_record(
        &unhex(KAFKA_SNAPSHOT_KEY),
        Some(&unhex(KAFKA_SNAPSHOT_VALUE)),
    )
    .expect("decode");
    assert_eq!(decoded, record);
}

#[test]
fn snapshot_with_default_delivery_complete_count_omits_the_tag() {
    let record = ShareStateRecord::Snapshot(kafka_key(), snapshot_default_value());
    assert_eq!(
        encoded(&record).1.as_deref(),
        Some(KAFKA_SNAPSHOT_DEFAULT_VALUE)
    );
    let decoded = decode_record(
        &unhex(KAFKA_SNAPSHOT_KEY),
        Some(&unhex(KAFKA_SNAPSHOT_DEFAULT_VALUE)),
    )
    .expect("decode");
    assert_eq!(decoded, record);
}

#[test]
fn update_bytes_match_kafka() {
    let record = ShareStateRecord::Update(kafka_key(), update_value());
    assert_eq!(
        encoded(&record),
        (KAFKA_UPDATE_KEY.into(), Some(KAFKA_UPDATE_VALUE.into()))
    );
    let decoded =
        decode_record(&unhex(KAFKA_UPDATE_KEY), Some(&unhex(KAFKA_UPDATE_VALUE))).expect("decode");
    assert_eq!(decoded, record);
}

#[test]
fn tombstone_is_the_snapshot_key_without_value() {
    let record = ShareStateRecord::Tombstone(kafka_key());
    assert_eq!(encoded(&record), (KAFKA_SNAPSHOT_KEY.into(), None));
    assert_eq!(
        decode_record(&unhex(KAFKA_SNAPSHOT_KEY), None).expect("decode"),
        record
    );
    assert!(matches!(
        decode_record(&unhex(KAFKA_UPDATE_KEY), None),
        Err(ShareError::CorruptRecord(_))
    ));
}

#[test]
fn unknown_tagged_fields_are_skipped() {
    // The update value with one extra tagged field (tag 9, 2 bytes) in its state batch and one
    // unknown top-level tag besides DeliveryCompleteCount.
    let mut v = BytesMut::new();
    v.put_i16(0);
    v.put_i32(2);
    v.put_i32(5);
    v.put_i64(-1);
    v.put_u8(2); // one batch
    v.put_i64(106);
    v.put_i64(110);
    v.put_u8(4);
    v.put_i16(5);
    v.put_slice(&[1, 9, 2, 0xaa, 0xbb]);
    v.put_slice(&[2, 0, 4, 0, 0, 0, 7, 3, 1, 0xcc]);
    let decoded = decode_record(&unhex(KAFKA_UPDATE_KEY), Some(&v)).expect("decode");
    assert_eq!(
        decoded,
        ShareStateRecord::Update(kafka_key(), update_value())
    );
}

#[test]
fn every_truncation_is_an_error() {
    for (key, value) in [
        (KAFKA_SNAPSHOT_KEY, KAFKA_SNAPSHOT_VALUE),
        (KAFKA_UPDATE_KEY, KAFKA_UPDATE_VALUE),
        (KAFKA_SNAPSHOT_KEY, KAFKA_SNAPSHOT_DEFAULT_VALUE),
    ] {
        let (key, value) = (unhex(key), unhex(value));
        for n in 0..key.len() {
            assert!(
                matches!(
                    decode_record(&key[..n], Some(&value)),
                    Err(ShareError::CorruptRecord(_))
                ),
                "key cut at {n}"
            );
        }
        for n in 0..value.len() {
            assert!(
                matches!(
                    decode_record(&key, Some(&value[..n])),
                    Err(ShareError::CorruptRecord(_))
                ),
                "value cut at {n}"
            );
        }
    }
}

#[test]
fn corrupt_input_is_an_error() {
    let key = unhex(KAFKA_UPDATE_KEY);
    let value = unhex(KAFKA_UPDATE_VALUE);
    let with = |i: usize, b: u8| {
        let mut v = value.clone();
        v[i] = b;
        v
    };
    // Unknown value version.
    assert!(matches!(
        decode_record(&key, Some(&with(1, 1))),
        Err(ShareError::CorruptRecord(_))
    ));
    // A batch count far past the bytes present is refused before allocating.
    let mut huge = value[..18].to_vec();
    huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert!(matches!(
        decode_record(&key, Some(&huge)),
        Err(ShareError::CorruptRecord(_))
    ));
    // A null array (compact length 0).
    assert!(matches!(
        decode_record(&key, Some(&with(18, 0))),
        Err(ShareError::CorruptRecord(_))
    ));
    // A varint that never ends.
    let mut endless = value[..18].to_vec();
    endless.extend_from_slice(&[0xff; 6]);
    assert!(matches!(
        decode_record(&key, Some(&endless)),
        Err(ShareError::CorruptRecord(_))
    ));
    // DeliveryCompleteCount with a wrong size.
    let mut bad_tag = value[..value.len() - 7].to_vec();
    bad_tag.extend_from_slice(&[1, 0, 2, 0, 7]);
    assert!(matches!(
        decode_record(&key, Some(&bad_tag)),
        Err(ShareError::CorruptRecord(_))
    ));
    // Trailing bytes.
    let mut trailing = value.clone();
    trailing.push(0);
    assert!(matches!(
        decode_record(&key, Some(&trailing)),
        Err(ShareError::CorruptRecord(_))
    ));
    // Keys: unknown record type, negative group id length, not UTF-8, trailing bytes.
    let mut k = key.clone();
    k[1] = 2;
    assert!(matches!(decode_key(&k), Err(ShareError::CorruptRecord(_))));
    let mut k = key.clone();
    k[2] = 0xff;
    assert!(matches!(decode_key(&k), Err(ShareError::CorruptRecord(_))));
    let mut k = key.clone();
    k[4] = 0xff;
    assert!(matches!(decode_key(&k), Err(ShareError::CorruptRecord(_))));
    let mut k = key.clone();
    k.push(1);
    assert!(matches!(decode_key(&k), Err(ShareError::CorruptRecord(_))));
}

#[test]
fn arbitrary_bytes_never_panic() {
    // A small deterministic fuzz: every value prefix with every byte flipped in turn.
    let key = unhex(KAFKA_SNAPSHOT_KEY);
    let value = unhex(KAFKA_SNAPSHOT_VALUE);
    for i in 0..value.len() {
        for b in [0x00, 0x01, 0x7f, 0x80, 0xff] {
            let mut v = value.clone();
            v[i] = b;
            let _ = decode_record(&key, Some(&v));
        }
    }
}

#[test]
fn round_trip_of_large_values() {
    let batches: Vec<StateBatch> = (0..1000)
        .map(|i| batch(i * 10, i * 10 + 4, (i % 3 * 2) as u8, (i % 7) as i16))
        .collect();
    let record = ShareStateRecord::Update(
        ShareStateKey {
            group_id: "g".repeat(300),
            topic_id: [0xab; 16],
            partition: i32::MAX,
        },
        ShareUpdateValue {
            snapshot_epoch: i32::MIN,
            leader_epoch: 9,
            start_offset: i64::MAX,
            delivery_complete_count: 0,
            state_batches: batches,
        },
    );
    let (k, v) = encode_record(&record).expect("encode");
    assert_eq!(decode_record(&k, v.as_deref()).expect("decode"), record);
    let too_long = ShareStateKey {
        group_id: "g".repeat(40_000),
        topic_id: [0; 16],
        partition: 0,
    };
    assert!(matches!(
        encode_key(0, &too_long, &mut BytesMut::new()),
        Err(ShareError::CorruptRecord(_))
    ));
}

#[test]
fn replay_folds_updates_into_the_last_snapshot() {
    let key = kafka_key();
    let mut first = snapshot_value();
    first.state_batches = vec![batch(100, 109, 0, 1)];
    let records = vec![
        ShareStateRecord::Snapshot(key.clone(), snapshot_default_value()),
        // A later snapshot replaces everything before it.
        ShareStateRecord::Snapshot(key.clone(), first),
        ShareStateRecord::Update(
            key.clone(),
            ShareUpdateValue {
                snapshot_epoch: 2,
                leader_epoch: 6,
                start_offset: 102,
                delivery_complete_count: 1,
                state_batches: vec![
                    batch(100, 101, 2, 1),
                    batch(103, 103, 2, 1),
                    batch(104, 105, 0, 2),
                ],
            },
        ),
    ];
    let state = replay(&records).expect("replay").expect("state");
    assert_eq!(state.start_offset, 102);
    assert_eq!(state.leader_epoch, 6);
    assert_eq!(state.state_epoch, 1);
    assert_eq!(state.delivery_complete_count, 1);
    assert_eq!(
        state.batches,
        vec![
            batch(102, 102, 0, 1),
            batch(103, 103, 2, 1),
            batch(104, 105, 0, 2),
            batch(106, 109, 0, 1)
        ]
    );

    let mut deleted = records.clone();
    deleted.push(ShareStateRecord::Tombstone(key.clone()));
    assert_eq!(replay(&deleted).expect("replay"), None);

    let orphan = vec![ShareStateRecord::Update(key, update_value())];
    assert!(matches!(replay(&orphan), Err(ShareError::CorruptRecord(_))));
}
