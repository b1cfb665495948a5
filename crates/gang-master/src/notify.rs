//! systemd integration for `Type=notify` (deploy/gang-master.service): `READY=1` once
//! [`crate::server::start`] has bound the ports and recovered the jobs, `STATUS=` lines for
//! `systemctl status`, `STOPPING=1` at shutdown, and a watchdog.
//!
//! Everything here is a no-op without `$NOTIFY_SOCKET` (the master outside systemd, as in
//! the tests), and there is no watchdog task without `$WATCHDOG_USEC`.
//!
//! The watchdog pings only after a round trip through the state task. That task is the
//! master: every gRPC call, every agent's heartbeat and the tick go through it. If it is
//! wedged (a commit that never returns, a loop) or gone, the process still accepts
//! connections but answers nothing; a ping from a plain timer would keep such a master
//! alive forever. Pinging after the state task has answered a query lets systemd kill it
//! (`WatchdogSec=`) and restart it (`Restart=on-failure`), and recovery rebuilds what was
//! saved, while the agents keep their jobs running meanwhile.

use std::future::Future;
use std::time::Duration;

use sd_notify::NotifyState;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tracing::{info, warn};

use crate::actor::{Cmd, Handle};
use crate::state::views::{NodeState, NodesView};

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

pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

/// Start the watchdog if systemd asked for one. `serving` opens every status line.
pub fn spawn_watchdog(handle: Handle, serving: String) -> Option<JoinHandle<()>> {
    // Half the interval, as sd_watchdog_enabled(3) advises: one late round trip is not
    // yet a missed deadline.
    let every = sd_notify::watchdog_enabled()? / 2;
    info!(
        ?every,
        "systemd watchdog: pinging after each round trip through the state task"
    );
    let probe = move || {
        let handle = handle.clone();
        let serving = serving.clone();
        async move {
            match handle.call(Cmd::ListNodes).await {
                Ok(nodes) => Ok(nodes_status(&serving, &nodes)),
                Err(e) => Err(e.to_string()),
            }
        }
    };
    Some(tokio::spawn(watchdog(every, probe, send)))
}

/// Every `every`: run `probe` (given `every` to answer); on an answer, ping, with a new
/// `STATUS=` when the answer's text changed. A failed or late probe sends nothing, so
/// two in a row miss systemd's deadline.
pub async fn watchdog<P, F>(every: Duration, mut probe: P, mut send: impl FnMut(&[NotifyState<'_>]))
where
    P: FnMut() -> F,
    F: Future<Output = Result<String, String>>,
{
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut shown = String::new();
    loop {
        tick.tick().await;
        match tokio::time::timeout(every, probe()).await {
            Ok(Ok(text)) if text == shown => send(&[NotifyState::Watchdog]),
            Ok(Ok(text)) => {
                send(&[NotifyState::Watchdog, NotifyState::Status(&text)]);
                shown = text;
            }
            Ok(Err(e)) => warn!("systemd watchdog not pinged: the state task answered: {e}"),
            Err(_) => {
                warn!("systemd watchdog not pinged: the state task did not answer within {every:?}")
            }
        }
    }
}

fn nodes_status(serving: &str, v: &NodesView) -> String {
    let count = |s: NodeState| v.nodes.iter().filter(|n| n.state == s).count();
    format!(
        "{serving}; {} of {} nodes up, {} down, {} drained",
        count(NodeState::Up),
        v.mesh.area(),
        count(NodeState::Down),
        count(NodeState::Drained)
    )
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    use gang_core::Shape;

    use super::*;
    use crate::actor;
    use crate::daemon_config::DaemonConfig;

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

    fn pings(sent: &Sent) -> usize {
        let sent = sent.lock().unwrap();
        sent.iter().filter(|l| l.starts_with("WATCHDOG=1")).count()
    }

    const EVERY: Duration = Duration::from_millis(20);

    #[tokio::test]
    async fn pings_follow_round_trips_through_the_state_task_and_stop_when_it_dies() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = DaemonConfig::for_test(Shape::new(2, 2), dir.path().join("s.db"));
        let opened = crate::persistence::open(&cfg, |_| {}).await.unwrap();
        let (handle, state) =
            actor::start(cfg.master, Arc::default(), Arc::default(), opened).unwrap();
        let (sent, send) = recorder();
        let probe = move || {
            let handle = handle.clone();
            async move {
                let nodes = handle
                    .call(Cmd::ListNodes)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(nodes_status("serving on test", &nodes))
            }
        };
        let dog = tokio::spawn(watchdog(EVERY, probe, send));
        let deadline = Instant::now() + Duration::from_secs(10);
        while pings(&sent) < 3 && Instant::now() < deadline {
            tokio::time::sleep(EVERY).await;
        }
        {
            let sent = sent.lock().unwrap();
            assert!(sent.len() >= 3, "{sent:?}");
            assert!(
                sent[0].starts_with("WATCHDOG=1 STATUS=serving on test; 0 of 4 nodes up"),
                "{sent:?}"
            );
            // The status goes out again only when it changes.
            assert!(sent[1..].iter().all(|l| l == "WATCHDOG=1"), "{sent:?}");
        }

        state.abort();
        let _ = state.await;
        let before = pings(&sent);
        tokio::time::sleep(EVERY * 10).await;
        assert_eq!(pings(&sent), before, "pinged without a state task");
        dog.abort();
    }

    #[tokio::test]
    async fn a_wedged_or_failing_state_task_gets_no_ping() {
        let (sent, send) = recorder();
        let dog = tokio::spawn(watchdog(
            EVERY,
            std::future::pending::<Result<String, String>>,
            send,
        ));
        tokio::time::sleep(EVERY * 10).await;
        assert_eq!(pings(&sent), 0);
        dog.abort();

        let (sent, send) = recorder();
        let (probes, answers) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (p, a) = (probes.clone(), answers.clone());
        let probe = move || {
            let r = if p.fetch_add(1, Ordering::SeqCst) % 2 == 0 {
                Err("UNAVAILABLE: state not saved".to_string())
            } else {
                a.fetch_add(1, Ordering::SeqCst);
                Ok("ok".to_string())
            };
            async move { r }
        };
        let dog = tokio::spawn(watchdog(EVERY, probe, send));
        tokio::time::sleep(EVERY * 10).await;
        dog.abort();
        let _ = dog.await;
        assert!(probes.load(Ordering::SeqCst) >= 2);
        assert_eq!(pings(&sent), answers.load(Ordering::SeqCst));
    }
}
