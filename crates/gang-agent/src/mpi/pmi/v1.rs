//! The PMI-1 wire: lines of space-separated `key=value` words, the first `cmd=NAME`.

use std::collections::BTreeMap;

use super::{Abort, KEYLEN_MAX, KVSNAME_MAX, Session, Step, VALLEN_MAX, Wire};

pub const SPAWN_REFUSAL: &str = "cmd=spawn_result rc=-1 errmsg=spawn_is_not_supported_under_prun";

/// A parsed line: `cmd` and its other words.
#[derive(Debug, PartialEq, Eq)]
pub struct Line {
    pub cmd: String,
    pub args: BTreeMap<String, String>,
    /// `message=` and the rest of the line (abort's message has spaces).
    pub message: Option<String>,
}

pub fn parse(line: &str) -> Option<Line> {
    let mut words = line.split_whitespace();
    let first = words.next()?;
    let (k, cmd) = first.split_once('=')?;
    if k != "cmd" && k != "mcmd" {
        return None;
    }
    let args = words
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let message = line
        .find(" message=")
        .map(|at| line[at + " message=".len()..].trim().to_string())
        .filter(|m| !m.is_empty());
    Some(Line {
        cmd: cmd.to_string(),
        args,
        message,
    })
}

impl Session {
    /// Answer one PMI-1 line (a barrier is completed by `barrier_done`).
    pub fn handle(&mut self, line: &Line) -> Step {
        let arg = |k: &str| line.args.get(k).map(String::as_str).unwrap_or("");
        match line.cmd.as_str() {
            "init" => match arg("pmi_version") {
                "1" => {
                    Step::Reply("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0".into())
                }
                "2" => {
                    self.wire = Wire::V2;
                    Step::Reply("cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0".into())
                }
                other => Step::Reply(format!(
                    "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1 msg=PMI-1_and_PMI-2_are_served_(asked_for_{})",
                    word(other)
                )),
            },
            "get_maxes" => Step::Reply(format!(
                "cmd=maxes rc=0 kvsname_max={KVSNAME_MAX} keylen_max={KEYLEN_MAX} vallen_max={VALLEN_MAX}"
            )),
            "get_appnum" => Step::Reply("cmd=appnum rc=0 appnum=0".into()),
            "get_my_kvsname" => Step::Reply(format!(
                "cmd=my_kvsname rc=0 kvsname={}",
                self.job.kvsname()
            )),
            "get_universe_size" => {
                Step::Reply(format!("cmd=universe_size rc=0 size={}", self.job.size))
            }
            "put" => match self.put(arg("key"), arg("value")) {
                Ok(()) => Step::Reply("cmd=put_result rc=0".into()),
                Err(e) => Step::Reply(format!("cmd=put_result rc=-1 msg={}", word(e))),
            },
            "get" => {
                let k = arg("key");
                match self.lookup(k) {
                    // Put by a rank on the PMI-2 wire (or through the master): on this
                    // wire it would end the word or the line, and the client would read
                    // a reply that was never sent.
                    Some(v) if v.chars().any(|c| c.is_whitespace() || c.is_control()) => {
                        Step::Reply(format!(
                            "cmd=get_result rc=-1 msg=the_value_of_key_{}_has_spaces_or_control_characters,_which_PMI-1_cannot_carry",
                            word(k)
                        ))
                    }
                    Some(v) => Step::Reply(format!("cmd=get_result rc=0 value={v}")),
                    None => Step::Reply(format!(
                        "cmd=get_result rc=-1 msg=key_{}_not_found",
                        word(k)
                    )),
                }
            }
            "barrier_in" => Step::Barrier,
            "finalize" => Step::Finalize("cmd=finalize_ack rc=0".into()),
            "abort" => {
                let code = arg("exitcode").parse().unwrap_or(1);
                self.aborted = Some(Abort::new(code, line.message.as_deref()));
                Step::Abort
            }
            "spawn" => Step::Reply(SPAWN_REFUSAL.into()),
            other => Step::Reply(format!(
                "cmd={} rc=-1 msg=unknown_command_{}",
                word(other),
                word(other)
            )),
        }
    }
}

