//! PMIx direct modex (issue 37): an Open MPI job told not to collect its data at fences
//! (`pmix_base_async_modex=1`, `pmix_base_collect_data=0`) fences as a barrier only, and a
//! rank's data is fetched from the node that runs it when a peer first sends to it
//! (`NodeRelay.Modex`). The default, collecting every blob at each fence, still works.

use gang_e2e::{cluster, metric, prun_env};

use crate::programs::{Impl, check, text};

const DIRECT: [(&str, &str); 3] = [
    ("OMPI_MCA_pmix_base_async_modex", "1"),
    ("OMPI_MCA_pmix_base_collect_data", "0"),
    ("OMPI_MCA_mpi_yield_when_idle", "1"),
];

/// The bytes of fences through the master so far (counted as it answers each: before
/// the job ends).
fn fence_bytes(c: &gang_local::LocalCluster) -> f64 {
    metric(c, "gang_fence_bytes_total", &["path=\"master\""])
}

/// How many direct modex requests the agents answered, from their logs.
fn served(c: &gang_local::LocalCluster) -> usize {
    [(0, 0), (1, 0), (0, 1), (1, 1)]
        .into_iter()
        .map(|(x, y)| {
            std::fs::read_to_string(c.agent_log(x, y))
                .unwrap()
                .matches("PMIx direct modex served")
                .count()
        })
        .sum()
}

fn ring(c: &gang_local::LocalCluster, env: &[(&str, &str)]) {
    let prog = crate::programs::program(Impl::OpenMpi);
    let out = prun_env(
        c,
        &[
            "-n",
            "2x2",
            "--mpi",
            "pmix",
            "--",
            prog.to_str().unwrap(),
            "ring",
        ],
        None,
        env,
    );
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "ring failed ({:?}):\n{stdout}\n{stderr}",
        out.status
    );
    check(&stdout, 4, "ring");
}

#[test]
fn open_mpi_with_direct_modex_fetches_peers_data_and_fences_carry_no_blob() {
    // Fences at the master, whose bytes it counts (among the agents, the default, the
    // same job fetches the same way: the other Open MPI tests run there).
    let c = cluster(2, 2, &["--fences", "master"]);
    // The default: every blob through every fence, none fetched.
    let before = fence_bytes(&c);
    ring(&c, &[DIRECT[2]]);
    let collected = fence_bytes(&c) - before;
    assert_eq!(served(&c), 0, "a collecting job fetched data");

    let before = fence_bytes(&c);
    ring(&c, &DIRECT);
    let direct = fence_bytes(&c) - before;
    // Ring neighbours run on other nodes: each rank's first send needs one's data.
    let n = served(&c);
    assert!(n >= 4, "only {n} direct modex requests served");
    // What fences still carry: each rank's agent's address, once (a few dozen bytes a
    // rank, and the first answer's copy of all of them to every rank), and the fences'
    // framing; not the ranks' blobs (measured: 700 bytes against 3103).
    eprintln!("fence bytes: collect {collected}, direct {direct}; {n} served");
    assert!(
        collected > 0.0,
        "the collecting job's fences never reached the master"
    );
    assert!(
        direct * 2.0 < collected,
        "direct modex fences carried {direct} bytes, the collecting job's {collected}"
    );
    c.shutdown().unwrap();
}
