//! Changes under a prefix as etcd commits them (its Watch API): what a standby master
//! follows to keep a warm copy of the leader's state, so that taking over reads nothing.

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::pb::etcdserverpb as rpc;
use crate::pb::mvccpb::event::EventType;
use crate::{Etcd, EtcdError, Result, prefix_end};

/// One key's change, at the revision that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub key: Vec<u8>,
    /// The new value; `None`: the key was deleted.
    pub value: Option<Vec<u8>>,
    pub revision: i64,
}

/// A watch on one member: its changes in revision order.
pub struct Changes {
    stream: tonic::Streaming<rpc::WatchResponse>,
    // Kept open: dropping it ends the watch.
    _requests: mpsc::Sender<rpc::WatchRequest>,
}

impl Etcd {
    /// Every change under `prefix` from `start_revision` on, from the first member that
    /// answers. A start before the compacted history is refused with
    /// [`EtcdError::Compacted`]: read the whole prefix again then.
    pub async fn watch_prefix(&self, prefix: &[u8], start_revision: i64) -> Result<Changes> {
        let create = rpc::WatchRequest {
            request_union: Some(rpc::watch_request::RequestUnion::CreateRequest(
                rpc::WatchCreateRequest {
                    key: prefix.to_vec(),
                    range_end: prefix_end(prefix),
                    start_revision,
                    ..Default::default()
                },
            )),
        };
        let (requests, mut stream) = self
            .on_member(|mut m| {
                let create = create.clone();
                async move {
                    let (tx, rx) = mpsc::channel(1);
                    tx.send(create)
                        .await
                        .map_err(|_| tonic::Status::cancelled("watch request dropped"))?;
                    let stream = m.watch.watch(ReceiverStream::new(rx)).await?.into_inner();
                    Ok((tx, stream))
                }
            })
            .await?;
        // The first answer says whether the watch was made.
        let first = stream
            .message()
            .await
            .map_err(|s| self.err(s))?
            .ok_or_else(|| EtcdError::Lost("the watch ended before it began".into()))?;
        check(&first)?;
        if !first.created {
            return Err(EtcdError::Lost("etcd did not make the watch".into()));
        }
        Ok(Changes {
            stream,
            _requests: requests,
        })
    }
}

fn check(r: &rpc::WatchResponse) -> Result<()> {
    if r.compact_revision > 0 {
        return Err(EtcdError::Compacted(r.compact_revision));
    }
    if r.canceled {
        return Err(EtcdError::Lost(format!(
            "etcd cancelled the watch: {}",
            r.cancel_reason
        )));
    }
    Ok(())
}

impl Changes {
    /// The next changes etcd sends (one or more revisions' worth, in order; never empty).
    /// Cancel-safe: nothing is lost if the future is dropped before it is ready.
    pub async fn next(&mut self) -> Result<Vec<Change>> {
        loop {
            let r = self
                .stream
                .message()
                .await
                .map_err(|s| EtcdError::Lost(format!("the watch broke: {s}")))?
                .ok_or_else(|| EtcdError::Lost("the member ended the watch".into()))?;
            check(&r)?;
            let out: Vec<Change> = r
                .events
                .into_iter()
                .filter_map(|ev| {
                    let kv = ev.kv?;
                    let deleted = ev.r#type == EventType::Delete as i32;
                    Some(Change {
                        key: kv.key,
                        value: (!deleted).then_some(kv.value),
                        revision: kv.mod_revision,
                    })
                })
                .collect();
            // An answer without events (a progress notice) says nothing to apply.
            if !out.is_empty() {
                return Ok(out);
            }
        }
    }
}
