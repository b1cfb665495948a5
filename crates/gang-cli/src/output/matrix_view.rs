//! The slice matrix drawn as text (`gangctl slices`).
//!
//! Each slice is a grid of W columns by H rows, **row y=H-1 at the top** and x=0 at the
//! left (like a plot), with the y coordinate left of each row and the x coordinates under
//! the grid. A cell holds the id of the job holding that node in that slice, `.` if free;
//! a multiple-task slot (not the job's home slice) has `*` after the id. Cells are padded
//! to one width over the whole matrix.
//!
//! The second line is the slice table in force (issue #4): its version, the quantum, the
//! slices in row order, and the one running now, whose header is marked `▶ running`. A
//! slice the table does not hold yet (the next table takes it) says so.
//!
//! Slices are numbered for people by their place in the matrix, 0 to MPL-1: the master's
//! ids grow as slices open and close (3,4, then 5,6, then 12), which says nothing to a
//! user; the ids stay in the JSON. The table version is shown as the master's short count
//! of the tables it published (v1, v2, ...), not the raw version (a clock reading).
//!
//! ```text
//! mesh 4x3, mpl 2; row y=2 at the top
//! table v3, quantum 50ms, rows: slice 0, 1; running: slice 0
//! slice 0 (2 jobs)  ▶ running
//! 2 | .  .  .  .
//! 1 | 1  1  .  .
//! 0 | 1  1  12 12
//!     0  1  2  3
//!
//! queue: 7 8
//! ```

use std::collections::BTreeSet;

use gang_core::SlotGrid;
use gang_proto::v1::{Matrix, SliceInfo};

use crate::output::format::fmt_ns;

/// The slice running according to `m.running_row` (`row_slices[running_row]`).
pub fn running_slice(m: &Matrix) -> Option<u32> {
    m.running_row
        .and_then(|r| m.row_slices.get(r as usize).copied())
}

/// The slot grid of `m`'s table: `None` before the master published one (version 0). A
/// quantum that is not positive is no table either: it comes off the wire, and a grid
/// needs a positive one.
fn grid(m: &Matrix) -> Option<SlotGrid> {
    (m.table_version != 0 && m.quantum_ns > 0).then(|| SlotGrid::new(m.epoch_ns, m.quantum_ns))
}

/// Whether `m` carries a slice table (the master has published one).
fn has_table(m: &Matrix) -> bool {
    grid(m).is_some()
}

/// The row of `m`'s table running at master time `t_ns` (the grid's slot `k` runs row
/// `k mod rows`). Before the table took effect this is the master's answer
/// (`m.running_row`), since the table in force then is not known here; `None` before the
/// epoch, without a table, or with no rows.
pub fn running_row_at(m: &Matrix, t_ns: i64) -> Option<u32> {
    let grid = grid(m)?;
    if m.row_slices.is_empty() {
        return None;
    }
    if t_ns < m.effective_ns {
        return m.running_row;
    }
    grid.row_at(t_ns, m.row_slices.len()).map(|r| r as u32)
}

/// The first slot boundary of `m`'s table after master time `t_ns` (`None` without a
/// table).
pub fn next_boundary_after(m: &Matrix, t_ns: i64) -> Option<i64> {
    grid(m).map(|g| g.boundary_after(t_ns))
}

/// `m` as it stands at master time `t_ns` (its `now_ns` and `running_row` moved on).
pub fn at(m: &Matrix, t_ns: i64) -> Matrix {
    Matrix {
        now_ns: t_ns,
        running_row: running_row_at(m, t_ns),
        ..m.clone()
    }
}

/// Slice `id` as people see it: its place in the matrix (0 to MPL-1); `gone` for a slice
/// the table in force still holds but the matrix closed (the next table drops it).
pub fn slice_label(m: &Matrix, id: u32) -> String {
    m.slices
        .iter()
        .position(|s| s.id == id)
        .map_or_else(|| "gone".to_string(), |p| p.to_string())
}

/// The table version as people see it: the master's short count (`v3`), or the raw
/// version from a master that does not count.
pub fn table_label(seq: u64, version: u64) -> String {
    if seq > 0 {
        format!("v{seq}")
    } else {
        format!("v{version}")
    }
}

/// The line about the slice table: version, quantum, rows, the slice running now.
fn table_line(m: &Matrix) -> String {
    if !has_table(m) {
        return "no slice table in force".into();
    }
    let rows = if m.row_slices.is_empty() {
        "no rows".to_string()
    } else {
        let ids: Vec<String> = m.row_slices.iter().map(|&s| slice_label(m, s)).collect();
        format!("rows: slice {}", ids.join(", "))
    };
    let running = match running_slice(m) {
        Some(s) => format!("running: slice {}", slice_label(m, s)),
        None => "running: none".into(),
    };
    format!(
        "table {}, quantum {}, {rows}; {running}",
        table_label(m.table_seq, m.table_version),
        fmt_ns(m.quantum_ns, false)
    )
}

