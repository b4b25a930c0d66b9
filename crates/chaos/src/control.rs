//! The control protocol: one command per line over TCP, one answer line per command.
//!
//! ```text
//! add NAME LISTEN UPSTREAM     -> ok NAME LOCAL_ADDR      (LISTEN may use port 0)
//! upstream NAME ADDR           -> ok                      (new connections go to ADDR)
//! cut NAMES DIR                -> ok                      (black hole: drop, keep connections open)
//! hold NAMES DIR               -> ok                      (buffer, deliver on heal)
//! delay NAMES DIR MS           -> ok
//! heal NAMES [DIR]             -> ok                      (back to pass; DIR defaults to both)
//! reset NAMES                  -> ok                      (close every open connection)
//! heal-all                     -> ok                      (every route, both directions)
//! status [NAME]                -> ok {json}               (modes and counters)
//! ping                         -> ok pong
//! ```
//!
//! `NAMES` is one route name or several joined by commas; a command naming an unknown route
//! changes nothing. `DIR` is `up` (client → server), `down` (server → client) or `both`.
//! Errors are answered `err MESSAGE` and leave the connection usable, except a line longer than
//! `CONTROL_LINE_BYTES_MAX`, which closes it.
//!
//! Invariant: a command is applied to all the routes it names or to none.
//! Not done here: the forwarding itself (`route.rs`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::limits::{
    CONTROL_CONNECTIONS_MAX, CONTROL_LINE_BYTES_MAX, DELAY_MS_MAX, ROUTES_MAX, ROUTE_NAME_BYTES_MAX,
};
use crate::route::{Direction, Mode, Route};

/// A control command that failed; the message is sent back as `err MESSAGE`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ControlError {
    #[error("unknown command '{0}'")]
    UnknownCommand(String),
    #[error("usage: {0}")]
    Usage(&'static str),
    #[error("bad route name '{0}' (1-{ROUTE_NAME_BYTES_MAX} of [A-Za-z0-9._>-])")]
    BadName(String),
    #[error("bad direction '{0}' (up, down or both)")]
    BadDirection(String),
    #[error("bad address '{0}' (IP:PORT)")]
    BadAddress(String),
    #[error("bad delay '{0}' (0-{DELAY_MS_MAX} ms)")]
    BadDelay(String),
    #[error("no route named '{0}'")]
    UnknownRoute(String),
    #[error("route '{0}' exists")]
    RouteExists(String),
    #[error("too many routes (at most {ROUTES_MAX})")]
    TooManyRoutes,
    #[error("cannot listen on {addr}: {reason}")]
    Bind { addr: SocketAddr, reason: String },
}

/// One parsed command.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Add {
        name: String,
        listen: SocketAddr,
        upstream: SocketAddr,
    },
    Upstream {
        name: String,
        addr: SocketAddr,
    },
    SetMode {
        names: Vec<String>,
        dirs: Vec<Direction>,
        mode: Mode,
    },
    Reset {
        names: Vec<String>,
    },
    HealAll,
    Status {
        name: Option<String>,
    },
    Ping,
}

/// Parses one line (without its newline).
pub fn parse(line: &str) -> Result<Command, ControlError> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let Some((&verb, args)) = words.split_first() else {
        return Err(ControlError::Usage("a command per line; see `ping`"));
    };
    match (verb, args) {
        ("add", [name, listen, upstream]) => Ok(Command::Add {
            name: route_name(name)?,
            listen: address(listen)?,
            upstream: address(upstream)?,
        }),
        ("add", _) => Err(ControlError::Usage("add NAME LISTEN UPSTREAM")),
        ("upstream", [name, addr]) => Ok(Command::Upstream {
            name: route_name(name)?,
            addr: address(addr)?,
        }),
        ("upstream", _) => Err(ControlError::Usage("upstream NAME ADDR")),
        ("cut", [names, dir]) => set_mode(names, dir, Mode::Cut),
        ("cut", _) => Err(ControlError::Usage("cut NAMES up|down|both")),
        ("hold", [names, dir]) => set_mode(names, dir, Mode::Hold),
        ("hold", _) => Err(ControlError::Usage("hold NAMES up|down|both")),
        ("delay", [names, dir, ms]) => {
            let ms = ms
                .parse::<u64>()
                .ok()
                .filter(|ms| *ms <= DELAY_MS_MAX)
                .ok_or_else(|| ControlError::BadDelay(ms.to_string()))?;
            set_mode(names, dir, Mode::Delay(ms))
        }
        ("delay", _) => Err(ControlError::Usage("delay NAMES up|down|both MS")),
        ("heal", [names]) => set_mode(names, "both", Mode::Pass),
        ("heal", [names, dir]) => set_mode(names, dir, Mode::Pass),
        ("heal", _) => Err(ControlError::Usage("heal NAMES [up|down|both]")),
        ("reset", [names]) => Ok(Command::Reset {
            names: route_names(names)?,
        }),
        ("reset", _) => Err(ControlError::Usage("reset NAMES")),
        ("heal-all", []) => Ok(Command::HealAll),
        ("status", []) => Ok(Command::Status { name: None }),
        ("status", [name]) => Ok(Command::Status {
            name: Some(route_name(name)?),
        }),
        ("ping", []) => Ok(Command::Ping),
        (verb, _) => Err(ControlError::UnknownCommand(verb.to_string())),
    }
}

