//! What is installed on each emulated host, as `deploy/README.md` tells an admin: the
//! binaries in `/usr/local/bin`, the example configs in `/etc/gang` with the keys an
//! admin edits (mesh, addresses, coordinates, certificates), the units in
//! `/etc/systemd/system`, enabled, and on the master's host the `gang` user from
//! `gang.sysusers` and the master's key readable by that group.
//!
//! The files are written under the host's directory on this machine (`files/`) and
//! copied into place by the host's init script (`init.sh`), which runs as the first
//! process of the host's namespaces: it makes the host's own mounts (a writable overlay
//! on `/etc`, fresh tmpfs on `/run`, `/tmp`, `/var/*`, `/dev/shm`, `/usr/local/bin`,
//! its cgroup and sysfs views), waits for the harness to plug its network in, and execs
//! systemd as PID 1.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use gang_auth::PeerName;
use gang_auth::pki::Pki;

use super::layout::{HostPlan, Layout, MASTER_AGENT_PORT, MASTER_CLIENT_PORT, MASTER_METRICS_PORT};

const MASTER_UNIT: &str = include_str!("../../../../deploy/gang-master.service");
const AGENT_UNIT: &str = include_str!("../../../../deploy/gang-agent.service");
const MASTER_TOML: &str = include_str!("../../../../deploy/master.toml");
const AGENT_TOML: &str = include_str!("../../../../deploy/agent.toml");
const SYSUSERS: &str = include_str!("../../../../deploy/gang.sysusers");

/// The binaries each host gets.
pub const BINARIES: &[&str] = &["gang-master", "gang-agent", "gangctl", "prun"];

/// What the harness sets on every host beyond the layout.
#[derive(Debug, Clone, Default)]
pub struct ImageOptions {
    /// Let jobs run as root (the master's `allow_root_jobs`, the agents' `allow_root`).
    pub allow_root_jobs: bool,
    /// Master keys set over deploy/master.toml's (TOML values, e.g. `heartbeat_ms = 100`).
    pub master_keys: Vec<(String, toml::Value)>,
}

/// Edit an example config: parse it as the daemon would, set `keys`.
fn edit(example: &str, keys: Vec<(String, toml::Value)>) -> Result<String> {
    let mut table: toml::Table = example.parse().context("parse an example config")?;
    for (k, v) in keys {
        match k.split_once('.') {
            Some((section, key)) => {
                let sub = table
                    .entry(section.to_string())
                    .or_insert_with(|| toml::Value::Table(Default::default()));
                if let toml::Value::Table(t) = sub {
                    t.insert(key.to_string(), v);
                }
            }
            None => {
                table.insert(k, v);
            }
        }
    }
    Ok(toml::to_string(&table)?)
}

fn s(v: &str) -> toml::Value {
    toml::Value::String(v.to_string())
}

/// The master's `/etc/gang/master.toml`.
pub fn master_config(layout: &Layout, opts: &ImageOptions) -> Result<String> {
    let (w, h) = layout.mesh;
    let mut keys = vec![
        ("mesh".to_string(), s(&format!("{w}x{h}"))),
        ("socket".to_string(), s("/run/gang/master.sock")),
        (
            "listen".to_string(),
            s(&format!("0.0.0.0:{MASTER_CLIENT_PORT}")),
        ),
        (
            "agent_listen".to_string(),
            s(&format!("0.0.0.0:{MASTER_AGENT_PORT}")),
        ),
        (
            "metrics_listen".to_string(),
            s(&format!("0.0.0.0:{MASTER_METRICS_PORT}")),
        ),
        ("state".to_string(), s("/var/lib/gang/master.db")),
        ("admins".to_string(), toml::Value::Array(vec![])),
        (
            "allow_root_jobs".to_string(),
            toml::Value::Boolean(opts.allow_root_jobs),
        ),
        ("tls.ca".to_string(), s("/etc/gang/tls/ca.pem")),
        ("tls.cert".to_string(), s("/etc/gang/tls/master.pem")),
        ("tls.key".to_string(), s("/etc/gang/tls/master-key.pem")),
    ];
    keys.extend(opts.master_keys.iter().cloned());
    edit(MASTER_TOML, keys)
}

