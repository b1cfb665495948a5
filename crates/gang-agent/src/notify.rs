//! systemd integration for `Type=notify` (deploy/gang-agent.service): `READY=1` once
//! [`crate::start`] has bound the NodeAgent port (and started the switch thread),
//! `STATUS=` lines for `systemctl status`, `STOPPING=1` at shutdown, and a watchdog.
//!
//! Everything here is a no-op without `$NOTIFY_SOCKET` (the agent outside systemd, as in
//! the tests and `gangctl start`), and there is no watchdog task without `$WATCHDOG_USEC`.
//! Ranks never see these variables: their environment is exactly the launch request's.
//!
//! Readiness does not wait for the master: an agent serves its ranks while the master is
//! down (it keeps switching them on the last table and retries registering), so holding
//! `READY=1` back would only make systemd fail the start of a working agent.
//!
//! What a watchdog ping proves: it is sent by a task of the agent's tokio runtime, woken
//! by that runtime's timer, after taking the rank registry's lock. So the runtime that
//! serves NodeAgent, reaps ranks and sends their output and exits still runs tasks and
//! fires timers, and the lock that every launch, exit and heartbeat takes is not held
//! forever. It deliberately does not depend on the master: restarting an agent kills its
//! ranks, and a master outage must not do that. It does not cover the switch thread (a
//! std thread; its health reaches the master as switch reports).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sd_notify::NotifyState;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tracing::{info, warn};

use crate::ranks::Ranks;

/// A failure to notify is logged, never fatal: systemd then times the start or the
/// watchdog out, which is the right end for a daemon that cannot reach it.
fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        warn!("cannot notify systemd: {e}");
    }
}

pub fn status(text: &str) {
    send(&[NotifyState::Status(text)]);
}

pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

pub fn stopping(ranks: usize) {
    let text = format!("stopping: killing and reaping {ranks} ranks");
    send(&[NotifyState::Stopping, NotifyState::Status(&text)]);
}

/// Start the watchdog if systemd asked for one. `serving` opens every status line.
pub fn spawn_watchdog(ranks: Arc<Ranks>, serving: String) -> Option<JoinHandle<()>> {
    // Half the interval, as sd_watchdog_enabled(3) advises.
    let every = sd_notify::watchdog_enabled()? / 2;
    info!(
        ?every,
        "systemd watchdog: pinging from the runtime after taking the rank registry"
    );
    let probe = move || {
        let text = format!("{serving}; {} ranks here", ranks.len());
        async move { text }
    };
    Some(tokio::spawn(watchdog(every, probe, send)))
}

/// Every `every`, on this runtime: run `probe` and ping, with a new `STATUS=` when its
/// text changed. A probe that does not finish within `every` sends nothing.
pub async fn watchdog<P, F>(every: Duration, mut probe: P, mut send: impl FnMut(&[NotifyState<'_>]))
where
    P: FnMut() -> F,
    F: Future<Output = String>,
{
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut shown = String::new();
    loop {
        tick.tick().await;
        match tokio::time::timeout(every, probe()).await {
            Ok(text) if text == shown => send(&[NotifyState::Watchdog]),
            Ok(text) => {
                send(&[NotifyState::Watchdog, NotifyState::Status(&text)]);
                shown = text;
            }
            Err(_) => warn!("systemd watchdog not pinged: no answer within {every:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    type Sent = Arc<Mutex<Vec<String>>>;

    fn recorder() -> (Sent, impl FnMut(&[NotifyState<'_>])) {
        let sent = Sent::default();
        let log = sent.clone();
        let send = move |states: &[NotifyState<'_>]| {
            let line: Vec<String> = states.iter().map(ToString::to_string).collect();
            log.lock().unwrap().push(line.join(" "));
        };
        (sent, send)
    }

    const EVERY: Duration = Duration::from_millis(100);

    #[tokio::test(start_paused = true)]
    async fn pings_each_period_with_a_status_only_when_it_changes() {
        let (sent, send) = recorder();
        let ranks = Ranks::new();
        let r = Arc::clone(&ranks);
        let probe = move || {
            let text = format!("node (0,0); {} ranks here", r.len());
            async move { text }
        };
        let dog = tokio::spawn(watchdog(EVERY, probe, send));
        // Ticks at 0, 100 and 200 ms.
        tokio::time::sleep(EVERY * 2 + EVERY / 2).await;
        assert_eq!(
            *sent.lock().unwrap(),
            [
                "WATCHDOG=1 STATUS=node (0,0); 0 ranks here",
                "WATCHDOG=1",
                "WATCHDOG=1"
            ]
        );
        dog.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_that_never_answers_gets_no_ping() {
        let (sent, send) = recorder();
        let dog = tokio::spawn(watchdog(EVERY, std::future::pending::<String>, send));
        tokio::time::sleep(EVERY * 10).await;
        assert!(sent.lock().unwrap().is_empty());
        dog.abort();
    }
}
