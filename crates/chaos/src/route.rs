//! One route: a listening socket whose connections are forwarded to one upstream address, with a
//! fault mode per direction.
//!
//! Data flow: every accepted connection gets one upstream connection; each direction (`Up` =
//! client → server, `Down` = server → client) has a reader and a writer joined by a bounded
//! channel. The reader applies the direction's current [`Mode`] to each chunk as it is read:
//! `Pass` queues it at once, `Delay` queues it with a due time, `Hold` keeps it in a bounded
//! buffer until the direction leaves `Hold`, `Cut` drops it.
//!
//! Invariants:
//! - A direction never delivers a byte stream with a gap: once a reader has dropped bytes (a cut,
//!   or a hold that spilled past `HOLD_BYTES_MAX`), its connection is closed as soon as the
//!   direction is healed, instead of passing on a corrupt stream. A real partition ends the same
//!   way once TCP gives up retransmitting.
//! - Bytes leave in the order they arrived, per direction, whatever the mode changes in between.
//! - Every buffer is bounded (`limits.rs`).
//!
//! Locking: the mode of each direction is a `tokio::sync::watch` value, read by every reader;
//! the upstream address and the reset token sit behind short `parking_lot` locks never held
//! across an `.await`. Counters are atomics.
//!
//! Not done here: the control protocol (`control.rs`), name resolution (addresses are IPs).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::limits::{
    CHUNK_BYTES, CONNECTIONS_PER_ROUTE_MAX, HOLD_BYTES_MAX, IN_FLIGHT_CHUNKS_MAX,
    UPSTREAM_CONNECT_MS_MAX,
};

/// A direction of a route's connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Client → server (bytes the accepted side sends to the upstream).
    Up,
    /// Server → client.
    Down,
}

impl Direction {
    fn index(self) -> usize {
        match self {
            Direction::Up => 0,
            Direction::Down => 1,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Direction::Up => "up",
            Direction::Down => "down",
        }
    }
}

/// What a direction does with the bytes it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forward at once.
    Pass,
    /// Black hole: drop the bytes, keep the connections open, accept new ones.
    Cut,
    /// Buffer (bounded) and deliver when the direction leaves `Hold`.
    Hold,
    /// Forward each chunk this many milliseconds after it was read.
    Delay(u64),
}

impl Mode {
    fn drops_or_holds(self) -> bool {
        matches!(self, Mode::Cut | Mode::Hold)
    }

    pub fn describe(self) -> String {
        match self {
            Mode::Pass => "pass".to_string(),
            Mode::Cut => "cut".to_string(),
            Mode::Hold => "hold".to_string(),
            Mode::Delay(ms) => format!("delay {ms}"),
        }
    }
}

/// Counters of one route, all monotonic.
#[derive(Default)]
pub struct Stats {
    pub accepted: AtomicU64,
    pub refused_over_limit: AtomicU64,
    pub upstream_connect_failed: AtomicU64,
    pub bytes_forwarded: [AtomicU64; 2],
    pub bytes_dropped: [AtomicU64; 2],
    pub hold_spills: AtomicU64,
    /// Connections closed because a direction that had dropped bytes was healed.
    pub closed_after_drop: AtomicU64,
    pub resets: AtomicU64,
}

/// A named route: listen address → upstream address.
pub struct Route {
    pub name: String,
    pub local: SocketAddr,
    upstream: Mutex<SocketAddr>,
    modes: [watch::Sender<Mode>; 2],
    /// Cancelled by `reset`; every connection holds the token that was current when it opened.
    generation: Mutex<CancellationToken>,
    shutdown: CancellationToken,
    active: AtomicUsize,
    pub stats: Stats,
}

