//! Goal: application RPCs reach the named node's handler with bounded time, and bad input on the
//! controller listener (garbage, oversized frames, a foreign voter set) closes only that
//! connection while the quorum keeps working.

mod common;

use std::time::{Duration, Instant};

use common::{fast, Cluster};
use millrace_quorum::RpcError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_reach_the_named_node_and_time_out_in_bounded_time() {
    let (mut c, listeners) = Cluster::new(&[1, 2, 3], &[], fast).await;
    c.start_all(listeners).await;
    c.agreed_leader(WAIT).await;
    let q1 = c.nodes[&1].q();
    let t = Duration::from_secs(5);
    assert_eq!(
        q1.call(2, b"hello".to_vec(), t).await.unwrap(),
        b"from:1:hello"
    );
    assert_eq!(q1.call(3, b"x".to_vec(), t).await.unwrap(), b"from:1:x");
    assert_eq!(q1.call(1, b"me".to_vec(), t).await.unwrap(), b"from:1:me");
    assert_eq!(
        q1.call(9, b"x".to_vec(), t).await,
        Err(RpcError::UnknownNode(9))
    );
    let too_big = vec![0u8; millrace_quorum::limits::APP_RPC_BYTES_MAX + 1];
    assert!(matches!(
        q1.call(2, too_big, t).await,
        Err(RpcError::TooLarge { .. })
    ));
    // The handler sleeps 5 s on "sleep": the call gives up after its own timeout.
    let t0 = Instant::now();
    let r = q1
        .call(2, b"sleep".to_vec(), Duration::from_millis(300))
        .await;
    assert_eq!(r, Err(RpcError::Timeout));
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    // A stopped node is unreachable, and fast.
    c.stop(3).await;
    let t0 = Instant::now();
    let r = c.nodes[&1].q().call(3, b"x".to_vec(), t).await;
    assert!(matches!(r, Err(RpcError::Unreachable(_))), "{r:?}");
    assert!(t0.elapsed() < Duration::from_secs(3));
    for id in [1, 2] {
        c.stop(id).await;
    }
}

/// Reads until the server closes the connection (bounded); returns the bytes it sent.
async fn read_until_closed(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    assert!(r.is_ok(), "the server did not close the connection");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_closes_only_that_connection() {
    let (mut c, listeners) = Cluster::new(&[1, 2, 3], &[], fast).await;
    c.start_all(listeners).await;
    let leader = c.agreed_leader(WAIT).await;
    let term = c.nodes[&leader].status().term;
    let addr = c.nodes[&1].addr;

    // A length prefix past FRAME_BYTES_MAX: closed before anything is allocated.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[0xff, 0xff, 0xff, 0xff]).await.unwrap();
    assert!(read_until_closed(&mut s).await.is_empty());

    // Garbage that is not a Hello.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[0, 0, 0, 4, 0xde, 0xad, 0xbe, 0xef])
        .await
        .unwrap();
    assert!(read_until_closed(&mut s).await.is_empty());

    // A torn frame, then the peer goes away.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[0, 0, 0, 100, 1, 2]).await.unwrap();
    drop(s);

    // A well-formed Hello (postcard: version 1, from 7, voters [1, 2]) from a node configured
    // with another voter set: refused with a reply frame, then closed.
    let hello = [0u8, 0, 0, 5, 1, 7, 2, 1, 2];
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&hello).await.unwrap();
    let reply = read_until_closed(&mut s).await;
    assert!(
        reply.len() > 4 && reply[4] == 1,
        "a Refused reply: {reply:?}"
    );
    let text = String::from_utf8_lossy(&reply);
    assert!(text.contains("controller.quorum.voters differ"), "{text}");

    // A valid handshake, then a request that does not decode.
    let hello = [0u8, 0, 0, 6, 1, 7, 3, 1, 2, 3];
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&hello).await.unwrap();
    let mut accepted = [0u8; 6];
    s.read_exact(&mut accepted).await.unwrap();
    assert_eq!(accepted, [0, 0, 0, 2, 0, 1], "Accepted {{ node_id: 1 }}");
    s.write_all(&[0, 0, 0, 3, 0x7f, 0xff, 0xff]).await.unwrap();
    assert!(read_until_closed(&mut s).await.is_empty());

    // The quorum did not notice: same leader, same term, proposals and calls work.
    assert_eq!(c.agreed_leader(WAIT).await, leader);
    assert_eq!(c.nodes[&leader].status().term, term);
    c.nodes[&leader]
        .q()
        .propose(b"still fine".to_vec())
        .await
        .unwrap();
    let t = Duration::from_secs(5);
    assert_eq!(
        c.nodes[&2].q().call(1, b"ok".to_vec(), t).await.unwrap(),
        b"from:2:ok"
    );
    for id in [1, 2, 3] {
        c.stop(id).await;
    }
}
