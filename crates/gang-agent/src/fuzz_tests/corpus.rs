//! The agent targets' seeds. Regenerate with
//! `cargo test -p gang-agent --lib write_fuzz_corpus -- --ignored` (regress-* seeds stay).

use std::collections::HashMap;

use gang_msg::abi::{CtlReply, CtlRequest};
use gang_proto::v1::{self, LaunchRequest, NodeTable, SignalRequest, StdinRequest};
use prost::Message;

use super::ctl::framed;
use crate::mpi::pmi::v2::frame;

fn named(seeds: Vec<(&str, Vec<u8>)>, ext: &str) -> Vec<(String, Vec<u8>)> {
    seeds
        .into_iter()
        .map(|(n, b)| (format!("{n}.{ext}"), b))
        .collect()
}

fn lines(ls: &[&str]) -> Vec<u8> {
    ls.iter()
        .flat_map(|l| format!("{l}\n").into_bytes())
        .collect()
}

fn pmi1() -> Vec<(String, Vec<u8>)> {
    let init = "cmd=init pmi_version=1 pmi_subversion=1";
    let seeds = vec![
        (
            "mpich-startup",
            lines(&[
                init,
                "cmd=get_maxes",
                "cmd=get_appnum",
                "cmd=get_my_kvsname",
                "cmd=get_universe_size",
                "cmd=get kvsname=gang-7 key=PMI_process_mapping",
                "cmd=put kvsname=gang-7 key=P1-businesscard value=description#host$port#5000$",
                "cmd=barrier_in",
                "cmd=get kvsname=gang-7 key=P0-businesscard",
                "cmd=barrier_in",
                "cmd=finalize",
            ]),
        ),
        (
            "init-v3",
            lines(&["cmd=init pmi_version=3 pmi_subversion=0"]),
        ),
        (
            "put-limits",
            lines(&[
                init,
                &format!("cmd=put kvsname=gang-7 key={} value=x", "k".repeat(64)),
                &format!("cmd=put kvsname=gang-7 key={} value=x", "k".repeat(65)),
                &format!("cmd=put kvsname=gang-7 key=v value={}", "v".repeat(1024)),
                &format!("cmd=put kvsname=gang-7 key=v value={}", "v".repeat(1025)),
                "cmd=put kvsname=gang-7 value=nokey",
            ]),
        ),
        (
            "unknown",
            lines(&[init, "cmd=bogus a=b", "cmd=a=b", "cmd=", "hello", ""]),
        ),
        (
            "spawn",
            lines(&[
                init,
                "mcmd=spawn",
                "nprocs=2",
                "execname=/bin/true",
                "endcmd",
                "cmd=spawn nprocs=1",
            ]),
        ),
        (
            "abort",
            lines(&[
                init,
                "cmd=abort exitcode=3 message=application called MPI_Abort(MPI_COMM_WORLD, 3)",
            ]),
        ),
        (
            "nul-crlf",
            b"\0cmd=init pmi_version=1\r\ncmd=get_maxes\r\n".to_vec(),
        ),
        ("no-newline", b"cmd=init pmi_version=1".to_vec()),
        (
            "long-line",
            format!("cmd=put key=k value={}\n", "v".repeat(4000)).into_bytes(),
        ),
    ];
    named(seeds, "txt")
}

