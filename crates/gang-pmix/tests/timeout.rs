//! A stalled library costs only the calls that need it, within their timeout. The stall
//! is the real one: a connection to the library's socket that never sends its handshake
//! holds the library's progress thread in a blocking read (what any local user could do
//! before the gate; here the test goes around the gate, as the server's own user).

use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gang_pmix::{Error, FenceDone, Host, Registration, Server, ServerConfig};

struct NoRanks;

impl Host for NoRanks {
    fn fence(&self, _: &str, _: Vec<u8>, _: bool, _: FenceDone) {}
    fn abort(&self, _: &str, _: u32, _: i32, _: String) {}
    fn client(&self, _: &str, _: u32, _: bool) {}
}

fn registration(job: u64) -> Registration {
    let me = std::fs::metadata("/proc/self").unwrap();
    Registration {
        nspace: format!("gang-{job}"),
        size: 1,
        my_rank: 0,
        nodes: vec!["gang-0-0".into()],
        uid: me.uid(),
        gid: me.gid(),
    }
}

#[test]
fn a_stalled_library_fails_registrations_within_the_timeout_and_recovers_when_freed() {
    // Short enough for a test, long enough that a loaded host's real registration (a few
    // milliseconds) never reaches it.
    let timeout = Duration::from_secs(5);
    let dir = tempfile::tempdir().unwrap();
    let config = ServerConfig {
        tmpdir: dir.path().to_path_buf(),
        node_name: "gang-0-0".into(),
        server_nspace: "gang-agent-0-0".into(),
        server_rank: 0,
        call_timeout: timeout,
    };
    let server = match Server::start(&config, Arc::new(NoRanks)) {
        Err(Error::NotBuilt) if !gang_pmix::AVAILABLE => return,
        r => r.expect("the server starts"),
    };
    server
        .prepare_blocking(registration(1))
        .expect("registered");

    // The stall: the library's listen thread accepts this, and its progress thread waits
    // for a handshake that never comes.
    let stall = UnixStream::connect(server.inner_socket()).unwrap();
    // Registering waits on the progress thread: until the connection is picked up the
    // library may still answer, so try until one call times out (each within its bound).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut job = 2;
    let first = loop {
        let t = Instant::now();
        let r = server.prepare_blocking(registration(job));
        let took = t.elapsed();
        assert!(took < timeout + Duration::from_secs(5), "waited {took:?}");
        match r {
            Ok(_) => server.deregister(&format!("gang-{job}"), 0),
            Err(e) => break e,
        }
        assert!(Instant::now() < deadline, "the library never stalled");
        job += 1;
    };
    assert!(
        matches!(&first, Error::NotAnswering { what, waited }
            if what == &format!("registering rank 0 of gang-{job}") && *waited == timeout),
        "{first:?}"
    );
    assert!(
        first.to_string().starts_with("PMIx server not answering: "),
        "{first}"
    );
    // Once a call has outlived the timeout, the next fails at once, naming it: the
    // registration that timed out, or the deregistration of the job before it, queued
    // ahead of it on the library's thread, if that is where the stall caught the library.
    // The stuck call may have begun a moment after the registration that timed out was
    // queued, so one more call may still wait out its bound; the one after fails at once.
    let mut tries = 0;
    let next = loop {
        let t = Instant::now();
        let e = server
            .prepare_blocking(registration(100 + tries))
            .unwrap_err();
        let took = t.elapsed();
        if took < Duration::from_secs(1) {
            break e;
        }
        assert!(took < timeout + Duration::from_secs(5), "waited {took:?}");
        tries += 1;
        assert!(
            tries < 2,
            "a second call after the timeout still waited ({e})"
        );
    };
    let stuck = [
        format!("registering rank 0 of gang-{job} (still running)"),
        format!("deregistering rank 0 of gang-{} (still running)", job - 1),
    ];
    assert!(
        stuck.iter().any(|s| next.to_string().contains(s.as_str())),
        "{next}"
    );

    // Freed: the library reads the end of the connection, the queued registration goes
    // through (and its deregistration after it), and new ones are answered again.
    drop(stall);
    server.deregister(&format!("gang-{job}"), 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match server.prepare_blocking(registration(200)) {
            Ok(env) => {
                assert!(
                    env.iter()
                        .any(|(k, v)| k == "PMIX_NAMESPACE" && v == "gang-200")
                );
                break;
            }
            Err(e) => assert!(Instant::now() < deadline, "still stalled: {e}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
