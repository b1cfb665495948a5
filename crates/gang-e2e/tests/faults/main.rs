//! Faults on the real binaries: the master SIGKILLed while clients submit, an agent
//! SIGKILLed mid-job, a liveness head SIGKILLed (its children stay up), the disk under
//! the master's database full. Each test prints its figures (`cargo test -p gang-e2e
//! --test faults -- --nocapture`).
//!
//! One test at a time: CPU-bound ranks of two clusters would measure each other on 2
//! cores, and the process-tree checks look at every process below this one (this test
//! process is a child subreaper, so what a dead agent leaves behind is reparented to it
//! and found by walking ppid links in /proc, whatever its name).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gang_e2e::*;
use gang_local::{LocalCluster, LocalClusterOptions};
use gang_proto::client::{self, MasterChannel, Target};
use gang_proto::v1;
use gang_proto::v1::job_service_client::JobServiceClient;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

const T: Duration = Duration::from_secs(30);

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    static SUBREAPER: std::sync::Once = std::sync::Once::new();
    SUBREAPER.call_once(|| {
        nix::sys::prctl::set_child_subreaper(true).expect("become a child subreaper");
    });
    // A failed test must not fail the others: its cluster was torn down as it unwound.
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn wall_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

async fn connect(addr: &str) -> Option<JobServiceClient<MasterChannel>> {
    let target = Target::parse(addr).ok()?;
    let ch = client::connect(&target, &Default::default(), Duration::from_secs(2))
        .await
        .ok()?;
    Some(JobServiceClient::new(ch))
}

fn spec(shape: &str, argv: &[&str], name: &str, env: &[(&str, &str)]) -> v1::JobSpec {
    v1::JobSpec {
        shape: shape.into(),
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: "/".into(),
        name: name.into(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    }
}

/// Every job the master lists (all states, newest first).
async fn list_all(
    c: &mut JobServiceClient<MasterChannel>,
) -> Result<Vec<v1::JobInfo>, gang_cli::connect::CliError> {
    gang_cli::jobs::listing::list(c, &[], 0).await
}

// ---------------------------------------------------------------- processes

mod agent_kill;
mod disk_full;
mod liveness_tree;
mod master_away;
mod master_kill;
mod procs;

use procs::*;

/// A CPU-bound 4x4 job; its ranks' pids.
struct Busy {
    id: u64,
    pids: Vec<i32>,
}

fn start_busy(c: &LocalCluster, nice: bool) -> Busy {
    let dir = tempfile::tempdir().unwrap().keep();
    let script = busy_script(&dir);
    let cmd: Vec<&str> = if nice {
        // Niced so that the master and the submitting clients, not the loops, get the
        // CPU when they need it; whether the jobs take turns does not depend on it.
        vec!["nice", "-n", "19", "sh", "-c", &script]
    } else {
        vec!["sh", "-c", &script]
    };
    let id = submit(c, "4x4", &cmd);
    let pids = rank_pids(&dir, 16, T);
    let _ = std::fs::remove_dir_all(&dir);
    Busy { id, pids }
}

fn cpu(pids: &[i32]) -> u64 {
    pids.iter().filter_map(|&p| cpu_ns(p)).sum()
}

/// Turns taken by two jobs over `span`: as in `tests/gang.rs`, a turn is a change of the
/// job running alone, sampled on a thread of its own at real-time priority where
/// permitted. A job ran in a sample interval (5 ms) if its ranks used a twentieth of a
/// CPU in it: they are niced, so on a machine busy with other work a job in its slot may
/// get little more than that, while a stopped one gets nothing (but the microseconds a
/// rank takes to stop, which can only make both seem to run, never a turn).
fn count_turns(a: &[i32], b: &[i32], span: Duration) -> usize {
    let (a, b) = (a.to_vec(), b.to_vec());
    std::thread::spawn(move || {
        realtime_sampler();
        let (mut la, mut lb, mut lt) = (cpu(&a), cpu(&b), Instant::now());
        let end = lt + span;
        let mut alone: Option<bool> = None;
        let mut turns = 0;
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
            let (ca, cb, now) = (cpu(&a), cpu(&b), Instant::now());
            let ran = |used: u64| used as f64 > (now - lt).as_nanos() as f64 / 20.0;
            let (ra, rb) = (ran(ca.saturating_sub(la)), ran(cb.saturating_sub(lb)));
            if ra != rb {
                if alone.is_some_and(|x| x != ra) {
                    turns += 1;
                }
                alone = Some(ra);
            }
            (la, lb, lt) = (ca, cb, now);
        }
        turns
    })
    .join()
    .expect("the sampler does not panic")
}

// ---------------------------------------------------------------- 1. master SIGKILL
