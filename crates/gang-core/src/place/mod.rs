//! Submesh placers behind one trait.
//!
//! A placer only *finds* a free submesh in an [`Occupancy`]; the caller marks it busy
//! with [`Occupancy::occupy`] and frees it with [`Occupancy::release`]. Keeping the
//! strategies stateless means one occupancy map can be searched by any of them (the
//! slice matrix keeps one per slice) and free is the same exact, cheap operation for all.

mod adaptive_scan;
mod best_fit;
mod first_fit;

use std::fmt;
use std::str::FromStr;

pub use adaptive_scan::AdaptiveScan;
pub use best_fit::BestFit;
pub use first_fit::FirstFit;
use serde::{Deserialize, Serialize};

use crate::mesh::occupancy::Occupancy;
use crate::mesh::{Mesh, Shape, Submesh};

pub trait Placer: fmt::Debug + Send + Sync {
    fn name(&self) -> &'static str;

    /// Whether the placer tries `h x w` when `w x h` fits nowhere.
    fn rotates(&self) -> bool;

    /// A free submesh of `shape` (or of its rotation, for placers that rotate).
    fn find(&self, occ: &Occupancy, shape: Shape) -> Option<Submesh>;

    /// Whether `shape` could be placed on an empty `mesh` by this placer: a request
    /// that fails this would wait forever, so it is rejected when submitted.
    fn can_ever_fit(&self, mesh: Mesh, shape: Shape) -> bool {
        shape.fits_in(mesh) || (self.rotates() && shape.rotated().fits_in(mesh))
    }
}

/// The placers by name, for configuration and command lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PlacerKind {
    #[default]
    AdaptiveScan,
    FirstFit,
    BestFit,
}

impl PlacerKind {
    pub const ALL: [PlacerKind; 3] = [
        PlacerKind::AdaptiveScan,
        PlacerKind::FirstFit,
        PlacerKind::BestFit,
    ];

    pub fn get(self) -> &'static dyn Placer {
        match self {
            PlacerKind::AdaptiveScan => &AdaptiveScan,
            PlacerKind::FirstFit => &FirstFit,
            PlacerKind::BestFit => &BestFit,
        }
    }
}

impl fmt::Display for PlacerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.get().name())
    }
}

impl FromStr for PlacerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PlacerKind::ALL
            .into_iter()
            .find(|k| k.get().name() == s)
            .ok_or_else(|| {
                format!("unknown placer {s:?}: expected adaptive-scan, first-fit or best-fit")
            })
    }
}

/// For each base `(x, y)`, whether a `shape` frame based there is free: Zhu's coverage
/// computation, O(W*H) per request. `valid[y * W + x]`.
pub(crate) fn free_bases(occ: &Occupancy, shape: Shape) -> Vec<bool> {
    let mesh = occ.mesh();
    let (mw, mh) = (mesh.w as usize, mesh.h as usize);
    let mut valid = vec![false; mw * mh];
    if !shape.fits_in(mesh) || shape.w == 0 || shape.h == 0 {
        return valid;
    }
    // right[x] = free nodes from x rightwards in the current row;
    // up[x] = consecutive rows, from the current one upwards, whose right[x] >= w.
    let mut right = vec![0u32; mw + 1];
    let mut up = vec![0u32; mw];
    for y in (0..mh).rev() {
        for x in (0..mw).rev() {
            right[x] = if occ.is_busy(x as u32, y as u32) {
                0
            } else {
                right[x + 1] + 1
            };
            up[x] = if right[x] >= shape.w { up[x] + 1 } else { 0 };
            valid[y * mw + x] = up[x] >= shape.h;
        }
    }
    valid
}

#[cfg(test)]
mod tests;
