//! Goal: Envelope (key 58), the way a broker's HTTP API forwards a client's request to another
//! broker (decision 0075), is accepted only where Kafka accepts it: on the inter-broker listener.
//! There the wrapped request is answered inside the envelope; on a client listener the envelope
//! is refused with CLUSTER_AUTHORIZATION_FAILED and nothing inside it runs, so a client cannot
//! speak as another principal. An envelope inside an envelope is refused.

mod common;

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::{ApiVersionsRequest, EnvelopeRequest, ResponseHeader};
use kafka_protocol::protocol::{Decodable, StrBytes};

const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
const INVALID_REQUEST: i16 = 42;

/// An envelope for an ApiVersions v3 request as `User:alice`.
fn envelope(inner: Bytes) -> EnvelopeRequest {
    EnvelopeRequest::default()
        .with_request_data(inner)
        .with_request_principal(Some(Bytes::from_static(b"User:alice")))
        .with_client_host_address(Bytes::from_static(&[127, 0, 0, 1]))
}

fn api_versions_frame() -> Bytes {
    let request = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("envelope-test"))
        .with_client_software_version(StrBytes::from_static_str("1"));
    // The frame without its 4-byte size: header and body, as Envelope carries a request.
    frame(3, 7, &request).split_off(4).freeze()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelopes_are_served_only_on_the_inter_broker_listener() {
    let broker = Broker::start_with(&[
        "listeners=PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "inter.broker.listener.name=PLAINTEXT",
    ]);

    let mut inter_broker = RawConn::connect(broker.listener_addr("PLAINTEXT")).await;
    let answer = inter_broker
        .request(0, &envelope(api_versions_frame()))
        .await;
    assert_eq!(answer.error_code, 0, "{answer:?}");
    let mut data = answer.response_data.expect("the wrapped answer");
    let header = ResponseHeader::decode(&mut data, 0).expect("inner response header");
    assert_eq!(header.correlation_id, 7);
    let inner =
        kafka_protocol::messages::ApiVersionsResponse::decode(&mut data, 3).expect("inner answer");
    assert_eq!(inner.error_code, 0);
    assert!(!inner.api_keys.is_empty());

    let nested = frame(0, 8, &envelope(api_versions_frame()))
        .split_off(4)
        .freeze();
    let answer = inter_broker.request(0, &envelope(nested)).await;
    assert_eq!(
        answer.error_code, INVALID_REQUEST,
        "an envelope in an envelope"
    );

    let mut client = RawConn::connect(broker.listener_addr("EXTERNAL")).await;
    let answer = client.request(0, &envelope(api_versions_frame())).await;
    assert_eq!(
        answer.error_code, CLUSTER_AUTHORIZATION_FAILED,
        "an envelope on a client listener: {answer:?}"
    );
    assert!(answer.response_data.is_none());
}
