//! Another user's ranks and the root agent, from an ordinary user's shell on the node:
//! signals, /proc, ptrace-level reads, the messaging directory and sockets, the cgroup
//! files; and what a rank can send the agent's control socket and the master.

use super::*;
use gang_proto::v1::job_service_client::JobServiceClient;
use gang_proto::v1::{JobSpec, SubmitRequest};

/// One line per attack: `ok NAME` where it was refused, `BREACH NAME` where it worked.
const ATTACKS: &str = r#"
try() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "BREACH $name"; else echo "ok $name"; fi; }
try stop-rank kill -STOP "$RANK"
try kill-rank kill -KILL "$RANK"
try kill-agent kill -KILL "$AGENT"
try rank-environ cat "/proc/$RANK/environ"
try rank-maps cat "/proc/$RANK/maps"
try rank-mem dd if="/proc/$RANK/mem" of=/dev/null bs=1 count=1 skip=4096
try agent-environ cat "/proc/$AGENT/environ"
try agent-fds ls "/proc/$AGENT/fd"
try msg-dir ls "$MSGDIR"
try ctl-socket python3 -c "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])" "$MSGDIR/ctl.sock"
try state-page-by-agent-fd sh -c "exec 3<>/proc/$AGENT/fd/0"
for f in freezer.state cgroup.freeze cgroup.procs cgroup.kill; do
  if [ -e "$CGROUP/$f" ]; then try "cgroup-$f" sh -c "echo 1 > '$CGROUP/$f'"; fi
done
echo attacks done
"#;

