//! A PMIx server for the node agent, as Slurm's `mpi/pmix` plugin and PRRTE's daemons are
//! one: OpenPMIx's server library (Debian's `libpmix-dev`) serves the local ranks on its
//! own progress thread; the host (the agent) registers each job and rank before the fork,
//! puts the variables `PMIx_server_setup_fork` gives into the rank's environment, and
//! completes the library's upcalls: a fence with every node's data, an abort.
//!
//! `unsafe` lives in this file only: the calls into the C shim (`shim.c`) and the
//! callbacks it makes back. Built without the library (pkg-config finds no `pmix`, or
//! `GANG_NO_PMIX=1`), [`Server::start`] fails with [`Error::NotBuilt`] and nothing else
//! changes.

use std::sync::Arc;

/// Whether this build links the PMIx server library.
pub const AVAILABLE: bool = cfg!(gang_pmix);

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
        }
    }
}

impl std::error::Error for Error {}

/// What the library asks of its host. Called on the library's progress thread: each
/// must return at once (queue the work) and never call back into [`Server`] there.
pub trait Host: Send + Sync + 'static {
    /// The local ranks of `nspace` reached a fence, with `blob` (the library's packing of
    /// what they put). Complete `done` with every node's blob, concatenated, in any
    /// order.
    fn fence(&self, nspace: &str, blob: Vec<u8>, done: FenceDone);
    /// A rank called `PMIx_Abort` (Open MPI's `MPI_Abort`).
    fn abort(&self, nspace: &str, rank: u32, status: i32, message: String);
    /// A rank connected (`finalized` false) or finalized.
    fn client(&self, nspace: &str, rank: u32, finalized: bool);
}

/// A fence the library waits on. Dropped without [`FenceDone::complete`], it completes
/// with an error, so a rank is never left waiting on a fence nobody will finish.
pub struct FenceDone {
    req: *mut std::ffi::c_void,
}

// SAFETY: the request is a heap block the shim allocated for this fence alone; the
// library's callback it holds may be called from any thread (the library moves the
// completion onto its own progress thread).
unsafe impl Send for FenceDone {}

impl FenceDone {
    /// Complete the fence: `Ok(all blobs)` or an error, which fails the ranks' fence.
    pub fn complete(mut self, result: Result<&[u8], ()>) {
        self.finish(result);
    }

    fn finish(&mut self, result: Result<&[u8], ()>) {
        let req = std::mem::replace(&mut self.req, std::ptr::null_mut());
        if req.is_null() {
            return;
        }
        imp::fence_done(req, result);
    }
}

impl Drop for FenceDone {
    fn drop(&mut self) {
        self.finish(Err(()));
    }
}

/// The process's PMIx server.
pub struct Server {
    _started: (),
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
}

/// One job as registered on this node: rank `my_rank` of `size` runs here; rank r runs
/// on `nodes[r]` (one rank a node).
#[derive(Debug, Clone)]
pub struct Job<'a> {
    pub nspace: &'a str,
    pub size: u32,
    pub my_rank: u32,
    pub nodes: &'a [String],
}

impl Server {
    /// Start the library's server (once per process).
    pub fn start(config: &ServerConfig, host: Arc<dyn Host>) -> Result<Server, Error> {
        imp::start(config, host)?;
        Ok(Server { _started: () })
    }

    /// Register a job and its local rank (blocking: the library answers on its thread).
    pub fn register(&self, job: &Job<'_>, uid: u32, gid: u32) -> Result<(), Error> {
        if job.nodes.len() != job.size as usize {
            return Err(Error::BadName(format!(
                "{} node names for {} ranks",
                job.nodes.len(),
                job.size
            )));
        }
        if let Some(bad) = job.nodes.iter().find(|n| n.is_empty() || n.contains(',')) {
            return Err(Error::BadName(format!(
                "node name {bad:?} is empty or has a comma"
            )));
        }
        imp::register_job(job)?;
        if let Err(e) = imp::register_client(job.nspace, job.my_rank, uid, gid) {
            imp::deregister(job.nspace, job.my_rank);
            return Err(e);
        }
        Ok(())
    }

    /// The variables the rank needs to reach this server (`PMIX_NAMESPACE`, `PMIX_RANK`,
    /// `PMIX_SERVER_URI*`, ...).
    pub fn setup_fork(&self, nspace: &str, rank: u32) -> Result<Vec<(String, String)>, Error> {
        imp::setup_fork(nspace, rank)
    }

