//! Target `ctl_frame`: whatever bytes a process of the rank's user writes to the rank's
//! control socket. The messaging library's reader (`gang_msg::abi::read_frame`) and the
//! agent's (`control::read`) read the same frames (or both refuse), allocate in proportion
//! to the bytes sent (never to the length a frame claims, and never past
//! `MAX_CTL_FRAME`), and what decodes goes through the agent's handling
//! (`RankCtl::take`): puts within the limits are kept, the others dropped and the next
//! fence refused with a message that says so, and what the rank keeps stays bounded.
//! The library reads the same bytes as replies (`CtlReply`), as it would from a
//! misbehaving agent.

use gang_msg::abi::{
    CTL_KEY_MAX, CTL_PUTS_MAX, CTL_VALUE_MAX, CtlReply, CtlRequest, MAX_CTL_FRAME, read_frame,
    write_frame,
};
use proptest::collection::vec;
use proptest::prelude::*;

use super::now;
use crate::msg::control::{CtlStep, RankCtl, read};
use crate::ranks::RankKey;

const TARGET: &str = "ctl_frame";

/// A frame as the library writes it.
pub(super) fn framed<T: serde::Serialize>(msg: &T) -> Vec<u8> {
    let mut out = Vec::new();
    write_frame(&mut out, msg).expect("a frame within the limit");
    out
}

fn request() -> impl Strategy<Value = CtlRequest> {
    let text = prop_oneof!["[a-z0-9-]{0,8}", "\\PC{0,8}"];
    prop_oneof![
        (any::<u32>(), any::<u32>()).prop_map(|(pid, rank)| CtlRequest::Hello { pid, rank }),
        (
            prop_oneof![
                3 => text.clone(),
                1 => (CTL_KEY_MAX - 1..CTL_KEY_MAX + 2).prop_map(|n| "k".repeat(n)),
            ],
            prop_oneof![
                3 => text.clone(),
                1 => (CTL_VALUE_MAX - 1..CTL_VALUE_MAX + 2).prop_map(|n| "v".repeat(n)),
            ],
        )
            .prop_map(|(key, value)| CtlRequest::Put { key, value }),
        Just(CtlRequest::Fence),
        (any::<i32>(), text).prop_map(|(code, message)| CtlRequest::Abort { code, message }),
    ]
}

/// A connection's bytes: mutated seeds, fresh bytes, or frames of built requests
/// (possibly cut short).
fn input() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => gang_fuzz::bytes(gang_fuzz::seeds(TARGET)),
        2 => (vec(request(), 1..6), any::<prop::sample::Index>()).prop_map(|(reqs, cut)| {
            let mut b: Vec<u8> = reqs.iter().flat_map(framed).collect();
            // Usually whole; sometimes cut inside the last frame.
            if cut.index(4) == 0 {
                b.truncate(cut.index(b.len() + 1));
            }
            b
        }),
    ]
}

/// Most one read may allocate for `n` bytes of input: the body grows as bytes arrive
/// (doubling), and JSON's strings are no longer than the body.
fn alloc_bound(n: usize) -> usize {
    2 * n + 4096
}

/// Every frame of `bytes` as the library reads it; the end (Ok(None)) or the refusal.
fn library<T: for<'de> serde::Deserialize<'de>>(bytes: &[u8]) -> (Vec<T>, bool) {
    let mut r = bytes;
    let mut got = Vec::new();
    loop {
        match read_frame::<T>(&mut r) {
            Ok(Some(m)) => got.push(m),
            Ok(None) => return (got, true),
            Err(_) => return (got, false),
        }
    }
}

