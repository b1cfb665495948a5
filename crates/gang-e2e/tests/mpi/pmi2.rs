//! PMI-2 under `prun --mpi pmi2`, spoken by a client nobody here wrote: Slurm's
//! `libpmi2` (Debian's `libpmi2-0-dev`; Debian's MPICH only speaks PMI-1). Every rank puts
//! a value with the wire's escaped character in it, fences, and reads every other rank's.

use std::process::Command;

use gang_e2e::{cluster, prun};

use crate::programs::text;

const CLIENT: &str = r#"
#include <slurm/pmi2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call) do { int rc_ = (call); if (rc_ != PMI2_SUCCESS) { \
    fprintf(stderr, "rank %d: %s failed: %d\n", rank, #call, rc_); return 1; } } while (0)

int main(int argc, char **argv) {
    int spawned = -1, size = -1, rank = -1, appnum = -1, found = 0, len = 0;
    char jobid[256], key[64], value[PMI2_MAX_VALLEN], want[PMI2_MAX_VALLEN];
    CHECK(PMI2_Init(&spawned, &size, &rank, &appnum));
    CHECK(PMI2_Job_GetId(jobid, sizeof jobid));
    snprintf(key, sizeof key, "card-%d", rank);
    snprintf(value, sizeof value, "rank %d; of %d", rank, size);
    CHECK(PMI2_KVS_Put(key, value));
    CHECK(PMI2_KVS_Fence());
    int errors = 0;
    for (int r = 0; r < size; r++) {
        snprintf(key, sizeof key, "card-%d", r);
        snprintf(want, sizeof want, "rank %d; of %d", r, size);
        CHECK(PMI2_KVS_Get(jobid, r, key, value, sizeof value, &len));
        if (strcmp(value, want) != 0) {
            fprintf(stderr, "rank %d: %s = '%s', want '%s'\n", rank, key, value, want);
            errors++;
        }
    }
    CHECK(PMI2_Info_GetJobAttr("PMI_process_mapping", value, sizeof value, &found));
    CHECK(PMI2_KVS_Fence());
    printf("rank %d of %d job %s spawned %d mapping %s errors %d\n", rank, size, jobid,
           spawned, found ? value : "-", errors);
    fflush(stdout);
    if (argc > 1 && rank == size - 1) {
        PMI2_Abort(1, "the last rank gives up");
    }
    CHECK(PMI2_Finalize());
    return errors != 0;
}
"#;

pub fn client() -> std::path::PathBuf {
    let dir = tempfile::Builder::new()
        .prefix("gang-pmi2-")
        .tempdir()
        .unwrap()
        .keep();
    let src = dir.join("pmi2.c");
    std::fs::write(&src, CLIENT).unwrap();
    let exe = dir.join("pmi2");
    let out = Command::new("cc")
        .arg("-O2")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-lpmi2")
        .output()
        .expect("cc runs");
    assert!(
        out.status.success(),
        "building with Slurm's libpmi2 failed (sh scripts/setup-test-deps.sh installs \
         libpmi2-0-dev): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn slurms_pmi2_client_puts_fences_and_gets_across_every_rank() {
    let c = cluster(2, 2, &[]);
    let exe = client();
    let exe = exe.to_str().unwrap();
    let out = prun(&c, &["-n", "2x2", "--mpi", "pmi2", "--", exe], None);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for r in 0..4 {
        let line = format!("rank {r} of 4 job gang-");
        let l = stdout
            .lines()
            .find(|l| l.starts_with(&line))
            .unwrap_or_else(|| panic!("no line for rank {r}:\n{stdout}\n{stderr}"));
        assert!(
            l.ends_with("spawned 0 mapping (vector,(0,4,1)) errors 0"),
            "{l}"
        );
    }
    // An abort through PMI-2 fails the job with its message.
    let out = prun(
        &c,
        &["-n", "2x2", "--mpi", "pmi2", "--", exe, "abort"],
        None,
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let jobs = gang_e2e::gangctl_json(&c, &["jobs", "--all"]).unwrap();
    let last = jobs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|j| j["id"].as_u64())
        .max();
    let job = gang_e2e::job(&c, last.expect("two jobs"));
    let reason = job["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("the last rank gives up"), "{job}");
    c.shutdown().unwrap();
}
