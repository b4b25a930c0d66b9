//! `millrace-chaos`: an in-process TCP proxy for fault tests on one machine, where the kernel has
//! no `tc netem` and tests run without root.
//!
//! A proxy process holds named routes (listen address → upstream address). A cluster test puts a
//! route on every link it wants to break (each client link, each directed broker → broker and
//! controller → controller link) and steers them at run time over the line protocol in
//! `control.rs`: per route and per direction it can `cut` (black hole), `hold` (buffer, deliver on
//! heal), `delay`, `heal`, or `reset` (close every connection).
//!
//! Invariants: every buffer is bounded (`limits.rs`); a direction that dropped bytes never
//! passes bytes again — its connection is closed when it heals, so no peer ever reads a stream
//! with a gap in it; bytes of one direction leave in the order they came.
//!
//! Not done here: faults of processes (the harness sends kill -9 and SIGSTOP itself), packet-level
//! effects (loss, reordering, duplication) that TCP would hide anyway.
//!
//! Read first: `route::Route` (forwarding and modes), then `control::Proxy` (the commands).

pub mod control;
pub mod limits;
pub mod route;
