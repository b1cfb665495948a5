//! A daemon kept as its systemd unit keeps it (`deploy/gang-master.service`:
//! `Restart=on-failure`, `RestartSec=2s`, `RestartPreventExitStatus=2`): when it exits with
//! status 1 on its own (a master on etcd that stepped down), it is started again after
//! 2 s with the same command line and log. Tests that run masters outside systemd use it,
//! so that what they see is what a site's units would do.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::logs::error_chain;

/// The unit's `RestartSec`.
pub const RESTART_SEC: Duration = Duration::from_secs(2);
/// The exit status a stepped-down master ends with (2 is a configuration error: never
/// restarted).
const RESTARTED_STATUS: i32 = 1;

/// How the daemon is started each time.
#[derive(Debug, Clone)]
struct Recipe {
    program: OsString,
    args: Vec<OsString>,
    envs: Vec<(OsString, Option<OsString>)>,
    dir: Option<PathBuf>,
    log: PathBuf,
}

impl Recipe {
    fn of(cmd: &Command, log: &Path) -> Recipe {
        Recipe {
            program: cmd.get_program().to_owned(),
            args: cmd.get_args().map(ToOwned::to_owned).collect(),
            envs: cmd
                .get_envs()
                .map(|(k, v)| (k.to_owned(), v.map(ToOwned::to_owned)))
                .collect(),
            dir: cmd.get_current_dir().map(Path::to_path_buf),
            log: log.to_path_buf(),
        }
    }

    fn spawn(&self) -> Result<Child> {
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("cannot open {}", self.log.display()))?;
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .stdin(Stdio::null())
            .stderr(out.try_clone()?)
            .stdout(out)
            .process_group(0);
        for (k, v) in &self.envs {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        if let Some(d) = &self.dir {
            cmd.current_dir(d);
        }
        // Gone with the supervising thread, should the test die first.
        // SAFETY: only prctl, async-signal-safe, between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        cmd.spawn()
            .with_context(|| format!("cannot run {}", self.program.to_string_lossy()))
    }
}

#[derive(Debug, Default)]
struct State {
    child: Option<Child>,
    /// Stopped by its owner: never started again.
    stopped: bool,
    restarts: u32,
}

/// A daemon under a unit's restart rule. Dropped, it is killed.
pub struct Unit {
    state: Arc<Mutex<State>>,
    watcher: Option<JoinHandle<()>>,
}

fn lock(s: &Mutex<State>) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

impl Unit {
    /// Start `cmd` (its output to `log`, appended) and keep it as its unit would.
    pub fn start(cmd: &Command, log: &Path) -> Result<Unit> {
        let recipe = Recipe::of(cmd, log);
        let state = Arc::new(Mutex::new(State::default()));
        let (tx, rx) = std::sync::mpsc::channel();
        let watcher = {
            let state = state.clone();
            // The children are started on this thread (their parent-death signal follows
            // it), which lives as long as the unit.
            std::thread::spawn(move || {
                let first = recipe.spawn();
                let ok = first.is_ok();
                match first {
                    Ok(c) => {
                        lock(&state).child = Some(c);
                        let _ = tx.send(Ok(()));
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
                if ok {
                    supervise(&state, &recipe);
                }
            })
        };
        rx.recv()
            .context("the unit's thread ended before starting its daemon")??;
        Ok(Unit {
            state,
            watcher: Some(watcher),
        })
    }

    /// The daemon's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        let mut s = lock(&self.state);
        let c = s.child.as_mut()?;
        matches!(c.try_wait(), Ok(None)).then(|| c.id())
    }

    /// How many times it was started again.
    pub fn restarts(&self) -> u32 {
        lock(&self.state).restarts
    }

    /// SIGKILL it and keep it down (as `systemctl kill` then `stop`).
    pub fn kill(&mut self) {
        {
            let mut s = lock(&self.state);
            s.stopped = true;
            if let Some(c) = s.child.as_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
    }
}

impl Drop for Unit {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Watch the daemon until stopped; start it again after `RESTART_SEC` when it exits with
/// status 1 by itself.
fn supervise(state: &Mutex<State>, recipe: &Recipe) {
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let status = {
            let mut s = lock(state);
            if s.stopped {
                return;
            }
            match s.child.as_mut().map(Child::try_wait) {
                Some(Ok(Some(st))) => st,
                Some(Ok(None)) => continue,
                _ => return,
            }
        };
        if status.code() != Some(RESTARTED_STATUS) {
            return;
        }
        note(
            recipe,
            &format!(
                "exited with status {RESTARTED_STATUS}: starting it again in {RESTART_SEC:?} (as its unit's Restart=on-failure)"
            ),
        );
        std::thread::sleep(RESTART_SEC);
        let mut s = lock(state);
        if s.stopped {
            return;
        }
        match recipe.spawn() {
            Ok(c) => {
                s.child = Some(c);
                s.restarts += 1;
            }
            Err(e) => {
                note(
                    recipe,
                    &format!("cannot start it again: {}", error_chain(e.as_ref())),
                );
                return;
            }
        }
    }
}

/// A line of the supervisor's in the daemon's log.
fn note(recipe: &Recipe, what: &str) {
    use std::io::Write;
    if let Ok(mut f) = OpenOptions::new().append(true).open(&recipe.log) {
        let _ = writeln!(f, "[unit] {what}");
    }
}
