use super::*;

fn page(name: &str) -> String {
    pages()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no page {name}"))
        .1
}

/// The roff of one section: from its `.SH` to the next.
fn section<'a>(page: &'a str, title: &str) -> &'a str {
    let head = format!(".SH {title}\n");
    let head_quoted = format!(".SH \"{title}\"\n");
    let start = page
        .find(&head)
        .or_else(|| page.find(&head_quoted))
        .unwrap_or_else(|| panic!("no section {title} in:\n{page}"));
    let rest = &page[start + 1..];
    &rest[..rest.find("\n.SH ").map_or(rest.len(), |i| i + 1)]
}

#[test]
fn man_pages_for_both_commands_and_each_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let written = man_pages(dir.path()).unwrap();
    let names: Vec<String> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in [
        "prun.1",
        "gangctl.1",
        "gangctl-cancel.1",
        "gangctl-jobs.1",
        "gangctl-install.1",
        "gangctl-certs-init.1",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
    let prun = std::fs::read_to_string(dir.path().join("prun.1")).unwrap();
    assert!(prun.contains(".TH prun 1"), "{prun}");
    assert_eq!(
        prun.matches(".ds Aq").count(),
        2,
        "roff's preamble once: {prun}"
    );
    assert!(prun.contains("time\\-limit"), "options in the page");
}

#[test]
fn the_synopsis_has_every_spelling_of_the_options_and_their_values() {
    let prun = page("prun.1");
    let synopsis = section(&prun, "SYNOPSIS");
    for spelling in [
        "\\-N",
        "\\-n",
        "\\-\\-nodes",
        "\\-t",
        "\\-\\-time",
        "\\-\\-time\\-limit",
    ] {
        assert!(
            synopsis.contains(&format!("\\fB{spelling}\\fR")),
            "{spelling} in {synopsis}"
        );
    }
    assert!(synopsis.contains("\\fISHAPE\\fR") && synopsis.contains("\\fIDURATION\\fR"));
    assert!(synopsis.contains("\\fICMD\\fR..."), "{synopsis}");
    assert!(synopsis.contains("\\-\\-ntasks"), "{synopsis}");
    // The aliases are told in OPTIONS too, which clap_mangen leaves out.
    assert!(section(&prun, "OPTIONS").contains("Also spelled \\-\\-time."));
    let jobs = page("gangctl-jobs.1");
    assert!(
        section(&jobs, "SYNOPSIS").contains("\\fBgangctl jobs\\fR"),
        "{jobs}"
    );
}

#[test]
fn prun_lists_what_it_reads_and_what_every_rank_is_given() {
    let prun = page("prun.1");
    let env = section(&prun, "ENVIRONMENT");
    for var in [
        "GANG_MASTER",
        "GANG_TIMEOUT",
        "GANG_ALLOCATION_ID",
        "GANG_CONFIG",
        "GANG_RANK",
        "GANG_SIZE",
        "GANG_JOB_ID",
        "GANG_NODE",
        "GANG_ARRAY_TASK_ID",
        "PMI_RANK",
    ] {
        assert!(env.contains(&format!("\\fB{var}\\fR")), "{var} in {env}");
    }
    assert!(env.contains("Given to every rank"), "{env}");
    let exits = section(&prun, "EXIT STATUS");
    for code in ["124", "130", "143", "1", "2"] {
        assert!(
            exits.contains(&format!("\\fB{code}\\fR")),
            "{code} in {exits}"
        );
    }
    let examples = section(&prun, "EXAMPLES");
    assert!(
        examples.contains("prun \\-n 4x2 \\-\\- ./a.out"),
        "{examples}"
    );
    assert!(
        !prun.contains("Exit status:"),
        "the after_help's exit status is the section's"
    );
}

