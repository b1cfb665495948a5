//! Which nodes of one slice are busy: a bitmap, one row of 64-bit words per mesh row.
//!
//! Occupying and releasing are exact: `occupy` requires every node of the submesh to be free
//! and `release` requires every node to be busy, so a double free or an overlap is caught
//! at the point it happens instead of corrupting the map. Both cost O(h * w/64).

use crate::mesh::{Mesh, Submesh};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occupancy {
    mesh: Mesh,
    words_per_row: usize,
    bits: Vec<u64>,
    busy: u64,
}

/// Bits `[lo, hi)` of word number `word` (bit i of word k is column 64k + i).
#[inline]
fn word_mask(word: usize, lo: u32, hi: u32) -> u64 {
    let base = (word * 64) as u32;
    let a = lo.max(base) - base;
    let b = hi.min(base + 64) - base;
    if b <= a {
        0
    } else if b - a == 64 {
        !0
    } else {
        ((1u64 << (b - a)) - 1) << a
    }
}

impl Occupancy {
    pub fn new(mesh: Mesh) -> Self {
        let words_per_row = (mesh.w as usize).div_ceil(64).max(1);
        Occupancy {
            mesh,
            words_per_row,
            bits: vec![0; words_per_row * mesh.h as usize],
            busy: 0,
        }
    }

    pub fn mesh(&self) -> Mesh {
        self.mesh
    }

    /// Number of busy nodes.
    pub fn busy(&self) -> u64 {
        self.busy
    }

    pub fn is_busy(&self, x: u32, y: u32) -> bool {
        let w = self.bits[y as usize * self.words_per_row + x as usize / 64];
        w >> (x % 64) & 1 == 1
    }

    /// The highest busy column in `[x0, x1)` of row `y`, if any.
    #[inline]
    pub fn last_busy_in_row(&self, y: u32, x0: u32, x1: u32) -> Option<u32> {
        let row = &self.bits[y as usize * self.words_per_row..][..self.words_per_row];
        let (first, last) = (x0 as usize / 64, (x1 as usize - 1) / 64);
        for k in (first..=last).rev() {
            let m = row[k] & word_mask(k, x0, x1);
            if m != 0 {
                return Some((k * 64) as u32 + 63 - m.leading_zeros());
            }
        }
        None
    }

    /// The highest busy column inside `sm`, if any: the column a scan must jump past.
    #[inline]
    pub fn last_busy_in(&self, sm: Submesh) -> Option<u32> {
        if self.words_per_row == 1 {
            // Meshes up to 64 wide: one AND per row.
            let mask = word_mask(0, sm.x, sm.x + sm.w);
            let rows = &self.bits[sm.y as usize..(sm.y + sm.h) as usize];
            let any = rows.iter().fold(0u64, |acc, r| acc | (r & mask));
            return (any != 0).then(|| 63 - any.leading_zeros());
        }
        (sm.y..sm.y + sm.h)
            .filter_map(|y| self.last_busy_in_row(y, sm.x, sm.x + sm.w))
            .max()
    }

    /// Whether every node of `sm` lies on the mesh and is free.
    pub fn is_free(&self, sm: Submesh) -> bool {
        sm.w > 0 && sm.h > 0 && sm.within(self.mesh) && self.last_busy_in(sm).is_none()
    }

    /// Mark `sm` busy. Panics if any node is already busy or off the mesh: an overlap is a
    /// bug in the caller, never a recoverable condition.
    pub fn occupy(&mut self, sm: Submesh) {
        assert!(self.is_free(sm), "occupy {sm}: not free on {}", self.mesh);
        self.apply(sm, true);
    }

    /// Mark `sm` free. Panics unless every node was busy.
    pub fn release(&mut self, sm: Submesh) {
        assert!(
            sm.within(self.mesh) && sm.nodes().all(|(x, y)| self.is_busy(x, y)),
            "release {sm}: not fully busy"
        );
        self.apply(sm, false);
    }

    /// The union of two maps of the same mesh: nodes busy in either.
    pub fn merged(&self, other: &Occupancy) -> Occupancy {
        assert_eq!(self.mesh, other.mesh, "merging maps of different meshes");
        let mut m = self.clone();
        for (a, b) in m.bits.iter_mut().zip(&other.bits) {
            *a |= b;
        }
        m.busy = m.count_busy();
        m
    }

    /// Mark `sm` busy whether or not parts of it already are: for scratch copies that
    /// block an area from a search (a reservation), never for real placements.
    pub fn cover(&mut self, sm: Submesh) {
        self.apply(sm, true);
        self.busy = self.count_busy();
    }

    fn apply(&mut self, sm: Submesh, set: bool) {
        let (first, last) = (sm.x as usize / 64, (sm.x + sm.w - 1) as usize / 64);
        for y in sm.y..sm.y + sm.h {
            let row = &mut self.bits[y as usize * self.words_per_row..][..self.words_per_row];
            for (k, word) in row.iter_mut().enumerate().take(last + 1).skip(first) {
                let m = word_mask(k, sm.x, sm.x + sm.w);
                if set {
                    *word |= m;
                } else {
                    *word &= !m;
                }
            }
        }
        if set {
            self.busy += sm.area();
        } else {
            self.busy -= sm.area();
        }
    }

    /// Free nodes remaining.
    pub fn free(&self) -> u64 {
        self.mesh.area() - self.busy
    }

    /// Recount busy nodes from the bitmap (for invariant checks).
    pub fn count_busy(&self) -> u64 {
        self.bits.iter().map(|w| w.count_ones() as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::Shape;

    #[test]
    fn occupy_release_round_trip_across_word_boundary() {
        let mut o = Occupancy::new(Shape::new(130, 3));
        let sm = Submesh::new(60, 1, 70, 2);
        o.occupy(sm);
        assert_eq!(o.busy(), 140);
        assert_eq!(o.count_busy(), 140);
        assert!(o.is_busy(60, 1) && o.is_busy(129, 2) && !o.is_busy(59, 1) && !o.is_busy(60, 0));
        assert_eq!(o.last_busy_in(Submesh::new(0, 0, 130, 3)), Some(129));
        assert_eq!(o.last_busy_in(Submesh::new(0, 0, 61, 3)), Some(60));
        assert_eq!(o.last_busy_in(Submesh::new(0, 0, 60, 3)), None);
        o.release(sm);
        assert_eq!(o, Occupancy::new(Shape::new(130, 3)));
    }

    #[test]
    #[should_panic(expected = "not free")]
    fn overlap_is_caught() {
        let mut o = Occupancy::new(Shape::new(4, 4));
        o.occupy(Submesh::new(0, 0, 2, 2));
        o.occupy(Submesh::new(1, 1, 2, 2));
    }

    #[test]
    #[should_panic(expected = "not fully busy")]
    fn double_free_is_caught() {
        let mut o = Occupancy::new(Shape::new(4, 4));
        o.occupy(Submesh::new(0, 0, 2, 2));
        o.release(Submesh::new(0, 0, 2, 2));
        o.release(Submesh::new(0, 0, 2, 2));
    }
}
