//! Collectives over point-to-point, on reserved negative tags (an any-tag
//! receive never sees them). Every rank must call the same collectives in the
//! same order, as in MPI; messages of one (sender, tag) keep their order, so
//! consecutive collectives cannot take each other's messages.

use crate::comm::Comm;
use crate::error::{Error, Result};

const TAG_BARRIER: i32 = -2;
const TAG_BCAST: i32 = -3;
const TAG_REDUCE: i32 = -4;

/// Reduction operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub enum Op {
    Sum = 0,
    Min = 1,
    Max = 2,
}

/// Element types `allreduce` works on.
pub trait Reducible: Copy {
    const SIZE: usize;
    fn put(self, out: &mut Vec<u8>);
    fn get(b: &[u8]) -> Self;
    fn combine(self, other: Self, op: Op) -> Self;
}

impl Reducible for i64 {
    const SIZE: usize = 8;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(b: &[u8]) -> Self {
        i64::from_le_bytes(b.try_into().unwrap())
    }
    fn combine(self, o: Self, op: Op) -> Self {
        match op {
            // Wrapping, as MPI integer sums overflow silently; a panic in a
            // reduction would take the whole job down.
            Op::Sum => self.wrapping_add(o),
            Op::Min => self.min(o),
            Op::Max => self.max(o),
        }
    }
}

impl Reducible for f64 {
    const SIZE: usize = 8;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(b: &[u8]) -> Self {
        f64::from_le_bytes(b.try_into().unwrap())
    }
    fn combine(self, o: Self, op: Op) -> Self {
        match op {
            Op::Sum => self + o,
            Op::Min => self.min(o),
            Op::Max => self.max(o),
        }
    }
}

impl Comm {
    /// Dissemination barrier: ceil(log2 n) rounds; in round k each rank
    /// sends to rank + 2^k and receives from rank - 2^k.
    pub fn barrier(&self) -> Result<()> {
        let (n, r) = (self.size(), self.rank());
        let mut k = 1;
        while k < n {
            self.send_raw((r + k) % n, TAG_BARRIER, Vec::new(), None)?;
            self.recv_raw(Some((r + n - k) % n), Some(TAG_BARRIER))?;
            k <<= 1;
        }
        Ok(())
    }

    /// Binomial-tree broadcast of `buf` from `root`: on return every rank's
    /// `buf` holds root's bytes (its length included).
    pub fn broadcast(&self, root: usize, buf: &mut Vec<u8>) -> Result<()> {
        let n = self.size();
        if root >= n {
            return Err(Error::BadRank {
                rank: root,
                size: n,
            });
        }
        let vr = (self.rank() + n - root) % n;
        let mut mask = 1;
        // Receive from the parent: the rank that differs in our lowest set bit.
        while mask < n {
            if vr & mask != 0 {
                let (_, _, data) = self.recv_raw(Some((vr - mask + root) % n), Some(TAG_BCAST))?;
                *buf = data;
                break;
            }
            mask <<= 1;
        }
        // Send to children below that bit.
        mask >>= 1;
        while mask > 0 {
            if vr + mask < n {
                self.send_raw((vr + mask + root) % n, TAG_BCAST, buf.clone(), None)?;
            }
            mask >>= 1;
        }
        Ok(())
    }

    /// Element-wise reduction of `vals` over all ranks; every rank gets the
    /// result. A binomial reduction to rank 0 in a fixed order, then a
    /// broadcast: floating-point sums are identical on every rank.
    pub fn allreduce<T: Reducible>(&self, vals: &mut [T], op: Op) -> Result<()> {
        let (n, r) = (self.size(), self.rank());
        let encode = |v: &[T]| {
            let mut b = Vec::with_capacity(v.len() * T::SIZE);
            v.iter().for_each(|x| x.put(&mut b));
            b
        };
        let mut mask = 1;
        while mask < n {
            if r & mask != 0 {
                self.send_raw(r - mask, TAG_REDUCE, encode(vals), None)?;
                break;
            }
            if r + mask < n {
                let (_, _, data) = self.recv_raw(Some(r + mask), Some(TAG_REDUCE))?;
                if data.len() != vals.len() * T::SIZE {
                    return Err(Error::Collective(format!(
                        "rank {} reduced {} bytes, this rank {} elements",
                        r + mask,
                        data.len(),
                        vals.len()
                    )));
                }
                for (v, c) in vals.iter_mut().zip(data.chunks_exact(T::SIZE)) {
                    *v = v.combine(T::get(c), op);
                }
            }
            mask <<= 1;
        }
        let mut buf = if r == 0 { encode(vals) } else { Vec::new() };
        self.broadcast(0, &mut buf)?;
        if buf.len() != vals.len() * T::SIZE {
            return Err(Error::Collective(format!(
                "allreduce result of {} bytes for {} elements",
                buf.len(),
                vals.len()
            )));
        }
        for (v, c) in vals.iter_mut().zip(buf.chunks_exact(T::SIZE)) {
            *v = T::get(c);
        }
        Ok(())
    }

    pub fn allreduce_i64(&self, vals: &mut [i64], op: Op) -> Result<()> {
        self.allreduce(vals, op)
    }

    pub fn allreduce_f64(&self, vals: &mut [f64], op: Op) -> Result<()> {
        self.allreduce(vals, op)
    }
}
