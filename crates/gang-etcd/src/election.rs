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

/// This master leads: its lease, the revision its key was made at, whether its lease is
/// confirmed now (`unconfirmed` says why not, while it is not), and whether it still holds
/// the key (`lost` says why not, once it has lost it).
pub struct Leader {
    pub lease: i64,
    pub create_revision: i64,
    key: Vec<u8>,
    etcd: Etcd,
    lost: watch::Receiver<Option<String>>,
    unconfirmed: watch::Receiver<Option<String>>,
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

    /// Why this master cannot confirm it leads now (its lease was not renewed in time), while
    /// it cannot: it must not act then, for another may be elected should etcd let the lease
    /// end; it acts again once a renewal is answered.
    pub fn unconfirmed(&self) -> Option<String> {
        self.unconfirmed.borrow().clone()
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

    /// Give leadership up now (a clean stop): the lease is revoked, the key goes with it,
    /// and a standby is elected at once instead of after the lease's TTL.
    pub fn resign(&self) -> impl std::future::Future<Output = Result<()>> + Send + 'static {
        let (etcd, lease) = (self.etcd.clone(), self.lease);
        async move { etcd.revoke(lease).await }
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
        let (lost_tx, lost) = watch::channel(None);
        let (unconfirmed_tx, unconfirmed) = watch::channel(None);
        let keepalive = {
            let (renew, probe) = (self.etcd.clone(), self.etcd.clone());
            tokio::spawn(keep(
                Asks {
                    renew: move || {
                        let e = renew.clone();
                        async move { e.keep_alive_once(lease).await }
                    },
                    probe: move || {
                        let e = probe.clone();
                        async move { e.status().await.map(|_| ()) }
                    },
                },
                (lease, ttl),
                asked_at,
                lost_tx,
                unconfirmed_tx,
            ))
        };
        Ok(Some(Leader {
            lease,
            create_revision,
            key: self.key.clone(),
            etcd: self.etcd.clone(),
            lost,
            unconfirmed,
            keepalive,
        }))
    }
}

/// Keep the lease alive every third of its TTL. It is held until the last answered
/// keepalive's send time plus the TTL it granted (etcd counts from when it received it,
/// later). A margin before that, with no renewal answered, this master can no longer
/// confirm it leads: it stops acting (`unconfirmed`) and keeps renewing. Then:
/// - a renewal answered with a TTL: the lease never ended in etcd, nobody else could be
///   elected meanwhile: it acts again (a slow disk, a loaded host, an etcd election);
/// - etcd answers that the lease is gone: another master can lead; leadership is lost;
/// - past the lease's end, no member answers at all: this master may be cut off while the
///   others elect another; leadership is lost (members that answer without a quorum keep
///   it unconfirmed: nobody can be elected, and no lease can end, until it is back).
///
/// Leadership is lost only when another master can lead: never for a renewal that is late.
async fn keep<R, RF, P, PF>(
    etcd: Asks<R, P>,
    (lease, ttl): (i64, i64),
    asked_at: Instant,
    lost: watch::Sender<Option<String>>,
    unconfirmed: watch::Sender<Option<String>>,
) where
    R: Fn() -> RF,
    RF: std::future::Future<Output = Result<i64>>,
    P: Fn() -> PF,
    PF: std::future::Future<Output = Result<()>>,
{
    let ttl_d = Duration::from_secs(ttl.max(1) as u64);
    let margin = (ttl_d / 10).min(Duration::from_millis(250));
    let every = ttl_d / 3;
    // How long one renewal may take before another is tried.
    let attempt = every.max(Duration::from_millis(500));
    let mut valid_until = asked_at + ttl_d;
    let lose = |why: String| {
        warn!("{why}: this master no longer leads");
        let _ = lost.send(Some(why));
    };
    loop {
        let sent = Instant::now();
        let deadline = valid_until - margin;
        let renewal = (etcd.renew)();
        tokio::pin!(renewal);
        let answer = tokio::select! {
            r = &mut renewal => Some(r),
            () = tokio::time::sleep(attempt) => None,
            // Not renewed in time: stop acting now, and wait for this renewal still.
            () = tokio::time::sleep_until(deadline), if unconfirmed.borrow().is_none() => {
                unconfirm(&unconfirmed, lease, ttl);
                tokio::select! {
                    r = &mut renewal => Some(r),
                    () = tokio::time::sleep_until(sent + attempt) => None,
                }
            }
        };
        match answer {
            Some(Ok(0)) => return lose(format!("lease {lease:x} expired in etcd")),
            Some(Ok(granted)) => {
                valid_until = sent + Duration::from_secs(granted as u64);
                if unconfirmed.borrow().is_some() {
                    info!("lease {lease:x} renewed again: this master leads and acts again");
                    let _ = unconfirmed.send(None);
                }
                tokio::time::sleep_until(sent + every).await;
                continue;
            }
            Some(Err(e)) => warn!("keepalive of lease {lease:x}: {e}"),
            None => warn!("keepalive of lease {lease:x}: no answer within {attempt:?}"),
        }
        let now = Instant::now();
        if now >= deadline && unconfirmed.borrow().is_none() {
            unconfirm(&unconfirmed, lease, ttl);
        }
        // Past the lease's end: another master can lead, unless etcd has no quorum (then
        // nobody can). Only a member that answers tells which.
        if now >= valid_until {
            // A member that answers, with a raft leader (the renewal will say whether the
            // lease still stands) or without (nobody can be elected): hold on.
            match tokio::time::timeout(attempt, (etcd.probe)()).await {
                Ok(Ok(_)) => {}
                _ => {
                    return lose(format!(
                        "no etcd member answered past lease {lease:x}'s {ttl} s: this master \
                         may be cut off from etcd while another is elected"
                    ));
                }
            }
        }
        tokio::time::sleep_until(now + every / 4).await;
    }
}

