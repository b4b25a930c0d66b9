//! One client connection: length-prefixed frames in, responses out **in request order**.
//!
//! The reader cuts frames: a 4-byte big-endian size, checked against `socket.request.max.bytes`,
//! then that many bytes reserved from the broker-wide [`RequestMemory`] budget
//! (`queued.max.request.bytes`; the reader waits, unread, while the budget is spent), and only then
//! the buffer allocated and the body read. The grant lives in the request's bytes and is given back
//! when the last slice of them is dropped. A request must arrive whole within
//! `connections.max.idle.ms` of the reader starting to wait for it, so a half-sent request holds
//! its grant for at most that long. Each frame goes to [`dispatch`], which performs the request's
//! ordered side effects (appends, topic changes) before returning, and gives back a task that
//! finishes the response (durability waits, long polls). Those tasks go through a bounded queue to
//! the writer, which awaits them one by one, so responses leave in the order requests came in while
//! the waiting overlaps. A malformed request ends this connection only: the reader stops, the writer
//! sends what was already answered, and the socket closes. A client that has gone (its end closed,
//! or idle past `connections.max.idle.ms`) gets nothing more: the work still queued for it (long
//! polls, acknowledgement waits) is aborted at once rather than finished for no one. Appends it
//! asked for have happened already, as in Kafka.
//!
//! On a TLS listener the connection starts with the TLS handshake (bounded by
//! [`TLS_HANDSHAKE_MS_MAX`]); a failed handshake (a plaintext client, an untrusted client
//! certificate) closes the connection with a log line. Fetched segment bytes are then read from
//! the file in [`TLS_FILE_READ_BYTES`] pieces and encrypted, where a plaintext connection sends them
//! with `sendfile`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use millrace_store::FileSlice;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::dispatch::dispatch;
use crate::limits::{
    IN_FLIGHT_REQUESTS_PER_CONNECTION_MAX, TLS_FILE_READ_BYTES, TLS_HANDSHAKE_MS_MAX,
};
use crate::principal::{subject_name, PrincipalMapper};
use crate::read_buffer::ReadAhead;
use crate::request_memory::RequestMemory;
use crate::respond::Pending;
use crate::sasl::SaslSettings;
use crate::session::Session;
use crate::splice::Chunk;
use crate::BrokerContext;

/// Per-connection limits taken from the broker config, and the budget all connections share.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// `socket.request.max.bytes`.
    pub request_bytes_max: usize,
    /// `connections.max.idle.ms`; `None` = never.
    pub idle_max: Option<Duration>,
    /// `queued.max.request.bytes`, shared by every connection.
    pub memory: Arc<RequestMemory>,
}

/// The sending side of a connection.
enum Sink {
    Plain(tokio::net::tcp::OwnedWriteHalf),
    Tls(WriteHalf<TlsStream<TcpStream>>),
}

impl Sink {
    /// Writes a response's chunks in order.
    async fn write_chunks(&mut self, chunks: &[Chunk]) -> std::io::Result<()> {
        match self {
            Sink::Plain(out) => write_chunks(out, chunks).await,
            Sink::Tls(out) => {
                for chunk in chunks {
                    match chunk {
                        Chunk::Bytes(bytes) => out.write_all(bytes).await?,
                        Chunk::File(slice) => copy_file(out, slice).await?,
                    }
                }
                out.flush().await
            }
        }
    }

    async fn shutdown(&mut self) {
        let _ = match self {
            Sink::Plain(out) => out.shutdown().await,
            Sink::Tls(out) => out.shutdown().await,
        };
    }
}

/// A listener's TLS acceptor with its principal mapping, and its SASL settings.
pub type ListenerSecurity = (
    Option<(TlsAcceptor, Arc<PrincipalMapper>)>,
    Option<Arc<SaslSettings>>,
);

