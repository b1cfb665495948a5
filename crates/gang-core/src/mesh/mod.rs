//! Geometry of the 2D mesh: the machine, request shapes and submeshes.

pub mod occupancy;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A `w x h` extent: the machine itself or the shape a job asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Shape {
    pub w: u32,
    pub h: u32,
}

/// The machine: a `w x h` mesh of nodes, node `(x, y)` with `0 <= x < w`, `0 <= y < h`.
pub type Mesh = Shape;

impl Shape {
    pub const fn new(w: u32, h: u32) -> Self {
        Shape { w, h }
    }

    pub const fn area(self) -> u64 {
        self.w as u64 * self.h as u64
    }

    pub const fn rotated(self) -> Self {
        Shape {
            w: self.h,
            h: self.w,
        }
    }

    /// Whether `self` fits inside `outer` without rotating.
    pub const fn fits_in(self, outer: Shape) -> bool {
        self.w <= outer.w && self.h <= outer.h
    }

    /// Whether `self` fits inside `outer` in either orientation.
    pub const fn fits_in_rotating(self, outer: Shape) -> bool {
        self.fits_in(outer) || self.rotated().fits_in(outer)
    }

    /// The shape that holds `n` nodes on a mesh: see [`shape_for_count`].
    pub fn for_count(n: u64, mesh: Mesh) -> Result<Shape, ShapeError> {
        shape_for_count(n, mesh)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.w, self.h)
    }
}

/// Errors of turning a request into a shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("a job needs at least one node, got {0}")]
    Empty(String),
    #[error("cannot parse {0:?} as a shape: expected WxH (e.g. 4x2) or a node count (e.g. 8)")]
    Syntax(String),
    #[error("job asks {asked} but the mesh is {mesh}")]
    TooLarge { asked: String, mesh: Mesh },
}

/// What a user asks for: an explicit shape, or a node count the system turns into one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    Shape(Shape),
    Nodes(u64),
}

impl Request {
    /// The shape to place on `mesh`, or why the request can never run there.
    ///
    /// An explicit shape must fit the mesh in at least one orientation (placers that
    /// cannot rotate check their own orientation when the job is submitted).
    pub fn resolve(self, mesh: Mesh) -> Result<Shape, ShapeError> {
        match self {
            Request::Nodes(n) => shape_for_count(n, mesh),
            Request::Shape(s) if s.w == 0 || s.h == 0 => Err(ShapeError::Empty(s.to_string())),
            Request::Shape(s) if !s.fits_in_rotating(mesh) => Err(ShapeError::TooLarge {
                asked: s.to_string(),
                mesh,
            }),
            Request::Shape(s) => Ok(s),
        }
    }
}

impl FromStr for Request {
    type Err = ShapeError;

    /// `"4x2"` (also `4X2`, `4*2`) is a shape; `"8"` is a node count.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let syntax = || ShapeError::Syntax(s.to_string());
        let parse_dim =
            |d: &str| -> Result<i64, ShapeError> { d.trim().parse::<i64>().map_err(|_| syntax()) };
        if let Some((a, b)) = t.split_once(['x', 'X', '*']) {
            let (w, h) = (parse_dim(a)?, parse_dim(b)?);
            if w <= 0 || h <= 0 {
                return Err(ShapeError::Empty(t.to_string()));
            }
            let w = u32::try_from(w).map_err(|_| syntax())?;
            let h = u32::try_from(h).map_err(|_| syntax())?;
            Ok(Request::Shape(Shape::new(w, h)))
        } else {
            let n = parse_dim(t)?;
            if n <= 0 {
                return Err(ShapeError::Empty(t.to_string()));
            }
            Ok(Request::Nodes(n as u64))
        }
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Request::Shape(s) => s.fmt(f),
            Request::Nodes(n) => write!(f, "{n} nodes"),
        }
    }
}

/// The longest side may be at most this many times the shortest for a count-derived shape,
/// as long as some shape within that bound fits the mesh.
pub const MAX_ASPECT: u32 = 2;

