//! The gate: what accepts on the library's TCP port instead of the library.
//!
//! OpenPMIx 4.2 listens on `tcp4://127.0.0.1:PORT`, which every local user can reach, and
//! reads each connection's handshake on its progress thread with blocking reads and no
//! deadline (`pmix_ptl_base_connection_handler`): one idle connection stalls every PMIx
//! client of the node. Over TCP it also believes whatever uid a client's `native`
//! credential claims, and lets the client pick its security module (`none` included).
//! So the library is moved behind a Unix socket only the agent's user can reach
//! (`ffi::take_listener`), and this gate accepts on the TCP port:
//!
//! 1. the connecting socket's owner is looked up at once (`/proc/net/tcp`: loopback, so
//!    the peer's socket is on this host, and its uid is the kernel's record of who made
//!    it); a user with no rank registered here is closed before anything is read;
//! 2. the handshake is read whole within [`HANDSHAKE_DEADLINE`], on a thread of its own
//!    (at most [`PENDING_PER_USER`] at once per user): a slow client holds only itself;
//! 3. it must be a plain client (no tools or launchers: none is served here) using the
//!    `native` module, naming a rank registered here to the very uid that owns the socket;
//! 4. only then is it handed to the library, handshake first, and the two sockets are
//!    spliced for the connection's life.
//!
//! The gate also knows when the library has let go of a connection: its end of the Unix
//! socket reads end-of-file once the library has seen the client leave and closed it. A
//! rank is deregistered only after that ([`Clients::cut`], [`Clients::wait_closed`]):
//! OpenPMIx 4.2's `_deregister_client` closes a still-open client socket without taking
//! its read event out of the event loop, and the next client given the same descriptor
//! number is then never read (its `PMIx_Init` waits forever for the job's data; seen as a
//! second job on a node hanging, or failing in `MPI_Init`, right after a killed one).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::Host;

/// The longest a client may take to send its whole handshake (a rank sends it in one
/// write right after connecting; 10 s leaves room for a loaded host).
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);
/// Handshakes one user may have in progress at once.
pub const PENDING_PER_USER: usize = 16;
/// The library's own bound on a handshake's body (`PMIX_MAX_CRED_SIZE`).
const MAX_BODY: usize = 128 * 1024;
/// The handshake's header: pindex, tag, nbytes (host order), padding.
const HEADER: usize = 16;
/// A rank started by a PMIx server (`PMIX_SIMPLE_CLIENT`).
const SIMPLE_CLIENT: u8 = 0;

/// A connection handed to the library: its id, and the client's socket.
type Live = (u64, TcpStream);

/// How long the library may take to close its end of a connection the gate cut (it
/// does so on its next turn of its event loop: milliseconds).
pub const LIBRARY_CLOSE_DEADLINE: Duration = Duration::from_secs(5);

/// The ranks registered here, each with its user; the handshakes in progress; and the
/// connections handed to the library, each with the client's socket (to cut it).
#[derive(Default)]
pub struct Clients {
    ranks: Mutex<HashMap<(String, u32), u32>>,
    pending: Mutex<HashMap<u32, usize>>,
    live: Mutex<HashMap<(String, u32), Vec<Live>>>,
    /// Signalled whenever a connection in `live` ends.
    ended: Condvar,
    next: AtomicU64,
}

impl Clients {
    pub fn insert(&self, nspace: &str, rank: u32, uid: u32) {
        self.ranks
            .lock()
            .unwrap()
            .insert((nspace.to_string(), rank), uid);
    }

    pub fn remove(&self, nspace: &str, rank: u32) {
        self.ranks
            .lock()
            .unwrap()
            .remove(&(nspace.to_string(), rank));
    }

    fn uid_of(&self, nspace: &str, rank: u32) -> Option<u32> {
        self.ranks
            .lock()
            .unwrap()
            .get(&(nspace.to_string(), rank))
            .copied()
    }

    fn has_user(&self, uid: u32) -> bool {
        self.ranks.lock().unwrap().values().any(|&u| u == uid)
    }

