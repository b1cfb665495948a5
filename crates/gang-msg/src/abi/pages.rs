//! The two shared pages in `GANG_MSG_DIR`: `table.page` (agent writes, rank
//! reads) and `state.page` (rank writes, agent reads). Both are one 4 KiB
//! page of `#[repr(C)]` atomics, so either side reads the other's fields
//! without a lock and without a message per switch (FLSCHED's lesson).

use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering::*, fence};

pub const PAGE_SIZE: usize = 4096;
/// "GANGTBL1" little-endian.
pub const TABLE_MAGIC: u64 = u64::from_le_bytes(*b"GANGTBL1");
pub const TABLE_VERSION: u32 = 1;
/// "GANGST01" little-endian.
pub const STATE_MAGIC: u64 = u64::from_le_bytes(*b"GANGST01");
pub const STATE_VERSION: u32 = 1;

/// `table.page`. The agent writes it as a seqlock: `seq` odd while a write is
/// under way, even (and bumped by 2) once done; a reader retries on an odd or
/// changed `seq`.
#[repr(C)]
pub(crate) struct TableLayout {
    pub magic: AtomicU64,
    pub version: AtomicU32,
    pub _reserved: AtomicU32,
    pub seq: AtomicU64,
    /// Master clock = CLOCK_REALTIME + this.
    pub realtime_offset_ns: AtomicI64,
    /// Master-clock time of this job's next switch-out boundary; 0 = none planned.
    pub switch_out_at_ns: AtomicU64,
}

/// `state.page`. Every field is written by the rank only.
#[repr(C)]
pub(crate) struct StateLayout {
    pub magic: AtomicU64,
    pub version: AtomicU32,
    pub pid: AtomicU32,
    /// CLOCK_MONOTONIC ns when the rank blocked in a receive (or a wait on one); 0 = not blocked.
    pub blocked_since_ns: AtomicU64,
    pub wait_src: AtomicI32,
    pub wait_tag: AtomicI32,
    /// Messages the API accepted (counted before the send call returns).
    pub posted_sends: AtomicU64,
    /// Messages placed in this rank's buffers (matched or unexpected).
    pub delivered: AtomicU64,
    pub bytes_written: AtomicU64,
    pub bytes_read: AtomicU64,
    /// The boundary (master ns) this rank last quiesced for.
    pub quiesced_for_ns: AtomicU64,
    /// Boundaries passed.
    pub switches: AtomicU64,
    /// Boundaries passed without having quiesced for them.
    pub unflushed: AtomicU64,
    pub flush_ns: AtomicU64,
    pub save_ns: AtomicU64,
    pub restore_ns: AtomicU64,
    pub inflight_bytes_at_quiesce: AtomicU64,
    /// Payload bytes injected towards peers and not yet acknowledged, now.
    pub unacked_bytes: AtomicU64,
    /// The boundary the flush/save timings above belong to.
    pub timings_for_ns: AtomicU64,
    /// The latest boundary this rank has seen pass (it resumed after it).
    pub last_boundary_ns: AtomicU64,
}