/// The rule that turns a node count `n` into a shape on `mesh`.
///
/// Among the shapes `w x h >= n` that fit the mesh (`w <= mesh.w`, `h <= mesh.h`):
/// 1. prefer shapes whose long side is at most [`MAX_ASPECT`] times the short side
///    (a compact submesh keeps communication local; a 13x1 line would not be);
/// 2. then the smallest area `w*h` (the least internal fragmentation);
/// 3. then the most nearly square (smallest `|w - h|`);
/// 4. then the wider one (`w >= h`), so a shape is stable across meshes.
///
/// Only `h = ceil(n / w)` needs to be considered for each `w`: a taller shape of the same
/// width has more area and is never preferred by rule 2 unless it is squarer, and rule 1
/// is applied before area only as a yes/no bound.
///
/// Internal fragmentation of a job is `w*h - n` nodes: they are given to the job but
/// run no rank. The simulator counts them as busy for placement and idle for utilization.
///
/// Examples: 1 -> 1x1, 2 -> 2x1, 3 -> 2x2, 5 -> 3x2, 7 -> 4x2, 8 -> 4x2, 13 -> 5x3,
/// 32 -> 8x4, 100 -> 10x10, and 20 on a 16x2 mesh -> 10x2 (the aspect bound is dropped
/// when nothing within it fits).
pub fn shape_for_count(n: u64, mesh: Mesh) -> Result<Shape, ShapeError> {
    if n == 0 {
        return Err(ShapeError::Empty("0".into()));
    }
    if n > mesh.area() {
        return Err(ShapeError::TooLarge {
            asked: format!("{n} nodes"),
            mesh,
        });
    }
    let mut best: Option<(bool, u64, u32, bool, Shape)> = None;
    for h in 1..=mesh.h {
        let w = n.div_ceil(h as u64);
        if w > mesh.w as u64 {
            continue;
        }
        let s = Shape::new(w as u32, h);
        let (long, short) = (s.w.max(s.h), s.w.min(s.h));
        let key = (
            long > MAX_ASPECT * short,
            s.area(),
            long - short,
            s.w < s.h,
            s,
        );
        if best.is_none_or(|b| key < b) {
            best = Some(key);
        }
    }
    // n <= area guarantees h = mesh.h gives w = ceil(n / mesh.h) <= mesh.w.
    Ok(best.expect("n <= mesh area always has a shape").4)
}

/// A rectangle of nodes `[x, x+w) x [y, y+h)` on the mesh: where a job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Submesh {
    pub x: u32,
    pub y: u32,
    pub w: u32,
    pub h: u32,
}

impl Submesh {
    pub const fn new(x: u32, y: u32, w: u32, h: u32) -> Self {
        Submesh { x, y, w, h }
    }

    pub const fn at(x: u32, y: u32, shape: Shape) -> Self {
        Submesh::new(x, y, shape.w, shape.h)
    }

    pub const fn shape(self) -> Shape {
        Shape::new(self.w, self.h)
    }

    pub const fn area(self) -> u64 {
        self.shape().area()
    }

    pub const fn within(self, mesh: Mesh) -> bool {
        self.x as u64 + self.w as u64 <= mesh.w as u64
            && self.y as u64 + self.h as u64 <= mesh.h as u64
    }

    pub const fn overlaps(self, o: Submesh) -> bool {
        self.x < o.x + o.w && o.x < self.x + self.w && self.y < o.y + o.h && o.y < self.y + self.h
    }

    /// The nodes of the submesh in rank order (row-major from the base).
    pub fn nodes(self) -> impl Iterator<Item = (u32, u32)> {
        (self.y..self.y + self.h).flat_map(move |y| (self.x..self.x + self.w).map(move |x| (x, y)))
    }
}

