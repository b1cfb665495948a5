//! A small etcd v3 client: what the master needs to keep its state in an etcd cluster and
//! to elect one leader among several masters.
//!
//! The gRPC API is the subset of etcd's in `proto/etcd`, compiled with protox (the
//! published etcd clients run protoc at build time, which a fresh machine here lacks).
//! Requests go to one member at a time and move on to the next when it does not answer,
//! so a member that dies is routed around as long as a quorum answers.
//!
//! Leadership ([`Election`]) is a key bound to a lease: whoever creates it leads while its
//! lease lives. Every write of the leader is a transaction that checks the key's create
//! revision ([`Leader::guard`]): a leader paused past its lease, whose key another master
//! has made since, cannot write, whatever its own clock says.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

mod changes;
mod election;
pub use changes::{Change, Changes};
pub use election::{Election, Leader};

pub mod pb {
    pub mod mvccpb {
        tonic::include_proto!("mvccpb");
    }
    pub mod etcdserverpb {
        tonic::include_proto!("etcdserverpb");
    }
}

use pb::etcdserverpb as rpc;
use pb::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use pb::etcdserverpb::kv_client::KvClient;
use pb::etcdserverpb::lease_client::LeaseClient;
use pb::etcdserverpb::maintenance_client::MaintenanceClient;
use pb::etcdserverpb::request_op::Request as Op;
use pb::etcdserverpb::watch_client::WatchClient;
pub use pb::mvccpb::KeyValue;

#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error("{0}")]
    Target(String),
    #[error("etcd at {endpoints}: {status}")]
    Rpc {
        endpoints: String,
        status: Box<tonic::Status>,
    },
    #[error("etcd endpoint {0}: {1}")]
    Endpoint(String, String),
    #[error("{0}")]
    Lost(String),
    #[error("etcd's history before revision {0} is compacted")]
    Compacted(i64),
}

pub type Result<T, E = EtcdError> = std::result::Result<T, E>;

/// `etcd://HOST:PORT[,HOST:PORT...]/PREFIX`: the members to talk to, and the key prefix
/// under which one cluster's state lives (several clusters may share an etcd).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub endpoints: Vec<String>,
    /// Starts with `/`, never ends with one.
    pub prefix: String,
    /// TLS to the members (not in the address: from the configuration's files).
    pub tls: Option<Tls>,
}

/// TLS to etcd's members: the CA their certificates are checked against, and this
/// client's certificate and key for members that ask for one (`--client-cert-auth`).
#[derive(Clone, PartialEq, Eq)]
pub struct Tls {
    pub ca_pem: Vec<u8>,
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Tls {
    // Never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("client_certificate", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// Read `ca`, and `cert` and `key` if given (both or neither): errors name the file.
    pub fn read(
        ca: &std::path::Path,
        cert_key: Option<(&std::path::Path, &std::path::Path)>,
    ) -> Result<Tls> {
        let read = |p: &std::path::Path, what: &str| {
            std::fs::read(p).map_err(|e| {
                EtcdError::Target(format!(
                    "etcd TLS: cannot read the {what} {}: {e}",
                    p.display()
                ))
            })
        };
        Ok(Tls {
            ca_pem: read(ca, "CA certificate")?,
            identity: match cert_key {
                Some((c, k)) => Some((read(c, "client certificate")?, read(k, "client key")?)),
                None => None,
            },
        })
    }

    fn config(&self) -> tonic::transport::ClientTlsConfig {
        use tonic::transport::{Certificate, ClientTlsConfig, Identity};
        let mut c = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&self.ca_pem));
        if let Some((cert, key)) = &self.identity {
            c = c.identity(Identity::from_pem(cert, key));
        }
        c
    }
}

