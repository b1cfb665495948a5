//! Leadership among several masters on one prefix: a key bound to a lease, kept alive
//! while it is held, and given up before etcd could hand it to another.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::pb::etcdserverpb as rpc;
use crate::pb::etcdserverpb::request_op::Request as Op;
use crate::{Etcd, Result, created_at};

/// Several masters on one prefix, one leader: the holder of `PREFIX/leader`.
pub struct Election {
    etcd: Etcd,
    key: Vec<u8>,
    /// What the leader key holds: where this master serves (clients and agents are told).
    me: String,
    ttl_s: i64,
}

/// This master leads: its lease, the revision its key was made at, and whether it still
/// holds it (`lost` says why not, once it has lost it).
pub struct Leader {
    pub lease: i64,
    pub create_revision: i64,
    key: Vec<u8>,
    lost: watch::Receiver<Option<String>>,
    keepalive: tokio::task::JoinHandle<()>,
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.keepalive.abort();
    }
}

impl Leader {
    /// The condition of every write: the leader key is still the one this master made.
    pub fn guard(&self) -> rpc::Compare {
        created_at(self.key.clone(), self.create_revision)
    }

    /// Why leadership was lost, once it was.
    pub fn lost(&self) -> Option<String> {
        self.lost.borrow().clone()
    }

    /// What says when leadership is lost (`Some(why)` from then on).
    pub fn lost_receiver(&self) -> watch::Receiver<Option<String>> {
        self.lost.clone()
    }

    /// Wait until leadership is lost: why.
    pub async fn wait_lost(&self) -> String {
        let mut rx = self.lost.clone();
        loop {
            if let Some(why) = rx.borrow_and_update().clone() {
                return why;
            }
            if rx.changed().await.is_err() {
                return "the lease keeper ended".into();
            }
        }
    }
}

impl Election {
    pub fn new(etcd: Etcd, prefix: &str, me: String, ttl_s: i64) -> Election {
        Election {
            etcd,
            key: format!("{prefix}/leader").into_bytes(),
            me,
            ttl_s,
        }
    }

    /// Who leads now (what its key holds), if anyone.
    pub async fn leader(&self) -> Result<Option<String>> {
        Ok(self
            .etcd
            .get(&self.key)
            .await?
            .map(|kv| String::from_utf8_lossy(&kv.value).into_owned()))
    }

    /// Become the leader: wait (looking every `poll`) until no master holds the key, then
    /// make it, bound to a fresh lease kept alive from then on. `on_wait` hears who leads
    /// while this one waits (each time that changes).
    pub async fn campaign(&self, poll: Duration, mut on_wait: impl FnMut(&str)) -> Result<Leader> {
        let mut seen: Option<String> = None;
        loop {
            match self.etcd.get(&self.key).await {
                Ok(Some(kv)) => {
                    let who = String::from_utf8_lossy(&kv.value).into_owned();
                    if seen.as_deref() != Some(&who) {
                        on_wait(&who);
                        seen = Some(who);
                    }
                }
                Ok(None) => {
                    if let Some(l) = self.try_lead().await? {
                        return Ok(l);
                    }
                }
                Err(e) => warn!("etcd: {e}; trying again"),
            }
            tokio::time::sleep(poll).await;
        }
    }

    async fn try_lead(&self) -> Result<Option<Leader>> {
        // The lease is counted from before it was asked for: etcd's count starts later.
        let asked_at = Instant::now();
        let (lease, ttl) = self.etcd.grant(self.ttl_s).await?;
        let t = self
            .etcd
            .txn(rpc::TxnRequest {
                compare: vec![created_at(self.key.clone(), 0)],
                success: vec![rpc::RequestOp {
                    request: Some(Op::RequestPut(rpc::PutRequest {
                        key: self.key.clone(),
                        value: self.me.clone().into_bytes(),
                        lease,
                        ..Default::default()
                    })),
                }],
                failure: vec![],
            })
            .await?;
        if !t.succeeded {
            let _ = self.etcd.revoke(lease).await;
            return Ok(None);
        }
        let create_revision = t.header.map_or(0, |h| h.revision);
        info!(lease, ttl, create_revision, "elected leader");
        let (tx, rx) = watch::channel(None);
        let keepalive = tokio::spawn(keep(self.etcd.clone(), lease, ttl, asked_at, tx));
        Ok(Some(Leader {
            lease,
            create_revision,
            key: self.key.clone(),
            lost: rx,
            keepalive,
        }))
    }
}