impl fmt::Display for Submesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}@({},{})", self.w, self.h, self.x, self.y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sq(n: u64) -> Shape {
        shape_for_count(n, Shape::new(10, 10)).unwrap()
    }

    #[test]
    fn count_rule_examples() {
        let cases = [
            (1, (1, 1)),
            (2, (2, 1)),
            (3, (2, 2)),
            (4, (2, 2)),
            (5, (3, 2)),
            (6, (3, 2)),
            (7, (4, 2)),
            (8, (4, 2)),
            (9, (3, 3)),
            (13, (5, 3)),
            (16, (4, 4)),
            (32, (8, 4)),
            (64, (8, 8)),
            (100, (10, 10)),
        ];
        for (n, (w, h)) in cases {
            assert_eq!(sq(n), Shape::new(w, h), "n = {n}");
        }
    }

    #[test]
    fn count_rule_drops_aspect_bound_on_narrow_mesh() {
        assert_eq!(
            shape_for_count(20, Shape::new(16, 2)).unwrap(),
            Shape::new(10, 2)
        );
        assert_eq!(
            shape_for_count(3, Shape::new(1, 8)).unwrap(),
            Shape::new(1, 3)
        );
    }

    #[test]
    fn count_rule_is_minimal_and_fits() {
        let mesh = Shape::new(12, 7);
        for n in 1..=mesh.area() {
            let s = shape_for_count(n, mesh).unwrap();
            assert!(s.area() >= n && s.fits_in(mesh), "n = {n} -> {s}");
            // Rules 1 and 2: nothing that fits ranks better on (aspect bound, area).
            let rank = |c: Shape| (c.w.max(c.h) > MAX_ASPECT * c.w.min(c.h), c.area());
            for h in 1..=mesh.h {
                for w in 1..=mesh.w {
                    let c = Shape::new(w, h);
                    if c.area() >= n {
                        assert!(rank(c) >= rank(s), "n={n}: {c} beats {s}");
                    }
                }
            }
        }
    }

    #[test]
    fn count_rule_rejects_too_large_and_zero() {
        let mesh = Shape::new(4, 4);
        assert_eq!(
            shape_for_count(17, mesh).unwrap_err().to_string(),
            "job asks 17 nodes but the mesh is 4x4"
        );
        assert!(matches!(
            shape_for_count(0, mesh),
            Err(ShapeError::Empty(_))
        ));
    }

    #[test]
    fn parse_requests() {
        assert_eq!(
            "4x2".parse::<Request>().unwrap(),
            Request::Shape(Shape::new(4, 2))
        );
        assert_eq!(" 8 ".parse::<Request>().unwrap(), Request::Nodes(8));
        assert!(matches!(
            "0x2".parse::<Request>(),
            Err(ShapeError::Empty(_))
        ));
        assert!(matches!("-3".parse::<Request>(), Err(ShapeError::Empty(_))));
        assert!(matches!(
            "4x".parse::<Request>(),
            Err(ShapeError::Syntax(_))
        ));
        assert!(matches!(
            "abc".parse::<Request>(),
            Err(ShapeError::Syntax(_))
        ));
        let mesh = Shape::new(4, 4);
        assert_eq!(
            Request::Shape(Shape::new(5, 5))
                .resolve(mesh)
                .unwrap_err()
                .to_string(),
            "job asks 5x5 but the mesh is 4x4"
        );
        assert_eq!(
            Request::Shape(Shape::new(1, 4))
                .resolve(Shape::new(4, 1))
                .unwrap(),
            Shape::new(1, 4)
        );
    }

    #[test]
    fn submesh_overlap() {
        let a = Submesh::new(0, 0, 2, 2);
        assert!(a.overlaps(Submesh::new(1, 1, 2, 2)));
        assert!(!a.overlaps(Submesh::new(2, 0, 2, 2)));
        assert!(!a.overlaps(Submesh::new(0, 2, 2, 2)));
        assert_eq!(
            a.nodes().collect::<Vec<_>>(),
            vec![(0, 0), (1, 0), (0, 1), (1, 1)]
        );
    }
}
