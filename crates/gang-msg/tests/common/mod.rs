//! A fake node agent for the tests and the bench: real rank processes, real
//! pages and a real control socket, on one host. It creates each rank's
//! directory (0700) with `table.page` and `state.page`, serves `ctl.sock`
//! (Hello, Put, Fence, Abort; the fence completes when every rank fenced),
//! spawns the ranks with the agent's environment, and drives switches: it
//! publishes a boundary, SIGSTOPs every rank at it, reads the state pages,
//! and SIGCONTs them later.
#![allow(dead_code)]

mod checks;
pub mod wire;

// Each test binary uses a part of this kit (hence the dead_code allowance above).
#[allow(unused_imports)]
pub use checks::*;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use gang_msg::abi::{
    CtlReply, CtlRequest, StatePage, StateSnapshot, TablePage, env, files, read_frame, write_frame,
};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Path of a built example of this crate. A filtered `cargo test --test X`
/// does not build the examples, and an example older than this test binary
/// may predate a library change: then build them (once per test process).
pub fn example(name: &str) -> PathBuf {
    static BUILD: Once = Once::new();
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test> -> target/<profile>/examples/<name>
    let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let path = profile_dir.join("examples").join(name);
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if mtime(&path).is_none_or(|t| Some(t) < mtime(&exe)) {
        BUILD.call_once(|| {
            let target = profile_dir.parent().unwrap();
            let mut cmd = Command::new(env!("CARGO"));
            cmd.args([
                "build",
                "--quiet",
                "-p",
                "gang-msg",
                "--examples",
                "--target-dir",
            ])
            .arg(target);
            if profile_dir.file_name().unwrap() == "release" {
                cmd.arg("--release");
            }
            let st = cmd.status().expect("run cargo to build the examples");
            assert!(st.success(), "building the examples failed");
        });
    }
    assert!(path.exists(), "{} was not built", path.display());
    path
}

#[derive(Clone)]
pub struct JobSpec {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Job rectangle: w x h ranks.
    pub w: u32,
    pub h: u32,
    pub env: Vec<(String, String)>,
    /// Extra variables for one rank.
    pub rank_env: HashMap<usize, Vec<(String, String)>>,
    /// Host id per rank (default: all "host0").
    pub hosts: Option<Vec<String>>,
    pub quiet: bool,
    /// Files every rank's stdout / stderr is appended to (default: inherited).
    pub stdout: Option<PathBuf>,
    pub stderr: Option<PathBuf>,
}

impl JobSpec {
    pub fn new(program: PathBuf, w: u32, h: u32) -> JobSpec {
        JobSpec {
            program,
            args: Vec::new(),
            w,
            h,
            env: Vec::new(),
            rank_env: HashMap::new(),
            hosts: None,
            quiet: false,
            stdout: None,
            stderr: None,
        }
    }

    /// Append every rank's stdout to `path` (only rank 0 prints, in the examples).
    pub fn stdout_to(mut self, path: impl Into<PathBuf>) -> Self {
        self.stdout = Some(path.into());
        self
    }

    /// Append every rank's stderr to `path`.
    pub fn stderr_to(mut self, path: impl Into<PathBuf>) -> Self {
        self.stderr = Some(path.into());
        self
    }

    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }

    pub fn env(mut self, k: &str, v: impl Into<String>) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    pub fn rank_env(mut self, rank: usize, k: &str, v: impl Into<String>) -> Self {
        self.rank_env
            .entry(rank)
            .or_default()
            .push((k.into(), v.into()));
        self
    }

    pub fn size(&self) -> usize {
        (self.w * self.h) as usize
    }
}

#[derive(Default)]
struct Fence {
    kvs: BTreeMap<String, String>,
    waiting: Vec<UnixStream>,
    aborts: Vec<(u32, i32, String)>,
}

/// The state pages read at one boundary, while every rank was stopped.
#[derive(Clone, Debug)]
pub struct SwitchRecord {
    pub boundary: u64,
    pub states: Vec<StateSnapshot>,
    /// How late after the boundary the last SIGSTOP went out.
    pub stop_late_ns: u64,
    /// How late after the boundary every rank was seen stopped.
    pub stopped_late_ns: u64,
    /// Each rank's connected sockets and their kernel queues, read while stopped.
    pub sockets: Vec<Vec<wire::SocketQueue>>,
}

