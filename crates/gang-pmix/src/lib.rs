//! A PMIx server for the node agent, as Slurm's `mpi/pmix` plugin and PRRTE's daemons are
//! one: OpenPMIx's server library (Debian's `libpmix-dev`) serves the local ranks on its
//! own progress thread; the host (the agent) registers each job and rank before the fork,
//! puts the variables `PMIx_server_setup_fork` gives into the rank's environment, and
//! completes the library's upcalls: a fence with every node's data, an abort.
//!
//! Two guards stand between the library and the users of the node (see the README):
//! - **One thread owns the library.** Every call into it (start, register, setup_fork,
//!   deregister) runs on the `pmix-server` thread, fed by a channel; a caller waits for
//!   its answer at most [`ServerConfig::call_timeout`], and once one call has taken longer
//!   than that, every new one fails at once with [`Error::NotAnswering`]: a stalled
//!   library costs the launches that need it, never the caller's other work.
//! - **The gate owns the listener** (`gate.rs`): only a complete handshake of a
//!   registered rank, from a socket of that rank's user, reaches the library.
//!
//! `unsafe` lives in `ffi.rs` only: the calls into the C server (`server.c`) and the
//! callbacks it makes back. Built without the library (pkg-config finds no `pmix`, or
//! `GANG_NO_PMIX=1`), [`Server::start`] fails with [`Error::NotBuilt`] and nothing else
//! changes.

use std::sync::Arc;
use std::time::Duration;

#[cfg(gang_pmix)]
mod ffi;
#[cfg(gang_pmix)]
mod gate;
#[cfg(gang_pmix)]
mod owner;

/// Whether this build links the PMIx server library.
pub const AVAILABLE: bool = cfg!(gang_pmix);

/// The one security module the server offers and the gate accepts: `native`, whose claim
/// the gate checks against the kernel's record of the socket's owner. A host with MUNGE
/// (every Slurm site) makes the library offer `munge` first, which the gate does not
/// check (a MUNGE credential says what munged says, and the gate already knows the uid
/// better): so neither the library nor the ranks are let choose.
pub const SECURITY_MODULE: &str = "native";

/// The library's own choice of modules, from its environment: set by the agent before any
/// thread starts, so the server opens `native` alone and tells ranks so.
pub const SERVER_SECURITY_ENV: (&str, &str) = ("PMIX_MCA_psec", SECURITY_MODULE);

/// What a rank is told, over what `PMIx_server_setup_fork` gave and what the job's
/// environment said: the modules the server offers, and the one its client opens.
pub fn client_security_env() -> [(String, String); 2] {
    [
        ("PMIX_SECURITY_MODE".into(), SECURITY_MODULE.into()),
        ("PMIX_MCA_psec".into(), SECURITY_MODULE.into()),
    ]
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Built without the library.
    NotBuilt,
    /// A second server in one process (the library keeps one per process).
    AlreadyStarted,
    /// The library refused: the call and its status.
    Pmix(String),
    /// A name with a NUL in it, or too long for PMIx (nspaces are 255 bytes).
    BadName(String),
    /// The library did not answer in time: what was asked, and how long it was waited
    /// for (or how long the call before it has been running).
    NotAnswering { what: String, waited: Duration },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NotBuilt => {
                f.write_str("this agent was built without PMIx: install libpmix-dev and rebuild")
            }
            Error::AlreadyStarted => {
                f.write_str("a PMIx server is already running in this process (one at most)")
            }
            Error::Pmix(what) => write!(f, "PMIx server: {what}"),
            Error::BadName(what) => write!(f, "PMIx server: {what}"),
            Error::NotAnswering { what, waited } => write!(
                f,
                "PMIx server not answering: {what} got no answer within {} s",
                waited.as_secs_f64().round()
            ),
        }
    }
}

impl std::error::Error for Error {}

/// What the library asks of its host. Called on the library's progress thread (and
/// `refused` on the gate's): each must return at once (queue the work) and never call
/// back into [`Server`] there.
pub trait Host: Send + Sync + 'static {
    /// The local ranks of `nspace` reached a fence, with `blob` (the library's packing of
    /// what they put). Complete `done` with every node's blob, concatenated, in any
    /// order; unless `collect` is false (the fence did not ask for the data): a barrier,
    /// completed with nothing, the data fetched by `direct_modex` when asked.
    fn fence(&self, nspace: &str, blob: Vec<u8>, collect: bool, done: FenceDone);
    /// A local rank asks for the data of `rank` of `nspace`, on another node, which no
    /// fence brought: complete `done` with that rank's blob (its node's
    /// [`Server::dmodex`]), or fail it with [`NOT_FOUND`] or [`TIMEOUT`].
    fn direct_modex(&self, _nspace: &str, _rank: u32, done: FenceDone) {
        done.fail(NOT_FOUND);
    }
    /// A rank called `PMIx_Abort` (Open MPI's `MPI_Abort`).
    fn abort(&self, nspace: &str, rank: u32, status: i32, message: String);
    /// A rank connected (`finalized` false) or finalized.
    fn client(&self, nspace: &str, rank: u32, finalized: bool);
    /// The gate closed a connection before the library saw it, and why.
    fn refused(&self, _why: &str) {}
}

