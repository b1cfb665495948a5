//! 2D halo exchange on the job's rectangle: a Jacobi sweep over a global
//! grid split into one `--block`x`--block` tile per rank, exchanging one-cell
//! halos with the N/S/E/W neighbours every iteration. At the end every rank
//! recomputes the whole grid serially and checks its tile bit for bit, and
//! the allreduced sum against the serial sum. `--iters N` or `--seconds S`.

#[path = "common/util.rs"]
mod util;

use gang_msg::{Comm, Op};
use util::{Args, Stop, die};

const TAG_N: i32 = 10; // travelling north
const TAG_S: i32 = 11;
const TAG_E: i32 = 12;
const TAG_W: i32 = 13;

/// Fixed values outside the global grid (global coordinates, -1..=n).
fn boundary(gx: i64, gy: i64) -> f64 {
    ((gx * 7 + gy * 13).rem_euclid(17)) as f64 + 0.5
}

/// A tile with a one-cell ghost ring, row-major, (w+2) x (h+2).
struct Tile {
    w: usize,
    h: usize,
    u: Vec<f64>,
}

impl Tile {
    fn new(w: usize, h: usize, gx0: i64, gy0: i64, gw: i64, gh: i64) -> Tile {
        let mut t = Tile {
            w,
            h,
            u: vec![0.0; (w + 2) * (h + 2)],
        };
        for y in 0..h + 2 {
            for x in 0..w + 2 {
                let (gx, gy) = (gx0 + x as i64 - 1, gy0 + y as i64 - 1);
                if gx < 0 || gy < 0 || gx >= gw || gy >= gh {
                    t.u[y * (w + 2) + x] = boundary(gx, gy);
                }
            }
        }
        t
    }

    fn at(&self, x: usize, y: usize) -> f64 {
        self.u[y * (self.w + 2) + x]
    }

    fn set(&mut self, x: usize, y: usize, v: f64) {
        self.u[y * (self.w + 2) + x] = v;
    }

    fn sweep(&mut self) {
        let mut next = self.u.clone();
        for y in 1..=self.h {
            for x in 1..=self.w {
                next[y * (self.w + 2) + x] = 0.25
                    * (self.at(x - 1, y)
                        + self.at(x + 1, y)
                        + self.at(x, y - 1)
                        + self.at(x, y + 1));
            }
        }
        self.u = next;
    }

    fn row(&self, y: usize) -> Vec<f64> {
        (1..=self.w).map(|x| self.at(x, y)).collect()
    }

    fn col(&self, x: usize) -> Vec<f64> {
        (1..=self.h).map(|y| self.at(x, y)).collect()
    }
}

fn encode(iter: u64, v: &[f64]) -> Vec<u8> {
    let mut b = iter.to_le_bytes().to_vec();
    v.iter().for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
    b
}

fn decode(b: &[u8], iter: u64, n: usize) -> Vec<f64> {
    let got = u64::from_le_bytes(b[..8].try_into().unwrap());
    if got != iter || b.len() != 8 + 8 * n {
        die(&format!(
            "halo of iteration {got} ({} bytes) in iteration {iter}",
            b.len()
        ));
    }
    b[8..]
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn exchange(comm: &Comm, t: &mut Tile, iter: u64) {
    let nb = comm.neighbours();
    let e = |r: gang_msg::Result<()>| r.unwrap_or_else(|e| die(&e.to_string()));
    // Eager sends never block, so send all four, then receive.
    if let Some(n) = nb.north {
        e(comm.send(n, TAG_N, &encode(iter, &t.row(1))));
    }
    if let Some(s) = nb.south {
        e(comm.send(s, TAG_S, &encode(iter, &t.row(t.h))));
    }
    if let Some(east) = nb.east {
        e(comm.send(east, TAG_E, &encode(iter, &t.col(t.w))));
    }
    if let Some(w) = nb.west {
        e(comm.send(w, TAG_W, &encode(iter, &t.col(1))));
    }
    let get = |src: usize, tag: i32, n: usize| {
        let (_, _, b) = comm
            .recv(Some(src), Some(tag))
            .unwrap_or_else(|e| die(&e.to_string()));
        decode(&b, iter, n)
    };
    if let Some(n) = nb.north {
        let v = get(n, TAG_S, t.w);
        (0..t.w).for_each(|x| t.set(x + 1, 0, v[x]));
    }
    if let Some(s) = nb.south {
        let v = get(s, TAG_N, t.w);
        let y = t.h + 1;
        (0..t.w).for_each(|x| t.set(x + 1, y, v[x]));
    }
    if let Some(east) = nb.east {
        let v = get(east, TAG_W, t.h);
        let x = t.w + 1;
        (0..t.h).for_each(|y| t.set(x, y + 1, v[y]));
    }
    if let Some(w) = nb.west {
        let v = get(w, TAG_E, t.h);
        (0..t.h).for_each(|y| t.set(0, y + 1, v[y]));
    }
}

fn main() {
    let a = Args::parse();
    let comm = gang_msg::init().unwrap_or_else(|e| die(&format!("init: {e}")));
    let part = comm.part();
    let (pw, ph) = (part.w as usize, part.h as usize);
    if comm.size() != pw * ph {
        die(&format!(
            "halo needs a full rectangle: {} ranks on {pw}x{ph}",
            comm.size()
        ));
    }
    let b: usize = a.get("block", 8);
    let stop = Stop::from_args(&a);
    let (cx, cy) = comm.coord();
    let (px, py) = ((cx - part.x0) as usize, (cy - part.y0) as usize);
    let (gw, gh) = ((pw * b) as i64, (ph * b) as i64);
    let mut tile = Tile::new(b, b, (px * b) as i64, (py * b) as i64, gw, gh);
    let mut iters = 0u64;
    while !stop.done(&comm, iters) {
        exchange(&comm, &mut tile, iters);
        tile.sweep();
        iters += 1;
    }
    // The serial recomputation: the same arithmetic in the same order per cell.
    let mut whole = Tile::new(gw as usize, gh as usize, 0, 0, gw, gh);
    for _ in 0..iters {
        whole.sweep();
    }
    for y in 1..=b {
        for x in 1..=b {
            let (want, got) = (whole.at(px * b + x, py * b + y), tile.at(x, y));
            if want.to_bits() != got.to_bits() {
                die(&format!(
                    "cell ({x},{y}) after {iters} iterations: {got} != serial {want}"
                ));
            }
        }
    }
    let mut sum = [(1..=b)
        .flat_map(|y| (1..=b).map(move |x| (x, y)))
        .map(|(x, y)| tile.at(x, y))
        .sum::<f64>()];
    comm.allreduce_f64(&mut sum, Op::Sum)
        .unwrap_or_else(|e| die(&e.to_string()));
    let serial: f64 = (1..=gh as usize)
        .flat_map(|y| (1..=gw as usize).map(move |x| (x, y)))
        .map(|(x, y)| whole.at(x, y))
        .sum();
    if ((sum[0] - serial) / serial.abs().max(1.0)).abs() > 1e-9 {
        die(&format!("global sum {} != serial {serial}", sum[0]));
    }
    if comm.rank() == 0 {
        println!(
            "{{\"example\":\"halo\",\"grid\":\"{gw}x{gh}\",\"ranks\":\"{pw}x{ph}\",\"iterations\":{iters},\"sum\":{}}}",
            sum[0]
        );
    }
    comm.finalize()
        .unwrap_or_else(|e| die(&format!("finalize: {e}")));
}