/// Serves one connection of listener `listener` (after the TLS handshake when `tls` is set) until
/// the peer closes it, it misbehaves, it idles out, or the broker shuts down.
pub async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    listener: Arc<str>,
    (tls, sasl): ListenerSecurity,
    ctx: Arc<BrokerContext>,
    limits: ConnectionLimits,
) {
    let _ = stream.set_nodelay(true);
    let mut session = Session::new(peer, listener, sasl);
    match tls {
        None => {
            let (read_half, write_half) = stream.into_split();
            serve(read_half, Sink::Plain(write_half), session, ctx, limits).await;
        }
        Some((acceptor, mapper)) => {
            let handshake = tokio::time::timeout(
                Duration::from_millis(TLS_HANDSHAKE_MS_MAX),
                acceptor.accept(stream),
            );
            let stream = tokio::select! {
                _ = ctx.shutdown.cancelled() => return,
                done = handshake => match done {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(e)) => {
                        info!(%peer, listener = %session.listener, error = %e, "TLS handshake failed; closing connection");
                        millrace_metrics::global().tls_handshake_failures.inc();
                        return;
                    }
                    Err(_) => {
                        info!(%peer, listener = %session.listener, "TLS handshake not done within {TLS_HANDSHAKE_MS_MAX} ms; closing connection");
                        millrace_metrics::global().tls_handshake_failures.inc();
                        return;
                    }
                },
            };
            if let Some(cert) = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                // On SASL_SSL the principal is SASL's: the certificate is not mapped (Kafka).
                .filter(|_| session.sasl.is_none())
            {
                let subject = subject_name(cert.as_ref());
                match subject.as_deref().map(|s| (s, mapper.name(s))) {
                    Some((_, Some(name))) => session.set_tls_principal(format!("User:{name}")),
                    Some((subject, None)) => {
                        info!(%peer, listener = %session.listener, %subject, "no ssl.principal.mapping.rules rule applies to the client certificate; closing connection");
                        millrace_metrics::global().authentication_failures.inc();
                        return;
                    }
                    None => {
                        info!(%peer, listener = %session.listener, "cannot read the client certificate's subject; closing connection");
                        millrace_metrics::global().authentication_failures.inc();
                        return;
                    }
                }
            }
            let (read_half, write_half) = tokio::io::split(stream);
            serve(read_half, Sink::Tls(write_half), session, ctx, limits).await;
        }
    }
}

