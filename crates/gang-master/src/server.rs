//! Starting the master: state task, gRPC (with health and reflection), metrics.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use gang_proto::v1::admin_service_server::AdminServiceServer;
use gang_proto::v1::agent_registry_server::AgentRegistryServer;
use gang_proto::v1::job_service_server::JobServiceServer;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::TcpListenerStream;
use tracing::info;

use crate::actor;
use crate::agents::AgentPool;
use crate::config::MasterConfig;
use crate::metrics::{self, Metrics};
use crate::output::OutputHub;
use crate::service::{admin::Admin, jobs::Jobs, registry::Registry};
use crate::switch_stats::SwitchStats;

pub struct RunningMaster {
    pub grpc_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    /// The state task, for callers that must know it still answers (the systemd watchdog).
    pub handle: actor::Handle,
    stop: Option<oneshot::Sender<()>>,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
    state: JoinHandle<()>,
}

impl RunningMaster {
    /// Serve until `shutdown` resolves, then stop serving and wait (at most `grace`) for
    /// in-flight calls. An error if the server or the state task ends first: without its
    /// state task the master can answer nothing, so it must exit and be restarted.
    pub async fn serve_until(
        mut self,
        shutdown: impl std::future::Future<Output = ()>,
        grace: std::time::Duration,
    ) -> anyhow::Result<()> {
        tokio::select! {
            () = shutdown => {}
            r = &mut self.state => {
                anyhow::bail!("the state task ended: {}", match r {
                    Ok(()) => "it stopped".to_string(),
                    Err(e) => e.to_string(),
                });
            }
            r = &mut self.server => {
                r??;
                anyhow::bail!("the gRPC server stopped");
            }
        }
        info!("shutting down");
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        // Attached clients hold streams open; they reconnect to the next master, so do not
        // wait on them for long. Everything accepted is already committed.
        match tokio::time::timeout(grace, &mut self.server).await {
            Ok(r) => r??,
            Err(_) => info!("streams still open after {grace:?}; exiting anyway"),
        }
        Ok(())
    }
}

pub async fn start(cfg: MasterConfig) -> anyhow::Result<RunningMaster> {
    let metrics = Arc::new(Metrics::default());
    let agents = Arc::new(AgentPool::default());
    let output = Arc::new(OutputHub::new(cfg.state_dir())?);
    let grpc = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", cfg.listen))?;
    let metrics_listener = metrics::bind(cfg.metrics_listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {} for metrics: {e}", cfg.metrics_listen))?;
    let grpc_addr = grpc.local_addr()?;
    let metrics_addr = metrics_listener.local_addr()?;
    let ready_file = cfg.ready_file.clone();
    let mesh = cfg.mesh;
    // Boundaries settle 1 s after their deadline: agents report every 250 ms.
    let stats = Arc::new(Mutex::new(SwitchStats::new(1_000_000_000, 100_000)));
    let quantum_ns = i64::from(cfg.quantum_ms) * 1_000_000;
    let (handle, state) = actor::start(cfg, metrics.clone(), agents.clone())?;

    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<JobServiceServer<Jobs>>()
        .await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(gang_proto::v1::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let jobs = Jobs {
        handle: handle.clone(),
        output: output.clone(),
        agents,
    };
    // Serving our own listener, tonic's tcp_nodelay does not apply: without it, small
    // replies wait for delayed ACKs (40 ms on Linux) and every prun pays for it.
    let incoming = TcpListenerStream::new(grpc).map(|conn| {
        conn.inspect(|stream| {
            let _ = stream.set_nodelay(true);
        })
    });
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .add_service(health)
        .add_service(reflection)
        .add_service(JobServiceServer::new(jobs))
        .add_service(AdminServiceServer::new(Admin {
            handle: handle.clone(),
            stats: stats.clone(),
            quantum_ns,
        }))
        .add_service(AgentRegistryServer::new(Registry {
            handle: handle.clone(),
            output,
            stats,
            metrics: metrics.clone(),
        }))
        .serve_with_incoming_shutdown(incoming, async {
            let _ = stopped.await;
        });
    let server = tokio::spawn(server);
    tokio::spawn(metrics::serve(metrics_listener, metrics));
    info!(%grpc_addr, %metrics_addr, %mesh, "master serving");
    if let Some(path) = ready_file {
        write_ready(
            &path,
            &format!("grpc={grpc_addr}\nmetrics={metrics_addr}\n"),
        )?;
    }
    Ok(RunningMaster {
        grpc_addr,
        metrics_addr,
        handle,
        stop: Some(stop),
        server,
        state,
    })
}

/// Write atomically, so a reader never sees half a file.
fn write_ready(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_master_fails_when_its_state_task_dies() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = MasterConfig::for_test(gang_core::Shape::new(1, 1), dir.path().join("s.db"));
        let (handle, _) = actor::start(cfg, Arc::default(), Arc::default()).unwrap();
        let state = tokio::spawn(async { panic!("a broken invariant") });
        let server = tokio::spawn(std::future::pending());
        let master = RunningMaster {
            grpc_addr: "127.0.0.1:1".parse().unwrap(),
            metrics_addr: "127.0.0.1:2".parse().unwrap(),
            handle,
            stop: None,
            server,
            state,
        };
        let e = master
            .serve_until(std::future::pending(), std::time::Duration::from_millis(10))
            .await
            .expect_err("no state task, no master");
        assert!(e.to_string().contains("the state task ended"), "{e}");
        assert!(e.to_string().contains("a broken invariant"), "{e}");
    }
}
