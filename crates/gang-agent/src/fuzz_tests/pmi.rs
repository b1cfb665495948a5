//! Targets `pmi1_wire` and `pmi2_wire`: whatever bytes a rank writes to its PMI socket,
//! read by the agent's readers (`pmi::read_line`, `v2::read_frame`) and answered by its
//! session (`on_v1_line`, `Session::handle_v2`, barriers answered with a space other ranks
//! filled). Nothing panics, nothing read or kept passes its bound, and every answer is
//! well-formed on the wire it goes out on. The two targets differ in their seeds (PMI-1
//! sessions, and PMI-2 sessions after their PMI-1 `init`).

use std::collections::BTreeMap;

use proptest::collection::vec;
use proptest::prelude::*;

use super::now;
use crate::mpi::pmi::v1::{self, word};
use crate::mpi::pmi::v2::{self, Command};
use crate::mpi::pmi::{
    KEYLEN_MAX, LINE_MAX, PUTS_MAX_BYTES, PmiJob, Session, Step, Turn, VALLEN_MAX, Wire,
    on_v1_line, parse, read_line,
};
use crate::ranks::RankKey;

/// A rank's session: what it writes, and what its barriers bring.
#[derive(Debug, Clone)]
pub(super) struct Case {
    bytes: Vec<u8>,
    /// A long run of one byte at the end (a line or frame that never ends).
    tail: Option<(u8, u16)>,
    /// What other ranks put (values with spaces, newlines and `;` included), or the
    /// fence's failure.
    fence: Result<BTreeMap<String, String>, String>,
    /// The reader's buffer (boundaries inside lines and frames).
    buffer: usize,
}

fn space_value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9:/.]{0,12}",
        Just("a b".to_string()),
        Just("x\ncmd=barrier_out rc=0".to_string()),
        Just("a;b;;".to_string()),
        "\\PC{0,8}",
        "[ -~\n\t;]{0,16}",
    ]
}

fn case(target: &str) -> impl Strategy<Value = Case> {
    let fence = prop_oneof![
        4 => (space_value(), vec(("P[0-3]-businesscard|[a-z]{1,4}|\\PC{1,4}", space_value()), 0..4))
            .prop_map(|(v0, kv)| {
                // Rank 0's address, which the seeds' sessions get after their barrier.
                let mut space: BTreeMap<String, String> = kv.into_iter().collect();
                space.insert("P0-businesscard".into(), v0);
                Ok(space)
            }),
        1 => "\\PC{0,16}".prop_map(Err),
    ];
    (
        gang_fuzz::bytes(gang_fuzz::seeds(target)),
        prop::option::weighted(0.1, (any::<u8>(), (LINE_MAX as u16)..(8 * LINE_MAX as u16))),
        fence,
        prop_oneof![Just(8192usize), 1usize..64],
    )
        .prop_map(|(bytes, tail, fence, buffer)| Case {
            bytes,
            tail,
            fence,
            buffer,
        })
}

fn job() -> PmiJob {
    PmiJob {
        key: RankKey { job_id: 7, rank: 1 },
        size: 4,
        namespace: "gang-7".into(),
    }
}

/// The commands each wire knows (every other gets an error naming it).
const V1_COMMANDS: &[&str] = &[
    "init",
    "get_maxes",
    "get_appnum",
    "get_my_kvsname",
    "get_universe_size",
    "put",
    "get",
    "barrier_in",
    "finalize",
    "abort",
    "spawn",
];

/// An answer on the PMI-1 wire: one line of `key=value` words, the first `cmd=`.
fn v1_wire(reply: &str) -> Result<(), TestCaseError> {
    prop_assert!(!reply.contains('\n'), "a reply of two lines: {:?}", reply);
    prop_assert!(reply.starts_with("cmd="), "{:?}", reply);
    for w in reply.split(' ') {
        let key = w.split_once('=').map(|(k, _)| k);
        prop_assert!(
            key.is_some_and(|k| !k.is_empty()),
            "not a key=value word: {:?} in {:?}",
            w,
            reply
        );
    }
    Ok(())
}