impl Route {
    /// Binds `listen` and starts accepting. The route lives until `shutdown` is cancelled.
    pub async fn start(
        name: String,
        listen: SocketAddr,
        upstream: SocketAddr,
        shutdown: CancellationToken,
    ) -> std::io::Result<Arc<Route>> {
        let listener = TcpListener::bind(listen).await?;
        let local = listener.local_addr()?;
        let route = Arc::new(Route {
            name,
            local,
            upstream: Mutex::new(upstream),
            modes: [watch::channel(Mode::Pass).0, watch::channel(Mode::Pass).0],
            generation: Mutex::new(shutdown.child_token()),
            shutdown,
            active: AtomicUsize::new(0),
            stats: Stats::default(),
        });
        tokio::spawn(accept_loop(route.clone(), listener));
        Ok(route)
    }

    pub fn upstream(&self) -> SocketAddr {
        *self.upstream.lock()
    }

    /// New connections go to `addr`; open ones keep theirs.
    pub fn set_upstream(&self, addr: SocketAddr) {
        *self.upstream.lock() = addr;
    }

    pub fn mode(&self, dir: Direction) -> Mode {
        *self.modes[dir.index()].borrow()
    }

    pub fn set_mode(&self, dir: Direction, mode: Mode) {
        self.modes[dir.index()].send_replace(mode);
    }

    /// Closes every open connection of the route; new ones are accepted as before.
    pub fn reset(&self) {
        let mut generation = self.generation.lock();
        generation.cancel();
        *generation = self.shutdown.child_token();
        self.stats.resets.fetch_add(1, Ordering::Relaxed);
    }

