//! First Fit (Zhu, JPDC 1992): compute the set of free bases for the request (the
//! complement of Zhu's coverage set) and take the first in row-major order. No rotation:
//! that is what Adaptive Scan adds over it.

use super::{Placer, free_bases};
use crate::mesh::occupancy::Occupancy;
use crate::mesh::{Shape, Submesh};

#[derive(Debug, Clone, Copy, Default)]
pub struct FirstFit;

impl Placer for FirstFit {
    fn name(&self) -> &'static str {
        "first-fit"
    }

    fn rotates(&self) -> bool {
        false
    }

    fn find(&self, occ: &Occupancy, shape: Shape) -> Option<Submesh> {
        if occ.free() < shape.area() {
            return None;
        }
        let mw = occ.mesh().w as usize;
        let i = free_bases(occ, shape).iter().position(|&v| v)?;
        Some(Submesh::at((i % mw) as u32, (i / mw) as u32, shape))
    }
}
