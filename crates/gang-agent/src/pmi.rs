//! A PMI-1 server for the rank: the "simple" wire protocol MPICH speaks to its process
//! manager (hydra's `mpiexec`, Slurm's `mpi/pmi1`, Flux), so an unmodified MPICH program
//! run by `prun` finds its peers instead of starting as a singleton.
//!
//! The rank inherits one end of a socketpair, named by `PMI_FD`; the agent serves the
//! other end in a task. Messages are lines of space-separated `key=value` words, the first
//! being `cmd=NAME` (or `mcmd=spawn`, a multi-line command ending with `endcmd`). The
//! key-value space is the job's: `put` is kept in the rank's own table, and `barrier_in`
//! is a fence through the master (`MsgHub::fence`), which answers once every rank of the
//! job arrived with everything any rank put; `get` then answers from that space.
//!
//! PMI-2 (`cmd=fullinit`) is not served: the answer says so and MPICH built for PMI-2
//! fails at init rather than hanging.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tracing::{debug, info, warn};

use crate::ranks::RankKey;

/// Who completes a barrier: the messaging hub's fence through the master (`msg.rs`
/// implements it; this module stays below `msg` in the import graph).
pub trait Fencer: Send + Sync + 'static {
    fn fence(
        &self,
        key: RankKey,
        epoch: u32,
        puts: BTreeMap<String, String>,
    ) -> impl std::future::Future<Output = Result<BTreeMap<String, String>, String>> + Send;
}

/// What the rank is told of the limits (what hydra says too).
pub const KVSNAME_MAX: usize = 256;
pub const KEYLEN_MAX: usize = 64;
pub const VALLEN_MAX: usize = 1024;
/// Longest line accepted: a put of the longest key and value, and room for the words.
const LINE_MAX: usize = 64 + KVSNAME_MAX + KEYLEN_MAX + VALLEN_MAX;

/// The job as the rank's PMI server sees it.
#[derive(Debug, Clone)]
pub struct PmiJob {
    pub key: RankKey,
    pub size: u32,
}

impl PmiJob {
    pub fn kvsname(&self) -> String {
        format!("gang-{}", self.key.job_id)
    }

    /// The environment MPICH's simple PMI client reads: the fd, its rank and the size.
    pub fn env(&self, fd: i32) -> Vec<(String, String)> {
        vec![
            ("PMI_FD".into(), fd.to_string()),
            ("PMI_RANK".into(), self.key.rank.to_string()),
            ("PMI_SIZE".into(), self.size.to_string()),
            ("PMI_JOBID".into(), self.kvsname()),
            ("PMI_APPNUM".into(), "0".into()),
        ]
    }

    /// `PMI_process_mapping`: one rank per node (every rank of a job has its own agent
    /// node), in MPICH's "vector" notation: starting at node 0, `size` nodes of 1 rank.
    fn process_mapping(&self) -> String {
        format!("(vector,(0,{},1))", self.size)
    }
}

/// A socketpair for one rank: (the agent's end, the rank's end). Both close on exec; the
/// child clears the flag on its own end (`inherit`) just before exec, so no other rank
/// started meanwhile inherits it.
pub fn socketpair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [-1; 2];
    // SAFETY: socketpair writes two descriptors into the array it is given.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both are new descriptors, owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// In the forked child: let `fd` survive exec. Async-signal-safe (one fcntl).
