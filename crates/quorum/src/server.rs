//! The controller listener: accepts peers, checks their handshake, and serves Raft RPCs,
//! application RPCs and observers' join requests.
//!
//! One task per connection reads one request, answers it, and reads the next (a peer opens more
//! connections for concurrency). A bad frame, a refused handshake or an idle connection
//! (`INBOUND_IDLE_MS_MAX`) closes that connection only, with a warning naming the peer; nothing
//! a peer sends can panic the server. Inbound connections are bounded by
//! `INBOUND_CONNECTIONS_MAX`. An observer answers Vote requests with a refusal: it never votes.
//! PreVote asks whether this node heard from a leader lately (`pre_vote`); answering an
//! AppendEntries that carried no lower term counts as hearing from one.
//!
//! Shutdown: the cancellation token stops the accept loop and every connection task; the tracker
//! lets `Quorum::shutdown` wait for them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::raft::AppendEntriesResponse;
use openraft::{BasicNode, ChangeMembers};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::limits::{
    APP_RPC_BYTES_MAX, HANDSHAKE_TIMEOUT_MS, INBOUND_CONNECTIONS_MAX, INBOUND_IDLE_MS_MAX,
    NODE_ADDR_BYTES_MAX, OBSERVERS_MAX, SNAPSHOT_BYTES_MAX,
};
use crate::pre_vote::LeaderContact;
use crate::tls::{Conn, ControllerTlsHandle};
use crate::types::{Payload, Raft};
use crate::wire::{self, Hello, HelloReply, JoinReply, Reply, Request, PROTOCOL_VERSION};
use crate::{Role, RpcHandler};

/// What the listener serves.
pub struct Server {
    /// This node's Raft.
    pub raft: Raft,
    /// This node's id.
    pub node_id: u64,
    /// This node's role.
    pub role: Role,
    /// The configured voter ids, sorted (peers must have the same).
    pub voter_ids: Vec<u64>,
    /// The application's handler.
    pub rpc: Arc<dyn RpcHandler>,
    /// Stops the server.
    pub cancel: CancellationToken,
    /// Tracks the server's tasks.
    pub tracker: TaskTracker,
    /// When a leader was last heard from (pre-vote).
    pub(crate) contact: Arc<LeaderContact>,
    /// Mutual TLS before the handshake, when the listener is an SSL one.
    pub tls: Option<ControllerTlsHandle>,
}

impl Server {
    /// Accepts connections until cancelled.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        let slots = Arc::new(Semaphore::new(INBOUND_CONNECTIONS_MAX));
        loop {
            let accepted = tokio::select! {
                _ = self.cancel.cancelled() => return,
                a = listener.accept() => a,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little instead of spinning.
                    tracing::warn!(error = %e, "controller listener: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                tracing::warn!(%peer, "controller listener: too many connections; closing");
                continue;
            };
            let server = self.clone();
            self.tracker.spawn(async move {
                let _slot = slot;
                let cancel = server.cancel.clone();
                tokio::select! {
                    _ = cancel.cancelled() => {}
                    _ = server.connection(stream, peer) => {}
                }
            });
        }
    }

