//! Steps inside an allocation: where a step of a given shape goes on the allocation's
//! rectangle, beside the steps that hold nodes there. Pure: the master keeps the steps and
//! carries the placement out.
//!
//! An allocation is placed and switched as one job; its steps share its slots, so they
//! never overlap one another (a node runs one step of an allocation at a time), and they
//! never leave its rectangle.

use crate::mesh::{Request, Shape, ShapeError, Submesh};

/// Why a step can never run in an allocation (as opposed to: not now).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    #[error("{0}")]
    Shape(ShapeError),
    #[error("step asks {asked} but allocation {allocation} is {area}")]
    TooLarge {
        asked: String,
        allocation: u64,
        area: Shape,
    },
}

/// The shape a step asks (`"2x2"`, or a count of the allocation's nodes), resolved on the
/// allocation's rectangle.
pub fn resolve(request: Request, allocation: u64, area: Shape) -> Result<Shape, StepError> {
    request.resolve(area).map_err(|e| match e {
        ShapeError::TooLarge { asked, .. } => StepError::TooLarge {
            asked,
            allocation,
            area,
        },
        e => StepError::Shape(e),
    })
}

/// The first place (row-major from the allocation's base, the asked orientation before the
/// rotated one) where `shape` fits in `area` without overlapping `busy`; `None` while the
/// other steps hold the nodes it needs.
pub fn place(area: Submesh, busy: &[Submesh], shape: Shape) -> Option<Submesh> {
    let orientations = [shape, shape.rotated()];
    let n = if shape.w == shape.h { 1 } else { 2 };
    for s in &orientations[..n] {
        if !s.fits_in(area.shape()) {
            continue;
        }
        for y in area.y..=area.y + area.h - s.h {
            for x in area.x..=area.x + area.w - s.w {
                let at = Submesh::at(x, y, *s);
                if busy.iter().all(|b| !b.overlaps(at)) {
                    return Some(at);
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn steps_fill_the_allocation_side_by_side_then_wait() {
        let area = Submesh::new(2, 1, 4, 2);
        let a = place(area, &[], Shape::new(2, 2)).unwrap();
        assert_eq!(a, Submesh::new(2, 1, 2, 2));
        let b = place(area, &[a], Shape::new(2, 2)).unwrap();
        assert_eq!(b, Submesh::new(4, 1, 2, 2));
        assert_eq!(place(area, &[a, b], Shape::new(1, 1)), None);
        // A 1x4 does not fit upright but does lying down, once the nodes are free.
        assert_eq!(
            place(area, &[], Shape::new(1, 4)),
            Some(Submesh::new(2, 1, 4, 1))
        );
        assert_eq!(place(area, &[a], Shape::new(1, 4)), None);
    }

    #[test]
    fn a_step_larger_than_its_allocation_is_refused_naming_both() {
        let e = resolve("4x4".parse().unwrap(), 12, Shape::new(2, 2)).unwrap_err();
        assert_eq!(e.to_string(), "step asks 4x4 but allocation 12 is 2x2");
        assert_eq!(
            resolve("3".parse().unwrap(), 12, Shape::new(2, 2)),
            Ok(Shape::new(2, 2))
        );
        assert!(resolve("5".parse().unwrap(), 12, Shape::new(2, 2)).is_err());
    }

    proptest! {
        #[test]
        fn a_placed_step_stays_inside_and_overlaps_nothing(
            (w, h) in (1u32..7, 1u32..7),
            shapes in proptest::collection::vec((1u32..5, 1u32..5), 1..12),
        ) {
            let area = Submesh::new(3, 2, w, h);
            let mut busy: Vec<Submesh> = vec![];
            for (sw, sh) in shapes {
                if let Some(p) = place(area, &busy, Shape::new(sw, sh)) {
                    prop_assert!(p.x >= area.x && p.y >= area.y);
                    prop_assert!(p.x + p.w <= area.x + area.w && p.y + p.h <= area.y + area.h);
                    prop_assert!(busy.iter().all(|b| !b.overlaps(p)));
                    prop_assert!(p.shape() == Shape::new(sw, sh) || p.shape() == Shape::new(sh, sw));
                    busy.push(p);
                } else if busy.is_empty() {
                    prop_assert!(!Shape::new(sw, sh).fits_in_rotating(area.shape()));
                }
            }
        }
    }
}
