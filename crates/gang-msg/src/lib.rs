//! gang-msg: the messaging library job programs link under the gang
//! scheduler. Tagged point-to-point messages and collectives between the
//! ranks of a job, over Unix sockets on one host and TCP across hosts, with
//! one progress thread per process that quiesces the network before each
//! time-slice boundary the node agent publishes (see `README.md` and
//! `AGENT-INTERFACE.md`).
//!
//! ```no_run
//! let comm = gang_msg::init()?;
//! let right = (comm.rank() + 1) % comm.size();
//! comm.send(right, 7, b"hello")?;
//! let (src, tag, data) = comm.recv(None, Some(7))?;
//! comm.finalize()?;
//! # Ok::<(), gang_msg::Error>(())
//! ```

pub mod abi;
mod bootstrap;
mod collective;
mod comm;
mod config;
mod error;
mod ffi;
mod mailbox;
mod progress;
mod quiesce;
mod shared;
mod switch_state;
mod transport;
mod wire;

pub use abi::{Neighbours, Part};
pub use collective::{Op, Reducible};
pub use comm::{Comm, Received, RecvRequest, SendRequest, init};
pub use config::{Config, ContextMode, Transport};
pub use error::{Error, Result};