    async fn connection(&self, stream: TcpStream, peer: SocketAddr) {
        let _ = stream.set_nodelay(true);
        let mut stream = match &self.tls {
            None => Conn::Plain(stream),
            Some(tls) => {
                let accepted = tokio::time::timeout(
                    Duration::from_millis(HANDSHAKE_TIMEOUT_MS),
                    tls.0.acceptor().accept(stream),
                )
                .await;
                match accepted {
                    Ok(Ok(s)) => Conn::Server(Box::new(s)),
                    Ok(Err(e)) => {
                        // INFO, as on the Kafka listeners: a cut link ends handshakes too.
                        tracing::info!(%peer, error = %e, "controller listener: TLS handshake failed; closing");
                        return;
                    }
                    Err(_) => {
                        tracing::warn!(%peer, "controller listener: no TLS handshake in time; closing");
                        return;
                    }
                }
            }
        };
        let hello = tokio::time::timeout(
            Duration::from_millis(HANDSHAKE_TIMEOUT_MS),
            wire::read_frame::<Hello, _>(&mut stream),
        )
        .await;
        let hello = match hello {
            Ok(Ok(Some(h))) => h,
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                tracing::warn!(%peer, error = %e, "controller listener: bad handshake; closing");
                return;
            }
            Err(_) => {
                tracing::warn!(%peer, "controller listener: no handshake in time; closing");
                return;
            }
        };
        let reply = self.check_hello(&hello);
        let accepted = matches!(reply, HelloReply::Accepted { .. });
        if let HelloReply::Refused { reason } = &reply {
            tracing::warn!(%peer, from = hello.from, %reason, "controller listener: refusing peer");
        }
        if !self.send(&mut stream, &reply, peer).await || !accepted {
            return;
        }
        loop {
            let frame = tokio::time::timeout(
                Duration::from_millis(INBOUND_IDLE_MS_MAX),
                wire::read_frame::<Request, _>(&mut stream),
            )
            .await;
            let req = match frame {
                Ok(Ok(Some(r))) => r,
                Ok(Ok(None)) | Err(_) => return,
                Ok(Err(e)) => {
                    tracing::warn!(%peer, from = hello.from, error = %e, "controller listener: bad frame; closing");
                    return;
                }
            };
            let reply = self.handle(hello.from, req).await;
            if !self.send(&mut stream, &reply, peer).await {
                return;
            }
        }
    }

    async fn send<T: serde::Serialize>(
        &self,
        stream: &mut Conn,
        msg: &T,
        peer: SocketAddr,
    ) -> bool {
        let frame = match wire::encode_frame(msg) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(%peer, error = %e, "controller listener: reply does not encode");
                return false;
            }
        };
        wire::write_frame(stream, &frame).await.is_ok()
    }

    fn check_hello(&self, hello: &Hello) -> HelloReply {
        if hello.version != PROTOCOL_VERSION {
            return HelloReply::Refused {
                reason: format!(
                    "protocol version {} (this node speaks {PROTOCOL_VERSION})",
                    hello.version
                ),
            };
        }
        if hello.voters != self.voter_ids {
            return HelloReply::Refused {
                reason: format!(
                    "controller.quorum.voters differ: peer has {:?}, this node has {:?}",
                    hello.voters, self.voter_ids
                ),
            };
        }
        if hello.from == self.node_id {
            return HelloReply::Refused {
                reason: format!("peer claims this node's id {}", self.node_id),
            };
        }
        HelloReply::Accepted {
            node_id: self.node_id,
        }
    }

    async fn handle(&self, from: u64, req: Request) -> Reply {
        match req {
            Request::AppendEntries(rpc) => {
                let answer = self.raft.append_entries(rpc).await;
                if matches!(&answer, Ok(r) if !matches!(r, AppendEntriesResponse::HigherVote(_))) {
                    self.contact.touch();
                }
                Reply::AppendEntries(answer)
            }
            Request::Vote(_) if self.role == Role::Observer => {
                Reply::Refused("an observer does not vote".into())
            }
            Request::Vote(rpc) => Reply::Vote(self.raft.vote(rpc).await),
            Request::InstallSnapshot(rpc) => {
                let end = rpc.offset.checked_add(rpc.data.len() as u64);
                if !matches!(end, Some(e) if e <= SNAPSHOT_BYTES_MAX as u64) {
                    return Reply::Refused("snapshot chunk past SNAPSHOT_BYTES_MAX".into());
                }
                Reply::InstallSnapshot(self.raft.install_snapshot(rpc).await)
            }
            Request::App(payload) => {
                let answer = self.rpc.handle(Some(from), payload.0).await;
                if answer.len() > APP_RPC_BYTES_MAX {
                    tracing::warn!(
                        from,
                        len = answer.len(),
                        "RpcHandler answer exceeds APP_RPC_BYTES_MAX"
                    );
                    return Reply::Refused("answer exceeds APP_RPC_BYTES_MAX".into());
                }
                Reply::App(Payload(answer))
            }
            Request::Join { addr } => Reply::Join(self.join(from, addr).await),
            Request::PreVote => Reply::PreVote {
                leader_recent: self.contact.leader_recent(&self.raft, self.node_id),
            },
        }
    }

    /// Adds observer `from` as a learner reachable at `addr` (leader only).
    async fn join(&self, from: u64, addr: String) -> JoinReply {
        if self.voter_ids.contains(&from) {
            return JoinReply::Refused(format!("node {from} is a voter"));
        }
        if addr.is_empty() || addr.len() > NODE_ADDR_BYTES_MAX {
            return JoinReply::Refused("bad observer address".into());
        }
        let metrics = self.raft.metrics().borrow().clone();
        if metrics.current_leader != Some(self.node_id) {
            return JoinReply::NotLeader {
                leader: metrics.current_leader,
            };
        }
        let membership = metrics.membership_config.membership().clone();
        let known = membership.get_node(&from).cloned();
        let result = match known {
            Some(node) if node.addr == addr => return JoinReply::Added,
            Some(_) => {
                let nodes = [(from, BasicNode::new(addr.clone()))].into_iter().collect();
                self.raft
                    .change_membership(ChangeMembers::SetNodes(nodes), true)
                    .await
            }
            None => {
                let learners = membership.learner_ids().count();
                if learners >= OBSERVERS_MAX {
                    return JoinReply::Refused(format!("already {learners} observers"));
                }
                self.raft
                    .add_learner(from, BasicNode::new(addr.clone()), false)
                    .await
            }
        };
        match result {
            Ok(_) => {
                tracing::info!(observer = from, %addr, "observer joined the metadata quorum");
                JoinReply::Added
            }
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                JoinReply::NotLeader {
                    leader: f.leader_id,
                }
            }
            Err(e) => JoinReply::Refused(e.to_string()),
        }
    }
}