/// The text for a matrix (ends with a newline).
pub fn draw(m: &Matrix) -> String {
    let (w, h) = (m.mesh_w as usize, m.mesh_h as usize);
    let mut out = format!(
        "mesh {}x{}, mpl {}; row y={} at the top\n{}\n",
        m.mesh_w,
        m.mesh_h,
        m.mpl,
        m.mesh_h.saturating_sub(1),
        table_line(m)
    );
    // grids[s][y][x]: the cell text of each slice.
    let grids: Vec<Vec<Vec<String>>> = m.slices.iter().map(|s| slice_grid(s, w, h)).collect();
    let x_labels: Vec<String> = (0..w).map(|x| x.to_string()).collect();
    let cell_w = grids
        .iter()
        .flatten()
        .flatten()
        .chain(x_labels.iter())
        .map(|c| c.len())
        .max()
        .unwrap_or(1);
    let grid_text = GridText {
        cell_w,
        y_w: h.saturating_sub(1).to_string().len(),
    };
    if m.slices.is_empty() {
        out.push_str("no slices in use\n");
    }
    for (place, (slice, grid)) in m.slices.iter().zip(&grids).enumerate() {
        out.push_str(&slice_heading(m, place, slice));
        out.push_str(&grid_text.draw(grid, &x_labels));
    }
    if m.queue.is_empty() {
        out.push_str("queue: empty\n");
    } else {
        let ids: Vec<String> = m.queue.iter().map(|q| q.to_string()).collect();
        out.push_str(&format!("queue: {}\n", ids.join(" ")));
    }
    out
}

/// One slice's cells, `[y][x]`: a job's id where it is placed (`ID*` off its home
/// slice), `.` where no job is.
fn slice_grid(slice: &SliceInfo, w: usize, h: usize) -> Vec<Vec<String>> {
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
}

/// A slice's heading: its jobs, whether it runs or is out of the rotation, and which of
/// its jobs are parked as deadlocked.
fn slice_heading(m: &Matrix, place: usize, slice: &SliceInfo) -> String {
    let jobs: BTreeSet<u64> = slice.placements.iter().map(|p| p.job_id).collect();
    let noun = if jobs.len() == 1 { "job" } else { "jobs" };
    let parked: Vec<String> = jobs
        .iter()
        .filter(|j| m.parked.contains(j))
        .map(|j| j.to_string())
        .collect();
    let outside = has_table(m) && !m.row_slices.contains(&slice.id);
    let mark = if running_slice(m) == Some(slice.id) {
        "  ▶ running".to_string()
    } else if outside && parked.len() == jobs.len() {
        "  (out of the rotation: its slots go to the other slices)".to_string()
    } else if outside {
        "  (not in the table yet)".to_string()
    } else {
        String::new()
    };
    let mut out = format!("slice {place} ({} {noun}){mark}\n", jobs.len());
    if !parked.is_empty() {
        let (noun, verb) = if parked.len() == 1 {
            ("job", "is")
        } else {
            ("jobs", "are")
        };
        out.push_str(&format!(
            "  {noun} {} {verb} DEADLOCKED: held stopped, no slots, until cancelled\n",
            parked.join(", ")
        ));
    }
    out
}

/// The widths a grid is drawn with: every cell's, and the y labels'.
struct GridText {
    cell_w: usize,
    y_w: usize,
}

