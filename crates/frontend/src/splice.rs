//! Fetch responses without copying record bytes.
//!
//! `kafka-protocol` encodes a response into one contiguous buffer, which for Fetch means copying
//! every record batch (up to `fetch.max.bytes`, tens of MiB) once more after the store read it.
//! Instead, each non-empty `records` field is swapped for a 16-byte marker before encoding; the
//! small encoded skeleton is then cut at the markers and the real record bytes are put back as
//! chunks of their own, with the length prefix rewritten. The connection writes the chunks in
//! order, so the bytes on the wire are exactly what the plain encoder would have produced.
//!
//! Records the store returns as a slice of a segment file ([`millrace_store::Records::File`]: batches already
//! CRC-checked in this process) are never read into memory: the fetch handler leaves a *file
//! marker* in the partition's `records` and keeps the slice aside; here the marker becomes a
//! [`Chunk::File`], which the connection sends with `sendfile` (Kafka's zero-copy transfer).
//!
//! Markers are unique per response (a per-process random prefix plus the index) and are searched
//! in order, each after the previous one, in a skeleton that holds only names, numbers and the
//! markers, so a false match is not a practical concern; a missing marker is an error (the
//! connection is closed), never a wrong response.

use std::sync::OnceLock;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::FetchResponse;
use millrace_store::FileSlice;

/// One piece of a response, written in order.
#[derive(Debug, Clone)]
pub enum Chunk {
    /// Bytes in memory.
    Bytes(Bytes),
    /// Record batches sent from a segment file.
    File(FileSlice),
}

impl Chunk {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Chunk::Bytes(b) => b.len(),
            Chunk::File(f) => f.len,
        }
    }

    /// No bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Length of a marker in bytes.
const MARKER_LEN: usize = 16;
/// First Fetch version whose `records` is COMPACT_RECORDS (unsigned varint length + 1).
const FLEXIBLE_VERSION_MIN: i16 = 12;

fn marker_prefix() -> &'static [u8; 8] {
    static PREFIX: OnceLock<[u8; 8]> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let id = uuid::Uuid::new_v4().into_bytes();
        let mut p = [0u8; 8];
        p.copy_from_slice(&id[..8]);
        p
    })
}

fn marker(index: usize) -> Bytes {
    let mut m = BytesMut::with_capacity(MARKER_LEN);
    m.put_slice(marker_prefix());
    m.put_u64(index as u64);
    m.freeze()
}

/// The prefix of file markers: the splice markers' prefix with every bit flipped.
fn file_marker_prefix() -> [u8; 8] {
    marker_prefix().map(|b| !b)
}

/// What a fetch puts in a partition's `records` for the `index`th file slice of its response.
/// No real record set is this short (a batch is at least 61 bytes).
pub fn file_marker(index: usize) -> Bytes {
    let mut m = BytesMut::with_capacity(MARKER_LEN);
    m.put_slice(&file_marker_prefix());
    m.put_u64(index as u64);
    m.freeze()
}

/// The file slice a file marker stands for.
fn file_slice<'a>(records: &Bytes, files: &'a [FileSlice]) -> Option<&'a FileSlice> {
    if records.len() != MARKER_LEN || records.get(..8)? != file_marker_prefix() {
        return None;
    }
    let index = u64::from_be_bytes(records.get(8..)?.try_into().ok()?);
    files.get(usize::try_from(index).ok()?)
}

/// Bytes of record batches a partition's `records` carries (a file marker counts as its slice).
pub fn records_len(records: &Bytes, files: &[FileSlice]) -> usize {
    file_slice(records, files).map_or(records.len(), |f| f.len)
}

/// Takes the non-empty record blobs out of `response`, leaving markers in their place; a file
/// marker becomes its slice of `files`.
pub fn take_records(response: &mut FetchResponse, files: &[FileSlice]) -> Vec<Chunk> {
    let mut taken = Vec::new();
    for topic in &mut response.responses {
        for partition in &mut topic.partitions {
            if let Some(records) = partition.records.as_mut() {
                if !records.is_empty() {
                    let real = std::mem::replace(records, marker(taken.len()));
                    taken.push(match file_slice(&real, files) {
                        Some(slice) => Chunk::File(slice.clone()),
                        None => Chunk::Bytes(real),
                    });
                }
            }
        }
    }
    taken
}

/// Replaces every file marker in `response` with the bytes of its slice of `files`, read into
/// memory.
pub fn inline_records(response: &mut FetchResponse, files: &[FileSlice]) -> std::io::Result<()> {
    for topic in &mut response.responses {
        for partition in &mut topic.partitions {
            if let Some(records) = partition.records.as_mut() {
                if let Some(slice) = file_slice(records, files) {
                    *records = slice.read_to_bytes()?;
                }
            }
        }
    }
    Ok(())
}

