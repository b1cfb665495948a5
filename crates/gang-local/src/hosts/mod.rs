//! Emulated hosts: a cluster of K separate hosts on this machine, each with its own
//! network, mount, UTS, IPC, PID and cgroup namespaces and **systemd as PID 1**, running
//! the master and the agents from `deploy/`'s units, as a site would (`gangctl start
//! --hosts K`, and the end-to-end tests of what one host cannot show).
//!
//! Invariants:
//! - Root only, refused with the reason otherwise, and refused before anything is made
//!   where namespaces or the tools (`unshare`, `nsenter`, `ip`, systemd) are missing.
//! - Nothing is made in the machine's own namespaces but the cgroup subtrees
//!   (`cgroups.rs`) and the harness's directory: the bridge lives in a network namespace
//!   of its own (`network.rs`), every host's mounts in its own mount namespace.
//! - Torn down completely by [`EmulatedHosts::shutdown`], on drop, and if the owner dies
//!   (the hosts' first processes get SIGKILL from `PR_SET_PDEATHSIG`, set by `setpriv`
//!   as `unshare --fork` ignores SIGTERM, their systemd SIGKILL from `unshare
//!   --kill-child`, and with PID 1 every process of a host goes):
//!   no namespace, mount, cgroup or process is left.
//! - Host 0 runs the master; hosts 1..=K the agents (`layout.rs`). Clients on this
//!   machine reach the master through its Unix socket, seen through the master host's
//!   root: `unix:/proc/PID/root/run/gang/master.sock`.

mod boot;
mod cgroups;
mod clock;
mod image;
mod impair;
mod layout;
mod network;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use gang_auth::pki::Pki;
use nix::sys::signal::Signal;

pub use clock::{ClockSkew, parse_offset};
pub use image::{ImageOptions, agent_unit};
pub use impair::LinkCounts;
pub use layout::{HostPlan, Layout, LayoutError, MAX_HOSTS};

use crate::POLL;
use crate::poll::{block_on, list_nodes};
use crate::procs::{Proc, Spawner};
use boot::{netns_of, wait_for};
use cgroups::HostCgroups;

/// How an emulated cluster is made.
#[derive(Debug, Clone)]
pub struct HostsOptions {
    /// Compute hosts (the master gets one more).
    pub hosts: u32,
    /// Where `gang-master`, `gang-agent`, `gangctl` and `prun` are.
    pub bin_dir: Option<PathBuf>,
    /// The harness's directory (certificates, each host's files and console); a fresh
    /// temporary one, removed at teardown, by default.
    pub dir: Option<PathBuf>,
    pub image: ImageOptions,
    /// How long the hosts may take to boot and every node to come up.
    pub boot_timeout: Duration,
    /// Keep the temporary directory after the teardown.
    pub keep: bool,
    /// Each host's wall clock (host 0 the master's; hosts past the list's end keep the
    /// machine's). `Some` preloads the clock library into every host (`clock.rs`), so that
    /// [`EmulatedHosts::set_clock`] can move any host's clock later; `None` leaves every
    /// host on the machine's clock, untouched.
    pub clocks: Option<Vec<ClockSkew>>,
    /// Set from elsewhere to abort a pending start (it fails with [`crate::Interrupted`]
    /// after tearing down what it made).
    pub interrupt: Option<Arc<AtomicBool>>,
}

impl Default for HostsOptions {
    fn default() -> Self {
        HostsOptions {
            hosts: 4,
            bin_dir: None,
            dir: None,
            image: ImageOptions {
                allow_root_jobs: nix::unistd::geteuid().is_root(),
                master_keys: Vec::new(),
            },
            boot_timeout: Duration::from_secs(90),
            keep: false,
            interrupt: None,
            clocks: None,
        }
    }
}

/// One running host.
#[derive(Debug)]
struct Host {
    plan: HostPlan,
    dir: PathBuf,
    /// `unshare`: its namespaces are the host's; its child is the host's systemd.
    outer: Proc,
    /// The host's PID 1 (systemd), as this machine numbers it.
    init: u32,
    cgroups: HostCgroups,
}

