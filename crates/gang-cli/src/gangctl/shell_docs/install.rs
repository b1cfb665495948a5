//! `gangctl install`: the binaries beside the running gangctl, the man pages and the shell
//! completions, each where the system looks: PREFIX/bin, PREFIX/share/man/man1 (which
//! man-db also finds from PREFIX/bin in PATH), and each shell's completion directory.
//! Files are written whole and renamed into place (a running prun is not disturbed), and
//! one already as it would be written is left alone: running it again changes nothing.

use std::path::{Path, PathBuf};

use crate::error::CliError;

/// `gangctl install`'s options.
#[derive(Debug, clap::Args)]
pub struct InstallArgs {
    /// Where to install: PREFIX/bin, PREFIX/share/man/man1, PREFIX/share/bash-completion,
    /// PREFIX/share/zsh/site-functions, PREFIX/share/fish/vendor_completions.d [default:
    /// /usr/local as root, else ~/.local].
    #[arg(long, value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    pub prefix: Option<PathBuf>,
    /// Only list what would be written.
    #[arg(long)]
    pub dry_run: bool,
}

/// The binaries installed when found beside gangctl; the first two must be.
const BINARIES: [&str; 4] = ["prun", "gangctl", "gang-master", "gang-agent"];
const REQUIRED: usize = 2;

/// What a file gets: a copy of a binary, or text.
enum Content {
    Binary(PathBuf),
    Text(String),
}

struct File {
    path: PathBuf,
    content: Content,
}

/// `gangctl install [--prefix DIR] [--dry-run]`.
pub fn install(args: &InstallArgs) -> Result<i32, CliError> {
    let prefix = prefix_of(args.prefix.as_deref())?;
    let files = plan(&prefix, &beside_gangctl()?)?;
    if args.dry_run {
        let listed: Vec<(&Path, bool)> = files.iter().map(|f| (f.path.as_path(), true)).collect();
        let mut lines = vec![format!("would install into {}:", prefix.display())];
        lines.extend(by_directory(&prefix, &listed));
        if let Err(why) = writable(&prefix, false) {
            lines.push(format!("but {why}"));
        }
        say(&lines);
        return Ok(0);
    }
    writable(&prefix, true).map_err(CliError::other)?;
    let mut done = Vec::new();
    for f in &files {
        let changed = write(f)
            .map_err(|e| CliError::other(format!("cannot write {}: {e}", f.path.display())))?;
        done.push((f.path.as_path(), changed));
    }
    let mut lines = vec![format!("installed into {}:", prefix.display())];
    lines.extend(by_directory(&prefix, &done));
    lines.extend(hints(&prefix));
    say(&lines);
    Ok(0)
}

/// Print on stdout; a closed stdout (`| head`) is not an error once the files are written.
fn say(lines: &[String]) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for l in lines {
        if writeln!(out, "{l}").is_err() {
            return;
        }
    }
}

/// One line a directory, relative to the prefix: `  bin: prun gangctl`, the files left
/// as they were marked (`(unchanged)` after all of them, or `unchanged: x y`).
fn by_directory(prefix: &Path, files: &[(&Path, bool)]) -> Vec<String> {
    let mut dirs: Vec<(&Path, Vec<String>, Vec<String>)> = Vec::new();
    for (path, changed) in files {
        let dir = path.parent().unwrap_or(Path::new("/"));
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let i = match dirs.iter().position(|d| d.0 == dir) {
            Some(i) => i,
            None => {
                dirs.push((dir, Vec::new(), Vec::new()));
                dirs.len() - 1
            }
        };
        if *changed {
            &mut dirs[i].1
        } else {
            &mut dirs[i].2
        }
        .push(name);
    }
    dirs.into_iter()
        .map(|(dir, written, kept)| {
            let dir = dir.strip_prefix(prefix).unwrap_or(dir).display();
            match (written.is_empty(), kept.is_empty()) {
                (_, true) => format!("  {dir}: {}", written.join(" ")),
                (true, false) => format!("  {dir}: {} (unchanged)", kept.join(" ")),
                (false, false) => format!(
                    "  {dir}: {} (unchanged: {})",
                    written.join(" "),
                    kept.join(" ")
                ),
            }
        })
        .collect()
}

