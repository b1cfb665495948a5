//! The output hub's logs: appends, readers, retries and lost output.

use super::*;

/// Whole records from `from` (a record boundary) to `to`.
fn records(hub: &OutputHub, job: u64, from: u64, to: u64) -> Vec<v1::Output> {
    let mut at = Cursor {
        record: from,
        ..Cursor::default()
    };
    hub.read(job, &mut at, to, u64::MAX).unwrap()
}

fn chunk(rank: u32, stream: v1::Stream, data: &str) -> v1::Output {
    v1::Output {
        rank,
        stream: stream as i32,
        data: data.as_bytes().to_vec(),
        offset: None,
    }
}

fn at(offset: u64, data: &str) -> v1::Output {
    v1::Output {
        rank: 0,
        stream: v1::Stream::Stdout as i32,
        data: data.as_bytes().to_vec(),
        offset: Some(offset),
    }
}

#[test]
fn retried_pushes_are_not_logged_twice_even_across_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let text = |hub: &OutputHub| {
        let len = *hub.follow(1).unwrap().borrow();
        let chunks = records(hub, 1, 0, len);
        String::from_utf8(chunks.into_iter().flat_map(|c| c.data).collect()).unwrap()
    };
    let hub = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
    hub.append(1, &[at(0, "one\n")]).unwrap();
    hub.append(1, &[at(0, "one\n")]).unwrap(); // the same push again
    hub.append(1, &[at(2, "e\ntwo\n")]).unwrap(); // overlapping the end
    assert_eq!(text(&hub), "one\ntwo\n");
    drop(hub);
    let hub = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
    hub.append(1, &[at(4, "two\n"), at(8, "three\n")]).unwrap();
    assert_eq!(text(&hub), "one\ntwo\nthree\n");
    // A gap (output the agent dropped) is kept as it came.
    hub.append(1, &[at(100, "late\n")]).unwrap();
    assert_eq!(text(&hub), "one\ntwo\nthree\nlate\n");
}

/// Two masters on one log (shared storage, etcd): the one deposed while paused in the
/// middle of a push writes it when it wakes, after the new leader wrote it and more.
/// Each byte is read once and in its place, the new leader's next write is whole (it
/// took in the other's record), and so is a third master's view of the log.
#[test]
fn a_deposed_masters_late_write_costs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let text = |hub: &OutputHub| {
        let len = *hub.follow(1).unwrap().borrow();
        String::from_utf8(
            hub.read_all(1, len)
                .unwrap()
                .into_iter()
                .flat_map(|c| c.data)
                .collect(),
        )
        .unwrap()
    };
    let old = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
    old.append(1, &[at(0, "0 1\n")]).unwrap();
    // The new leader takes over, and the agent's retried push comes to it.
    let new = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
    new.append(1, &[at(4, "0 2\n"), at(8, "0 3\n")]).unwrap();
    // The old one wakes and writes the push it was handling: "0 2" again.
    old.append(1, &[at(4, "0 2\n")]).unwrap();
    // Had it not looked first (paused between its look and its write), the same.
    let mut raw = Vec::new();
    record(&mut raw, 0, v1::Stream::Stdout as u8, Some(4), b"0 2\n");
    std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("1.out"))
        .unwrap()
        .write_all(&raw)
        .unwrap();
    new.append(1, &[at(12, "0 4\n")]).unwrap();
    assert_eq!(text(&new), "0 1\n0 2\n0 3\n0 4\n");
    assert_eq!(new.lost(1, 0, 16, 0).unwrap(), vec![]);
    let third = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
    third
        .append(1, &[at(12, "0 4\n"), at(16, "0 5\n")])
        .unwrap();
    assert_eq!(text(&third), "0 1\n0 2\n0 3\n0 4\n0 5\n");
    assert_eq!(third.lost(1, 0, 20, 0).unwrap(), vec![]);
    // Logs written before records said where they start read as they did.
    let mut legacy = Vec::new();
    record(&mut legacy, 0, v1::Stream::Stdout as u8, None, b"a\n");
    record(&mut legacy, 0, v1::Stream::Stdout as u8, None, b"b\n");
    std::fs::write(dir.path().join("2.out"), &legacy).unwrap();
    third.append(2, &[at(2, "b\n"), at(4, "c\n")]).unwrap();
    let len = *third.follow(2).unwrap().borrow();
    let all: Vec<u8> = third
        .read_all(2, len)
        .unwrap()
        .into_iter()
        .flat_map(|c| c.data)
        .collect();
    assert_eq!(all, b"a\nb\nc\n");
}