/// `state.page`'s fields and their byte offsets, for mirrors of the layout outside Rust
/// (gang-mpi-check's C header is tested against this), and its size.
pub fn state_layout() -> (Vec<(&'static str, usize)>, usize) {
    use std::mem::offset_of;
    let fields = vec![
        ("magic", offset_of!(StateLayout, magic)),
        ("version", offset_of!(StateLayout, version)),
        ("pid", offset_of!(StateLayout, pid)),
        (
            "blocked_since_ns",
            offset_of!(StateLayout, blocked_since_ns),
        ),
        ("wait_src", offset_of!(StateLayout, wait_src)),
        ("wait_tag", offset_of!(StateLayout, wait_tag)),
        ("posted_sends", offset_of!(StateLayout, posted_sends)),
        ("delivered", offset_of!(StateLayout, delivered)),
        ("bytes_written", offset_of!(StateLayout, bytes_written)),
        ("bytes_read", offset_of!(StateLayout, bytes_read)),
        ("quiesced_for_ns", offset_of!(StateLayout, quiesced_for_ns)),
        ("switches", offset_of!(StateLayout, switches)),
        ("unflushed", offset_of!(StateLayout, unflushed)),
        ("flush_ns", offset_of!(StateLayout, flush_ns)),
        ("save_ns", offset_of!(StateLayout, save_ns)),
        ("restore_ns", offset_of!(StateLayout, restore_ns)),
        (
            "inflight_bytes_at_quiesce",
            offset_of!(StateLayout, inflight_bytes_at_quiesce),
        ),
        ("unacked_bytes", offset_of!(StateLayout, unacked_bytes)),
        ("timings_for_ns", offset_of!(StateLayout, timings_for_ns)),
        (
            "last_boundary_ns",
            offset_of!(StateLayout, last_boundary_ns),
        ),
    ];
    (fields, std::mem::size_of::<StateLayout>())
}

const _: () = assert!(std::mem::size_of::<TableLayout>() <= PAGE_SIZE);
const _: () = assert!(std::mem::size_of::<StateLayout>() <= PAGE_SIZE);

/// One shared mapping of a page-sized file (or anonymous memory).
struct Mapping {
    ptr: *mut libc::c_void,
}

// The mapping holds only atomics, which are Sync.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    fn file(path: &Path, create_mode: Option<u32>, writable: bool) -> io::Result<Mapping> {
        let c = CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
        let flags = match (create_mode, writable) {
            (Some(_), _) => libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
            (None, true) => libc::O_RDWR,
            (None, false) => libc::O_RDONLY,
        } | libc::O_CLOEXEC;
        let fd = unsafe { libc::open(c.as_ptr(), flags, create_mode.unwrap_or(0) as libc::c_uint) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let res = (|| {
            if create_mode.is_some()
                && unsafe { libc::ftruncate(fd, PAGE_SIZE as libc::off_t) } != 0
            {
                return Err(io::Error::last_os_error());
            }
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            if unsafe { libc::fstat(fd, &mut st) } != 0 {
                return Err(io::Error::last_os_error());
            }
            // Mapping past the end of a short file would SIGBUS on first touch.
            if (st.st_size as usize) < PAGE_SIZE {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} is shorter than a page", path.display()),
                ));
            }
            let prot = if writable || create_mode.is_some() {
                libc::PROT_READ | libc::PROT_WRITE
            } else {
                libc::PROT_READ
            };
            Self::map(fd, prot, libc::MAP_SHARED)
        })();
        unsafe { libc::close(fd) };
        res
    }

    /// A page of memory (a memfd) that cannot be shrunk or grown, read-write: the agent
    /// maps it and hands the descriptor to the rank. A page in a file the rank can write
    /// could be truncated under the agent's mapping, and the agent's next read of it
    /// would die of SIGBUS; no size change is possible here, whoever holds the fd.
    fn sealed(name: &str) -> io::Result<(Mapping, OwnedFd)> {
        let c = CString::new(name).map_err(io::Error::other)?;
        let raw =
            unsafe { libc::memfd_create(c.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        if unsafe { libc::ftruncate(raw, PAGE_SIZE as libc::off_t) } != 0
            || unsafe { libc::fcntl(raw, libc::F_ADD_SEALS, seals) } != 0
        {
            return Err(io::Error::last_os_error());
        }
        let map = Self::map(raw, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED)?;
        Ok((map, fd))
    }

    /// Map a page passed as a descriptor (the rank's side of [`Mapping::sealed`]),
    /// refusing one shorter than a page.
    fn from_fd(fd: RawFd) -> io::Result<Mapping> {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if (st.st_size as usize) < PAGE_SIZE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("descriptor {fd} is shorter than a page"),
            ));
        }
        Self::map(fd, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED)
    }

    fn anonymous() -> io::Result<Mapping> {
        Self::map(
            -1,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
        )
    }

    fn map(fd: i32, prot: i32, flags: i32) -> io::Result<Mapping> {
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), PAGE_SIZE, prot, flags, fd, 0) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr })
    }

    fn get<T>(&self) -> &T {
        // The page is page-aligned, at least as large as T (asserted above) and
        // T is made of atomics only, for which any bit pattern is valid.
        unsafe { &*(self.ptr as *const T) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.ptr, PAGE_SIZE) };
    }
}

/// The agent's side writes, the rank's side reads.
pub struct TablePage {
    map: Mapping,
}

/// A consistent read of `table.page`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TableSnapshot {
    pub seq: u64,
    pub realtime_offset_ns: i64,
    pub switch_out_at_ns: u64,
}

impl TablePage {
    /// Agent: create (truncate) the page, mode 0644, magic and version set,
    /// no boundary planned.
    pub fn create(path: &Path) -> io::Result<TablePage> {
        let map = Mapping::file(path, Some(0o644), true)?;
        let page = TablePage { map };
        let t = page.layout();
        t.version.store(TABLE_VERSION, Relaxed);
        t.magic.store(TABLE_MAGIC, Release);
        Ok(page)
    }

