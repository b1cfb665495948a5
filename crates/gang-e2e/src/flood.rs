//! A connection flood, as a hostile local user makes one: `n` connections to a socket or
//! a TCP port that never speak, each reconnected as soon as the other side closes it, held
//! by a thread of their own (optionally with another user's credentials) until dropped.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Where the flood goes.
#[derive(Debug, Clone)]
pub enum Target {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

/// A flood in progress; dropped, it stops and its connections close.
pub struct Flood {
    stop: Arc<AtomicBool>,
    held: Arc<AtomicUsize>,
    reconnects: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Conn {
    fn open(t: &Target) -> std::io::Result<Conn> {
        let c = match t {
            Target::Unix(p) => Conn::Unix(UnixStream::connect(p)?),
            Target::Tcp(a) => Conn::Tcp(TcpStream::connect_timeout(a, Duration::from_secs(1))?),
        };
        match &c {
            Conn::Unix(s) => s.set_nonblocking(true)?,
            Conn::Tcp(s) => s.set_nonblocking(true)?,
        }
        Ok(c)
    }

    /// Whether the other side closed it (EOF or an error), without waiting.
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 256];
        let r = match self {
            Conn::Unix(s) => s.read(&mut b),
            Conn::Tcp(s) => s.read(&mut b),
        };
        match r {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        }
    }
}

impl Flood {
    /// Start holding `n` connections to `target`, as `as_user` (uid, gid) if given.
    pub fn start(target: Target, n: usize, as_user: Option<(u32, u32)>) -> Flood {
        raise_fd_limit();
        let stop = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicUsize::new(0));
        let reconnects = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (stop, held, reconnects) = (stop.clone(), held.clone(), reconnects.clone());
            std::thread::spawn(move || {
                if let Some((uid, gid)) = as_user {
                    // This thread's credentials only (the raw calls, not glibc's).
                    // SAFETY: plain system calls.
                    unsafe {
                        assert_eq!(
                            libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<u32>()),
                            0
                        );
                        assert_eq!(libc::syscall(libc::SYS_setresgid, gid, gid, gid), 0);
                        assert_eq!(libc::syscall(libc::SYS_setresuid, uid, uid, uid), 0);
                    }
                }
                let mut conns: Vec<Option<Conn>> = (0..n).map(|_| None).collect();
                while !stop.load(Ordering::Relaxed) {
                    let mut open = 0;
                    for c in conns.iter_mut() {
                        if c.as_mut().is_some_and(Conn::closed) {
                            *c = None;
                            reconnects.fetch_add(1, Ordering::Relaxed);
                        }
                        if c.is_none() {
                            *c = Conn::open(&target).ok();
                        }
                        open += usize::from(c.is_some());
                    }
                    held.store(open, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        };
        Flood {
            stop,
            held,
            reconnects,
            thread: Some(thread),
        }
    }

    /// Connections open on the flood's side after its last sweep.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Connections the other side closed and the flood opened again.
    pub fn reconnects(&self) -> usize {
        self.reconnects.load(Ordering::Relaxed)
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Enough descriptors for a flood of thousands.
fn raise_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
    {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

/// How many descriptors process `pid` holds open.
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}
