//! A standby's warm copy of the state in etcd: one full read, then every change as etcd
//! commits it (a watch on the prefix), decoded as it comes (`etcd_mirror.rs`). When this
//! master is elected, the copy is handed over once it holds every change up to the
//! election (its own leader key's creation is one of them): no change can come after
//! that but this master's own, since every write is conditional on leading.
//!
//! One task owns the copy. It reads everything again when the watch cannot go on from
//! where it was (the history it needs was compacted) or a value could not be decoded.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gang_etcd::{Etcd, EtcdError, prefix_end};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::persistence::etcd_mirror::Mirror;

/// Where the copy stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Progress {
    /// Every change up to this revision is in the copy (0: no copy yet).
    revision: i64,
    /// A full read is under way (what a cold takeover would do anyway: worth waiting for).
    reading: bool,
    /// Full reads that failed so far.
    failures: u32,
}

enum Slot {
    Empty,
    Ready(Mirror),
    Taken,
}

pub struct WarmCopy {
    slot: Arc<Mutex<Slot>>,
    progress: watch::Receiver<Progress>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WarmCopy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Every key under `prefix` at one revision, decoded.
pub async fn read_all(etcd: &Etcd, prefix: &str) -> anyhow::Result<Mirror> {
    let mut revision = 0;
    let mut kvs = Vec::new();
    // Archive values are large (a thousand jobs each): fewer to a page.
    for (kind, page) in [
        ("meta/", 1000),
        ("archive/", 100),
        ("jobs/", 1000),
        ("drained/", 1000),
    ] {
        let from = format!("{prefix}/{kind}").into_bytes();
        let (part, rev) = etcd
            .get_range_at(&from, &prefix_end(&from), page, revision)
            .await?;
        revision = rev;
        kvs.extend(part);
    }
    // Decoding a long history takes seconds: off the runtime's workers, so that the lease
    // keeper (and, standing by, the standby's server) is not starved meanwhile.
    let prefix = prefix.to_string();
    tokio::task::spawn_blocking(move || {
        let mut m = Mirror::new(&prefix, revision);
        for kv in kvs {
            m.apply(&kv.key, Some(&kv.value), 0)?;
        }
        Ok(m)
    })
    .await?
}

impl WarmCopy {
    /// Start following the state under `prefix`.
    pub fn start(etcd: Etcd, prefix: String) -> WarmCopy {
        let slot = Arc::new(Mutex::new(Slot::Empty));
        let (tx, progress) = watch::channel(Progress {
            revision: 0,
            reading: true,
            failures: 0,
        });
        let task = tokio::spawn(follow(etcd, prefix, slot.clone(), tx));
        WarmCopy {
            slot,
            progress,
            task,
        }
    }

    /// The copy, once it holds every change up to `revision`; `None` if it is not there
    /// within `patience` of its last full read.
    pub async fn take(self, revision: i64, patience: Duration) -> Option<Mirror> {
        let mut progress = self.progress.clone();
        // Counted from when the copy is not being read in full (a read under way is waited
        // for: it is what the caller would do instead).
        let mut deadline: Option<Instant> = None;
        let failures = progress.borrow().failures;
        loop {
            let p = *progress.borrow_and_update();
            if p.failures > failures {
                // The caller's own read says why better than a retry loop would.
                return None;
            }
            if p.revision >= revision {
                let mut slot = self.slot.lock().expect("the copy's lock");
                if let Slot::Ready(m) = std::mem::replace(&mut *slot, Slot::Taken)
                    && m.revision >= revision
                {
                    return Some(m);
                }
                return None;
            }
            let now = Instant::now();
            if p.reading {
                deadline = None;
            } else if now >= *deadline.get_or_insert(now + patience) {
                warn!(
                    have = p.revision,
                    want = revision,
                    "the warm copy is behind the election"
                );
                return None;
            }
            let changed = progress.changed();
            let ended = match deadline {
                Some(d) => tokio::time::timeout(d.saturating_duration_since(now), changed)
                    .await
                    .is_ok_and(|r| r.is_err()),
                None => changed.await.is_err(),
            };
            if ended {
                return None;
            }
        }
    }
}

/// Whether the task should go on (the copy was not taken).
fn publish(slot: &Mutex<Slot>, f: impl FnOnce(&mut Slot)) -> bool {
    let mut s = slot.lock().expect("the copy's lock");
    if matches!(*s, Slot::Taken) {
        return false;
    }
    f(&mut s);
    true
}

async fn follow(etcd: Etcd, prefix: String, slot: Arc<Mutex<Slot>>, tx: watch::Sender<Progress>) {
    let key = format!("{prefix}/").into_bytes();
    let pause = Duration::from_millis(250);
    let mut failures = 0;
    loop {
        tx.send_replace(Progress {
            revision: 0,
            reading: true,
            failures,
        });
        let mirror = match read_all(&etcd, &prefix).await {
            Ok(m) => m,
            Err(e) => {
                warn!("warm copy: reading the state: {e:#}; again soon");
                failures += 1;
                tx.send_replace(Progress {
                    revision: 0,
                    reading: false,
                    failures,
                });
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        let mut at = mirror.revision;
        info!(
            revision = at,
            "warm copy: state read, following its changes"
        );
        if !publish(&slot, |s| *s = Slot::Ready(mirror)) {
            return;
        }
        tx.send_replace(Progress {
            revision: at,
            reading: false,
            failures,
        });
        // Changes from the one after the read, on whichever member answers; a broken watch
        // goes on from the last change applied.
        'watching: loop {
            let mut changes = match etcd.watch_prefix(&key, at + 1).await {
                Ok(c) => c,
                Err(EtcdError::Compacted(_)) => break 'watching,
                Err(e) => {
                    warn!("warm copy: watching the state: {e}; again soon");
                    tokio::time::sleep(pause).await;
                    continue;
                }
            };
            loop {
                let events = match changes.next().await {
                    Ok(b) => b,
                    Err(EtcdError::Compacted(_)) => break 'watching,
                    Err(e) => {
                        warn!("warm copy: {e}; watching again");
                        continue 'watching;
                    }
                };
                let mut bad = None;
                // A catching-up watch brings up to a thousand revisions at once, archives
                // among them: decoded off the async workers' queue, as the full read is.
                let applied = tokio::task::block_in_place(|| {
                    publish(&slot, |s| {
                        if let Slot::Ready(m) = s {
                            for c in &events {
                                if let Err(e) = m.apply(&c.key, c.value.as_deref(), c.revision) {
                                    bad = Some(e);
                                    *s = Slot::Empty;
                                    return;
                                }
                            }
                            at = m.revision;
                        }
                    })
                });
                if !applied {
                    return;
                }
                if let Some(e) = bad {
                    warn!("warm copy: {e:#}; reading the whole state again");
                    tokio::time::sleep(pause).await;
                    break 'watching;
                }
                tx.send_replace(Progress {
                    revision: at,
                    reading: false,
                    failures,
                });
            }
        }
    }
}
