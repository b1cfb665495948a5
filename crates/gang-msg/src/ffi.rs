//! The C ABI (`include/gang_msg.h`, hand-written and checked by compiling
//! and running C programs against it in `tests/c_abi.rs`). One `Comm` per
//! process, held in a global between `gm_init` and `gm_finalize`. Every call
//! returns 0 on success or a negative `GM_ERR*` code, with the message in
//! `gm_last_error()` (per thread).

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::RwLock;

use crate::collective::Op;
use crate::comm::{Comm, Received, RecvRequest, SendRequest};
use crate::error::Error;

pub const GM_OK: c_int = 0;
pub const GM_ERR: c_int = -1;
pub const GM_ERR_TRUNCATED: c_int = -2;
pub const GM_ERR_NOT_INIT: c_int = -3;

static COMM: RwLock<Option<Comm>> = RwLock::new(None);

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn fail(e: Error) -> c_int {
    let code = match e {
        Error::Truncated { .. } => GM_ERR_TRUNCATED,
        Error::NotInitialised => GM_ERR_NOT_INIT,
        _ => GM_ERR,
    };
    let msg = CString::new(e.to_string().replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = msg);
    code
}

fn with<T>(f: impl FnOnce(&Comm) -> Result<T, Error>) -> Result<T, Error> {
    let g = COMM.read().unwrap_or_else(|p| p.into_inner());
    f(g.as_ref().ok_or(Error::NotInitialised)?)
}

fn status(r: Result<(), Error>) -> c_int {
    r.map_or_else(fail, |()| GM_OK)
}

fn any_rank(r: c_int) -> Option<usize> {
    (r >= 0).then_some(r as usize)
}

/// A destination rank: negative ones become out of range and are refused.
fn rank_arg(r: c_int) -> usize {
    if r < 0 { usize::MAX } else { r as usize }
}

fn any_tag(t: c_int) -> Option<i32> {
    (t >= 0).then_some(t)
}

/// Copy a received message into the caller's buffer and out-parameters.
///
/// # Safety
/// `buf` is valid for `cap` bytes; the out pointers are null or valid.
unsafe fn deliver(
    m: Received,
    buf: *mut c_void,
    cap: usize,
    src: *mut c_int,
    tag: *mut c_int,
    len: *mut usize,
) -> Result<(), Error> {
    let (s, t, data) = m;
    unsafe {
        if !src.is_null() {
            *src = s as c_int;
        }
        if !tag.is_null() {
            *tag = t;
        }
        if !len.is_null() {
            *len = data.len();
        }
        if data.len() > cap {
            return Err(Error::Truncated {
                len: data.len(),
                cap,
            });
        }
        if !data.is_empty() {
            std::ptr::copy_nonoverlapping(data.as_ptr(), buf as *mut u8, data.len());
        }
    }
    Ok(())
}

/// # Safety
/// `buf` is null with `len` 0, or valid for `len` bytes.
unsafe fn bytes<'a>(buf: *const c_void, len: usize) -> &'a [u8] {
    if len == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(buf as *const u8, len) }
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn gm_init() -> c_int {
    let mut g = COMM.write().unwrap_or_else(|p| p.into_inner());
    if g.is_some() {
        return GM_OK;
    }
    match crate::comm::init() {
        Ok(c) => {
            *g = Some(c);
            GM_OK
        }
        Err(e) => fail(e),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn gm_finalize() -> c_int {
    let c = COMM.write().unwrap_or_else(|p| p.into_inner()).take();
    match c {
        Some(c) => status(c.finalize()),
        None => fail(Error::NotInitialised),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn gm_rank() -> c_int {
    with(|c| Ok(c.rank() as c_int)).unwrap_or_else(fail)
}

#[unsafe(no_mangle)]
pub extern "C" fn gm_size() -> c_int {
    with(|c| Ok(c.size() as c_int)).unwrap_or_else(fail)
}

/// # Safety
/// `x` and `y` are valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gm_coord(x: *mut c_int, y: *mut c_int) -> c_int {
    status(with(|c| {
        let (cx, cy) = c.coord();
        unsafe {
            *x = cx as c_int;
            *y = cy as c_int;
        }
        Ok(())
    }))
}

/// Fills `out[0..4]` with the N, S, E, W neighbours' ranks, -1 at an edge.
///
/// # Safety
/// `out` is valid for 4 ints.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gm_neighbours(out: *mut c_int) -> c_int {
    status(with(|c| {
        let n = c.neighbours();
        for (i, r) in [n.north, n.south, n.east, n.west].into_iter().enumerate() {
            unsafe { *out.add(i) = r.map_or(-1, |r| r as c_int) };
        }
        Ok(())
    }))
}

/// # Safety
/// `buf` is valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gm_send(dest: c_int, tag: c_int, buf: *const c_void, len: usize) -> c_int {
    let data = unsafe { bytes(buf, len) };
    status(with(|c| c.send(rank_arg(dest), tag, data)))
}

/// Blocking receive. `src`/`tag` -1 = any. Out pointers may be null.
///
/// # Safety
/// `buf` is valid for `cap` bytes; out pointers are null or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gm_recv(
    src: c_int,
    tag: c_int,
    buf: *mut c_void,
    cap: usize,
    out_src: *mut c_int,
    out_tag: *mut c_int,
    out_len: *mut usize,
) -> c_int {
    status(
        with(|c| c.recv(any_rank(src), any_tag(tag)))
            .and_then(|m| unsafe { deliver(m, buf, cap, out_src, out_tag, out_len) }),
    )
}

