//! The placers against a brute-force search of every base, and their names.

use proptest::prelude::*;

use super::*;

/// Every base, both orientations, node by node: the reference the placers answer to.
fn brute_force(occ: &Occupancy, shape: Shape, rotate: bool) -> Vec<Submesh> {
    let mesh = occ.mesh();
    let mut shapes = vec![shape];
    if rotate && shape.rotated() != shape {
        shapes.push(shape.rotated());
    }
    let mut out = vec![];
    for s in shapes {
        for y in 0..mesh.h {
            for x in 0..mesh.w {
                let sm = Submesh::at(x, y, s);
                if sm.within(mesh) && sm.nodes().all(|(nx, ny)| !occ.is_busy(nx, ny)) {
                    out.push(sm);
                }
            }
        }
    }
    out
}

/// A mesh with random busy single nodes (not just rectangles: the hardest case for
/// the jumps) plus the request to place.
fn scenario() -> impl Strategy<Value = (Occupancy, Shape)> {
    // Narrow meshes (one bitmap word a row) and wide ones (several words a row).
    prop_oneof![(1u32..=12, 1u32..=12), (60u32..=140, 1u32..=3)]
        .prop_flat_map(|(w, h)| {
            let cells = (w * h) as usize;
            (
                Just(Shape::new(w, h)),
                proptest::collection::vec(proptest::bool::weighted(0.45), cells),
                1..=w.max(h).min(70),
                1..=w.max(h).min(70),
            )
        })
        .prop_map(|(mesh, busy, rw, rh)| {
            let mut occ = Occupancy::new(mesh);
            for (i, b) in busy.into_iter().enumerate() {
                if b {
                    occ.occupy(Submesh::new(i as u32 % mesh.w, i as u32 / mesh.w, 1, 1));
                }
            }
            (occ, Shape::new(rw, rh))
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn adaptive_scan_is_complete((occ, shape) in scenario()) {
        let found = AdaptiveScan.find(&occ, shape);
        let all = brute_force(&occ, shape, true);
        prop_assert_eq!(found.is_some(), !all.is_empty());
        if let Some(sm) = found {
            prop_assert!(occ.is_free(sm));
            // Own orientation first, and the first such base in row-major order.
            prop_assert_eq!(sm, all[0]);
        }
    }

    #[test]
    fn first_fit_is_first_in_own_orientation((occ, shape) in scenario()) {
        let ff = FirstFit.find(&occ, shape);
        prop_assert_eq!(ff, brute_force(&occ, shape, false).first().copied());
        if ff.is_some() {
            prop_assert!(AdaptiveScan.find(&occ, shape).is_some());
        }
    }

    #[test]
    fn best_fit_finds_exactly_when_first_fit_does((occ, shape) in scenario()) {
        let bf = BestFit.find(&occ, shape);
        prop_assert_eq!(bf.is_some(), FirstFit.find(&occ, shape).is_some());
        if let Some(sm) = bf {
            prop_assert!(occ.is_free(sm));
            prop_assert_eq!(sm.shape(), shape);
        }
    }

    /// Random occupy/release sequences: placements never overlap, the bitmap always equals
    /// the union of live placements, and freeing everything gives back an empty mesh.
    #[test]
    fn occupy_release_sequences_never_overlap(
        kind in prop::sample::select(PlacerKind::ALL.to_vec()),
        ops in proptest::collection::vec((1u32..=5, 1u32..=5, any::<bool>(), any::<prop::sample::Index>()), 1..120),
    ) {
        let mesh = Shape::new(9, 7);
        let placer = kind.get();
        let mut occ = Occupancy::new(mesh);
        let mut live: Vec<Submesh> = vec![];
        for (w, h, free, pick) in ops {
            if free && !live.is_empty() {
                let sm = live.swap_remove(pick.index(live.len()));
                occ.release(sm);
            } else if let Some(sm) = placer.find(&occ, Shape::new(w, h)) {
                prop_assert!(live.iter().all(|l| !l.overlaps(sm)), "{} overlaps", sm);
                occ.occupy(sm);
                live.push(sm);
            } else {
                prop_assert!(brute_force(&occ, Shape::new(w, h), placer.rotates()).is_empty());
            }
            prop_assert_eq!(occ.busy(), live.iter().map(|s| s.area()).sum::<u64>());
            prop_assert_eq!(occ.count_busy(), occ.busy());
        }
        for sm in live.drain(..) {
            occ.release(sm);
        }
        prop_assert_eq!(occ, Occupancy::new(mesh));
    }
}

#[test]
fn adaptive_scan_rotates_when_own_orientation_fits_nowhere() {
    // 4x4 mesh with the top two rows busy: a 1x3 (tall) fits only as 3x1 (wide).
    let mut occ = Occupancy::new(Shape::new(4, 4));
    occ.occupy(Submesh::new(0, 2, 4, 2));
    let tall = Shape::new(1, 3);
    assert_eq!(
        AdaptiveScan.find(&occ, tall),
        Some(Submesh::new(0, 0, 3, 1))
    );
    assert_eq!(FirstFit.find(&occ, tall), None);
    assert_eq!(BestFit.find(&occ, tall), None);
    assert!(AdaptiveScan.can_ever_fit(Shape::new(4, 2), tall));
    assert!(!FirstFit.can_ever_fit(Shape::new(4, 2), tall));
}

#[test]
fn adaptive_scan_jumps_past_the_blocking_node() {
    // Row 0: busy at x = 2; a 2x1 request must land at x = 3, never at x = 1 or 2.
    let mut occ = Occupancy::new(Shape::new(6, 1));
    occ.occupy(Submesh::new(0, 0, 1, 1));
    occ.occupy(Submesh::new(2, 0, 1, 1));
    assert_eq!(
        AdaptiveScan.find(&occ, Shape::new(2, 1)),
        Some(Submesh::new(3, 0, 2, 1))
    );
}

#[test]
fn best_fit_packs_against_busy_nodes_and_edges() {
    // 8x4 mesh, a 1x2 job at (5,0). A 2x2 at (0,0) touches two mesh edges (4 cells);
    // at (6,0) it touches the job (2), the bottom edge (2) and the right edge (2).
    let mut occ = Occupancy::new(Shape::new(8, 4));
    occ.occupy(Submesh::new(5, 0, 1, 2));
    assert_eq!(
        FirstFit.find(&occ, Shape::new(2, 2)),
        Some(Submesh::new(0, 0, 2, 2))
    );
    assert_eq!(
        BestFit.find(&occ, Shape::new(2, 2)),
        Some(Submesh::new(6, 0, 2, 2))
    );
}

#[test]
fn placer_names_round_trip() {
    for k in PlacerKind::ALL {
        assert_eq!(k.to_string().parse::<PlacerKind>().unwrap(), k);
    }
    assert!(
        "worst-fit"
            .parse::<PlacerKind>()
            .unwrap_err()
            .contains("adaptive-scan")
    );
}