    /// Count a handshake of `uid` in, unless it has too many already.
    fn begin(&self, uid: u32) -> bool {
        let mut pending = self.pending.lock().unwrap();
        let n = pending.entry(uid).or_default();
        if *n >= PENDING_PER_USER {
            return false;
        }
        *n += 1;
        true
    }

    /// A connection of `nspace`'s `rank` is being handed to the library: its id.
    fn opened(&self, nspace: &str, rank: u32, tcp: TcpStream) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.live
            .lock()
            .unwrap()
            .entry((nspace.to_string(), rank))
            .or_default()
            .push((id, tcp));
        id
    }

    /// The library has closed its end of connection `id`.
    fn closed(&self, nspace: &str, rank: u32, id: u64) {
        let mut live = self.live.lock().unwrap();
        let key = (nspace.to_string(), rank);
        if let Some(conns) = live.get_mut(&key) {
            conns.retain(|(i, _)| *i != id);
            if conns.is_empty() {
                live.remove(&key);
            }
        }
        drop(live);
        self.ended.notify_all();
    }

    /// Cut the rank's connections at the client's side (a process that outlived the rank
    /// with its socket loses it): the library then reads their end and closes them.
    pub fn cut(&self, nspace: &str, rank: u32) {
        let live = self.live.lock().unwrap();
        for (_, tcp) in live.get(&(nspace.to_string(), rank)).into_iter().flatten() {
            let _ = tcp.shutdown(Shutdown::Both);
        }
    }

    /// Wait until the library has closed every connection of the rank, at most `limit`:
    /// whether it has.
    pub fn wait_closed(&self, nspace: &str, rank: u32, limit: Duration) -> bool {
        let key = (nspace.to_string(), rank);
        let live = self.live.lock().unwrap();
        let (_live, timeout) = self
            .ended
            .wait_timeout_while(live, limit, |live| live.contains_key(&key))
            .unwrap();
        !timeout.timed_out()
    }

    fn end(&self, uid: u32) {
        let mut pending = self.pending.lock().unwrap();
        if let Some(n) = pending.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                pending.remove(&uid);
            }
        }
    }
}

/// Accept on `listener` from now on, on the `pmix-gate` thread.
pub fn start(
    listener: TcpListener,
    inner: PathBuf,
    clients: Arc<Clients>,
    host: Arc<dyn Host>,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name("pmix-gate".into())
        .spawn(move || accept_loop(listener, inner, clients, host))
        .map(drop)
}

