//! Each implementation's build preloaded into an MPI program of that implementation run
//! as a singleton (no prun, no agent): the state page it writes, read as the agent reads
//! it, in a directory made the way the agent makes it: each build proved without a
//! cluster (the e2e tests run both under prun).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gang_mpi_check::{Impl, install};
use gang_msg::abi::{StatePage, StateSnapshot, files};

/// One exchange with itself (a nonblocking receive completed by MPI_Waitall), a barrier,
/// then a receive no one will ever send to: blocked for good on source 0, tag 9.
const PROGRAM: &str = r#"
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int x = 7, y = 0;
    MPI_Request r[2];
    MPI_Irecv(&y, 1, MPI_INT, 0, 3, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(&x, 1, MPI_INT, 0, 3, MPI_COMM_WORLD, &r[1]);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("got %d\n", y);
    fflush(stdout);
    MPI_Recv(&y, 1, MPI_INT, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Finalize();
    return 0;
}
"#;

/// Thousands of nonblocking receives outstanding at once (the request table grows),
/// completed in a shuffled order by MPI_Wait, MPI_Waitany and MPI_Testsome (entries
/// leave from anywhere in it), and persistent requests started three times: every one
/// counted once. Then blocked for good, on tag 9, in an MPI_Waitall whose other receive
/// has its message: delivered already, or the job could never be seen stuck.
const MANY_REQUESTS: &str = r#"
#include <mpi.h>
#include <stdlib.h>
enum { N = 3000 };
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    static int in[N], out[N], order[N];
    static MPI_Request rr[N], sr[N];
    for (int i = 0; i < N; i++) {
        MPI_Irecv(&in[i], 1, MPI_INT, 0, i, MPI_COMM_WORLD, &rr[i]);
        order[i] = i;
    }
    for (int i = N - 1; i >= 0; i--) {
        out[i] = i;
        MPI_Isend(&out[i], 1, MPI_INT, 0, i, MPI_COMM_WORLD, &sr[i]);
    }
    MPI_Waitall(N, sr, MPI_STATUSES_IGNORE);
    unsigned seed = 12345;
    for (int i = N - 1; i > 0; i--) {
        seed = seed * 1103515245u + 12345u;
        int j = (int)(seed % (unsigned)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int i = 0; i < N / 3; i++) MPI_Wait(&rr[order[i]], MPI_STATUS_IGNORE);
    int idx, done = N / 3, outcount, indices[N];
    for (int i = 0; i < N / 3; i++, done++) MPI_Waitany(N, rr, &idx, MPI_STATUS_IGNORE);
    while (done < N) {
        MPI_Testsome(N, rr, &outcount, indices, MPI_STATUSES_IGNORE);
        if (outcount != MPI_UNDEFINED) done += outcount;
    }
    for (int i = 0; i < N; i++)
        if (in[i] != i) return 2;
    int x = 1, y = 0;
    MPI_Request p[2];
    MPI_Recv_init(&y, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, &p[0]);
    MPI_Send_init(&x, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, &p[1]);
    for (int k = 0; k < 3; k++) {
        MPI_Startall(2, p);
        MPI_Waitall(2, p, MPI_STATUSES_IGNORE);
    }
    MPI_Request_free(&p[0]);
    MPI_Request_free(&p[1]);
    /* Waited for by parts: each status where MPI_Waitall puts it. */
    MPI_Request q[4];
    MPI_Status st[4];
    int v[4], w4[4];
    for (int i = 0; i < 4; i++) MPI_Irecv(&v[i], 1, MPI_INT, 0, 100 + i, MPI_COMM_WORLD, &q[i]);
    for (int i = 3; i >= 0; i--) {
        w4[i] = 10 * i;
        MPI_Send(&w4[i], 1, MPI_INT, 0, 100 + i, MPI_COMM_WORLD);
    }
    MPI_Waitall(4, q, st);
    for (int i = 0; i < 4; i++)
        if (st[i].MPI_TAG != 100 + i || st[i].MPI_SOURCE != 0 || v[i] != 10 * i) return 3;
    /* A Waitall over a receive that has its message and one that never will. */
    MPI_Request w[3];
    MPI_Irecv(&y, 1, MPI_INT, 0, 8, MPI_COMM_WORLD, &w[0]);
    MPI_Irecv(&x, 1, MPI_INT, 0, 9, MPI_COMM_WORLD, &w[1]);
    MPI_Isend(&x, 1, MPI_INT, 0, 8, MPI_COMM_WORLD, &w[2]);
    MPI_Wait(&w[2], MPI_STATUS_IGNORE);
    MPI_Waitall(2, w, MPI_STATUSES_IGNORE);
    MPI_Finalize();
    return 0;
}
"#;

fn build(imp: Impl, dir: &Path) -> PathBuf {
    build_source(imp, dir, PROGRAM)
}

fn build_source(imp: Impl, dir: &Path, source: &str) -> PathBuf {
    let src = dir.join("prog.c");
    let exe = dir.join("prog");
    std::fs::write(&src, source).unwrap();
    let out = Command::new(imp.mpicc())
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("{} does not run: {e}", imp.mpicc()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(exe: &Path, preload: &Path, msg_dir: &Path) -> Killed {
    Killed(
        Command::new(exe)
            .env("LD_PRELOAD", preload)
            .env("GANG_MSG_DIR", msg_dir)
            // Open MPI refuses root without these (the tests may run as root).
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// Run `source` (built with `imp`) under `imp`'s library until its page shows it blocked
/// on tag 9; that picture, checked to stay the same.
fn blocked_forever_on_tag_nine(imp: Impl, source: &str) -> StateSnapshot {
    let tmp = tempfile::tempdir().unwrap();
    let exe = build_source(imp, tmp.path(), source);
    let lib = install(&tmp.path().join("lib"), imp).unwrap();
    let msg_dir = tmp.path().join("msg");
    std::fs::create_dir(&msg_dir).unwrap();
    let page = StatePage::create(&msg_dir.join(files::STATE_PAGE)).unwrap();
    let child = spawn(&exe, &lib, &msg_dir);
    let pid = child.0.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    let want = |s: &StateSnapshot| s.ready && s.blocked_since_ns != 0 && s.wait_tag == 9;
    let snap = loop {
        let s = page.snapshot();
        if want(&s) {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "{}: the page never showed the rank blocked on tag 9: {s:?}",
            imp.name()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(snap.pid, pid, "{snap:?}");
    assert_eq!((snap.wait_src, snap.wait_tag), (0, 9), "{snap:?}");
    // Blocked stays blocked: the same picture later (what the master's check needs).
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(page.snapshot(), snap);
    snap
}

#[test]
fn mpich_build_writes_the_state_page_of_a_singleton() {
    let snap = blocked_forever_on_tag_nine(Impl::Mpich, PROGRAM);
    // The one message it sent itself, received; the barrier of one member is no message.
    assert_eq!((snap.posted_sends, snap.delivered), (1, 1), "{snap:?}");
}

#[test]
fn open_mpi_build_writes_the_state_page_of_a_singleton() {
    let snap = blocked_forever_on_tag_nine(Impl::OpenMpi, PROGRAM);
    assert_eq!((snap.posted_sends, snap.delivered), (1, 1), "{snap:?}");
}

#[test]
fn thousands_of_requests_completed_in_any_order_are_each_counted_once() {
    for imp in [Impl::Mpich, Impl::OpenMpi] {
        let snap = blocked_forever_on_tag_nine(imp, MANY_REQUESTS);
        assert_eq!(
            (snap.posted_sends, snap.delivered),
            (3008, 3008),
            "{}: {snap:?}",
            imp.name()
        );
    }
}

#[test]
fn the_wrong_implementations_build_refuses_to_run_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = build(Impl::OpenMpi, tmp.path());
    let lib = install(&tmp.path().join("lib"), Impl::Mpich).unwrap();
    let out = Command::new(&exe).env("LD_PRELOAD", &lib).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{err}");
    assert!(
        err.contains("linked with Open MPI") && err.contains("prun --mpi pmix"),
        "{err}"
    );
}

#[test]
fn without_a_messaging_directory_the_program_runs_unchecked() {
    // Not under prun (no GANG_MSG_DIR): the wrappers only forward.
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("ok.c");
    std::fs::write(
        &src,
        "#include <mpi.h>\n#include <stdio.h>\nint main(int c, char **v) { MPI_Init(&c, &v); int x = 1, y = 0; MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD); printf(\"sum %d\\n\", y); MPI_Finalize(); return 0; }\n",
    )
    .unwrap();
    let exe = tmp.path().join("ok");
    assert!(
        Command::new(Impl::Mpich.mpicc())
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .status()
            .unwrap()
            .success()
    );
    let lib = install(&tmp.path().join("lib"), Impl::Mpich).unwrap();
    let out = Command::new(&exe).env("LD_PRELOAD", &lib).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "sum 1\n");
}
