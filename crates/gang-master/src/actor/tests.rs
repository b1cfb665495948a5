//! Durable before accepted, through the real actor and a real SQLite file: a round whose
//! writes fail is answered with errors and leaves nothing behind, in memory or on disk.

use std::sync::Arc;
use std::time::Duration;

use gang_core::{JobId, Shape};
use tonic::Code;

use crate::actor::{self, Cmd, Handle};
use crate::agents::AgentPool;
use crate::daemon_config::DaemonConfig;
use crate::error::MasterError;
use crate::job::State;
use crate::metrics::Metrics;
use crate::state::events::Caller;
use crate::state::events::ListFilter;
use crate::state::testkit::{caller, new_job};
use crate::state::views::JobView;

/// The jobs' owner: an account of this host (`nobody`), since a restarted master checks
/// every job it reads back against the account database.
fn owner() -> Caller {
    let mut c = caller(65534);
    c.owner.user = "nobody".into();
    c
}

async fn submit(h: &Handle) -> Result<JobView, MasterError> {
    let mut job = new_job("1x1", 65534, 0);
    job.owner = owner().owner;
    h.call(|tx| Cmd::Submit(Box::new(job), tx)).await
}

async fn jobs(h: &Handle) -> Vec<(u64, State)> {
    let all = h
        .call(|tx| Cmd::ListJobs(ListFilter::default(), owner(), tx))
        .await
        .expect("a query is answered");
    all.views.iter().map(|j| (j.id.0, j.state())).collect()
}

fn start(cfg: &DaemonConfig) -> (Handle, tokio::task::JoinHandle<()>) {
    let opened = tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(crate::persistence::open(cfg, |_| {}))
    })
    .expect("the state opens");
    actor::start(
        cfg.master.clone(),
        Arc::new(Metrics::default()),
        Arc::new(AgentPool::default()),
        opened,
    )
    .expect("the master starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_that_cannot_be_saved_is_refused_whole_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    // No agent ever registers: jobs stay queued, so only the test writes.
    let cfg = DaemonConfig::for_test(Shape::new(2, 2), db.clone());
    let (h, task) = start(&cfg);
    assert_eq!(submit(&h).await.unwrap().id, JobId(1));

    // The disk "fills up": every write of a job fails as SQLITE_FULL would, from now on.
    let other = rusqlite::Connection::open(&db).unwrap();
    other.busy_timeout(Duration::from_secs(5)).unwrap();
    other
        .execute_batch(
            "CREATE TRIGGER full_i BEFORE INSERT ON jobs BEGIN SELECT RAISE(FAIL, 'database or disk is full'); END;
             CREATE TRIGGER full_u BEFORE UPDATE ON jobs BEGIN SELECT RAISE(FAIL, 'database or disk is full'); END;",
        )
        .unwrap();
    let (a, b, c) = tokio::join!(
        submit(&h),
        submit(&h),
        h.call(|tx| Cmd::Cancel(JobId(1), owner(), tx))
    );
    for e in [a.map(|_| ()), b.map(|_| ()), c.map(|_| ())] {
        let status = tonic::Status::from(e.expect_err("nothing could be saved"));
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(
            status.message().starts_with("state not saved: ")
                && status.message().contains("database or disk is full"),
            "{status:?}"
        );
    }
    // Nothing of those rounds was applied: job 1 is still queued, there is no job 2.
    assert_eq!(jobs(&h).await, vec![(1, State::Queued)]);
    assert!(!task.is_finished(), "the master stays up");

    // Space comes back: the refused submissions used no job id.
    other
        .execute_batch("DROP TRIGGER full_i; DROP TRIGGER full_u;")
        .unwrap();
    assert_eq!(submit(&h).await.unwrap().id, JobId(2));
    h.call(|tx| Cmd::Cancel(JobId(1), owner(), tx))
        .await
        .unwrap();
    task.abort();
    drop(h);

    // A restarted master finds exactly what was acknowledged.
    let (h, task) = start(&cfg);
    assert_eq!(
        jobs(&h).await,
        vec![(2, State::Queued), (1, State::Cancelled)]
    );
    task.abort();
}

/// Ticks queued among heartbeats (a task that fell behind) become one tick at the end of
/// the round: node timeouts are judged after the heartbeats that waited with them.
#[test]
fn a_round_judges_timeouts_after_everything_that_waited_with_its_ticks() {
    let acked = |v| Cmd::TablesAcked(vec![((0, 0), v)]);
    let round = actor::ticks_last(vec![Cmd::Tick, acked(1), Cmd::Tick, acked(2), Cmd::Tick]);
    let order: Vec<String> = round
        .iter()
        .map(|c| match c {
            Cmd::Tick => "tick".to_string(),
            Cmd::TablesAcked(a) => format!("ack {}", a[0].1),
            _ => "other".to_string(),
        })
        .collect();
    assert_eq!(order, ["ack 1", "ack 2", "tick"]);
    assert!(
        actor::ticks_last(vec![acked(3)]).len() == 1,
        "no tick is added"
    );
}
