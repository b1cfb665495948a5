//! `prun --output`: a rank's file is opened by the rank, as its user, so it lands where
//! the user may write and nowhere else, even though the agents run as root.

use super::*;

#[test]
fn output_files_are_opened_as_the_submitter() {
    if !root() {
        return;
    }
    // Declared first, dropped last: after the cluster and the ranks running as them.
    let mut accounts = Accounts::new();
    let a = accounts.user("of", &[]);
    let sockets = socket_dir();
    let socket = sockets.path().join("master.sock");
    let c = cluster_with(2, 1, |o| o.socket = Some(socket.clone()));

    // In A's home (prun's working directory), A's files.
    let out = as_user(
        &c,
        &a,
        "prun",
        &["-n", "2x1", "-o", "%j-%r.out", "--", "sh", "-c", "id -u"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "", "the output went to the files");
    let files: Vec<PathBuf> = std::fs::read_dir(&a.home)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "out"))
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    for f in files {
        let meta = std::fs::metadata(&f).unwrap();
        assert_eq!(meta.uid(), a.uid, "{} belongs to A", f.display());
        assert_eq!(std::fs::read_to_string(&f).unwrap(), format!("{}\n", a.uid));
    }

    // A directory of root's that A may read but not write: the job fails naming the file,
    // and nothing is written there.
    let closed = tempfile::tempdir().unwrap();
    std::fs::set_permissions(closed.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let pattern = format!("{}/%r.out", closed.path().display());
    let out = as_user(&c, &a, "prun", &["-n", "1", "-o", &pattern, "--", "true"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let want = format!(
        "node (0,0): output file {}/0.out: Permission denied (os error 13)",
        closed.path().display()
    );
    assert!(
        stderr(&out).contains(&want),
        "{want:?} not in {}",
        stderr(&out)
    );
    assert!(!closed.path().join("0.out").exists());
}