    pub fn active_connections(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    pub fn status_json(&self) -> serde_json::Value {
        let s = &self.stats;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        serde_json::json!({
            "name": self.name,
            "listen": self.local.to_string(),
            "upstream": self.upstream().to_string(),
            "up": self.mode(Direction::Up).describe(),
            "down": self.mode(Direction::Down).describe(),
            "active": self.active_connections(),
            "accepted": load(&s.accepted),
            "refused_over_limit": load(&s.refused_over_limit),
            "upstream_connect_failed": load(&s.upstream_connect_failed),
            "bytes_up": load(&s.bytes_forwarded[0]),
            "bytes_down": load(&s.bytes_forwarded[1]),
            "dropped_up": load(&s.bytes_dropped[0]),
            "dropped_down": load(&s.bytes_dropped[1]),
            "hold_spills": load(&s.hold_spills),
            "closed_after_drop": load(&s.closed_after_drop),
            "resets": load(&s.resets),
        })
    }

    fn watch_mode(&self, dir: Direction) -> watch::Receiver<Mode> {
        self.modes[dir.index()].subscribe()
    }
}

/// Decrements the route's open-connection count when a connection task ends.
struct ActiveGuard(Arc<Route>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn accept_loop(route: Arc<Route>, listener: TcpListener) {
    loop {
        let accepted = tokio::select! {
            _ = route.shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (client, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                warn!(route = %route.name, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if route.active.fetch_add(1, Ordering::Relaxed) >= CONNECTIONS_PER_ROUTE_MAX {
            route.active.fetch_sub(1, Ordering::Relaxed);
            route
                .stats
                .refused_over_limit
                .fetch_add(1, Ordering::Relaxed);
            warn!(route = %route.name, %peer, "connection limit reached; closing the new connection");
            continue;
        }
        route.stats.accepted.fetch_add(1, Ordering::Relaxed);
        let guard = ActiveGuard(route.clone());
        let token = route.generation.lock().clone();
        tokio::spawn(async move {
            serve_connection(&guard.0, client, token).await;
            drop(guard);
        });
    }
}

async fn serve_connection(route: &Arc<Route>, client: TcpStream, token: CancellationToken) {
    let _ = client.set_nodelay(true);
    let upstream = route.upstream();
    let connect = tokio::time::timeout(
        Duration::from_millis(UPSTREAM_CONNECT_MS_MAX),
        TcpStream::connect(upstream),
    );
    let server = tokio::select! {
        _ = token.cancelled() => return,
        r = connect => r,
    };
    match server {
        Ok(Ok(server)) => {
            let _ = server.set_nodelay(true);
            serve_pair(route, client, server, token).await;
        }
        failed => {
            route
                .stats
                .upstream_connect_failed
                .fetch_add(1, Ordering::Relaxed);
            debug!(route = %route.name, %upstream, ?failed, "upstream connect failed");
            // Behind a cut the client must not learn that the server is down: keep its
            // connection open and silent until the route heals. Otherwise close it, as a refused
            // connection would.
            if route.mode(Direction::Up).drops_or_holds()
                || route.mode(Direction::Down).drops_or_holds()
            {
                black_hole(route, client, token).await;
            }
        }
    }
}

/// Reads and drops what the client sends until both directions leave cut/hold (then closes),
/// the client closes, or the route is reset.
async fn black_hole(route: &Arc<Route>, mut client: TcpStream, token: CancellationToken) {
    let mut up = route.watch_mode(Direction::Up);
    let mut down = route.watch_mode(Direction::Down);
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        if !up.borrow_and_update().drops_or_holds() && !down.borrow_and_update().drops_or_holds() {
            route
                .stats
                .closed_after_drop
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        tokio::select! {
            _ = token.cancelled() => return,
            r = up.changed() => if r.is_err() { return },
            r = down.changed() => if r.is_err() { return },
            n = client.read(&mut buf) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    route.stats.bytes_dropped[0].fetch_add(n as u64, Ordering::Relaxed);
                }
            },
        }
    }
}

/// What a reader hands its writer.
enum Item {
    Chunk { due: Instant, bytes: Bytes },
    Eof,
}

async fn serve_pair(
    route: &Arc<Route>,
    client: TcpStream,
    server: TcpStream,
    route_token: CancellationToken,
) {
    // Cancelling `conn` closes this connection only; a route reset cancels its parent.
    let conn = route_token.child_token();
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let (up_tx, up_rx) = mpsc::channel(IN_FLIGHT_CHUNKS_MAX);
    let (down_tx, down_rx) = mpsc::channel(IN_FLIGHT_CHUNKS_MAX);
    tokio::join!(
        read_loop(route, Direction::Up, client_read, up_tx, conn.clone()),
        write_loop(route, Direction::Up, server_write, up_rx, conn.clone()),
        read_loop(route, Direction::Down, server_read, down_tx, conn.clone()),
        write_loop(route, Direction::Down, client_write, down_rx, conn.clone()),
    );
}

/// Reads one direction and applies its mode to each chunk.
async fn read_loop(
    route: &Arc<Route>,
    dir: Direction,
    mut src: OwnedReadHalf,
    tx: mpsc::Sender<Item>,
    conn: CancellationToken,
) {
    let i = dir.index();
    let mut mode_rx = route.watch_mode(dir);
    let mut mode = *mode_rx.borrow_and_update();
    let mut buf = vec![0u8; CHUNK_BYTES];
    // Bytes held while in `Hold`, and whether the held stream ended.
    let mut held: Vec<Bytes> = Vec::new();
    let mut held_bytes: usize = 0;
    let mut held_eof = false;
    // This direction dropped bytes: its stream has a gap, so it must never pass again.
    let mut dropped = false;
    let mut src_done = false;
    loop {
        tokio::select! {
            // A mode change is seen before any byte read after it was made: once a command is
            // acknowledged, what the client sends next is treated the new way (unbiased, a read
            // could win the draw and pass bytes under the old mode).
            biased;
            _ = conn.cancelled() => return,
            changed = mode_rx.changed() => {
                if changed.is_err() {
                    return;
                }
                mode = *mode_rx.borrow_and_update();
                match mode {
                    Mode::Pass | Mode::Delay(_) => {
                        if dropped {
                            route.stats.closed_after_drop.fetch_add(1, Ordering::Relaxed);
                            info!(route = %route.name, dir = dir.name(), "healed after dropping bytes: closing the connection");
                            conn.cancel();
                            return;
                        }
                        let due = Instant::now();
                        for bytes in held.drain(..) {
                            if !send(&tx, Item::Chunk { due, bytes }, &conn).await {
                                return;
                            }
                        }
                        held_bytes = 0;
                        if held_eof {
                            let _ = send(&tx, Item::Eof, &conn).await;
                            return;
                        }
                    }
                    Mode::Cut => {
                        if held_bytes > 0 || held_eof {
                            route.stats.bytes_dropped[i].fetch_add(held_bytes as u64, Ordering::Relaxed);
                            held.clear();
                            held_bytes = 0;
                            held_eof = false;
                            dropped = true;
                        }
                    }
                    Mode::Hold => {}
                }
            }
            n = src.read(&mut buf), if !src_done => {
                let n = match n {
                    Ok(n) => n,
                    Err(e) => {
                        debug!(route = %route.name, dir = dir.name(), error = %e, "read failed; closing the connection");
                        conn.cancel();
                        return;
                    }
                };
                if n == 0 {
                    src_done = true;
                    match mode {
                        Mode::Pass | Mode::Delay(_) => {
                            let _ = send(&tx, Item::Eof, &conn).await;
                            return;
                        }
                        Mode::Hold => held_eof = true,
                        // The end of the stream is lost like its bytes.
                        Mode::Cut => dropped = true,
                    }
                    continue;
                }
                let chunk = buf.get(..n).unwrap_or_default();
                match mode {
                    Mode::Pass => {
                        let item = Item::Chunk { due: Instant::now(), bytes: Bytes::copy_from_slice(chunk) };
                        if !send(&tx, item, &conn).await {
                            return;
                        }
                    }
                    Mode::Delay(ms) => {
                        let due = Instant::now() + Duration::from_millis(ms);
                        let item = Item::Chunk { due, bytes: Bytes::copy_from_slice(chunk) };
                        if !send(&tx, item, &conn).await {
                            return;
                        }
                    }
                    Mode::Cut => {
                        route.stats.bytes_dropped[i].fetch_add(n as u64, Ordering::Relaxed);
                        dropped = true;
                    }
                    Mode::Hold if dropped => {
                        route.stats.bytes_dropped[i].fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Mode::Hold => {
                        if held_bytes.saturating_add(n) > HOLD_BYTES_MAX {
                            warn!(route = %route.name, dir = dir.name(), held_bytes, "hold buffer full: the hold becomes a cut for this connection");
                            route.stats.hold_spills.fetch_add(1, Ordering::Relaxed);
                            route.stats.bytes_dropped[i].fetch_add((held_bytes + n) as u64, Ordering::Relaxed);
                            held.clear();
                            held_bytes = 0;
                            dropped = true;
                        } else {
                            held.push(Bytes::copy_from_slice(chunk));
                            held_bytes += n;
                        }
                    }
                }
            }
        }
    }
}

/// Queues an item for the writer; false when the connection is closing.
async fn send(tx: &mpsc::Sender<Item>, item: Item, conn: &CancellationToken) -> bool {
    tokio::select! {
        _ = conn.cancelled() => false,
        r = tx.send(item) => r.is_ok(),
    }
}

/// Writes one direction's queued chunks, each no earlier than its due time.
async fn write_loop(
    route: &Arc<Route>,
    dir: Direction,
    mut dst: OwnedWriteHalf,
    mut rx: mpsc::Receiver<Item>,
    conn: CancellationToken,
) {
    let i = dir.index();
    loop {
        let item = tokio::select! {
            _ = conn.cancelled() => return,
            item = rx.recv() => item,
        };
        match item {
            None => return,
            Some(Item::Eof) => {
                let _ = dst.shutdown().await;
                return;
            }
            Some(Item::Chunk { due, bytes }) => {
                tokio::select! {
                    _ = conn.cancelled() => return,
                    _ = tokio::time::sleep_until(due) => {}
                }
                let written = tokio::select! {
                    _ = conn.cancelled() => return,
                    r = dst.write_all(&bytes) => r,
                };
                if written.is_err() {
                    conn.cancel();
                    return;
                }
                route.stats.bytes_forwarded[i].fetch_add(bytes.len() as u64, Ordering::Relaxed);
            }
        }
    }
}
