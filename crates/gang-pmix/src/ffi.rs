//! Every call into the C server (`server.c`) and every callback it makes back: the only
//! `unsafe` of the crate. Blocking calls here are made on the server's own thread
//! (`lib.rs`), never on a caller's.

use crate::{Error, Host, Job, cstring};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

type FenceFn = extern "C" fn(*mut c_void, *const c_char, *const c_char, usize, c_int, *mut c_void);
type DmodexFn = extern "C" fn(*mut c_void, *const c_char, u32, *mut c_void);
type BlobFn = extern "C" fn(*mut c_void, c_int, *const c_char, usize);
type AbortFn = extern "C" fn(*mut c_void, *const c_char, u32, c_int, *const c_char);
type ClientFn = extern "C" fn(*mut c_void, *const c_char, u32, c_int);

unsafe extern "C" {
    fn gp_init(
        tmpdir: *const c_char,
        uri_file: *const c_char,
        hostname: *const c_char,
        server_nspace: *const c_char,
        server_rank: u32,
        ctx: *mut c_void,
        fence: FenceFn,
        abort: AbortFn,
        client: ClientFn,
        dmodex: DmodexFn,
        err: *mut c_char,
        errlen: usize,
    ) -> c_int;
    fn gp_dmodex_request(nspace: *const c_char, rank: u32, done: BlobFn, ctx: *mut c_void)
    -> c_int;
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
    fn gp_gate_listener(
        port: c_int,
        unix_fd: c_int,
        tcp_fd: *mut c_int,
        err: *mut c_char,
        errlen: usize,
    ) -> c_int;
}

const ERRLEN: usize = 512;

/// Run a call into server.c that reports failures in an error buffer.
fn call(f: impl FnOnce(*mut c_char, usize) -> c_int) -> Result<(), Error> {
    let mut err = [0 as c_char; ERRLEN];
    let rc = f(err.as_mut_ptr(), ERRLEN);
    if rc == 0 {
        return Ok(());
    }
    // SAFETY: server.c writes a NUL-terminated string within ERRLEN (snprintf), or
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
    collect: c_int,
    req: *mut c_void,
) {
    let blob = bytes(data, ndata);
    let done = super::FenceDone { req };
    // A panic must not unwind into C: the fence then fails (FenceDone's drop).
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        host(ctx).fence(&text(nspace), blob, collect != 0, done)
    }));
}

fn bytes(data: *const c_char, ndata: usize) -> Vec<u8> {
    if data.is_null() || ndata == 0 {
        return Vec::new();
    }
    // SAFETY: the library's buffer of ndata bytes, valid during the upcall it came with.
    unsafe { std::slice::from_raw_parts(data as *const u8, ndata) }.to_vec()
}

extern "C" fn on_dmodex(ctx: *mut c_void, nspace: *const c_char, rank: u32, req: *mut c_void) {
    let done = super::FenceDone { req };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        host(ctx).direct_modex(&text(nspace), rank, done)
    }));
}

/// What a direct modex request is answered with: the rank's blob or the library's status.
pub type BlobDone = Box<dyn FnOnce(Result<Vec<u8>, i32>) + Send>;

extern "C" fn on_blob(ctx: *mut c_void, status: c_int, data: *const c_char, ndata: usize) {
    // SAFETY: ctx is the Box<BlobDone> leaked in `dmodex_request`, handed back once.
    let done = unsafe { Box::from_raw(ctx as *mut BlobDone) };
    let result = if status == 0 {
        Ok(bytes(data, ndata))
    } else {
        Err(status)
    };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || done(result)));
}

/// `PMIx_server_dmodex_request`: the local rank's blob, once it has put it, to `done`
/// (on the library's thread; at once with the status if the library refuses). Never
/// answered if the rank never puts: the caller bounds its wait, and `done` then leaks.
pub fn dmodex_request(nspace: &str, rank: u32, done: BlobDone) {
    let Ok(nspace) = cstring(nspace) else {
        return done(Err(-1));
    };
    let ctx = Box::into_raw(Box::new(done)) as *mut c_void;
    // SAFETY: a valid C string for the call's duration; ctx is handed to on_blob once,
    // or taken back here if the library refused at once (then it never calls back).
    let rc = unsafe { gp_dmodex_request(nspace.as_ptr(), rank, on_blob, ctx) };
    if rc != 0 {
        // SAFETY: the box leaked just above, not handed to anyone.
        let done = unsafe { Box::from_raw(ctx as *mut BlobDone) };
        done(Err(rc));
    }
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

/// What the library's server is started with.
pub struct Init<'a> {
    pub tmpdir: &'a Path,
    /// Where the library writes its listener's URI.
    pub uri_file: &'a Path,
    pub node_name: &'a str,
    pub server_nspace: &'a str,
    pub server_rank: u32,
}

/// `PMIx_server_init`. Once per process (the caller sees to it).
pub fn start(init: &Init<'_>, host: Arc<dyn Host>) -> Result<(), Error> {
    let path = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| Error::BadName(format!("{p:?} contains NUL")))
    };
    let tmpdir = path(init.tmpdir)?;
    let uri_file = path(init.uri_file)?;
    let name = cstring(init.node_name)?;
    let nspace = cstring(init.server_nspace)?;
    let ctx = Box::into_raw(Box::new(host)) as *mut c_void;
    call(|err, len| {
        // SAFETY: valid C strings for the call's duration (the library copies them);
        // ctx lives for the process; the callbacks match server.c's typedefs.
        unsafe {
            gp_init(
                tmpdir.as_ptr(),
                uri_file.as_ptr(),
                name.as_ptr(),
                nspace.as_ptr(),
                init.server_rank,
                ctx,
                on_fence,
                on_abort,
                on_client,
                on_dmodex,
                err,
                len,
            )
        }
    })
}

/// Move the library's listener (127.0.0.1:`port`) out from under it: its descriptor
/// number then names `inner` (the gate's Unix socket), and the TCP listener is returned.
pub fn take_listener(port: u16, inner: &impl AsRawFd) -> Result<OwnedFd, Error> {
    let mut fd: c_int = -1;
    call(|err, len| {
        // SAFETY: plain descriptors; server.c writes fd only on success.
        unsafe { gp_gate_listener(c_int::from(port), inner.as_raw_fd(), &mut fd, err, len) }
    })?;
    // SAFETY: on success fd is a new descriptor (F_DUPFD_CLOEXEC) owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn register_job(job: &Job<'_>) -> Result<(), Error> {
    let nspace = cstring(job.nspace)?;
    let nodes = std::ffi::CString::new(job.nodes.join(","))
        .map_err(|_| Error::BadName("a node name contains NUL".into()))?;
    // SAFETY: valid C strings for the call's duration; server.c blocks until the
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
    // SAFETY: server.c sets env to a NULL-terminated array of "K=V" strings (or
    // NULL), which is read here and then freed by server.c's own free.
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
        // SAFETY: a valid C string; server.c blocks until the library is done.
        unsafe { gp_deregister(nspace.as_ptr(), rank) }
    }
}

pub fn fence_done(req: *mut c_void, result: Result<&[u8], i32>) {
    // PMIX_SUCCESS is 0; any other status fails the fence.
    let (status, data, len) = match result {
        Ok(d) => (0, d.as_ptr() as *const c_char, d.len()),
        Err(status) => (status.min(-1), std::ptr::null(), 0),
    };
    // SAFETY: req came from server.c's fence_nb and is completed once (FenceDone
    // nulls it); data is copied before the call returns.
    unsafe { gp_fence_done(req, status, data, len) }
}
