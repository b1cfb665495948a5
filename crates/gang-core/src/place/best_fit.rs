//! Best Fit (after Zhu, JPDC 1992): among all free bases for the request, take the one
//! whose submesh touches the most busy nodes or mesh edges along its perimeter, so new
//! jobs pack against existing ones and large free areas stay whole. Ties go to the first
//! base in row-major order. No rotation.

use super::{Placer, free_bases};
use crate::mesh::occupancy::Occupancy;
use crate::mesh::{Shape, Submesh};

#[derive(Debug, Clone, Copy, Default)]
pub struct BestFit;

/// Perimeter neighbours of `sm` that are busy or off the mesh.
fn contact(occ: &Occupancy, sm: Submesh) -> u32 {
    let mesh = occ.mesh();
    let blocked = |x: i64, y: i64| {
        x < 0
            || y < 0
            || x >= mesh.w as i64
            || y >= mesh.h as i64
            || occ.is_busy(x as u32, y as u32)
    };
    let (x0, y0, x1, y1) = (
        sm.x as i64,
        sm.y as i64,
        (sm.x + sm.w) as i64,
        (sm.y + sm.h) as i64,
    );
    let horizontal = (x0..x1).map(|x| blocked(x, y0 - 1) as u32 + blocked(x, y1) as u32);
    let vertical = (y0..y1).map(|y| blocked(x0 - 1, y) as u32 + blocked(x1, y) as u32);
    horizontal.chain(vertical).sum()
}

impl Placer for BestFit {
    fn name(&self) -> &'static str {
        "best-fit"
    }

    fn rotates(&self) -> bool {
        false
    }

    fn find(&self, occ: &Occupancy, shape: Shape) -> Option<Submesh> {
        if occ.free() < shape.area() {
            return None;
        }
        let mw = occ.mesh().w as usize;
        let mut best: Option<(u32, Submesh)> = None;
        for (i, _) in free_bases(occ, shape)
            .iter()
            .enumerate()
            .filter(|(_, v)| **v)
        {
            let sm = Submesh::at((i % mw) as u32, (i / mw) as u32, shape);
            let c = contact(occ, sm);
            if best.is_none_or(|(bc, _)| c > bc) {
                best = Some((c, sm));
            }
        }
        best.map(|(_, sm)| sm)
    }
}
