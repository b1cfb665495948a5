//! Which MPI a rank's program uses, told from its file: what `--mpi auto` decides by.
//! Open MPI finds its peers only through a PMIx server and starts as a singleton
//! without one, saying nothing; MPICH needs only the simple protocol. So the agent reads
//! the libraries the program's ELF dynamic section names (`DT_NEEDED`): its direct
//! dependencies, which is how `mpicc` links an MPI program. Only the headers, the
//! section table and `.dynamic` with its strings are read, not the whole file.
//!
//! What cannot be told from the file is said so (`Unseen`): a script, or a shell,
//! interpreter or launcher (`sh -c`, `python3`, `env`), which runs something else that
//! may well be an MPI program. The launch then serves what an MPI program could need.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use object::elf::{DT_NEEDED, FileHeader32, FileHeader64};
use object::read::elf::FileHeader;
use object::{Endianness, FileKind, ReadCache, ReadRef};

/// What a program links, as far as MPI goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgramMpi {
    /// Open MPI, or PMIx itself: served only by a PMIx server. The library is the first
    /// of its dynamic section that says so (`libmpi.so.40`).
    OpenMpi(String),
    /// MPICH, or an MPI of MPICH's ABI (`libmpi.so.12`: Intel MPI, MVAPICH): the simple
    /// protocol serves it.
    Mpich(String),
    /// An ELF program that links no MPI. A statically linked program is one too: static
    /// MPI programs are rare (Open MPI's build does not support it well), static Go or
    /// Rust tools are not.
    NoMpi,
    /// What it runs cannot be told from its file.
    Unseen(Unseen),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unseen {
    /// A `#!` script.
    Script,
    /// A shell, an interpreter or a launcher, by its name: it runs another program.
    Launcher(String),
    /// Not ELF, or not one the agent could read.
    Unreadable(String),
}

impl std::fmt::Display for ProgramMpi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProgramMpi::OpenMpi(lib) => write!(f, "Open MPI ({lib})"),
            ProgramMpi::Mpich(lib) => write!(f, "MPICH ({lib})"),
            ProgramMpi::NoMpi => f.write_str("no MPI"),
            ProgramMpi::Unseen(Unseen::Script) => f.write_str("a script"),
            ProgramMpi::Unseen(Unseen::Launcher(name)) => write!(f, "a launcher ({name})"),
            ProgramMpi::Unseen(Unseen::Unreadable(why)) => write!(f, "unreadable ({why})"),
        }
    }
}

/// Programs that run other programs: a rank started as `sh -c '... ./a.out'`, `python3
/// prog.py` (mpi4py loads MPI with dlopen) or `env VAR=1 ./a.out` links no MPI itself.
/// Matched on the file name, and on the name of the file a symlink leads to
/// (`/bin/sh` -> `dash`, `python3` -> `python3.11`), with a version suffix taken off.
const LAUNCHERS: &[&str] = &[
    // Shells.
    "sh",
    "bash",
    "dash",
    "zsh",
    "ksh",
    "mksh",
    "csh",
    "tcsh",
    "fish",
    "busybox",
    // Interpreters.
    "python",
    "pypy",
    "perl",
    "ruby",
    "julia",
    "R",
    "Rscript",
    "node",
    "nodejs",
    "lua",
    "luajit",
    "tclsh",
    "java",
    // Wrappers that exec their arguments.
    "env",
    "time",
    "nice",
    "nohup",
    "timeout",
    "stdbuf",
    "taskset",
    "numactl",
    "chrt",
    "ionice",
    "setsid",
    "flock",
    "xargs",
    "valgrind",
    "strace",
    "ltrace",
    "gdb",
    "perf",
    "apptainer",
    "singularity",
];

/// Read what `program` links. Never fails: what cannot be read is `Unseen`, and the
/// spawn reports a missing or unrunnable file in its own words.
pub fn inspect(program: &Path) -> ProgramMpi {
    let libs = match needed(program) {
        Ok(Some(libs)) => libs,
        Ok(None) => return ProgramMpi::Unseen(Unseen::Script),
        Err(why) => return ProgramMpi::Unseen(Unseen::Unreadable(why)),
    };
    match classify(&libs) {
        ProgramMpi::NoMpi => match launcher(program) {
            Some(name) => ProgramMpi::Unseen(Unseen::Launcher(name)),
            None => ProgramMpi::NoMpi,
        },
        mpi => mpi,
    }
}