    /// Rank: map an existing page read-only and check its magic and version.
    pub fn open_read(path: &Path) -> io::Result<TablePage> {
        let page = TablePage {
            map: Mapping::file(path, None, false)?,
        };
        let t = page.layout();
        if t.magic.load(Acquire) != TABLE_MAGIC || t.version.load(Relaxed) != TABLE_VERSION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: not a table page of version {TABLE_VERSION}",
                    path.display()
                ),
            ));
        }
        Ok(page)
    }

    /// A private page with no boundary, for a rank started without an agent.
    pub fn anonymous() -> io::Result<TablePage> {
        let page = TablePage {
            map: Mapping::anonymous()?,
        };
        page.layout().magic.store(TABLE_MAGIC, Release);
        Ok(page)
    }

    pub(crate) fn layout(&self) -> &TableLayout {
        self.map.get()
    }

    fn write(&self, f: impl FnOnce(&TableLayout)) {
        let t = self.layout();
        let s = t.seq.load(Relaxed);
        t.seq.store(s | 1, Relaxed);
        fence(Release);
        f(t);
        t.seq.store((s | 1) + 1, Release);
    }

    /// Agent: publish the next switch-out boundary (master ns; 0 = none).
    pub fn write_switch_out(&self, at_ns: u64) {
        self.write(|t| t.switch_out_at_ns.store(at_ns, Relaxed));
    }

    /// Agent: publish the offset of the master clock from CLOCK_REALTIME.
    pub fn write_offset(&self, offset_ns: i64) {
        self.write(|t| t.realtime_offset_ns.store(offset_ns, Relaxed));
    }

    /// Both sides: a consistent snapshot (retries while the agent writes).
    pub fn read(&self) -> TableSnapshot {
        let t = self.layout();
        loop {
            let s1 = t.seq.load(Acquire);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let snap = TableSnapshot {
                seq: s1,
                realtime_offset_ns: t.realtime_offset_ns.load(Relaxed),
                switch_out_at_ns: t.switch_out_at_ns.load(Relaxed),
            };
            fence(Acquire);
            if t.seq.load(Relaxed) == s1 {
                return snap;
            }
        }
    }
}

/// The rank's side writes, the agent's side reads.
pub struct StatePage {
    map: Mapping,
}

/// A plain copy of `state.page`. `ready` is false until the rank has
/// initialised the page (magic written).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct StateSnapshot {
    pub ready: bool,
    pub pid: u32,
    pub blocked_since_ns: u64,
    pub wait_src: i32,
    pub wait_tag: i32,
    pub posted_sends: u64,
    pub delivered: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub quiesced_for_ns: u64,
    pub switches: u64,
    pub unflushed: u64,
    pub flush_ns: u64,
    pub save_ns: u64,
    pub restore_ns: u64,
    pub inflight_bytes_at_quiesce: u64,
    pub unacked_bytes: u64,
    pub timings_for_ns: u64,
    pub last_boundary_ns: u64,
}

impl StatePage {
    /// Agent: create (truncate) a zeroed page, mode 0600. The agent then
    /// chowns it to the job's user before exec.
    pub fn create(path: &Path) -> io::Result<StatePage> {
        Ok(StatePage {
            map: Mapping::file(path, Some(0o600), true)?,
        })
    }

    /// Agent: a zeroed page in sealed memory, and its descriptor for the rank to
    /// inherit (`GANG_STATE_FD`). Its size is fixed for good, so reading it never faults,
    /// whatever the rank does with the descriptor.
    pub fn create_sealed() -> io::Result<(StatePage, OwnedFd)> {
        let (map, fd) = Mapping::sealed("gang-state-page")?;
        Ok((StatePage { map }, fd))
    }

    /// Rank: map the page the agent passed as `fd` and stamp it.
    pub fn open_write_fd(fd: RawFd) -> io::Result<StatePage> {
        let page = StatePage {
            map: Mapping::from_fd(fd)?,
        };
        page.stamp();
        Ok(page)
    }

    /// Agent: map a rank's page read-only.
    pub fn open_read(path: &Path) -> io::Result<StatePage> {
        Ok(StatePage {
            map: Mapping::file(path, None, false)?,
        })
    }

    /// Rank: map the agent-created page for writing and stamp it.
    pub fn open_write(path: &Path) -> io::Result<StatePage> {
        let page = StatePage {
            map: Mapping::file(path, None, true)?,
        };
        page.stamp();
        Ok(page)
    }

    /// A private page, for a rank started without an agent.
    pub fn anonymous() -> io::Result<StatePage> {
        let page = StatePage {
            map: Mapping::anonymous()?,
        };
        page.stamp();
        Ok(page)
    }

