//! The API a job program calls: `init`, point-to-point, requests, finalize.
//! API threads never touch a socket: they queue sends and post receives for
//! the progress thread, then wait (spin, then block on a condvar).

use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering::*;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::abi::{Neighbours, Part};
use crate::bootstrap;
use crate::config::{Config, ContextMode};
use crate::error::{Error, Result};
use crate::mailbox::{Msg, RecvSlot};
use crate::quiesce::blocked_stamp;
use crate::shared::{ABANDON, DRAIN, SendDone, Shared};
use crate::wire::MAX_PAYLOAD;

/// A received message: (source rank, tag, payload).
pub type Received = (usize, i32, Vec<u8>);

/// One rank's handle on the job. Methods take `&self` and may be called from
/// several threads; the deadlock counters assume one thread receives at a time.
pub struct Comm {
    sh: Arc<Shared>,
    cfg: Config,
    progress: Option<JoinHandle<()>>,
    ctl: Mutex<Option<UnixStream>>,
}

/// Start the library from the environment the agent set (see `abi::env`).
pub fn init() -> Result<Comm> {
    Comm::from_config(Config::from_env()?)
}

impl Comm {
    pub fn from_config(cfg: Config) -> Result<Comm> {
        let started = bootstrap::start(&cfg)?;
        Ok(Comm {
            sh: started.shared,
            cfg,
            progress: Some(started.progress),
            ctl: Mutex::new(started.ctl),
        })
    }

    pub fn rank(&self) -> usize {
        self.cfg.rank
    }

    pub fn size(&self) -> usize {
        self.cfg.size
    }

    /// This rank's node on the mesh.
    pub fn coord(&self) -> (u32, u32) {
        self.cfg.part.coord(self.cfg.rank)
    }

    /// The job's rectangle.
    pub fn part(&self) -> Part {
        self.cfg.part
    }

    /// N (y-1), S (y+1), E (x+1), W (x-1) ranks inside the job's rectangle.
    pub fn neighbours(&self) -> Neighbours {
        self.cfg.part.neighbours(self.cfg.rank, self.cfg.size)
    }

    pub fn context_mode(&self) -> ContextMode {
        self.cfg.context
    }

    /// How long a blocking receive spins before it sleeps (0 = sleep at once).
    pub fn set_spin_us(&self, us: u64) {
        self.sh.spin_us.store(us, Relaxed);
    }

    pub fn spin_us(&self) -> u64 {
        self.sh.spin_us.load(Relaxed)
    }

    /// The master clock (CLOCK_REALTIME + the agent's offset), ns.
    pub fn master_now_ns(&self) -> u64 {
        self.sh.master_now_ns()
    }

    /// The next switch-out boundary the agent published, master ns.
    pub fn switch_out_at_ns(&self) -> Option<u64> {
        Some(self.sh.table.read().switch_out_at_ns).filter(|&b| b != 0)
    }

    fn check_dest(&self, dest: usize, len: usize) -> Result<()> {
        if dest >= self.cfg.size {
            return Err(Error::BadRank {
                rank: dest,
                size: self.cfg.size,
            });
        }
        if len > MAX_PAYLOAD {
            return Err(Error::TooLarge(len));
        }
        Ok(())
    }

    fn check_tag(tag: i32) -> Result<()> {
        if tag < 0 {
            Err(Error::BadTag(tag))
        } else {
            Ok(())
        }
    }

    /// Send `data` to `dest` with `tag` (>= 0). Eager: the data is copied and
    /// the call returns; the message is delivered in order with the other
    /// messages from this rank to `dest`.
    pub fn send(&self, dest: usize, tag: i32, data: &[u8]) -> Result<()> {
        Self::check_tag(tag)?;
        self.send_raw(dest, tag, data.to_vec(), None)
    }

    /// Like `send`; the request completes once the message is in the receiver's buffers.
    pub fn isend(&self, dest: usize, tag: i32, data: &[u8]) -> Result<SendRequest> {
        Self::check_tag(tag)?;
        let done = Arc::new(SendDone::default());
        self.send_raw(dest, tag, data.to_vec(), Some(done.clone()))?;
        Ok(SendRequest {
            done,
            sh: self.sh.clone(),
        })
    }

    pub(crate) fn send_raw(
        &self,
        dest: usize,
        tag: i32,
        data: Vec<u8>,
        done: Option<Arc<SendDone>>,
    ) -> Result<()> {
        self.check_dest(dest, data.len())?;
        self.sh.post_send(dest, tag, data, done);
        Ok(())
    }

    /// Receive the first message matching `src` (None = any) and `tag` (None = any tag >= 0).
    pub fn recv(&self, src: Option<usize>, tag: Option<i32>) -> Result<Received> {
        if let Some(t) = tag {
            Self::check_tag(t)?;
        }
        self.recv_raw(src, tag)
    }