/// The MPI that libraries of a dynamic section (`DT_NEEDED`) name; Open MPI wins over
/// MPICH in a program that somehow links both, since it is the one that fails silently.
pub fn classify<S: AsRef<str>>(libs: &[S]) -> ProgramMpi {
    let libs = || libs.iter().map(AsRef::as_ref);
    if let Some(lib) = libs().find(|l| is_open_mpi(l)) {
        return ProgramMpi::OpenMpi(lib.to_string());
    }
    if let Some(lib) = libs().find(|l| is_mpich(l)) {
        return ProgramMpi::Mpich(lib.to_string());
    }
    ProgramMpi::NoMpi
}

/// Open MPI's libraries (`libmpi.so.40` since 3.0, `.20` in 2.x; the Fortran and C++
/// bindings `libmpi_mpifh.so.40`, `libmpi_usempif08.so.40`, `libmpi_cxx.so.40`), its
/// runtime (`libopen-pal`, `libopen-rte`) and PMIx's client library.
fn is_open_mpi(lib: &str) -> bool {
    let open_mpi_abi = |rest: &str| !rest.starts_with("12");
    lib.strip_prefix("libmpi.so.").is_some_and(open_mpi_abi)
        || (lib.starts_with("libmpi_")
            && lib.contains(".so.")
            && !lib.contains(".so.12")
            // MPI 5's standard ABI (MPICH 4.2 ships it): not Open MPI's.
            && !lib.starts_with("libmpi_abi"))
        || ["libopen-pal.so", "libopen-rte.so", "libpmix.so"]
            .iter()
            .any(|p| lib.starts_with(p))
}

/// MPICH's libraries (`libmpich.so.12`, `libmpichfort`, `libmpichcxx`) and those of
/// MPICH's ABI (`libmpi.so.12`, `libmpifort.so.12`, `libmpicxx.so.12`: Intel MPI).
fn is_mpich(lib: &str) -> bool {
    lib.starts_with("libmpich") || (lib.starts_with("libmpi") && lib.contains(".so.12"))
}

/// The launcher `program` is, if it is one, by its name or the name its symlinks lead
/// to.
fn launcher(program: &Path) -> Option<String> {
    let named = |p: &Path| {
        let name = p.file_name()?.to_str()?;
        let stem = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.' || c == '-');
        LAUNCHERS.contains(&stem).then(|| name.to_string())
    };
    named(program).or_else(|| named(&std::fs::canonicalize(program).ok()?))
}

/// The libraries `program`'s dynamic section names; None for a `#!` script.
fn needed(program: &Path) -> Result<Option<Vec<String>>, String> {
    // O_NONBLOCK: a FIFO where the program should be must not hang the launch (the
    // spawn then fails on it); a regular file reads as it would without the flag.
    let mut file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(program)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut magic = [0u8; 4];
    file.read_exact(&mut magic).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => "shorter than any program".to_string(),
        _ => e.to_string(),
    })?;
    if magic.starts_with(b"#!") {
        return Ok(None);
    }
    let cache = ReadCache::new(file);
    let data = &cache;
    let libs = match FileKind::parse(data) {
        Ok(FileKind::Elf32) => needed_of::<FileHeader32<Endianness>, _>(data),
        Ok(FileKind::Elf64) => needed_of::<FileHeader64<Endianness>, _>(data),
        _ => return Err("not an ELF file".into()),
    };
    libs.map(Some)
        .map_err(|e| format!("not a readable ELF file: {e}"))
}