/// A running emulated cluster.
#[derive(Debug)]
pub struct EmulatedHosts {
    layout: Layout,
    dir: PathBuf,
    _tempdir: Option<tempfile::TempDir>,
    pki: Pki,
    switch: Option<Proc>,
    switch_ns: PathBuf,
    hosts: Vec<Host>,
    spawner: Spawner,
    keep: bool,
    interrupt: Option<Arc<AtomicBool>>,
    /// This harness among those of this process (its cgroup subtrees' names).
    serial: u32,
    /// Links carried in user space (`impair.rs`), by host, where the kernel has no netem.
    impaired: Mutex<HashMap<usize, impair::Impaired>>,
}

/// Why this machine cannot run emulated hosts, if it cannot.
pub fn check_support() -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "emulated hosts need root: each is a set of namespaces with its own mounts and \
             network, and systemd as its PID 1 (run as root, or use a local cluster without --hosts)"
        );
    }
    for tool in ["unshare", "nsenter", "setpriv", "ip", "tc"] {
        if which(tool).is_none() {
            bail!("emulated hosts need `{tool}` (util-linux, iproute2), which is not on PATH");
        }
    }
    if !Path::new(SYSTEMD).exists() {
        bail!("emulated hosts need systemd ({SYSTEMD} is missing): apt-get install systemd");
    }
    // The namespaces themselves: a throwaway process that makes them all.
    let probe = Command::new("unshare")
        .args([
            "--pid", "--fork", "--mount", "--uts", "--net", "--ipc", "--cgroup", "true",
        ])
        .stdin(Stdio::null())
        .output()
        .context("cannot run unshare")?;
    if !probe.status.success() {
        bail!(
            "this machine does not allow new namespaces here (unshare: {}): emulated hosts \
             cannot run",
            String::from_utf8_lossy(&probe.stderr).trim()
        );
    }
    Ok(())
}

const SYSTEMD: &str = "/lib/systemd/systemd";

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.exists())
}

