//! `prun` and `gangctl` against a real local cluster, when `gang-master` and `gang-agent`
//! are built next to them (`cargo test --workspace` builds them; `cargo test -p gang-cli`
//! alone does not, and then these tests say so and pass without running).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gang_local::{LocalCluster, LocalClusterOptions};
use nix::sys::signal::Signal;

const PRUN: &str = env!("CARGO_BIN_EXE_prun");
const GANGCTL: &str = env!("CARGO_BIN_EXE_gangctl");

fn bin_dir() -> PathBuf {
    Path::new(GANGCTL).parent().unwrap().to_path_buf()
}

fn cluster(mesh: (u32, u32)) -> Option<LocalCluster> {
    let dir = bin_dir();
    if !dir.join("gang-master").is_file() || !dir.join("gang-agent").is_file() {
        eprintln!(
            "skipped: gang-master / gang-agent are not built in {} (cargo build -p gang-master -p gang-agent)",
            dir.display()
        );
        return None;
    }
    let opts = LocalClusterOptions {
        bin_dir: Some(dir),
        ..Default::default()
    };
    Some(LocalCluster::start(mesh, opts).expect("start a local cluster"))
}

fn cmd(bin: &str, c: &LocalCluster) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env("GANG_MASTER", c.master_addr())
        .env_remove("GANG_OUTPUT")
        .stdin(Stdio::null());
    cmd
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn sorted_lines(b: &[u8]) -> Vec<String> {
    let mut v: Vec<String> = text(b).lines().map(String::from).collect();
    v.sort();
    v
}

fn gangctl_json(c: &LocalCluster, args: &[&str]) -> serde_json::Value {
    let o: Output = cmd(GANGCTL, c)
        .args(["--output", "json"])
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "gangctl {args:?}: {}", text(&o.stderr));
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("gangctl {args:?}: {e}: {}", text(&o.stdout)))
}

#[test]
fn jobs_run_on_a_local_cluster() {
    let Some(c) = cluster((2, 2)) else { return };

    // Every node up, as JSON.
    let nodes = gangctl_json(&c, &["nodes"]);
    assert_eq!(
        (nodes["mesh_w"].as_u64(), nodes["mesh_h"].as_u64()),
        (Some(2), Some(2))
    );
    let states: Vec<&str> = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["up"; 4]);

    // --label, partial lines, both streams.
    let o = cmd(PRUN, &c)
        .args([
            "-n",
            "4",
            "--label",
            "--",
            "sh",
            "-c",
            "echo r$GANG_RANK; echo e >&2; printf tail",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(
        sorted_lines(&o.stdout),
        [
            "0: r0", "0: tail", "1: r1", "1: tail", "2: r2", "2: tail", "3: r3", "3: tail"
        ]
    );
    assert_eq!(sorted_lines(&o.stderr), ["0: e", "1: e", "2: e", "3: e"]);

    // Exit codes.
    let o = cmd(PRUN, &c)
        .args(["-n", "2x1", "--", "sh", "-c", "exit 7"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(7), "{}", text(&o.stderr));
    let o = cmd(PRUN, &c)
        .args(["-n", "1", "--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).starts_with("prun: job "),
        "{}",
        text(&o.stderr)
    );
    assert!(text(&o.stderr).contains(" failed: "), "{}", text(&o.stderr));
    let o = cmd(PRUN, &c)
        .args(["-n", "5x5", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).starts_with("prun: "), "{}", text(&o.stderr));

    // stdin reaches rank 0.
    let mut child = cmd(PRUN, &c)
        .args(["-n", "1", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello\nworld\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(text(&o.stdout), "hello\nworld\n");

    // --detach, --gang, gangctl job, cancel.
    let o = cmd(PRUN, &c)
        .args([
            "-n", "2", "--detach", "--name", "sleeper", "--gang", "priority", "--", "sleep", "30",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let id: u64 = text(&o.stdout)
        .trim()
        .parse()
        .expect("prun --detach prints the id");
    let job = gangctl_json(&c, &["job", &id.to_string()]);
    assert_eq!(job["name"], "sleeper");
    assert_eq!(job["argv"], serde_json::json!(["sleep", "30"]));
    assert_eq!(job["gang"], "priority", "{job}");
    assert!(job["run_ns"].is_i64(), "{job}");
    let o = cmd(GANGCTL, &c)
        .args(["cancel", &id.to_string()])
        .output()
        .unwrap();
    // Queued, it ends at once; placed, the master holds it running until its ranks stop.
    let said = text(&o.stdout);
    assert!(
        said == format!("cancelled {id}\n")
            || said == format!("cancelling {id}: its ranks are being stopped\n"),
        "{said}{}",
        text(&o.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let job = gangctl_json(&c, &["job", &id.to_string()]);
        if job["state"] == "cancelled" {
            break;
        }
        assert!(Instant::now() < deadline, "job {id} not cancelled: {job}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let all = gangctl_json(&c, &["jobs", "--all"]);
    assert_eq!(all.as_array().unwrap().len(), 5, "{all}");
    let matrix = gangctl_json(&c, &["slices"]);
    assert_eq!(matrix["mesh_w"], 2);
    assert!(matrix["table_version"].is_u64(), "{matrix}");
    assert!(matrix["row_slices"].is_array(), "{matrix}");
    let stats = gangctl_json(&c, &["stats"]);
    assert!(stats["skew"]["p99_ns"].is_i64(), "{stats}");
    assert!(stats["quantum_ns"].as_i64().unwrap() > 0, "{stats}");
    let nodes = gangctl_json(&c, &["nodes"]);
    assert!(nodes["nodes"][0]["clock_from_host"].is_boolean(), "{nodes}");

    c.shutdown().expect("clean shutdown");
}

/// The master dies while prun is attached: prun reattaches and writes every line once.
#[test]
fn prun_survives_a_master_restart() {
    let Some(mut c) = cluster((1, 1)) else { return };
    let mut child = cmd(PRUN, &c)
        .args(["-n", "1", "--", "sh", "-c", "echo one; sleep 2; echo two"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert_eq!(first, "one\n");

    c.stop_master(Signal::SIGKILL).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    c.start_master().unwrap();

    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(rest, "two\n", "stderr: {err}");
    assert_eq!(status.code(), Some(0), "stderr: {err}");
    assert!(err.contains("reattaching to job"), "{err}");
    c.shutdown().expect("clean shutdown");
}
