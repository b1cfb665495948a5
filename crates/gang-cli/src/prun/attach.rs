//! The attach loop of `prun` and `gangctl attach`: relay a job's stdio until it finishes,
//! cancel it (prun, which then exits 130 after Ctrl-C, as srun) or leave it running
//! (gangctl attach) on Ctrl-C, SIGTERM or SIGHUP, and reattach when the stream breaks (a
//! master restart).

use std::io::{Read, Write};
use std::time::Duration;

use gang_proto::v1::attach_response::Event;
use gang_proto::v1::{AttachRequest, AttachResponse, CancelRequest};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use crate::connect::{self, CliError};
use crate::output::format::{deadlock_report, fmt_submesh};
use crate::prun::ends::{finished_code, interrupted_code, lost_output_code};
use crate::prun::relay::{Dest, Relay};

/// How long `prun` keeps trying to reattach after the stream broke: as long as agents
/// keep a job's ranks without the master by default (the master's `agent_lease_ms`), so
/// that a master restarting or failing over slowly does not cost the user their terminal.
pub const RECONNECT_FOR: Duration = Duration::from_secs(300);
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
const STDIN_CHUNK: usize = 64 * 1024;

/// What a signal does to an attached client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnSignal {
    /// `prun`: cancel the job and relay until it ends; a second signal leaves at once.
    Cancel,
    /// `gangctl attach`: leave, the job running on (as `sattach` or `docker attach`).
    Detach,
}

/// What `prun` and `gangctl attach` attach with.
#[derive(Debug, Clone)]
pub struct AttachOptions {
    /// The command's name, before every message (`prun: ...`).
    pub prog: &'static str,
    /// Master address (normalized).
    pub master: String,
    pub job_id: u64,
    /// For `Cancel`.
    pub uid: u32,
    /// Forward our stdin to rank 0; otherwise end its stdin at once.
    pub stdin: bool,
    /// `--label`: prefix lines with `RANK: `.
    pub label: bool,
    /// `-v`: say when the job starts, how far its launch has got, and when reattached.
    pub verbose: bool,
    /// `--quiet`: no line naming the failing rank.
    pub quiet: bool,
    pub on_signal: OnSignal,
    /// A signal came while the job was being submitted: cancel it at once.
    pub cancel_now: bool,
    /// Set once the user was told the job waits (see `queue_note`): its start is said too.
    pub said_queued: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// What the stdin reader hands the loop.
enum StdinMsg {
    Data(Vec<u8>),
    Eof,
}

/// Whether our stdin is worth forwarding: not closed and not /dev/null.
pub fn stdin_is_useful() -> bool {
    use nix::sys::stat::{fstat, stat};
    let Ok(ours) = fstat(std::io::stdin()) else {
        return false; // closed
    };
    match stat("/dev/null") {
        Ok(null) => {
            !(ours.st_rdev == null.st_rdev
                && ours.st_dev == null.st_dev
                && ours.st_ino == null.st_ino)
        }
        Err(_) => true,
    }
}

/// Read our stdin on a plain thread (a blocking read must not hold up the runtime, and the
/// process exits without waiting for it).
fn spawn_stdin_reader(prog: &'static str, forward: bool) -> mpsc::Receiver<StdinMsg> {
    let (tx, rx) = mpsc::channel(16);
    if !forward {
        let _ = tx.try_send(StdinMsg::Eof);
        return rx;
    }
    std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = vec![0u8; STDIN_CHUNK];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if tx.blocking_send(StdinMsg::Data(buf[..n].to_vec())).is_err() {
                            return;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        eprintln!("{prog}: reading stdin: {e}; closing the job's stdin");
                        break;
                    }
                }
            }
            let _ = tx.blocking_send(StdinMsg::Eof);
        })
        .expect("spawn the stdin thread");
    rx
}

/// A live attach stream.
struct Session {
    requests: mpsc::Sender<AttachRequest>,
    responses: Streaming<AttachResponse>,
    /// The master stopped taking requests on this stream (the call is ending).
    requests_closed: bool,
    /// Something arrived on this stream (it works, not just opened).
    answered: bool,
}