/// What the keeper asks of etcd: a renewal of the lease (the TTL it has now, 0 if it
/// ended), and whether any member answers at all.
struct Asks<R, P> {
    renew: R,
    probe: P,
}

/// The lease was not renewed in time: this master stops acting until it is.
fn unconfirm(unconfirmed: &watch::Sender<Option<String>>, lease: i64, ttl: i64) {
    let why = format!(
        "etcd did not renew this master's lease {lease:x} within its {ttl} s: etcd may have \
         lost its quorum, or this master its way to etcd; changes are refused until it is \
         renewed"
    );
    warn!("{why}");
    let _ = unconfirmed.send(Some(why));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU8, Ordering};

    const ANSWER: u8 = 0;
    const HANG: u8 = 1;
    const ENDED: u8 = 2;

    /// A keeper of a 3 s lease whose renewals and member probes behave as the two modes
    /// say, at the time each call is made.
    struct Scripted {
        renew: Arc<AtomicU8>,
        probe: Arc<AtomicU8>,
        lost: watch::Receiver<Option<String>>,
        unconfirmed: watch::Receiver<Option<String>>,
        task: tokio::task::JoinHandle<()>,
    }

    fn start() -> Scripted {
        let (renew, probe) = (
            Arc::new(AtomicU8::new(ANSWER)),
            Arc::new(AtomicU8::new(ANSWER)),
        );
        let (lost_tx, lost) = watch::channel(None);
        let (unconfirmed_tx, unconfirmed) = watch::channel(None);
        let asks = Asks {
            renew: {
                let m = renew.clone();
                move || {
                    let mode = m.load(Ordering::SeqCst);
                    async move {
                        match mode {
                            ANSWER => Ok(3),
                            ENDED => Ok(0),
                            _ => std::future::pending().await,
                        }
                    }
                }
            },
            probe: {
                let m = probe.clone();
                move || {
                    let mode = m.load(Ordering::SeqCst);
                    async move {
                        match mode {
                            ANSWER => Ok(()),
                            _ => std::future::pending().await,
                        }
                    }
                }
            },
        };
        let task = tokio::spawn(keep(asks, (7, 3), Instant::now(), lost_tx, unconfirmed_tx));
        Scripted {
            renew,
            probe,
            lost,
            unconfirmed,
            task,
        }
    }

    async fn wait(s: Duration) {
        tokio::time::sleep(s).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    /// Renewals held up (a slow disk, an etcd election, a loaded host): the leader stops
    /// acting a margin before its lease could end, never steps down while some member
    /// answers, and acts again once a renewal is answered.
    #[tokio::test(start_paused = true)]
    async fn late_renewals_stop_acting_and_an_answer_resumes_without_stepping_down() {
        let s = start();
        wait(Duration::from_secs(10)).await;
        assert!(s.unconfirmed.borrow().is_none() && s.lost.borrow().is_none());
        s.renew.store(HANG, Ordering::SeqCst);
        // Renewed last at most a second ago: its lease holds 3 s from that renewal's send.
        wait(Duration::from_millis(1500)).await;
        assert!(
            s.unconfirmed.borrow().is_none(),
            "stopped before the margin"
        );
        wait(Duration::from_millis(2000)).await;
        let why = s.unconfirmed.borrow().clone().expect("stopped acting");
        assert!(
            why.contains("changes are refused until it is renewed"),
            "{why}"
        );
        // A minute without a renewal, members answering (no quorum): it stays, not acting.
        wait(Duration::from_secs(60)).await;
        assert!(s.lost.borrow().is_none(), "{:?}", s.lost.borrow());
        assert!(s.unconfirmed.borrow().is_some());
        s.renew.store(ANSWER, Ordering::SeqCst);
        wait(Duration::from_secs(2)).await;
        assert!(s.unconfirmed.borrow().is_none(), "acts again");
        assert!(s.lost.borrow().is_none());
        s.task.abort();
    }

    /// etcd says the lease ended: another master can lead, so this one steps down.
    #[tokio::test(start_paused = true)]
    async fn a_lease_etcd_ended_is_lost() {
        let s = start();
        wait(Duration::from_secs(2)).await;
        s.renew.store(ENDED, Ordering::SeqCst);
        wait(Duration::from_secs(2)).await;
        let why = s.lost.borrow().clone().expect("lost");
        assert!(why.contains("expired in etcd"), "{why}");
    }

    /// No member answers at all past the lease's end: another may be elected by members
    /// this master cannot reach, so it steps down; before that end it only stops acting.
    #[tokio::test(start_paused = true)]
    async fn no_member_answering_past_the_lease_is_lost() {
        let s = start();
        wait(Duration::from_secs(2)).await;
        s.renew.store(HANG, Ordering::SeqCst);
        s.probe.store(HANG, Ordering::SeqCst);
        wait(Duration::from_millis(2950)).await;
        assert!(s.unconfirmed.borrow().is_some());
        assert!(s.lost.borrow().is_none(), "lost before the lease's end");
        wait(Duration::from_secs(5)).await;
        let why = s.lost.borrow().clone().expect("lost");
        assert!(why.contains("no etcd member answered"), "{why}");
    }
}
