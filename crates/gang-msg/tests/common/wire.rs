//! What the kernel holds in a stopped rank's sockets: the wire itself, as
//! opposed to the rank's own byte counters. A counter is bumped after its
//! `sendmsg` returns, so a SIGSTOP landing between the two leaves it one write
//! behind while the peer has already counted the read; the socket queues
//! have no such window.
//!
//! Each socket of the rank is duplicated into this process with
//! `pidfd_getfd` (the test is the ranks' parent, so ptrace access holds) and
//! asked for its receive queue (`SIOCINQ`: bytes arrived and not yet read).
//! A Unix socket's data sits in the receiver's queue until read. TCP data may
//! also be between the two kernels: what the sender's kernel took (data
//! bytes sent once, `tcpi_bytes_sent` - `tcpi_bytes_retrans`, plus those not
//! sent yet, `tcpi_notsent_bytes`) less what the receiver's took
//! (`tcpi_bytes_received`), the two ends matched by their addresses. The
//! send queue (`SIOCOUTQ`) would not do: it keeps bytes the receiver has
//! already read until the receiving kernel's delayed TCP ack comes back.

use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::unistd::Pid;

/// One connected socket of a rank and its queues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketQueue {
    pub fd: RawFd,
    /// Bytes arrived and not yet read.
    pub inq: u64,
    pub tcp: Option<TcpEnd>,
}

/// One end of a TCP connection, with its kernel's byte counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpEnd {
    pub local: SocketAddr,
    pub peer: SocketAddr,
    /// Data bytes the application handed this kernel (sent or not yet).
    pub sent: u64,
    /// Of those, not yet acknowledged by the peer's kernel (`SIOCOUTQ`).
    pub outq: u64,
    /// Bytes this kernel took in from the peer.
    pub received: u64,
}

/// Bytes on the wire among a set of sockets (every rank's, so both ends of
/// every connection are in it): unread at a receiver, plus TCP bytes one
/// kernel sent and the other has not taken in. An end whose peer is not in
/// the set counts its whole send queue.
pub fn wire_bytes<'a>(sockets: impl IntoIterator<Item = &'a SocketQueue>) -> u64 {
    let all: Vec<&SocketQueue> = sockets.into_iter().collect();
    let mut total = 0;
    for s in &all {
        total += s.inq;
        let Some(end) = &s.tcp else { continue };
        let peer = all
            .iter()
            .filter_map(|o| o.tcp.as_ref())
            .find(|o| o.local == end.peer && o.peer == end.local);
        total += match peer {
            Some(p) => end.sent.saturating_sub(p.received),
            None => end.outq,
        };
    }
    total
}

/// The queues of every connected stream socket `pid` has open. Listening and
/// datagram sockets answer the ioctls with an error and are left out.
pub fn socket_queues(pid: Pid) -> std::io::Result<Vec<SocketQueue>> {
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    if pidfd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))?.flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if !target.to_string_lossy().starts_with("socket:") {
            continue;
        }
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<RawFd>().ok())
        else {
            continue;
        };
        let dup = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
        if dup < 0 {
            // Closed since the listing.
            continue;
        }
        let dup = unsafe { OwnedFd::from_raw_fd(dup as RawFd) };
        if let Some(q) = queues_of(dup, fd) {
            out.push(q);
        }
    }
    Ok(out)
}

fn queues_of(sock: OwnedFd, fd: RawFd) -> Option<SocketQueue> {
    let raw = sock.as_raw_fd();
    let mut domain: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    let rc = unsafe {
        libc::getsockopt(
            raw,
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            (&mut domain as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    let ask = |req: libc::c_ulong| {
        let mut n: libc::c_int = 0;
        (unsafe { libc::ioctl(raw, req as _, &mut n) } == 0).then_some(n.max(0) as u64)
    };
    // SIOCINQ is FIONREAD and SIOCOUTQ is TIOCOUTQ on Linux.
    let inq = ask(libc::FIONREAD as libc::c_ulong)?;
    let tcp = if domain == libc::AF_INET || domain == libc::AF_INET6 {
        let outq = ask(libc::TIOCOUTQ as libc::c_ulong)?;
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = unsafe {
            libc::getsockopt(
                raw,
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut info as *mut libc::tcp_info).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return None;
        }
        let stream = TcpStream::from(sock);
        Some(TcpEnd {
            local: stream.local_addr().ok()?,
            peer: stream.peer_addr().ok()?,
            sent: info.tcpi_bytes_sent - info.tcpi_bytes_retrans
                + u64::from(info.tcpi_notsent_bytes),
            outq,
            received: info.tcpi_bytes_received,
        })
    } else {
        None
    };
    Some(SocketQueue { fd, inq, tcp })
}