/// Open an attach stream: connect, send `job_id` (and `stdin_eof` again when our stdin
/// already ended in an earlier session).
async fn open_session(master: String, job_id: u64, resend_eof: bool) -> Result<Session, CliError> {
    let mut client = connect::job_client(&master).await?;
    let (tx, rx) = mpsc::channel(16);
    tx.try_send(AttachRequest {
        job_id,
        ..Default::default()
    })
    .expect("fresh channel has room");
    if resend_eof {
        tx.try_send(AttachRequest {
            job_id,
            stdin_eof: true,
            ..Default::default()
        })
        .expect("fresh channel has room");
    }
    let responses = client.attach(ReceiverStream::new(rx)).await?.into_inner();
    Ok(Session {
        requests: tx,
        responses,
        requests_closed: false,
        answered: false,
    })
}

/// Cancel the job, retrying while the master is unreachable (up to [`RECONNECT_FOR`]).
async fn cancel_job(prog: &'static str, master: String, job_id: u64, uid: u32) {
    let deadline = Instant::now() + RECONNECT_FOR;
    let mut backoff = FIRST_BACKOFF;
    loop {
        let result = async {
            let mut client = connect::job_client(&master).await?;
            client.cancel(CancelRequest { job_id, uid }).await?;
            Ok::<(), CliError>(())
        }
        .await;
        match result {
            Ok(()) => return,
            // It ended before the cancel arrived: its end is reported as any other.
            Err(CliError::Rpc(s)) if s.code() == tonic::Code::FailedPrecondition => return,
            Err(e) if e.is_transient() && Instant::now() + backoff < deadline => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(e) => {
                eprintln!("{prog}: cannot cancel job {job_id}: {e}");
                return;
            }
        }
    }
}

pub fn write_out(dest: Dest, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    // Errors (a closed pipe) are ignored: the job runs on; its exit code still matters.
    match dest {
        Dest::Stdout => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(bytes).and_then(|_| out.flush());
        }
        Dest::Stderr => {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(bytes).and_then(|_| err.flush());
        }
    }
}

enum Conn {
    Live(Box<Session>),
    Connecting(JoinHandle<Result<Session, CliError>>),
    Waiting(Instant),
}

/// One thing that happened while attached.
// One Step exists at a time and is matched at once: boxing the response would allocate
// per output message to save stack space nobody is short of.
#[allow(clippy::large_enum_variant)]
enum Step {
    /// SIGINT (Ctrl-C), SIGTERM or SIGHUP: its number.
    Signal(i32),
    Response(Result<Option<AttachResponse>, tonic::Status>),
    /// A stdin message was handed to the stream (or the stream stopped taking them).
    Sent,
    Stdin(Option<StdinMsg>),
    Connected(Result<Session, CliError>),
    Retry,
}

