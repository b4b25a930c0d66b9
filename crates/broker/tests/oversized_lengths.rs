//! Goal: no length read from the wire (array count, string or bytes length, in the request header
//! or body) can make the broker allocate for bytes that are not there: the 23-byte frame
//! and one frame per advertised API key and version with an oversized count each close only their
//! own connection, while an rdkafka producer on the same broker keeps getting acknowledgements.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use common::*;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use rdkafka::producer::FutureRecord;

const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A compact (varint) length of 2^31 - 1.
const HUGE_VARINT: [u8; 5] = [0xFF, 0xFF, 0xFF, 0xFF, 0x07];

/// What kind of length a candidate field has on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Length {
    /// Array count: INT32, or an unsigned varint (count + 1) in flexible versions.
    Array,
    /// String length: INT16, or an unsigned varint (length + 1) in flexible versions.
    String,
}

/// One request body whose first length-prefixed field claims far more than the frame holds.
struct Oversized {
    field: &'static str,
    body: BytesMut,
    /// Runs the request type's own decoder on `body`: `true` if it accepts it (it must not).
    decodes: Box<dyn Fn() -> bool>,
}

/// Encodes `R` with the field set by `set` at length 0 and length 1, finds the field's length on
/// the wire (the first byte where the two encodings differ), and replaces it with a huge one.
/// `None` when the field does not exist at `version`.
fn oversize<R: Encodable + Decodable + Default>(
    version: i16,
    flexible: bool,
    field: &'static str,
    kind: Length,
    set: impl Fn(&mut R, usize),
) -> Option<Oversized> {
    let encode = |n: usize| {
        let mut request = R::default();
        set(&mut request, n);
        let mut buf = BytesMut::new();
        request.encode(&mut buf, version).ok().map(|()| buf)
    };
    let (empty, one) = (encode(0)?, encode(1)?);
    let at = empty.iter().zip(one.iter()).position(|(a, b)| a != b)?;
    let (start, width, huge): (usize, usize, &[u8]) = match (flexible, kind) {
        (true, _) => (at, 1, &HUGE_VARINT),
        (false, Length::Array) => (at.checked_sub(3)?, 4, &[0x7F, 0xFF, 0xFF, 0xFF]),
        (false, Length::String) => (at.checked_sub(1)?, 2, &[0x7F, 0xFF]),
    };
    let mut body = BytesMut::new();
    body.put_slice(one.get(..start)?);
    body.put_slice(huge);
    body.put_slice(one.get(start + width..)?);
    let frozen = body.clone().freeze();
    let decodes = Box::new(move || R::decode(&mut frozen.clone(), version).is_ok());
    Some(Oversized {
        field,
        body,
        decodes,
    })
}

fn array<R: Encodable + Decodable + Default, T: Default + Clone>(
    v: i16,
    flexible: bool,
    field: &'static str,
    set: impl Fn(&mut R, Vec<T>),
) -> Option<Oversized> {
    oversize(v, flexible, field, Length::Array, |r: &mut R, n| {
        set(r, vec![T::default(); n])
    })
}

fn string<R: Encodable + Decodable + Default>(
    v: i16,
    flexible: bool,
    field: &'static str,
    set: impl Fn(&mut R, StrBytes),
) -> Option<Oversized> {
    oversize(v, flexible, field, Length::String, |r: &mut R, n| {
        set(r, StrBytes::from_string("a".repeat(n)))
    })
}