/// Found by fuzzing (`proto_output_batch`): an offset whose end passes u64 overflowed
/// (a panic in debug builds, which left the job's log lock poisoned for good).
#[test]
fn offsets_past_the_end_of_u64_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let hub = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
    hub.append(1, &[at(u64::MAX - 1, "abc")]).unwrap();
    hub.append(
        1,
        &[at(u64::MAX - 5, "ab"), chunk(0, v1::Stream::Stdout, "cd")],
    )
    .unwrap();
    hub.append(1, &[at(0, "one\n")]).unwrap();
    let len = *hub.follow(1).unwrap().borrow();
    let text: Vec<u8> = records(&hub, 1, 0, len)
        .into_iter()
        .flat_map(|c| c.data)
        .collect();
    assert_eq!(
        text, b"abcd",
        "a stream at the end of u64 takes no more offset output"
    );
    // "ab" says where it starts; "cd" does not.
    assert_eq!(len, AT_HEADER as u64 + 2 + HEADER as u64 + 2);
}

/// Found by fuzzing (`proto_output_batch`): when no data fit before the notice, an
/// empty record was written with it and the log passed its cap by a header.
#[test]
fn the_notice_alone_is_written_when_no_data_fits() {
    let dir = tempfile::tempdir().unwrap();
    let cap = 183;
    let hub = OutputHub::new(dir.path().to_path_buf(), cap).unwrap();
    let notice = truncation_notice(0, cap).len() as u64;
    // The first chunk leaves exactly room for the notice record, not for another.
    let first = "x".repeat((cap - 2 * HEADER as u64 - notice) as usize);
    hub.append(
        0,
        &[
            chunk(0, v1::Stream::Stdout, &first),
            chunk(0, v1::Stream::Stdout, "y"),
        ],
    )
    .unwrap();
    let len = *hub.follow(0).unwrap().borrow();
    assert_eq!(len, cap, "the data, then the notice, fill the cap exactly");
    let recs = records(&hub, 0, 0, len);
    assert_eq!(recs.len(), 2);
    assert!(String::from_utf8_lossy(&recs[1].data).contains("truncated"));
}

#[test]
fn idle_logs_are_closed_so_descriptors_do_not_run_out() {
    let dir = tempfile::tempdir().unwrap();
    let hub = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
    let followed = hub.follow(0).unwrap();
    for job in 0..3 * MAX_OPEN_LOGS as u64 {
        hub.append(job, &[at(0, "x\n")]).unwrap();
        assert!(hub.open_logs() <= MAX_OPEN_LOGS + 1);
    }
    // The followed log stayed open and still wakes its follower.
    hub.append(0, &[at(2, "y\n")]).unwrap();
    assert_eq!(*followed.borrow(), 2 * (AT_HEADER as u64 + 2));
    // A closed log reopens with what it had: a retried push is still deduplicated.
    hub.append(5, &[at(0, "x\n"), at(2, "z\n")]).unwrap();
    let len = *hub.follow(5).unwrap().borrow();
    let text: Vec<u8> = records(&hub, 5, 0, len)
        .into_iter()
        .flat_map(|c| c.data)
        .collect();
    assert_eq!(text, b"x\nz\n");
}

#[test]
fn appends_are_read_back_in_order_and_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let hub = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
    let rx = hub.follow(7).unwrap();
    hub.append(
        7,
        &[
            chunk(0, v1::Stream::Stdout, "a"),
            chunk(3, v1::Stream::Stderr, "bc"),
        ],
    )
    .unwrap();
    let len = *rx.borrow();
    let got = records(&hub, 7, 0, len);
    assert_eq!(
        got,
        vec![
            chunk(0, v1::Stream::Stdout, "a"),
            chunk(3, v1::Stream::Stderr, "bc")
        ]
    );
    drop(hub);
    let hub = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
    hub.append(7, &[chunk(1, v1::Stream::Stdout, "d")]).unwrap();
    let len2 = *hub.follow(7).unwrap().borrow();
    assert_eq!(
        records(&hub, 7, len, len2),
        vec![chunk(1, v1::Stream::Stdout, "d")]
    );
}