#[test]
fn gangctl_pages_say_what_it_reads_and_what_scripts_are_given() {
    let gangctl = page("gangctl.1");
    let env = section(&gangctl, "ENVIRONMENT");
    for var in ["GANG_MASTER", "GANG_OUTPUT", "GANG_TIMEOUT", "GANG_TOKEN"] {
        assert!(env.contains(&format!("\\fB{var}\\fR")), "{var} in {env}");
    }
    assert!(!env.contains("GANG_RANK"), "ranks are prun's page's");
    // gangctl's page has an example of every command that has some.
    let examples = section(&gangctl, "EXAMPLES");
    for ex in ["gangctl jobs 12", "gangctl cancel 12", "gangctl install"] {
        assert!(
            examples.contains(&ex.replace('-', "\\-")),
            "{ex} in {examples}"
        );
    }
    let submit = page("gangctl-submit.1");
    let env = section(&submit, "ENVIRONMENT");
    assert!(env.contains("batch script") && env.contains("\\fBGANG_ALLOCATION_ID\\fR"));
    assert!(section(&submit, "EXAMPLES").contains("#GANG \\-n 4x4"));
    let start = page("gangctl-start.1");
    assert!(section(&start, "EXIT STATUS").contains("130 (SIGINT)"));
    let init = page("gangctl-certs-init.1");
    assert!(
        section(&init, "NOTES").contains("ca\\-key.pem offline"),
        "{init}"
    );
}

/// What the completion engine offers for `line` (its last word being completed).
fn complete(prog: Program, line: &str) -> Vec<String> {
    let mut words: Vec<std::ffi::OsString> = line.split(' ').map(Into::into).collect();
    if line.ends_with(' ') {
        words.pop();
        words.push("".into());
    }
    let index = words.len() - 1;
    let mut cmd = command_of(prog);
    clap_complete::engine::complete(&mut cmd, words, index, None)
        .unwrap()
        .into_iter()
        .map(|c| c.get_value().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn states_formats_and_modes_complete() {
    let g = Program::Gangctl;
    assert_eq!(complete(g, "gangctl jobs --state ru"), ["running"]);
    assert!(complete(g, "gangctl jobs --state ").contains(&"PD".to_string()));
    assert_eq!(complete(g, "gangctl cancel -s running,P"), ["running,PD"]);
    assert_eq!(complete(g, "gangctl acct --state F,t"), ["F,timeout"]);
    assert_eq!(complete(g, "gangctl acct -o jobid,ela"), ["jobid,elapsed"]);
    assert_eq!(
        complete(g, "gangctl acct --format JobID,Elap"),
        ["JobID,elapsed"]
    );
    assert_eq!(complete(g, "gangctl --output j"), ["json"]);
    assert_eq!(complete(g, "gangctl inst"), ["install"]);
    assert_eq!(complete(g, "gangctl output 3 --stream stde"), ["stderr"]);
    let p = Program::Prun;
    assert!(complete(p, "prun --time-l").contains(&"--time-limit".to_string()));
    assert_eq!(complete(p, "prun --mpi pm"), ["pmi1", "pmi2", "pmix"]);
}

#[test]
fn every_state_offered_is_one_the_filter_takes() {
    for (word, _) in complete::STATES {
        crate::jobs::job_filter::parse_states(word).unwrap();
    }
    use gang_proto::v1::JobState;
    for s in [
        JobState::Queued,
        JobState::Starting,
        JobState::Running,
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Timeout,
    ] {
        assert!(
            complete::STATES.iter().any(|(w, _)| *w == s.label()),
            "{} offered",
            s.label()
        );
    }
}

#[test]
fn the_scripts_call_gangctl_for_each_program() {
    use clap_complete::Shell;
    let bash = complete::script(Shell::Bash, Program::Prun, "/p/bin/gangctl");
    assert!(bash.contains("GANG_COMPLETE_PRUN=\"bash\""), "{bash}");
    assert!(bash.contains("/p/bin/gangctl") && bash.contains("_clap_complete_prun prun"));
    let zsh = complete::script(Shell::Zsh, Program::Gangctl, "gangctl");
    assert!(zsh.starts_with("#compdef gangctl"), "{zsh}");
    assert!(
        zsh.contains("if [ \"$funcstack[1]\" = \"_gangctl\" ]"),
        "an autoloaded _gangctl completes at its first Tab: {zsh}"
    );
    let fish = complete::script(Shell::Fish, Program::Gangctl, "gangctl");
    assert!(fish.contains("--command gangctl") && fish.contains("GANG_COMPLETE=fish"));
}