/// The first field of `key`'s request at `version` that can carry an oversized length: its
/// top-level array where the version has one, else a string. `None` for a body without any
/// length-prefixed field (the header's client id is oversized instead).
// A table with one arm per Kafka API: split, it would no longer read as one list.
#[allow(clippy::too_many_lines)]
fn oversized_body(key: ApiKey, v: i16) -> Option<Oversized> {
    let f = key.request_header_version(v) >= 2;
    match key {
        ApiKey::Produce => array(v, f, "topic_data", |r: &mut ProduceRequest, x| {
            r.topic_data = x
        }),
        ApiKey::Fetch => array(v, f, "topics", |r: &mut FetchRequest, x| r.topics = x),
        ApiKey::ListOffsets => array(v, f, "topics", |r: &mut ListOffsetsRequest, x| r.topics = x),
        ApiKey::Metadata => array(v, f, "topics", |r: &mut MetadataRequest, x| {
            r.topics = Some(x)
        }),
        ApiKey::FindCoordinator => array(
            v,
            f,
            "coordinator_keys",
            |r: &mut FindCoordinatorRequest, x| r.coordinator_keys = x,
        )
        .or_else(|| string(v, f, "key", |r: &mut FindCoordinatorRequest, x| r.key = x)),
        ApiKey::ApiVersions => string(
            v,
            f,
            "client_software_name",
            |r: &mut ApiVersionsRequest, x| r.client_software_name = x,
        ),
        ApiKey::CreateTopics => array(v, f, "topics", |r: &mut CreateTopicsRequest, x| {
            r.topics = x
        }),
        ApiKey::DeleteTopics => array(v, f, "topic_names", |r: &mut DeleteTopicsRequest, x| {
            r.topic_names = x
        })
        .or_else(|| {
            array(v, f, "topics", |r: &mut DeleteTopicsRequest, x| {
                r.topics = x
            })
        }),
        ApiKey::CreatePartitions => array(v, f, "topics", |r: &mut CreatePartitionsRequest, x| {
            r.topics = x
        }),
        ApiKey::InitProducerId => string(
            v,
            f,
            "transactional_id",
            |r: &mut InitProducerIdRequest, x| r.transactional_id = Some(x.into()),
        ),
        ApiKey::DescribeConfigs => array(v, f, "resources", |r: &mut DescribeConfigsRequest, x| {
            r.resources = x
        }),
        ApiKey::AlterConfigs => array(v, f, "resources", |r: &mut AlterConfigsRequest, x| {
            r.resources = x
        }),
        ApiKey::IncrementalAlterConfigs => array(
            v,
            f,
            "resources",
            |r: &mut IncrementalAlterConfigsRequest, x| r.resources = x,
        ),
        ApiKey::DeleteRecords => array(v, f, "topics", |r: &mut DeleteRecordsRequest, x| {
            r.topics = x
        }),
        ApiKey::OffsetForLeaderEpoch => {
            array(v, f, "topics", |r: &mut OffsetForLeaderEpochRequest, x| {
                r.topics = x
            })
        }
        ApiKey::DescribeLogDirs => array(v, f, "topics", |r: &mut DescribeLogDirsRequest, x| {
            r.topics = Some(x)
        }),
        ApiKey::AlterReplicaLogDirs => {
            array(v, f, "dirs", |r: &mut AlterReplicaLogDirsRequest, x| {
                r.dirs = x
            })
        }
        ApiKey::DescribeProducers => {
            array(v, f, "topics", |r: &mut DescribeProducersRequest, x| {
                r.topics = x
            })
        }
        ApiKey::DescribeTopicPartitions => array(
            v,
            f,
            "topics",
            |r: &mut DescribeTopicPartitionsRequest, x| r.topics = x,
        ),
        // Booleans and an int8 only: the header's client id carries the oversized length.
        ApiKey::DescribeCluster => None,
        // One int32 (the broker id): the header's client id, as above.
        ApiKey::UnregisterBroker => None,
        ApiKey::DescribeQuorum => array(v, f, "topics", |r: &mut DescribeQuorumRequest, x| {
            r.topics = x
        }),
        // v0 has no field at all (the header's client id then); v1 an int8 array.
        ApiKey::ListConfigResources => array(
            v,
            f,
            "resource_types",
            |r: &mut ListConfigResourcesRequest, x| r.resource_types = x,
        ),
        ApiKey::OffsetCommit => array(v, f, "topics", |r: &mut OffsetCommitRequest, x| {
            r.topics = x
        }),
        ApiKey::OffsetFetch => array(v, f, "topics", |r: &mut OffsetFetchRequest, x| {
            r.topics = Some(x)
        })
        .or_else(|| array(v, f, "groups", |r: &mut OffsetFetchRequest, x| r.groups = x)),
        ApiKey::JoinGroup => array(v, f, "protocols", |r: &mut JoinGroupRequest, x| {
            r.protocols = x
        }),
        ApiKey::Heartbeat => string(v, f, "group_id", |r: &mut HeartbeatRequest, x| {
            r.group_id = x.into()
        }),
        ApiKey::LeaveGroup => array(v, f, "members", |r: &mut LeaveGroupRequest, x| {
            r.members = x
        })
        .or_else(|| {
            string(v, f, "group_id", |r: &mut LeaveGroupRequest, x| {
                r.group_id = x.into()
            })
        }),
        ApiKey::SyncGroup => array(v, f, "assignments", |r: &mut SyncGroupRequest, x| {
            r.assignments = x
        }),
        ApiKey::DescribeGroups => array(v, f, "groups", |r: &mut DescribeGroupsRequest, x| {
            r.groups = x
        }),
        ApiKey::ListGroups => array(v, f, "states_filter", |r: &mut ListGroupsRequest, x| {
            r.states_filter = x
        }),
        ApiKey::DeleteGroups => array(v, f, "groups_names", |r: &mut DeleteGroupsRequest, x| {
            r.groups_names = x
        }),
        ApiKey::OffsetDelete => array(v, f, "topics", |r: &mut OffsetDeleteRequest, x| {
            r.topics = x
        }),
        ApiKey::ElectLeaders => array(
            v,
            f,
            "topic_partitions",
            |r: &mut ElectLeadersRequest, x| r.topic_partitions = Some(x),
        ),
        ApiKey::AlterPartitionReassignments => array(
            v,
            f,
            "topics",
            |r: &mut AlterPartitionReassignmentsRequest, x| r.topics = x,
        ),
        ApiKey::ListPartitionReassignments => array(
            v,
            f,
            "topics",
            |r: &mut ListPartitionReassignmentsRequest, x| r.topics = Some(x),
        ),
        ApiKey::ConsumerGroupHeartbeat => string(
            v,
            f,
            "group_id",
            |r: &mut ConsumerGroupHeartbeatRequest, x| r.group_id = x.into(),
        ),
        ApiKey::ConsumerGroupDescribe => array(
            v,
            f,
            "group_ids",
            |r: &mut ConsumerGroupDescribeRequest, x| r.group_ids = x,
        ),
        ApiKey::ShareGroupHeartbeat => {
            string(v, f, "group_id", |r: &mut ShareGroupHeartbeatRequest, x| {
                r.group_id = x.into()
            })
        }
        ApiKey::ShareGroupDescribe => {
            array(v, f, "group_ids", |r: &mut ShareGroupDescribeRequest, x| {
                r.group_ids = x
            })
        }
        ApiKey::ShareFetch => array(v, f, "topics", |r: &mut ShareFetchRequest, x| r.topics = x),
        ApiKey::ShareAcknowledge => array(v, f, "topics", |r: &mut ShareAcknowledgeRequest, x| {
            r.topics = x
        }),
        ApiKey::InitializeShareGroupState => array(
            v,
            f,
            "topics",
            |r: &mut InitializeShareGroupStateRequest, x| r.topics = x,
        ),
        ApiKey::ReadShareGroupState => {
            array(v, f, "topics", |r: &mut ReadShareGroupStateRequest, x| {
                r.topics = x
            })
        }
        ApiKey::WriteShareGroupState => {
            array(v, f, "topics", |r: &mut WriteShareGroupStateRequest, x| {
                r.topics = x
            })
        }
        ApiKey::DeleteShareGroupState => {
            array(v, f, "topics", |r: &mut DeleteShareGroupStateRequest, x| {
                r.topics = x
            })
        }
        ApiKey::ReadShareGroupStateSummary => array(
            v,
            f,
            "topics",
            |r: &mut ReadShareGroupStateSummaryRequest, x| r.topics = x,
        ),
        ApiKey::DescribeShareGroupOffsets => array(
            v,
            f,
            "groups",
            |r: &mut DescribeShareGroupOffsetsRequest, x| r.groups = x,
        ),
        ApiKey::AlterShareGroupOffsets => array(
            v,
            f,
            "topics",
            |r: &mut AlterShareGroupOffsetsRequest, x| r.topics = x,
        ),
        ApiKey::DeleteShareGroupOffsets => array(
            v,
            f,
            "topics",
            |r: &mut DeleteShareGroupOffsetsRequest, x| r.topics = x,
        ),
        ApiKey::SaslHandshake => string(v, f, "mechanism", |r: &mut SaslHandshakeRequest, x| {
            r.mechanism = x
        }),
        // BYTES: an INT32 length (a varint in flexible versions), as an array count is.
        ApiKey::SaslAuthenticate => oversize(
            v,
            f,
            "auth_bytes",
            Length::Array,
            |r: &mut SaslAuthenticateRequest, n| r.auth_bytes = bytes::Bytes::from(vec![0; n]),
        ),
        ApiKey::DescribeUserScramCredentials => array(
            v,
            f,
            "users",
            |r: &mut DescribeUserScramCredentialsRequest, x| r.users = Some(x),
        ),
        ApiKey::AlterUserScramCredentials => array(
            v,
            f,
            "deletions",
            |r: &mut AlterUserScramCredentialsRequest, x| r.deletions = x,
        ),
        ApiKey::DescribeClientQuotas => array(
            v,
            f,
            "components",
            |r: &mut DescribeClientQuotasRequest, x| r.components = x,
        ),
        ApiKey::AlterClientQuotas => {
            array(v, f, "entries", |r: &mut AlterClientQuotasRequest, x| {
                r.entries = x
            })
        }
        ApiKey::CreateAcls => array(v, f, "creations", |r: &mut CreateAclsRequest, x| {
            r.creations = x
        }),
        ApiKey::DescribeAcls => string(
            v,
            f,
            "resource_name_filter",
            |r: &mut DescribeAclsRequest, x| r.resource_name_filter = Some(x),
        ),
        ApiKey::DeleteAcls => array(v, f, "filters", |r: &mut DeleteAclsRequest, x| {
            r.filters = x
        }),
        ApiKey::AddPartitionsToTxn => array(
            v,
            f,
            "v3_and_below_topics",
            |r: &mut AddPartitionsToTxnRequest, x| r.v3_and_below_topics = x,
        ),
        ApiKey::AddOffsetsToTxn => string(
            v,
            f,
            "transactional_id",
            |r: &mut AddOffsetsToTxnRequest, x| r.transactional_id = x.into(),
        ),
        ApiKey::EndTxn => string(v, f, "transactional_id", |r: &mut EndTxnRequest, x| {
            r.transactional_id = x.into()
        }),
        ApiKey::TxnOffsetCommit => array(v, f, "topics", |r: &mut TxnOffsetCommitRequest, x| {
            r.topics = x
        }),
        ApiKey::DescribeTransactions => array(
            v,
            f,
            "transactional_ids",
            |r: &mut DescribeTransactionsRequest, x| r.transactional_ids = x,
        ),
        ApiKey::ListTransactions => array(
            v,
            f,
            "state_filters",
            |r: &mut ListTransactionsRequest, x| r.state_filters = x,
        ),
        ApiKey::WriteTxnMarkers => array(v, f, "markers", |r: &mut WriteTxnMarkersRequest, x| {
            r.markers = x
        }),
        other => panic!("{other:?} is advertised but this test has no oversized frame for it"),
    }
}