impl SwitchRecord {
    pub fn all_quiesced(&self) -> bool {
        self.states
            .iter()
            .all(|s| s.quiesced_for_ns == self.boundary)
    }

    /// Some rank resumed past the boundary before its SIGSTOP took effect
    /// (the stop came later than the rank's grace).
    pub fn stop_too_late(&self) -> bool {
        self.states
            .iter()
            .any(|s| s.last_boundary_ns >= self.boundary)
    }

    /// Bytes written by some rank's transport and not yet read by its peer,
    /// by the ranks' counters: these may lag a stop by one write (see `wire`).
    pub fn bytes_in_flight(&self) -> i64 {
        self.states
            .iter()
            .map(|s| s.bytes_written as i64 - s.bytes_read as i64)
            .sum()
    }

    /// Bytes the kernel held on the wire between the stopped ranks.
    pub fn wire_bytes(&self) -> u64 {
        wire::wire_bytes(self.sockets.iter().flatten())
    }

    pub fn unacked_bytes(&self) -> u64 {
        self.states.iter().map(|s| s.unacked_bytes).sum()
    }
}

pub struct Job {
    pub dir: tempfile::TempDir,
    pub spec: JobSpec,
    pub tables: Vec<TablePage>,
    pub states: Vec<StatePage>,
    pub children: Vec<Option<Child>>,
    pub statuses: Vec<Option<ExitStatus>>,
    pub pids: Vec<Pid>,
    fence: Arc<Mutex<Fence>>,
    pub switches: Vec<SwitchRecord>,
}

fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

