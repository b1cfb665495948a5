use super::*;

fn part(w: u32, h: u32) -> Submesh {
    Submesh::new(0, 0, w, h)
}

fn exit(job: u64, rank: u32, w: u32, code: i32) -> RankExit {
    RankExit {
        job_id: job,
        rank,
        x: rank % w,
        y: rank / w,
        how: Some(How::Code(code)),
        ..Default::default()
    }
}

/// The subtrees of a node's children cover its subtree less itself, and the sizes and
/// lingers follow the tree's shape: leaves linger least, the root most.
#[test]
fn a_place_knows_its_subtree_and_its_childrens() {
    let (n, width) = (64u32, 4u32);
    let mut total_hops = 0;
    for r in 0..n {
        let p = Place::new(r, part(8, 8), width, "p".into());
        let covered: u32 = p.children.iter().map(|(_, c)| c.len() as u32).sum();
        assert_eq!(covered + 1, p.size, "rank {r}");
        for (c, range) in &p.children {
            assert_eq!(range.start, *c, "a child heads its range");
            let child = Place::new(*c, part(8, 8), width, "p".into());
            assert_eq!(child.size as usize, range.len());
            assert_eq!(child.parent.as_ref().map(|p| p.0), Some(r));
            assert_eq!(child.hops, p.hops + 1);
            assert!(child.linger < p.linger || child.linger == LINGER_MAX);
        }
        if p.children.is_empty() {
            assert_eq!(p.linger, LINGER_BASE);
        }
        total_hops += p.hops;
    }
    let root = Place::new(0, part(8, 8), width, String::new());
    assert_eq!((root.size, root.parent.clone(), root.hops), (64, None, 0));
    assert!(root.linger > LINGER_BASE && root.linger <= LINGER_MAX);
    assert!(total_hops > n, "a tree, not a star");
}

/// A leaf's own clean exit completes its subtree: it goes up at once, to the parent.
#[test]
fn a_complete_subtree_goes_up_at_once() {
    let t0 = Instant::now();
    let leaf = Place::new(63, part(8, 8), 4, "parent:1".into());
    assert!(leaf.children.is_empty());
    let mut g = Gather::new(leaf);
    assert_eq!(g.due(t0), None, "nothing held");
    g.own(exit(5, 63, 8, 0), t0);
    let b = g.due(t0).expect("complete");
    assert_eq!(b.exits.len(), 1);
    assert_eq!(b.to.as_ref().map(|t| t.1.as_str()), Some("parent:1"));
    assert!(g.finished());
    assert_eq!(g.due(t0 + LINGER_MAX), None, "sent once");
}

/// An interior node waits for its children's batches; with one child silent it sends
/// what it has after its linger, and the latecomer in a batch of its own; failures are
/// counted but not carried.
#[test]
fn a_partial_subtree_goes_up_after_the_linger_and_the_rest_later() {
    let t0 = Instant::now();
    let place = Place::new(0, part(4, 1), 16, String::new());
    assert_eq!(place.children.len(), 3);
    let linger = place.linger;
    let mut g = Gather::new(place);
    let at = |r: u32| Coord { x: r, y: 0 };
    g.own(exit(9, 0, 4, 0), t0);
    g.child(1, at(1), (9, vec![exit(9, 1, 4, 0)], vec![]), t0)
        .unwrap();
    // Rank 2 failed: the master has it; only its number comes up.
    g.child(2, at(2), (9, vec![], vec![2]), t0).unwrap();
    assert_eq!(g.due(t0 + linger / 2), None, "rank 3 is awaited");
    assert_eq!(g.deadline(), Some(t0 + linger));
    let b = g.due(t0 + linger).expect("the linger ran out");
    assert_eq!(
        (b.exits.len(), b.direct.clone(), b.to.clone()),
        (2, vec![2], None)
    );
    assert!(!g.finished());
    // The latecomer: complete now, at once.
    let late = t0 + linger * 3;
    g.child(3, at(3), (9, vec![exit(9, 3, 4, 0)], vec![]), late)
        .unwrap();
    let b = g.due(late).expect("complete");
    assert_eq!(b.exits.iter().map(|e| e.rank).collect::<Vec<_>>(), vec![3]);
    assert!(g.finished());
}

/// Only a child, from its own node, speaking for its own subtree, is heard; a batch sent
/// again is not counted twice.
#[test]
fn a_childs_batch_is_checked_against_the_tree_and_the_caller() {
    let t0 = Instant::now();
    // 64 ranks, width 4: rank 0's children head ranges; rank 1's subtree is 1..16.
    let mut g = Gather::new(Place::new(1, part(8, 8), 4, "root".into()));
    let (child, range) = g.place.children[0].clone();
    let node = g.place.node_of(child);
    let stranger = Coord { x: 7, y: 7 };
    let e = |r| exit(4, r, 8, 0);
    assert!(g.child(40, node, (4, vec![e(40)], vec![]), t0).is_err());
    assert!(
        g.child(child, stranger, (4, vec![e(child)], vec![]), t0)
            .is_err()
    );
    let outside = range.end + 1;
    assert!(
        g.child(child, node, (4, vec![e(outside)], vec![]), t0)
            .is_err()
    );
    assert!(
        g.child(child, node, (4, vec![], vec![outside]), t0)
            .is_err()
    );
    assert!(
        g.child(child, node, (5, vec![e(child)], vec![]), t0)
            .is_err()
    );
    let mut lying = e(child);
    lying.x += 1;
    assert!(g.child(child, node, (4, vec![lying], vec![]), t0).is_err());
    assert_eq!(g.due(t0 + LINGER_MAX), None, "nothing refused was kept");
    g.child(child, node, (4, vec![e(child)], vec![]), t0)
        .unwrap();
    g.child(child, node, (4, vec![e(child)], vec![]), t0)
        .unwrap();
    let b = g.due(t0 + LINGER_MAX).unwrap();
    assert_eq!(b.exits.len(), 1, "counted once");
}

/// A clean exit travels up; any failure goes to the master at once, but for a death by
/// the signal the master itself had sent (a cancel).
#[test]
fn only_clean_exits_and_asked_for_deaths_are_gathered() {
    for signalled in [false, true] {
        assert!(!urgent(&exit(1, 0, 1, 0), signalled));
        assert!(urgent(&exit(1, 0, 1, 3), signalled));
        let mut aborted = exit(1, 0, 1, 0);
        aborted.abort = Some("MPI_Abort".into());
        assert!(urgent(&aborted, signalled));
        let not_started = RankExit {
            how: Some(How::Error("no such file".into())),
            ..Default::default()
        };
        assert!(urgent(&not_started, signalled));
        assert!(urgent(&RankExit::default(), signalled));
    }
    let killed = RankExit {
        how: Some(How::Signal(15)),
        ..Default::default()
    };
    assert!(urgent(&killed, false), "a death nobody asked for is news");
    assert!(!urgent(&killed, true), "the cancel's own deaths gather");
    let mut killed_aborting = killed.clone();
    killed_aborting.abort = Some("MPI_Abort".into());
    assert!(urgent(&killed_aborting, true));
}