pub fn barrier_reply(result: Result<(), String>) -> String {
    match result {
        Ok(()) => "cmd=barrier_out rc=0".into(),
        Err(e) => format!("cmd=barrier_out rc=-1 msg={}", word(&e)),
    }
}

/// A value safe in one word of the protocol.
pub(crate) fn word(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_whitespace() || c == '=' {
                '_'
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::*;

    fn job() -> PmiJob {
        PmiJob {
            key: RankKey { job_id: 7, rank: 1 },
            size: 4,
            namespace: "gang-7".into(),
        }
    }

    fn reply(s: &mut Session, line: &str) -> String {
        match s.handle(&parse(line).unwrap()) {
            Step::Reply(r) | Step::Finalize(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_handshake_and_queries() {
        let mut s = Session::new(job());
        assert_eq!(
            reply(&mut s, "cmd=init pmi_version=1 pmi_subversion=1"),
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0"
        );
        assert!(reply(&mut s, "cmd=init pmi_version=3 pmi_subversion=0").contains("rc=-1"));
        assert_eq!(
            reply(&mut s, "cmd=get_maxes"),
            "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024"
        );
        assert_eq!(
            reply(&mut s, "cmd=get_my_kvsname"),
            "cmd=my_kvsname rc=0 kvsname=gang-7"
        );
        assert_eq!(
            reply(&mut s, "cmd=get_universe_size"),
            "cmd=universe_size rc=0 size=4"
        );
        assert_eq!(reply(&mut s, "cmd=get_appnum"), "cmd=appnum rc=0 appnum=0");
        assert_eq!(reply(&mut s, "cmd=finalize"), "cmd=finalize_ack rc=0");
        assert!(reply(&mut s, "cmd=bogus a=b").starts_with("cmd=bogus rc=-1"));
        assert!(reply(&mut s, "cmd=spawn nprocs=2").contains("rc=-1"));
        assert!(parse("hello").is_none());
    }

    #[test]
    fn puts_are_local_until_a_barrier_brings_the_space() {
        let mut s = Session::new(job());
        assert_eq!(
            reply(&mut s, "cmd=put kvsname=gang-7 key=P1-bc value=tcp://x:1"),
            "cmd=put_result rc=0"
        );
        assert_eq!(
            reply(&mut s, "cmd=get kvsname=gang-7 key=P1-bc"),
            "cmd=get_result rc=0 value=tcp://x:1"
        );
        assert!(reply(&mut s, "cmd=get kvsname=gang-7 key=P0-bc").contains("rc=-1"));
        assert_eq!(
            reply(&mut s, "cmd=get kvsname=gang-7 key=PMI_process_mapping"),
            "cmd=get_result rc=0 value=(vector,(0,4,1))"
        );
        assert_eq!(s.handle(&parse("cmd=barrier_in").unwrap()), Step::Barrier);
        let (epoch, puts) = s.barrier_start();
        assert_eq!(epoch, 1);
        assert_eq!(puts.len(), 1);
        let space = std::sync::Arc::new([("P0-bc".to_string(), "tcp://y:2".to_string())].into());
        assert_eq!(s.barrier_done(Ok(space)), "cmd=barrier_out rc=0");
        assert_eq!(
            reply(&mut s, "cmd=get kvsname=gang-7 key=P0-bc"),
            "cmd=get_result rc=0 value=tcp://y:2"
        );
        assert_eq!(
            s.barrier_done(Err("job 7 is not running".into())),
            "cmd=barrier_out rc=-1 msg=job_7_is_not_running"
        );
    }

    #[test]
    fn abort_names_the_code() {
        let mut s = Session::new(job());
        let line = "cmd=abort exitcode=3 message=application called MPI_Abort(MPI_COMM_WORLD, 3) - process 0";
        assert_eq!(s.handle(&parse(line).unwrap()), Step::Abort);
        assert_eq!(
            s.aborted,
            Some(Abort {
                code: 3,
                what: "called PMI abort (MPI_Abort) with exit code 3: application called MPI_Abort(MPI_COMM_WORLD, 3) - process 0".into()
            })
        );
    }
}
