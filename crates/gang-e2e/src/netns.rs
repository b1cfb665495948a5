//! A host of its own network, for a master that must be cut off from etcd: a network
//! namespace held by a `sleep` process (gone with it, and with the test: the holder dies
//! with its parent), joined to this machine's by one veth pair on a /30 of the
//! benchmarking range (198.18.0.0/15, RFC 2544: no real network uses it). Cutting the
//! link takes it down: packets are lost, connections hang, as when a host's switch port
//! dies; nothing is refused.

use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};

pub struct NetHost {
    holder: Child,
    /// This machine's end of the link.
    outside: String,
    /// This machine's address on the link, and the namespace's.
    pub here: Ipv4Addr,
    pub there: Ipv4Addr,
}

/// `program args...` run to its end; an error names it and says what it printed.
fn run(program: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {program}"))?;
    if !out.status.success() {
        bail!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn ip(args: &[&str]) -> Result<()> {
    run("ip", args)
}

impl NetHost {
    /// A namespace linked to this machine's (root only).
    pub fn new() -> Result<NetHost> {
        let mut cmd = Command::new("unshare");
        cmd.args(["--net", "--", "sleep", "infinity"])
            .stdin(Stdio::null());
        // SAFETY: only async-signal-safe prctl between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        let holder = cmd.spawn().context("cannot run unshare --net")?;
        let pid = holder.id();
        // A /30 of its own per test process: concurrent tests do not meet.
        let base = u32::from(Ipv4Addr::new(198, 18, 0, 0)) + 4 * (std::process::id() % 32768);
        let mut host = NetHost {
            holder,
            outside: format!("gcut{}", std::process::id()),
            here: Ipv4Addr::from(base + 1),
            there: Ipv4Addr::from(base + 2),
        };
        // The namespace exists once the holder has unshared: until then /proc/PID/ns/net
        // is still this machine's.
        let mine = std::fs::read_link("/proc/self/ns/net")?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::read_link(format!("/proc/{pid}/ns/net"))? == mine {
            if std::time::Instant::now() > deadline {
                bail!("unshare --net made no namespace within 10 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        host.link(pid)?;
        Ok(host)
    }

    fn link(&mut self, pid: u32) -> Result<()> {
        let pid_s = pid.to_string();
        ip(&[
            "link",
            "add",
            &self.outside,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &pid_s,
        ])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/30", self.here),
            "dev",
            &self.outside,
        ])?;
        ip(&["link", "set", &self.outside, "up"])?;
        let ns = format!("/proc/{pid}/ns/net");
        for args in [
            vec!["ip", "link", "set", "lo", "up"],
            vec![
                "ip",
                "addr",
                "add",
                &format!("{}/30", self.there),
                "dev",
                "eth0",
            ],
            vec!["ip", "link", "set", "eth0", "up"],
        ] {
            let net = format!("--net={ns}");
            let mut all = vec![net.as_str(), "--"];
            all.extend(args.iter().copied());
            run("nsenter", &all)?;
        }
        Ok(())
    }

    /// The namespace, for a process to join (see [`NetHost::run_inside`]).
    pub fn ns(&self) -> Result<OwnedFd> {
        Ok(std::fs::File::open(format!("/proc/{}/ns/net", self.holder.id()))?.into())
    }

    /// Make `cmd` start inside the namespace.
    pub fn run_inside(&self, cmd: &mut Command) -> Result<()> {
        let ns = self.ns()?;
        // SAFETY: setns is async-signal-safe; the child has one thread after fork.
        unsafe {
            cmd.pre_exec(move || {
                nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(std::io::Error::from)
            });
        }
        Ok(())
    }

    /// Take the link down (`false`) or up again.
    pub fn set_link(&self, up: bool) -> Result<()> {
        ip(&["link", "set", &self.outside, if up { "up" } else { "down" }])
    }
}

impl Drop for NetHost {
    fn drop(&mut self) {
        // With the namespace goes its end of the link, and with it this one.
        let _ = self.holder.kill();
        let _ = self.holder.wait();
        let _ = ip(&["link", "del", &self.outside]);
    }
}
