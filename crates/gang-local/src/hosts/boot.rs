//! Booting one emulated host: its image written, its namespaces made by `unshare`, its
//! network plugged into the switch, its mounts released, and its systemd found and
//! waited for until the host is running.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::cgroups::HostCgroups;
use super::{ClockSkew, EmulatedHosts, Host, HostPlan, ImageOptions, clock, image, network};
use crate::POLL;
use crate::procs::Proc;

pub(super) fn netns_of(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/net")).ok()
}

/// Wait until `cond` holds, or fail naming `what` past `limit` or once `interrupt` is set.
pub(super) fn wait_for(
    interrupt: &Option<Arc<AtomicBool>>,
    limit: Duration,
    what: &str,
    mut cond: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        if cond()? {
            return Ok(());
        }
        if interrupt.as_ref().is_some_and(|f| f.load(Ordering::SeqCst)) {
            return Err(crate::Interrupted { kept_dir: None }.into());
        }
        if Instant::now() > deadline {
            bail!("timed out after {limit:?} waiting for {what}");
        }
        std::thread::sleep(POLL);
    }
}

/// A host's first process, `unshare`, spawned and not yet known to have made its
/// namespaces.
struct Outer {
    dir: PathBuf,
    proc: Proc,
    cgroups: HostCgroups,
    /// The fifo the init script waits on before it starts systemd.
    go: PathBuf,
    log: PathBuf,
}

/// An error if the host's first process has ended (a host that cannot come up), quoting
/// its console.
fn check_outer(outer: &mut Proc, log: &Path) -> Result<()> {
    if let Some(status) = outer.poll()? {
        bail!(
            "its first process ended ({status}): {}",
            std::fs::read_to_string(log).unwrap_or_default().trim()
        );
    }
    Ok(())
}

/// Let the init script go on, once it opens the fifo for reading (its mounts are made):
/// whether it had.
fn release_init(go: &Path) -> Result<bool> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(go)
    {
        Ok(mut f) => {
            use std::io::Write;
            f.write_all(b"go\n")?;
            Ok(true)
        }
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The first child of `pid` (0 if none yet): the host's systemd under `unshare`.
fn first_child(pid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

impl EmulatedHosts {
    /// Boot one host: its first process, then each stage waited for in turn (namespaces,
    /// network, mounts, PID 1).
    pub(super) fn boot(
        &self,
        plan: &HostPlan,
        bin_dir: &Path,
        image: &ImageOptions,
        clock: Option<ClockSkew>,
    ) -> Result<Host> {
        let mut outer = self.spawn_outer(plan, bin_dir, image, clock)?;
        let pid = outer.proc.id();
        let ours = netns_of(std::process::id());
        wait_for(
            &self.interrupt,
            Duration::from_secs(10),
            "its namespaces",
            || {
                check_outer(&mut outer.proc, &outer.log)?;
                Ok(netns_of(pid).is_some_and(|n| Some(&n) != ours.as_ref()))
            },
        )?;
        network::plug(&self.switch_ns, plan.index, pid, plan.addr)?;
        // The init script opens the fifo for reading once its mounts are made.
        wait_for(
            &self.interrupt,
            Duration::from_secs(30),
            "its mounts",
            || {
                check_outer(&mut outer.proc, &outer.log)?;
                release_init(&outer.go)
            },
        )?;
        let mut init_pid = 0;
        wait_for(
            &self.interrupt,
            Duration::from_secs(10),
            "its PID 1",
            || {
                check_outer(&mut outer.proc, &outer.log)?;
                init_pid = first_child(pid);
                Ok(init_pid != 0)
            },
        )?;
        Ok(Host {
            plan: plan.clone(),
            dir: outer.dir,
            outer: outer.proc,
            init: init_pid,
            cgroups: outer.cgroups,
        })
    }

    /// Write the host's image and start its first process, `unshare`, in the host's
    /// cgroups; it waits on the `go` fifo before it starts systemd.
    fn spawn_outer(
        &self,
        plan: &HostPlan,
        bin_dir: &Path,
        image: &ImageOptions,
        clock: Option<ClockSkew>,
    ) -> Result<Outer> {
        let dir = self.dir.join(&plan.name);
        std::fs::create_dir_all(&dir)?;
        let preload = match clock {
            Some(skew) => Some(clock::install(&dir, skew)?),
            None => None,
        };
        let init = image::write_host(
            &dir,
            &self.layout,
            plan,
            &self.pki,
            bin_dir,
            image,
            preload.as_deref(),
        )?;
        let go = dir.join("go");
        nix::unistd::mkfifo(&go, nix::sys::stat::Mode::from_bits_truncate(0o600))?;
        let cgroups = HostCgroups::create(self.serial, plan.index)?;
        let console = std::fs::File::create(dir.join("console.log"))?;
        let script = format!(
            "{}exec setpriv --pdeathsig KILL unshare --pid --fork --kill-child=SIGKILL --mount --uts --net --ipc --cgroup -- /bin/sh {}",
            cgroups.enter_script(),
            init.display()
        );
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(console.try_clone()?)
            .stderr(console);
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
        let proc = self.spawner.spawn(cmd)?;
        let log = dir.join("console.log");
        Ok(Outer {
            dir,
            proc,
            cgroups,
            go,
            log,
        })
    }

    pub(super) fn wait_booted(&mut self, i: usize, limit: Duration) -> Result<()> {
        let name = self.hosts[i].plan.name.clone();
        let mut last = String::new();
        let interrupt = self.interrupt.clone();
        wait_for(&interrupt, limit, &format!("{name} to boot"), || {
            if let Some(status) = self.hosts[i].outer.poll()? {
                bail!("{name}'s systemd ended ({status})");
            }
            let out = self.exec(i, &["systemctl", "is-system-running"])?;
            last = String::from_utf8_lossy(&out.stdout).trim().to_string();
            match last.as_str() {
                "running" => Ok(true),
                "degraded" => {
                    let failed =
                        self.exec(i, &["systemctl", "--failed", "--no-legend", "--plain"])?;
                    let failed = String::from_utf8_lossy(&failed.stdout).into_owned();
                    let mut why = String::new();
                    for unit in failed.lines().filter_map(|l| l.split_whitespace().next()) {
                        why.push_str(&self.journal(i, unit));
                    }
                    bail!("{name} booted degraded: {}\n{why}", failed.trim())
                }
                _ => Ok(false),
            }
        })
        .with_context(|| format!("{name} was last `{last}`"))
    }
}