impl EmulatedHosts {
    /// Boot the hosts of a `mesh` cluster and wait until every node is up.
    pub fn start(mesh: (u32, u32), opts: HostsOptions) -> Result<EmulatedHosts> {
        check_support()?;
        let layout = Layout::new(mesh, opts.hosts, 77).map_err(|e| anyhow!(e))?;
        cgroups::remove_stale();
        let (dir, tempdir) = match &opts.dir {
            Some(d) => {
                std::fs::create_dir_all(d)?;
                (d.clone(), None)
            }
            None => {
                let t = tempfile::Builder::new().prefix("gang-hosts.").tempdir()?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let bin_dir = match &opts.bin_dir {
            Some(b) => b.clone(),
            None => crate::default_bin_dir()?,
        };
        for b in ["gang-master", "gang-agent"] {
            if !bin_dir.join(b).exists() {
                bail!(
                    "{} not found: build it (cargo build -p gang-master -p gang-agent) or give its directory",
                    bin_dir.join(b).display()
                );
            }
        }
        let pki = Pki::init(
            dir.join("pki"),
            mesh.0,
            mesh.1,
            gang_auth::pki::DEFAULT_DAYS,
        )?;
        let spawner = Spawner::new()?;
        let mut cmd = Command::new("unshare");
        cmd.args(["--net", "--", "sleep", "infinity"])
            .stdin(Stdio::null())
            .process_group(0);
        use std::os::unix::process::CommandExt;
        let switch = spawner
            .spawn(cmd)
            .context("cannot start the network switch")?;
        let switch_ns: PathBuf = format!("/proc/{}/ns/net", switch.id()).into();
        let mut me = EmulatedHosts {
            layout: layout.clone(),
            dir: dir.clone(),
            _tempdir: tempdir,
            pki,
            switch: Some(switch),
            switch_ns,
            hosts: Vec::new(),
            spawner,
            keep: opts.keep,
            interrupt: opts.interrupt.clone(),
            serial: {
                static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                NEXT.fetch_add(1, Ordering::SeqCst)
            },
            impaired: Mutex::new(HashMap::new()),
        };
        let ours = netns_of(std::process::id());
        let pid = me.switch.as_ref().map(|s| s.id()).unwrap_or(0);
        wait_for(
            &me.interrupt,
            Duration::from_secs(10),
            "the switch's namespace",
            || Ok(netns_of(pid).is_some_and(|n| Some(&n) != ours.as_ref())),
        )?;
        network::make_bridge(&me.switch_ns)?;
        for plan in layout.hosts.clone() {
            let skew = opts
                .clocks
                .as_ref()
                .map(|c| c.get(plan.index as usize).copied().unwrap_or_default());
            let host = me
                .boot(&plan, &bin_dir, &opts.image, skew)
                .with_context(|| format!("host {} did not start", plan.name))?;
            me.hosts.push(host);
        }
        for i in 0..me.hosts.len() {
            me.wait_booted(i, opts.boot_timeout)?;
        }
        me.wait_nodes_up(opts.boot_timeout)?;
        Ok(me)
    }

    /// Wait until the master lists every node up.
    pub fn wait_nodes_up(&self, limit: Duration) -> Result<()> {
        let (w, h) = self.layout.mesh;
        let url = self.master_addr();
        let mut last = String::new();
        wait_for(&self.interrupt, limit, "every node up", || {
            match block_on(list_nodes(url.clone())) {
                Ok(nodes) => {
                    let up = nodes
                        .iter()
                        .filter(|n| n.state == gang_proto::v1::NodeState::Up as i32)
                        .count();
                    last = format!("{up} of {} nodes up", w * h);
                    Ok(up as u32 == w * h)
                }
                Err(e) => {
                    last = e.to_string();
                    Ok(false)
                }
            }
        })
        .with_context(|| format!("last: {last}"))
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn pki(&self) -> &Pki {
        &self.pki
    }

    /// Host `i`'s name (0: the master's).
    pub fn name(&self, i: usize) -> &str {
        &self.hosts[i].plan.name
    }

    /// The host's PID 1 as this machine numbers it.
    pub fn init_pid(&self, i: usize) -> u32 {
        self.hosts[i].init
    }

    /// The master's socket, as clients on this machine reach it.
    pub fn master_addr(&self) -> String {
        format!(
            "unix:/proc/{}/root/run/gang/master.sock",
            self.hosts[0].init
        )
    }

    /// Run a command on host `i` (in all its namespaces, as root).
    pub fn exec(&self, i: usize, args: &[&str]) -> Result<Output> {
        Command::new("nsenter")
            .arg("-t")
            .arg(self.hosts[i].init.to_string())
            .arg("-a")
            .arg("--")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot run `{}` on {}", args.join(" "), self.name(i)))
    }

    /// `systemctl ARGS` on host `i`: its output, an error if it failed.
    pub fn systemctl(&self, i: usize, args: &[&str]) -> Result<String> {
        let mut all = vec!["systemctl"];
        all.extend_from_slice(args);
        let out = self.exec(i, &all)?;
        if !out.status.success() {
            bail!(
                "systemctl {} on {}: {}{}",
                args.join(" "),
                self.name(i),
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A unit's property (`systemctl show -P`).
    pub fn unit_property(&self, i: usize, unit: &str, property: &str) -> Result<String> {
        Ok(self
            .systemctl(i, &["show", "-P", property, unit])?
            .trim()
            .to_string())
    }

    /// The journal of `unit` on host `i`.
    pub fn journal(&self, i: usize, unit: &str) -> String {
        self.exec(
            i,
            &[
                "journalctl",
                "--no-pager",
                "-o",
                "short-precise",
                "-u",
                unit,
            ],
        )
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
    }

    /// Cut host `i`'s link to the others, or restore it.
    pub fn set_link(&self, i: usize, up: bool) -> Result<()> {
        network::set_link(&self.switch_ns, self.hosts[i].plan.index, up)
    }

    /// `tc netem` parameters on host `i`'s link, both ways (e.g. "delay 50ms loss 1%");
    /// `None` removes them. Where the kernel has no netem qdisc, delay and loss are
    /// emulated in this process instead (`impair.rs`), with the same meaning: the delay
    /// and the loss apply to each direction.
    pub fn set_netem(&self, i: usize, netem: Option<&str>) -> Result<()> {
        let h = &self.hosts[i];
        let mut impaired = self.impaired.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(link) = impaired.remove(&i) {
            match netem {
                Some(spec) => {
                    link.set(impair::Impairment::parse(spec)?);
                    impaired.insert(i, link);
                }
                None => link.stop()?,
            }
            return Ok(());
        }
        match network::set_netem(&self.switch_ns, h.plan.index, netem) {
            Err(e) if netem.is_some() && e.to_string().contains("qdisc kind is unknown") => {
                let imp = impair::Impairment::parse(netem.unwrap_or_default())
                    .context("this kernel has no netem qdisc")?;
                let link = impair::Impaired::start(&self.switch_ns, h.plan.index, imp)
                    .context("this kernel has no netem qdisc, and its emulation failed")?;
                impaired.insert(i, link);
                return Ok(());
            }
            r => r?,
        }
        let ns: PathBuf = format!("/proc/{}/ns/net", h.outer.id()).into();
        network::set_netem_dev(&ns, "eth0", netem)
    }

    /// Frames host `i`'s link carried and dropped, where this process emulates its delay
    /// and loss (a kernel without netem); `None` where tc netem does it, or nothing.
    pub fn link_counts(&self, i: usize) -> Option<LinkCounts> {
        self.impaired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&i)
            .map(|l| l.counts())
    }

    /// Every process of every host (none after shutdown).
    pub fn pids(&self) -> Vec<u32> {
        self.hosts.iter().flat_map(|h| h.cgroups.pids()).collect()
    }

    /// Power every host off (its units stop as systemd stops them), then make sure
    /// nothing is left.
    pub fn shutdown(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let mut errors = Vec::new();
        // The links carried here stop; their ports go with the switch.
        self.impaired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        // Agents first, then the master: their last reports reach it.
        for h in self.hosts.iter().rev() {
            // SIGRTMIN+4: systemd's poweroff, which in a container ends PID 1 (nix's
            // Signal has no real-time signals).
            // SAFETY: kill(2) with a pid and a signal number; no memory is involved.
            unsafe { libc::kill(h.init as i32, libc::SIGRTMIN() + 4) };
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for h in &mut self.hosts {
            if let Ok(None) = h.outer.wait_until(deadline) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(h.init as i32),
                    Signal::SIGKILL,
                );
                let _ = h.outer.kill();
                errors.push(format!(
                    "{} did not power off within 30 s: killed",
                    h.plan.name
                ));
            }
        }
        for h in &self.hosts {
            // The cgroups empty as the kernel tears the processes down.
            let limit = Instant::now() + Duration::from_secs(10);
            while !h.cgroups.pids().is_empty() && Instant::now() < limit {
                std::thread::sleep(POLL);
            }
            if let Err(e) = h.cgroups.remove() {
                errors.push(e);
            }
        }
        self.hosts.clear();
        if let Some(mut s) = self.switch.take() {
            let _ = s.kill();
        }
        if self.keep
            && let Some(t) = self._tempdir.take()
        {
            let _ = t.keep();
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(anyhow!(errors.join("; ")))
        }
    }

    /// Set host `i`'s wall clock now (a jump to `skew.offset_ns`, drifting from there).
    /// Only where the hosts were started with [`HostsOptions::clocks`].
    pub fn set_clock(&self, i: usize, skew: ClockSkew) -> Result<()> {
        let dir = &self.hosts[i].dir;
        if !dir.join("clock").exists() {
            bail!("the hosts run on the machine's clock: start them with clocks to move one");
        }
        clock::set(dir, skew)
    }

    /// An error if a host's systemd has ended or the master's unit is not active.
    pub fn check_alive(&mut self) -> Result<()> {
        for h in &mut self.hosts {
            if let Some(status) = h.outer.poll()? {
                bail!("host {} is down ({status})", h.plan.name);
            }
        }
        let state = self.unit_property(0, "gang-master.service", "ActiveState")?;
        if state != "active" && state != "activating" && state != "reloading" {
            bail!("gang-master.service on host master is {state}");
        }
        Ok(())
    }

    /// The names of this harness's cgroup subtrees begin with this (`gang-host-PID-H-`),
    /// in every hierarchy under /sys/fs/cgroup.
    pub fn cgroup_prefix(&self) -> String {
        format!("gang-host-{}-{}-", std::process::id(), self.serial)
    }

    /// Where host `i`'s files and console log are on this machine.
    pub fn host_dir(&self, i: usize) -> &Path {
        &self.hosts[i].dir
    }
}

impl Drop for EmulatedHosts {
    fn drop(&mut self) {
        if !self.hosts.is_empty() || self.switch.is_some() {
            let _ = self.teardown();
        }
    }
}
