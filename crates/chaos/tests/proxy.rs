//! Goal: each fault mode of the real `millrace-chaos` process (pass, cut one way and both, hold,
//! hold spill, delay, reset, a dead upstream behind a cut, control errors) does what the control
//! protocol promises, observed over TCP from both ends of a route.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use millrace_chaos::limits::HOLD_BYTES_MAX;

/// The proxy process and one control connection.
struct Chaos {
    child: Child,
    control: BufReader<TcpStream>,
    control_addr: SocketAddr,
}

impl Chaos {
    fn start() -> Chaos {
        let mut child = Command::new(env!("CARGO_BIN_EXE_millrace-chaos"))
            .args(["--control", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("proxy test I/O");
        let mut out = BufReader::new(child.stdout.take().expect("proxy test I/O"));
        let mut line = String::new();
        out.read_line(&mut line).expect("proxy test I/O");
        let addr = line
            .trim()
            .strip_prefix("millrace-chaos control on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        let control_addr: SocketAddr = addr.parse().expect("proxy test I/O");
        let stream = TcpStream::connect(control_addr).expect("proxy test I/O");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("proxy test I/O");
        Chaos {
            child,
            control: BufReader::new(stream),
            control_addr,
        }
    }

    fn cmd(&mut self, line: &str) -> String {
        self.control
            .get_mut()
            .write_all(format!("{line}\n").as_bytes())
            .expect("proxy test I/O");
        let mut answer = String::new();
        self.control.read_line(&mut answer).expect("proxy test I/O");
        answer.trim_end().to_string()
    }

    fn ok(&mut self, line: &str) {
        let answer = self.cmd(line);
        assert_eq!(answer, "ok", "command {line:?}");
    }

    fn add(&mut self, name: &str, upstream: SocketAddr) -> SocketAddr {
        let answer = self.cmd(&format!("add {name} 127.0.0.1:0 {upstream}"));
        let local = answer
            .strip_prefix(&format!("ok {name} "))
            .unwrap_or_else(|| panic!("add answered {answer:?}"));
        local.parse().expect("proxy test I/O")
    }

    fn status(&mut self, name: &str) -> serde_json::Value {
        let answer = self.cmd(&format!("status {name}"));
        let json = answer.strip_prefix("ok ").expect("proxy test I/O");
        let v: serde_json::Value = serde_json::from_str(json).expect("proxy test I/O");
        v["routes"][0].clone()
    }
}

impl Drop for Chaos {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An upstream that records every byte it receives and echoes it back.
struct Echo {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<u8>>>,
    connections: Arc<Mutex<usize>>,
}

impl Echo {
    fn start() -> Echo {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy test I/O");
        let addr = listener.local_addr().expect("proxy test I/O");
        let received = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(Mutex::new(0));
        let (r, c) = (received.clone(), connections.clone());
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                *c.lock().expect("proxy test I/O") += 1;
                let r = r.clone();
                thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    loop {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                r.lock()
                                    .expect("proxy test I/O")
                                    .extend_from_slice(&buf[..n]);
                                if stream.write_all(&buf[..n]).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        Echo {
            addr,
            received,
            connections,
        }
    }

    fn received(&self) -> Vec<u8> {
        self.received.lock().expect("proxy test I/O").clone()
    }

    fn connections(&self) -> usize {
        *self.connections.lock().expect("proxy test I/O")
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("proxy test I/O");
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("proxy test I/O");
    s
}

/// Reads exactly `n` bytes within 5 s.
fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while out.len() < n {
        assert!(
            Instant::now() < deadline,
            "read {} of {n} bytes in 5 s",
            out.len()
        );
        match s.read(&mut buf) {
            Ok(0) => panic!("connection closed after {} of {n} bytes", out.len()),
            Ok(k) => out.extend_from_slice(&buf[..k]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("read failed: {e}"),
        }
    }
    out
}

/// The connection is open and silent: a read times out (no data, no EOF, no reset).
fn assert_silent(s: &mut TcpStream) {
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("expected an open, silent connection, got {other:?}"),
    }
}

/// The connection gets closed (EOF or reset) within 5 s, with no data first.
fn assert_closed(s: &mut TcpStream) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = [0u8; 64];
    loop {
        assert!(Instant::now() < deadline, "connection still open after 5 s");
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => panic!("expected a close, read {n} bytes"),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn pass_forwards_both_ways() {
    let echo = Echo::start();
    let mut chaos = Chaos::start();
    let local = chaos.add("r", echo.addr);
    let mut c = connect(local);
    c.write_all(b"hello").expect("proxy test I/O");
    assert_eq!(read_n(&mut c, 5), b"hello");
    let st = chaos.status("r");
    assert_eq!(st["bytes_up"], 5);
    assert_eq!(st["bytes_down"], 5);
    assert_eq!(st["up"], "pass");
}

#[test]
fn cut_up_is_a_black_hole_and_heal_closes_what_lost_bytes() {
    let echo = Echo::start();
    let mut chaos = Chaos::start();
    let local = chaos.add("r", echo.addr);
    let mut c = connect(local);
    c.write_all(b"one").expect("proxy test I/O");
    assert_eq!(read_n(&mut c, 3), b"one");

    chaos.ok("cut r up");
    c.write_all(b"lost").expect("proxy test I/O");
    assert_silent(&mut c);
    // A new connection is accepted but nothing gets through either.
    let mut c2 = connect(local);
    c2.write_all(b"lost too").expect("proxy test I/O");
    assert_silent(&mut c2);
    assert_eq!(echo.received(), b"one");
    assert_eq!(chaos.status("r")["dropped_up"], 12);

    chaos.ok("heal r");
    // Their streams have a gap now: both connections are closed rather than resumed.
    assert_closed(&mut c);
    assert_closed(&mut c2);
    let mut c3 = connect(local);
    c3.write_all(b"two").expect("proxy test I/O");
    assert_eq!(read_n(&mut c3, 3), b"two");
    assert_eq!(echo.received(), b"onetwo");
    assert_eq!(chaos.status("r")["closed_after_drop"], 2);
}

#[test]
fn cut_down_is_one_way() {
    let echo = Echo::start();
    let mut chaos = Chaos::start();
    let local = chaos.add("r", echo.addr);
    let mut c = connect(local);
    chaos.ok("cut r down");
    c.write_all(b"abc").expect("proxy test I/O");
    wait_for("the server to get the bytes", || echo.received() == b"abc");
    assert_silent(&mut c);
    assert_eq!(chaos.status("r")["dropped_down"], 3);
    chaos.ok("heal r down");
    assert_closed(&mut c);
}

#[test]
fn a_connection_that_dropped_nothing_survives_the_heal() {
    let echo = Echo::start();
    let mut chaos = Chaos::start();
    let local = chaos.add("r", echo.addr);
    let mut c = connect(local);
    chaos.ok("cut r both");
    thread::sleep(Duration::from_millis(100));
    chaos.ok("heal r");
    c.write_all(b"still here").expect("proxy test I/O");
    assert_eq!(read_n(&mut c, 10), b"still here");
}

#[test]
fn hold_delivers_in_order_on_heal() {
    let echo = Echo::start();
    let mut chaos = Chaos::start();
    let local = chaos.add("r", echo.addr);
    let mut c = connect(local);
    chaos.ok("hold r up");
    for part in [&b"a"[..], b"bb", b"ccc"] {
        c.write_all(part).expect("proxy test I/O");
        thread::sleep(Duration::from_millis(30));
    }
    assert_silent(&mut c);
    assert!(echo.received().is_empty());
    chaos.ok("heal r up");
    assert_eq!(read_n(&mut c, 6), b"abbccc");
    c.write_all(b"d").expect("proxy test I/O");
    assert_eq!(read_n(&mut c, 1), b"d");
    assert_eq!(chaos.status("r")["hold_spills"], 0);
}

#[test]
fn hold_past_its_bound_turns_into_a_cut() {
    let echo = Echo::start();
    let mut chaos = Chaos::start();
    let local = chaos.add("r", echo.addr);
    let mut c = connect(local);
    chaos.ok("hold r up");
    let block = vec![7u8; 64 * 1024];
    let mut sent = 0;
    while sent <= HOLD_BYTES_MAX + block.len() {
        c.write_all(&block).expect("proxy test I/O");
        sent += block.len();
    }
    wait_for("the spill", || chaos.status("r")["hold_spills"] == 1);
    chaos.ok("heal r");
    assert_closed(&mut c);
    assert!(
        echo.received().is_empty(),
        "a spilled hold must deliver nothing"
    );
}

#[test]
fn delay_holds_each_chunk_back() {
    let echo = Echo::start();
    let mut chaos = Chaos::start();
    let local = chaos.add("r", echo.addr);
    let mut c = connect(local);
    chaos.ok("delay r up 300");
    let start = Instant::now();
    c.write_all(b"x").expect("proxy test I/O");
    c.write_all(b"y").expect("proxy test I/O");
    assert_eq!(read_n(&mut c, 2), b"xy");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(300),
        "round trip took {took:?}"
    );
    assert!(took < Duration::from_secs(3), "round trip took {took:?}");
    chaos.ok("heal r");
    let start = Instant::now();
    c.write_all(b"z").expect("proxy test I/O");
    assert_eq!(read_n(&mut c, 1), b"z");
    assert!(start.elapsed() < Duration::from_millis(250));
}

#[test]
fn reset_closes_every_connection_of_the_route() {
    let echo = Echo::start();
    let mut chaos = Chaos::start();
    let local = chaos.add("r", echo.addr);
    let other = chaos.add("other", echo.addr);
    let mut a = connect(local);
    let mut b = connect(local);
    let mut o = connect(other);
    for s in [&mut a, &mut b, &mut o] {
        s.write_all(b"hi").expect("proxy test I/O");
        assert_eq!(read_n(s, 2), b"hi");
    }
    chaos.ok("reset r");
    assert_closed(&mut a);
    assert_closed(&mut b);
    o.write_all(b"ok").expect("proxy test I/O");
    assert_eq!(read_n(&mut o, 2), b"ok");
    let mut c = connect(local);
    c.write_all(b"new").expect("proxy test I/O");
    assert_eq!(read_n(&mut c, 3), b"new");
    assert_eq!(chaos.status("r")["resets"], 1);
}

#[test]
fn dead_upstream_behind_a_cut_stays_silent_and_plain_one_is_refused() {
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").expect("proxy test I/O");
        l.local_addr().expect("proxy test I/O")
    };
    let mut chaos = Chaos::start();
    let local = chaos.add("r", dead);
    // Not cut: the client sees the refusal as a close.
    let mut c = connect(local);
    assert_closed(&mut c);
    // Cut: the client cannot tell the server is down.
    chaos.ok("cut r both");
    let mut c = connect(local);
    c.write_all(b"anyone?").expect("proxy test I/O");
    assert_silent(&mut c);
    assert!(
        chaos.status("r")["upstream_connect_failed"]
            .as_u64()
            .expect("proxy test I/O")
            >= 2
    );
    chaos.ok("heal r");
    assert_closed(&mut c);
}

#[test]
fn upstream_can_be_moved() {
    let first = Echo::start();
    let second = Echo::start();
    let mut chaos = Chaos::start();
    let local = chaos.add("r", first.addr);
    chaos.ok(&format!("upstream r {}", second.addr));
    let mut c = connect(local);
    c.write_all(b"moved").expect("proxy test I/O");
    assert_eq!(read_n(&mut c, 5), b"moved");
    assert_eq!(second.received(), b"moved");
    assert_eq!(first.connections(), 0);
}

#[test]
fn control_errors_change_nothing_and_keep_the_proxy_serving() {
    let echo = Echo::start();
    let mut chaos = Chaos::start();
    chaos.add("a", echo.addr);
    assert!(chaos.cmd("bogus").starts_with("err unknown command"));
    // One unknown name: nothing is applied, not even to the known route.
    assert!(chaos
        .cmd("cut a,nosuch both")
        .starts_with("err no route named 'nosuch'"));
    assert_eq!(chaos.status("a")["up"], "pass");
    assert!(chaos
        .cmd(&format!("add a 127.0.0.1:0 {}", echo.addr))
        .starts_with("err route 'a' exists"));
    assert!(chaos.cmd("delay a up 999999").starts_with("err bad delay"));
    assert_eq!(chaos.cmd("ping"), "ok pong");

    // An over-long line is refused and ends that control connection only.
    let long = format!("cut {} up", "x".repeat(10_000));
    let answer = chaos.cmd(&long);
    assert!(answer.starts_with("err line longer than"), "{answer}");
    let mut fresh = BufReader::new(TcpStream::connect(chaos.control_addr).expect("proxy test I/O"));
    fresh
        .get_mut()
        .write_all(b"ping\n")
        .expect("proxy test I/O");
    let mut line = String::new();
    fresh.read_line(&mut line).expect("proxy test I/O");
    assert_eq!(line, "ok pong\n");
}
