//! Helpers of the end-to-end tests that run the real `prun` and `gangctl` against a real
//! local cluster (`gang-local`). Each test binary uses some of them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gang_local::{LocalCluster, LocalClusterOptions};
use serde_json::Value;

pub const PRUN: &str = env!("CARGO_BIN_EXE_prun");
pub const GANGCTL: &str = env!("CARGO_BIN_EXE_gangctl");
/// Generous: the test machine is shared and loaded.
pub const T: Duration = Duration::from_secs(60);

pub fn bin_dir() -> PathBuf {
    Path::new(GANGCTL).parent().unwrap().to_path_buf()
}

pub fn built() -> bool {
    let dir = bin_dir();
    let ok = dir.join("gang-master").is_file() && dir.join("gang-agent").is_file();
    if !ok {
        eprintln!(
            "skipped: gang-master / gang-agent are not built in {} (cargo build -p gang-master -p gang-agent)",
            dir.display()
        );
    }
    ok
}

pub fn cluster(mesh: (u32, u32), mpl: u32) -> Option<LocalCluster> {
    if !built() {
        return None;
    }
    let opts = LocalClusterOptions {
        bin_dir: Some(bin_dir()),
        mpl: Some(mpl),
        nodes_up_timeout: T,
        ..Default::default()
    };
    Some(LocalCluster::start(mesh, opts).expect("start a local cluster"))
}

pub fn cmd(bin: &str, c: &LocalCluster) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env("GANG_MASTER", c.master_addr())
        .env_remove("GANG_OUTPUT")
        .stdin(Stdio::null());
    cmd
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn run(bin: &str, c: &LocalCluster, args: &[&str]) -> Output {
    cmd(bin, c).args(args).output().unwrap()
}

pub fn json(c: &LocalCluster, args: &[&str]) -> Value {
    let o = cmd(GANGCTL, c)
        .args(["--output", "json"])
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "gangctl {args:?}: {}", text(&o.stderr));
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("gangctl {args:?}: {e}: {}", text(&o.stdout)))
}

/// `prun --detach ARGS`: the job id.
pub fn detach(c: &LocalCluster, args: &[&str]) -> u64 {
    let o = cmd(PRUN, c).arg("--detach").args(args).output().unwrap();
    assert!(o.status.success(), "prun {args:?}: {}", text(&o.stderr));
    text(&o.stdout)
        .trim()
        .parse()
        .expect("prun --detach prints the id")
}

pub fn job(c: &LocalCluster, id: u64) -> Value {
    json(c, &["job", &id.to_string()])
}

/// Wait until `cond` holds for the job, within [`T`].
pub fn wait_job(c: &LocalCluster, id: u64, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + T;
    loop {
        let j = job(c, id);
        if cond(&j) {
            return j;
        }
        assert!(
            Instant::now() < deadline,
            "job {id}: not {what} within {T:?}: {j}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect()
}

/// `cmd` with prun first in PATH, as a batch script on its node finds it.
pub fn cmd_p(bin: &str, c: &LocalCluster) -> std::process::Command {
    let mut m = cmd(bin, c);
    let path = std::env::var("PATH").unwrap_or_default();
    m.env("PATH", format!("{}:{path}", bin_dir().display()));
    m
}

/// `gangctl ARGS`: its stdout, asserting it succeeded.
pub fn ok(c: &LocalCluster, args: &[&str]) -> String {
    let o = run(GANGCTL, c, args);
    assert!(
        o.status.success(),
        "gangctl {args:?}: exit {:?}: {}",
        o.status.code(),
        text(&o.stderr)
    );
    text(&o.stdout)
}

/// `gangctl ARGS` refused: its exit code and stderr.
pub fn refused(c: &LocalCluster, args: &[&str]) -> (Option<i32>, String) {
    let o = run(GANGCTL, c, args);
    assert!(
        !o.status.success(),
        "gangctl {args:?} succeeded: {}",
        text(&o.stdout)
    );
    (o.status.code(), text(&o.stderr))
}

/// The rows of a table, each its cells (split on blanks), without the header.
pub fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// The first cell of each row.
pub fn first_cells(table: &str) -> Vec<String> {
    rows(table).into_iter().map(|r| r[0].clone()).collect()
}

/// Run a command that prints a job id (`--parsable`, `prun -d`), asserting it succeeded:
/// the id.
pub fn submitted(cmd: &mut Command) -> u64 {
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{cmd:?}: exit {:?}: {}",
        o.status.code(),
        text(&o.stderr)
    );
    text(&o.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}: {}", text(&o.stdout)))
}