/// The agent's config for `node` listening on `port`.
pub fn agent_config(node: (u32, u32), port: u16, opts: &ImageOptions) -> Result<String> {
    let (x, y) = node;
    edit(
        AGENT_TOML,
        vec![
            (
                "master".to_string(),
                s(&format!("https://master:{MASTER_AGENT_PORT}")),
            ),
            ("x".to_string(), toml::Value::Integer(x.into())),
            ("y".to_string(), toml::Value::Integer(y.into())),
            ("listen".to_string(), s(&format!("0.0.0.0:{port}"))),
            ("tls_ca".to_string(), s("/etc/gang/tls/ca.pem")),
            (
                "tls_cert".to_string(),
                s(&format!("/etc/gang/tls/node-{x}-{y}.pem")),
            ),
            (
                "tls_key".to_string(),
                s(&format!("/etc/gang/tls/node-{x}-{y}-key.pem")),
            ),
            (
                "allow_root".to_string(),
                toml::Value::Boolean(opts.allow_root_jobs),
            ),
        ],
    )
}

/// The agent unit of a node: `gang-agent.service` where a host has one node, else an
/// instance of a template made from the same file (`gang-agent@X-Y.service`, its config
/// `/etc/gang/agent-X-Y.toml`).
pub fn agent_unit(host: &HostPlan, node: (u32, u32)) -> String {
    if host.nodes.len() == 1 {
        "gang-agent.service".to_string()
    } else {
        format!("gang-agent@{}-{}.service", node.0, node.1)
    }
}

