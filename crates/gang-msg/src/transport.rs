//! Listeners, connecting to a peer, and the handshake that opens a connection.
//!
//! Every rank listens on a Unix socket in its private `GANG_MSG_DIR` and on
//! an ephemeral TCP port. The TCP listener is opened even when every peer
//! turns out to share the host: the endpoints are exchanged in a single fence,
//! so a rank cannot know its peers' hosts before it publishes its own, and an
//! idle listener costs one descriptor. `GANG_MSG_TRANSPORT=unix` skips it.
//!
//! The lower rank of a pair connects to the higher one (so each pair opens one
//! connection, and reconnects after a save/restore the same way) and starts
//! with `Hello`: its rank, the job id and the token from the higher rank's
//! endpoint, which only the job's ranks have read from the KVS.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use crate::abi::{Endpoint, files};
use crate::config::{Config, Transport};
use crate::error::{Error, Result};

pub struct Listeners {
    pub unix: Option<UnixListener>,
    pub tcp: Option<TcpListener>,
    pub endpoint: Endpoint,
}

pub fn bind(cfg: &Config) -> Result<Listeners> {
    let token = random_token()?;
    let mut unix = None;
    let mut unix_path = String::new();
    if let Some(dir) = &cfg.dir {
        let path = dir.join(files::PEER_SOCK);
        // A socket left by an earlier exec of this rank in the same directory.
        let _ = std::fs::remove_file(&path);
        let l = UnixListener::bind(&path)
            .map_err(|e| Error::io(format!("bind {}", path.display()), e))?;
        l.set_nonblocking(true)
            .map_err(|e| Error::io("listener", e))?;
        unix_path = path.to_string_lossy().into_owned();
        unix = Some(l);
    }
    let mut tcp = None;
    let mut tcp_addr = String::new();
    if cfg.size > 1 && cfg.transport != Transport::Unix {
        let ip = cfg.tcp_addr.unwrap_or_else(local_ipv4);
        let bind_ip = if cfg.tcp_addr.is_some() {
            ip
        } else {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        };
        let l = TcpListener::bind(SocketAddr::new(bind_ip, 0))
            .map_err(|e| Error::io("bind TCP listener", e))?;
        l.set_nonblocking(true)
            .map_err(|e| Error::io("listener", e))?;
        let port = l
            .local_addr()
            .map_err(|e| Error::io("listener address", e))?
            .port();
        tcp_addr = SocketAddr::new(ip, port).to_string();
        tcp = Some(l);
    }
    Ok(Listeners {
        unix,
        tcp,
        endpoint: Endpoint {
            host: cfg.host_id.clone(),
            unix: unix_path,
            tcp: tcp_addr,
            token,
        },
    })
}

/// Whether to reach `peer` over TCP.
pub fn use_tcp(cfg: &Config, peer: &Endpoint) -> bool {
    cfg.transport == Transport::Tcp || peer.host != cfg.host_id || peer.unix.is_empty()
}

/// Connect (blocking: the peer's listener exists since before the fence, and
/// the kernel completes the connection from its backlog even while the peer is
/// stopped) and return a non-blocking descriptor.
pub fn connect(peer: &Endpoint, tcp: bool) -> io::Result<OwnedFd> {
    if tcp {
        let addr: SocketAddr = peer.tcp.parse().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad TCP endpoint {:?}", peer.tcp),
            )
        })?;
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
        let fd = s.into();
        size_buffers(&fd);
        Ok(fd)
    } else {
        let s = UnixStream::connect(Path::new(&peer.unix))?;
        s.set_nonblocking(true)?;
        let fd = s.into();
        size_buffers(&fd);
        Ok(fd)
    }
}

/// Socket buffers of 1 MiB each way: a flush of a large burst then takes
/// fewer poll-and-wake rounds between the two progress threads.
const SOCK_BUF: libc::c_int = 1 << 20;

fn size_buffers(fd: &OwnedFd) {
    for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        // Best effort: the kernel caps it at net.core.[wr]mem_max.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                &SOCK_BUF as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
    }
}

/// Accept one pending connection from either listener, non-blocking.
pub fn accept(l: &Listeners) -> io::Result<Option<OwnedFd>> {
    if let Some(u) = &l.unix {
        match u.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(true)?;
                let fd = s.into();
                size_buffers(&fd);
                return Ok(Some(fd));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    if let Some(t) = &l.tcp {
        match t.accept() {
            Ok((s, _)) => {
                s.set_nodelay(true)?;
                s.set_nonblocking(true)?;
                let fd = s.into();
                size_buffers(&fd);
                return Ok(Some(fd));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

pub fn listener_fds(l: &Listeners) -> Vec<i32> {
    let mut v = Vec::new();
    if let Some(u) = &l.unix {
        v.push(u.as_raw_fd());
    }
    if let Some(t) = &l.tcp {
        v.push(t.as_raw_fd());
    }
    v
}

/// The Hello payload: the job id and the token of the endpoint connected to.
pub fn hello_payload(job: &str, token: &str) -> Vec<u8> {
    format!("{job}\n{token}").into_bytes()
}

pub fn check_hello(payload: &[u8], job: &str, token: &str) -> bool {
    payload == hello_payload(job, token).as_slice()
}

fn random_token() -> Result<String> {
    let mut b = [0u8; 16];
    let n = unsafe { libc::getrandom(b.as_mut_ptr() as *mut _, b.len(), 0) };
    if n != b.len() as isize {
        return Err(Error::io("getrandom", io::Error::last_os_error()));
    }
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// The first non-loopback IPv4 address of an interface that is up, else
/// 127.0.0.1: what peers on other hosts reach us on when the agent did not
/// say (`GANG_MSG_TCP_ADDR`).
fn local_ipv4() -> IpAddr {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    let mut found = None;
    if unsafe { libc::getifaddrs(&mut head) } == 0 {
        let mut p = head;
        while !p.is_null() {
            let ifa = unsafe { &*p };
            p = ifa.ifa_next;
            let up = ifa.ifa_flags & libc::IFF_UP as u32 != 0;
            let lo = ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0;
            if ifa.ifa_addr.is_null() || !up || lo {
                continue;
            }
            if unsafe { (*ifa.ifa_addr).sa_family } as i32 == libc::AF_INET {
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                found = Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    sin.sin_addr.s_addr,
                ))));
                break;
            }
        }
        unsafe { libc::freeifaddrs(head) };
    }
    found.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}
