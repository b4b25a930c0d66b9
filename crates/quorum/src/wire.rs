//! The private protocol on the controller listener: frames, the handshake and the messages.
//!
//! A frame is `[u32 BE length][postcard body]`, the length at most `FRAME_BYTES_MAX` (checked
//! before allocating on read, and before sending on write). A connection opens with the client's
//! `Hello` (protocol version, its node id, the voter ids it was configured with) and the server's
//! `HelloReply`; a server refuses a peer whose voter set differs from its own, so two nodes with
//! different `controller.quorum.voters` never exchange Raft messages (different initial
//! memberships would be a split brain, see docs/decisions/0020-openraft-quorum.md). Then the
//! client sends one `Request` at a time and reads one `Reply`.
//!
//! The messages carry openraft's own request and response types (serde), so this module is the
//! only wire-format knowledge of openraft's RPCs.

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::codec::{self, CodecError};
use crate::limits::FRAME_BYTES_MAX;
use crate::types::{Payload, TypeConfig};

/// Version of this protocol; a peer with another version is refused at the handshake.
pub const PROTOCOL_VERSION: u16 = 1;

/// The first frame a client sends.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Hello {
    /// `PROTOCOL_VERSION` of the client.
    pub version: u16,
    /// The client's node id.
    pub from: u64,
    /// The voter ids the client was configured with, sorted.
    pub voters: Vec<u64>,
}

/// The server's answer to `Hello`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub enum HelloReply {
    /// Accepted; the server's node id (the client checks it reached the node it meant).
    Accepted { node_id: u64 },
    /// Refused; the connection is closed after this frame.
    Refused { reason: String },
}

/// A request after the handshake.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    /// Raft AppendEntries (also the heartbeat).
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    /// Raft RequestVote.
    Vote(VoteRequest<u64>),
    /// One chunk of a snapshot.
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// An application RPC for the peer's `RpcHandler`.
    App(Payload),
    /// An observer asks to be added as a learner, reachable at `addr`.
    Join { addr: String },
    /// Has the peer heard from a leader lately (`pre_vote`)? Last, so that the variants before it
    /// keep their numbers.
    PreVote,
}

/// The answer to one `Request`.
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    /// Answer to `Request::AppendEntries`.
    AppendEntries(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    /// Answer to `Request::Vote`.
    Vote(Result<VoteResponse<u64>, RaftError<u64>>),
    /// Answer to `Request::InstallSnapshot`.
    InstallSnapshot(Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>),
    /// Answer to `Request::App`.
    App(Payload),
    /// Answer to `Request::Join`.
    Join(JoinReply),
    /// The request was not served (the reason says why).
    Refused(String),
    /// Answer to `Request::PreVote`: whether the peer leads or heard from a leader within its
    /// shortest election timeout (it then would not grant).
    PreVote { leader_recent: bool },
}

/// Answer to `Request::Join`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub enum JoinReply {
    /// The observer is (now) a learner.
    Added,
    /// Ask the leader instead.
    NotLeader { leader: Option<u64> },
    /// Refused for good (e.g. the id is a voter's).
    Refused(String),
}

/// Encodes `value` as one frame (length prefix included); `TooLarge` past `FRAME_BYTES_MAX`.
pub fn encode_frame<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    let out = postcard::to_extend(value, vec![0u8; 4])?;
    let len = out.len() - 4;
    if len > FRAME_BYTES_MAX {
        return Err(CodecError::TooLarge {
            len,
            max: FRAME_BYTES_MAX,
        });
    }
    let mut out = out;
    out[..4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(out)
}

/// The length `value` encodes to, without keeping the bytes.
pub fn encoded_len<T: Serialize>(value: &T) -> Result<usize, CodecError> {
    let size = postcard::ser_flavors::Size::default();
    Ok(postcard::serialize_with_flavor(value, size)?)
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The connection failed or closed mid-frame.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The length prefix exceeds `FRAME_BYTES_MAX`.
    #[error("frame of {0} bytes exceeds FRAME_BYTES_MAX")]
    TooLarge(usize),
    /// The body does not decode as the expected message.
    #[error("undecodable frame: {0}")]
    Decode(#[from] CodecError),
}

/// Reads one frame and decodes it; `Ok(None)` on a clean end of stream before a frame.
pub async fn read_frame<T: DeserializeOwned, R: AsyncRead + Unpin>(
    r: &mut R,
) -> Result<Option<T>, FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > FRAME_BYTES_MAX {
        return Err(FrameError::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    Ok(Some(codec::decode(&body)?))
}

/// Writes one encoded frame and flushes.
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, frame: &[u8]) -> std::io::Result<()> {
    w.write_all(frame).await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello_again() -> Hello {
        Hello {
            version: PROTOCOL_VERSION,
            from: 300,
            voters: vec![1, 2, 300],
        }
    }

    #[tokio::test]
    async fn frames_round_trip_and_bad_frames_are_errors() {
        let hello = Hello {
            version: PROTOCOL_VERSION,
            from: 3,
            voters: vec![1, 2, 3],
        };
        let frame = encode_frame(&hello).unwrap();
        let mut r = &frame[..];
        assert_eq!(read_frame::<Hello, _>(&mut r).await.unwrap(), Some(hello));
        let mut empty: &[u8] = &[];
        assert!(read_frame::<Hello, _>(&mut empty).await.unwrap().is_none());
        // Torn frame.
        let mut torn = &frame[..frame.len() - 1];
        assert!(matches!(
            read_frame::<Hello, _>(&mut torn).await,
            Err(FrameError::Io(_))
        ));
        // Length past the limit: refused before allocating.
        let mut huge: &[u8] = &[0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            read_frame::<Hello, _>(&mut huge).await,
            Err(FrameError::TooLarge(_))
        ));
        assert_eq!(
            encoded_len(&hello_again()).unwrap() + 4,
            encode_frame(&hello_again()).unwrap().len()
        );
        // Garbage body.
        let mut garbage: &[u8] = &[0, 0, 0, 3, 0xff, 0xff, 0xff];
        assert!(matches!(
            read_frame::<Request, _>(&mut garbage).await,
            Err(FrameError::Decode(_))
        ));
    }
}
