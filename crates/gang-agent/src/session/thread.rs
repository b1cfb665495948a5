//! The registry session (registration, then a heartbeat every period) on a thread of its
//! own, with its own single-threaded runtime and its own connection to the master, at
//! real-time priority one below the switch thread.
//!
//! Why a thread: the master counts a node lost, and fails every job with a rank there,
//! when its heartbeats stop for the node timeout. On the agent's shared runtime a heartbeat
//! waits behind whatever the runtime is doing (launches fork on its workers, output is
//! relayed, PMI is served) and competes at normal priority with every rank for the CPU: on
//! a loaded 2-core host a live agent was declared lost (`its agent was silent for 1500
//! ms`). At SCHED_FIFO the sender runs within microseconds of its period whatever the
//! ranks do, so the node timeout only has to cover the network and the master, which is
//! what the default timeouts are sized for (`deploy/master.toml`).
//!
//! The thread does nothing heavy: building a heartbeat reads the rank registry and the
//! state pages; orders that come back with a registration (kill the jobs the master no
//! longer runs) are carried out on the agent's main runtime, never here.

use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::oneshot;
use tonic::transport::ClientTlsConfig;
use tracing::error;

use crate::master_link::lease::Lease;
use crate::node::Node;
use crate::session::registry_client;

/// The session thread, stopped by `stop` (or when dropped, without waiting).
#[derive(Debug)]
pub struct SessionThread {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// What the session needs: the master to dial and how, this node, where the master reaches
/// us, and the lease its answers feed.
pub struct SessionParts {
    pub master: String,
    pub tls: ClientTlsConfig,
    pub node: Arc<Node>,
    pub address: String,
    pub lease: Arc<Lease>,
}

impl SessionThread {
    /// Start the session at SCHED_FIFO `priority` (0: normal scheduling). Must be called
    /// from inside the agent's runtime: its handle is where the session's orders run.
    pub fn start(parts: SessionParts, priority: i32) -> std::io::Result<SessionThread> {
        let main = tokio::runtime::Handle::current();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("gang-session".into())
            .spawn(move || run(parts, priority, main, stopped))?;
        Ok(SessionThread {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// End the session and wait for the thread (it leaves at its next await).
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

fn run(
    parts: SessionParts,
    priority: i32,
    main: tokio::runtime::Handle,
    stopped: oneshot::Receiver<()>,
) {
    crate::rt::priority::request_fifo("session thread (heartbeats)", priority);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            error!("cannot start the session's runtime: {e}; this node will not register");
            return;
        }
    };
    runtime.block_on(async move {
        // The channel is made here so that its connection is driven by this runtime.
        let client = match registry_client::connect(&parts.master, parts.tls) {
            Ok(c) => c,
            Err(e) => {
                error!(master = %parts.master, "cannot set up the session's channel: {e}");
                return;
            }
        };
        let session =
            registry_client::run_session(client, parts.node, parts.address, parts.lease, main);
        tokio::select! {
            () = session => {}
            _ = stopped => {}
        }
    });
}