async fn serve<R: AsyncRead + Unpin + Send>(
    read_half: R,
    mut sink: Sink,
    session: Session,
    ctx: Arc<BrokerContext>,
    limits: ConnectionLimits,
) {
    let peer = session.peer;
    let mut frames = ReadAhead::new(read_half);
    let (queue, mut answers) = mpsc::channel::<Pending>(IN_FLIGHT_REQUESTS_PER_CONNECTION_MAX);

    let in_flight = &millrace_metrics::global().requests_in_flight;
    // Cancelled by the reader when the client has gone.
    let gone = CancellationToken::new();
    let client_gone = gone.clone();
    let writer = tokio::spawn(async move {
        while let Some(mut pending) = answers.recv().await {
            let answered = tokio::select! {
                biased;
                answered = &mut pending => answered,
                _ = client_gone.cancelled() => {
                    pending.abort();
                    in_flight.dec();
                    break;
                }
            };
            in_flight.dec();
            match answered {
                Ok(Ok(Some(chunks))) => {
                    if let Err(e) = sink.write_chunks(&chunks).await {
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
        // Requests still queued behind a failed write, or for a client that has gone, are never
        // answered: their work stops here.
        answers.close();
        while let Some(pending) = answers.recv().await {
            pending.abort();
            in_flight.dec();
        }
        sink.shutdown().await;
    });

    loop {
        // Until a SASL client has authenticated, its frames are bounded by
        // `sasl.server.max.receive.size` (Kafka's rule), not `socket.request.max.bytes`.
        let bound = match session
            .sasl
            .as_ref()
            .map(|s| s.lock().pre_auth_frame_bytes_max())
        {
            Some(Some(max)) => FrameBound {
                bytes: max.min(limits.request_bytes_max),
                key: "sasl.server.max.receive.size, before authentication",
            },
            _ => FrameBound {
                bytes: limits.request_bytes_max,
                key: "socket.request.max.bytes",
            },
        };
        // A quota muted the connection: nothing more is read until the throttle time ends (a
        // throttle set while the next frame was awaited is waited out before it is handled).
        if let Some(until) = session.throttle.until() {
            tokio::select! {
                _ = ctx.shutdown.cancelled() => break,
                _ = tokio::time::sleep_until(until.into()) => {}
            }
        }
        let next = tokio::select! {
            _ = ctx.shutdown.cancelled() => break,
            next = next_frame(&mut frames, &limits, bound) => next,
        };
        let frame = match next {
            FrameEvent::Frame(frame) => frame,
            FrameEvent::Closed => {
                gone.cancel();
                break;
            }
            FrameEvent::Idle => {
                debug!(%peer, "closing idle connection (connections.max.idle.ms)");
                gone.cancel();
                break;
            }
            FrameEvent::Bad(reason) => {
                warn!(%peer, %reason, "bad frame; closing connection");
                break;
            }
        };
        if let Some(until) = session.throttle.until() {
            tokio::select! {
                _ = ctx.shutdown.cancelled() => break,
                _ = tokio::time::sleep_until(until.into()) => {}
            }
        }
        // After SaslHandshake v0 the next frames are bare SASL tokens, not requests.
        let raw_token = session
            .sasl
            .as_ref()
            .is_some_and(|sasl| sasl.lock().expects_raw_token());
        let dispatched = if raw_token {
            Ok(crate::api::sasl::raw_token(&ctx, &session, frame))
        } else {
            dispatch(&ctx, frame, &session)
        };
        match dispatched {
            Ok(pending) => {
                in_flight.inc();
                if queue.send(pending).await.is_err() {
                    in_flight.dec();
                    break;
                }
                if session.closing() {
                    // This answer (a refused authentication) is the last: the writer sends it,
                    // then closes.
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

/// Writes a response's chunks in order: bytes with `write`, file slices with `sendfile`.
async fn write_chunks(
    out: &mut tokio::net::tcp::OwnedWriteHalf,
    chunks: &[Chunk],
) -> std::io::Result<()> {
    for chunk in chunks {
        match chunk {
            Chunk::Bytes(bytes) => out.write_all(bytes).await?,
            Chunk::File(slice) => send_file(out.as_ref(), slice).await?,
        }
    }
    Ok(())
}

/// Sends a segment file slice to the socket from the page cache (`sendfile`), waiting for the
/// socket to drain as a write would. A file that ends before the slice does (cut by a follower's
/// truncation after the read) fails the connection: the frame's length is already on the wire,
/// so nothing else may take the missing bytes' place; the client reconnects and fetches again.
async fn send_file(socket: &TcpStream, slice: &FileSlice) -> std::io::Result<()> {
    let mut position = slice.position;
    let end = slice.position.saturating_add(slice.len as u64);
    while position < end {
        let want = usize::try_from(end - position).unwrap_or(usize::MAX);
        let sent = socket.try_io(Interest::WRITABLE, || {
            rustix::fs::sendfile(socket, &*slice.file, Some(&mut position), want)
                .map_err(std::io::Error::from)
        });
        match sent {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("segment file ended at {position}, before its fetch slice's end {end}"),
                ))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => socket.writable().await?,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Sends a segment file slice through a writer that cannot take `sendfile` (TLS): read in pieces
/// of [`TLS_FILE_READ_BYTES`] (from the page cache, off the runtime threads' other work), each
/// written before the next is read. A file that ends early fails the connection, as in
/// [`send_file`].
async fn copy_file<W: AsyncWrite + Unpin>(out: &mut W, slice: &FileSlice) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut position = slice.position;
    let end = slice.position.saturating_add(slice.len as u64);
    let mut buf = Vec::new();
    while position < end {
        let want = usize::try_from(end - position)
            .unwrap_or(usize::MAX)
            .min(TLS_FILE_READ_BYTES);
        buf.resize(want, 0);
        crate::blocking::run(|| slice.file.read_exact_at(&mut buf, position)).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("segment file read at {position} for its fetch slice failed: {e}"),
            )
        })?;
        out.write_all(&buf).await?;
        position += want as u64;
    }
    Ok(())
}

#[derive(Debug)]
enum FrameEvent {
    Frame(Bytes),
    Closed,
    Idle,
    Bad(String),
}

/// The next whole request, within `connections.max.idle.ms`.
/// The largest frame the connection takes now, and the config key that says so.
#[derive(Debug, Clone, Copy)]
struct FrameBound {
    bytes: usize,
    key: &'static str,
}

async fn next_frame<R: AsyncRead + Unpin>(
    frames: &mut R,
    limits: &ConnectionLimits,
    bound: FrameBound,
) -> FrameEvent {
    match limits.idle_max {
        Some(idle) => tokio::time::timeout(idle, read_frame(frames, limits, bound))
            .await
            .unwrap_or(FrameEvent::Idle),
        None => read_frame(frames, limits, bound).await,
    }
}

/// Size, bound check, budget, then body. EOF before the first size byte is a clean close.
async fn read_frame<R: AsyncRead + Unpin>(
    frames: &mut R,
    limits: &ConnectionLimits,
    bound: FrameBound,
) -> FrameEvent {
    let mut size = [0u8; 4];
    match frames.read(&mut size[..1]).await {
        Ok(0) => return FrameEvent::Closed,
        Ok(_) => {}
        // Between frames these are a client going away: a TLS peer that closes without
        // close_notify (most clients), or a reset.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
            ) =>
        {
            return FrameEvent::Closed
        }
        Err(e) => return FrameEvent::Bad(format!("read failed: {e}")),
    }
    if let Err(e) = frames.read_exact(&mut size[1..]).await {
        return FrameEvent::Bad(format!("connection ended inside a frame size: {e}"));
    }
    let declared = i32::from_be_bytes(size);
    let len = match usize::try_from(declared) {
        Ok(len) if len <= bound.bytes => len,
        _ => {
            return FrameEvent::Bad(format!(
                "frame size {declared} is outside 0..={} ({})",
                bound.bytes, bound.key
            ))
        }
    };
    let grant = match limits.memory.reserve(len).await {
        Ok(grant) => grant,
        Err(e) => return FrameEvent::Bad(e.to_string()),
    };
    let mut body = vec![0u8; len];
    if let Err(e) = frames.read_exact(&mut body).await {
        return FrameEvent::Bad(format!("connection ended inside a {len}-byte frame: {e}"));
    }
    FrameEvent::Frame(grant.into_bytes(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(budget: usize) -> ConnectionLimits {
        ConnectionLimits {
            request_bytes_max: 1 << 20,
            idle_max: Some(Duration::from_millis(200)),
            memory: RequestMemory::new(budget),
        }
    }

    async fn check(input: &[u8], limits: &ConnectionLimits) -> FrameEvent {
        let mut reader = input;
        let bound = FrameBound {
            bytes: limits.request_bytes_max,
            key: "socket.request.max.bytes",
        };
        next_frame(&mut reader, limits, bound).await
    }

    /// A stream whose every read fails with `kind`.
    struct Failing(std::io::ErrorKind);

    impl AsyncRead for Failing {
        fn poll_read(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            _: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Err(self.0.into()))
        }
    }

    #[tokio::test]
    async fn a_peer_gone_between_frames_is_a_clean_close() {
        let limits = limits(64 << 20);
        let bound = FrameBound {
            bytes: limits.request_bytes_max,
            key: "socket.request.max.bytes",
        };
        for kind in [
            std::io::ErrorKind::UnexpectedEof,
            std::io::ErrorKind::ConnectionReset,
        ] {
            let event = next_frame(&mut Failing(kind), &limits, bound).await;
            assert!(matches!(event, FrameEvent::Closed), "{kind:?}: {event:?}");
        }
        let event = next_frame(
            &mut Failing(std::io::ErrorKind::InvalidData),
            &limits,
            bound,
        )
        .await;
        assert!(matches!(event, FrameEvent::Bad(_)), "{event:?}");
    }

    #[tokio::test]
    async fn frames_are_cut_and_their_budget_given_back() {
        let limits = limits(64 << 20);
        let event = check(&[0, 0, 0, 3, 1, 2, 3, 9], &limits).await;
        let FrameEvent::Frame(frame) = event else {
            panic!("expected a frame, got {event:?}");
        };
        assert_eq!(&frame[..], &[1, 2, 3]);
        assert_eq!(limits.memory.granted(), 3);
        drop(frame);
        assert_eq!(limits.memory.granted(), 0);
    }

    #[tokio::test]
    async fn bad_sizes_and_early_ends_are_refused() {
        let limits = limits(64 << 20);
        assert!(matches!(check(&[], &limits).await, FrameEvent::Closed));
        assert!(matches!(check(&[0, 0], &limits).await, FrameEvent::Bad(_)));
        assert!(matches!(
            check(&[0xFF, 0xFF, 0xFF, 0xFF], &limits).await,
            FrameEvent::Bad(_)
        ));
        assert!(matches!(
            check(&[0, 0x10, 0, 1], &limits).await,
            FrameEvent::Bad(_)
        ));
        assert!(matches!(
            check(&[0, 0, 0, 5, 1, 2], &limits).await,
            FrameEvent::Bad(_)
        ));
        assert_eq!(limits.memory.granted(), 0);
    }

    #[tokio::test]
    async fn a_frame_waiting_for_budget_is_closed_as_idle() {
        let limits = limits(18 << 20);
        let held = limits.memory.reserve(1 << 20).await.expect("fits");
        // 1 MiB + 1 is a large request: it may use 18 - 16 (reserve) = 2 MiB, 1 MiB is held.
        let event = check(
            &[0, 0x10, 0, 1, 0],
            &ConnectionLimits {
                request_bytes_max: 2 << 20,
                ..limits.clone()
            },
        )
        .await;
        assert!(matches!(event, FrameEvent::Idle), "{event:?}");
        drop(held);
        assert_eq!(limits.memory.granted(), 0);
    }
}