/// A rank of user B, and B's root agent, under attack by user A on the same node: every
/// attempt is refused, and B's job runs to its end undisturbed.
#[test]
fn another_users_ranks_and_the_agent_are_out_of_reach() {
    if !root() {
        return;
    }
    let mut accounts = accounts();
    let victim = accounts.user("nv", &[]);
    let mallory = accounts.user("nm", &[]);
    let (mut c, _sockets) = shared_cluster(1, 1, |_| {});
    let agent = c.agent_pid(0, 0).expect("the agent runs");
    // Freeze mode: the rank gets a cgroup of its own (where the node has a freezer).
    let report = r#"echo "pid $$"; echo "dir $GANG_MSG_DIR"; sed -n 's/^[0-9]*:[a-z,]*freezer:\(.*\)/cg1 \1/p; s/^0::\(.*\)/cg2 \1/p' /proc/self/cgroup; sleep 4; echo done"#;
    let out = as_user(
        &c,
        &victim,
        "prun",
        &[
            "-n", "1", "--detach", "--gang", "freeze", "--", "sh", "-c", report,
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    let lines = gang_e2e::wait_for(Duration::from_secs(30), "the victim's report", || {
        let o = stdout(&gang_e2e::gangctl(&c, &["output", &id]));
        (o.contains("dir ") && o.contains("cg")).then_some(o)
    });
    let field = |k: &str| {
        lines
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k} ")))
            .map(str::to_string)
    };
    let rank = field("pid").expect("the rank's pid");
    let msg_dir = field("dir").expect("the rank's messaging directory");
    let cgroup = match (field("cg1"), field("cg2")) {
        (Some(p), _) => format!("/sys/fs/cgroup/freezer{p}"),
        (None, Some(p)) => format!("/sys/fs/cgroup{p}"),
        _ => panic!("no cgroup line in {lines}"),
    };
    let mut sh = command_as(std::path::Path::new("/bin/sh"), &mallory);
    sh.args(["-c", ATTACKS])
        .env("RANK", &rank)
        .env("AGENT", agent.to_string())
        .env("MSGDIR", &msg_dir)
        .env("CGROUP", &cgroup);
    let out = output_within(&mut sh, LIMIT);
    let said = stdout(&out);
    assert!(said.ends_with("attacks done\n"), "{said}{}", stderr(&out));
    assert!(!said.contains("BREACH"), "{said}");
    for name in [
        "stop-rank",
        "kill-agent",
        "rank-mem",
        "msg-dir",
        "ctl-socket",
    ] {
        assert!(
            said.contains(&format!("ok {name}\n")),
            "{name} not tried: {said}"
        );
    }
    // The victim's job ends as it would have, on the same agent.
    let job = gang_e2e::wait_state(
        &c,
        id.parse().unwrap(),
        "completed",
        Duration::from_secs(60),
    );
    assert_eq!(job["exit_code"], 0, "{job}");
    assert!(stdout(&gang_e2e::gangctl(&c, &["output", &id])).ends_with("done\n"));
    c.check_alive().expect("every daemon is alive");
    assert_eq!(c.agent_pid(0, 0), Some(agent));
}

/// A rank's own control socket, fed what a broken or hostile library would send (a frame
/// claiming 4 GiB, a frame that is not JSON, a request of the wrong shape): the agent
/// closes that connection and goes on; nothing else notices.
#[test]
fn malformed_frames_on_the_control_socket_cost_only_that_connection() {
    if !root() {
        return;
    }
    let mut accounts = accounts();
    let mallory = accounts.user("nc", &[]);
    let (mut c, _sockets) = shared_cluster(1, 1, |_| {});
    let agent = c.agent_pid(0, 0).expect("the agent runs");
    let script = r#"
import os, socket, struct
path = os.environ["GANG_MSG_DIR"] + "/ctl.sock"
for name, frame in [
    ("huge", struct.pack("<I", 0xFFFFFFFF) + b"x" * 64),
    ("not-json", struct.pack("<I", 5) + b"{bad}"),
    ("wrong-shape", struct.pack("<I", 13) + b'{"Nope":true}'),
    ("truncated", struct.pack("<I", 1000) + b"{}"),
]:
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(frame)
    s.shutdown(socket.SHUT_WR)
    s.settimeout(30)
    try:
        while s.recv(4096):
            pass
        print(name, "closed")
    except ConnectionResetError:
        # Closed with our bytes unread: a reset, which is a close too.
        print(name, "closed")
    except OSError as e:
        print(name, "error", e)
print("alive")
"#;
    let out = as_user(
        &c,
        &mallory,
        "prun",
        &["-n", "1", "--", "python3", "-c", script],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "huge closed\nnot-json closed\nwrong-shape closed\ntruncated closed\nalive\n",
        "{}",
        stderr(&out)
    );
    assert_agent_carries_on(&mut c, agent, &mallory);
}

/// A request far over the master's message limit is refused with a clear error and
/// costs the master nothing; the same user's next request is answered.
#[test]
fn an_oversized_request_is_refused_and_the_master_goes_on() {
    if !root() {
        return;
    }
    let mut accounts = accounts();
    let mallory = accounts.user("no", &[]);
    let (mut c, sockets) = shared_cluster(1, 1, |_| {});
    let socket = sockets.path().join("master.sock");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut jobs = JobServiceClient::new(accounts::channel_as(&socket, &mallory).await);
        let huge = JobSpec {
            shape: "1".into(),
            argv: vec!["true".into(), "x".repeat(64 << 20)],
            cwd: "/".into(),
            ..Default::default()
        };
        let e = jobs
            .submit(SubmitRequest {
                spec: Some(huge),
                ..Default::default()
            })
            .await
            .expect_err("64 MiB is over the limit");
        assert!(
            matches!(
                e.code(),
                tonic::Code::ResourceExhausted | tonic::Code::OutOfRange | tonic::Code::Internal
            ) && e.message().contains("message"),
            "{e:?}"
        );
    });
    c.check_alive().expect("every daemon is alive");
    let out = as_user(&c, &mallory, "prun", &["-n", "1", "--", "echo", "after"]);
    assert_eq!(stdout(&out), "after\n", "{}", stderr(&out));
}