/// The prefix asked for, absolute (the completion scripts name PREFIX/bin/gangctl), or
/// /usr/local for root and ~/.local for others.
fn prefix_of(asked: Option<&Path>) -> Result<PathBuf, CliError> {
    let p = match asked {
        Some(p) => p.to_path_buf(),
        None if nix::unistd::geteuid().is_root() => PathBuf::from("/usr/local"),
        None => match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            Some(home) => PathBuf::from(home).join(".local"),
            None => return Err(CliError::other("HOME is not set: name a --prefix")),
        },
    };
    if p.is_absolute() {
        return Ok(p);
    }
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::other(format!("cannot read the current directory: {e}")))?;
    Ok(cwd.join(p))
}

/// The directory of the running gangctl, where the build put its siblings.
fn beside_gangctl() -> Result<PathBuf, CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::other(format!("cannot tell where gangctl is: {e}")))?;
    exe.parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| CliError::other(format!("{} has no directory", exe.display())))
}

/// Every file to write, in order: binaries, man pages, completions.
fn plan(prefix: &Path, from: &Path) -> Result<Vec<File>, CliError> {
    let missing: Vec<&str> = BINARIES[..REQUIRED]
        .iter()
        .filter(|b| !from.join(b).is_file())
        .copied()
        .collect();
    if !missing.is_empty() {
        return Err(CliError::other(format!(
            "cannot install: {} not in {} (beside this gangctl); build them first: cargo build --release --workspace",
            missing.join(" and "),
            from.display()
        )));
    }
    let bin = prefix.join("bin");
    let mut files: Vec<File> = BINARIES
        .iter()
        .filter(|b| from.join(b).is_file())
        .map(|b| File {
            path: bin.join(b),
            content: Content::Binary(from.join(b)),
        })
        .collect();
    let man1 = prefix.join("share/man/man1");
    files.extend(super::pages().into_iter().map(|(name, text)| File {
        path: man1.join(name),
        content: Content::Text(text),
    }));
    let gangctl = bin.join("gangctl").display().to_string();
    let share = prefix.join("share");
    for (prog, name) in [
        (super::Program::Prun, "prun"),
        (super::Program::Gangctl, "gangctl"),
    ] {
        use clap_complete::Shell;
        for (shell, path) in [
            (Shell::Bash, format!("bash-completion/completions/{name}")),
            (Shell::Zsh, format!("zsh/site-functions/_{name}")),
            (
                Shell::Fish,
                format!("fish/vendor_completions.d/{name}.fish"),
            ),
        ] {
            files.push(File {
                path: share.join(path),
                content: Content::Text(super::complete::script(shell, prog, &gangctl)),
            });
        }
    }
    Ok(files)
}

/// Whether files can be made under `prefix`: made (with `make`), else its nearest existing
/// directory asked. The reason it cannot, for people.
fn writable(prefix: &Path, make: bool) -> Result<(), String> {
    let refuse = |why: String| {
        format!(
            "cannot install into {}: {why}; name another --prefix (~/.local needs no root), or run it as a user who may write there",
            prefix.display()
        )
    };
    let mut probe_dir = prefix.to_path_buf();
    if make {
        std::fs::create_dir_all(prefix).map_err(|e| refuse(format!("cannot make it: {e}")))?;
    } else {
        while !probe_dir.exists() {
            match probe_dir.parent() {
                Some(p) => probe_dir = p.to_path_buf(),
                None => break,
            }
        }
    }
    if !probe_dir.is_dir() {
        return Err(refuse(format!(
            "{} is not a directory",
            probe_dir.display()
        )));
    }
    if !make {
        return nix::unistd::access(&probe_dir, nix::unistd::AccessFlags::W_OK)
            .map_err(|e| refuse(format!("{} is not writable: {e}", probe_dir.display())));
    }
    // A file made and removed: access(2) would not see a read-only mount from root.
    let probe = probe_dir.join(format!(".gangctl-install-{}", std::process::id()));
    std::fs::File::create(&probe)
        .map_err(|e| refuse(format!("{} is not writable: {e}", probe_dir.display())))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Write one file, through a temporary beside it; false if it already was as it would be.
fn write(f: &File) -> std::io::Result<bool> {
    use std::os::unix::fs::PermissionsExt;
    let dir = f.path.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir)?;
    let (mode, same) = match &f.content {
        Content::Binary(src) => (0o755, same_file(src, &f.path)),
        Content::Text(t) => (
            0o644,
            std::fs::read(&f.path).is_ok_and(|old| old == t.as_bytes()),
        ),
    };
    if same {
        return Ok(false);
    }
    let name = f.path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.gangctl-install"));
    let written = match &f.content {
        Content::Binary(src) => std::fs::copy(src, &tmp).map(|_| ()),
        Content::Text(t) => std::fs::write(&tmp, t),
    }
    .and_then(|()| std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)))
    .and_then(|()| std::fs::rename(&tmp, &f.path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map(|()| true)
}

/// Whether `dest` is `src` (installing from the prefix itself) or has its bytes.
fn same_file(src: &Path, dest: &Path) -> bool {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let (Ok(a), Ok(b)) = (std::fs::metadata(src), std::fs::metadata(dest)) else {
        return false;
    };
    if (a.dev(), a.ino()) == (b.dev(), b.ino()) {
        return true;
    }
    if a.len() != b.len() {
        return false;
    }
    let (Ok(mut x), Ok(mut y)) = (std::fs::File::open(src), std::fs::File::open(dest)) else {
        return false;
    };
    let (mut bx, mut by) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = match x.read(&mut bx) {
            Ok(0) => return true,
            Ok(n) => n,
            Err(_) => return false,
        };
        if y.read_exact(&mut by[..n]).is_err() || bx[..n] != by[..n] {
            return false;
        }
    }
}