    fn stamp(&self) {
        let s = self.layout();
        s.version.store(STATE_VERSION, Relaxed);
        s.pid.store(std::process::id(), Relaxed);
        s.wait_src.store(-1, Relaxed);
        s.wait_tag.store(-1, Relaxed);
        s.magic.store(STATE_MAGIC, Release);
    }

    pub(crate) fn layout(&self) -> &StateLayout {
        self.map.get()
    }

    /// Read every field. The order matters to deadlock detection: `delivered`
    /// is read before `blocked_since_ns` (the rank clears a waiter's
    /// `blocked_since_ns` before counting the message that wakes it), and
    /// `posted_sends` after it (a rank counts its sends before it blocks).
    pub fn snapshot(&self) -> StateSnapshot {
        let s = self.layout();
        let ready =
            s.magic.load(Acquire) == STATE_MAGIC && s.version.load(Relaxed) == STATE_VERSION;
        let delivered = s.delivered.load(SeqCst);
        let blocked_since_ns = s.blocked_since_ns.load(SeqCst);
        let wait_src = s.wait_src.load(SeqCst);
        let wait_tag = s.wait_tag.load(SeqCst);
        let posted_sends = s.posted_sends.load(SeqCst);
        StateSnapshot {
            ready,
            pid: s.pid.load(Relaxed),
            blocked_since_ns,
            wait_src,
            wait_tag,
            posted_sends,
            delivered,
            bytes_written: s.bytes_written.load(Relaxed),
            bytes_read: s.bytes_read.load(Relaxed),
            quiesced_for_ns: s.quiesced_for_ns.load(Acquire),
            switches: s.switches.load(Relaxed),
            unflushed: s.unflushed.load(Relaxed),
            flush_ns: s.flush_ns.load(Relaxed),
            save_ns: s.save_ns.load(Relaxed),
            restore_ns: s.restore_ns.load(Relaxed),
            inflight_bytes_at_quiesce: s.inflight_bytes_at_quiesce.load(Relaxed),
            unacked_bytes: s.unacked_bytes.load(Relaxed),
            timings_for_ns: s.timings_for_ns.load(Relaxed),
            last_boundary_ns: s.last_boundary_ns.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_written_by_agent_is_read_by_rank() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("table.page");
        let agent = TablePage::create(&path).unwrap();
        let rank = TablePage::open_read(&path).unwrap();
        assert_eq!(rank.read().switch_out_at_ns, 0);
        agent.write_offset(-5);
        agent.write_switch_out(1234);
        let snap = rank.read();
        assert_eq!(
            (snap.realtime_offset_ns, snap.switch_out_at_ns, snap.seq),
            (-5, 1234, 4)
        );
    }

    #[test]
    fn state_written_by_rank_is_read_by_agent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.page");
        let agent = StatePage::create(&path).unwrap();
        assert!(!agent.snapshot().ready);
        let rank = StatePage::open_write(&path).unwrap();
        rank.layout().posted_sends.fetch_add(3, SeqCst);
        let snap = agent.snapshot();
        assert!(snap.ready);
        assert_eq!(
            (snap.pid, snap.posted_sends, snap.wait_src),
            (std::process::id(), 3, -1)
        );
    }

    #[test]
    fn a_sealed_state_page_cannot_change_size() {
        use std::os::fd::AsRawFd;
        let (agent, fd) = StatePage::create_sealed().unwrap();
        let rank = StatePage::open_write_fd(fd.as_raw_fd()).unwrap();
        rank.layout().delivered.fetch_add(7, SeqCst);
        for len in [0, 1, PAGE_SIZE as libc::off_t * 1024] {
            let r = unsafe { libc::ftruncate(fd.as_raw_fd(), len) };
            assert_eq!(r, -1, "ftruncate to {len} was allowed");
            assert_eq!(io::Error::last_os_error().raw_os_error(), Some(libc::EPERM));
        }
        // Nor can the seals be changed (F_SEAL_SEAL).
        let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_WRITE) };
        assert_eq!(r, -1);
        let snap = agent.snapshot();
        assert!(snap.ready);
        assert_eq!(snap.delivered, 7);
    }

    #[test]
    fn short_or_foreign_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        std::fs::write(&path, b"short").unwrap();
        assert!(StatePage::open_read(&path).is_err());
        std::fs::write(&path, vec![0u8; PAGE_SIZE]).unwrap();
        assert!(TablePage::open_read(&path).is_err());
    }
}
