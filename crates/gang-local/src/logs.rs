//! Log tails and exit statuses, for errors that say what went wrong.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use anyhow::anyhow;
use nix::sys::signal::Signal;

/// Lines of a log quoted in errors.
pub(crate) const TAIL_LINES: usize = 20;

/// The last `lines` lines of a file (at most its last 64 KiB), for error messages.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let read = || -> std::io::Result<String> {
        let mut f = File::open(path)?;
        let len = f.metadata()?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    };
    match read() {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            let tail = &all[all.len().saturating_sub(lines)..];
            if tail.is_empty() {
                "(empty)".into()
            } else {
                tail.join("\n")
            }
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

pub(crate) fn with_tail(msg: String, log: &Path) -> anyhow::Error {
    anyhow!(
        "{msg}; last lines of {}:\n{}",
        log.display(),
        log_tail(log, TAIL_LINES)
    )
}

pub(crate) fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with {c}"),
        (None, Some(s)) => format!(
            "was killed by {}",
            Signal::try_from(s)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|_| format!("signal {s}"))
        ),
        _ => format!("ended ({status})"),
    }
}

// The one printer of error chains lives with the client, below this crate.
pub use gang_proto::client::error_chain;