/// The attach loop's state.
struct Attacher {
    prog: &'static str,
    quiet: bool,
    on_signal: OnSignal,
    master: String,
    job_id: u64,
    uid: u32,
    verbose: bool,
    relay: Relay,
    stdin_rx: mpsc::Receiver<StdinMsg>,
    /// More may come from `stdin_rx`.
    stdin_open: bool,
    /// `stdin_eof` went out on some stream.
    eof_sent: bool,
    /// The next stdin message, waiting for room on the stream.
    pending: Option<AttachRequest>,
    conn: Conn,
    /// Since when the master is lost (`None`: attached and answering).
    lost_since: Option<Instant>,
    backoff: Duration,
    /// The signal that made `prun` cancel the job, once it did.
    cancelled_by: Option<i32>,
    said_queued: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Attacher {
    fn said_queued(&self) -> bool {
        self.said_queued
            .as_ref()
            .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Wait for the next step of the connection (not signals).
    async fn next_conn_step(&mut self) -> Step {
        let can_take_stdin = self.stdin_open && self.pending.is_none();
        match &mut self.conn {
            Conn::Live(s) => {
                let has_pending = self.pending.is_some() && !s.requests_closed;
                tokio::select! {
                    m = s.responses.message() => Step::Response(m),
                    permit = s.requests.reserve(), if has_pending => {
                        match permit {
                            Ok(p) => p.send(self.pending.take().expect("checked")),
                            Err(_) => s.requests_closed = true,
                        }
                        Step::Sent
                    }
                    m = self.stdin_rx.recv(), if can_take_stdin => Step::Stdin(m),
                }
            }
            Conn::Connecting(h) => Step::Connected(match h.await {
                Ok(r) => r,
                Err(e) => Err(CliError::other(format!("attaching: {e}"))),
            }),
            Conn::Waiting(at) => {
                tokio::time::sleep_until(*at).await;
                Step::Retry
            }
        }
    }

    /// Handle one step; `Some(code)` when `prun` is done.
    fn handle(&mut self, step: Step) -> Option<i32> {
        match step {
            Step::Signal(signo) => self.on_signal(signo),
            Step::Sent => {
                if self.pending.is_none() && !self.stdin_open {
                    self.eof_sent = true;
                }
                None
            }
            Step::Stdin(m) => {
                self.on_stdin(m);
                None
            }
            Step::Response(Ok(Some(resp))) => self.on_response(resp),
            Step::Response(Ok(None)) => {
                self.lost("the stream ended before the job finished".into())
            }
            Step::Response(Err(status)) => self.on_error(CliError::from(status)),
            Step::Connected(Ok(session)) => {
                self.relay.new_session();
                self.conn = Conn::Live(Box::new(session));
                None
            }
            Step::Connected(Err(e)) => self.on_error(e),
            Step::Retry => {
                let open = open_session(self.master.clone(), self.job_id, self.eof_sent);
                self.conn = Conn::Connecting(tokio::spawn(open));
                None
            }
        }
    }

    /// SIGINT, SIGTERM or SIGHUP: detach (`gangctl attach`), or cancel the job and leave
    /// at the second (`prun`).
    fn on_signal(&mut self, signo: i32) -> Option<i32> {
        let job_id = self.job_id;
        if self.on_signal == OnSignal::Detach {
            let prog = self.prog;
            let code = self.finish(128 + signo);
            eprintln!(
                "{prog}: detached from job {job_id}, which runs on (gangctl cancel {job_id} ends it)"
            );
            return Some(code);
        }
        if self.cancelled_by.is_some() {
            return Some(self.finish(130));
        }
        self.start_cancel(signo);
        None
    }

    /// A stdin message from the reader thread: the next request to send.
    fn on_stdin(&mut self, m: Option<StdinMsg>) {
        let job_id = self.job_id;
        self.pending = Some(match m {
            Some(StdinMsg::Data(data)) => AttachRequest {
                job_id,
                stdin: data,
                stdin_eof: false,
                no_follow: false,
            },
            Some(StdinMsg::Eof) | None => {
                self.stdin_open = false;
                AttachRequest {
                    job_id,
                    stdin: Vec::new(),
                    stdin_eof: true,
                    no_follow: false,
                }
            }
        });
    }

    /// A message of the master: output, the job's start, end or deadlock.
    fn on_response(&mut self, resp: AttachResponse) -> Option<i32> {
        let job_id = self.job_id;
        if let Conn::Live(s) = &mut self.conn
            && !s.answered
        {
            // The stream works: the master is back (if it was lost).
            s.answered = true;
            self.backoff = FIRST_BACKOFF;
            if self.lost_since.take().is_some() && self.verbose {
                eprintln!("{}: reattached to job {job_id}", self.prog);
            }
        }
        match resp.event {
            Some(Event::Output(o)) => {
                let (dest, bytes) = self.relay.output(o.rank, o.stream, &o.data);
                write_out(dest, &bytes);
            }
            Some(Event::Started(job)) if self.verbose || self.said_queued() => {
                let at = job.submesh.map(|s| fmt_submesh(&s)).unwrap_or_default();
                eprintln!("{}: job {job_id} started on {at}", self.prog);
            }
            Some(Event::Finished(job)) => {
                // Output first: the reason is the last thing the user reads.
                self.finish(0);
                let code = finished_code(self.prog, &job, self.quiet);
                let code = interrupted_code(&job, code, self.cancelled_by);
                return Some(lost_output_code(self.prog, &job, code));
            }
            Some(Event::Deadlocked(job)) => {
                eprint!("{}", deadlock_report(&job));
            }
            Some(Event::Progress(p)) if self.verbose => {
                eprintln!(
                    "{}: launch {} of {} subtrees done, {} of {} ranks started",
                    self.prog, p.subtrees_done, p.subtrees, p.ranks_started, p.ranks
                );
            }
            Some(Event::Started(_) | Event::Progress(_)) | None => {}
        }
        None
    }

    /// An error of the stream or of a reconnection: reattach if it may pass, else done.
    fn on_error(&mut self, e: CliError) -> Option<i32> {
        match self.transient(e) {
            Ok(why) => self.lost(why),
            Err(code) => Some(code),
        }
    }

    /// The master is lost (`why`): reattach after a backoff, or give up past
    /// [`RECONNECT_FOR`].
    fn lost(&mut self, why: String) -> Option<i32> {
        let (prog, job_id) = (self.prog, self.job_id);
        match self.lost_since {
            None => {
                self.lost_since = Some(Instant::now());
                eprintln!("{prog}: lost the master ({why}); reattaching to job {job_id}");
            }
            Some(t) if t.elapsed() >= RECONNECT_FOR => {
                let secs = RECONNECT_FOR.as_secs();
                eprintln!(
                    "{prog}: gave up reattaching to job {job_id} after {secs} s: {why} (the job may still run: `gangctl job {job_id}`, `gangctl output {job_id}`)"
                );
                return Some(self.finish(1));
            }
            Some(_) => {}
        }
        // Whatever was in flight on the old stream may be lost; stdin already handed
        // over is not sent twice.
        self.conn = Conn::Waiting(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        None
    }

    /// A transient error's message (to retry), or `prun`'s exit code after a fatal one.
    fn transient(&mut self, e: CliError) -> Result<String, i32> {
        if e.is_transient() {
            Ok(e.to_string())
        } else {
            let code = self.finish(1);
            eprintln!("{}: {e}", self.prog);
            Err(code)
        }
    }

    /// Cancel the job (once), for signal `signo`, and keep relaying until it ends.
    fn start_cancel(&mut self, signo: i32) {
        self.cancelled_by = Some(signo);
        eprintln!("{}: cancelling job {}", self.prog, self.job_id);
        tokio::spawn(cancel_job(
            self.prog,
            self.master.clone(),
            self.job_id,
            self.uid,
        ));
    }

    /// Flush held-back output; returns `code`.
    fn finish(&mut self, code: i32) -> i32 {
        for (dest, bytes) in self.relay.finish() {
            write_out(dest, &bytes);
        }
        code
    }
}

/// SIGINT, SIGTERM and SIGHUP, caught. Install them before submitting: a Ctrl-C between
/// the submission and the attach must cancel the job, not kill prun and leave the job
/// running. SIGHUP (the terminal or ssh session closed) is a Ctrl-C nobody typed: the
/// job is cancelled, not left running with nobody to see its output, as srun does.
/// SIGINT or SIGHUP ignored when prun started (`&`, `nohup`) stays ignored
/// ([`gang_local::driver::signals::ignored_at_start`]): `nohup prun ... &` outlives the login.
pub struct Signals {
    int: Option<tokio::signal::unix::Signal>,
    term: tokio::signal::unix::Signal,
    hup: Option<tokio::signal::unix::Signal>,
    /// The first signal taken (one during the submission decides prun's exit code).
    first: Option<i32>,
}

impl Signals {
    pub fn install() -> std::io::Result<Signals> {
        use gang_local::driver::signals::ignored_at_start;
        use nix::sys::signal::Signal as Sig;
        let unless_ignored = |sig: Sig, kind: SignalKind| -> std::io::Result<_> {
            if ignored_at_start(sig) {
                Ok(None)
            } else {
                signal(kind).map(Some)
            }
        };
        Ok(Signals {
            int: unless_ignored(Sig::SIGINT, SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: unless_ignored(Sig::SIGHUP, SignalKind::hangup())?,
            first: None,
        })
    }

    /// The next signal's number.
    pub async fn recv(&mut self) -> i32 {
        async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        let signo = tokio::select! {
            _ = next(&mut self.int) => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = next(&mut self.hup) => libc::SIGHUP,
        };
        self.first.get_or_insert(signo);
        signo
    }
}

/// Attach to a submitted job and relay its stdio until it finishes. Returns the exit code
/// for `prun`.
pub async fn run(opts: AttachOptions, mut signals: Signals) -> i32 {
    let mut a = Attacher {
        prog: opts.prog,
        quiet: opts.quiet,
        on_signal: opts.on_signal,
        master: opts.master.clone(),
        job_id: opts.job_id,
        uid: opts.uid,
        verbose: opts.verbose,
        relay: Relay::new(opts.label),
        stdin_rx: spawn_stdin_reader(opts.prog, opts.stdin),
        stdin_open: true,
        eof_sent: false,
        pending: None,
        conn: Conn::Connecting(tokio::spawn(open_session(opts.master, opts.job_id, false))),
        lost_since: None,
        backoff: FIRST_BACKOFF,
        cancelled_by: None,
        said_queued: opts.said_queued,
    };
    if opts.cancel_now {
        a.start_cancel(signals.first.unwrap_or(libc::SIGTERM));
    }
    loop {
        let step = tokio::select! {
            signo = signals.recv() => Step::Signal(signo),
            step = a.next_conn_step() => step,
        };
        if let Some(code) = a.handle(step) {
            return code;
        }
    }
}
