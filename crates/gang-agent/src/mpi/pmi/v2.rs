//! The PMI-2 wire: frames of a 6-character decimal length (left-aligned, space-padded)
//! followed by that many bytes of `key=value;` pairs, the first `cmd=NAME`; a `;` inside
//! a value is doubled. A session reaches it after `cmd=init pmi_version=2` on the PMI-1
//! wire (`v1.rs`).

use tokio::io::{AsyncRead, AsyncReadExt};

use super::{Abort, KEYLEN_MAX, Session, Step, VALLEN_MAX};

/// Width of a frame's length.
const LEN_WIDTH: usize = 6;

/// The next frame's payload; None at the end of the stream. NULs before a frame are
/// dropped (a client may send one after its PMI-1 `init` line).
pub async fn read_frame<R: AsyncRead + Unpin>(
    rd: &mut R,
    max: usize,
) -> std::io::Result<Option<String>> {
    let mut len = [0u8; LEN_WIDTH];
    let mut have = 0;
    while have < LEN_WIDTH {
        let n = rd.read(&mut len[have..have + 1]).await?;
        if n == 0 {
            return if have == 0 {
                Ok(None)
            } else {
                Err(std::io::Error::other(
                    "the stream ended inside a frame length",
                ))
            };
        }
        if have == 0 && len[0] == 0 {
            continue;
        }
        have += 1;
    }
    let text = std::str::from_utf8(&len).unwrap_or("");
    let n: usize = text
        .trim()
        .parse()
        .map_err(|_| std::io::Error::other(format!("not a PMI-2 frame length: {:?}", text)))?;
    if n > max {
        return Err(std::io::Error::other(format!(
            "a frame of {n} bytes, over the {max}-byte limit"
        )));
    }
    let mut payload = vec![0u8; n];
    rd.read_exact(&mut payload).await?;
    Ok(Some(String::from_utf8_lossy(&payload).into_owned()))
}

/// `message` framed for the wire.
pub(crate) fn frame(message: &str) -> String {
    format!("{:<width$}{message}", message.len(), width = LEN_WIDTH)
}

/// A parsed frame: its pairs in order (`cmd` first).
#[derive(Debug, PartialEq, Eq)]
pub struct Command(Vec<(String, String)>);

