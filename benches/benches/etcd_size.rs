//! The size of a cluster's history in etcd: JOBS finished jobs (default 1,000,000) saved
//! through the master's etcd store as its batches save them (100 to a transaction, each row
//! a realistic finished 2x2 job), on a real 3-member etcd on loopback. Ended jobs are
//! archived a thousand to a key as they go (`etcd_archive`); at the end the history is
//! compacted and every member defragmented, and each member's database size is read.
//! Before that, a second master takes over and reads it all, as a standby does today.
//!
//! Prints JSON: the time it took, the takeover's read, the keys left, the rows' own bytes,
//! and each member's database size (total, and in use) after compaction and
//! defragmentation.

use std::time::{Duration, Instant};

use gang_benches::env_or;
use gang_e2e::etcd_cluster::EtcdCluster;
use gang_master::state::batch::Commit;
use gang_master::state::effects::Save;

fn main() {
    let jobs: u64 = env_or("JOBS", 1_000_000);
    let etcd = EtcdCluster::start(3).expect("etcd");
    let target: gang_etcd::Target = etcd.url("bench/size").parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (mut store, _) = rt
        .block_on(gang_master::store_etcd::EtcdStore::open(
            &target,
            "bench".into(),
            2,
            Duration::from_secs(10),
            |_| {},
        ))
        .expect("leads");
    let t0 = Instant::now();
    let mut raw = 0usize;
    let mut id = 1;
    while id <= jobs {
        let end = (id + 100).min(jobs + 1);
        let saves: Vec<Save> = (id..end)
            .map(|i| {
                let r = gang_e2e::failover::saved_job(i, "completed");
                raw += serde_json::to_vec(&r).unwrap().len();
                Save::Job(Box::new(r))
            })
            .collect();
        rt.block_on(async {
            tokio::task::block_in_place(|| store.commit(saves.iter())).expect("committed")
        });
        id = end;
        if id % 100_000 == 1 {
            eprintln!("{} jobs in {:.0} s", id - 1, t0.elapsed().as_secs_f64());
        }
    }
    let written = t0.elapsed();
    // What a standby does at takeover today (no warm copy): read the whole state. The
    // first leader's key is removed so that the second leads at once.
    drop(store);
    let takeover = rt.block_on(async {
        let e = gang_etcd::Etcd::connect(&etcd.endpoints(), Duration::from_secs(60)).unwrap();
        e.txn(gang_etcd::pb::etcdserverpb::TxnRequest {
            success: vec![gang_etcd::delete_op(b"/bench/size/leader".to_vec())],
            ..Default::default()
        })
        .await
        .expect("the leader key removed");
        let t = Instant::now();
        let (_store, loaded) = gang_master::store_etcd::EtcdStore::open(
            &target,
            "bench-2".into(),
            2,
            Duration::from_secs(60),
            |_| {},
        )
        .await
        .expect("the second master leads");
        assert_eq!(loaded.jobs.len() as u64, jobs);
        t.elapsed()
    });
    eprintln!("takeover read {jobs} jobs in {takeover:?}");
    let out = rt.block_on(async {
        let e = gang_etcd::Etcd::connect(&etcd.endpoints(), Duration::from_secs(60)).unwrap();
        let rev = e.status().await.unwrap().header.map_or(0, |h| h.revision);
        // The store compacts every 1000 commits: the newest revision may be compacted already.
        if let Err(err) = e.compact(rev).await
            && !err.to_string().contains("compacted")
        {
            panic!("compaction: {err}");
        }
        let archives = e.get_prefix(b"/bench/size/archive/", 100).await.unwrap().len();
        let left = e.get_prefix(b"/bench/size/jobs/", 1000).await.unwrap().len();
        let sizes: Vec<serde_json::Value> = e
            .defragment_each()
            .await
            .unwrap()
            .into_iter()
            .map(|(m, st)| serde_json::json!({"member": m, "db_size_bytes": st.db_size, "db_size_in_use_bytes": st.db_size_in_use}))
            .collect();
        serde_json::json!({
            "jobs": jobs,
            "write_seconds": written.as_secs_f64(),
            "takeover_read_seconds": takeover.as_secs_f64(),
            "jobs_per_second": jobs as f64 / written.as_secs_f64(),
            "rows_json_bytes": raw,
            "archive_keys": archives,
            "job_keys_left": left,
            "members_after_compaction_and_defrag": sizes,
        })
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
