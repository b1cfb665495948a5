//! A slow, lossy link made in user space, for kernels without `sch_netem` (tc netem's
//! qdisc; a minimal VM kernel may have neither the module nor a way to load it).
//!
//! The host's port on the switch (`gvN`) leaves the bridge; a second veth pair joins the
//! bridge in its place (`gwN` on the bridge, `gxN` free), and threads of this process
//! carry every frame between `gvN` and `gxN` through `AF_PACKET` sockets, each direction
//! a FIFO delay line: a frame is dropped with the loss probability, else sent once the
//! delay has passed since it arrived. What netem does on both ends of the link, done once
//! in the middle of it, so a delay given per direction is applied once per direction.
//!
//! The sockets carry a `virtio_net_hdr` before each frame (`PACKET_VNET_HDR`): veth
//! passes TCP segments of up to 64 KiB (TSO) and partial checksums, which go through
//! unchanged and are cut to the MTU by the kernel on the far side, as on a real link.
//!
//! The sockets are made by a short-lived thread that joins the switch's network
//! namespace (a network namespace is per thread); the forwarding threads only use them.
//! Stopped by [`Impaired::stop`] or on drop: the threads end within a receive timeout.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use super::network::{BRIDGE, in_netns, switch_port};

/// What a link does to the frames crossing it, each way.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Impairment {
    pub delay: Duration,
    /// Probability of dropping a frame, 0 to 1.
    pub loss: f64,
}

impl Impairment {
    /// netem's words, the ones this supports: `delay 50ms`, `loss 1%` (either or both).
    pub fn parse(spec: &str) -> Result<Impairment> {
        let mut out = Impairment::default();
        let mut words = spec.split_whitespace();
        while let Some(w) = words.next() {
            let value = words
                .next()
                .ok_or_else(|| anyhow!("`{w}` needs a value in `{spec}`"))?;
            match w {
                "delay" => out.delay = parse_duration(value)?,
                "loss" => {
                    let pct: f64 = value
                        .strip_suffix('%')
                        .unwrap_or(value)
                        .parse()
                        .with_context(|| format!("loss `{value}`"))?;
                    if !(0.0..=100.0).contains(&pct) {
                        bail!("loss {value} is not a percentage");
                    }
                    out.loss = pct / 100.0;
                }
                _ => bail!(
                    "`{w}` in `{spec}`: only delay and loss are emulated without the kernel's netem"
                ),
            }
        }
        Ok(out)
    }
}

fn parse_duration(v: &str) -> Result<Duration> {
    let (num, scale) = if let Some(n) = v.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = v.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1.0)
    } else {
        bail!("delay `{v}` needs a unit (ms, us, s)")
    };
    let n: f64 = num.parse().with_context(|| format!("delay `{v}`"))?;
    if !(0.0..=60.0).contains(&(n * scale)) {
        bail!("delay `{v}` is out of range");
    }
    Ok(Duration::from_secs_f64(n * scale))
}

/// The bridge's replacement port for host `index` and its free peer.
fn ports(index: u32) -> (String, String) {
    (format!("gw{index}"), format!("gx{index}"))
}

/// Frames that reached a link so far, both ways, and how many of them it dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkCounts {
    pub frames: u64,
    pub dropped: u64,
}

#[derive(Debug, Default)]
struct Counters {
    frames: AtomicU64,
    dropped: AtomicU64,
}