fn accept_loop(listener: TcpListener, inner: PathBuf, clients: Arc<Clients>, host: Arc<dyn Host>) {
    loop {
        let (tcp, peer) = match listener.accept() {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors or memory: wait for some to be freed rather than spin.
                host.refused(&format!("accept failed: {e}"));
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let uid = match peer_uid(&tcp) {
            Ok(Some(uid)) if clients.has_user(uid) => uid,
            Ok(Some(uid)) => {
                host.refused(&format!(
                    "a connection from {peer} by uid {uid}, who has no rank registered here"
                ));
                continue;
            }
            Ok(None) => {
                host.refused(&format!("a connection from {peer} whose owner is unknown"));
                continue;
            }
            Err(e) => {
                host.refused(&format!(
                    "a connection from {peer}: cannot read its owner: {e}"
                ));
                continue;
            }
        };
        if !clients.begin(uid) {
            host.refused(&format!(
                "a connection from {peer} by uid {uid}, who has {PENDING_PER_USER} handshakes in progress already"
            ));
            continue;
        }
        let (inner, clients, conn_host) = (inner.clone(), Arc::clone(&clients), Arc::clone(&host));
        let spawned = std::thread::Builder::new()
            .name("pmix-gate-conn".into())
            .spawn(move || {
                let admitted = admit(&tcp, uid, &clients);
                clients.end(uid);
                if let Err(why) = admitted
                    .and_then(|(claim, hello)| hand_over(tcp, &inner, &hello, &claim, &clients))
                {
                    conn_host.refused(&format!("a connection from {peer}: {why}"));
                }
            });
        if let Err(e) = spawned {
            host.refused(&format!("a connection from {peer}: no thread for it: {e}"));
        }
    }
}

/// Read the handshake within the deadline and check it: the rank it claims and the bytes
/// to hand over.
fn admit(tcp: &TcpStream, uid: u32, clients: &Clients) -> Result<(Claim, Vec<u8>), String> {
    let deadline = Instant::now() + HANDSHAKE_DEADLINE;
    let mut hello = vec![0u8; HEADER];
    read_by(tcp, &mut hello, deadline)?;
    let n = u32::from_ne_bytes(hello[8..12].try_into().unwrap()) as usize;
    if n > MAX_BODY {
        return Err(format!("a handshake of {n} bytes"));
    }
    hello.resize(HEADER + n, 0);
    read_by(tcp, &mut hello[HEADER..], deadline)?;
    let claim = parse(&hello[HEADER..])?;
    if claim.psec != crate::SECURITY_MODULE {
        return Err(format!(
            "uid {uid} asked for security module {:?}; only {:?} is accepted",
            claim.psec,
            crate::SECURITY_MODULE
        ));
    }
    match clients.uid_of(&claim.nspace, claim.rank) {
        Some(owner) if owner == uid => Ok((claim, hello)),
        Some(owner) => Err(format!(
            "uid {uid} claimed rank {} of {}, which runs as uid {owner}",
            claim.rank, claim.nspace
        )),
        None => Err(format!(
            "uid {uid} claimed rank {} of {}, which is not registered here",
            claim.rank, claim.nspace
        )),
    }
}

/// Fill `buf` from `tcp` before `deadline`, however the bytes trickle in.
fn read_by(mut tcp: &TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), String> {
    let mut at = 0;
    while at < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "no whole handshake within {} s ({at} bytes)",
                HANDSHAKE_DEADLINE.as_secs()
            ));
        }
        tcp.set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        match tcp.read(&mut buf[at..]) {
            Ok(0) => return Err(format!("closed after {at} bytes of its handshake")),
            Ok(n) => at += n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

/// What a handshake claims.
#[derive(Debug, PartialEq, Eq)]
struct Claim {
    psec: String,
    nspace: String,
    rank: u32,
}

/// The handshake's body (the client's `send_connect_ack`, read by the library's
/// `pmix_ptl_base_connection_handler`): the security module's name, the credential
/// (length, network order, then bytes), the peer type, and for a plain client its
/// nspace and rank (network order). What follows is the library's to read.
fn parse(body: &[u8]) -> Result<Claim, String> {
    let mut rest = body;
    let psec = take_str(&mut rest)?;
    let cred = take_u32(&mut rest)? as usize;
    if cred > rest.len() {
        return Err("a handshake cut short in its credential".into());
    }
    rest = &rest[cred..];
    let Some((&kind, after)) = rest.split_first() else {
        return Err("a handshake cut short before its peer type".into());
    };
    rest = after;
    if kind != SIMPLE_CLIENT {
        return Err(format!(
            "a tool or launcher (peer type {kind}): only the ranks started here are served"
        ));
    }
    let nspace = take_str(&mut rest)?;
    let rank = take_u32(&mut rest)?;
    Ok(Claim { psec, nspace, rank })
}

fn take_str(rest: &mut &[u8]) -> Result<String, String> {
    let end = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or("a handshake with an unterminated string")?;
    let s = String::from_utf8_lossy(&rest[..end]).into_owned();
    *rest = &rest[end + 1..];
    Ok(s)
}

fn take_u32(rest: &mut &[u8]) -> Result<u32, String> {
    if rest.len() < 4 {
        return Err("a handshake cut short".into());
    }
    let v = u32::from_be_bytes(rest[..4].try_into().unwrap());
    *rest = &rest[4..];
    Ok(v)
}

/// Give the library the connection: the handshake read, then everything either side
/// sends until one closes (its close passed on to the other). The connection counts as
/// live (`Clients::opened`) until the library has closed its end.
fn hand_over(
    tcp: TcpStream,
    inner: &PathBuf,
    hello: &[u8],
    claim: &Claim,
    clients: &Clients,
) -> Result<(), String> {
    let mut unix = UnixStream::connect(inner).map_err(|e| format!("{}: {e}", inner.display()))?;
    let id = clients.opened(
        &claim.nspace,
        claim.rank,
        tcp.try_clone().map_err(|e| e.to_string())?,
    );
    let r = splice(tcp, &mut unix, hello);
    clients.closed(&claim.nspace, claim.rank, id);
    r
}

fn splice(tcp: TcpStream, unix: &mut UnixStream, hello: &[u8]) -> Result<(), String> {
    unix.write_all(hello).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(None).map_err(|e| e.to_string())?;
    // PMIx messages are small and answered: without this, Nagle and delayed ACKs add
    // tens of milliseconds to each exchange the library's own socket would not have.
    let _ = tcp.set_nodelay(true);
    let (mut tcp_in, mut unix_out) = (
        tcp.try_clone().map_err(|e| e.to_string())?,
        unix.try_clone().map_err(|e| e.to_string())?,
    );
    let up = std::thread::Builder::new()
        .name("pmix-gate-up".into())
        .spawn(move || {
            let _ = io::copy(&mut tcp_in, &mut unix_out);
            let _ = unix_out.shutdown(Shutdown::Write);
        })
        .map_err(|e| e.to_string())?;
    let mut tcp_out = tcp;
    let _ = io::copy(unix, &mut tcp_out);
    // The copy also ends when the client is gone before the library noticed: the client's
    // side is closed both ways (which ends the copy up), and the library's end is read
    // until it closes it.
    let _ = tcp_out.shutdown(Shutdown::Both);
    let _ = up.join();
    let _ = unix.set_read_timeout(Some(LIBRARY_CLOSE_DEADLINE));
    let _ = io::copy(unix, &mut io::sink());
    Ok(())
}

/// The uid that owns the other end of `tcp`, a loopback connection: its socket is this
/// host's, listed in `/proc/net/tcp` with the peer's address as its local one.
fn peer_uid(tcp: &TcpStream) -> io::Result<Option<u32>> {
    let (SocketAddr::V4(peer), SocketAddr::V4(me)) = (tcp.peer_addr()?, tcp.local_addr()?) else {
        return Ok(None);
    };
    let table = std::fs::read_to_string("/proc/self/net/tcp")?;
    Ok(uid_in_table(&table, &hex(peer), &hex(me)))
}

/// An address as `/proc/net/tcp` prints it: the address's bytes as one native-order
/// word, then the port, both in hex.
fn hex(a: std::net::SocketAddrV4) -> String {
    format!(
        "{:08X}:{:04X}",
        u32::from_ne_bytes(a.ip().octets()),
        a.port()
    )
}

/// The uid of the established socket from `local` to `remote` in a `/proc/net/tcp`
/// table.
fn uid_in_table(table: &str, local: &str, remote: &str) -> Option<u32> {
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // sl, local_address, rem_address, st, tx:rx, tr:when, retrnsmt, uid, ...
        (f.len() > 7 && f[1] == local && f[2] == remote && f[3] == "01")
            .then(|| f[7].parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(psec: &str, cred: &[u8], kind: u8, nspace: &str, rank: u32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(psec.as_bytes());
        b.push(0);
        b.extend_from_slice(&(cred.len() as u32).to_be_bytes());
        b.extend_from_slice(cred);
        b.push(kind);
        b.extend_from_slice(nspace.as_bytes());
        b.push(0);
        b.extend_from_slice(&rank.to_be_bytes());
        b.extend_from_slice(b"4.2.2\0v41\0");
        b
    }

    #[test]
    fn a_handshake_names_its_module_and_the_rank_it_claims() {
        let b = body("native", &[1, 0, 0, 0, 1, 0, 0, 0], 0, "gang-7", 3);
        assert_eq!(
            parse(&b).unwrap(),
            Claim {
                psec: "native".into(),
                nspace: "gang-7".into(),
                rank: 3
            }
        );
        assert!(
            parse(&body("none", &[], 3, "x", 0))
                .unwrap_err()
                .contains("tool")
        );
        assert!(parse(&b[..b.len() - 14]).is_err());
        assert!(parse(b"native").is_err());
        // A credential longer than what follows.
        let mut bad = b"native\0".to_vec();
        bad.extend_from_slice(&1000u32.to_be_bytes());
        assert!(parse(&bad).is_err());
    }

    #[test]
    fn only_the_ranks_user_may_claim_it() {
        let clients = Clients::default();
        clients.insert("gang-7", 0, 1001);
        assert!(clients.has_user(1001) && !clients.has_user(1002));
        assert_eq!(clients.uid_of("gang-7", 0), Some(1001));
        clients.remove("gang-7", 0);
        assert!(!clients.has_user(1001));
        for _ in 0..PENDING_PER_USER {
            assert!(clients.begin(5));
        }
        assert!(!clients.begin(5));
        assert!(clients.begin(6));
        clients.end(5);
        assert!(clients.begin(5));
    }

    /// A connection handed to a stand-in for the library (a Unix listener): the gate, the
    /// client's end, and the library's end once it has read the handshake.
    fn spliced(
        clients: &Arc<Clients>,
        dir: &std::path::Path,
    ) -> (std::thread::JoinHandle<()>, TcpStream, UnixStream) {
        let inner = dir.join("pmix.sock");
        let library = std::os::unix::net::UnixListener::bind(&inner).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (tcp, _) = l.accept().unwrap();
        let claim = Claim {
            psec: "native".into(),
            nspace: "gang-7".into(),
            rank: 1,
        };
        let gate = {
            let clients = Arc::clone(clients);
            std::thread::spawn(move || {
                hand_over(tcp, &inner, b"hello", &claim, &clients).unwrap();
            })
        };
        let (mut lib, _) = library.accept().unwrap();
        let mut hello = [0u8; 5];
        lib.read_exact(&mut hello).unwrap();
        assert_eq!(&hello, b"hello");
        (gate, client, lib)
    }

    #[test]
    fn a_connection_is_over_only_once_the_library_has_closed_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let clients = Arc::new(Clients::default());
        let (gate, client, mut lib) = spliced(&clients, dir.path());
        assert!(!clients.wait_closed("gang-7", 1, Duration::from_millis(50)));
        // The rank dies: the library is told (its end reads end-of-file)...
        drop(client);
        let mut rest = Vec::new();
        lib.read_to_end(&mut rest).unwrap();
        // ...but until it has closed its end, the rank is not to be deregistered.
        assert!(!clients.wait_closed("gang-7", 1, Duration::from_millis(200)));
        drop(lib);
        assert!(clients.wait_closed("gang-7", 1, Duration::from_secs(10)));
        gate.join().unwrap();
        // Other ranks were never live.
        assert!(clients.wait_closed("gang-7", 0, Duration::ZERO));
    }

    #[test]
    fn a_cut_connection_whose_client_lives_on_is_ended_through_the_library() {
        let dir = tempfile::tempdir().unwrap();
        let clients = Arc::new(Clients::default());
        let (gate, mut client, mut lib) = spliced(&clients, dir.path());
        clients.cut("gang-7", 1);
        let mut rest = Vec::new();
        lib.read_to_end(&mut rest).unwrap();
        drop(lib);
        assert!(clients.wait_closed("gang-7", 1, Duration::from_secs(10)));
        gate.join().unwrap();
        // The client, still running, has lost its connection.
        assert_eq!(client.read(&mut [0u8; 8]).unwrap_or(0), 0);
    }

    #[test]
    fn the_peers_socket_is_found_in_the_kernels_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
           0: 0100007F:9C40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n\
           1: 0100007F:D431 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1001        0 2 1 0 20 4 30 10 -1\n\
           2: 0100007F:9C40 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0 20 4 30 10 -1\n";
        let peer = hex("127.0.0.1:54321".parse().unwrap());
        let me = hex("127.0.0.1:40000".parse().unwrap());
        assert_eq!(
            (peer.as_str(), me.as_str()),
            ("0100007F:D431", "0100007F:9C40")
        );
        assert_eq!(uid_in_table(table, &peer, &me), Some(1001));
        assert_eq!(uid_in_table(table, &me, &peer), Some(0));
        assert_eq!(uid_in_table(table, &peer, &peer), None);
    }

    #[test]
    fn a_live_loopback_connection_is_owned_by_this_process_user() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let _c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        use std::os::unix::fs::MetadataExt;
        let me = std::fs::metadata("/proc/self").unwrap().uid();
        assert_eq!(peer_uid(&s).unwrap(), Some(me));
    }
}