fn needed_of<'data, Elf, R>(data: R) -> object::read::Result<Vec<String>>
where
    Elf: FileHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    let header = Elf::parse(data)?;
    let endian = header.endian()?;
    let table = header.sections(endian, data)?.dynamic_table(endian, data)?;
    table
        .iter()
        .filter(|d| d.tag == DT_NEEDED)
        .map(|d| {
            let name = table.string(d)?;
            Ok(String::from_utf8_lossy(name).into_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;
    use std::process::Command;

    use super::*;

    const HELLO: &str = "#include <mpi.h>\n\
        int main(int c, char **v) { MPI_Init(&c, &v); MPI_Finalize(); return 0; }\n";

    /// An MPI program built by `mpicc` in `dir`: the MPIs as installed here
    /// (scripts/setup-test-deps.sh installs both).
    fn build(mpicc: &str, dir: &Path) -> PathBuf {
        let src = dir.join("hello.c");
        std::fs::write(&src, HELLO).unwrap();
        let exe = dir.join(mpicc.replace('.', "-"));
        let out = Command::new(mpicc)
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .output()
            .unwrap_or_else(|e| {
                panic!("{mpicc} does not run ({e}): sh scripts/setup-test-deps.sh installs it")
            });
        assert!(
            out.status.success(),
            "{mpicc}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        exe
    }

    #[test]
    fn real_programs_are_told_apart_by_the_mpi_they_link() {
        let dir = tempfile::tempdir().unwrap();
        let open_mpi = build("mpicc.openmpi", dir.path());
        let mpich = build("mpicc.mpich", dir.path());
        assert_eq!(
            inspect(&open_mpi),
            ProgramMpi::OpenMpi("libmpi.so.40".into())
        );
        assert_eq!(inspect(&mpich), ProgramMpi::Mpich("libmpich.so.12".into()));
        assert_eq!(inspect(Path::new("/bin/true")), ProgramMpi::NoMpi);
        let script = dir.path().join("run.sh");
        std::fs::write(&script, "#!/bin/sh\nexec ./a.out\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(inspect(&script), ProgramMpi::Unseen(Unseen::Script));
    }

    #[test]
    fn shells_and_interpreters_are_launchers_through_their_symlinks_too() {
        let dir = tempfile::tempdir().unwrap();
        // /bin/sh is dash on Debian: the link's name and the file's both say so.
        assert_eq!(
            inspect(Path::new("/bin/sh")),
            ProgramMpi::Unseen(Unseen::Launcher("sh".into()))
        );
        let link = dir.path().join("run-it");
        std::os::unix::fs::symlink("/usr/bin/env", &link).unwrap();
        assert_eq!(
            inspect(&link),
            ProgramMpi::Unseen(Unseen::Launcher("env".into()))
        );
        // Another name is not one.
        let renamed = dir.path().join("hostname2");
        std::fs::copy("/bin/true", &renamed).unwrap();
        assert_eq!(inspect(&renamed), ProgramMpi::NoMpi);
    }

    #[test]
    fn what_cannot_be_read_is_unseen_and_a_fifo_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert_eq!(
            inspect(&fifo),
            ProgramMpi::Unseen(Unseen::Unreadable("not a regular file".into()))
        );
        let text = dir.path().join("notes");
        std::fs::write(&text, "hello world\n").unwrap();
        assert_eq!(
            inspect(&text),
            ProgramMpi::Unseen(Unseen::Unreadable("not an ELF file".into()))
        );
        assert!(matches!(
            inspect(&dir.path().join("missing")),
            ProgramMpi::Unseen(Unseen::Unreadable(_))
        ));
        // An ELF header with nothing behind it.
        let cut = dir.path().join("cut");
        let mut head = std::fs::read("/bin/true").unwrap();
        head.truncate(64);
        std::fs::write(&cut, head).unwrap();
        let got = inspect(&cut);
        assert!(
            matches!(&got, ProgramMpi::Unseen(Unseen::Unreadable(w)) if w.starts_with("not a readable ELF file")),
            "{got:?}"
        );
    }

    #[test]
    fn sonames_name_their_mpi() {
        let open_mpi = |l: &str| ProgramMpi::OpenMpi(l.into());
        let mpich = |l: &str| ProgramMpi::Mpich(l.into());
        assert_eq!(
            classify(&["libc.so.6", "libmpi.so.40"]),
            open_mpi("libmpi.so.40")
        );
        assert_eq!(
            classify(&["libmpi_mpifh.so.40"]),
            open_mpi("libmpi_mpifh.so.40")
        );
        assert_eq!(classify(&["libmpi.so.20"]), open_mpi("libmpi.so.20"));
        assert_eq!(
            classify(&["libopen-pal.so.40"]),
            open_mpi("libopen-pal.so.40")
        );
        assert_eq!(classify(&["libpmix.so.2"]), open_mpi("libpmix.so.2"));
        assert_eq!(classify(&["libmpich.so.12"]), mpich("libmpich.so.12"));
        assert_eq!(
            classify(&["libmpichfort.so.12"]),
            mpich("libmpichfort.so.12")
        );
        // Intel MPI and MVAPICH keep MPICH's ABI under Open MPI's name.
        assert_eq!(classify(&["libmpi.so.12"]), mpich("libmpi.so.12"));
        assert_eq!(classify(&["libmpifort.so.12"]), mpich("libmpifort.so.12"));
        assert_eq!(
            classify(&["libmpich.so.12", "libpmix.so.2"]),
            open_mpi("libpmix.so.2")
        );
        assert_eq!(classify(&["libc.so.6", "libmpfr.so.6"]), ProgramMpi::NoMpi);
        assert_eq!(classify::<&str>(&[]), ProgramMpi::NoMpi);
    }
}
