//! TLS on the controller listener: when the node's controller listener is an SSL one
//! (`controller.listener.names` mapped to SSL in `listener.security.protocol.map`), every
//! connection between quorum nodes is mutual TLS — the server asks for the client's certificate
//! and checks it against its truststore, the client checks the server's — before the handshake of
//! `wire` starts. The certificates are the quorum's only authentication: a node without one the
//! truststore vouches for cannot exchange a byte of Raft.
//!
//! The broker builds the configurations ([`ControllerTls`], from its `ssl.*` settings) and asks
//! for them at each new connection, so replaced files serve the next connection while open ones
//! keep theirs. [`Conn`] is a connection either way.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::{client, server, TlsAcceptor, TlsConnector};

/// The TLS configurations of the controller listener, both ends.
pub trait ControllerTls: Send + Sync {
    /// The acceptor for a new inbound connection.
    fn acceptor(&self) -> TlsAcceptor;
    /// The connector for a new outbound connection.
    fn connector(&self) -> Result<TlsConnector, String>;
}

/// A [`ControllerTls`] in a configuration (`Debug` says only that it is there).
#[derive(Clone)]
pub struct ControllerTlsHandle(pub Arc<dyn ControllerTls>);

impl fmt::Debug for ControllerTlsHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ControllerTls(mutual TLS)")
    }
}

/// One controller-listener connection: plain TCP, or TLS over it (either end).
pub enum Conn {
    Plain(TcpStream),
    Client(Box<client::TlsStream<TcpStream>>),
    Server(Box<server::TlsStream<TcpStream>>),
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            Conn::Plain(_) => "plain",
            Conn::Client(_) | Conn::Server(_) => "TLS",
        };
        write!(f, "Conn({kind}, {:?})", self.tcp().peer_addr().ok())
    }
}

impl Conn {
    /// The TCP connection underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Client(s) => s.get_ref().0,
            Conn::Server(s) => s.get_ref().0,
        }
    }
}

/// The name a server's certificate is checked against: the host of `addr` (`host:port`; an IP
/// address or a DNS name, IPv6 in brackets). Also the inter-broker connections' (replication).
pub fn server_name(addr: &str) -> Result<ServerName<'static>, String> {
    let host = addr
        .rsplit_once(':')
        .map_or(addr, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    ServerName::try_from(host.to_string()).map_err(|e| format!("{host} as a TLS server name: {e}"))
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Client(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Conn::Server(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Client(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Conn::Server(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Client(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Conn::Server(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Client(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Conn::Server(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tls_server_name_is_the_host_of_the_address() {
        assert_eq!(
            server_name("127.0.0.1:9093").expect("ip"),
            ServerName::try_from("127.0.0.1").expect("ip")
        );
        assert_eq!(
            server_name("[::1]:9093").expect("ipv6"),
            ServerName::try_from("::1").expect("ipv6")
        );
        assert_eq!(
            server_name("broker-1.example:9093").expect("dns"),
            ServerName::try_from("broker-1.example").expect("dns")
        );
        assert!(server_name("bad host:1").is_err());
    }
}
