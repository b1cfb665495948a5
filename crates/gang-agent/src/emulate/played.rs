//! A rank of an emulated node (`--emulate`, a test tool for fleets far larger than the
//! machine): everything up to the plan is the real agent's (the request checked, the rank
//! reserved, its exit reported through the outbox with its output first), but no process
//! is started. A task plays the program its argv names, from a small repertoire that
//! covers what scale tests run, and ends as that program would: with its exit code, or
//! with SIGTERM/SIGKILL when the job is signalled.
//!
//! Run time is wall time: a simulated rank is not paused while switched out (the switch
//! thread has no process to stop), so `sleep 2` ends 2 s after its launch whatever its
//! share of the slots.
//!
//! `fence ROUNDS BYTES [LATE_S]` fences for real: each rank puts one BYTES-byte value and
//! fences ROUNDS times through the path a PMI, PMIx or messaging-library fence takes (to
//! the master, or among the job's agents with `fences = "agents"`), checks that every
//! rank's value came back, and rank 0 prints how long each fence took as it saw it, as
//! JSON: `{"ranks":N,"bytes":B,"fence_ms":[...]}` (the fence figures at fleet sizes). With
//! LATE_S the job's last rank comes to its first fence that many seconds late (a
//! straggler: a slow node, a program still loading).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gang_proto::v1::rank_exit::How;
use gang_proto::v1::{RankExit, Stream};
use nix::sys::signal::Signal;
use tokio::sync::mpsc;
use tracing::info;

use crate::error::AgentError;
use crate::launch::parts::NodeParts;
use crate::launch::plan::LaunchPlan;
use crate::ranks::{RankKey, ReserveError};

/// The longest a simulated `sleep` may ask (a day): longer is refused as a typo.
const MAX_SLEEP: Duration = Duration::from_secs(86_400);
/// At most this many played fences, and this many bytes put by each rank (PMI-2's
/// largest value is 1,024 bytes; a business card is about 450).
const MAX_FENCES: u32 = 10_000;
const MAX_FENCE_BYTES: usize = 4096;

/// What a simulated rank does: fence `fences` times (rounds, bytes put, the last rank's
/// lateness), write `stdout`, wait `runs`, exit with `code`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    pub stdout: Vec<u8>,
    pub runs: Duration,
    pub code: i32,
    pub fences: Option<(u32, usize, Duration)>,
}

const REPERTOIRE: &str = "true, false, sleep SECONDS, echo WORDS, hostname, fence ROUNDS \
                          BYTES [LATE_S], and sh -c 'sleep S; exit N'";

/// The programs an emulated node plays (argv[0] by its file name): `true`, `false`,
/// `sleep SECONDS`, `echo WORDS`, `hostname`, `fence ROUNDS BYTES [LATE_S]`, `sh -c 'exit N'` /
/// `sh -c 'sleep S'` / `sh -c 'sleep S; exit N'`. Anything else is the launch's error,
/// naming the repertoire.
pub fn script(argv: &[String], node: (u32, u32)) -> Result<Script, String> {
    let name = argv
        .first()
        .map(|a| a.rsplit('/').next().unwrap_or(a))
        .unwrap_or_default();
    let done = |code| Script {
        stdout: vec![],
        runs: Duration::ZERO,
        code,
        fences: None,
    };
    match (name, &argv[1.min(argv.len())..]) {
        ("true", _) => Ok(done(0)),
        ("false", _) => Ok(done(1)),
        ("sleep", [secs]) => Ok(Script {
            runs: seconds(secs)?,
            ..done(0)
        }),
        ("echo", words) => Ok(Script {
            stdout: format!("{}\n", words.join(" ")).into_bytes(),
            ..done(0)
        }),
        ("hostname", []) => Ok(Script {
            stdout: format!("node-{}-{}\n", node.0, node.1).into_bytes(),
            ..done(0)
        }),
        ("fence", [rounds, bytes]) => Ok(Script {
            fences: Some(fence_args(rounds, bytes, "0")?),
            ..done(0)
        }),
        ("fence", [rounds, bytes, late]) => Ok(Script {
            fences: Some(fence_args(rounds, bytes, late)?),
            ..done(0)
        }),
        ("sh" | "bash", [c, body]) if c == "-c" => shell(body),
        _ => Err(format!(
            "an emulated node cannot play {:?}: it plays {REPERTOIRE}",
            argv.join(" ")
        )),
    }
}