/// PMIx's statuses a host may fail a direct modex with (`pmix_common.h`).
pub const NOT_FOUND: i32 = -46;
pub const TIMEOUT: i32 = -24;

/// What a direct modex request is answered with: the rank's blob, or the library's status.
pub type BlobResult = Result<Vec<u8>, i32>;

/// A fence (or a direct modex) the library waits on. Dropped without [`FenceDone::complete`], it completes
/// with an error, so a rank is never left waiting on a fence nobody will finish.
pub struct FenceDone {
    req: *mut std::ffi::c_void,
}

// SAFETY: the request is a heap block server.c allocated for this fence alone; the
// library's callback it holds may be called from any thread (the library moves the
// completion onto its own progress thread).
unsafe impl Send for FenceDone {}

impl FenceDone {
    /// Complete the fence: `Ok(all blobs)` or an error, which fails the ranks' fence.
    pub fn complete(mut self, result: Result<&[u8], ()>) {
        self.finish(result.map_err(|()| -1));
    }

    /// Fail it with PMIx status `status` (negative; e.g. [`NOT_FOUND`]).
    pub fn fail(mut self, status: i32) {
        self.finish(Err(status));
    }

    fn finish(&mut self, result: Result<&[u8], i32>) {
        let req = std::mem::replace(&mut self.req, std::ptr::null_mut());
        if req.is_null() {
            return;
        }
        #[cfg(gang_pmix)]
        ffi::fence_done(req, result);
        #[cfg(not(gang_pmix))]
        let _ = result;
    }
}

impl Drop for FenceDone {
    fn drop(&mut self) {
        self.finish(Err(-1));
    }
}

/// Where and as what the server runs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The server's own directory (its files; none is shared with another server).
    pub tmpdir: std::path::PathBuf,
    /// This node's name in every job's node map.
    pub node_name: String,
    /// The server's own PMIx name.
    pub server_nspace: String,
    pub server_rank: u32,
    /// The longest a call into the library is waited for (registration takes
    /// milliseconds; a library that takes longer is stalled).
    pub call_timeout: Duration,
}

/// One job's rank as registered on this node: rank `my_rank` of `size` runs here, as
/// `uid`:`gid`; rank r runs on `nodes[r]` (one rank a node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub nspace: String,
    pub size: u32,
    pub my_rank: u32,
    pub nodes: Vec<String>,
    pub uid: u32,
    pub gid: u32,
}

impl Registration {
    /// What the library would refuse, or take wrongly, refused before it sees it.
    fn check(&self) -> Result<(), Error> {
        cstring(&self.nspace)?;
        if self.nodes.len() != self.size as usize {
            return Err(Error::BadName(format!(
                "{} node names for {} ranks",
                self.nodes.len(),
                self.size
            )));
        }
        if let Some(bad) = self.nodes.iter().find(|n| n.is_empty() || n.contains(',')) {
            return Err(Error::BadName(format!(
                "node name {bad:?} is empty or has a comma"
            )));
        }
        Ok(())
    }
}

/// The rank's variables (`PMIX_NAMESPACE`, `PMIX_RANK`, `PMIX_SERVER_URI*`, ...), or why
/// not.
pub type Prepared = Result<Vec<(String, String)>, Error>;

/// The process's PMIx server: a handle on the thread that owns the library.
pub struct Server {
    #[cfg(gang_pmix)]
    owner: owner::Owner,
}

impl Server {
    /// Start the library's server (once per process) on a thread of its own, and put the
    /// gate in front of its listener. Waits at most `call_timeout`.
    pub fn start(config: &ServerConfig, host: Arc<dyn Host>) -> Result<Server, Error> {
        #[cfg(gang_pmix)]
        return Ok(Server {
            owner: owner::Owner::start(config, host)?,
        });
        #[cfg(not(gang_pmix))]
        {
            let _ = (config, host);
            Err(Error::NotBuilt)
        }
    }