/// `[len][header][body]`; with `body = None` the header's client id claims 32,767 bytes instead.
fn oversized_frame(key: ApiKey, version: i16, body: Option<&[u8]>) -> BytesMut {
    let mut payload = BytesMut::new();
    payload.put_i16(key as i16);
    payload.put_i16(version);
    payload.put_i32(7);
    match body {
        Some(body) => {
            payload.put_i16(5);
            payload.put_slice(b"probe");
            if key.request_header_version(version) >= 2 {
                payload.put_u8(0); // no tagged fields
            }
            payload.put_slice(body);
        }
        None => {
            payload.put_i16(i16::MAX);
            payload.put_slice(b"probe");
        }
    }
    length_prefixed(&payload)
}

#[test]
fn every_advertised_key_has_an_oversized_frame_builder() {
    // Keeps this file in step with versions.rs: a key added there without a case here fails, and
    // so does a builder whose frame the decoder would accept.
    for range in millrace_frontend::versions::ADVERTISED {
        for version in range.min..=range.max {
            if let Some(o) = oversized_body(range.key, version) {
                // The frame is refused by the decoder itself (with the bounds check, an error
                // instead of an allocation); without the oversized length it would decode.
                assert!(
                    !(o.decodes)(),
                    "{:?} v{version}: the oversized {} decoded",
                    range.key,
                    o.field
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_23_byte_metadata_frame_closes_only_its_connection() {
    let broker = Broker::start();
    // Metadata v1, correlation id 1, client id "probe", topic count 0x7fffffff (issue 11).
    let frame = hex("000000130003000100000001000570726f62657fffffff");
    assert_eq!(frame.len(), 23);
    for round in 0..3 {
        let mut conn = RawConn::connect(broker.addr()).await;
        conn.write_all(&frame).await;
        conn.expect_closed(CLOSE_TIMEOUT, &format!("23-byte frame, round {round}"))
            .await;
        assert_broker_answers(broker.addr(), "after the 23-byte frame").await;
    }
    let mut broker = broker;
    assert!(
        broker.is_running(),
        "broker exited: {}",
        broker.stderr_tail(20)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_length_for_every_advertised_key_and_version_closes_only_its_connection() {
    let broker = Broker::start();
    let topic = unique_topic("oversized");
    ensure_topics(broker.addr(), &[&topic]).await;

    // A producer on its own connection keeps going while the hostile frames arrive.
    let stop = Arc::new(AtomicBool::new(false));
    let (bootstrap, topic2, stop2) = (broker.bootstrap(), topic.clone(), stop.clone());
    let producer_task = tokio::spawn(async move {
        let producer = producer_at(&bootstrap, &[("acks", "all")]);
        let (mut acked, mut failures) = (0i64, Vec::new());
        while !stop2.load(Ordering::Relaxed) {
            let value = format!("steady-{acked}");
            let record: FutureRecord<'_, str, str> = FutureRecord::to(&topic2)
                .partition(0)
                .payload(value.as_str());
            match producer.send(record, Duration::from_secs(10)).await {
                Ok(d) if d.offset == acked => acked += 1,
                Ok(d) => failures.push(format!("record {acked} acknowledged at {}", d.offset)),
                Err((e, _)) => failures.push(format!("record {acked}: {e:?}")),
            }
        }
        (acked, failures)
    });

    let (mut sent, mut header_only) = (0usize, Vec::new());
    for range in millrace_frontend::versions::ADVERTISED {
        for version in range.min..=range.max {
            let body = oversized_body(range.key, version);
            let what = match &body {
                Some(o) => format!("{:?} v{version} with an oversized {}", range.key, o.field),
                None => {
                    header_only.push((range.key, version));
                    format!("{:?} v{version} with an oversized client id", range.key)
                }
            };
            let frame = oversized_frame(range.key, version, body.as_ref().map(|o| &o.body[..]));
            let mut conn = RawConn::connect(broker.addr()).await;
            conn.write_all(&frame).await;
            conn.expect_closed(CLOSE_TIMEOUT, &what).await;
            sent += 1;
        }
    }
    assert_broker_answers(broker.addr(), "after every oversized frame").await;

    stop.store(true, Ordering::Relaxed);
    let (acked, failures) = tokio::time::timeout(Duration::from_secs(30), producer_task)
        .await
        .expect("producer task stops")
        .expect("producer task did not panic");
    assert!(failures.is_empty(), "producer failures: {failures:?}");
    assert!(acked > 0, "the producer made no progress");
    // Only bodies without any length-prefixed field fall back to the header's client id, and
    // Produce v0-2, which the codec cannot encode (the broker refuses them on the version).
    let no_length_field = |key: ApiKey, version: i16| match key {
        ApiKey::DescribeCluster | ApiKey::UnregisterBroker => true,
        ApiKey::ListConfigResources => version < 1,
        ApiKey::ListGroups => version < 4,
        ApiKey::ApiVersions | ApiKey::Produce => version < 3,
        _ => false,
    };
    assert!(
        header_only.iter().all(|(k, v)| no_length_field(*k, *v)),
        "fell back to the header for {header_only:?}"
    );
    assert!(sent > 150, "only {sent} frames sent");
    let mut broker = broker;
    assert!(
        broker.is_running(),
        "broker exited: {}",
        broker.stderr_tail(20)
    );
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex digit"))
        .collect()
}
