//! The agent's channel to its master, or to whichever of several masters leads (masters
//! that share their state in etcd: a standby refuses every call naming the leader, and a
//! paused one stops answering). Calls go to one master at a time; a call that fails in
//! transport (refused, reset, timed out) or is refused by a standby moves the next ones to
//! the next master, so the agent follows a failover without choosing between masters
//! that would both accept connections.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use gang_proto::client::LEADER_METADATA;
use tonic::body::Body;
use tonic::codegen::Service;
use tonic::codegen::http;
use tonic::transport::Channel;

/// The master's agent registry, over this channel.
pub type RegistryClient = gang_proto::v1::agent_registry_client::AgentRegistryClient<MasterChannel>;

#[derive(Clone, Debug)]
pub struct MasterChannel {
    channels: Arc<[Channel]>,
    current: Arc<AtomicUsize>,
}

impl MasterChannel {
    /// One channel per master, the first tried first.
    pub fn new(channels: Vec<Channel>) -> MasterChannel {
        assert!(!channels.is_empty(), "at least one master");
        MasterChannel {
            channels: channels.into(),
            current: Arc::default(),
        }
    }

    /// The master calls go to now (an index into the list given).
    pub fn current(&self) -> usize {
        self.current.load(Ordering::Relaxed) % self.channels.len()
    }
}

type Answer = Result<http::Response<Body>, tonic::transport::Error>;

impl Service<http::Request<Body>> for MasterChannel {
    type Response = http::Response<Body>;
    type Error = tonic::transport::Error;
    type Future = Pin<Box<dyn Future<Output = Answer> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Each call waits for its own master's channel.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let n = self.channels.len();
        let i = self.current();
        let mut ch = self.channels[i].clone();
        let current = self.current.clone();
        Box::pin(async move {
            let answer = async {
                std::future::poll_fn(|cx| ch.poll_ready(cx)).await?;
                ch.call(req).await
            }
            .await;
            // A standby's refusal names the leader: not this one.
            let standby = matches!(&answer, Ok(r) if r.headers().contains_key(LEADER_METADATA));
            if (answer.is_err() || standby) && n > 1 {
                // Only the first failure of a master moves on: calls in flight to it when it
                // went away must not skip the next one too.
                let _ =
                    current.compare_exchange(i, (i + 1) % n, Ordering::Relaxed, Ordering::Relaxed);
            }
            answer
        })
    }
}