/// A request of `gm_isend` or `gm_irecv`, freed by `gm_wait` or a completing `gm_test`.
pub enum GmRequest {
    Send(SendRequest),
    Recv {
        req: RecvRequest,
        buf: *mut c_void,
        cap: usize,
    },
}

/// # Safety
/// `buf` is valid for `len` bytes (it is copied before the call returns); `req` is valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gm_isend(
    dest: c_int,
    tag: c_int,
    buf: *const c_void,
    len: usize,
    req: *mut *mut GmRequest,
) -> c_int {
    let data = unsafe { bytes(buf, len) };
    match with(|c| c.isend(rank_arg(dest), tag, data)) {
        Ok(r) => {
            unsafe { *req = Box::into_raw(Box::new(GmRequest::Send(r))) };
            GM_OK
        }
        Err(e) => fail(e),
    }
}

/// # Safety
/// `buf` stays valid for `cap` bytes until the request completes; `req` is valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gm_irecv(
    src: c_int,
    tag: c_int,
    buf: *mut c_void,
    cap: usize,
    req: *mut *mut GmRequest,
) -> c_int {
    match with(|c| c.irecv(any_rank(src), any_tag(tag))) {
        Ok(r) => {
            unsafe { *req = Box::into_raw(Box::new(GmRequest::Recv { req: r, buf, cap })) };
            GM_OK
        }
        Err(e) => fail(e),
    }
}

/// Wait for a request and free it. For a receive, fills the buffer given to
/// `gm_irecv` and the out pointers (which may be null).
///
/// # Safety
/// `req` came from `gm_isend`/`gm_irecv` and was not freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gm_wait(
    req: *mut GmRequest,
    out_src: *mut c_int,
    out_tag: *mut c_int,
    out_len: *mut usize,
) -> c_int {
    let req = unsafe { Box::from_raw(req) };
    status(match *req {
        GmRequest::Send(s) => s.wait(),
        GmRequest::Recv { req, buf, cap } => req
            .wait()
            .and_then(|m| unsafe { deliver(m, buf, cap, out_src, out_tag, out_len) }),
    })
}

/// Set `*flag` to 1 and free the request if it completed, else 0.
///
/// # Safety
/// `req` came from `gm_isend`/`gm_irecv` and was not freed; `flag` is valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gm_test(
    req: *mut GmRequest,
    flag: *mut c_int,
    out_src: *mut c_int,
    out_tag: *mut c_int,
    out_len: *mut usize,
) -> c_int {
    let r = unsafe { &mut *req };
    let res = match r {
        GmRequest::Send(s) => s.test().then_some(Ok(())),
        GmRequest::Recv { req: rr, buf, cap } => rr
            .test()
            .map(|m| unsafe { deliver(m, *buf, *cap, out_src, out_tag, out_len) }),
    };
    unsafe { *flag = res.is_some() as c_int };
    match res {
        Some(res) => {
            drop(unsafe { Box::from_raw(req) });
            status(res)
        }
        None => GM_OK,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn gm_barrier() -> c_int {
    status(with(|c| c.barrier()))
}

/// Broadcast `len` bytes from `root`'s `buf` into every rank's `buf`.
///
/// # Safety
/// `buf` is valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gm_broadcast(root: c_int, buf: *mut c_void, len: usize) -> c_int {
    status(with(|c| {
        let mut v = unsafe { bytes(buf, len) }.to_vec();
        c.broadcast(rank_arg(root), &mut v)?;
        if v.len() != len {
            return Err(Error::Collective(format!(
                "broadcast of {} bytes into a buffer of {len}",
                v.len()
            )));
        }
        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), buf as *mut u8, len) };
        Ok(())
    }))
}

fn op(o: c_int) -> Result<Op, Error> {
    match o {
        0 => Ok(Op::Sum),
        1 => Ok(Op::Min),
        2 => Ok(Op::Max),
        _ => Err(Error::Collective(format!("unknown reduction op {o}"))),
    }
}

/// # Safety
/// `vals` is valid for `n` elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gm_allreduce_i64(vals: *mut i64, n: usize, o: c_int) -> c_int {
    let s = if n == 0 {
        &mut [][..]
    } else {
        unsafe { std::slice::from_raw_parts_mut(vals, n) }
    };
    status(with(|c| c.allreduce(s, op(o)?)))
}

/// # Safety
/// `vals` is valid for `n` elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gm_allreduce_f64(vals: *mut f64, n: usize, o: c_int) -> c_int {
    let s = if n == 0 {
        &mut [][..]
    } else {
        unsafe { std::slice::from_raw_parts_mut(vals, n) }
    };
    status(with(|c| c.allreduce(s, op(o)?)))
}

#[unsafe(no_mangle)]
pub extern "C" fn gm_set_spin_us(us: u64) -> c_int {
    status(with(|c| {
        c.set_spin_us(us);
        Ok(())
    }))
}

#[unsafe(no_mangle)]
pub extern "C" fn gm_master_now_ns() -> u64 {
    with(|c| Ok(c.master_now_ns())).unwrap_or(0)
}

/// The last error of this thread's calls ("" if none). Valid until the thread's next failing call.
#[unsafe(no_mangle)]
pub extern "C" fn gm_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// Tell the agent the job failed and exit with `code`.
///
/// # Safety
/// `msg` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gm_abort(code: c_int, msg: *const c_char) {
    let m = if msg.is_null() {
        String::new()
    } else {
        unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned()
    };
    let g = COMM.read().unwrap_or_else(|p| p.into_inner());
    match g.as_ref() {
        Some(c) => c.abort(code, &m),
        None => std::process::exit(code),
    }
}
