//! The master's memory with 100 open, unread Attach streams on a 1 GiB output log
//! (security review, "Hostile users on a shared machine", finding 4). A 1x1 cluster of the
//! release binaries (its `max_output_bytes` raised by a config file so that 1 GiB and its
//! record headers fit) runs `head -c 1GiB /dev/zero` through the real path (agent push,
//! master log); then `ATTACH_STREAMS` (100) Attach(no_follow) streams are opened, each on
//! its own connection, each read for its first message only. The master's VmRSS and VmHWM
//! (`/proc/PID/status`) are reported before the streams and once its RSS has not grown for
//! 3 s with them open.
//!
//! Needs the release binaries, built beforehand:
//! `cargo build --release -p gang-master -p gang-agent -p gang-cli`, then
//! `cargo bench -p gang-benches --bench attach_memory`. Env: ATTACH_STREAMS (100),
//! ATTACH_LOG_MIB (1024). Prints one JSON line `{"bench":"attach_memory",...}`.

use std::process::Command;
use std::time::{Duration, Instant};

use gang_benches::{env_or, prebuilt_release_bins, status_kb};
use gang_local::{LocalCluster, LocalClusterOptions};
use gang_proto::v1;

/// A job of `bytes` zeros to stdout, run to its end: the log the streams attach to.
fn write_log(bins: &std::path::Path, c: &LocalCluster, bytes: u64) {
    let out = Command::new(bins.join("prun"))
        .args([
            "-n",
            "1",
            "--",
            "head",
            "-c",
            &bytes.to_string(),
            "/dev/zero",
        ])
        .env("GANG_MASTER", c.master_addr())
        .stdout(std::process::Stdio::null())
        .output()
        .expect("prun runs");
    assert!(
        out.status.success(),
        "the job writing the log failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The bytes of every job's output log in the cluster's directory.
fn log_bytes_on_disk(c: &LocalCluster) -> u64 {
    std::fs::read_dir(c.dir())
        .expect("the cluster's directory")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".output"))
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
        .filter_map(|f| f.metadata().ok())
        .map(|m| m.len())
        .sum::<u64>()
}

/// `streams` Attach streams to job 1, each past its first message and then left unread.
fn open_streams(
    rt: &tokio::runtime::Runtime,
    c: &LocalCluster,
    streams: usize,
) -> Vec<(
    v1::job_service_client::JobServiceClient<gang_proto::client::MasterChannel>,
    tonic::Streaming<v1::AttachResponse>,
)> {
    rt.block_on(async {
        let mut open = vec![];
        for _ in 0..streams {
            let mut client =
                v1::job_service_client::JobServiceClient::new(c.channel().await.expect("master"));
            let first = v1::AttachRequest {
                job_id: 1,
                no_follow: true,
                ..Default::default()
            };
            let mut s = client
                .attach(tokio_stream::once(first))
                .await
                .expect("attach accepted")
                .into_inner();
            s.message()
                .await
                .expect("the stream")
                .expect("a first message");
            open.push((client, s));
        }
        open
    })
}

/// The output relays fill what they may, then block on their streams: wait until the
/// RSS has not grown (by more than 1 MiB) for 3 s. The highest RSS seen.
fn settled_rss(pid: u32) -> u64 {
    let (mut peak, mut since) = (status_kb(pid, "VmRSS:"), Instant::now());
    let deadline = Instant::now() + Duration::from_secs(300);
    while since.elapsed() < Duration::from_secs(3) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        let now = status_kb(pid, "VmRSS:");
        if now > peak + 1024 {
            since = Instant::now();
        }
        peak = peak.max(now);
    }
    peak
}

fn main() {
    let streams: usize = env_or("ATTACH_STREAMS", 100);
    let log_mib: u64 = env_or("ATTACH_LOG_MIB", 1024);
    let bins = prebuilt_release_bins(&["gang-master", "gang-agent", "prun", "gangctl"]);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = dir.path().join("master.toml");
    std::fs::write(
        &config,
        format!("[limits]\nmax_output_bytes = {}\n", (2 * log_mib) << 20),
    )
    .expect("write the master's config");
    let opts = LocalClusterOptions {
        bin_dir: Some(bins.clone()),
        master_args: vec!["--config".into(), config.display().to_string()],
        env: vec![("RUST_LOG".into(), "warn".into())],
        ..LocalClusterOptions::default()
    };
    let mut c = LocalCluster::start((1, 1), opts).expect("cluster");
    let pid = c.master_pid().expect("the master runs");
    let bytes = log_mib << 20;
    write_log(&bins, &c, bytes);
    let log_bytes = log_bytes_on_disk(&c);
    let (rss_before, hwm_before) = (status_kb(pid, "VmRSS:"), status_kb(pid, "VmHWM:"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let open = open_streams(&rt, &c, streams);
    let peak = settled_rss(pid);
    let (rss_during, hwm_during) = (status_kb(pid, "VmRSS:"), status_kb(pid, "VmHWM:"));
    drop(open);
    let line = serde_json::json!({
        "bench": "attach_memory",
        "log_bytes_on_disk": log_bytes,
        "streams": streams,
        "master_rss_kb": {"before": rss_before, "with_streams": rss_during, "peak_sampled": peak},
        "master_hwm_kb": {"before": hwm_before, "with_streams": hwm_during},
        "growth_kb_per_stream": (rss_during.saturating_sub(rss_before)) / streams as u64,
    });
    println!("{line}");
    c.shutdown().expect("shutdown");
}