/// The answer to a PMI-1 line (`spawn_lines`: inside a multi-line spawn before it).
fn v1_answer(text: &str, spawn_lines: bool, reply: &str) -> Result<(), TestCaseError> {
    v1_wire(reply)?;
    if spawn_lines {
        prop_assert_eq!(reply, v1::SPAWN_REFUSAL);
        return Ok(());
    }
    let Some(line) = parse(text) else {
        prop_assert!(reply.contains("rc=-1"), "{:?} answered {:?}", text, reply);
        return Ok(());
    };
    let arg = |k: &str| line.args.get(k).map_or("", String::as_str);
    match line.cmd.as_str() {
        "put" => {
            let (k, v) = (arg("key"), arg("value"));
            if k.is_empty() || k.len() > KEYLEN_MAX || v.len() > VALLEN_MAX {
                prop_assert!(reply.contains("rc=-1"), "{:?} answered {:?}", text, reply);
            }
        }
        cmd if !V1_COMMANDS.contains(&cmd) => {
            let named = format!("msg=unknown_command_{}", word(cmd));
            prop_assert!(
                reply.contains("rc=-1") && reply.ends_with(&named),
                "{reply:?}"
            );
        }
        _ => {}
    }
    Ok(())
}

/// An answer on the PMI-2 wire: it frames, and reads back as `cmd=NAME-response;` for
/// the command it answers, and pairs.
fn v2_answer(frame: &str, reply: &str) -> Result<(), TestCaseError> {
    let framed = v2::frame(reply);
    let (len, rest) = framed.split_at(6);
    prop_assert_eq!(len.trim().parse::<usize>().ok(), Some(rest.len()));
    prop_assert!(reply.ends_with(';'), "{:?}", reply);
    let asked = Command::parse(frame);
    let cmd = asked.get("cmd").unwrap_or("");
    let got = Command::parse(reply);
    let answered = format!("{cmd}-response");
    prop_assert_eq!(got.get("cmd"), Some(answered.as_str()), "{:?}", reply);
    let rc = got.get("rc");
    prop_assert!(rc == Some("0") || rc == Some("1"), "{:?}", reply);
    if rc == Some("1") {
        prop_assert!(got.get("errmsg").is_some_and(|m| !m.is_empty()));
    }
    let known = [
        "fullinit",
        "job-getid",
        "kvs-put",
        "kvs-get",
        "kvs-fence",
        "info-getjobattr",
        "info-putnodeattr",
        "info-getnodeattr",
        "finalize",
        "abort",
        "spawn",
        "name-publish",
        "name-unpublish",
        "name-lookup",
    ];
    if !known.contains(&cmd) {
        prop_assert_eq!(rc, Some("1"));
        let errmsg = got.get("errmsg").unwrap_or("");
        prop_assert!(errmsg.contains(&format!("`{cmd}`")), "{:?}", reply);
    }
    if cmd == "kvs-put" || cmd == "info-putnodeattr" {
        let (k, v) = (
            asked.get("key").unwrap_or(""),
            asked.get("value").unwrap_or(""),
        );
        if k.is_empty() || k.len() > KEYLEN_MAX || v.len() > VALLEN_MAX {
            prop_assert_eq!(rc, Some("1"), "{:?} answered {:?}", frame, reply);
        }
    }
    Ok(())
}

/// What went in: the line or frame, the wire it came on, and whether it was inside a
/// multi-line spawn.
struct In {
    text: String,
    wire: Wire,
    spawn_lines: bool,
}

fn answer(input: &In, reply: &str) -> Result<(), TestCaseError> {
    match input.wire {
        Wire::V1 => v1_answer(&input.text, input.spawn_lines, reply),
        Wire::V2 => v2_answer(&input.text, reply),
    }
}

