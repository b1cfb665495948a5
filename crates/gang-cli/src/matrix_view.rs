//! The slice matrix drawn as text (`gangctl slices`).
//!
//! Each slice is a grid of W columns by H rows, **row y=H-1 at the top** and x=0 at the
//! left (like a plot), with the y coordinate left of each row and the x coordinates under
//! the grid. A cell holds the id of the job holding that node in that slice, `.` if free;
//! a multiple-task slot (not the job's home slice) has `*` after the id. Cells are padded
//! to one width over the whole matrix.
//!
//! ```text
//! mesh 4x3, mpl 2; row y=2 at the top
//! slice 0 (2 jobs)
//! 2 | .  .  .  .
//! 1 | 1  1  .  .
//! 0 | 1  1  12 12
//!     0  1  2  3
//!
//! queue: 7 8
//! ```

use std::collections::BTreeSet;

use gang_proto::v1::Matrix;

/// The text for a matrix (ends with a newline).
pub fn draw(m: &Matrix) -> String {
    let (w, h) = (m.mesh_w as usize, m.mesh_h as usize);
    let mut out = format!(
        "mesh {}x{}, mpl {}; row y={} at the top\n",
        m.mesh_w,
        m.mesh_h,
        m.mpl,
        m.mesh_h.saturating_sub(1)
    );

    // grids[s][y][x]: the cell text of each slice.
    let grids: Vec<Vec<Vec<String>>> = m
        .slices
        .iter()
        .map(|slice| {
            let mut grid = vec![vec![".".to_string(); w]; h];
            for p in &slice.placements {
                let Some(sm) = p.submesh else { continue };
                let label = if p.home {
                    p.job_id.to_string()
                } else {
                    format!("{}*", p.job_id)
                };
                for y in sm.y..sm.y.saturating_add(sm.h) {
                    for x in sm.x..sm.x.saturating_add(sm.w) {
                        if let Some(cell) = grid
                            .get_mut(y as usize)
                            .and_then(|row| row.get_mut(x as usize))
                        {
                            *cell = label.clone();
                        }
                    }
                }
            }
            grid
        })
        .collect();

    let x_labels: Vec<String> = (0..w).map(|x| x.to_string()).collect();
    let cell_w = grids
        .iter()
        .flatten()
        .flatten()
        .chain(x_labels.iter())
        .map(|c| c.len())
        .max()
        .unwrap_or(1);
    let y_w = h.saturating_sub(1).to_string().len();
    let row_text = |cells: &[String]| -> String {
        cells
            .iter()
            .map(|c| format!("{c:<cell_w$}"))
            .collect::<Vec<_>>()
            .join(" ")
    };

    if m.slices.is_empty() {
        out.push_str("no slices in use\n");
    }
    for (slice, grid) in m.slices.iter().zip(&grids) {
        let jobs: BTreeSet<u64> = slice.placements.iter().map(|p| p.job_id).collect();
        let noun = if jobs.len() == 1 { "job" } else { "jobs" };
        out.push_str(&format!("slice {} ({} {noun})\n", slice.id, jobs.len()));
        for y in (0..h).rev() {
            let line = format!("{y:>y_w$} | {}", row_text(&grid[y]));
            out.push_str(line.trim_end());
            out.push('\n');
        }
        let axis = format!("{:y_w$}   {}", "", row_text(&x_labels));
        out.push_str(axis.trim_end());
        out.push_str("\n\n");
    }
    if m.queue.is_empty() {
        out.push_str("queue: empty\n");
    } else {
        let ids: Vec<String> = m.queue.iter().map(|q| q.to_string()).collect();
        out.push_str(&format!("queue: {}\n", ids.join(" ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gang_proto::v1::{Placement, SliceInfo, Submesh};

    fn place(job_id: u64, x: u32, y: u32, w: u32, h: u32, home: bool) -> Placement {
        Placement {
            job_id,
            submesh: Some(Submesh { x, y, w, h }),
            home,
        }
    }

    #[test]
    fn draws_slices_and_queue() {
        let m = Matrix {
            mesh_w: 4,
            mesh_h: 3,
            mpl: 2,
            slices: vec![
                SliceInfo {
                    id: 0,
                    placements: vec![place(1, 0, 0, 2, 2, true), place(12, 2, 0, 2, 1, true)],
                },
                SliceInfo {
                    id: 1,
                    placements: vec![place(3, 0, 2, 4, 1, true), place(1, 0, 0, 2, 2, false)],
                },
            ],
            queue: vec![7, 8],
        };
        let expected = "\
mesh 4x3, mpl 2; row y=2 at the top
slice 0 (2 jobs)
2 | .  .  .  .
1 | 1  1  .  .
0 | 1  1  12 12
    0  1  2  3

slice 1 (2 jobs)
2 | 3  3  3  3
1 | 1* 1* .  .
0 | 1* 1* .  .
    0  1  2  3

queue: 7 8
";
        assert_eq!(draw(&m), expected);
    }

    #[test]
    fn wide_mesh_pads_to_the_x_labels() {
        let m = Matrix {
            mesh_w: 11,
            mesh_h: 10,
            mpl: 1,
            slices: vec![SliceInfo {
                id: 0,
                placements: vec![place(5, 9, 8, 2, 2, true)],
            }],
            queue: vec![],
        };
        let text = draw(&m);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "mesh 11x10, mpl 1; row y=9 at the top");
        assert_eq!(lines[1], "slice 0 (1 job)");
        assert_eq!(lines[2], "9 | .  .  .  .  .  .  .  .  .  5  5");
        assert_eq!(lines[11], "0 | .  .  .  .  .  .  .  .  .  .  .");
        assert_eq!(lines[12], "    0  1  2  3  4  5  6  7  8  9  10");
        assert_eq!(lines.last(), Some(&"queue: empty"));
    }

    #[test]
    fn no_slices() {
        let m = Matrix {
            mesh_w: 2,
            mesh_h: 2,
            mpl: 4,
            slices: vec![],
            queue: vec![3],
        };
        assert_eq!(
            draw(&m),
            "mesh 2x2, mpl 4; row y=1 at the top\nno slices in use\nqueue: 3\n"
        );
    }
}
