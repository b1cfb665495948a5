//! The outbox's behaviour in virtual time: gathering into pushes, order, the window, the spool, losses.

use super::*;
use gang_proto::v1::rank_exit::How;

fn key(job_id: u64, rank: u32) -> RankKey {
    RankKey { job_id, rank }
}

fn exit(job_id: u64, rank: u32) -> RankExit {
    RankExit {
        job_id,
        rank,
        x: 0,
        y: 0,
        how: Some(How::Code(0)),
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn small_output_waits_for_the_push_delay() {
    let outbox = Outbox::new();
    let t0 = Instant::now();
    outbox.push_output(key(1, 0), Stream::Stdout, b"a".to_vec());
    outbox.push_output(key(1, 0), Stream::Stdout, b"b".to_vec());
    outbox.push_output(key(1, 0), Stream::Stderr, b"c".to_vec());
    let Outgoing::Output(pushes) = outbox.next().await else {
        panic!("expected output");
    };
    assert!(t0.elapsed() >= PUSH_DELAY);
    assert_eq!(pushes.len(), 1);
    let chunks = &pushes[0].chunks;
    assert_eq!(chunks.len(), 2);
    assert_eq!(chunks[0].data, b"ab");
    assert_eq!(chunks[1].data, b"c");
    assert!(!outbox.is_idle());
    outbox.done();
    assert!(outbox.is_idle());
}

#[tokio::test(start_paused = true)]
async fn full_push_goes_at_once_and_exit_comes_after_output() {
    let outbox = Outbox::new();
    let t0 = Instant::now();
    outbox.push_output(key(1, 0), Stream::Stdout, vec![b'x'; PUSH_BYTES]);
    outbox.push_output(key(2, 0), Stream::Stdout, b"y".to_vec());
    outbox.push_exit(exit(2, 0));
    let Outgoing::Output(first) = outbox.next().await else {
        panic!("expected output");
    };
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].job_id, 1);
    outbox.done();
    // The exit behind it makes the rest due at once.
    let Outgoing::Output(second) = outbox.next().await else {
        panic!("expected output");
    };
    assert_eq!(second[0].job_id, 2);
    assert_eq!(t0.elapsed(), Duration::ZERO);
    outbox.done();
    assert!(matches!(outbox.next().await, Outgoing::Exit(e) if e.job_id == 2));
    outbox.done();
    assert!(outbox.is_idle());
}

fn windowed(window: usize, spool: Option<&std::path::Path>, cap: u64) -> Outbox {
    if let Some(dir) = spool {
        Spools::prepare(dir).unwrap();
    }
    Outbox::with_config(OutboxConfig {
        window,
        stall_after: STALL_AFTER,
        spool_dir: spool.map(|p| p.to_path_buf()),
        spool_cap: cap,
    })
}

fn text(pushes: &[OutputBatch]) -> Vec<u8> {
    pushes
        .iter()
        .flat_map(|b| &b.chunks)
        .flat_map(|c| c.data.clone())
        .collect()
}

/// Backpressure: a rank at its window waits (its pipes unread) until the sender has
/// taken its output; nothing is dropped however much it writes.
#[tokio::test(start_paused = true)]
async fn a_rank_at_its_window_waits_for_the_sender_and_loses_nothing() {
    let outbox = windowed(8, None, 0);
    let k = key(1, 0);
    outbox.push_output(k, Stream::Stdout, b"0123".to_vec());
    outbox.wait_room(k).await; // under the window: at once
    outbox.push_output(k, Stream::Stdout, b"4567".to_vec());
    let waiting = outbox.wait_room(k);
    tokio::pin!(waiting);
    assert!(
        futures_poll(waiting.as_mut()).is_pending(),
        "at the window the pump waits"
    );
    let Outgoing::Output(pushes) = outbox.next().await else {
        panic!("expected output");
    };
    assert_eq!(text(&pushes), b"01234567");
    waiting.await; // room again
    outbox.done();
    assert_eq!(outbox.lost_bytes(k), (0, 0));
}

/// The master stops answering: after `STALL_AFTER` the rank's output goes past its
/// window into the job's spool, comes back in order, and the spool file goes.
#[tokio::test(start_paused = true)]
async fn a_stalled_sender_spools_and_delivers_everything_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = windowed(4, Some(dir.path()), 1 << 20);
    let k = key(3, 1);
    outbox.push_output(k, Stream::Stdout, b"ab".to_vec());
    // A push goes out and is not answered.
    let Outgoing::Output(first) = outbox.next().await else {
        panic!("expected output");
    };
    assert_eq!(text(&first), b"ab");
    outbox.push_output(k, Stream::Stdout, b"cdef".to_vec());
    let t0 = Instant::now();
    outbox.wait_room(k).await; // at the window, until the stall is seen
    assert!(t0.elapsed() >= STALL_AFTER);
    for chunk in [b"gh", b"ij", b"kl"] {
        outbox.push_output(k, Stream::Stdout, chunk.to_vec());
    }
    assert!(dir.path().join("3.spool").exists(), "spooled to disk");
    assert_eq!(outbox.queued_bytes(k), 4, "memory holds the window only");
    outbox.push_exit(exit(3, 1));
    // The master is back: the first push is acknowledged, the rest follows.
    outbox.done();
    let Outgoing::Output(rest) = outbox.next().await else {
        panic!("expected output");
    };
    assert_eq!(text(&rest), b"cdefghijkl");
    assert_eq!(rest[0].chunks.len(), 1, "contiguous: one chunk at offset 2");
    assert_eq!(rest[0].chunks[0].offset, Some(2));
    outbox.done();
    let Outgoing::Exit(e) = outbox.next().await else {
        panic!("expected the exit");
    };
    assert_eq!((e.stdout_bytes, e.stderr_bytes), (12, 0));
    outbox.done();
    assert!(!dir.path().join("3.spool").exists(), "the spool file goes");
}

/// Past the job's spool bound, output is discarded and counted; what was kept keeps
/// its offsets, so the master sees the gap, and the exit report says how much the
/// rank produced.
#[tokio::test(start_paused = true)]
async fn past_the_spool_bound_output_is_counted_as_lost() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = windowed(2, Some(dir.path()), 4);
    let k = key(5, 0);
    outbox.push_output(k, Stream::Stderr, b"xy".to_vec());
    let Outgoing::Output(_) = outbox.next().await else {
        panic!("expected output");
    };
    tokio::time::sleep(STALL_AFTER).await;
    outbox.push_output(k, Stream::Stderr, b"12".to_vec()); // into the window
    outbox.push_output(k, Stream::Stderr, b"3456".to_vec()); // the window is full: spooled
    outbox.push_output(k, Stream::Stderr, b"78".to_vec()); // the spool is full: lost
    assert_eq!(outbox.lost_bytes(k), (0, 2));
    outbox.push_exit(exit(5, 0));
    outbox.done();
    let Outgoing::Output(rest) = outbox.next().await else {
        panic!("expected output");
    };
    assert_eq!(text(&rest), b"123456");
    assert_eq!(rest[0].chunks[0].offset, Some(2));
    outbox.done();
    let Outgoing::Exit(e) = outbox.next().await else {
        panic!("expected the exit");
    };
    assert_eq!((e.stdout_bytes, e.stderr_bytes), (0, 10));
}

/// Poll a future once.
fn futures_poll<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    f.poll(&mut cx)
}