fn pmi2() -> Vec<(String, Vec<u8>)> {
    let init = b"cmd=init pmi_version=2 pmi_subversion=0\n".to_vec();
    let session = |frames: &[&str]| {
        let mut b = init.clone();
        for f in frames {
            b.extend(frame(f).into_bytes());
        }
        b
    };
    let seeds = vec![
        (
            "mpich-startup",
            session(&[
                "cmd=fullinit;pmirank=1;threaded=FALSE;",
                "cmd=job-getid;",
                "cmd=info-getjobattr;key=PMI_process_mapping;",
                "cmd=info-getjobattr;key=universeSize;",
                "cmd=kvs-put;key=P1-businesscard;value=tcp;;host;;5000;",
                "cmd=kvs-fence;",
                "cmd=kvs-get;jobid=gang-7;srcid=-1;key=P0-businesscard;",
                "cmd=info-putnodeattr;key=shm;value=/dev/shm/x;",
                "cmd=info-getnodeattr;key=shm;wait=TRUE;",
                "cmd=finalize;",
            ]),
        ),
        (
            "refusals",
            session(&[
                "cmd=fullinit;pmirank=2;",
                "cmd=spawn;ncmds=1;",
                "cmd=name-publish;name=x;port=y;",
                "cmd=bogus;",
                "cmd=a;;b;",
                "x=y;",
                "",
            ]),
        ),
        (
            "put-limits",
            session(&[
                &format!("cmd=kvs-put;key={};value=x;", "k".repeat(65)),
                &format!("cmd=kvs-put;key=k;value={};", "v".repeat(1025)),
                &format!("cmd=info-putnodeattr;key={};value=x;", "k".repeat(65)),
                "cmd=kvs-put;value=nokey;",
            ]),
        ),
        (
            "abort",
            session(&["cmd=abort;isworld=TRUE;exitcode=4;msg=rank 1 gave up;"]),
        ),
        ("nul-before-frame", {
            let mut b = init.clone();
            b.push(0);
            b.extend(frame("cmd=job-getid;").into_bytes());
            b
        }),
        ("bad-length", {
            let mut b = init.clone();
            b.extend(b"999999cmd=job-getid;");
            b
        }),
        ("short-frame", {
            let mut b = init.clone();
            b.extend(b"40    cmd=job-getid;");
            b
        }),
    ];
    named(seeds, "bin")
}

