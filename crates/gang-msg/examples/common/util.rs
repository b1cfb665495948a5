//! Shared by the examples: argument parsing, self-checking payloads, and a
//! collective stop decision for runs bounded by time.
#![allow(dead_code)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use gang_msg::{Comm, Op};

/// `--key value` pairs.
pub struct Args(HashMap<String, String>);

impl Args {
    pub fn parse() -> Args {
        let v: Vec<String> = std::env::args().skip(1).collect();
        let mut m = HashMap::new();
        for pair in v.chunks(2) {
            let k = pair[0]
                .strip_prefix("--")
                .unwrap_or_else(|| die(&format!("unexpected argument {:?}", pair[0])));
            m.insert(k.to_string(), pair.get(1).cloned().unwrap_or_default());
        }
        Args(m)
    }

    pub fn get<T: std::str::FromStr>(&self, k: &str, default: T) -> T {
        self.0.get(k).map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| die(&format!("--{k} {v}: not a number")))
        })
    }

    pub fn str(&self, k: &str, default: &str) -> String {
        self.0
            .get(k)
            .cloned()
            .unwrap_or_else(|| default.to_string())
    }
}

pub fn die(msg: &str) -> ! {
    eprintln!(
        "rank {}: {msg}",
        std::env::var("GANG_RANK").unwrap_or_default()
    );
    std::process::exit(1)
}

/// Header of every checked payload: src, dst, seq, checksum of the body.
pub const HEAD: usize = 24;

fn fill(src: u32, dst: u32, seq: u64, body: &mut [u8]) {
    let mut x = (seq.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        ^ ((src as u64) << 32 | dst as u64)
        ^ 0xD1B5_4A32_D192_ED03;
    for b in body.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

fn checksum(body: &[u8]) -> u64 {
    body.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// A message of `len` (>= HEAD) bytes that names its sender, receiver and
/// sequence number and carries a checksum of its pseudo-random body.
pub fn make(src: usize, dst: usize, seq: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len.max(HEAD)];
    fill(src as u32, dst as u32, seq, &mut v[HEAD..]);
    let sum = checksum(&v[HEAD..]);
    v[0..4].copy_from_slice(&(src as u32).to_le_bytes());
    v[4..8].copy_from_slice(&(dst as u32).to_le_bytes());
    v[8..16].copy_from_slice(&seq.to_le_bytes());
    v[16..24].copy_from_slice(&sum.to_le_bytes());
    v
}

/// Check a message made by `make`: sender, receiver, the expected sequence
/// number, the checksum, and the body itself.
pub fn verify(m: &[u8], src: usize, dst: usize, seq: u64) -> Result<(), String> {
    if m.len() < HEAD {
        return Err(format!("message of {} bytes from {src}", m.len()));
    }
    let u32_at = |i: usize| u32::from_le_bytes(m[i..i + 4].try_into().unwrap()) as usize;
    let got_seq = u64::from_le_bytes(m[8..16].try_into().unwrap());
    if u32_at(0) != src || u32_at(4) != dst || got_seq != seq {
        return Err(format!(
            "expected {src}->{dst} #{seq}, got {}->{} #{got_seq}",
            u32_at(0),
            u32_at(4)
        ));
    }
    let sum = u64::from_le_bytes(m[16..24].try_into().unwrap());
    if checksum(&m[HEAD..]) != sum {
        return Err(format!("{src}->{dst} #{seq}: checksum mismatch"));
    }
    let mut want = vec![0u8; m.len() - HEAD];
    fill(src as u32, dst as u32, seq, &mut want);
    if want != m[HEAD..] {
        return Err(format!("{src}->{dst} #{seq}: body differs"));
    }
    Ok(())
}

/// Message length for iteration `i`: cycles through small to `max` bytes.
pub fn size_for(i: u64, max: usize) -> usize {
    let sizes = [HEAD, 100, 1000, 8000, 65536, 300_000];
    sizes[(i % sizes.len() as u64) as usize].min(max.max(HEAD))
}

/// Decides together when to stop: after `--iters` iterations, or once any
/// rank has run `--seconds` or seen `--until-file` exist (checked
/// collectively every 16 iterations, so all ranks stop at the same one).
pub struct Stop {
    iters: u64,
    until: Option<Instant>,
    file: Option<std::path::PathBuf>,
}

impl Stop {
    pub fn from_args(a: &Args) -> Stop {
        let secs: f64 = a.get("seconds", 0.0);
        let file = Some(a.str("until-file", ""))
            .filter(|f| !f.is_empty())
            .map(Into::into);
        let open_ended = secs > 0.0 || file.is_some();
        Stop {
            iters: a.get("iters", if open_ended { u64::MAX } else { 100 }),
            until: (secs > 0.0).then(|| Instant::now() + Duration::from_secs_f64(secs)),
            file,
        }
    }

    pub fn done(&self, comm: &Comm, i: u64) -> bool {
        if i >= self.iters {
            return true;
        }
        if (self.until.is_none() && self.file.is_none()) || !i.is_multiple_of(16) {
            return false;
        }
        let local = self.until.is_some_and(|t| Instant::now() >= t)
            || self.file.as_ref().is_some_and(|f| f.exists());
        let mut f = [local as i64];
        comm.allreduce_i64(&mut f, Op::Max)
            .unwrap_or_else(|e| die(&e.to_string()));
        f[0] == 1
    }
}
