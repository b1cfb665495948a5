//! `LocalCluster`'s own tests: error paths and interrupts with fake daemons, no real cluster
//! needed.

use super::*;
use crate::ready::Ready;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

#[test]
fn ready_files() {
    let want = Ready {
        grpc: "127.0.0.1:4000".parse().unwrap(),
        agents: "127.0.0.1:4002".parse().unwrap(),
        socket: PathBuf::from("/tmp/x/master.sock"),
        metrics: "127.0.0.1:4001".parse().unwrap(),
        portal: None,
    };
    assert_eq!(
        parse_ready(
            "grpc=127.0.0.1:4000\nagents=127.0.0.1:4002\nsocket=/tmp/x/master.sock\nmetrics=127.0.0.1:4001\n"
        ),
        Some(want.clone())
    );
    assert_eq!(
        parse_ready(
            "metrics=http://127.0.0.1:4001/metrics\nsocket=/tmp/x/master.sock\nagents=127.0.0.1:4002\ngrpc=http://127.0.0.1:4000\n"
        ),
        Some(want)
    );
    assert_eq!(
        parse_ready("grpc=127.0.0.1:4000\nmetrics=127.0.0.1:4001\n"),
        None
    );
    assert_eq!(parse_ready(""), None);
    let with_portal = parse_ready(
        "grpc=127.0.0.1:4000\nagents=127.0.0.1:4002\nsocket=/s\nmetrics=127.0.0.1:4001\nportal=https://localhost:4000/portal/\n",
    )
    .unwrap();
    assert_eq!(
        with_portal.portal.as_deref(),
        Some("https://localhost:4000/portal/")
    );
}

#[test]
fn tails() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("log");
    let text: String = (1..=30).map(|i| format!("line {i}\n")).collect();
    std::fs::write(&p, text).unwrap();
    assert_eq!(log_tail(&p, 2), "line 29\nline 30");
    std::fs::write(&p, "").unwrap();
    assert_eq!(log_tail(&p, 2), "(empty)");
    assert!(log_tail(&dir.path().join("nope"), 2).starts_with("(cannot read"));
}

#[test]
fn missing_binaries_are_reported_before_anything_starts() {
    let empty = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let opts = LocalClusterOptions {
        bin_dir: Some(empty.path().to_path_buf()),
        dir: Some(work.path().join("cluster")),
        ..Default::default()
    };
    let e = LocalCluster::start((2, 2), opts).unwrap_err().to_string();
    assert!(e.starts_with("gang-master not found next to "), "{e}");
    assert!(e.contains(&empty.path().display().to_string()), "{e}");
    assert!(!work.path().join("cluster").exists(), "nothing created");
}

fn fake_bins(master: &str, agent: &str) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let bins = tempfile::tempdir().unwrap();
    for (name, text) in [(MASTER_BIN, master), (AGENT_BIN, agent)] {
        let p = bins.path().join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    bins
}

/// Alive, as opposed to gone or a zombie (from the one /proc reader, `proc_table`).
fn alive(pid: u32) -> bool {
    crate::proc_table::all_procs()
        .iter()
        .any(|p| p.pid == pid as i32 && p.alive())
}

#[test]
fn a_mesh_over_the_ceiling_is_refused_before_anything_starts() {
    let work = tempfile::tempdir().unwrap();
    let opts = LocalClusterOptions {
        // Not even looked for: the ceiling comes first.
        bin_dir: Some(work.path().join("no-bins")),
        dir: Some(work.path().join("cluster")),
        ..Default::default()
    };
    let e = LocalCluster::start((100, 100), opts.clone()).unwrap_err();
    let ceiling = e.downcast_ref::<CeilingError>().expect("a CeilingError");
    assert!(
        matches!(
            ceiling,
            CeilingError::TooManyAgents {
                needed: 10000,
                max_agents: 64,
                ..
            }
        ),
        "{ceiling:?}"
    );
    assert!(!work.path().join("cluster").exists(), "nothing created");

    let e = LocalCluster::start((9, 8), opts.clone()).unwrap_err();
    assert!(e.to_string().contains("max_agents 72, at most 1024"), "{e}");
    let e = LocalCluster::start(
        (1, 1),
        LocalClusterOptions {
            max_agents: MAX_AGENTS_BOUND + 1,
            ..opts
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("1025 is above 1024"), "{e}");
}

/// Fake daemons: a master that writes its ready file and sleeps; agents that never
/// register, each with a helper in its process group. An interrupt while start waits
/// for the nodes ends it at once (not after nodes_up_timeout), and every process,
/// helpers included, is gone.
#[test]
fn an_interrupt_while_waiting_for_nodes_stops_everything_at_once() {
    let master = "#!/bin/sh\n\
        while [ $# -gt 0 ]; do [ \"$1\" = --ready-file ] && ready=$2; shift; done\n\
        echo $$ > master.pids\n\
        printf 'grpc=127.0.0.1:1\\nagents=127.0.0.1:1\\nsocket=/nonexistent\\nmetrics=127.0.0.1:1\\n' > \"$ready\"\n\
        exec sleep 600\n";
    let agent = "#!/bin/sh\nsleep 600 &\necho \"$$ $!\" > agent-$$.pids\nexec sleep 600\n";
    let bins = fake_bins(master, agent);
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("cluster");
    let flag = Arc::new(AtomicBool::new(false));
    let opts = LocalClusterOptions {
        bin_dir: Some(bins.path().to_path_buf()),
        dir: Some(dir.clone()),
        nodes_up_timeout: Duration::from_secs(120),
        interrupt: Some(flag.clone()),
        ..Default::default()
    };
    let pid_files = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "pids"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let setter = {
        let dir = dir.clone();
        let flag = flag.clone();
        std::thread::spawn(move || {
            // The master and the four agents (and helpers) are up: start is waiting.
            let deadline = Instant::now() + Duration::from_secs(30);
            while pid_files(&dir).len() < 5 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            flag.store(true, Ordering::SeqCst);
            Instant::now()
        })
    };
    let e = LocalCluster::start((2, 2), opts).unwrap_err();
    let returned = Instant::now();
    let set_at = setter.join().unwrap();
    assert_eq!(
        e.downcast_ref::<Interrupted>(),
        Some(&Interrupted {
            kept_dir: Some(dir.clone())
        }),
        "{e:#}"
    );
    // Teardown included: the fake daemons die at SIGTERM.
    assert!(
        returned - set_at < Duration::from_secs(5),
        "took {:?} after the interrupt",
        returned - set_at
    );
    let pids: Vec<u32> = pid_files(&dir)
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .split_whitespace()
                .map(|w| w.parse::<u32>().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(pids.len(), 9, "master, 4 agents, 4 helpers: {pids:?}");
    // The helpers were orphaned to init (or a subreaper) when SIGKILLed: give it a
    // moment to reap them.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "still alive: {left:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A master that exits at once: the error quotes its log; nothing is left running.
#[test]
fn master_dying_early_is_reported_with_its_log() {
    let script = "#!/bin/sh\necho \"bad flag: $2\" >&2\nexit 3\n";
    let bins = fake_bins(script, script);
    let opts = LocalClusterOptions {
        bin_dir: Some(bins.path().to_path_buf()),
        ..Default::default()
    };
    let e = LocalCluster::start((1, 1), opts).unwrap_err().to_string();
    assert!(
        e.starts_with("gang-master exited with 3 before it was ready"),
        "{e}"
    );
    assert!(e.contains("bad flag: 127.0.0.1:0"), "{e}");
}
