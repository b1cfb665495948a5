//! The master's store on a real 3-member etcd cluster, below the daemon: ended jobs
//! archived and read back, and a standby's warm copy (every change followed while another
//! master leads) handed over at the election, equal to what a full read finds.

use std::time::Duration;

use gang_e2e::etcd_cluster::EtcdCluster;
use gang_e2e::failover::saved_job;
use gang_master::persistence::etcd::{EtcdStore, Loaded};
use gang_master::state::effects::Save;
use gang_master::state::round::Commit;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Leases of 2 s (the default): the leader and the standby of a test share one runtime
/// with two workers, on a host that runs nine etcd members on two cores; a 1 s lease was
/// once lost there, the leader's keepalives starved, and the test's write refused.
async fn open(target: &gang_etcd::Target, name: &str) -> (EtcdStore, Loaded) {
    // Elected within a few leases (another store's must end first), or the test fails.
    let within = Duration::from_secs(60);
    tokio::time::timeout(
        within,
        EtcdStore::open(target, name.into(), 2, Duration::from_secs(3), |_| {}),
    )
    .await
    .unwrap_or_else(|_| panic!("store {name} not elected within {within:?}"))
    .unwrap()
}

/// Commit `saves`, again while etcd has no raft leader (a member was killed: nothing of a
/// refused transaction lands, and the master's next batch saves the same jobs again), for
/// up to 20 s; never once this store no longer leads.
fn commit(rt: &tokio::runtime::Runtime, store: &mut EtcdStore, saves: &[Save]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = rt.block_on(async { tokio::task::block_in_place(|| store.commit(saves.iter())) });
        match r {
            Ok(()) => return,
            Err(e) if e.contains("no longer leads") || std::time::Instant::now() > deadline => {
                panic!("commit: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn jobs(ids: impl Iterator<Item = u64>, state: &str) -> Vec<Save> {
    ids.map(|id| Save::Job(Box::new(saved_job(id, state))))
        .collect()
}

/// Ended jobs leave their own keys for archive keys a thousand at a time, and come back
/// whole when a master reads the store.
#[test]
fn ended_jobs_are_archived_a_thousand_to_a_key_and_read_back() {
    let etcd = EtcdCluster::start(3).expect("etcd starts");
    let target: gang_etcd::Target = etcd.url("gang/archive").parse().unwrap();
    let rt = runtime();
    let (mut store, loaded) = rt.block_on(open(&target, "first"));
    assert!(loaded.jobs.is_empty());
    for batch in 0..25u64 {
        commit(
            &rt,
            &mut store,
            &jobs(batch * 100 + 1..=batch * 100 + 100, "completed"),
        );
    }
    let (own_keys, archives) = rt.block_on(async {
        let e = gang_etcd::Etcd::connect(&etcd.endpoints(), Duration::from_secs(3)).unwrap();
        let count = |p: &'static [u8], page| {
            let e = e.clone();
            async move { e.get_prefix(p, page).await.unwrap().len() }
        };
        (
            count(b"/gang/archive/jobs/", 1000).await,
            count(b"/gang/archive/archive/", 100).await,
        )
    });
    assert_eq!((own_keys, archives), (500, 2));
    drop(store);
    // The next leader (once the lease of the first has ended) reads all 2500 back.
    let (_store, loaded) = rt.block_on(open(&target, "second"));
    let ids: Vec<u64> = loaded.jobs.iter().map(|j| j.id.0).collect();
    assert_eq!(ids, (1..=2500).collect::<Vec<u64>>());
    assert_eq!(loaded.jobs.into_vec()[1234].argv[4], "run-1235.h5");
}

/// Two states the same, or where they first differ.
fn assert_same(a: &Loaded, b: &Loaded) {
    let rows = |l: &Loaded| -> Vec<String> {
        l.jobs
            .iter()
            .map(|j| serde_json::to_string(j).unwrap())
            .collect()
    };
    let (ra, rb) = (rows(a), rows(b));
    if let Some(i) = (0..ra.len().max(rb.len())).find(|&i| ra.get(i) != rb.get(i)) {
        panic!(
            "jobs differ first at #{i} ({} and {} jobs):\n{:?}\n{:?}",
            ra.len(),
            rb.len(),
            ra.get(i),
            rb.get(i)
        );
    }
    let mut drained = (a.drained.clone(), b.drained.clone());
    drained.0.sort();
    drained.1.sort();
    assert_eq!(drained.0, drained.1, "drained nodes");
    assert_eq!(
        (a.table_version, &a.mesh, &a.finished_unarchived),
        (b.table_version, &b.mesh, &b.finished_unarchived)
    );
}

/// A standby follows every change while another master leads, through archiving, the
/// leader's compactions and the loss of the etcd member it watched, and is elected with
/// that copy: the state it starts from is the one a full read finds.
#[test]
fn a_standby_takes_over_from_its_warm_copy_equal_to_a_full_read() {
    let mut etcd = EtcdCluster::start(3).expect("etcd starts");
    let target: gang_etcd::Target = etcd.url("gang/warm").parse().unwrap();
    let rt = runtime();
    let (mut leader, _) = rt.block_on(open(&target, "leader"));
    rt.block_on(leader.set_meta("mesh", "8x8")).unwrap();
    let standby = {
        let target = target.clone();
        rt.spawn(async move { open(&target, "standby").await })
    };
    // 2,500 jobs end (two thousands are archived), 1,000 more are queued one commit each
    // (the leader compacts etcd's history every thousand commits), nodes are drained.
    for batch in 0..25u64 {
        commit(
            &rt,
            &mut leader,
            &jobs(batch * 100 + 1..=batch * 100 + 100, "completed"),
        );
    }
    for id in 2501..=3000 {
        commit(&rt, &mut leader, &jobs(id..=id, "queued"));
    }
    // The member every connection starts with (the standby's watch among them) dies.
    etcd.kill(0);
    for id in 3001..=3500 {
        commit(&rt, &mut leader, &jobs(id..=id, "queued"));
    }
    let drain = |x, drained| Save::Drained {
        node: (x, 1),
        drained,
    };
    commit(&rt, &mut leader, &[drain(2, true), drain(3, true)]);
    commit(&rt, &mut leader, &[drain(2, false)]);
    // Jobs ended again after their archive, and queued ones ending.
    commit(&rt, &mut leader, &jobs(5..=6, "failed"));
    commit(&rt, &mut leader, &jobs(2501..=2600, "cancelled"));
    assert!(
        !standby.is_finished(),
        "the standby must wait for the leader"
    );
    drop(leader);
    let (_store, taken) = rt.block_on(standby).unwrap();
    assert!(
        taken.from_warm_copy,
        "the standby read the store at the election instead of taking its copy"
    );
    let full = rt.block_on(async {
        let e = gang_etcd::Etcd::connect(&etcd.endpoints(), Duration::from_secs(3)).unwrap();
        gang_master::persistence::warm_copy::read_all(&e, &target.prefix)
            .await
            .unwrap()
            .into_loaded()
    });
    assert_eq!(taken.jobs.len(), 3500);
    assert_same(&taken, &full);
    assert_eq!(taken.drained, vec![(3, 1)]);
    let fifth = taken.jobs.iter().nth(4).unwrap();
    assert_eq!(format!("{:?}", fifth.state()), "Failed");
}

/// With TLS to etcd, members asking for a client certificate, the store works as over
/// plain HTTP, the standby's watch included; without the certificate, or without TLS, etcd
/// answers nothing.
#[test]
fn the_store_speaks_tls_to_members_that_ask_for_a_certificate() {
    let etcd = EtcdCluster::start_tls(3).expect("etcd starts");
    let files = etcd.client_tls().expect("TLS files");
    let mut target: gang_etcd::Target = etcd.url("gang/tls").parse().unwrap();
    let tls = gang_etcd::Tls::read(&files.ca, Some((&files.cert, &files.key))).unwrap();
    assert!(!format!("{tls:?}").contains("PRIVATE KEY"), "{tls:?}");
    target.tls = Some(tls);
    let rt = runtime();
    let (mut leader, _) = rt.block_on(open(&target, "leader"));
    let standby = {
        let target = target.clone();
        rt.spawn(async move { open(&target, "standby").await })
    };
    for id in 1..=50 {
        commit(&rt, &mut leader, &jobs(id..=id, "queued"));
    }
    drop(leader);
    let (_store, taken) = rt.block_on(standby).unwrap();
    assert!(taken.from_warm_copy);
    assert_eq!(taken.jobs.len(), 50);
    rt.block_on(async {
        let t = Duration::from_secs(2);
        let no_cert = gang_etcd::Tls::read(&files.ca, None).unwrap();
        let e = gang_etcd::Etcd::connect_tls(&etcd.endpoints(), t, Some(&no_cert)).unwrap();
        assert!(
            e.get(b"/gang/tls/leader").await.is_err(),
            "no client certificate"
        );
        let plain = gang_etcd::Etcd::connect(&etcd.endpoints(), t).unwrap();
        assert!(plain.get(b"/gang/tls/leader").await.is_err(), "no TLS");
    });
}
