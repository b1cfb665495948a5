//! Fuzz targets of the agent (fuzz/README.md lists them all): what a rank sends on its
//! local sockets (the PMI-1 and PMI-2 wires, the control socket) and what the master
//! sends in its NodeAgent RPCs (Launch, SetTable, Signal, Stdin), each as far as the
//! agent's pure code goes: the parsers, the sessions' state machines, the launch plan and
//! the slice tables. No agent, rank or socket is started: inputs are read from memory
//! through the same readers the sockets are read with.
//!
//! In the crate because those parts are private to it.

mod corpus;
mod ctl;
mod pmi;
mod rpc;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

/// The largest single allocation of a check is measured (`gang_fuzz::largest_alloc`).
#[global_allocator]
static ALLOC: gang_fuzz::PeakAlloc = gang_fuzz::PeakAlloc;

/// Run a future over in-memory I/O (a `&[u8]` reader never waits) to its end.
fn now<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(r) => r,
        Poll::Pending => panic!("in-memory I/O waited"),
    }
}