    /// Register the rank and its job, then `done` with its variables, on the server's
    /// thread. Fails at once (and `done` is never called) if the registration is refused
    /// before the library sees it, or if the server is stalled: a call has been running
    /// longer than `call_timeout`. The caller times its wait for `done` itself.
    pub fn prepare(
        &self,
        reg: Registration,
        done: impl FnOnce(Prepared) + Send + 'static,
    ) -> Result<(), Error> {
        reg.check()?;
        #[cfg(gang_pmix)]
        return self.owner.prepare(reg, Box::new(done));
        #[cfg(not(gang_pmix))]
        {
            let _ = done;
            Err(Error::NotBuilt)
        }
    }

    /// `prepare`, waiting for its answer at most `call_timeout`.
    pub fn prepare_blocking(&self, reg: Registration) -> Prepared {
        let what = format!("registering rank {} of {}", reg.my_rank, reg.nspace);
        let (tx, rx) = std::sync::mpsc::channel();
        self.prepare(reg, move |r| {
            let _ = tx.send(r);
        })?;
        let waited = self.call_timeout();
        rx.recv_timeout(waited)
            .map_err(|_| Error::NotAnswering { what, waited })?
    }

    /// The rank is gone: the gate stops letting it in at once, and the library forgets it
    /// and its job when its thread gets to it (after any registration asked before).
    pub fn deregister(&self, nspace: &str, rank: u32) {
        #[cfg(gang_pmix)]
        self.owner.deregister(nspace, rank);
        #[cfg(not(gang_pmix))]
        let _ = (nspace, rank);
    }

    /// The blob of `rank` of `nspace`, a rank of this node, for a peer's direct modex:
    /// to `done` once the rank has put it (the library waits for its commit; the caller
    /// bounds its own wait), on the library's thread. Fails at once if the server is
    /// stalled.
    pub fn dmodex(
        &self,
        nspace: &str,
        rank: u32,
        done: impl FnOnce(BlobResult) + Send + 'static,
    ) -> Result<(), Error> {
        cstring(nspace)?;
        #[cfg(gang_pmix)]
        return self.owner.dmodex(nspace, rank, Box::new(done));
        #[cfg(not(gang_pmix))]
        {
            let _ = (rank, done);
            Err(Error::NotBuilt)
        }
    }

    /// How long a call is waited for.
    pub fn call_timeout(&self) -> Duration {
        #[cfg(gang_pmix)]
        return self.owner.call_timeout();
        #[cfg(not(gang_pmix))]
        Duration::ZERO
    }

    /// The Unix socket the library accepts on, behind the gate (in a directory only the
    /// server's user may enter): for tests that stall the library on purpose.
    pub fn inner_socket(&self) -> std::path::PathBuf {
        #[cfg(gang_pmix)]
        return self.owner.inner_socket();
        #[cfg(not(gang_pmix))]
        std::path::PathBuf::new()
    }
}

// The stand-in hands nothing to C.
#[cfg_attr(not(gang_pmix), allow(dead_code))]
fn cstring(s: &str) -> Result<std::ffi::CString, Error> {
    if s.len() > 255 {
        return Err(Error::BadName(format!(
            "{s:?} is longer than PMIx's 255 bytes"
        )));
    }
    std::ffi::CString::new(s).map_err(|_| Error::BadName(format!("{s:?} contains NUL")))
}

/// One job as the library registers it.
#[cfg_attr(not(gang_pmix), allow(dead_code))]
struct Job<'a> {
    nspace: &'a str,
    size: u32,
    my_rank: u32,
    nodes: &'a [String],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_before_the_library_sees_them() {
        assert!(cstring("gang-7").is_ok());
        assert!(matches!(cstring("a\0b"), Err(Error::BadName(_))));
        assert!(matches!(cstring(&"x".repeat(256)), Err(Error::BadName(_))));
        assert_eq!(
            Error::NotBuilt.to_string(),
            "this agent was built without PMIx: install libpmix-dev and rebuild"
        );
        let reg = Registration {
            nspace: "gang-9".into(),
            size: 2,
            my_rank: 1,
            nodes: vec!["a".into()],
            uid: 1,
            gid: 1,
        };
        assert!(matches!(reg.check(), Err(Error::BadName(_))));
        let reg = Registration {
            nodes: vec!["a".into(), "b,c".into()],
            ..reg
        };
        assert!(matches!(reg.check(), Err(Error::BadName(_))));
    }

    #[test]
    fn a_stalled_server_is_named_with_what_was_waited_for() {
        let e = Error::NotAnswering {
            what: "registering rank 0 of gang-7".into(),
            waited: Duration::from_secs(15),
        };
        assert_eq!(
            e.to_string(),
            "PMIx server not answering: registering rank 0 of gang-7 got no answer within 15 s"
        );
    }
}