pub fn inherit(fd: i32) -> std::io::Result<()> {
    // SAFETY: fcntl on a descriptor number; no memory is touched.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The agent's end as a tokio stream.
pub fn agent_stream(fd: OwnedFd) -> std::io::Result<UnixStream> {
    let std = std::os::unix::net::UnixStream::from(fd);
    std.set_nonblocking(true)?;
    UnixStream::from_std(std)
}

/// A parsed line: `cmd` and its other words.
#[derive(Debug, PartialEq, Eq)]
pub struct Line {
    pub cmd: String,
    pub args: BTreeMap<String, String>,
    /// `message=` and the rest of the line (abort's message has spaces).
    pub message: Option<String>,
}

pub fn parse(line: &str) -> Option<Line> {
    let mut words = line.split_whitespace();
    let first = words.next()?;
    let (k, cmd) = first.split_once('=')?;
    if k != "cmd" && k != "mcmd" {
        return None;
    }
    let args = words
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let message = line
        .find(" message=")
        .map(|at| line[at + " message=".len()..].trim().to_string())
        .filter(|m| !m.is_empty());
    Some(Line {
        cmd: cmd.to_string(),
        args,
        message,
    })
}

/// The server's state for one rank.
pub struct Session {
    job: PmiJob,
    /// Everything this rank put (sent whole at each barrier).
    puts: BTreeMap<String, String>,
    /// The job's space as of the last completed barrier.
    space: BTreeMap<String, String>,
    epoch: u32,
    /// Set by `abort`: the exit code the rank asked for and what the job's failure
    /// reason says.
    pub aborted: Option<Abort>,
}

/// A rank's PMI abort.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abort {
    pub code: i32,
    pub what: String,
}

/// What to do after a line.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    Reply(String),
    /// `barrier_in`: fence, then answer.
    Barrier,
    /// `finalize`: answer, the rank closes.
    Finalize(String),
    /// `abort`: no answer; the agent ends the rank, reported as exiting with its code
    /// (what hydra does too).
    Abort,
}

impl Session {
    pub fn new(job: PmiJob) -> Session {
        Session {
            job,
            puts: BTreeMap::new(),
            space: BTreeMap::new(),
            epoch: 0,
            aborted: None,
        }
    }

    /// Answer one line (a barrier is completed by `barrier_done`).
    pub fn handle(&mut self, line: &Line) -> Step {
        let arg = |k: &str| line.args.get(k).map(String::as_str).unwrap_or("");
        match line.cmd.as_str() {
            "init" => {
                if arg("pmi_version") == "1" {
                    Step::Reply("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0".into())
                } else {
                    Step::Reply(format!(
                        "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1 msg=only_PMI-1_is_served_(asked_for_{})",
                        word(arg("pmi_version"))
                    ))
                }
            }
            "fullinit" => Step::Reply(
                "cmd=fullinit-response;rc=-1;errmsg=PMI-2_is_not_served_by_prun:_use_PMI-1;".into(),
            ),
            "get_maxes" => Step::Reply(format!(
                "cmd=maxes rc=0 kvsname_max={KVSNAME_MAX} keylen_max={KEYLEN_MAX} vallen_max={VALLEN_MAX}"
            )),
            "get_appnum" => Step::Reply("cmd=appnum rc=0 appnum=0".into()),
            "get_my_kvsname" => Step::Reply(format!(
                "cmd=my_kvsname rc=0 kvsname={}",
                self.job.kvsname()
            )),
            "get_universe_size" => {
                Step::Reply(format!("cmd=universe_size rc=0 size={}", self.job.size))
            }
            "put" => {
                let (k, v) = (arg("key"), arg("value"));
                if k.is_empty() {
                    Step::Reply("cmd=put_result rc=-1 msg=no_key".into())
                } else if k.len() > KEYLEN_MAX || v.len() > VALLEN_MAX {
                    Step::Reply("cmd=put_result rc=-1 msg=key_or_value_too_long".into())
                } else {
                    self.puts.insert(k.to_string(), v.to_string());
                    Step::Reply("cmd=put_result rc=0".into())
                }
            }
            "get" => {
                let k = arg("key");
                let value = if k == "PMI_process_mapping" {
                    Some(self.job.process_mapping())
                } else {
                    self.puts.get(k).or_else(|| self.space.get(k)).cloned()
                };
                match value {
                    Some(v) => Step::Reply(format!("cmd=get_result rc=0 value={v}")),
                    None => Step::Reply(format!(
                        "cmd=get_result rc=-1 msg=key_{}_not_found",
                        word(k)
                    )),
                }
            }
            "barrier_in" => Step::Barrier,
            "finalize" => Step::Finalize("cmd=finalize_ack rc=0".into()),
            "abort" => {
                let code = arg("exitcode").parse().unwrap_or(1);
                let mut what = format!("called PMI abort (MPI_Abort) with exit code {code}");
                if let Some(m) = &line.message {
                    let _ = write!(what, ": {m}");
                }
                self.aborted = Some(Abort { code, what });
                Step::Abort
            }
            "spawn" => Step::Reply(
                "cmd=spawn_result rc=-1 errmsg=spawn_is_not_supported_under_prun".into(),
            ),
            other => Step::Reply(format!(
                "cmd={} rc=-1 msg=unknown_command_{}",
                word(other),
                word(other)
            )),
        }
    }

