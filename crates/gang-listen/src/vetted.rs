//! An accepted stream holding its ticket: its I/O fails once a newcomer evicted it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

use crate::Ticket;

/// A connection under a listener's vetting.
#[derive(Debug)]
pub struct Vetted<IO> {
    io: IO,
    ticket: Ticket,
}

impl<IO> Vetted<IO> {
    pub fn new(io: IO, ticket: Ticket) -> Self {
        Vetted { io, ticket }
    }

    pub fn ticket(&self) -> &Ticket {
        &self.ticket
    }

    fn check(&self) -> io::Result<()> {
        if self.ticket.evicted() {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "closed: unvetted, and a newer connection took its place",
            ));
        }
        Ok(())
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Vetted<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Evicted while this read waits: woken, and the read fails.
        this.ticket.flag().wake_on_raise(cx.waker());
        this.check()?;
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.ticket.flag().spoke();
        }
        r
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Vetted<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check()?;
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check()?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// The inner stream's connect info: a TLS server's `peer_certs` and `remote_addr` work as
/// on a bare stream.
impl<IO: Connected> Connected for Vetted<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Vetting, VettingLimits};
    use tokio::io::AsyncReadExt;

    /// A silent peer's connection waits in a read: a newcomer's eviction ends it.
    #[tokio::test]
    async fn an_evicted_connection_waiting_in_a_read_fails_at_once() {
        let v = Vetting::new(VettingLimits {
            per_address: 1,
            total: 10,
            vetted: 10,
        });
        let (io, _peer) = tokio::io::duplex(64);
        let mut silent = Vetted::new(io, v.enter("127.0.0.1:1".parse().unwrap()));
        let read = tokio::spawn(async move {
            let mut b = [0u8; 8];
            silent.read(&mut b).await
        });
        tokio::task::yield_now().await;
        let _newcomer = v.enter("127.0.0.1:2".parse().unwrap());
        let r = tokio::time::timeout(std::time::Duration::from_secs(5), read)
            .await
            .expect("the read ends")
            .unwrap();
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::ConnectionReset);
    }
}