fn set_mode(names: &str, dir: &str, mode: Mode) -> Result<Command, ControlError> {
    Ok(Command::SetMode {
        names: route_names(names)?,
        dirs: directions(dir)?,
        mode,
    })
}

fn route_name(name: &str) -> Result<String, ControlError> {
    let ok = !name.is_empty()
        && name.len() <= ROUTE_NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'>'));
    if ok {
        Ok(name.to_string())
    } else {
        Err(ControlError::BadName(name.to_string()))
    }
}

fn route_names(names: &str) -> Result<Vec<String>, ControlError> {
    names.split(',').map(route_name).collect()
}

fn directions(dir: &str) -> Result<Vec<Direction>, ControlError> {
    match dir {
        "up" => Ok(vec![Direction::Up]),
        "down" => Ok(vec![Direction::Down]),
        "both" => Ok(vec![Direction::Up, Direction::Down]),
        other => Err(ControlError::BadDirection(other.to_string())),
    }
}

fn address(addr: &str) -> Result<SocketAddr, ControlError> {
    addr.parse()
        .map_err(|_| ControlError::BadAddress(addr.to_string()))
}

/// The routes of one proxy process.
pub struct Proxy {
    routes: Mutex<BTreeMap<String, Arc<Route>>>,
    shutdown: CancellationToken,
}

impl Proxy {
    pub fn new(shutdown: CancellationToken) -> Arc<Proxy> {
        Arc::new(Proxy {
            routes: Mutex::new(BTreeMap::new()),
            shutdown,
        })
    }

    /// Starts a route; answers its bound address.
    pub async fn add_route(
        &self,
        name: String,
        listen: SocketAddr,
        upstream: SocketAddr,
    ) -> Result<SocketAddr, ControlError> {
        {
            let routes = self.routes.lock();
            if routes.contains_key(&name) {
                return Err(ControlError::RouteExists(name));
            }
            if routes.len() >= ROUTES_MAX {
                return Err(ControlError::TooManyRoutes);
            }
        }
        let route = Route::start(name.clone(), listen, upstream, self.shutdown.child_token())
            .await
            .map_err(|e| ControlError::Bind {
                addr: listen,
                reason: e.to_string(),
            })?;
        let local = route.local;
        let mut routes = self.routes.lock();
        // Re-checked: another control connection may have added the name meanwhile.
        if routes.contains_key(&name) || routes.len() >= ROUTES_MAX {
            drop(routes);
            return Err(ControlError::RouteExists(name));
        }
        info!(route = %name, %local, %upstream, "route added");
        routes.insert(name, route);
        Ok(local)
    }

    fn lookup(&self, names: &[String]) -> Result<Vec<Arc<Route>>, ControlError> {
        let routes = self.routes.lock();
        names
            .iter()
            .map(|n| {
                routes
                    .get(n)
                    .cloned()
                    .ok_or_else(|| ControlError::UnknownRoute(n.clone()))
            })
            .collect()
    }

    /// Carries out one command; the answer line without its newline.
    pub async fn execute(&self, command: Command) -> Result<String, ControlError> {
        match command {
            Command::Add {
                name,
                listen,
                upstream,
            } => {
                let local = self.add_route(name.clone(), listen, upstream).await?;
                Ok(format!("ok {name} {local}"))
            }
            Command::Upstream { name, addr } => {
                for route in self.lookup(&[name])? {
                    route.set_upstream(addr);
                }
                Ok("ok".to_string())
            }
            Command::SetMode { names, dirs, mode } => {
                for route in self.lookup(&names)? {
                    for dir in &dirs {
                        route.set_mode(*dir, mode);
                    }
                    info!(route = %route.name, dirs = ?dirs, mode = %mode.describe(), "mode set");
                }
                Ok("ok".to_string())
            }
            Command::Reset { names } => {
                for route in self.lookup(&names)? {
                    route.reset();
                    info!(route = %route.name, "connections reset");
                }
                Ok("ok".to_string())
            }
            Command::HealAll => {
                let routes: Vec<Arc<Route>> = self.routes.lock().values().cloned().collect();
                for route in routes {
                    route.set_mode(Direction::Up, Mode::Pass);
                    route.set_mode(Direction::Down, Mode::Pass);
                }
                info!("all routes healed");
                Ok("ok".to_string())
            }
            Command::Status { name } => {
                let routes = match name {
                    Some(name) => self.lookup(&[name])?,
                    None => self.routes.lock().values().cloned().collect(),
                };
                let list: Vec<serde_json::Value> = routes.iter().map(|r| r.status_json()).collect();
                Ok(format!("ok {}", serde_json::json!({ "routes": list })))
            }
            Command::Ping => Ok("ok pong".to_string()),
        }
    }
}

