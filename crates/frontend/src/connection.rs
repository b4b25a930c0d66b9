//! One client connection: length-prefixed frames in, responses out **in request order**.
//!
//! The reader cuts frames (4-byte big-endian size, checked against `socket.request.max.bytes`
//! before anything is allocated) and hands each to [`dispatch`], which performs the request's
//! ordered side effects (appends, topic changes) before returning, and gives back a task that
//! finishes the response (durability waits, long polls). Those tasks go through a bounded queue to
//! the writer, which awaits them one by one, so responses leave in the order requests came in while
//! the waiting overlaps. A malformed request ends this connection only: the reader stops, the writer
//! sends what was already answered, and the socket closes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};
use tracing::{debug, warn};

use crate::dispatch::{dispatch, Pending};
use crate::limits::IN_FLIGHT_REQUESTS_PER_CONNECTION_MAX;
use crate::BrokerContext;

/// Per-connection limits taken from the broker config.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// `socket.request.max.bytes`.
    pub request_bytes_max: usize,
    /// `connections.max.idle.ms`; `None` = never.
    pub idle_max: Option<Duration>,
}

/// Serves one connection until the peer closes it, it misbehaves, it idles out, or the broker
/// shuts down.
pub async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    ctx: Arc<BrokerContext>,
    limits: ConnectionLimits,
) {
    let _ = stream.set_nodelay(true);
    let (read_half, mut write_half) = stream.into_split();
    let codec = LengthDelimitedCodec::builder()
        .big_endian()
        .length_field_length(4)
        .max_frame_length(limits.request_bytes_max)
        .new_codec();
    let mut frames = FramedRead::new(read_half, codec);
    let (queue, mut answers) = mpsc::channel::<Pending>(IN_FLIGHT_REQUESTS_PER_CONNECTION_MAX);

    let writer = tokio::spawn(async move {
        while let Some(pending) = answers.recv().await {
            match pending.await {
                Ok(Ok(Some(chunks))) => {
                    if let Err(e) = write_chunks(&mut write_half, &chunks).await {
                        debug!(%peer, error = %e, "write failed");
                        break;
                    }
                }
                Ok(Ok(None)) => {}
                Ok(Err(reason)) => {
                    warn!(%peer, %reason, "could not build a response; closing connection");
                    break;
                }
                Err(join) => {
                    warn!(%peer, error = %join, "request task failed; closing connection");
                    break;
                }
            }
        }
        let _ = write_half.shutdown().await;
    });

    loop {
        let next = tokio::select! {
            _ = ctx.shutdown.cancelled() => break,
            next = next_frame(&mut frames, limits.idle_max) => next,
        };
        let frame = match next {
            FrameEvent::Frame(frame) => frame,
            FrameEvent::Closed => break,
            FrameEvent::Idle => {
                debug!(%peer, "closing idle connection (connections.max.idle.ms)");
                break;
            }
            FrameEvent::Bad(reason) => {
                warn!(%peer, %reason, "bad frame; closing connection");
                break;
            }
        };
        match dispatch(&ctx, frame.freeze(), peer) {
            Ok(pending) => {
                if queue.send(pending).await.is_err() {
                    break;
                }
            }
            Err(reason) => {
                warn!(%peer, %reason, "refusing request; closing connection");
                break;
            }
        }
    }
    drop(queue);
    let _ = writer.await;
}

/// Writes a response's chunks in order.
async fn write_chunks(
    out: &mut tokio::net::tcp::OwnedWriteHalf,
    chunks: &[bytes::Bytes],
) -> std::io::Result<()> {
    for chunk in chunks {
        out.write_all(chunk).await?;
    }
    Ok(())
}

enum FrameEvent {
    Frame(bytes::BytesMut),
    Closed,
    Idle,
    Bad(String),
}

async fn next_frame(
    frames: &mut FramedRead<tokio::net::tcp::OwnedReadHalf, LengthDelimitedCodec>,
    idle_max: Option<Duration>,
) -> FrameEvent {
    let next = match idle_max {
        Some(idle) => match tokio::time::timeout(idle, frames.next()).await {
            Ok(next) => next,
            Err(_) => return FrameEvent::Idle,
        },
        None => frames.next().await,
    };
    match next {
        Some(Ok(frame)) => FrameEvent::Frame(frame),
        Some(Err(e)) => FrameEvent::Bad(e.to_string()),
        None => FrameEvent::Closed,
    }
}
