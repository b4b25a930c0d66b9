//! The `millrace-chaos` binary: starts the control listener, prints
//! `millrace-chaos control on ADDR` on stdout and serves until killed. See `control.rs` for the
//! protocol.

use std::io::Write;
use std::net::SocketAddr;

use anyhow::Context;
use clap::Parser;
use millrace_chaos::control::{serve, Proxy};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// TCP fault proxy: named routes whose directions can be cut, held, delayed or reset.
#[derive(Debug, Parser)]
#[command(name = "millrace-chaos", version)]
struct Cli {
    /// Address of the control listener (line protocol; port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    control: SocketAddr,
    /// A route to add at start: NAME=LISTEN=UPSTREAM (repeatable).
    #[arg(long = "route", value_name = "NAME=LISTEN=UPSTREAM")]
    routes: Vec<String>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let filter = std::env::var("MILLRACE_CHAOS_LOG").unwrap_or_else(|_| "info".to_string());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(run(cli))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    let proxy = Proxy::new(shutdown.clone());
    for spec in &cli.routes {
        let mut parts = spec.splitn(3, '=');
        let (Some(name), Some(listen), Some(upstream)) = (parts.next(), parts.next(), parts.next())
        else {
            anyhow::bail!("--route {spec}: expected NAME=LISTEN=UPSTREAM");
        };
        let line = format!("add {name} {listen} {upstream}");
        let command =
            millrace_chaos::control::parse(&line).with_context(|| format!("--route {spec}"))?;
        let answer = proxy
            .execute(command)
            .await
            .with_context(|| format!("--route {spec}"))?;
        println!("{answer}");
    }
    let listener = TcpListener::bind(cli.control)
        .await
        .with_context(|| format!("cannot listen on {}", cli.control))?;
    let local = listener.local_addr()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "millrace-chaos control on {local}")?;
    out.flush()?;
    drop(out);
    serve(proxy, listener, shutdown).await;
    Ok(())
}
