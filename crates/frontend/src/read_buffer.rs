//! A connection's read-ahead buffer, held only while bytes are waiting in it.
//!
//! A buffered reader saves a system call per size field and small request, but a buffer
//! allocated at accept costs every idle connection its full size for as long as it stays open:
//! with 10,000 idle clients that is most of the broker's memory. [`ReadAhead`] reads from the
//! socket into a stack array, hands the caller what it asked for and keeps only the rest, on the
//! heap, until it is consumed. When the socket has nothing to give (the read would wait) and
//! nothing is buffered, the heap buffer is released, so a connection waiting for its next request
//! holds no read buffer at all. Reads at least [`READ_BUFFER_BYTES`] long with nothing buffered go
//! straight into the caller's buffer, as with `tokio::io::BufReader`.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

use crate::limits::READ_BUFFER_BYTES;

/// Buffered reads over `R` whose buffer exists only while it holds unread bytes (or while the
/// connection keeps them coming).
#[derive(Debug)]
pub struct ReadAhead<R> {
    inner: R,
    /// Unread bytes are `buf[pos..]`. Its capacity is kept while reads keep succeeding and given
    /// back when a read finds the socket empty.
    buf: Vec<u8>,
    pos: usize,
}

impl<R> ReadAhead<R> {
    pub fn new(inner: R) -> ReadAhead<R> {
        ReadAhead {
            inner,
            buf: Vec::new(),
            pos: 0,
        }
    }

    /// Heap bytes this reader holds now (0 while it waits on an empty socket).
    pub fn held_bytes(&self) -> usize {
        self.buf.capacity()
    }

    fn release(&mut self) {
        self.buf = Vec::new();
        self.pos = 0;
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for ReadAhead<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pos < this.buf.len() {
            let now = (this.buf.len() - this.pos).min(out.remaining());
            out.put_slice(&this.buf[this.pos..this.pos + now]);
            this.pos += now;
            return Poll::Ready(Ok(()));
        }
        if out.remaining() >= READ_BUFFER_BYTES {
            let read = Pin::new(&mut this.inner).poll_read(cx, out);
            if read.is_pending() {
                this.release();
            }
            return read;
        }
        let mut stack = [MaybeUninit::<u8>::uninit(); READ_BUFFER_BYTES];
        let mut ahead = ReadBuf::uninit(&mut stack);
        match Pin::new(&mut this.inner).poll_read(cx, &mut ahead) {
            Poll::Pending => {
                this.release();
                Poll::Pending
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Ready(Ok(())) => {
                let got = ahead.filled();
                let now = got.len().min(out.remaining());
                out.put_slice(&got[..now]);
                this.buf.clear();
                this.pos = 0;
                this.buf.extend_from_slice(&got[now..]);
                Poll::Ready(Ok(()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn small_reads_are_served_from_one_socket_read_and_the_buffer_goes_when_drained() {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let mut reader = ReadAhead::new(server);
        client
            .write_all(&[0, 0, 0, 3, 1, 2, 3, 0, 0])
            .await
            .unwrap();

        let mut size = [0u8; 4];
        reader.read_exact(&mut size).await.unwrap();
        assert_eq!(size, [0, 0, 0, 3]);
        assert!(reader.held_bytes() >= 5, "the rest of the read is kept");
        let mut body = [0u8; 3];
        reader.read_exact(&mut body).await.unwrap();
        assert_eq!(body, [1, 2, 3]);

        // Two bytes are still buffered; the next read takes them and then finds the socket empty.
        let mut next = [0u8; 4];
        let read = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            reader.read_exact(&mut next),
        )
        .await;
        assert!(read.is_err(), "only two of four bytes have arrived");
        assert_eq!(reader.held_bytes(), 0, "an idle reader holds no buffer");

        client.write_all(&[7, 7, 7, 7]).await.unwrap();
        let mut again = [0u8; 4];
        reader.read_exact(&mut again).await.unwrap();
        assert_eq!(again, [7, 7, 7, 7]);
    }

    #[tokio::test]
    async fn large_reads_bypass_the_buffer_and_end_of_stream_is_seen() {
        let (mut client, server) = tokio::io::duplex(256 * 1024);
        let mut reader = ReadAhead::new(server);
        let body: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        client.write_all(&body).await.unwrap();
        drop(client);

        let mut got = vec![0u8; body.len()];
        reader.read_exact(&mut got).await.unwrap();
        assert_eq!(got, body);
        assert_eq!(reader.held_bytes(), 0);
        let mut one = [0u8; 1];
        assert_eq!(reader.read(&mut one).await.unwrap(), 0);
    }
}
