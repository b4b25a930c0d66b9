//! Goal: a decompression bomb — one record holding 1 GiB of zeros, compressed with each codec
//! clients use (gzip, snappy in the Java client's xerial framing, lz4, zstd) — is refused with
//! CORRUPT_MESSAGE while the broker's peak RSS stays under 100 MB above idle; nothing is appended
//! and the partition keeps taking valid records at the next offset.
//!
//! The topic's `max.message.bytes` is raised to 64 MiB so that every bomb (snappy's is ~50 MB)
//! reaches the record walk instead of being refused for its size.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use millrace_store::{batch, records::write_varlong};

const MIB: usize = 1024 * 1024;
/// Zeros in the bomb's one record value.
const BOMB_VALUE_BYTES: u64 = 1 << 30;
/// The bound under test: peak RSS above idle.
const PEAK_ABOVE_IDLE_MAX: usize = 100 * 1_000_000;
/// Kafka's CORRUPT_MESSAGE.
const CORRUPT_MESSAGE: i16 = 2;
/// Xerial framing (the Java client's snappy): magic, version 1, compatible version 1.
const XERIAL_HEADER: &[u8] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";
const XERIAL_BLOCK_BYTES: usize = 32 * 1024;

/// The uncompressed record stream of one record (no key, `value_len` zeros, no headers).
fn record_stream(value_len: u64) -> impl Read {
    let mut body = BytesMut::new();
    body.put_u8(0); // attributes
    write_varlong(&mut body, 0); // timestamp delta
    write_varlong(&mut body, 0); // offset delta
    write_varlong(&mut body, -1); // null key
    write_varlong(
        &mut body,
        i64::try_from(value_len).expect("value length fits"),
    );
    let body_len = body.len() as u64 + value_len + 1; // + the header count
    let mut head = BytesMut::new();
    write_varlong(&mut head, i64::try_from(body_len).expect("fits"));
    head.put_slice(&body);
    std::io::Cursor::new(head.freeze())
        .chain(std::io::repeat(0).take(value_len))
        .chain(&[0u8][..]) // no headers
}

/// `stream` compressed with Kafka codec `codec`.
fn compress(codec: u8, mut stream: impl Read) -> Vec<u8> {
    let mut out = Vec::new();
    match codec {
        1 => {
            flate2::read::GzEncoder::new(stream, flate2::Compression::best())
                .read_to_end(&mut out)
                .expect("gzip");
        }
        2 => {
            out.extend_from_slice(XERIAL_HEADER);
            let mut block = vec![0u8; XERIAL_BLOCK_BYTES];
            let mut encoder = snap::raw::Encoder::new();
            loop {
                let mut filled = 0;
                while filled < block.len() {
                    let n = stream.read(&mut block[filled..]).expect("read");
                    if n == 0 {
                        break;
                    }
                    filled += n;
                }
                if filled == 0 {
                    break;
                }
                let c = encoder.compress_vec(&block[..filled]).expect("snappy");
                out.extend_from_slice(&u32::try_from(c.len()).expect("fits").to_be_bytes());
                out.extend_from_slice(&c);
            }
        }
        3 => {
            let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::new());
            std::io::copy(&mut stream, &mut enc).expect("lz4");
            out = enc.finish().expect("lz4");
        }
        4 => {
            out = zstd::stream::encode_all(stream, 3).expect("zstd");
        }
        _ => unreachable!("codec {codec}"),
    }
    out
}

/// A v2 batch of `count` records whose (compressed) record bytes are `payload`.
fn batch_around(payload: &[u8], count: i32, codec: u8) -> Bytes {
    let ts = now_ms();
    let mut b = BytesMut::with_capacity(61 + payload.len());
    b.put_i64(0);
    b.put_i32(i32::try_from(49 + payload.len()).expect("fits"));
    b.put_i32(-1); // partition leader epoch
    b.put_i8(2);
    b.put_u32(0); // crc, below
    b.put_i16(i16::from(codec));
    b.put_i32(count - 1);
    b.put_i64(ts);
    b.put_i64(ts);
    b.put_i64(-1); // producer id
    b.put_i16(-1);
    b.put_i32(-1);
    b.put_i32(count);
    b.put_slice(payload);
    batch::rewrite_crc(&mut b);
    b.freeze()
}

async fn produce(conn: &mut RawConn, topic: &str, batch: Bytes) -> (i16, i64, Option<String>) {
    let response = conn.request(9, &produce_request(topic, 0, batch, -1)).await;
    let p = &response.responses[0].partition_responses[0];
    (
        p.error_code,
        p.base_offset,
        p.error_message.as_ref().map(|m| m.to_string()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decompression_bombs_are_refused_in_bounded_memory() {
    let max = format!("message.max.bytes={}", 64 * MIB);
    let broker = Broker::start_with(&[&max]);
    let topic = unique_topic("bomb");
    ensure_topics(broker.addr(), &[&topic]).await;
    let mut conn = RawConn::connect(broker.addr()).await;

    // Warm up every codec with a small valid batch, so that idle RSS includes its code and tables.
    let mut next_offset = 0i64;
    for codec in 1..=4u8 {
        let payload = compress(codec, record_stream(1000));
        let (code, base, msg) = produce(&mut conn, &topic, batch_around(&payload, 1, codec)).await;
        assert_eq!(
            (code, base),
            (0, next_offset),
            "warm-up codec {codec}: {msg:?}"
        );
        next_offset += 1;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (idle, _) = rss_and_peak(broker.pid());

    for codec in 1..=4u8 {
        let payload = compress(codec, record_stream(BOMB_VALUE_BYTES));
        let bomb = batch_around(&payload, 1, codec);
        let (code, _, msg) = produce(&mut conn, &topic, bomb).await;
        assert_eq!(
            code,
            CORRUPT_MESSAGE,
            "codec {codec} bomb ({} compressed bytes): {msg:?}",
            payload.len()
        );
        let (_, peak) = rss_and_peak(broker.pid());
        eprintln!(
            "codec {codec}: {} compressed bytes refused ({msg:?}); peak RSS {} MB above idle",
            payload.len(),
            peak.saturating_sub(idle) / 1_000_000
        );
        assert!(
            peak.saturating_sub(idle) < PEAK_ABOVE_IDLE_MAX,
            "codec {codec}: peak RSS {peak} is more than {PEAK_ABOVE_IDLE_MAX} above idle {idle}"
        );
        // Nothing appended: the next valid record takes the next offset.
        let valid = batch_around(&compress(codec, record_stream(10)), 1, codec);
        let (code, base, msg) = produce(&mut conn, &topic, valid).await;
        assert_eq!(
            (code, base),
            (0, next_offset),
            "after codec {codec}: {msg:?}"
        );
        next_offset += 1;
    }
    std::io::stderr().flush().ok();
}
