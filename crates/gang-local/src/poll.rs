//! Talking to the cluster while it starts: on a runtime and thread of their own, so that
//! blocking callers inside a runtime work too, and always with a way out (an interrupt
//! flag, a timeout).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Result, anyhow};
use gang_proto::client::{self, Target};
use gang_proto::v1::admin_service_client::AdminServiceClient;
use gang_proto::v1::{ListNodesRequest, NodeInfo};

use crate::POLL;

/// Run a future to completion on a runtime of its own, on a thread of its own (so that
/// blocking callers inside a runtime work too).
pub(crate) fn block_on<F>(f: F) -> F::Output
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("build a tokio runtime")
                .block_on(f)
        })
        .join()
        .expect("the polling thread does not panic")
    })
}

/// Resolves once `flag` is set; never without one.
pub(crate) async fn until_set(flag: Option<Arc<AtomicBool>>) {
    let Some(flag) = flag else {
        return std::future::pending().await;
    };
    while !flag.load(Ordering::SeqCst) {
        tokio::time::sleep(POLL).await;
    }
}

pub(crate) async fn list_nodes(url: String) -> Result<Vec<NodeInfo>> {
    let call = async {
        let target = Target::parse(&url).map_err(|e| anyhow!(e))?;
        let channel = client::connect(&target, &Default::default(), Duration::from_secs(2))
            .await
            .map_err(|e| anyhow!("{e:?}"))?;
        let resp = AdminServiceClient::new(channel)
            .list_nodes(ListNodesRequest {})
            .await?;
        Ok::<_, anyhow::Error>(resp.into_inner().nodes)
    };
    tokio::time::timeout(Duration::from_secs(3), call)
        .await
        .map_err(|_| anyhow!("ListNodes timed out"))?
}
