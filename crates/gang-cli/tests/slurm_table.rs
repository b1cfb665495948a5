//! The user guide's "From Slurm" table (docs/user-guide.md), run: every command of its
//! right-hand column against a real local cluster, with job 12 a real job there, must
//! succeed. A row added to the table is tested with no change here. `12.N` is step N of a
//! real batch job (ended, with steps 12.0 and 12.1), `12_N` and `12_[..]` tasks of a real
//! array (`--array 1-4%2`, held, made for the row).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;

/// The gang commands of the table, in order.
fn table_commands() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let guide = std::fs::read_to_string(root.join("docs/user-guide.md")).unwrap();
    let start = guide
        .find("<!-- slurm-table -->")
        .expect("the table's start marker");
    let end = guide
        .find("<!-- /slurm-table -->")
        .expect("the table's end marker");
    guide[start..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|row| {
            let gang = row.split('|').nth(2).expect("two columns");
            let cmd = gang.split('`').nth(1).expect("a command in backticks");
            cmd.to_string()
        })
        .collect()
}

/// The real jobs a row's `12` stands for.
#[derive(Clone, Copy)]
struct Ids {
    job: u64,
    allocation: u64,
    array: u64,
}

/// `cmd` with job 12 (alone, or as in `afterok:12`) replaced by `ids.job`, the allocation
/// of `12.N` by `ids.allocation`, the array of `12_N` and `12_[...]` by `ids.array`.
fn with_job(cmd: &str, ids: Ids) -> String {
    cmd.split(' ')
        .map(|w| match w {
            "12" => ids.job.to_string(),
            w if w.ends_with(":12") => format!("{}:{}", &w[..w.len() - 3], ids.job),
            w if w.starts_with("12.") => format!("{}{}", ids.allocation, &w[2..]),
            w if w.starts_with("12_") => format!("{}{}", ids.array, &w[2..]),
            w => w.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A batch job of two steps, waited to its end: what `12.0` and `12.1` name.
fn allocation_with_steps(c: &gang_local::LocalCluster, path: &str, dir: &Path) -> u64 {
    let id = submitted(cmd(GANGCTL, c).current_dir(dir).env("PATH", path).args([
        "submit",
        "-N",
        "1",
        "--parsable",
        "--wrap",
        "prun true; prun true",
    ]));
    wait_job(c, id, "completed", |j| j["state"] == "completed");
    id
}

#[test]
fn every_gang_command_of_the_slurm_table_works() {
    let cmds = table_commands();
    assert!(cmds.len() >= 20, "the table has its rows: {cmds:?}");
    assert!(cmds.iter().all(|c| {
        ["prun ", "gangctl ", "man "]
            .iter()
            .any(|p| c.starts_with(p))
    }));
    let Some(c) = cluster((2, 2), 1) else { return };
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("job.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n#GANG -N 1\necho task ${GANG_ARRAY_TASK_ID:-none}\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Installed as the user guide says (`gangctl install`), so `man prun` finds its page
    // through PATH, as man-db maps PREFIX/bin to PREFIX/share/man.
    let prefix = dir.path().join("installed");
    let o = cmd(GANGCTL, &c)
        .args(["install", "--prefix"])
        .arg(&prefix)
        .output()
        .unwrap();
    assert!(o.status.success(), "gangctl install: {}", text(&o.stderr));
    let path = format!(
        "{}:{}:{}",
        prefix.join("bin").display(),
        bin_dir().display(),
        std::env::var("PATH").unwrap()
    );
    let allocation = allocation_with_steps(&c, &path, dir.path());
    for cmd in cmds {
        let words: Vec<&str> = cmd.split(' ').collect();
        let named = |f: fn(&str) -> bool| words.iter().any(|w| f(w));
        // A job to act on: held, so that it stays queued for hold, release, update and
        // cancel; one that ends, for attach. An array's tasks, held likewise.
        let job = if !named(|w| w == "12" || w.ends_with(":12")) {
            0
        } else if cmd.starts_with("gangctl attach") {
            detach(&c, &["-N", "1", "--", "true"])
        } else {
            detach(&c, &["-N", "1", "--hold", "--", "sleep", "60"])
        };
        let array = if named(|w| w.starts_with("12_")) {
            let args = ["-N", "1", "--hold", "--array", "1-4%2", "--", "sleep", "60"];
            detach(&c, &args)
        } else {
            0
        };
        let cmd = with_job(
            &cmd,
            Ids {
                job,
                allocation,
                array,
            },
        );
        let o = Command::new("sh")
            .args(["-c", &cmd])
            .current_dir(dir.path())
            .env("PATH", &path)
            .env("GANG_MASTER", c.master_addr())
            .env_remove("GANG_OUTPUT")
            .env_remove("MANPATH")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{cmd}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
            o.status.code(),
            text(&o.stdout),
            text(&o.stderr)
        );
    }
    c.shutdown().expect("clean shutdown");
}

#[test]
fn job_ids_are_replaced_where_the_table_names_job_12() {
    let ids = Ids {
        job: 7,
        allocation: 30,
        array: 40,
    };
    assert_eq!(with_job("gangctl hold 12", ids), "gangctl hold 7");
    assert_eq!(
        with_job("prun -d --dependency afterok:12 -- ./job.sh", ids),
        "prun -d --dependency afterok:7 -- ./job.sh"
    );
    assert_eq!(
        with_job("gangctl acct -j 12.1", ids),
        "gangctl acct -j 30.1"
    );
    assert_eq!(
        with_job("gangctl cancel 12_[1-2] 12_4", ids),
        "gangctl cancel 40_[1-2] 40_4"
    );
    assert_eq!(
        with_job("gangctl acct -o State%20", ids),
        "gangctl acct -o State%20"
    );
}