    /// The fence's next epoch and the puts to send.
    pub fn barrier_start(&mut self) -> (u32, &BTreeMap<String, String>) {
        self.epoch += 1;
        (self.epoch, &self.puts)
    }

    pub fn barrier_done(&mut self, result: Result<BTreeMap<String, String>, String>) -> String {
        match result {
            Ok(space) => {
                self.space = space;
                "cmd=barrier_out rc=0".into()
            }
            Err(e) => format!("cmd=barrier_out rc=-1 msg={}", word(&e)),
        }
    }
}

/// A value safe in one word of the protocol.
fn word(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_whitespace() || c == '=' {
                '_'
            } else {
                c
            }
        })
        .collect()
}

/// Serve the rank's PMI socket until it closes; the abort message, if the rank aborted.
pub async fn serve<F: Fencer>(
    hub: Arc<F>,
    stream: UnixStream,
    job: PmiJob,
    pgid: nix::unistd::Pid,
) -> Option<Abort> {
    let key = job.key;
    let fd = stream.as_raw_fd();
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    let mut session = Session::new(job);
    let mut buf = String::new();
    let mut spawn_lines = false;
    loop {
        buf.clear();
        match (&mut rd).take(LINE_MAX as u64).read_line(&mut buf).await {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                debug!(job_id = key.job_id, rank = key.rank, fd, "PMI socket: {e}");
                break;
            }
        }
        let text = buf.trim_end_matches('\n');
        debug!(job_id = key.job_id, rank = key.rank, line = text, "PMI <");
        if spawn_lines {
            // The rest of a multi-line spawn: skipped up to its end, then refused.
            if text == "endcmd" {
                spawn_lines = false;
                let refusal = "cmd=spawn_result rc=-1 errmsg=spawn_is_not_supported_under_prun";
                if send(&mut wr, refusal).await.is_err() {
                    break;
                }
            }
            continue;
        }
        let Some(line) = parse(text) else {
            if !buf.ends_with('\n') {
                warn!(
                    job_id = key.job_id,
                    rank = key.rank,
                    "PMI: a line too long; closing"
                );
                break;
            }
            if send(&mut wr, "cmd=error rc=-1 msg=not_a_PMI-1_command")
                .await
                .is_err()
            {
                break;
            }
            continue;
        };
        if line.cmd == "spawn" && text.starts_with("mcmd=") {
            spawn_lines = true;
            continue;
        }
        let reply = match session.handle(&line) {
            Step::Reply(r) => r,
            Step::Finalize(r) => {
                let _ = send(&mut wr, &r).await;
                continue;
            }
            Step::Abort => {
                warn!(
                    job_id = key.job_id,
                    rank = key.rank,
                    why = session
                        .aborted
                        .as_ref()
                        .map(|a| a.what.as_str())
                        .unwrap_or(""),
                    "the rank aborted: ending it"
                );
                // MPICH waits for the process manager to end it; its exit is reported
                // with the code it gave (the master then ends the job's other ranks).
                crate::ranks::signal_group(pgid, nix::sys::signal::Signal::SIGKILL);
                continue;
            }
            Step::Barrier => {
                let (epoch, puts) = session.barrier_start();
                let puts = puts.clone();
                let started = std::time::Instant::now();
                let result = hub.fence(key, epoch, puts).await;
                if let Ok(space) = &result {
                    debug!(
                        job_id = key.job_id,
                        rank = key.rank,
                        epoch,
                        keys = space.len(),
                        bytes = space.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>(),
                        us = started.elapsed().as_micros() as u64,
                        "PMI barrier done"
                    );
                }
                session.barrier_done(result)
            }
        };
        if send(&mut wr, &reply).await.is_err() {
            break;
        }
    }
    if let Some(a) = &session.aborted {
        info!(job_id = key.job_id, rank = key.rank, why = %a.what, "PMI session ended by abort");
    }
    session.aborted
}

