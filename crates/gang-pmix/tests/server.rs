//! The real library in this process: started once, a job registered, the rank's
//! variables given, the job forgotten. (Fences and aborts need ranks: the e2e tests in
//! crates/gang-e2e/tests/mpi/openmpi.rs run Open MPI programs against it.)

use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::Duration;

use gang_pmix::{Error, FenceDone, Host, Registration, Server, ServerConfig};

struct NoRanks;

impl Host for NoRanks {
    fn fence(&self, _: &str, _: Vec<u8>, _: bool, _: FenceDone) {}
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
        call_timeout: Duration::from_secs(30),
    };
    let server = match Server::start(&config, Arc::new(NoRanks)) {
        Err(Error::NotBuilt) if !gang_pmix::AVAILABLE => return,
        r => r.expect("the server starts"),
    };
    assert_eq!(
        Server::start(&config, Arc::new(NoRanks)).err(),
        Some(Error::AlreadyStarted)
    );
    // The library accepts behind the gate, where only this user may go.
    let inner = server.inner_socket();
    let gate_dir = std::fs::metadata(inner.parent().unwrap()).unwrap();
    assert_eq!(gate_dir.mode() & 0o777, 0o700);
    assert!(std::fs::symlink_metadata(&inner).is_ok(), "{inner:?}");

    let me = std::fs::metadata("/proc/self").unwrap();
    let reg = Registration {
        nspace: "gang-9".into(),
        size: 4,
        my_rank: 1,
        nodes: ["gang-0-0", "gang-1-0", "gang-0-1", "gang-1-1"]
            .map(String::from)
            .to_vec(),
        uid: me.uid(),
        gid: me.gid(),
    };
    let env = server.prepare_blocking(reg.clone()).expect("registered");
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("PMIX_NAMESPACE"), Some("gang-9"), "{env:?}");
    assert_eq!(get("PMIX_RANK"), Some("1"), "{env:?}");
    // The URI ranks are given is the gate's: the library's port, now accepted on by it.
    let uri = get("PMIX_SERVER_URI41").expect("a URI");
    assert!(uri.contains(";tcp4://127.0.0.1:"), "{uri}");
    // A node list that does not match the size is refused before the library sees it.
    let short = Registration {
        nodes: reg.nodes[..2].to_vec(),
        ..reg
    };
    assert!(matches!(
        server.prepare_blocking(short),
        Err(Error::BadName(_))
    ));
    server.deregister("gang-9", 1);
}
