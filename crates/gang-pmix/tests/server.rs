//! The real library in this process: started once, a job registered, the rank's
//! variables given, the job forgotten. (Fences and aborts need ranks: the e2e tests in
//! crates/gang-e2e/tests/mpi/openmpi.rs run Open MPI programs against it.)

use std::sync::Arc;

use gang_pmix::{Error, FenceDone, Host, Job, Server, ServerConfig};

struct NoRanks;

impl Host for NoRanks {
    fn fence(&self, _: &str, _: Vec<u8>, _: FenceDone) {}
    fn abort(&self, _: &str, _: u32, _: i32, _: String) {}
    fn client(&self, _: &str, _: u32, _: bool) {}
}

#[test]
fn a_job_is_registered_and_its_rank_gets_the_variables_to_reach_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let config = ServerConfig {
        tmpdir: dir.path().to_path_buf(),
        node_name: "gang-1-0".into(),
        server_nspace: "gang-agent-1-0".into(),
        server_rank: 0,
    };
    let server = match Server::start(&config, Arc::new(NoRanks)) {
        Err(Error::NotBuilt) if !gang_pmix::AVAILABLE => return,
        r => r.expect("the server starts"),
    };
    assert_eq!(
        Server::start(&config, Arc::new(NoRanks)).err(),
        Some(Error::AlreadyStarted)
    );
    let nodes: Vec<String> = ["gang-0-0", "gang-1-0", "gang-0-1", "gang-1-1"]
        .map(String::from)
        .to_vec();
    let job = Job {
        nspace: "gang-9",
        size: 4,
        my_rank: 1,
        nodes: &nodes,
    };
    let (uid, gid) = (unsafe { libc::geteuid() }, unsafe { libc::getegid() });
    server.register(&job, uid, gid).expect("registered");
    let env = server.setup_fork("gang-9", 1).expect("setup_fork");
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("PMIX_NAMESPACE"), Some("gang-9"), "{env:?}");
    assert_eq!(get("PMIX_RANK"), Some("1"), "{env:?}");
    assert!(
        env.iter().any(|(k, _)| k.starts_with("PMIX_SERVER_URI")),
        "{env:?}"
    );
    // A node list that does not match the size is refused before the library sees it.
    let short = Job {
        nodes: &nodes[..2],
        ..job
    };
    assert!(matches!(
        server.register(&short, uid, gid),
        Err(Error::BadName(_))
    ));
    server.deregister("gang-9", 1);
}