/// One host's link carried through this process.
#[derive(Debug)]
pub struct Impaired {
    switch: PathBuf,
    index: u32,
    params: Arc<Mutex<Impairment>>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Impaired {
    /// Take host `index`'s link off the bridge and carry it with `imp`.
    pub fn start(switch: &Path, index: u32, imp: Impairment) -> Result<Impaired> {
        let port = switch_port(index);
        let (bridged, free) = ports(index);
        in_netns(
            switch,
            &[
                "ip", "link", "add", &bridged, "type", "veth", "peer", "name", &free,
            ],
        )?;
        let mut me = Impaired {
            switch: switch.to_path_buf(),
            index,
            params: Arc::new(Mutex::new(imp)),
            counters: Arc::default(),
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
        };
        in_netns(
            switch,
            &["ip", "link", "set", &bridged, "master", BRIDGE, "up"],
        )?;
        in_netns(switch, &["ip", "link", "set", &free, "promisc", "on", "up"])?;
        in_netns(switch, &["ip", "link", "set", &port, "promisc", "on"])?;
        let (host_side, bridge_side) = packet_sockets(switch, &port, &free)?;
        // Off the bridge only now that the sockets are open: the outage is a few ms.
        in_netns(switch, &["ip", "link", "set", &port, "nomaster"])?;
        let host_side = Arc::new(host_side);
        let bridge_side = Arc::new(bridge_side);
        for (from, to, seed) in [
            (host_side.clone(), bridge_side.clone(), 1),
            (bridge_side, host_side, 2),
        ] {
            let line = Arc::new(DelayLine::default());
            let (params, stop) = (me.params.clone(), me.stop.clone());
            let (l, counters) = (line.clone(), me.counters.clone());
            let rng = seed ^ (u64::from(index) << 8) ^ now_seed();
            me.threads.push(
                std::thread::Builder::new()
                    .name(format!("link{index}-rx{seed}"))
                    .spawn(move || receive(&from, &l, &params, &counters, &stop, rng))?,
            );
            let stop = me.stop.clone();
            me.threads.push(
                std::thread::Builder::new()
                    .name(format!("link{index}-tx{seed}"))
                    .spawn(move || transmit(&to, &line, &stop))?,
            );
        }
        Ok(me)
    }

    /// Change what the link does.
    pub fn set(&self, imp: Impairment) {
        *self.params.lock().unwrap_or_else(|e| e.into_inner()) = imp;
    }

    pub fn counts(&self) -> LinkCounts {
        LinkCounts {
            frames: self.counters.frames.load(Ordering::Relaxed),
            dropped: self.counters.dropped.load(Ordering::Relaxed),
        }
    }

    /// Stop carrying frames and put the host's port back on the bridge.
    pub fn stop(mut self) -> Result<()> {
        self.halt();
        let port = switch_port(self.index);
        in_netns(
            &self.switch,
            &["ip", "link", "set", &port, "master", BRIDGE],
        )?;
        let _ = in_netns(
            &self.switch,
            &["ip", "link", "set", &port, "promisc", "off"],
        );
        in_netns(&self.switch, &["ip", "link", "del", &ports(self.index).0])?;
        Ok(())
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Impaired {
    fn drop(&mut self) {
        self.halt();
    }
}

fn now_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

/// Frames waiting for their time, in arrival order (one delay for all: also due order).
#[derive(Debug, Default)]
struct DelayLine {
    frames: Mutex<VecDeque<(Instant, Vec<u8>)>>,
    ready: Condvar,
}

/// How long a blocked receive waits before looking at the stop flag.
const TICK: Duration = Duration::from_millis(100);
/// Room for a virtio_net_hdr and a 64 KiB GSO frame with its Ethernet header.
const FRAME_MAX: usize = 70_000;
/// Frames queued one way before more are dropped (a full link's buffer).
const LINE_MAX: usize = 10_000;

fn receive(
    sock: &OwnedFd,
    line: &DelayLine,
    params: &Mutex<Impairment>,
    counters: &Counters,
    stop: &AtomicBool,
    mut rng: u64,
) {
    let mut buf = vec![0u8; FRAME_MAX];
    while !stop.load(Ordering::SeqCst) {
        // SAFETY: sockaddr_ll is plain data, for which all zeros is a valid value.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: a valid buffer and address of the sizes given.
        let n = unsafe {
            libc::recvfrom(
                sock.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
                (&raw mut from).cast(),
                &mut len,
            )
        };
        if n <= 0 {
            continue; // the timeout, or the device down
        }
        if from.sll_pkttype == libc::PACKET_OUTGOING {
            continue; // what the other direction sent on this device
        }
        let imp = *params.lock().unwrap_or_else(|e| e.into_inner());
        counters.frames.fetch_add(1, Ordering::Relaxed);
        // xorshift64: loss is a coin, not a secret.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        if imp.loss > 0.0 && ((rng >> 11) as f64 / (1u64 << 53) as f64) < imp.loss {
            counters.dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let mut q = line.frames.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() < LINE_MAX {
            q.push_back((Instant::now() + imp.delay, buf[..n as usize].to_vec()));
            line.ready.notify_one();
        } else {
            counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn transmit(sock: &OwnedFd, line: &DelayLine, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        let frame = {
            let mut q = line.frames.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                let now = Instant::now();
                let wait = match q.front() {
                    Some((due, _)) if *due <= now => break q.pop_front(),
                    Some((due, _)) => (*due - now).min(TICK),
                    None => TICK,
                };
                q = line
                    .ready
                    .wait_timeout(q, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                if stop.load(Ordering::SeqCst) {
                    break None;
                }
            }
        };
        let Some((_, frame)) = frame else { continue };
        // SAFETY: a valid buffer of that length; the socket is bound to its device.
        unsafe {
            libc::send(sock.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0);
        }
    }
}

/// Packet sockets on devices `a` and `b` of the network namespace `ns`.
fn packet_sockets(ns: &Path, a: &str, b: &str) -> Result<(OwnedFd, OwnedFd)> {
    let ns = ns.to_path_buf();
    let (a, b) = (a.to_string(), b.to_string());
    std::thread::spawn(move || -> Result<(OwnedFd, OwnedFd)> {
        let f = std::fs::File::open(&ns).with_context(|| format!("open {}", ns.display()))?;
        // SAFETY: an open namespace file; this thread alone changes namespace and ends.
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            bail!(
                "cannot enter the switch's network namespace: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok((packet_socket(&a)?, packet_socket(&b)?))
    })
    .join()
    .map_err(|_| anyhow!("the thread opening the link's sockets panicked"))?
}

fn packet_socket(dev: &str) -> Result<OwnedFd> {
    let name = std::ffi::CString::new(dev)?;
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        bail!("no device {dev}: {}", std::io::Error::last_os_error());
    }
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto)) };
    if fd < 0 {
        bail!("packet socket: {}", std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let on: libc::c_int = 1;
    let rcvbuf: libc::c_int = 8 << 20;
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: TICK.as_micros() as libc::suseconds_t,
    };
    setsockopt(&sock, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &on)?;
    setsockopt(&sock, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &on)?;
    setsockopt(&sock, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &rcvbuf)?;
    setsockopt(&sock, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv)?;
    // SAFETY: sockaddr_ll is plain data, for which all zeros is a valid value.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = proto;
    addr.sll_ifindex = ifindex as i32;
    // SAFETY: a valid address of the size given.
    let r = unsafe {
        libc::bind(
            sock.as_raw_fd(),
            (&raw const addr).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r != 0 {
        bail!(
            "bind a packet socket to {dev}: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(sock)
}

fn setsockopt<T>(sock: &OwnedFd, level: i32, name: i32, value: &T) -> Result<()> {
    // SAFETY: a valid value of the size given.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r != 0 {
        bail!(
            "setsockopt({level}, {name}): {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netem_words_parse() {
        let i = Impairment::parse("delay 50ms loss 1%").unwrap();
        assert_eq!(i.delay, Duration::from_millis(50));
        assert!((i.loss - 0.01).abs() < 1e-12);
        assert_eq!(
            Impairment::parse("loss 0.5%").unwrap().delay,
            Duration::ZERO
        );
        assert!(Impairment::parse("delay 50ms 10ms").is_err());
        assert!(Impairment::parse("delay 50").is_err());
        assert!(Impairment::parse("loss 120%").is_err());
        assert!(Impairment::parse("rate 1mbit").is_err());
    }
}