impl FromStr for Target {
    type Err = EtcdError;
    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: &str| {
            EtcdError::Target(format!(
                "{s:?}: {why}; expected etcd://HOST:PORT[,HOST:PORT...]/PREFIX"
            ))
        };
        let rest = s
            .strip_prefix("etcd://")
            .ok_or_else(|| bad("not an etcd:// address"))?;
        let (hosts, prefix) = rest
            .split_once('/')
            .ok_or_else(|| bad("no /PREFIX for the cluster's keys"))?;
        let prefix = format!("/{}", prefix.trim_end_matches('/'));
        if prefix == "/" || prefix.contains("//") {
            return Err(bad("the prefix is empty or has an empty part"));
        }
        let endpoints: Vec<String> = hosts
            .split(',')
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .collect();
        if endpoints.is_empty() {
            return Err(bad("no HOST:PORT"));
        }
        for h in &endpoints {
            let port = h.rsplit_once(':').map(|(_, p)| p);
            if port.is_none_or(|p| p.parse::<u16>().is_err()) {
                return Err(bad(&format!("{h:?} is not HOST:PORT")));
            }
        }
        Ok(Target {
            endpoints,
            prefix,
            tls: None,
        })
    }
}

/// The first key after every key that starts with `prefix` (etcd's range end for it).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte 0xff: to the end of the key space.
    vec![0]
}

/// One member's clients.
#[derive(Clone)]
struct Member {
    kv: KvClient<Channel>,
    lease: LeaseClient<Channel>,
    maint: MaintenanceClient<Channel>,
    watch: WatchClient<Channel>,
}

/// A connection to an etcd cluster (cheap to clone): one channel per member, requests to
/// one member at a time, the next tried when it does not answer (refused, reset, timed out,
/// or without a raft leader), and kept while it does.
#[derive(Clone)]
pub struct Etcd {
    endpoints: Arc<str>,
    members: Arc<[Member]>,
    current: Arc<AtomicUsize>,
}

/// Whether another member may answer what this one did not.
fn try_another(s: &tonic::Status) -> bool {
    use tonic::Code;
    matches!(
        s.code(),
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown
    )
}

impl Etcd {
    /// Channels to every endpoint, made lazily. Each request to a member is bounded by
    /// `timeout` (a member without quorum answers nothing). Call it within a tokio runtime.
    pub fn connect(endpoints: &[String], timeout: Duration) -> Result<Etcd> {
        Self::connect_tls(endpoints, timeout, None)
    }