fn ctl() -> Vec<(String, Vec<u8>)> {
    let hello = CtlRequest::Hello { pid: 4242, rank: 1 };
    let put = CtlRequest::Put {
        key: "ep-1".into(),
        value: "10.0.0.2:5000/abcdef".into(),
    };
    let frames = |reqs: &[CtlRequest]| -> Vec<u8> { reqs.iter().flat_map(framed).collect() };
    let seeds = vec![
        (
            "bootstrap",
            frames(&[hello.clone(), put.clone(), CtlRequest::Fence]),
        ),
        (
            "abort",
            frames(&[
                hello.clone(),
                CtlRequest::Abort {
                    code: 3,
                    message: "gave up".into(),
                },
            ]),
        ),
        (
            "put-over",
            frames(&[
                CtlRequest::Put {
                    key: "k".repeat(257),
                    value: "v".into(),
                },
                CtlRequest::Fence,
                CtlRequest::Fence,
            ]),
        ),
        (
            "reply-fence-done",
            framed(&CtlReply::FenceDone {
                kvs: [("ep-0".to_string(), "10.0.0.1:5000".to_string())].into(),
            }),
        ),
        (
            "reply-error",
            framed(&CtlReply::Error {
                message: "fence failed".into(),
            }),
        ),
        ("huge-length", (16u32 << 20).to_le_bytes().to_vec()),
        ("over-max", ((16u32 << 20) + 1).to_le_bytes().to_vec()),
        ("short-body", {
            let mut b = 100u32.to_le_bytes().to_vec();
            b.extend(br#"{"Fence"#);
            b
        }),
        ("not-json", {
            let mut b = 3u32.to_le_bytes().to_vec();
            b.extend(b"\xff\xfe\0");
            b
        }),
    ];
    named(seeds, "bin")
}

fn launch() -> Vec<(String, Vec<u8>)> {
    let ok = LaunchRequest {
        job_id: 7,
        rank: 3,
        size: 4,
        argv: vec!["/bin/hostname".into(), "-f".into()],
        cwd: "/data".into(),
        env: HashMap::from([
            ("PATH".to_string(), "/usr/bin:/bin".to_string()),
            ("HOME".to_string(), "/home/alice".to_string()),
        ]),
        uid: 1000,
        gid: 100,
        groups: vec![100, 27],
        user: "alice".into(),
        stdin: true,
        gang: v1::GangMode::Freeze as i32,
        part: Some(v1::Submesh {
            x: 1,
            y: 2,
            w: 2,
            h: 2,
        }),
        msg_context: v1::MsgContext::SaveRestore as i32,
        mpi: v1::Mpi::Pmix as i32,
        mpi_check: true,
        output: "%j.%r.out".into(),
        error: String::new(),
        namespace: "gang-0a1b2c3d-7".into(),
        fence_width: 0,
        fence_parent: String::new(),
        allocation: 0,
        script: String::new(),
        script_at: 0,
        pty: v1::Pty::None as i32,
    };
    let with = |f: &dyn Fn(&mut LaunchRequest)| {
        let mut r = ok.clone();
        f(&mut r);
        r.encode_to_vec()
    };
    let seeds = vec![
        ("ok", ok.encode_to_vec()),
        ("empty", Vec::new()),
        ("argv-empty", with(&|r| r.argv.clear())),
        ("argv0-empty", with(&|r| r.argv[0].clear())),
        ("argv-nul", with(&|r| r.argv.push("a\0b".into()))),
        ("cwd-relative", with(&|r| r.cwd = "data".into())),
        ("cwd-nul", with(&|r| r.cwd = "/da\0ta".into())),
        (
            "env-equals",
            with(&|r| {
                r.env.insert("A=B".into(), "1".into());
            }),
        ),
        (
            "env-value-nul",
            with(&|r| {
                r.env.insert("A".into(), "1\0".into());
            }),
        ),
        ("root", with(&|r| r.uid = 0)),
        (
            "uid-max",
            with(&|r| {
                r.uid = u32::MAX;
                r.gid = u32::MAX;
            }),
        ),
        (
            "size-huge",
            with(&|r| {
                r.size = u32::MAX;
                r.part = None;
            }),
        ),
        ("size-zero", with(&|r| r.size = 0)),
        ("rank-past-size", with(&|r| r.rank = 4)),
        (
            "part-overflow",
            with(&|r| {
                r.part = Some(v1::Submesh {
                    x: u32::MAX,
                    y: 0,
                    w: 2,
                    h: 2,
                });
            }),
        ),
        (
            "part-small",
            with(&|r| {
                r.part = Some(v1::Submesh {
                    x: 0,
                    y: 0,
                    w: 1,
                    h: 1,
                });
            }),
        ),
        (
            "mpi-unknown",
            with(&|r| {
                r.mpi = 99;
                r.gang = 99;
                r.msg_context = -1;
            }),
        ),
        ("output-nul", with(&|r| r.output = "%j\0.out".into())),
    ];
    named(seeds, "bin")
}

fn node_table() -> Vec<(String, Vec<u8>)> {
    let ok = NodeTable {
        version: 3,
        epoch_ns: 1_700_000_000_000_000_000,
        quantum_ns: 100_000_000,
        effective_ns: 1_700_000_000_500_000_000,
        rows: vec![1, 2, 0],
        parked: vec![3],
    };
    let with = |f: &dyn Fn(&mut NodeTable)| {
        let mut t = ok.clone();
        f(&mut t);
        t.encode_to_vec()
    };
    let seeds = vec![
        ("ok", ok.encode_to_vec()),
        ("version-0", with(&|t| t.version = 0)),
        ("quantum-short", with(&|t| t.quantum_ns = 999_999)),
        ("quantum-max", with(&|t| t.quantum_ns = i64::MAX)),
        ("epoch-min", with(&|t| t.epoch_ns = i64::MIN)),
        ("epoch-max", with(&|t| t.epoch_ns = i64::MAX)),
        ("effective-max", with(&|t| t.effective_ns = i64::MAX)),
        ("all-parked", with(&|t| t.rows.clear())),
        ("empty", Vec::new()),
    ];
    named(seeds, "bin")
}

#[test]
#[ignore = "writes fuzz/corpus/{pmi1_wire,pmi2_wire,ctl_frame,proto_launch,...}"]
fn write_fuzz_corpus() {
    gang_fuzz::write_seeds("pmi1_wire", &pmi1());
    gang_fuzz::write_seeds("pmi2_wire", &pmi2());
    gang_fuzz::write_seeds("ctl_frame", &ctl());
    gang_fuzz::write_seeds("proto_launch", &launch());
    gang_fuzz::write_seeds("proto_node_table", &node_table());
    let signal = vec![
        (
            "term",
            SignalRequest {
                job_id: 7,
                grace_ms: 5000,
            }
            .encode_to_vec(),
        ),
        (
            "grace-max",
            SignalRequest {
                job_id: u64::MAX,
                grace_ms: u32::MAX,
            }
            .encode_to_vec(),
        ),
        ("empty", Vec::new()),
    ];
    gang_fuzz::write_seeds("proto_signal", &named(signal, "bin"));
    let stdin = vec![
        (
            "data",
            StdinRequest {
                job_id: 7,
                data: b"hello\n".to_vec(),
                eof: false,
            }
            .encode_to_vec(),
        ),
        (
            "eof",
            StdinRequest {
                job_id: 7,
                data: vec![],
                eof: true,
            }
            .encode_to_vec(),
        ),
        ("empty", Vec::new()),
    ];
    gang_fuzz::write_seeds("proto_stdin", &named(stdin, "bin"));
}