impl Command {
    pub fn parse(payload: &str) -> Command {
        let mut pairs = Vec::new();
        let mut chars = payload.chars().peekable();
        loop {
            let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
            if key.is_empty() && chars.peek().is_none() {
                break;
            }
            let mut value = String::new();
            while let Some(c) = chars.next() {
                if c == ';' {
                    if chars.peek() == Some(&';') {
                        chars.next();
                        value.push(';');
                    } else {
                        break;
                    }
                } else {
                    value.push(c);
                }
            }
            pairs.push((key, value));
        }
        Command(pairs)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn cmd(&self) -> &str {
        self.get("cmd").unwrap_or("")
    }
}

/// A reply: `cmd=NAME;` and the pairs, values (the name too: it may echo the rank's
/// command) escaped.
fn reply(cmd: &str, pairs: &[(&str, &str)]) -> String {
    let mut out = format!("cmd={};", cmd.replace(';', ";;"));
    for (k, v) in pairs {
        out.push_str(k);
        out.push('=');
        out.push_str(&v.replace(';', ";;"));
        out.push(';');
    }
    out
}

/// A refusal: rc=1 and the reason, as MPICH's and Slurm's clients read it.
fn error(cmd: &str, why: &str) -> String {
    reply(cmd, &[("rc", "1"), ("errmsg", why)])
}

fn found(cmd: &str, value: Option<String>) -> String {
    match value {
        Some(v) => reply(cmd, &[("rc", "0"), ("found", "TRUE"), ("value", &v)]),
        None => reply(cmd, &[("rc", "0"), ("found", "FALSE")]),
    }
}

pub fn barrier_reply(result: Result<(), String>) -> String {
    match result {
        Ok(()) => reply("kvs-fence-response", &[("rc", "0")]),
        Err(e) => error("kvs-fence-response", &e),
    }
}

impl Session {
    /// Answer one PMI-2 frame (a fence is completed by `barrier_done`).
    pub fn handle_v2(&mut self, payload: &str) -> Step {
        let c = Command::parse(payload);
        let arg = |k: &str| c.get(k).unwrap_or("");
        match c.cmd() {
            "fullinit" => {
                let rank = self.job.key.rank.to_string();
                let asked = c.get("pmirank").or_else(|| c.get("pmiid"));
                if asked.is_some_and(|r| r != rank) {
                    return Step::Reply(error(
                        "fullinit-response",
                        &format!(
                            "PMI rank {} asked, but this is rank {rank}'s socket",
                            asked.unwrap_or_default()
                        ),
                    ));
                }
                Step::Reply(reply(
                    "fullinit-response",
                    &[
                        ("rc", "0"),
                        ("pmi-version", "2"),
                        ("pmi-subversion", "0"),
                        ("rank", &rank),
                        ("size", &self.job.size.to_string()),
                        ("appnum", "0"),
                        ("debugged", "FALSE"),
                        ("pmiverbose", "FALSE"),
                    ],
                ))
            }
            "job-getid" => Step::Reply(reply(
                "job-getid-response",
                &[("rc", "0"), ("jobid", &self.job.kvsname())],
            )),
            "kvs-put" => match self.put(arg("key"), arg("value")) {
                Ok(()) => Step::Reply(reply("kvs-put-response", &[("rc", "0")])),
                Err(e) => Step::Reply(error(
                    "kvs-put-response",
                    &format!("{e} (keys up to {KEYLEN_MAX} bytes, values up to {VALLEN_MAX})"),
                )),
            },
            "kvs-get" => Step::Reply(found("kvs-get-response", self.lookup(arg("key")))),
            "kvs-fence" => Step::Barrier,
            "info-getjobattr" => {
                let value = match arg("key") {
                    "universeSize" => Some(self.job.size.to_string()),
                    k => self.lookup(k).filter(|_| k == "PMI_process_mapping"),
                };
                Step::Reply(found("info-getjobattr-response", value))
            }
            "info-putnodeattr" => match self.put_node_attr(arg("key"), arg("value")) {
                Ok(()) => Step::Reply(reply("info-putnodeattr-response", &[("rc", "0")])),
                Err(e) => Step::Reply(error(
                    "info-putnodeattr-response",
                    &format!("{e} (keys up to {KEYLEN_MAX} bytes, values up to {VALLEN_MAX})"),
                )),
            },
            // The rank is alone on its node: nobody else could put it, so waiting for it
            // would never end.
            "info-getnodeattr" => Step::Reply(found(
                "info-getnodeattr-response",
                self.node_attrs.get(arg("key")).cloned(),
            )),
            "finalize" => Step::Finalize(reply("finalize-response", &[("rc", "0")])),
            "abort" => {
                let code = c.get("exitcode").and_then(|v| v.parse().ok()).unwrap_or(1);
                let message = c.get("message").or_else(|| c.get("msg"));
                self.aborted = Some(Abort::new(code, message));
                Step::Abort
            }
            "spawn" => Step::Reply(error("spawn-response", "spawn is not supported under prun")),
            name @ ("name-publish" | "name-unpublish" | "name-lookup") => Step::Reply(error(
                &format!("{name}-response"),
                "name publishing is not supported under prun",
            )),
            other => Step::Reply(error(
                &format!("{other}-response"),
                &format!("unknown PMI-2 command `{other}`"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{PmiJob, Wire};
    use super::*;
    use crate::ranks::RankKey;

    fn session() -> Session {
        let mut s = Session::new(PmiJob {
            key: RankKey { job_id: 7, rank: 1 },
            size: 4,
            namespace: "gang-7".into(),
        });
        s.wire = Wire::V2;
        s
    }

    fn answer(s: &mut Session, payload: &str) -> Command {
        match s.handle_v2(payload) {
            Step::Reply(r) | Step::Finalize(r) => Command::parse(&r),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn frames_and_escapes_round_trip() {
        assert_eq!(frame("cmd=x;"), "6     cmd=x;");
        let c = Command::parse("cmd=kvs-put;key=a;value=x;;y;;;");
        assert_eq!(c.get("cmd"), Some("kvs-put"));
        assert_eq!(c.get("value"), Some("x;y;"));
        let r = reply("kvs-get-response", &[("value", "a;b")]);
        assert_eq!(Command::parse(&r).get("value"), Some("a;b"));
    }

    #[tokio::test]
    async fn frames_are_read_whole_and_limited() {
        let mut input: &[u8] = b"\x0014    cmd=job-getid;14    cmd=kvs-fence;";
        let f = read_frame(&mut input, 100).await.unwrap();
        assert_eq!(f.as_deref(), Some("cmd=job-getid;"));
        assert_eq!(
            read_frame(&mut input, 100).await.unwrap().as_deref(),
            Some("cmd=kvs-fence;")
        );
        assert_eq!(read_frame(&mut input, 100).await.unwrap(), None);
        let mut big: &[u8] = b"999   cmd=";
        assert!(read_frame(&mut big, 100).await.is_err());
        let mut junk: &[u8] = b"abcdefcmd=";
        assert!(read_frame(&mut junk, 100).await.is_err());
    }

    #[test]
    fn fullinit_and_queries() {
        let mut s = session();
        let r = answer(&mut s, "cmd=fullinit;pmirank=1;threaded=FALSE;");
        assert_eq!(r.get("rc"), Some("0"));
        assert_eq!(r.get("rank"), Some("1"));
        assert_eq!(r.get("size"), Some("4"));
        assert_eq!(
            answer(&mut s, "cmd=fullinit;pmirank=2;").get("rc"),
            Some("1")
        );
        assert_eq!(
            answer(&mut s, "cmd=job-getid;").get("jobid"),
            Some("gang-7")
        );
        let m = answer(&mut s, "cmd=info-getjobattr;key=PMI_process_mapping;");
        assert_eq!(m.get("value"), Some("(vector,(0,4,1))"));
        let m = answer(&mut s, "cmd=info-getjobattr;key=nope;");
        assert_eq!(m.get("found"), Some("FALSE"));
        answer(&mut s, "cmd=info-putnodeattr;key=shm;value=/x;");
        let m = answer(&mut s, "cmd=info-getnodeattr;key=shm;wait=TRUE;");
        assert_eq!(m.get("value"), Some("/x"));
        assert_eq!(answer(&mut s, "cmd=spawn;ncmds=1;").get("rc"), Some("1"));
        assert_eq!(
            answer(&mut s, "cmd=bogus;").get("cmd"),
            Some("bogus-response")
        );
        assert_eq!(
            answer(&mut s, "cmd=finalize;").get("cmd"),
            Some("finalize-response")
        );
    }

    #[test]
    fn puts_reach_others_through_the_fence() {
        let mut s = session();
        assert_eq!(
            answer(&mut s, "cmd=kvs-put;key=P1;value=tcp;;1;").get("rc"),
            Some("0")
        );
        let g = answer(&mut s, "cmd=kvs-get;jobid=gang-7;srcid=-1;key=P0;");
        assert_eq!(g.get("found"), Some("FALSE"));
        assert_eq!(s.handle_v2("cmd=kvs-fence;"), Step::Barrier);
        let (_, puts) = s.barrier_start();
        assert_eq!(puts.get("P1").map(String::as_str), Some("tcp;1"));
        let done = s.barrier_done(Ok(std::sync::Arc::new(
            [("P0".to_string(), "a;b".to_string())].into(),
        )));
        assert_eq!(Command::parse(&done).get("rc"), Some("0"));
        let g = answer(&mut s, "cmd=kvs-get;jobid=gang-7;srcid=-1;key=P0;");
        assert_eq!(g.get("value"), Some("a;b"));
        let failed = s.barrier_done(Err("job 7 is not running".into()));
        assert_eq!(
            Command::parse(&failed).get("errmsg"),
            Some("job 7 is not running")
        );
    }

    #[test]
    fn abort_takes_its_message() {
        let mut s = session();
        let step = s.handle_v2("cmd=abort;isworld=TRUE;msg=rank 1 gave up;");
        assert_eq!(step, Step::Abort);
        let a = s.aborted.unwrap();
        assert_eq!(a.code, 1);
        assert!(a.what.ends_with(": rank 1 gave up"), "{}", a.what);
    }
}