impl Job {
    pub fn start(spec: JobSpec) -> Job {
        let n = spec.size();
        let dir = tempfile::Builder::new()
            .prefix("gm-")
            .tempdir_in("/tmp")
            .unwrap();
        let fence = Arc::new(Mutex::new(Fence::default()));
        let (mut tables, mut states, mut children, mut pids) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in 0..n {
            let rdir = dir.path().join(format!("r{r}"));
            std::fs::create_dir(&rdir).unwrap();
            std::fs::set_permissions(&rdir, std::fs::Permissions::from_mode(0o700)).unwrap();
            let table = TablePage::create(&rdir.join(files::TABLE_PAGE)).unwrap();
            // A master clock 3 s ahead of CLOCK_REALTIME: the ranks must use the offset.
            table.write_offset(3_000_000_000);
            tables.push(table);
            states.push(StatePage::create(&rdir.join(files::STATE_PAGE)).unwrap());
            serve_ctl(
                UnixListener::bind(rdir.join(files::CTL_SOCK)).unwrap(),
                n,
                fence.clone(),
            );
            let (x, y) = (r as u32 % spec.w, r as u32 / spec.w);
            let mut cmd = Command::new(&spec.program);
            cmd.args(&spec.args)
                .env(env::JOB_ID, "42")
                .env(env::RANK, r.to_string())
                .env(env::SIZE, n.to_string())
                .env(env::MESH_X, x.to_string())
                .env(env::MESH_Y, y.to_string())
                .env(env::PART, format!("0,0,{},{}", spec.w, spec.h))
                .env(env::MSG_DIR, &rdir)
                .env(
                    env::HOST_ID,
                    spec.hosts
                        .as_ref()
                        .map_or("host0".to_string(), |h| h[r].clone()),
                )
                .stdin(Stdio::null());
            if spec.quiet {
                cmd.stdout(Stdio::null());
            }
            let append = |p: &Path| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .unwrap_or_else(|e| panic!("open {}: {e}", p.display()))
            };
            if let Some(p) = &spec.stdout {
                cmd.stdout(append(p));
            }
            if let Some(p) = &spec.stderr {
                cmd.stderr(append(p));
            }
            for (k, v) in spec
                .env
                .iter()
                .chain(spec.rank_env.get(&r).into_iter().flatten())
            {
                cmd.env(k, v);
            }
            let child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {}: {e}", spec.program.display()));
            pids.push(Pid::from_raw(child.id() as i32));
            children.push(Some(child));
        }
        Job {
            dir,
            statuses: vec![None; n],
            spec,
            tables,
            states,
            children,
            pids,
            fence,
            switches: Vec::new(),
        }
    }

    pub fn size(&self) -> usize {
        self.spec.size()
    }

    pub fn master_now_ns(&self) -> u64 {
        (realtime_ns() as i64 + self.tables[0].read().realtime_offset_ns) as u64
    }

    pub fn snapshots(&self) -> Vec<StateSnapshot> {
        self.states.iter().map(|s| s.snapshot()).collect()
    }

    pub fn aborts(&self) -> Vec<(u32, i32, String)> {
        self.fence.lock().unwrap().aborts.clone()
    }

    /// Reap ranks that exited; true when all have.
    pub fn poll_exit(&mut self) -> bool {
        for (i, c) in self.children.iter_mut().enumerate() {
            if let Some(ch) = c
                && let Some(st) = ch.try_wait().unwrap()
            {
                self.statuses[i] = Some(st);
                *c = None;
            }
        }
        self.statuses.iter().all(|s| s.is_some())
    }

    pub fn running(&self) -> bool {
        self.children.iter().any(|c| c.is_some())
    }

    /// Wait for every rank to exit, panicking past the deadline.
    pub fn wait(&mut self, limit: Duration) -> Vec<ExitStatus> {
        let deadline = Instant::now() + limit;
        while !self.poll_exit() {
            if Instant::now() > deadline {
                let snaps = self.snapshots();
                self.kill_all();
                panic!("ranks still running after {limit:?}; states: {snaps:#?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.statuses.iter().map(|s| s.unwrap()).collect()
    }

    /// Wait and assert every rank exited 0.
    pub fn expect_success(&mut self, limit: Duration) {
        let st = self.wait(limit);
        for (r, s) in st.iter().enumerate() {
            assert!(
                s.success(),
                "rank {r} of {} exited with {s}",
                self.spec.program.display()
            );
        }
    }

    pub fn signal(&self, rank: usize, sig: Signal) {
        if self.children[rank].is_some() {
            let _ = kill(self.pids[rank], sig);
        }
    }

    pub fn kill_all(&mut self) {
        for r in 0..self.size() {
            self.signal(r, Signal::SIGKILL);
        }
        for c in self.children.iter_mut().flatten() {
            let _ = c.wait();
        }
    }

    /// One switch as the agent does it: publish boundary `b` = now + `ahead`,
    /// SIGSTOP every rank at `b` (never waiting for them), read the pages,
    /// SIGCONT after `stopped`. `early` ranks are stopped before the quiesce
    /// begins (ranks that never answer). Returns None if the job ended.
    pub fn drive_switch(
        &mut self,
        ahead: Duration,
        stopped: Duration,
        early: &[usize],
    ) -> Option<SwitchRecord> {
        if self.poll_exit() {
            return None;
        }
        // Early ranks are stopped before the boundary is even published.
        for &r in early {
            self.signal(r, Signal::SIGSTOP);
        }
        self.wait_stopped(early, Duration::from_secs(5));
        let b = self.master_now_ns() + ahead.as_nanos() as u64;
        for t in &self.tables {
            t.write_switch_out(b);
        }
        self.sleep_until(b);
        let late = self.master_now_ns().saturating_sub(b);
        for r in 0..self.size() {
            self.signal(r, Signal::SIGSTOP);
        }
        let late = late.max(self.master_now_ns().saturating_sub(b));
        // SIGSTOP is asynchronous: wait until each live rank is really stopped
        // (state T in /proc) before reading, as an agent reading at the
        // boundary would see a stopped process.
        let all: Vec<usize> = (0..self.size()).collect();
        self.wait_stopped(&all, Duration::from_secs(5));
        let stopped_late = self.master_now_ns().saturating_sub(b);
        let sockets = (0..self.size())
            .map(|r| match self.children[r] {
                Some(_) => wire::socket_queues(self.pids[r])
                    .unwrap_or_else(|e| panic!("rank {r}'s sockets: {e}")),
                None => Vec::new(),
            })
            .collect();
        let rec = SwitchRecord {
            boundary: b,
            states: self.snapshots(),
            stop_late_ns: late,
            stopped_late_ns: stopped_late,
            sockets,
        };
        std::thread::sleep(stopped);
        for r in 0..self.size() {
            self.signal(r, Signal::SIGCONT);
        }
        self.switches.push(rec.clone());
        Some(rec)
    }

    fn sleep_until(&self, master_ns: u64) {
        loop {
            let now = self.master_now_ns();
            if now >= master_ns {
                return;
            }
            let left = master_ns - now;
            if left > 300_000 {
                std::thread::sleep(Duration::from_nanos(left - 200_000));
            } else {
                std::hint::spin_loop();
            }
        }
    }

    fn wait_stopped(&self, ranks: &[usize], limit: Duration) {
        let deadline = Instant::now() + limit;
        for &r in ranks {
            if self.children[r].is_none() {
                continue;
            }
            // Every thread: the progress thread may stop after the main one.
            let tasks: Vec<PathBuf> = std::fs::read_dir(format!("/proc/{}/task", self.pids[r]))
                .map(|d| d.flatten().map(|e| e.path().join("stat")).collect())
                .unwrap_or_default();
            for path in tasks {
                loop {
                    let stat = std::fs::read_to_string(&path).unwrap_or_default();
                    let state = stat
                        .rsplit_once(") ")
                        .map(|(_, rest)| rest.chars().next().unwrap_or('?'));
                    if matches!(state, Some('T') | Some('t') | Some('Z') | Some('X') | None)
                        || Instant::now() > deadline
                    {
                        break;
                    }
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Drive switches back to back (run `running` between them) until `count`
    /// are done or the job ends.
    pub fn drive_switches(
        &mut self,
        count: usize,
        ahead: Duration,
        stopped: Duration,
        running: Duration,
    ) -> usize {
        let mut done = 0;
        while done < count {
            if self.drive_switch(ahead, stopped, &[]).is_none() {
                break;
            }
            done += 1;
            std::thread::sleep(running);
        }
        for t in &self.tables {
            t.write_switch_out(0);
        }
        done
    }

    /// Wait until `cond` holds on the state pages, or panic past `limit`.
    pub fn wait_states(
        &mut self,
        limit: Duration,
        what: &str,
        cond: impl Fn(&[StateSnapshot]) -> bool,
    ) -> Vec<StateSnapshot> {
        let deadline = Instant::now() + limit;
        loop {
            let s = self.snapshots();
            if cond(&s) {
                return s;
            }
            if Instant::now() > deadline {
                self.kill_all();
                panic!("timed out waiting for {what}; states: {s:#?}");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// Serve one rank's `ctl.sock`: a thread per connection; the fence completes
/// when `n` ranks have fenced, answering each with every key put.
fn serve_ctl(listener: UnixListener, n: usize, fence: Arc<Mutex<Fence>>) {
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let fence = fence.clone();
            std::thread::spawn(move || {
                // The agent checks who connected (SO_PEERCRED): here, that it is a process at all.
                let reply_to = conn.try_clone().unwrap();
                while let Ok(Some(req)) = read_frame::<CtlRequest>(&mut conn) {
                    let mut f = fence.lock().unwrap();
                    match req {
                        CtlRequest::Hello { .. } => {}
                        CtlRequest::Put { key, value } => {
                            f.kvs.insert(key, value);
                        }
                        CtlRequest::Fence => {
                            f.waiting.push(reply_to.try_clone().unwrap());
                            if f.waiting.len() == n {
                                let reply = CtlReply::FenceDone { kvs: f.kvs.clone() };
                                for mut w in f.waiting.drain(..) {
                                    let _ = write_frame(&mut w, &reply);
                                    let _ = w.flush();
                                }
                            }
                        }
                        CtlRequest::Abort { code, message } => f.aborts.push((0, code, message)),
                    }
                }
                let _ = reply_to.shutdown(std::net::Shutdown::Both);
            });
        }
    });
}