    /// The rank is gone: forget it and its job here.
    pub fn deregister(&self, nspace: &str, rank: u32) {
        imp::deregister(nspace, rank)
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

#[cfg(gang_pmix)]
mod imp {
    use super::{Error, Host, Job, ServerConfig, cstring};
    use std::ffi::{CStr, c_char, c_int, c_void};
    use std::os::unix::ffi::OsStrExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    type FenceFn = extern "C" fn(*mut c_void, *const c_char, *const c_char, usize, *mut c_void);
    type AbortFn = extern "C" fn(*mut c_void, *const c_char, u32, c_int, *const c_char);
    type ClientFn = extern "C" fn(*mut c_void, *const c_char, u32, c_int);

    unsafe extern "C" {
        fn gp_init(
            tmpdir: *const c_char,
            hostname: *const c_char,
            server_nspace: *const c_char,
            server_rank: u32,
            ctx: *mut c_void,
            fence: FenceFn,
            abort: AbortFn,
            client: ClientFn,
            err: *mut c_char,
            errlen: usize,
        ) -> c_int;
        fn gp_register_job(
            nspace: *const c_char,
            size: u32,
            my_rank: u32,
            nodes: *const c_char,
            err: *mut c_char,
            errlen: usize,
        ) -> c_int;
        fn gp_register_client(
            nspace: *const c_char,
            rank: u32,
            uid: u32,
            gid: u32,
            err: *mut c_char,
            errlen: usize,
        ) -> c_int;
        fn gp_setup_fork(
            nspace: *const c_char,
            rank: u32,
            env: *mut *mut *mut c_char,
            err: *mut c_char,
            errlen: usize,
        ) -> c_int;
        fn gp_free_env(env: *mut *mut c_char);
        fn gp_deregister(nspace: *const c_char, rank: u32);
        fn gp_fence_done(req: *mut c_void, status: c_int, data: *const c_char, ndata: usize);
    }

    static STARTED: AtomicBool = AtomicBool::new(false);
    const ERRLEN: usize = 512;

    /// Run a shim call that reports failures in an error buffer.
    fn call(f: impl FnOnce(*mut c_char, usize) -> c_int) -> Result<(), Error> {
        let mut err = [0 as c_char; ERRLEN];
        let rc = f(err.as_mut_ptr(), ERRLEN);
        if rc == 0 {
            return Ok(());
        }
        // SAFETY: the shim writes a NUL-terminated string within ERRLEN (snprintf), or
        // nothing, and the buffer starts zeroed.
        let what = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
        Err(Error::Pmix(if what.is_empty() {
            format!("status {rc}")
        } else {
            what.into_owned()
        }))
    }

    /// The host, as the callbacks see it: leaked on start, since the library may call
    /// up to the end of the process (the server is never finalized).
    fn host<'a>(ctx: *mut c_void) -> &'a Arc<dyn Host> {
        // SAFETY: ctx is the Box<Arc<dyn Host>> leaked in `start`, never freed.
        unsafe { &*(ctx as *const Arc<dyn Host>) }
    }

    fn text(p: *const c_char) -> String {
        if p.is_null() {
            return String::new();
        }
        // SAFETY: the library passes NUL-terminated strings (nspaces, messages) valid
        // for the duration of the upcall; they are copied here.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    extern "C" fn on_fence(
        ctx: *mut c_void,
        nspace: *const c_char,
        data: *const c_char,
        ndata: usize,
        req: *mut c_void,
    ) {
        let blob = if data.is_null() || ndata == 0 {
            Vec::new()
        } else {
            // SAFETY: the library's buffer of ndata bytes, valid during this upcall.
            unsafe { std::slice::from_raw_parts(data as *const u8, ndata) }.to_vec()
        };
        let done = super::FenceDone { req };
        // A panic must not unwind into C: the fence then fails (FenceDone's drop).
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            host(ctx).fence(&text(nspace), blob, done)
        }));
    }

    extern "C" fn on_abort(
        ctx: *mut c_void,
        nspace: *const c_char,
        rank: u32,
        status: c_int,
        msg: *const c_char,
    ) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            host(ctx).abort(&text(nspace), rank, status, text(msg))
        }));
    }

    extern "C" fn on_client(ctx: *mut c_void, nspace: *const c_char, rank: u32, fin: c_int) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            host(ctx).client(&text(nspace), rank, fin != 0)
        }));
    }

    pub fn start(config: &ServerConfig, host: Arc<dyn Host>) -> Result<(), Error> {
        if STARTED.swap(true, Ordering::SeqCst) {
            return Err(Error::AlreadyStarted);
        }
        let tmpdir = std::ffi::CString::new(config.tmpdir.as_os_str().as_bytes())
            .map_err(|_| Error::BadName(format!("{:?} contains NUL", config.tmpdir)))?;
        let name = cstring(&config.node_name)?;
        let nspace = cstring(&config.server_nspace)?;
        let ctx = Box::into_raw(Box::new(host)) as *mut c_void;
        let r = call(|err, len| {
            // SAFETY: valid C strings for the call's duration (the library copies them);
            // ctx lives for the process; the callbacks match the shim's typedefs.
            unsafe {
                gp_init(
                    tmpdir.as_ptr(),
                    name.as_ptr(),
                    nspace.as_ptr(),
                    config.server_rank,
                    ctx,
                    on_fence,
                    on_abort,
                    on_client,
                    err,
                    len,
                )
            }
        });
        if r.is_err() {
            STARTED.store(false, Ordering::SeqCst);
        }
        r
    }

    pub fn register_job(job: &Job<'_>) -> Result<(), Error> {
        let nspace = cstring(job.nspace)?;
        let nodes = std::ffi::CString::new(job.nodes.join(","))
            .map_err(|_| Error::BadName("a node name contains NUL".into()))?;
        // SAFETY: valid C strings for the call's duration; the shim blocks until the
        // library has copied what it keeps.
        call(|err, len| unsafe {
            gp_register_job(
                nspace.as_ptr(),
                job.size,
                job.my_rank,
                nodes.as_ptr(),
                err,
                len,
            )
        })
    }

    pub fn register_client(nspace: &str, rank: u32, uid: u32, gid: u32) -> Result<(), Error> {
        let nspace = cstring(nspace)?;
        // SAFETY: as in register_job.
        call(|err, len| unsafe { gp_register_client(nspace.as_ptr(), rank, uid, gid, err, len) })
    }

    pub fn setup_fork(nspace: &str, rank: u32) -> Result<Vec<(String, String)>, Error> {
        let nspace = cstring(nspace)?;
        let mut env: *mut *mut c_char = std::ptr::null_mut();
        // SAFETY: the shim sets env to a NULL-terminated array of "K=V" strings (or
        // NULL), which is read here and then freed by the shim's own free.
        call(|err, len| unsafe { gp_setup_fork(nspace.as_ptr(), rank, &mut env, err, len) })?;
        let mut vars = Vec::new();
        if !env.is_null() {
            let mut i = 0;
            loop {
                // SAFETY: within the NULL-terminated array.
                let p = unsafe { *env.add(i) };
                if p.is_null() {
                    break;
                }
                let kv = text(p);
                if let Some((k, v)) = kv.split_once('=') {
                    vars.push((k.to_string(), v.to_string()));
                }
                i += 1;
            }
            // SAFETY: the array setup_fork made, freed once.
            unsafe { gp_free_env(env) };
        }
        Ok(vars)
    }

    pub fn deregister(nspace: &str, rank: u32) {
        if let Ok(nspace) = cstring(nspace) {
            // SAFETY: a valid C string; the shim blocks until the library is done.
            unsafe { gp_deregister(nspace.as_ptr(), rank) }
        }
    }

    pub fn fence_done(req: *mut c_void, result: Result<&[u8], ()>) {
        // PMIX_SUCCESS is 0; any other status fails the fence.
        let (status, data, len) = match result {
            Ok(d) => (0, d.as_ptr() as *const c_char, d.len()),
            Err(()) => (-1, std::ptr::null(), 0),
        };
        // SAFETY: req came from the shim's fence_nb and is completed once (FenceDone
        // nulls it); data is copied before the call returns.
        unsafe { gp_fence_done(req, status, data, len) }
    }
}

#[cfg(not(gang_pmix))]
mod imp {
    use super::{Error, Host, Job, ServerConfig};
    use std::sync::Arc;

    pub fn start(_: &ServerConfig, _: Arc<dyn Host>) -> Result<(), Error> {
        Err(Error::NotBuilt)
    }
    pub fn register_job(_: &Job<'_>) -> Result<(), Error> {
        Err(Error::NotBuilt)
    }
    pub fn register_client(_: &str, _: u32, _: u32, _: u32) -> Result<(), Error> {
        Err(Error::NotBuilt)
    }
    pub fn setup_fork(_: &str, _: u32) -> Result<Vec<(String, String)>, Error> {
        Err(Error::NotBuilt)
    }
    pub fn deregister(_: &str, _: u32) {}
    pub fn fence_done(_: *mut std::ffi::c_void, _: Result<&[u8], ()>) {}
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
    }
}