/// Keep the lease alive every third of its TTL. It is held until the last answered
/// keepalive's send time plus the TTL it granted (etcd counts from when it received it,
/// later): this master stops acting as leader a margin before that, so it has stopped
/// before etcd can let another master take the key. When a keepalive is not answered:
/// - if some member answers but the cluster has no quorum (no raft leader), nobody can
///   lead or write, and no lease can expire, until it is back: keep trying (this master's
///   writes fail meanwhile; its reads still answer), unless no member answers any more;
/// - if no member answers before the lease's end, this master may be cut off while the
///   others elect another: leadership is lost at the lease's end, whatever happens later;
/// - once etcd answers that the lease is gone, leadership is lost.
async fn keep(
    etcd: Etcd,
    lease: i64,
    ttl: i64,
    asked_at: Instant,
    lost: watch::Sender<Option<String>>,
) {
    let ttl_d = Duration::from_secs(ttl.max(1) as u64);
    let margin = (ttl_d / 10).min(Duration::from_millis(250));
    let mut valid_until = asked_at + ttl_d;
    let every = ttl_d / 3;
    let mut no_quorum = false;
    // When a member last said there was no quorum: no lease could expire before then, and
    // a raft leader elected since renews every lease for its TTL.
    let mut no_quorum_seen = asked_at;
    let cut_off = |lost: &watch::Sender<Option<String>>| {
        let _ = lost.send(Some(format!(
            "no etcd member answered within lease {lease:x}'s {ttl} s: this master may be \
             cut off from etcd"
        )));
    };
    loop {
        let sent = Instant::now();
        let deadline = valid_until - margin;
        if !no_quorum && sent >= deadline {
            return cut_off(&lost);
        }
        let budget = if no_quorum {
            every
        } else {
            (deadline - sent).min(every)
        };
        match tokio::time::timeout(budget, etcd.keep_alive_once(lease)).await {
            Ok(Ok(0)) => {
                let _ = lost.send(Some(format!("lease {lease:x} expired")));
                return;
            }
            Ok(Ok(granted)) => {
                if no_quorum {
                    info!("etcd has its quorum back; lease {lease:x} held");
                    no_quorum = false;
                }
                valid_until = sent + Duration::from_secs(granted as u64);
                tokio::time::sleep_until(sent + every).await;
                continue;
            }
            Ok(Err(e)) => warn!("keepalive of lease {lease:x}: {e}"),
            Err(_) => {}
        }
        // Not renewed: does any member answer, and has the cluster a quorum?
        let now = Instant::now();
        let budget = if no_quorum {
            every
        } else {
            deadline.saturating_duration_since(now).min(every)
        };
        match tokio::time::timeout(budget, etcd.status()).await {
            Ok(Ok(st)) if st.leader == 0 || !st.errors.is_empty() => {
                no_quorum_seen = now;
                if !no_quorum {
                    warn!(
                        "etcd has no quorum: changes are refused until it is back; lease \
                         {lease:x} cannot expire meanwhile"
                    );
                    no_quorum = true;
                }
            }
            Ok(Ok(_)) if no_quorum => {
                no_quorum = false;
                valid_until = valid_until.max(no_quorum_seen + ttl_d);
            }
            Ok(Ok(_)) => {}
            _ if no_quorum => return cut_off(&lost),
            _ => {}
        }
        let retry = now + every / 4;
        tokio::time::sleep_until(if no_quorum {
            retry
        } else {
            retry.min(deadline)
        })
        .await;
    }
}