    pub(crate) fn recv_raw(&self, src: Option<usize>, tag: Option<i32>) -> Result<Received> {
        let req = self.irecv_raw(src, tag)?;
        req.wait()
    }

    /// Post a receive; complete it with `wait` or `test`. Receives are matched
    /// in the order they were posted.
    pub fn irecv(&self, src: Option<usize>, tag: Option<i32>) -> Result<RecvRequest> {
        if let Some(t) = tag {
            Self::check_tag(t)?;
        }
        self.irecv_raw(src, tag)
    }

    fn irecv_raw(&self, src: Option<usize>, tag: Option<i32>) -> Result<RecvRequest> {
        if let Some(s) = src.filter(|&s| s >= self.cfg.size) {
            return Err(Error::BadRank {
                rank: s,
                size: self.cfg.size,
            });
        }
        let slot = RecvSlot::new(src, tag);
        self.sh.mailbox.lock().unwrap().post(&slot);
        Ok(RecvRequest {
            slot,
            sh: self.sh.clone(),
            taken: false,
        })
    }

    /// Tell the agent the job failed, and exit with `code`.
    pub fn abort(&self, code: i32, message: &str) -> ! {
        bootstrap::abort(self.ctl.lock().unwrap().as_mut(), code, message);
        std::process::exit(code)
    }

    /// Wait for every rank (a barrier), for every message this rank sent to
    /// be acknowledged, then stop the progress thread.
    pub fn finalize(mut self) -> Result<()> {
        let res = self.barrier();
        self.sh.shutdown.store(DRAIN, Release);
        self.sh.wake();
        if let Some(h) = self.progress.take() {
            let _ = h.join();
        }
        res?;
        match self.sh.fatal() {
            Some(f) => Err(Error::Transport(f)),
            None => Ok(()),
        }
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        if let Some(h) = self.progress.take() {
            self.sh.shutdown.store(ABANDON, Release);
            self.sh.wake();
            let _ = h.join();
        }
    }
}

/// A non-blocking send.
pub struct SendRequest {
    done: Arc<SendDone>,
    sh: Arc<Shared>,
}

impl SendRequest {
    /// Whether the receiver has the message in its buffers.
    pub fn test(&self) -> bool {
        self.done.done.load(Acquire)
    }

    pub fn wait(&self) -> Result<()> {
        if self.test() {
            return Ok(());
        }
        let mut g = self.sh.mailbox.lock().unwrap();
        while !self.test() {
            if let Some(f) = self.sh.fatal() {
                return Err(Error::Transport(f));
            }
            g = self.sh.cond.wait(g).unwrap();
        }
        Ok(())
    }
}

/// A posted receive.
pub struct RecvRequest {
    slot: Arc<RecvSlot>,
    sh: Arc<Shared>,
    taken: bool,
}

impl RecvRequest {
    /// The message if it has arrived (once; later calls return None).
    pub fn test(&mut self) -> Option<Received> {
        if self.taken || !self.slot.done.load(Acquire) {
            return None;
        }
        self.taken = true;
        self.take()
    }

    fn take(&self) -> Option<Received> {
        self.slot
            .msg
            .lock()
            .unwrap()
            .take()
            .map(|Msg { src, tag, data }| (src, tag, data))
    }

    /// Block until the message arrives: spin for the configured time, then
    /// sleep. While waiting, the rank shows as blocked in its state page.
    pub fn wait(mut self) -> Result<Received> {
        if self.taken {
            return Err(Error::Transport(
                "receive request already completed by test".into(),
            ));
        }
        self.taken = true;
        if !self.slot.done.load(Acquire) {
            self.block()?;
        }
        self.take()
            .ok_or_else(|| Error::Transport("receive slot completed without a message".into()))
    }

    fn block(&self) -> Result<()> {
        let st = self.sh.state.layout();
        st.wait_src
            .store(self.slot.src.map_or(-1, |s| s as i32), SeqCst);
        st.wait_tag.store(self.slot.tag.unwrap_or(-1), SeqCst);
        st.blocked_since_ns.store(blocked_stamp(), SeqCst);
        self.slot.waiting.store(true, SeqCst);
        let spin = self.sh.spin_us.load(Relaxed);
        if spin > 0 {
            let until = Instant::now() + Duration::from_micros(spin);
            while !self.slot.done.load(Acquire) && Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        let mut res = Ok(());
        if !self.slot.done.load(Acquire) {
            let mut g = self.sh.mailbox.lock().unwrap();
            while !self.slot.done.load(Acquire) {
                if let Some(f) = self.sh.fatal() {
                    res = Err(Error::Transport(f));
                    break;
                }
                g = self.sh.cond.wait(g).unwrap();
            }
        }
        self.slot.waiting.store(false, SeqCst);
        st.blocked_since_ns.store(0, SeqCst);
        res
    }
}