fn check(bytes: Vec<u8>) -> Result<u64, TestCaseError> {
    let ((lib, lib_clean), largest) = gang_fuzz::largest_alloc(|| library::<CtlRequest>(&bytes));
    prop_assert!(largest <= alloc_bound(bytes.len()).min(MAX_CTL_FRAME as usize + 4096));
    // The agent's reader: the same frames, the same end.
    let ((agent, agent_clean), largest) = gang_fuzz::largest_alloc(|| {
        let mut r = &bytes[..];
        let mut got = Vec::new();
        loop {
            match now(read(&mut r)) {
                Ok(Some(m)) => got.push(m),
                Ok(None) => return (got, true),
                Err(_) => return (got, false),
            }
        }
    });
    prop_assert!(largest <= alloc_bound(bytes.len()).min(MAX_CTL_FRAME as usize + 4096));
    prop_assert_eq!(&agent, &lib);
    prop_assert_eq!(agent_clean, lib_clean);
    // Replies: the library's side of the socket.
    let (replies, _) = library::<CtlReply>(&bytes);
    for r in &replies {
        prop_assert_eq!(&library::<CtlReply>(&framed(r)).0, &vec![r.clone()]);
    }
    // The agent's handling, in order.
    let key = RankKey { job_id: 7, rank: 1 };
    let mut rank = RankCtl::default();
    let mut dropped = false;
    for req in agent.clone() {
        let epoch = rank.epoch;
        let over = match &req {
            CtlRequest::Put { key, value } => {
                key.len() > CTL_KEY_MAX || value.len() > CTL_VALUE_MAX
            }
            _ => false,
        };
        let kept_before = rank.puts.clone();
        let step = rank.take(key, req.clone());
        match (&req, step) {
            (CtlRequest::Fence, CtlStep::Refuse(why)) => {
                prop_assert!(dropped, "a fence refused with no put dropped: {}", why);
                prop_assert!(why.contains("dropped"), "{}", why);
                // The reply reaches the library.
                let reply = CtlReply::Error { message: why };
                prop_assert_eq!(library::<CtlReply>(&framed(&reply)).0, vec![reply]);
                dropped = false;
            }
            (CtlRequest::Fence, CtlStep::Fence(e)) => {
                prop_assert!(!dropped, "a dropped put went unreported");
                prop_assert_eq!(e, epoch + 1);
            }
            (CtlRequest::Put { key, value }, CtlStep::Nothing) => {
                if over {
                    prop_assert_eq!(&rank.puts, &kept_before, "a put over the limits was kept");
                    dropped = true;
                } else if rank.puts.get(key) != Some(value) {
                    // Within the per-put limits, dropped only for the rank's total.
                    prop_assert!(rank.held + key.len() + value.len() > CTL_PUTS_MAX);
                    dropped = true;
                }
            }
            (CtlRequest::Hello { .. } | CtlRequest::Abort { .. }, CtlStep::Nothing) => {}
            (req, step) => prop_assert!(false, "{:?} gave {:?}", req, step),
        }
        let held: usize = rank.puts.iter().map(|(k, v)| k.len() + v.len()).sum();
        prop_assert_eq!(held, rank.held);
        prop_assert!(held <= CTL_PUTS_MAX);
    }
    Ok(agent.len().max(1) as u64)
}

#[test]
fn fuzz_ctl_frame() {
    gang_fuzz::run(TARGET, 400, input(), check);
}

/// The total bound, which a fuzz input (at most 64 KiB) cannot reach: puts past it are
/// dropped, and the next fence says so.
#[test]
fn a_rank_cannot_keep_more_than_the_limit() {
    let key = RankKey { job_id: 7, rank: 1 };
    let mut rank = RankCtl::default();
    let value = "v".repeat(CTL_VALUE_MAX);
    for i in 0.. {
        let k = format!("k{i}");
        rank.take(
            key,
            CtlRequest::Put {
                key: k.clone(),
                value: value.clone(),
            },
        );
        if !rank.puts.contains_key(&k) {
            break;
        }
    }
    assert!(rank.held <= CTL_PUTS_MAX);
    match rank.take(key, CtlRequest::Fence) {
        CtlStep::Refuse(why) => assert!(why.contains("over the limit"), "{why}"),
        step => panic!("{step:?}"),
    }
    // Reported once; the next fence goes ahead with what was kept.
    assert_eq!(rank.take(key, CtlRequest::Fence), CtlStep::Fence(1));
}