/// A session over the case's bytes, as `pmi::serve` runs it; how many messages it read.
async fn session(case: &Case, bytes: &[u8]) -> Result<u64, TestCaseError> {
    let mut rd = tokio::io::BufReader::with_capacity(case.buffer, bytes);
    let mut s = Session::new(job());
    let mut spawn_lines = false;
    let mut read = 0u64;
    loop {
        let (input, step) = match s.wire() {
            Wire::V1 => {
                let Ok(Some(text)) = read_line(&mut rd).await else {
                    break;
                };
                prop_assert!(text.len() <= LINE_MAX, "a line of {} bytes", text.len());
                let before = spawn_lines;
                let step = match on_v1_line(&mut s, &mut spawn_lines, &text) {
                    Turn::Step(step) => step,
                    Turn::Skip => continue,
                    Turn::Closed => unreachable!("a line is never the end"),
                };
                let input = In {
                    text,
                    wire: Wire::V1,
                    spawn_lines: before,
                };
                (input, step)
            }
            Wire::V2 => {
                let Ok(Some(frame)) = v2::read_frame(&mut rd, LINE_MAX).await else {
                    break;
                };
                // Invalid UTF-8 is replaced, 3 bytes for 1.
                prop_assert!(frame.len() <= 3 * LINE_MAX);
                let step = s.handle_v2(&frame);
                let input = In {
                    text: frame,
                    wire: Wire::V2,
                    spawn_lines: false,
                };
                (input, step)
            }
        };
        read += 1;
        match step {
            Step::Reply(r) | Step::Finalize(r) => answer(&input, &r)?,
            Step::Barrier => {
                let (_, puts) = s.barrier_start();
                for (k, v) in puts {
                    prop_assert!(!k.is_empty() && k.len() <= KEYLEN_MAX && v.len() <= VALLEN_MAX);
                }
                let r = s.barrier_done(case.fence.clone().map(std::sync::Arc::new));
                answer(&input, &r)?;
            }
            Step::Abort => prop_assert!(s.aborted.as_ref().is_some_and(|a| !a.what.is_empty())),
        }
        prop_assert!(s.held_bytes() <= PUTS_MAX_BYTES);
    }
    Ok(read.max(1))
}

/// Largest allocation a session may make: a few lines' worth, whatever it is sent (the
/// tails are longer: a reader that kept a line that never ends would pass it).
const ALLOC_BOUND: usize = 16 * LINE_MAX;

fn check(case: Case) -> Result<u64, TestCaseError> {
    let mut bytes = case.bytes.clone();
    if let Some((b, n)) = case.tail {
        bytes.extend(std::iter::repeat_n(b, usize::from(n)));
    }
    let (read, largest) = gang_fuzz::largest_alloc(|| now(session(&case, &bytes)));
    prop_assert!(
        largest <= ALLOC_BOUND,
        "one allocation of {largest} bytes (bound {ALLOC_BOUND}) for {} bytes of input",
        bytes.len()
    );
    read
}

#[test]
fn fuzz_pmi1_wire() {
    gang_fuzz::run("pmi1_wire", 400, case("pmi1_wire"), check);
}

#[test]
fn fuzz_pmi2_wire() {
    gang_fuzz::run("pmi2_wire", 400, case("pmi2_wire"), check);
}

/// The readers on a real socket: a rank that writes a line or a frame that never ends
/// is cut off at the bound, and the agent holds no more of it than that.
#[tokio::test]
async fn an_endless_line_or_frame_on_the_socket_is_cut_off() {
    use tokio::io::AsyncWriteExt;
    let (mut rank, agent) = tokio::net::UnixStream::pair().unwrap();
    let writer = tokio::spawn(async move {
        let _ = rank.write_all(&vec![b'a'; 64 * LINE_MAX]).await;
        rank
    });
    let mut rd = tokio::io::BufReader::new(agent);
    let err = read_line(&mut rd).await.unwrap_err();
    assert!(err.to_string().contains("longer than"), "{err}");
    let rank = writer.await.unwrap();
    drop(rank);

    let (mut rank, mut agent) = tokio::net::UnixStream::pair().unwrap();
    rank.write_all(b"999999cmd=").await.unwrap();
    let err = v2::read_frame(&mut agent, LINE_MAX).await.unwrap_err();
    assert!(err.to_string().contains("over the"), "{err}");
}

/// The total a rank keeps, which a fuzz input (at most 64 KiB) cannot reach: puts and node
/// attributes past it are refused.
#[test]
fn a_rank_cannot_keep_more_than_the_limit() {
    let mut s = Session::new(job());
    let value = "v".repeat(VALLEN_MAX);
    let mut refused = None;
    for i in 0..2 * PUTS_MAX_BYTES / VALLEN_MAX {
        let cmd = if i % 2 == 0 {
            "kvs-put"
        } else {
            "info-putnodeattr"
        };
        match s.handle_v2(&format!("cmd={cmd};key=k{i};value={value};")) {
            Step::Reply(r) if Command::parse(&r).get("rc") == Some("1") => {
                refused = Some(r);
                break;
            }
            Step::Reply(_) => {}
            step => panic!("{step:?}"),
        }
    }
    let r = refused.expect("a put past the limit is refused");
    assert!(r.contains("too many puts"), "{r}");
    assert!(s.held_bytes() <= PUTS_MAX_BYTES);
}