fn fence_args(rounds: &str, bytes: &str, late: &str) -> Result<(u32, usize, Duration), String> {
    let rounds: u32 = rounds
        .parse()
        .ok()
        .filter(|r| (1..=MAX_FENCES).contains(r))
        .ok_or_else(|| format!("fence {rounds:?}: ROUNDS is 1..={MAX_FENCES}"))?;
    let bytes: usize = bytes
        .parse()
        .ok()
        .filter(|b| (1..=MAX_FENCE_BYTES).contains(b))
        .ok_or_else(|| format!("fence BYTES {bytes:?}: 1..={MAX_FENCE_BYTES}"))?;
    Ok((rounds, bytes, seconds(late)?))
}

/// `sleep S`, `exit N`, or `sleep S; exit N` (the only shell an emulated rank knows).
fn shell(body: &str) -> Result<Script, String> {
    let mut out = Script {
        stdout: vec![],
        runs: Duration::ZERO,
        code: 0,
        fences: None,
    };
    for cmd in body.split(';').map(str::trim).filter(|c| !c.is_empty()) {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        match words.as_slice() {
            ["sleep", s] => out.runs += seconds(s)?,
            ["exit", n] => {
                out.code = n
                    .parse::<u8>()
                    .map_err(|_| format!("exit {n:?}: an exit code is 0..=255"))?
                    .into();
                return Ok(out);
            }
            ["true"] => {}
            _ => {
                return Err(format!(
                    "an emulated node's shell plays only `sleep S` and `exit N`, not {cmd:?}"
                ));
            }
        }
    }
    Ok(out)
}

fn seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("sleep {s:?}: not a number of seconds"))?;
    let d = Duration::try_from_secs_f64(v).map_err(|_| format!("sleep {s:?}: out of range"))?;
    if d > MAX_SLEEP {
        return Err(format!("sleep {s:?}: longer than a day"));
    }
    Ok(d)
}

/// Start the planned rank as a task; its "pid" is 0 (there is no process).
pub fn start(plan: LaunchPlan, parts: &NodeParts) -> Result<u32, AgentError> {
    let node = plan.node;
    let key = plan.req.key;
    let script = script(&plan.req.argv, (node.x, node.y))
        .map_err(|what| AgentError::InvalidArgument { node, what })?;
    parts.ranks.reserve(key).map_err(|e| match e {
        ReserveError::Duplicate => AgentError::Duplicate {
            node,
            job_id: key.job_id,
            rank: key.rank,
        },
        ReserveError::Closing => AgentError::ShuttingDown { node },
    })?;
    let (tx, rx) = mpsc::unbounded_channel();
    parts.ranks.started_simulated(key, tx);
    let parts = parts.clone();
    let size = plan.req.size;
    tokio::spawn(async move { play(key, size, script, rx, parts).await });
    Ok(0)
}

async fn play(
    key: RankKey,
    size: u32,
    script: Script,
    mut signals: mpsc::UnboundedReceiver<Signal>,
    parts: NodeParts,
) {
    let run = async {
        if let Some((rounds, bytes, late)) = script.fences {
            if key.rank + 1 == size {
                tokio::time::sleep(late).await;
            }
            match fences(&parts, key, size, rounds, bytes).await {
                Ok(times) if key.rank == 0 => {
                    let line = serde_json::json!({"ranks": size, "bytes": bytes,
                        "fence_ms": times});
                    parts
                        .outbox
                        .push_output(key, Stream::Stdout, format!("{line}\n").into_bytes());
                }
                Ok(_) => {}
                Err(e) => {
                    let msg = format!("fence: {e}\n").into_bytes();
                    parts.outbox.push_output(key, Stream::Stderr, msg);
                    return How::Code(1);
                }
            }
        }
        parts
            .outbox
            .push_output(key, Stream::Stdout, script.stdout.clone());
        tokio::time::sleep(script.runs).await;
        How::Code(script.code)
    };
    let how = tokio::select! {
        how = run => how,
        sig = signals.recv() => How::Signal(sig.unwrap_or(Signal::SIGKILL) as i32),
    };
    parts.msg.remove_fence_tree(key);
    parts.ranks.mark_exited(key);
    let node = parts.facts.node;
    info!(
        job_id = key.job_id,
        rank = key.rank,
        ?how,
        "simulated rank exited"
    );
    parts.outbox.push_exit(RankExit {
        job_id: key.job_id,
        rank: key.rank,
        x: node.x,
        y: node.y,
        how: Some(how),
        ..Default::default()
    });
}