impl GridText {
    fn row(&self, cells: &[String]) -> String {
        let cell_w = self.cell_w;
        cells
            .iter()
            .map(|c| format!("{c:<cell_w$}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// A grid, the top row first, with its x axis and a blank line under it.
    fn draw(&self, grid: &[Vec<String>], x_labels: &[String]) -> String {
        let y_w = self.y_w;
        let mut out = String::new();
        for y in (0..grid.len()).rev() {
            let line = format!("{y:>y_w$} | {}", self.row(&grid[y]));
            out.push_str(line.trim_end());
            out.push('\n');
        }
        let axis = format!("{:y_w$}   {}", "", self.row(x_labels));
        out.push_str(axis.trim_end());
        out.push_str("\n\n");
        out
    }
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
            ..Default::default()
        };
        let expected = "\
mesh 4x3, mpl 2; row y=2 at the top
no slice table in force
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
            ..Default::default()
        };
        let text = draw(&m);
        let mut lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "mesh 11x10, mpl 1; row y=9 at the top");
        assert_eq!(lines.remove(1), "no slice table in force");
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
            ..Default::default()
        };
        assert_eq!(
            draw(&m),
            "mesh 2x2, mpl 4; row y=1 at the top\nno slice table in force\nno slices in use\nqueue: 3\n"
        );
    }

    const MS: i64 = 1_000_000;

    /// Two slices in rows [1, 0] of table v5 (quantum 50 ms, epoch 1000 ms, in force from
    /// 1100 ms), a third slice not in the table yet; the master answered at 1130 ms (slot 2:
    /// row 0, slice 1).
    fn timed() -> Matrix {
        Matrix {
            mesh_w: 2,
            mesh_h: 1,
            mpl: 3,
            slices: vec![
                SliceInfo {
                    id: 0,
                    placements: vec![place(4, 0, 0, 2, 1, true)],
                },
                SliceInfo {
                    id: 1,
                    placements: vec![place(5, 0, 0, 1, 1, true), place(6, 1, 0, 1, 1, true)],
                },
                SliceInfo {
                    id: 2,
                    placements: vec![place(7, 0, 0, 2, 1, true)],
                },
            ],
            queue: vec![],
            table_version: 5,
            epoch_ns: 1000 * MS,
            quantum_ns: 50 * MS,
            effective_ns: 1100 * MS,
            row_slices: vec![1, 0],
            now_ns: 1130 * MS,
            running_row: Some(0),
            ..Default::default()
        }
    }

    #[test]
    fn marks_the_running_slice() {
        let expected = "\
mesh 2x1, mpl 3; row y=0 at the top
table v5, quantum 50ms, rows: slice 1, 0; running: slice 1
slice 0 (1 job)
0 | 4 4
    0 1

slice 1 (2 jobs)  ▶ running
0 | 5 6
    0 1

slice 2 (1 job)  (not in the table yet)
0 | 7 7
    0 1

queue: empty
";
        assert_eq!(draw(&timed()), expected);

        let idle = Matrix {
            running_row: None,
            ..timed()
        };
        let text = draw(&idle);
        assert!(text.contains("rows: slice 1, 0; running: none\n"), "{text}");
        assert!(!text.contains('▶'), "{text}");
    }

    /// A deadlocked job parked by the master: its slice is out of the rotation (all its
    /// jobs parked), or it sits beside jobs that keep their row.
    #[test]
    fn parked_jobs_are_named_and_their_slice_is_out_of_the_rotation() {
        let m = Matrix {
            parked: vec![7, 6],
            ..timed()
        };
        let text = draw(&m);
        assert!(
            text.contains("slice 2 (1 job)  (out of the rotation: its slots go to the other slices)\n  job 7 is DEADLOCKED: held stopped, no slots, until cancelled\n"),
            "{text}"
        );
        assert!(
            text.contains("slice 1 (2 jobs)  ▶ running\n  job 6 is DEADLOCKED"),
            "{text}"
        );
    }

    #[test]
    fn the_running_row_moves_with_the_clock() {
        let m = timed();
        assert_eq!(running_row_at(&m, 1130 * MS), Some(0), "slot 2");
        assert_eq!(running_row_at(&m, 1150 * MS - 1), Some(0));
        assert_eq!(running_row_at(&m, 1150 * MS), Some(1), "slot 3");
        assert_eq!(running_row_at(&m, 1200 * MS), Some(0), "slot 4");
        assert_eq!(
            running_row_at(&m, 10_000 * MS + 60 * MS),
            Some(1),
            "slot 181"
        );
        assert_eq!(
            running_row_at(&m, 11_000 * MS + 10 * MS),
            Some(0),
            "slot 200"
        );
        // Before the table took effect, the master's answer stands.
        assert_eq!(running_row_at(&m, 1090 * MS), Some(0));
        assert_eq!(
            next_boundary_after(&m, 1130 * MS),
            Some(1150 * MS),
            "the next boundary"
        );
        assert_eq!(next_boundary_after(&m, 1150 * MS), Some(1200 * MS));

        let later = at(&m, 1160 * MS);
        assert_eq!(later.now_ns, 1160 * MS);
        assert_eq!(later.running_row, Some(1));
        assert_eq!(running_slice(&later), Some(0));
        assert!(draw(&later).contains("slice 0 (1 job)  ▶ running\n"));

        // No table: nothing runs and there are no boundaries.
        let none = Matrix {
            table_version: 0,
            quantum_ns: 0,
            running_row: None,
            row_slices: vec![],
            ..timed()
        };
        assert_eq!(running_row_at(&none, 1130 * MS), None);
        assert_eq!(next_boundary_after(&none, 1130 * MS), None);
        assert!(!draw(&none).contains("not in the table"));
        // A table with no rows (nothing placed) runs nothing.
        let empty = Matrix {
            row_slices: vec![],
            running_row: None,
            ..timed()
        };
        assert_eq!(running_row_at(&empty, 1130 * MS), None);
    }

    #[test]
    fn slices_are_numbered_by_place_and_tables_by_count() {
        let mut m = timed();
        // The master's ids after slices opened and closed; its 9th table this run.
        for (s, id) in m.slices.iter_mut().zip([5, 6, 12]) {
            s.id = id;
        }
        m.row_slices = vec![6, 5];
        m.table_version = 1_795_417_619_662_627;
        m.table_seq = 9;
        let text = draw(&m);
        assert!(
            text.contains("table v9, quantum 50ms, rows: slice 1, 0; running: slice 1\n"),
            "{text}"
        );
        assert!(text.contains("slice 1 (2 jobs)  ▶ running\n"), "{text}");
        assert!(
            text.contains("slice 2 (1 job)  (not in the table yet)\n"),
            "{text}"
        );
        assert!(!text.contains("12") && !text.contains("1795"), "{text}");
        m.row_slices = vec![6, 7];
        assert!(draw(&m).contains("rows: slice 1, gone;"), "{}", draw(&m));
    }
}
