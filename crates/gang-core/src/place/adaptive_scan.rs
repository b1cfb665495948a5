//! Adaptive Scan (Ding & Bhuyan, ICPP 1993).
//!
//! Candidate bases are scanned row by row. When the frame at a base holds a busy node, the
//! scan jumps to the column just right of the busy node furthest right in the frame: no
//! base in between can be free, because each of their frames still covers that node.
//! If the request fits nowhere in its own orientation it is rotated to `h x w` and
//! scanned again. The scan is complete: it visits every base that could be free, so it
//! finds a free submesh whenever one exists in either orientation.

use super::Placer;
use crate::mesh::occupancy::Occupancy;
use crate::mesh::{Shape, Submesh};

#[derive(Debug, Clone, Copy, Default)]
pub struct AdaptiveScan;

impl AdaptiveScan {
    /// The first free base in row-major order for `shape` in its own orientation.
    pub fn scan(occ: &Occupancy, shape: Shape) -> Option<Submesh> {
        let mesh = occ.mesh();
        if shape.w == 0 || shape.h == 0 || !shape.fits_in(mesh) || occ.free() < shape.area() {
            return None;
        }
        for y in 0..=mesh.h - shape.h {
            let mut x = 0;
            while x + shape.w <= mesh.w {
                let frame = Submesh::at(x, y, shape);
                match occ.last_busy_in(frame) {
                    None => return Some(frame),
                    Some(col) => x = col + 1,
                }
            }
        }
        None
    }
}

impl Placer for AdaptiveScan {
    fn name(&self) -> &'static str {
        "adaptive-scan"
    }

    fn rotates(&self) -> bool {
        true
    }

    fn find(&self, occ: &Occupancy, shape: Shape) -> Option<Submesh> {
        Self::scan(occ, shape).or_else(|| {
            let r = shape.rotated();
            if r != shape { Self::scan(occ, r) } else { None }
        })
    }
}
