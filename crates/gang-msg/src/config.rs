//! The rank's configuration, read once from the environment the agent set.

use std::net::IpAddr;
use std::path::PathBuf;

use crate::abi::{DEFAULT_GRACE_US, DEFAULT_LEAD_US, Part, env};
use crate::error::Error;

/// What happens to the network context at a switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextMode {
    /// Connections and buffers stay in place while the job is stopped.
    Resident,
    /// Buffers are copied out and connections closed at the quiesce, and
    /// everything is brought back after the boundary.
    SaveRestore,
}

/// Which transport pairs of ranks use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Unix sockets on the same host, TCP across hosts.
    Auto,
    /// TCP between every pair (tests).
    Tcp,
    /// Unix sockets only; no TCP listener is opened (single-host jobs).
    Unix,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub job_id: String,
    pub rank: usize,
    pub size: usize,
    pub part: Part,
    /// `GANG_MSG_DIR`; `None` only for a single rank started by hand.
    pub dir: Option<PathBuf>,
    /// `GANG_STATE_FD`: the state page the agent passed (else `state.page` in `dir`).
    pub state_fd: Option<i32>,
    pub host_id: String,
    pub context: ContextMode,
    pub lead_ns: u64,
    pub grace_ns: u64,
    pub flush: bool,
    pub transport: Transport,
    pub spin_us: u64,
    pub tcp_addr: Option<IpAddr>,
}

fn var(name: &'static str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn parse<T: std::str::FromStr>(name: &'static str, default: Option<T>) -> Result<T, Error> {
    match var(name) {
        Some(v) => v.trim().parse().map_err(|_| Error::Env {
            var: name,
            reason: format!("cannot parse {v:?}"),
        }),
        None => default.ok_or(Error::Env {
            var: name,
            reason: "not set".into(),
        }),
    }
}

impl Config {
    /// Read the environment. Without `GANG_SIZE` the process is a job of one
    /// rank with no agent (handy for running an example by hand).
    pub fn from_env() -> Result<Config, Error> {
        let standalone = var(env::SIZE).is_none();
        let size: usize = parse(env::SIZE, Some(1))?;
        let rank: usize = parse(env::RANK, standalone.then_some(0))?;
        if size == 0 || rank >= size {
            return Err(Error::Env {
                var: env::RANK,
                reason: format!("rank {rank} is not below size {size}"),
            });
        }
        let part = part_from_env(size)?;
        let dir = var(env::MSG_DIR).map(PathBuf::from);
        if dir.is_none() && !standalone {
            return Err(Error::Env {
                var: env::MSG_DIR,
                reason: "not set (the agent creates it for every rank)".into(),
            });
        }
        let state_fd = state_fd_from_env()?;
        let context = context_from_env()?;
        let flush = flush_from_env()?;
        let transport = transport_from_env()?;
        Ok(Config {
            job_id: var(env::JOB_ID).unwrap_or_else(|| "0".into()),
            rank,
            size,
            part,
            dir,
            state_fd,
            host_id: var(env::HOST_ID).unwrap_or_else(|| "localhost".into()),
            context,
            lead_ns: parse::<u64>(env::MSG_LEAD_US, Some(DEFAULT_LEAD_US))? * 1000,
            grace_ns: parse::<u64>(env::MSG_GRACE_US, Some(DEFAULT_GRACE_US))? * 1000,
            flush,
            transport,
            spin_us: parse(env::MSG_SPIN_US, Some(0))?,
            tcp_addr: match var(env::MSG_TCP_ADDR) {
                Some(v) => Some(v.parse().map_err(|_| Error::Env {
                    var: env::MSG_TCP_ADDR,
                    reason: format!("{v:?} is not an IP address"),
                })?),
                None => None,
            },
        })
    }
}

/// `GANG_PART`: the rank's rectangle of the job's part, which must hold every rank.
fn part_from_env(size: usize) -> Result<Part, Error> {
    let part = match var(env::PART) {
        Some(p) => Part::parse(&p).ok_or(Error::Env {
            var: env::PART,
            reason: format!("{p:?} is not x0,y0,w,h"),
        })?,
        // No rectangle given: a row of `size` cells.
        None => Part {
            x0: 0,
            y0: 0,
            w: size as u32,
            h: 1,
        },
    };
    if (part.w as usize) * (part.h as usize) < size {
        return Err(Error::Env {
            var: env::PART,
            reason: format!("{}x{} holds fewer than {size} ranks", part.w, part.h),
        });
    }
    Ok(part)
}

/// `GANG_STATE_FD`: the state page's descriptor, when the agent passed one.
fn state_fd_from_env() -> Result<Option<i32>, Error> {
    Ok(match var(env::STATE_FD) {
        None => None,
        Some(v) => Some(
            v.parse::<i32>()
                .ok()
                .filter(|fd| *fd >= 0)
                .ok_or_else(|| Error::Env {
                    var: env::STATE_FD,
                    reason: format!("{v:?} is not a descriptor number"),
                })?,
        ),
    })
}

/// `GANG_MSG_CONTEXT`: resident (the default) or save-restore.
fn context_from_env() -> Result<ContextMode, Error> {
    Ok(match var(env::MSG_CONTEXT).as_deref() {
        None | Some("resident") => ContextMode::Resident,
        Some("save-restore") => ContextMode::SaveRestore,
        Some(v) => {
            return Err(Error::Env {
                var: env::MSG_CONTEXT,
                reason: format!("{v:?} is not resident or save-restore"),
            });
        }
    })
}

/// `GANG_MSG_FLUSH`: on (the default) or off.
fn flush_from_env() -> Result<bool, Error> {
    Ok(match var(env::MSG_FLUSH).as_deref() {
        None | Some("on") | Some("1") => true,
        Some("off") | Some("0") => false,
        Some(v) => {
            return Err(Error::Env {
                var: env::MSG_FLUSH,
                reason: format!("{v:?} is not on or off"),
            });
        }
    })
}

/// `GANG_MSG_TRANSPORT`: auto (the default), tcp or unix.
fn transport_from_env() -> Result<Transport, Error> {
    Ok(match var(env::MSG_TRANSPORT).as_deref() {
        None | Some("auto") => Transport::Auto,
        Some("tcp") => Transport::Tcp,
        Some("unix") => Transport::Unix,
        Some(v) => {
            return Err(Error::Env {
                var: env::MSG_TRANSPORT,
                reason: format!("{v:?} is not auto, tcp or unix"),
            });
        }
    })
}
