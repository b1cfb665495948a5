//! Each emulated host's wall clock: an offset from the machine's, a drift, and jumps,
//! applied to every process of the host by a preloaded library (csrc/clockshift.c, in
//! the host's `/etc/ld.so.preload`) that reads them from a page in the host's directory
//! (`clock`, seen inside the host as `/mnt/clock`). The monotonic clock stays the
//! machine's, as on a real host. Changes take effect at the next clock read.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering, fence};

use anyhow::{Context, Result};

/// The clock library (`csrc/clockshift.c`), built by build.rs.
const CLOCK_LIB: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libgang_clockshift.so"));
/// "GANGCLK1" little-endian, as the clock library checks it.
const MAGIC: u64 = 0x314b_4c43_474e_4147;

/// A host's clock relative to the machine's.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClockSkew {
    /// Added to the wall clock.
    pub offset_ns: i64,
    /// Parts per million the clock runs fast (positive) or slow.
    pub drift_ppm: f64,
}

impl ClockSkew {
    pub fn is_zero(&self) -> bool {
        self.offset_ns == 0 && self.drift_ppm == 0.0
    }
}

/// `+40ms`, `-25ms`, `0`, `+1.5s`, `250us`: an offset for `--host-clock-offsets`.
pub fn parse_offset(s: &str) -> Result<i64, String> {
    let t = s.trim();
    let (sign, rest) = match t.as_bytes().first() {
        Some(b'-') => (-1.0, &t[1..]),
        Some(b'+') => (1.0, &t[1..]),
        _ => (1.0, t),
    };
    let (num, unit) = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or((rest, ""), |i| rest.split_at(i));
    let scale = match unit {
        "" if num.parse::<f64>() == Ok(0.0) => 0.0,
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => {
            return Err(format!(
                "clock offset {s:?}: a number with ns, us, ms or s (e.g. +40ms, -25ms, 0)"
            ));
        }
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("clock offset {s:?}: {num:?} is not a number"))?;
    let ns = sign * v * scale;
    if !ns.is_finite() || ns.abs() > 3600e9 {
        return Err(format!("clock offset {s:?}: at most an hour either way"));
    }
    Ok(ns as i64)
}

/// The page the clock library reads, as this harness writes it.
#[repr(C)]
struct Page {
    magic: AtomicU64,
    seq: AtomicU64,
    offset_ns: AtomicU64,
    drift_ppb: AtomicU64,
    t0_ns: AtomicU64,
}

fn real_now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Write the clock library and a host's clock page into its directory; the lines for its
/// `/etc/ld.so.preload`.
pub fn install(host_dir: &Path, skew: ClockSkew) -> Result<String> {
    let lib = host_dir.join("clockshift.so");
    std::fs::write(&lib, CLOCK_LIB).with_context(|| format!("write {}", lib.display()))?;
    let page = host_dir.join("clock");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(&page)
        .with_context(|| format!("create {}", page.display()))?;
    f.set_len(4096)?;
    set(host_dir, skew)?;
    Ok("/mnt/clockshift.so\n".to_string())
}

/// Set a host's clock now: a new offset is a jump (the drift restarts from it).
pub fn set(host_dir: &Path, skew: ClockSkew) -> Result<()> {
    let path = host_dir.join("clock");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("open {}", path.display()))?;
    // SAFETY: a shared mapping of a 4 KiB file this process made; only atomics are
    // accessed through it, and it is unmapped before return.
    unsafe {
        use std::os::fd::AsRawFd;
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).context("mmap the clock page");
        }
        let page = &*(p as *const Page);
        // A seqlock: odd while writing.
        let s = page.seq.load(Ordering::Relaxed);
        page.seq.store(s | 1, Ordering::Relaxed);
        fence(Ordering::Release);
        page.offset_ns
            .store(skew.offset_ns as u64, Ordering::Relaxed);
        page.drift_ppb.store(
            (skew.drift_ppm * 1000.0).round() as i64 as u64,
            Ordering::Relaxed,
        );
        page.t0_ns.store(real_now_ns() as u64, Ordering::Relaxed);
        page.magic.store(MAGIC, Ordering::Relaxed);
        page.seq.store((s | 1) + 1, Ordering::Release);
        libc::munmap(p, 4096);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_read_as_users_write_them() {
        assert_eq!(parse_offset("+40ms"), Ok(40_000_000));
        assert_eq!(parse_offset("-25ms"), Ok(-25_000_000));
        assert_eq!(parse_offset("0"), Ok(0));
        assert_eq!(parse_offset("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_offset("250us"), Ok(250_000));
        assert!(parse_offset("40").unwrap_err().contains("ns, us, ms or s"));
        assert!(parse_offset("+2h").is_err());
        assert!(parse_offset("+7200s").unwrap_err().contains("an hour"));
    }
}
