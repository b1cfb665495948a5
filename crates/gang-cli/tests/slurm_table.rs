//! The user guide's "From Slurm" table (docs/user-guide.md), run: every command of its
//! right-hand column against a real local cluster, with job 12 a real job there, must
//! succeed. A row added to the table is tested with no change here.

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

/// `cmd` with job 12 (alone, or as in `afterok:12`) replaced by `id`.
fn with_job(cmd: &str, id: u64) -> String {
    cmd.split(' ')
        .map(|w| match w {
            "12" => id.to_string(),
            w if w.ends_with(":12") => format!("{}:{id}", &w[..w.len() - 3]),
            w => w.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn every_gang_command_of_the_slurm_table_works() {
    let cmds = table_commands();
    assert!(cmds.len() >= 20, "the table has its rows: {cmds:?}");
    assert!(
        cmds.iter()
            .all(|c| c.starts_with("prun ") || c.starts_with("gangctl "))
    );
    let Some(c) = cluster((2, 2), 1) else { return };
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("job.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n#GANG -N 1\necho task ${GANG_ARRAY_TASK_ID:-none}\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin_dir().display(), std::env::var("PATH").unwrap());
    for cmd in cmds {
        let cmd = if cmd.contains("12") {
            // A job to act on: held, so that it stays queued for hold, release, update and
            // cancel; one that ends, for attach.
            let id = if cmd.starts_with("gangctl attach") {
                detach(&c, &["-N", "1", "--", "true"])
            } else {
                detach(&c, &["-N", "1", "--hold", "--", "sleep", "60"])
            };
            with_job(&cmd, id)
        } else {
            cmd
        };
        let o = Command::new("sh")
            .args(["-c", &cmd])
            .current_dir(dir.path())
            .env("PATH", &path)
            .env("GANG_MASTER", c.master_addr())
            .env_remove("GANG_OUTPUT")
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
    assert_eq!(with_job("gangctl hold 12", 7), "gangctl hold 7");
    assert_eq!(
        with_job("prun -d --dependency afterok:12 -- ./job.sh", 7),
        "prun -d --dependency afterok:7 -- ./job.sh"
    );
}
