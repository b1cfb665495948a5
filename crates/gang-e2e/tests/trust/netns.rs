//! A network namespace joined to the host by a veth pair (iproute2), torn down on drop,
//! and a process run inside it.

use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `NAME`, holding one end of a veth pair (`host_if` on the host, `ns_if` inside) with a
/// /30 between them: the host at `host_ip`, the namespace at `ns_ip`.
pub struct Netns {
    pub name: String,
    pub host_if: String,
    pub ns_if: String,
    pub host_ip: Ipv4Addr,
    pub ns_ip: Ipv4Addr,
}

impl Netns {
    /// Names and addresses come from the pid, so that two test processes do not collide.
    pub fn create() -> Netns {
        let pid = std::process::id();
        let name = format!("gt{pid}");
        // 10.A.B.0/30 with A in 64..192, B in 0..256: away from the usual 10.0.x.x.
        let (a, b) = (64 + (pid % 128) as u8, ((pid / 128) % 256) as u8);
        let ns = Netns {
            host_if: format!("gt{pid}h"),
            ns_if: format!("gt{pid}n"),
            host_ip: Ipv4Addr::new(10, a, b, 1),
            ns_ip: Ipv4Addr::new(10, a, b, 2),
            name,
        };
        // Leftovers of a crashed run of the same pid would make every step below fail.
        let _ = ip(&["netns", "del", &ns.name]);
        let _ = ip(&["link", "del", &ns.host_if]);
        // From here on the guard exists: a failing step tears down what was made.
        let host_cidr = format!("{}/30", ns.host_ip);
        let ns_cidr = format!("{}/30", ns.ns_ip);
        let steps: Vec<Vec<&str>> = vec![
            vec!["netns", "add", &ns.name],
            vec![
                "link",
                "add",
                &ns.host_if,
                "type",
                "veth",
                "peer",
                "name",
                &ns.ns_if,
            ],
            vec!["link", "set", &ns.ns_if, "netns", &ns.name],
            vec!["addr", "add", &host_cidr, "dev", &ns.host_if],
            vec!["link", "set", &ns.host_if, "up"],
            vec!["-n", &ns.name, "addr", "add", &ns_cidr, "dev", &ns.ns_if],
            vec!["-n", &ns.name, "link", "set", &ns.ns_if, "up"],
            vec!["-n", &ns.name, "link", "set", "lo", "up"],
        ];
        for step in steps {
            ip(&step).unwrap_or_else(|e| panic!("making the network namespace: {e}"));
        }
        ns
    }

    /// The host end of the cable: down, nothing crosses (no error reaches either side:
    /// packets are dropped, as on a cut link); up, it carries again.
    pub fn set_link(&self, up: bool) {
        ip(&["link", "set", &self.host_if, if up { "up" } else { "down" }])
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// The namespace's inode, to tell which processes run inside it.
    pub fn inode(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/run/netns/{}", self.name))
            .expect("the namespace is mounted")
            .ino()
    }

    /// `bin ARGS` inside the namespace, in a process group of its own, its output to
    /// `log`; stopped (SIGTERM, then SIGKILL) on drop.
    pub fn spawn(&self, bin: &Path, args: &[String], log: &Path) -> InNetns {
        let out = std::fs::File::create(log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name])
            .arg(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        InNetns {
            child: cmd.spawn().expect("ip netns exec runs"),
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and with it the host's.
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!("{e}");
        }
        let _ = ip(&["link", "del", &self.host_if]);
    }
}

/// A process started in a namespace (`ip netns exec` execs it: the pid is the program's).
pub struct InNetns {
    child: Child,
}

impl InNetns {
    /// Still running?
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for InNetns {
    fn drop(&mut self) {
        if !self.running() {
            return;
        }
        let group = Pid::from_raw(self.child.id() as i32);
        let _ = killpg(group, Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if !self.running() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = killpg(group, Signal::SIGKILL);
        let _ = self.child.wait();
    }
}