    /// [`Etcd::connect`], over TLS if `tls` says how.
    pub fn connect_tls(endpoints: &[String], timeout: Duration, tls: Option<&Tls>) -> Result<Etcd> {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let members = endpoints
            .iter()
            .map(|h| {
                let bad =
                    |e: tonic::transport::Error| EtcdError::Endpoint(h.clone(), e.to_string());
                let mut ep = Endpoint::from_shared(format!("{scheme}://{h}")).map_err(bad)?;
                if let Some(t) = tls {
                    ep = ep.tls_config(t.config()).map_err(bad)?;
                }
                let ch = ep
                    .connect_timeout(timeout)
                    .timeout(timeout)
                    .tcp_nodelay(true)
                    .connect_lazy();
                Ok(Member {
                    kv: KvClient::new(ch.clone()),
                    lease: LeaseClient::new(ch.clone()),
                    maint: MaintenanceClient::new(ch.clone()),
                    // One watch answer may carry many revisions' changes (etcd sends
                    // up to a thousand at once to a watcher catching up).
                    watch: WatchClient::new(ch).max_decoding_message_size(1 << 30),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if members.is_empty() {
            return Err(EtcdError::Target("no etcd endpoint".into()));
        }
        Ok(Etcd {
            endpoints: endpoints.join(",").into(),
            members: members.into(),
            current: Arc::default(),
        })
    }

    fn err(&self, status: tonic::Status) -> EtcdError {
        EtcdError::Rpc {
            endpoints: self.endpoints.to_string(),
            status: Box::new(status),
        }
    }

    /// `f` on the current member, then on the others in turn while they do not answer.
    /// What is retried is idempotent here: reads, keepalives, puts of whole values under
    /// the same guard (a lease granted twice expires unused).
    async fn on_member<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: Fn(Member) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, tonic::Status>>,
    {
        let n = self.members.len();
        let start = self.current.load(Ordering::Relaxed) % n;
        let mut last = None;
        for k in 0..n {
            let i = (start + k) % n;
            match f(self.members[i].clone()).await {
                Ok(v) => {
                    if k > 0 {
                        self.current.store(i, Ordering::Relaxed);
                    }
                    return Ok(v);
                }
                Err(s) if try_another(&s) => last = Some(s),
                Err(s) => return Err(self.err(s)),
            }
        }
        Err(self.err(last.expect("at least one member")))
    }

    pub async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        let r = self
            .on_member(|mut m| {
                let key = key.to_vec();
                async move {
                    m.kv.range(rpc::RangeRequest {
                        key,
                        ..Default::default()
                    })
                    .await
                }
            })
            .await?;
        Ok(r.into_inner().kvs.into_iter().next())
    }

    /// Every key under `prefix`, in key order, read `page` at a time (one revision for all
    /// pages: the first page's).
    pub async fn get_prefix(&self, prefix: &[u8], page: i64) -> Result<Vec<KeyValue>> {
        self.get_range(prefix, &prefix_end(prefix), page).await
    }

    /// Every key in `[from, end)`, as [`Self::get_prefix`].
    pub async fn get_range(&self, from: &[u8], end: &[u8], page: i64) -> Result<Vec<KeyValue>> {
        Ok(self.get_range_at(from, end, page, 0).await?.0)
    }

    /// Every key in `[from, end)` as it was at `revision` (0: the newest), and that
    /// revision: several reads at one revision see one state of the store.
    pub async fn get_range_at(
        &self,
        from: &[u8],
        end: &[u8],
        page: i64,
        mut revision: i64,
    ) -> Result<(Vec<KeyValue>, i64)> {
        let end = end.to_vec();
        let mut from = from.to_vec();
        let mut out = Vec::new();
        loop {
            let req = rpc::RangeRequest {
                key: from.clone(),
                range_end: end.clone(),
                limit: page,
                revision,
                ..Default::default()
            };
            let r = self
                .on_member(|mut m| {
                    let req = req.clone();
                    async move { m.kv.range(req).await }
                })
                .await?
                .into_inner();
            // The header says the store's newest revision, whatever was asked: the first
            // page's is the one every later page is read at.
            if revision == 0 {
                revision = r.header.map_or(0, |h| h.revision);
            }
            let more = r.more;
            if let Some(last) = r.kvs.last() {
                from = last.key.clone();
                from.push(0);
            }
            out.extend(r.kvs);
            if !more {
                return Ok((out, revision));
            }
        }
    }

    pub async fn txn(&self, t: rpc::TxnRequest) -> Result<rpc::TxnResponse> {
        let r = self
            .on_member(|mut m| {
                let t = t.clone();
                async move { m.kv.txn(t).await }
            })
            .await?;
        Ok(r.into_inner())
    }

    pub async fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.on_member(|mut m| {
            let req = rpc::PutRequest {
                key: key.to_vec(),
                value: value.to_vec(),
                ..Default::default()
            };
            async move { m.kv.put(req).await }
        })
        .await?;
        Ok(())
    }

    /// Forget the history before `revision` (and, `physical`, wait until it is gone).
    pub async fn compact(&self, revision: i64) -> Result<()> {
        self.on_member(|mut m| async move {
            m.kv.compact(rpc::CompactionRequest {
                revision,
                physical: true,
            })
            .await
        })
        .await?;
        Ok(())
    }

    /// A member's status (its database size, its raft leader), from whichever answers.
    pub async fn status(&self) -> Result<rpc::StatusResponse> {
        let r = self
            .on_member(|mut m| async move { m.maint.status(rpc::StatusRequest {}).await })
            .await?;
        Ok(r.into_inner())
    }

    /// Each member's status after defragmenting it (giving back the space compaction
    /// freed): (endpoint, status), in the order given.
    pub async fn defragment_each(&self) -> Result<Vec<(String, rpc::StatusResponse)>> {
        let names: Vec<&str> = self.endpoints.split(',').collect();
        let mut out = Vec::new();
        for (i, m) in self.members.iter().enumerate() {
            let mut m = m.clone();
            m.maint
                .defragment(rpc::DefragmentRequest {})
                .await
                .map_err(|s| self.err(s))?;
            let st = m
                .maint
                .status(rpc::StatusRequest {})
                .await
                .map_err(|s| self.err(s))?;
            out.push((names.get(i).unwrap_or(&"?").to_string(), st.into_inner()));
        }
        Ok(out)
    }

    /// A lease of `ttl_s` seconds (etcd may grant more: its minimum): (id, granted TTL).
    pub async fn grant(&self, ttl_s: i64) -> Result<(i64, i64)> {
        let r = self
            .on_member(|mut m| async move {
                m.lease
                    .lease_grant(rpc::LeaseGrantRequest { ttl: ttl_s, id: 0 })
                    .await
            })
            .await?
            .into_inner();
        if !r.error.is_empty() {
            return Err(EtcdError::Lost(format!("lease refused: {}", r.error)));
        }
        Ok((r.id, r.ttl))
    }

    pub async fn revoke(&self, id: i64) -> Result<()> {
        self.on_member(|mut m| async move {
            m.lease.lease_revoke(rpc::LeaseRevokeRequest { id }).await
        })
        .await?;
        Ok(())
    }

    /// One keepalive of lease `id` on a fresh stream: the TTL it has now (0: it expired).
    async fn keep_alive_once(&self, id: i64) -> Result<i64> {
        self.on_member(|mut m| async move {
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            let _ = tx.send(rpc::LeaseKeepAliveRequest { id }).await;
            let mut stream = m
                .lease
                .lease_keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await?
                .into_inner();
            let answer = stream.message().await?;
            drop(tx);
            // A stream that ends unanswered says nothing of the lease: ask again.
            answer
                .map(|a| a.ttl)
                .ok_or_else(|| tonic::Status::unavailable("the keepalive stream ended unanswered"))
        })
        .await
    }
}

/// A put as a transaction's operation.
pub fn put_op(key: Vec<u8>, value: Vec<u8>) -> rpc::RequestOp {
    rpc::RequestOp {
        request: Some(Op::RequestPut(rpc::PutRequest {
            key,
            value,
            ..Default::default()
        })),
    }
}

/// A delete (of one key) as a transaction's operation.
pub fn delete_op(key: Vec<u8>) -> rpc::RequestOp {
    rpc::RequestOp {
        request: Some(Op::RequestDeleteRange(rpc::DeleteRangeRequest {
            key,
            ..Default::default()
        })),
    }
}

/// A delete of the keys in `[key, end)` as a transaction's operation.
pub fn delete_range_op(key: Vec<u8>, end: Vec<u8>) -> rpc::RequestOp {
    rpc::RequestOp {
        request: Some(Op::RequestDeleteRange(rpc::DeleteRangeRequest {
            key,
            range_end: end,
            ..Default::default()
        })),
    }
}

/// A read of one key as a transaction's operation.
pub fn get_op(key: Vec<u8>) -> rpc::RequestOp {
    rpc::RequestOp {
        request: Some(Op::RequestRange(rpc::RangeRequest {
            key,
            ..Default::default()
        })),
    }
}

/// Whether `key`'s create revision is `rev` (0: the key does not exist).
pub fn created_at(key: Vec<u8>, rev: i64) -> rpc::Compare {
    rpc::Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Create as i32,
        key,
        target_union: Some(TargetUnion::CreateRevision(rev)),
        range_end: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_and_bad_ones_say_what_is_expected() {
        let t: Target = "etcd://127.0.0.1:2379,10.0.0.2:2379/gang/prod"
            .parse()
            .unwrap();
        assert_eq!(t.endpoints, ["127.0.0.1:2379", "10.0.0.2:2379"]);
        assert_eq!(t.prefix, "/gang/prod");
        for bad in [
            "http://h:1/x",
            "etcd://h:1",
            "etcd://h:1/",
            "etcd:///x",
            "etcd://h/x",
            "etcd://h:99999/x",
        ] {
            let e = bad.parse::<Target>().unwrap_err().to_string();
            assert!(e.contains("expected etcd://HOST:PORT"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_prefix_ends_at_the_next_key() {
        assert_eq!(prefix_end(b"/g/jobs/"), b"/g/jobs0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), b"\0");
    }
}