/// `rounds` fences of rank `key` of `size`, putting one `bytes`-byte value; every rank's
/// value must come back from the first and the last. Like the agent's PMI servers and
/// the messaging library, a rank brings everything it put to every fence (among the
/// agents, a fence's space is the union of what its ranks bring). The time each took, in
/// ms.
async fn fences(
    parts: &NodeParts,
    key: RankKey,
    size: u32,
    rounds: u32,
    bytes: usize,
) -> Result<Vec<f64>, String> {
    let value = |rank: u32| {
        let mut v = format!("{rank}:");
        v.extend(std::iter::repeat_n('x', bytes.saturating_sub(v.len())));
        v
    };
    let own = BTreeMap::from([(format!("fence-{}", key.rank), value(key.rank))]);
    let mut times = Vec::with_capacity(rounds as usize);
    for epoch in 1..=rounds {
        let t = Instant::now();
        let space = parts.msg.fence(key, epoch, &own).await?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        if epoch == 1 || epoch == rounds {
            if let Some(r) = (0..size).find(|r| !space.contains_key(&format!("fence-{r}"))) {
                return Err(format!("fence {epoch}: rank {r}'s value is missing"));
            }
            let next = (key.rank + 1) % size;
            if space.get(&format!("fence-{next}")) != Some(&value(next)) {
                return Err(format!(
                    "fence {epoch}: rank {next}'s value is not what it put"
                ));
            }
        }
    }
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_repertoire_plays_as_the_real_programs_end() {
        assert_eq!(script(&argv(&["/bin/true"]), (0, 0)).unwrap().code, 0);
        assert_eq!(script(&argv(&["false"]), (0, 0)).unwrap().code, 1);
        let s = script(&argv(&["sleep", "1.5"]), (0, 0)).unwrap();
        assert_eq!((s.runs, s.code), (Duration::from_millis(1500), 0));
        let s = script(&argv(&["sh", "-c", "sleep 2; exit 3"]), (0, 0)).unwrap();
        assert_eq!((s.runs, s.code), (Duration::from_secs(2), 3));
        assert_eq!(
            script(&argv(&["echo", "a", "b"]), (0, 0)).unwrap().stdout,
            b"a b\n"
        );
        assert_eq!(
            script(&argv(&["hostname"]), (4, 7)).unwrap().stdout,
            b"node-4-7\n"
        );
    }

    #[test]
    fn what_it_cannot_play_is_refused_by_name() {
        let e = script(&argv(&["./a.out"]), (0, 0)).unwrap_err();
        assert!(e.contains("cannot play \"./a.out\""), "{e}");
        assert!(script(&argv(&["sh", "-c", "rm -rf /"]), (0, 0)).is_err());
        assert!(script(&argv(&["sleep", "1e9"]), (0, 0)).is_err());
        assert!(script(&argv(&["sh", "-c", "exit 300"]), (0, 0)).is_err());
        assert!(script(&argv(&["sleep", "-1"]), (0, 0)).is_err());
        for bad in [
            ["fence", "0", "8"],
            ["fence", "3", "0"],
            ["fence", "3", "5000"],
        ] {
            assert!(script(&argv(&bad), (0, 0)).is_err(), "{bad:?}");
        }
        let s = script(&argv(&["fence", "20", "450"]), (0, 0)).unwrap();
        assert_eq!(s.fences, Some((20, 450, Duration::ZERO)));
        let s = script(&argv(&["fence", "2", "8", "1.5"]), (0, 0)).unwrap();
        assert_eq!(s.fences, Some((2, 8, Duration::from_millis(1500))));
    }
}