/// What the user still has to do: PREFIX/bin in PATH (man then finds the pages too), and
/// the completion directories shells do not search by themselves.
fn hints(prefix: &Path) -> Vec<String> {
    let bin = prefix.join("bin");
    let on_path = std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p)
            .any(|d| d == bin || d.canonicalize().ok() == bin.canonicalize().ok())
    });
    let mut out = Vec::new();
    if !on_path {
        out.push(format!(
            "{} is not in your PATH: add it, e.g. in ~/.profile or ~/.bashrc:\n  export PATH=\"{}:$PATH\"\n(man then finds the pages there too)",
            bin.display(),
            bin.display()
        ));
    }
    let home_local = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local"));
    let standard = prefix == Path::new("/usr/local")
        || prefix == Path::new("/usr")
        || Some(prefix) == home_local.as_deref();
    if !standard {
        let share = prefix.join("share");
        out.push(format!(
            "completions: bash-completion finds them from PATH (2.12 and newer), else add to ~/.bashrc:\n  for f in {0}/bash-completion/completions/*; do . \"$f\"; done\nzsh, before compinit: fpath=({0}/zsh/site-functions $fpath); fish: set -a fish_complete_path {0}/fish/vendor_completions.d",
            share.display()
        ));
    } else if Some(prefix) == home_local.as_deref() {
        out.push(format!(
            "zsh: add fpath=({}/share/zsh/site-functions $fpath) before compinit (bash and fish look there by themselves)",
            prefix.display()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_prefix_is_usr_local_for_root_and_dot_local_for_others() {
        let p = prefix_of(None).unwrap();
        if nix::unistd::geteuid().is_root() {
            assert_eq!(p, Path::new("/usr/local"));
        } else {
            assert!(p.ends_with(".local"), "{}", p.display());
        }
        let rel = prefix_of(Some(Path::new("x/y"))).unwrap();
        assert_eq!(rel, std::env::current_dir().unwrap().join("x/y"));
    }

    #[test]
    fn a_missing_prun_is_named() {
        let from = tempfile::tempdir().unwrap();
        std::fs::write(from.path().join("gangctl"), "").unwrap();
        let e = plan(Path::new("/p"), from.path())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("prun not in") && e.contains("cargo build"),
            "{e}"
        );
    }

    #[test]
    fn what_was_written_is_said_a_directory_a_line() {
        let p = Path::new("/p");
        let files = [
            (Path::new("/p/bin/prun"), true),
            (Path::new("/p/bin/gangctl"), false),
            (Path::new("/p/share/man/man1/prun.1"), false),
        ];
        assert_eq!(
            by_directory(p, &files),
            [
                "  bin: prun (unchanged: gangctl)",
                "  share/man/man1: prun.1 (unchanged)"
            ]
        );
    }

    #[test]
    fn writing_twice_changes_nothing_the_second_time() {
        let dir = tempfile::tempdir().unwrap();
        let f = File {
            path: dir.path().join("a/b/page.1"),
            content: Content::Text("x".into()),
        };
        assert!(write(&f).unwrap());
        assert!(!write(&f).unwrap());
        let src = dir.path().join("src");
        std::fs::write(&src, vec![7u8; 200_000]).unwrap();
        let bin = File {
            path: dir.path().join("bin/prun"),
            content: Content::Binary(src.clone()),
        };
        assert!(write(&bin).unwrap());
        assert!(!write(&bin).unwrap());
        std::fs::write(&src, vec![8u8; 200_000]).unwrap();
        assert!(write(&bin).unwrap(), "a changed binary is copied again");
        assert_eq!(std::fs::read(dir.path().join("bin/prun")).unwrap()[0], 8);
    }
}
