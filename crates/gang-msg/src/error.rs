//! What the library can fail with, each error naming what went wrong.

use std::io;

/// Everything the library can fail with, each naming what went wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{var}: {reason}")]
    Env { var: &'static str, reason: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("control socket: {0}")]
    Ctl(String),
    #[error("rank {rank} is not in this job of {size} ranks")]
    BadRank { rank: usize, size: usize },
    #[error("tag {0} is reserved: user tags are >= 0")]
    BadTag(i32),
    #[error("message of {len} bytes does not fit a buffer of {cap}")]
    Truncated { len: usize, cap: usize },
    #[error("message of {0} bytes is larger than the 4 GiB limit")]
    TooLarge(usize),
    #[error("transport: {0}")]
    Transport(String),
    #[error("the library is not initialised (or was finalized)")]
    NotInitialised,
    #[error("collective: {0}")]
    Collective(String),
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