fn write(path: &Path, text: &str, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("write {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

fn copy(from: &Path, to: &Path, mode: u32) -> Result<()> {
    let text = std::fs::read_to_string(from).with_context(|| format!("read {}", from.display()))?;
    write(to, &text, mode)
}

/// Write host `host`'s files under `dir/files` and its init script `dir/init.sh`.
pub fn write_host(
    dir: &Path,
    layout: &Layout,
    host: &HostPlan,
    pki: &Pki,
    bin_dir: &Path,
    opts: &ImageOptions,
    preload: Option<&str>,
) -> Result<PathBuf> {
    let files = dir.join("files");
    let etc = files.join("etc");
    if let Some(lines) = preload {
        write(&etc.join("ld.so.preload"), lines, 0o644)?;
    }
    std::fs::create_dir_all(dir.join("bin-src"))?;
    write(&etc.join("hostname"), &format!("{}\n", host.name), 0o644)?;
    write(&etc.join("hosts"), &layout.etc_hosts(host), 0o644)?;
    write(
        &etc.join("machine-id"),
        &format!("{}\n", machine_id()),
        0o444,
    )?;
    let tls = etc.join("gang/tls");
    copy(&pki.ca(), &tls.join("ca.pem"), 0o644)?;
    let units = etc.join("systemd/system");
    let wants = units.join("multi-user.target.wants");
    std::fs::create_dir_all(&wants)?;
    let mut enabled = Vec::new();
    if host.index == 0 {
        let m = pki.files(&PeerName::Master);
        copy(&m.cert, &tls.join("master.pem"), 0o644)?;
        // Group `gang` is made at boot by the init script (sysusers), which then gives it
        // the key: mode 0640 root:gang, as the README says.
        copy(&m.key, &tls.join("master-key.pem"), 0o600)?;
        write(
            &etc.join("gang/master.toml"),
            &master_config(layout, opts)?,
            0o644,
        )?;
        write(&units.join("gang-master.service"), MASTER_UNIT, 0o644)?;
        write(&etc.join("sysusers.d/gang.conf"), SYSUSERS, 0o644)?;
        enabled.push("gang-master.service".to_string());
    } else {
        let template = host.nodes.len() > 1;
        if template {
            write(&units.join("gang-agent@.service"), AGENT_UNIT, 0o644)?;
            write(
                &units.join("gang-agent@.service.d/instance.conf"),
                "# One agent per mesh node on this host: its own config.\n[Service]\nExecStart=\nExecStart=/usr/local/bin/gang-agent --config /etc/gang/agent-%i.toml\n",
                0o644,
            )?;
        } else {
            write(&units.join("gang-agent.service"), AGENT_UNIT, 0o644)?;
        }
        for &((x, y), port) in &host.nodes {
            let n = pki.files(&PeerName::Node { x, y });
            copy(&n.cert, &tls.join(format!("node-{x}-{y}.pem")), 0o644)?;
            copy(&n.key, &tls.join(format!("node-{x}-{y}-key.pem")), 0o600)?;
            let name = if template {
                format!("agent-{x}-{y}.toml")
            } else {
                "agent.toml".to_string()
            };
            write(
                &etc.join("gang").join(name),
                &agent_config((x, y), port, opts)?,
                0o644,
            )?;
            enabled.push(agent_unit(host, (x, y)));
        }
    }
    let script = init_script(dir, host, bin_dir, &enabled);
    let path = dir.join("init.sh");
    write(&path, &script, 0o755)?;
    Ok(path)
}

/// 32 hex digits, different for every host (what `systemd-machine-id-setup` makes).
fn machine_id() -> String {
    let mut bytes = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut bytes);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The host's first process: its mounts, its files, then systemd.
fn init_script(dir: &Path, host: &HostPlan, bin_dir: &Path, enabled: &[String]) -> String {
    let d = dir.display();
    let mut s = String::new();
    s.push_str(
        "#!/bin/sh\n# The emulated host's first process (gang-local hosts/image.rs).\nset -eu\n",
    );
    s.push_str(&format!("H={d}\nBIN={}\n", bin_dir.display()));
    s.push_str(
        &r#"# Nothing mounted here is seen outside, nothing outside after this is seen here.
mount --make-rprivate /
# The harness's files and the binaries, where the host's own mounts below cannot hide
# them (the harness's directory may be under /tmp, the binaries in /usr/local/bin).
mount --bind "$H" /mnt
mount --bind "$BIN" /mnt/bin-src
H=/mnt
mount -t proc proc /proc
mount -t sysfs sysfs /sys
CGROUPS
for m in /run /tmp /var/tmp /var/log /var/lib /var/spool /var/cache /usr/local/bin /dev/shm; do
    mount -t tmpfs -o mode=755 tmpfs "$m"
done
chmod 1777 /tmp /var/tmp /dev/shm
# A writable /etc of the host's own: the machine's files below, this host's changes on top.
mkdir -p "$H/rw"
mount -t tmpfs -o mode=755 tmpfs "$H/rw"
mkdir "$H/rw/upper" "$H/rw/work"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$H/rw/upper,workdir=$H/rw/work" /etc
# A clean host: none of the machine's own units are enabled here, and no login prompt on
# a console that is a log file.
rm -rf /etc/systemd/system/*
ln -s /dev/null /etc/systemd/system/console-getty.service
ln -s /dev/null /etc/systemd/system/getty.target
# Binary formats are the kernel's, shared by every host on this machine: registering them
# from each host races the others ("File exists") and changes the machine for everyone.
ln -s /dev/null /etc/systemd/system/systemd-binfmt.service
ln -s /dev/null /etc/systemd/system/proc-sys-fs-binfmt_misc.automount
ln -s /dev/null /etc/systemd/system/proc-sys-fs-binfmt_misc.mount
cp -a "$H/files/etc/." /etc/
"#
        .replace("CGROUPS\n", cgroup_mounts()),
    );
    for b in BINARIES {
        // Bound, not copied: four debug builds a host would fill memory.
        s.push_str(&format!(
            "if [ -e /mnt/bin-src/{b} ]; then touch /usr/local/bin/{b}; mount --bind -o ro /mnt/bin-src/{b} /usr/local/bin/{b}; fi\n"
        ));
    }
    for unit in enabled {
        s.push_str(&format!(
            "ln -s ../{template} /etc/systemd/system/multi-user.target.wants/{unit}\n",
            template = template_of(unit)
        ));
    }
    if host.index == 0 {
        s.push_str(
            "systemd-sysusers\nchgrp gang /etc/gang/tls/master-key.pem\nchmod 640 /etc/gang/tls/master-key.pem\n",
        );
    }
    s.push_str(&format!("hostname {}\n", host.name));
    s.push_str(
        r#"# The harness plugs the network in, then lets the host boot.
read -r _ < "$H/go"
exec env -i container=gang-host TERM=dumb /lib/systemd/systemd --system --unit=multi-user.target
"#,
    );
    s
}

/// The host's cgroup view, the machine's layout: this host's subtrees are the roots of
/// its cgroup namespace, and systemd mounts the v1 controllers itself.
fn cgroup_mounts() -> &'static str {
    if Path::new("/sys/fs/cgroup/cgroup.procs").exists() {
        "# The cgroup view: this host's subtree is the root of its cgroup namespace.\nmount -t cgroup2 cgroup2 /sys/fs/cgroup\n"
    } else {
        "# The cgroup view: this host's subtrees are the roots of its cgroup namespace.\nmount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup\nmkdir /sys/fs/cgroup/systemd /sys/fs/cgroup/unified\nmount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd\nmount -t cgroup2 cgroup2 /sys/fs/cgroup/unified\n"
    }
}

/// The unit file an enabled unit comes from (`gang-agent@0-1.service` from
/// `gang-agent@.service`).
fn template_of(unit: &str) -> String {
    match unit.split_once('@') {
        Some((name, _)) => format!("{name}@.service"),
        None => unit.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_are_the_examples_with_the_admins_edits() {
        let layout = Layout::new((2, 2), 4, 77).unwrap();
        let opts = ImageOptions {
            allow_root_jobs: true,
            master_keys: vec![("heartbeat_ms".into(), toml::Value::Integer(100))],
        };
        let m: toml::Table = master_config(&layout, &opts).unwrap().parse().unwrap();
        assert_eq!(m["mesh"].as_str(), Some("2x2"));
        assert_eq!(m["agent_listen"].as_str(), Some("0.0.0.0:7472"));
        assert_eq!(m["heartbeat_ms"].as_integer(), Some(100));
        assert_eq!(
            m["tls"]["key"].as_str(),
            Some("/etc/gang/tls/master-key.pem")
        );
        // Untouched keys keep the example's values.
        assert_eq!(m["quantum_ms"].as_integer(), Some(50));
        let a: toml::Table = agent_config((1, 0), 7473, &opts).unwrap().parse().unwrap();
        assert_eq!(a["master"].as_str(), Some("https://master:7472"));
        assert_eq!(a["listen"].as_str(), Some("0.0.0.0:7473"));
        assert_eq!(a["x"].as_integer(), Some(1));
        assert_eq!(a["tls_cert"].as_str(), Some("/etc/gang/tls/node-1-0.pem"));
    }

    #[test]
    fn several_nodes_on_a_host_run_as_instances_of_the_agent_unit() {
        let layout = Layout::new((4, 1), 2, 77).unwrap();
        let host = &layout.compute()[0];
        assert_eq!(agent_unit(host, (1, 0)), "gang-agent@1-0.service");
        assert_eq!(template_of("gang-agent@1-0.service"), "gang-agent@.service");
        let single = Layout::new((2, 1), 2, 77).unwrap();
        assert_eq!(
            agent_unit(&single.compute()[1], (1, 0)),
            "gang-agent.service"
        );
    }
}