fn varint(mut value: u64, out: &mut BytesMut) {
    while value >= 0x80 {
        out.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

/// Cuts `frame` (4-byte size + header + body, encoded with markers) at each marker and splices
/// `records` back in. Returns the chunks to write, in order.
pub fn splice(frame: Bytes, records: Vec<Chunk>, version: i16) -> Result<Vec<Chunk>, String> {
    if records.is_empty() {
        return Ok(vec![Chunk::Bytes(frame)]);
    }
    let old_prefix = if version >= FLEXIBLE_VERSION_MIN {
        1
    } else {
        4
    };
    let mut chunks = Vec::with_capacity(records.len() * 2 + 1);
    let mut total = frame.len().saturating_sub(4);
    let mut cursor = 0usize;
    for (index, real) in records.into_iter().enumerate() {
        let m = marker(index);
        let found = frame
            .get(cursor..)
            .and_then(|rest| rest.windows(MARKER_LEN).position(|w| w == &m[..]))
            .map(|p| p + cursor)
            .ok_or_else(|| format!("fetch response marker {index} not found"))?;
        let prefix_start = found
            .checked_sub(old_prefix)
            .filter(|&s| s >= cursor)
            .ok_or_else(|| format!("fetch response marker {index} has no length prefix"))?;
        let mut head = BytesMut::with_capacity(prefix_start - cursor + 10);
        head.put_slice(&frame[cursor..prefix_start]);
        if version >= FLEXIBLE_VERSION_MIN {
            varint(real.len() as u64 + 1, &mut head);
        } else {
            let len =
                i32::try_from(real.len()).map_err(|_| "records larger than 2 GiB".to_string())?;
            head.put_i32(len);
        }
        total =
            total - old_prefix - MARKER_LEN + (head.len() - (prefix_start - cursor)) + real.len();
        chunks.push(Chunk::Bytes(head.freeze()));
        chunks.push(real);
        cursor = found + MARKER_LEN;
    }
    chunks.push(Chunk::Bytes(frame.slice(cursor..)));
    // Rewrite the frame's size prefix, which lives in the first chunk (the head before the first
    // records, always in memory).
    let size = i32::try_from(total).map_err(|_| "fetch response larger than 2 GiB".to_string())?;
    let Some(Chunk::Bytes(first)) = chunks.first_mut() else {
        return Err("fetch response does not start in memory".to_string());
    };
    let mut with_size = BytesMut::from(&first[..]);
    with_size
        .get_mut(0..4)
        .ok_or_else(|| "fetch response shorter than its size prefix".to_string())?
        .copy_from_slice(&size.to_be_bytes());
    *first = with_size.freeze();
    Ok(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::{ResponseHeader, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn encode(response: &FetchResponse, version: i16) -> Bytes {
        let header = ResponseHeader::default().with_correlation_id(7);
        let hv = if version >= FLEXIBLE_VERSION_MIN {
            1
        } else {
            0
        };
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header.encode(&mut buf, hv).unwrap();
        response.encode(&mut buf, version).unwrap();
        let size = (buf.len() - 4) as i32;
        buf[0..4].copy_from_slice(&size.to_be_bytes());
        buf.freeze()
    }

    fn response(blobs: &[usize]) -> FetchResponse {
        let partitions = blobs
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                PartitionData::default()
                    .with_partition_index(i as i32)
                    .with_records(Some(Bytes::from(vec![(i as u8).wrapping_add(1); n])))
            })
            .collect();
        FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(partitions)])
    }

    /// The bytes the chunks put on the wire.
    fn join(chunks: &[Chunk]) -> Vec<u8> {
        chunks
            .iter()
            .flat_map(|c| match c {
                Chunk::Bytes(b) => b.to_vec(),
                Chunk::File(f) => f.read_to_bytes().unwrap().to_vec(),
            })
            .collect()
    }

    /// A partition whose records are a file slice goes out as the slice's bytes, exactly where
    /// the plain encoding has them; its length counts as the slice's.
    #[test]
    fn file_slices_splice_as_their_bytes() {
        use std::io::Write;
        let mut tmp = tempfile::tempfile().unwrap();
        let stored: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
        tmp.write_all(&stored).unwrap();
        let file = std::sync::Arc::new(tmp);
        let slice = FileSlice {
            file,
            position: 1_000,
            len: 20_000,
        };
        let real = Bytes::copy_from_slice(&stored[1_000..21_000]);
        for version in 4..=17 {
            let mut plain = response(&[300, 0, 1]);
            plain.responses[0].partitions[1].records = Some(real.clone());
            let mut marked = plain.clone();
            marked.responses[0].partitions[1].records = Some(file_marker(0));
            let files = [slice.clone()];
            let marker = marked.responses[0].partitions[1].records.clone().unwrap();
            assert_eq!(records_len(&marker, &files), 20_000);
            let records = take_records(&mut marked, &files);
            assert!(matches!(records[1], Chunk::File(_)));
            let chunks = splice(encode(&marked, version), records, version).unwrap();
            assert_eq!(
                join(&chunks),
                encode(&plain, version).to_vec(),
                "version {version}"
            );
        }
    }

    /// The spliced chunks are byte for byte the plain encoding, for every served version and for
    /// record sizes around the varint boundaries.
    #[test]
    fn splice_equals_plain_encoding() {
        for version in 4..=17 {
            for blobs in [
                vec![],
                vec![0],
                vec![5],
                vec![126, 127, 128],
                vec![16_383, 0, 16_384, 70_000],
            ] {
                let plain = encode(&response(&blobs), version);
                let mut marked = response(&blobs);
                let records = take_records(&mut marked, &[]);
                let chunks = splice(encode(&marked, version), records, version).unwrap();
                assert_eq!(
                    join(&chunks),
                    plain.to_vec(),
                    "version {version}, blobs {blobs:?}"
                );
            }
        }
    }
}
