//! The emulated hosts' network: a bridge in a network namespace of its own (the
//! "switch"), and one veth pair a host, the host's end named `eth0` inside the host's
//! namespace. Nothing is made in the machine's own namespace: when the switch's holder
//! process and the hosts are gone, so is every link and address.
//!
//! Done with iproute2's `ip` and `tc` run through `nsenter` (the tools an admin would
//! use; `tc netem` is how a link is delayed or made to lose packets).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

pub const BRIDGE: &str = "gangbr0";

/// Run `args` (a program and its arguments) in the network namespace `ns`.
pub fn in_netns(ns: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("nsenter")
        .arg(format!("--net={}", ns.display()))
        .arg("--")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run nsenter for `{}`", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The switch's end of host `index`'s link.
pub fn switch_port(index: u32) -> String {
    format!("gv{index}")
}

/// Make the bridge in the switch namespace `ns`.
pub fn make_bridge(ns: &Path) -> Result<()> {
    in_netns(ns, &["ip", "link", "set", "lo", "up"])?;
    in_netns(ns, &["ip", "link", "add", BRIDGE, "type", "bridge"])?;
    in_netns(ns, &["ip", "link", "set", BRIDGE, "up"])?;
    Ok(())
}

/// Link host `index` (network namespace of process `host_pid`) to the bridge, and give
/// it `addr`/24 on its `eth0`.
pub fn plug(switch: &Path, index: u32, host_pid: u32, addr: Ipv4Addr) -> Result<()> {
    let port = switch_port(index);
    let pid = host_pid.to_string();
    in_netns(
        switch,
        &[
            "ip", "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &pid,
        ],
    )?;
    in_netns(
        switch,
        &["ip", "link", "set", &port, "master", BRIDGE, "up"],
    )?;
    let host: PathBuf = format!("/proc/{host_pid}/ns/net").into();
    in_netns(&host, &["ip", "link", "set", "lo", "up"])?;
    in_netns(
        &host,
        &["ip", "addr", "add", &format!("{addr}/24"), "dev", "eth0"],
    )?;
    in_netns(&host, &["ip", "link", "set", "eth0", "up"])?;
    Ok(())
}

/// Cut (`up` false) or restore host `index`'s link.
pub fn set_link(switch: &Path, index: u32, up: bool) -> Result<()> {
    let state = if up { "up" } else { "down" };
    in_netns(switch, &["ip", "link", "set", &switch_port(index), state])?;
    Ok(())
}

/// Delay and loss on the switch's end of host `index`'s link (traffic towards the host;
/// `None` removes them).
pub fn set_netem(switch: &Path, index: u32, netem: Option<&str>) -> Result<()> {
    set_netem_dev(switch, &switch_port(index), netem)
}

/// `tc netem` on device `dev` of namespace `ns` (`None` removes it).
pub fn set_netem_dev(ns: &Path, dev: &str, netem: Option<&str>) -> Result<()> {
    match netem {
        Some(spec) => {
            let mut args = vec!["tc", "qdisc", "replace", "dev", dev, "root", "netem"];
            args.extend(spec.split_whitespace());
            in_netns(ns, &args)?;
        }
        None => {
            let _ = in_netns(ns, &["tc", "qdisc", "del", "dev", dev, "root"]);
        }
    }
    Ok(())
}