/// Serves control connections until `shutdown` is cancelled.
pub async fn serve(proxy: Arc<Proxy>, listener: TcpListener, shutdown: CancellationToken) {
    let open = Arc::new(AtomicUsize::new(0));
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            a = listener.accept() => a,
        };
        let Ok((stream, peer)) = accepted else {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        if open.fetch_add(1, Ordering::Relaxed) >= CONTROL_CONNECTIONS_MAX {
            open.fetch_sub(1, Ordering::Relaxed);
            warn!(%peer, "too many control connections; closing the new one");
            continue;
        }
        let (proxy, open) = (proxy.clone(), open.clone());
        tokio::spawn(async move {
            control_connection(&proxy, stream).await;
            open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

async fn control_connection(proxy: &Proxy, stream: TcpStream) {
    let (read, mut write) = stream.into_split();
    // One byte more than the limit, so an over-long line is seen as such.
    let mut reader = BufReader::new(read).take(CONTROL_LINE_BYTES_MAX as u64 + 1);
    let mut line = Vec::new();
    loop {
        line.clear();
        reader.set_limit(CONTROL_LINE_BYTES_MAX as u64 + 1);
        let n = match reader.read_until(b'\n', &mut line).await {
            Ok(n) => n,
            Err(_) => return,
        };
        if n == 0 {
            return;
        }
        let complete = line.last() == Some(&b'\n');
        if !complete && n > CONTROL_LINE_BYTES_MAX {
            let _ = write
                .write_all(
                    format!("err line longer than {CONTROL_LINE_BYTES_MAX} bytes\n").as_bytes(),
                )
                .await;
            return;
        }
        let answer = match std::str::from_utf8(&line) {
            Err(_) => "err line is not UTF-8".to_string(),
            Ok(text) => match parse(text.trim()) {
                Err(e) => format!("err {e}"),
                Ok(command) => proxy
                    .execute(command)
                    .await
                    .unwrap_or_else(|e| format!("err {e}")),
            },
        };
        if write
            .write_all(format!("{answer}\n").as_bytes())
            .await
            .is_err()
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(line: &str, expected: Result<Command, ControlError>) {
        assert_eq!(parse(line), expected, "line: {line:?}");
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parses_every_command() {
        check(
            "add c1 127.0.0.1:0 127.0.0.1:9092",
            Ok(Command::Add {
                name: "c1".into(),
                listen: addr("127.0.0.1:0"),
                upstream: addr("127.0.0.1:9092"),
            }),
        );
        check(
            "cut b1>2,b2>1 both",
            Ok(Command::SetMode {
                names: vec!["b1>2".into(), "b2>1".into()],
                dirs: vec![Direction::Up, Direction::Down],
                mode: Mode::Cut,
            }),
        );
        check(
            "delay x down 250",
            Ok(Command::SetMode {
                names: vec!["x".into()],
                dirs: vec![Direction::Down],
                mode: Mode::Delay(250),
            }),
        );
        check(
            "heal x",
            Ok(Command::SetMode {
                names: vec!["x".into()],
                dirs: vec![Direction::Up, Direction::Down],
                mode: Mode::Pass,
            }),
        );
        check(
            "hold x up",
            Ok(Command::SetMode {
                names: vec!["x".into()],
                dirs: vec![Direction::Up],
                mode: Mode::Hold,
            }),
        );
        check(
            "reset a,b",
            Ok(Command::Reset {
                names: vec!["a".into(), "b".into()],
            }),
        );
        check("heal-all", Ok(Command::HealAll));
        check("status", Ok(Command::Status { name: None }));
        check("  ping  ", Ok(Command::Ping));
    }

    #[test]
    fn refuses_bad_input() {
        check(
            "",
            Err(ControlError::Usage("a command per line; see `ping`")),
        );
        check(
            "frobnicate x",
            Err(ControlError::UnknownCommand("frobnicate".into())),
        );
        check(
            "cut x sideways",
            Err(ControlError::BadDirection("sideways".into())),
        );
        check("cut x", Err(ControlError::Usage("cut NAMES up|down|both")));
        check("cut a,,b up", Err(ControlError::BadName(String::new())));
        check("cut a/b up", Err(ControlError::BadName("a/b".into())));
        check(
            "delay x up 60001",
            Err(ControlError::BadDelay("60001".into())),
        );
        check("delay x up -1", Err(ControlError::BadDelay("-1".into())));
        check(
            "add x localhost:1 127.0.0.1:2",
            Err(ControlError::BadAddress("localhost:1".into())),
        );
        let long = "x".repeat(ROUTE_NAME_BYTES_MAX + 1);
        check(
            &format!("reset {long}"),
            Err(ControlError::BadName(long.clone())),
        );
    }
}