async fn send(wr: &mut tokio::net::unix::OwnedWriteHalf, line: &str) -> std::io::Result<()> {
    let mut out = String::with_capacity(line.len() + 1);
    out.push_str(line);
    out.push('\n');
    wr.write_all(out.as_bytes()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> PmiJob {
        PmiJob {
            key: RankKey { job_id: 7, rank: 1 },
            size: 4,
        }
    }

    fn reply(s: &mut Session, line: &str) -> String {
        match s.handle(&parse(line).unwrap()) {
            Step::Reply(r) | Step::Finalize(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_handshake_and_queries() {
        let mut s = Session::new(job());
        assert_eq!(
            reply(&mut s, "cmd=init pmi_version=1 pmi_subversion=1"),
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0"
        );
        assert!(reply(&mut s, "cmd=init pmi_version=2 pmi_subversion=0").contains("rc=-1"));
        assert_eq!(
            reply(&mut s, "cmd=get_maxes"),
            "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024"
        );
        assert_eq!(
            reply(&mut s, "cmd=get_my_kvsname"),
            "cmd=my_kvsname rc=0 kvsname=gang-7"
        );
        assert_eq!(
            reply(&mut s, "cmd=get_universe_size"),
            "cmd=universe_size rc=0 size=4"
        );
        assert_eq!(reply(&mut s, "cmd=get_appnum"), "cmd=appnum rc=0 appnum=0");
        assert_eq!(reply(&mut s, "cmd=finalize"), "cmd=finalize_ack rc=0");
        assert!(reply(&mut s, "cmd=bogus a=b").starts_with("cmd=bogus rc=-1"));
        assert!(reply(&mut s, "cmd=spawn nprocs=2").contains("rc=-1"));
        assert!(reply(&mut s, "cmd=fullinit pmijobid=1").contains("rc=-1"));
        assert!(parse("hello").is_none());
    }

    #[test]
    fn puts_are_local_until_a_barrier_brings_the_space() {
        let mut s = Session::new(job());
        assert_eq!(
            reply(&mut s, "cmd=put kvsname=gang-7 key=P1-bc value=tcp://x:1"),
            "cmd=put_result rc=0"
        );
        assert_eq!(
            reply(&mut s, "cmd=get kvsname=gang-7 key=P1-bc"),
            "cmd=get_result rc=0 value=tcp://x:1"
        );
        assert!(reply(&mut s, "cmd=get kvsname=gang-7 key=P0-bc").contains("rc=-1"));
        assert_eq!(
            reply(&mut s, "cmd=get kvsname=gang-7 key=PMI_process_mapping"),
            "cmd=get_result rc=0 value=(vector,(0,4,1))"
        );
        assert_eq!(s.handle(&parse("cmd=barrier_in").unwrap()), Step::Barrier);
        let (epoch, puts) = s.barrier_start();
        assert_eq!(epoch, 1);
        assert_eq!(puts.len(), 1);
        let space = [("P0-bc".to_string(), "tcp://y:2".to_string())].into();
        assert_eq!(s.barrier_done(Ok(space)), "cmd=barrier_out rc=0");
        assert_eq!(
            reply(&mut s, "cmd=get kvsname=gang-7 key=P0-bc"),
            "cmd=get_result rc=0 value=tcp://y:2"
        );
        assert_eq!(
            s.barrier_done(Err("job 7 is not running".into())),
            "cmd=barrier_out rc=-1 msg=job_7_is_not_running"
        );
    }

    #[test]
    fn abort_names_the_code() {
        let mut s = Session::new(job());
        let line = "cmd=abort exitcode=3 message=application called MPI_Abort(MPI_COMM_WORLD, 3) - process 0";
        assert_eq!(s.handle(&parse(line).unwrap()), Step::Abort);
        assert_eq!(
            s.aborted,
            Some(Abort {
                code: 3,
                what: "called PMI abort (MPI_Abort) with exit code 3: application called MPI_Abort(MPI_COMM_WORLD, 3) - process 0".into()
            })
        );
    }
}