#[test]
fn output_beyond_the_cap_is_dropped_after_one_notice() {
    let dir = tempfile::tempdir().unwrap();
    let hub = OutputHub::new(dir.path().to_path_buf(), 200).unwrap();
    let line = "x".repeat(40);
    for _ in 0..10 {
        hub.append(5, &[chunk(1, v1::Stream::Stdout, &line)])
            .unwrap();
    }
    let len = *hub.follow(5).unwrap().borrow();
    assert!(len <= 200, "the log stays under the cap: {len}");
    let recs = records(&hub, 5, 0, len);
    let last = recs.last().unwrap();
    assert_eq!(last.stream, v1::Stream::Stderr as i32);
    assert!(String::from_utf8_lossy(&last.data).contains("truncated"));
    let kept: usize = recs[..recs.len() - 1].iter().map(|r| r.data.len()).sum();
    assert!(kept >= 40, "output up to the cap is kept: {kept}");
    // Reopened (a master restart), it is still full: nothing more, no second notice.
    drop(hub);
    let hub = OutputHub::new(dir.path().to_path_buf(), 200).unwrap();
    hub.append(5, &[chunk(1, v1::Stream::Stdout, "more")])
        .unwrap();
    assert_eq!(*hub.follow(5).unwrap().borrow(), len);
}

/// What a rank wrote and the log lacks is lost: a gap the agent left (its spool was
/// full), and what the cap kept out. The master's notice is not the rank's stderr.
#[test]
fn losses_are_what_a_rank_wrote_and_the_log_lacks() {
    let dir = tempfile::tempdir().unwrap();
    let hub = OutputHub::new(dir.path().to_path_buf(), 200).unwrap();
    let err = |off, d: &str| v1::Output {
        rank: 2,
        stream: v1::Stream::Stderr as i32,
        data: d.as_bytes().to_vec(),
        offset: Some(off),
    };
    hub.append(9, &[at(0, "abc"), err(0, "e1")]).unwrap();
    hub.append(9, &[at(10, "xyz")]).unwrap(); // bytes 3..10 never came
    assert_eq!(hub.lost(9, 0, 13, 0).unwrap(), vec![(OutStream::Stdout, 7)]);
    assert_eq!(hub.lost(9, 2, 0, 2).unwrap(), vec![]);
    // Past the cap: kept out, counted; the notice is not rank 2's stderr.
    hub.append(9, &[err(2, &"z".repeat(300))]).unwrap();
    let lost = hub.lost(9, 2, 0, 302).unwrap();
    assert_eq!(lost.len(), 1);
    assert!(lost[0].1 > 100, "{lost:?}");
    // The same after a restart (the counts come back from the log).
    drop(hub);
    let hub = OutputHub::new(dir.path().to_path_buf(), 200).unwrap();
    assert_eq!(hub.lost(9, 2, 0, 302).unwrap(), lost);
    assert_eq!(hub.lost(9, 0, 13, 0).unwrap(), vec![(OutStream::Stdout, 7)]);
}

/// A reader far behind gets the log a bounded piece at a time, records larger than the
/// bound in several pieces, and the pieces put together are the log.
#[test]
fn reads_are_bounded_and_pieces_make_up_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let hub = OutputHub::new(dir.path().to_path_buf(), u64::MAX).unwrap();
    let piece = "p".repeat(30 * 1024);
    for i in 0..10u64 {
        hub.append(4, &[at(i * piece.len() as u64, &piece)])
            .unwrap();
    }
    let big = "b".repeat(3 * READ_MAX as usize + 5);
    hub.append(4, &[chunk(1, v1::Stream::Stderr, &big)])
        .unwrap();
    let len = *hub.follow(4).unwrap().borrow();
    let (mut at, mut reads) = (Cursor::default(), 0);
    // What each rank's stream got, put together.
    let mut got: HashMap<(u32, i32), Vec<u8>> = HashMap::new();
    while at.record < len {
        let before = at.position();
        let chunks = hub.read(4, &mut at, len, READ_MAX).unwrap();
        let bytes: usize = chunks.iter().map(|c| c.data.len()).sum();
        assert!(bytes as u64 <= READ_MAX, "{bytes} bytes in one read");
        assert_ne!(at.position(), before, "every read moves on");
        for c in chunks {
            got.entry((c.rank, c.stream)).or_default().extend(c.data);
        }
        reads += 1;
    }
    assert_eq!(at.position(), (len, 0));
    assert!(reads >= 8, "{reads} reads");
    let out = &got[&(0, v1::Stream::Stdout as i32)];
    assert_eq!(out, piece.repeat(10).as_bytes());
    let err = &got[&(1, v1::Stream::Stderr as i32)];
    assert_eq!(err, big.as_bytes(), "the big record, whole again");
}
