//! Frames between ranks and the non-blocking reader and writer of one
//! connection. A frame is a 24-byte header, then `len` payload bytes:
//!
//! ```text
//!  0       4       8               16      20      24
//!  | kind  | tag   | aux (u64)     | len   | 0     | payload...
//! ```
//! `Hello` (aux = sender's rank, payload = "job\ntoken") opens a connection;
//! `Data` carries one message; `Ack` carries the cumulative count of data
//! frames the receiver has placed in its buffers (aux); `Fin` promises that no
//! more data frames follow on this connection (acks may).

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

pub const HDR: usize = 24;
/// Largest message payload: the header's length field is a u32.
pub const MAX_PAYLOAD: usize = u32::MAX as usize;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    Hello = 1,
    Data = 2,
    Ack = 3,
    Fin = 4,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub tag: i32,
    pub aux: u64,
    pub len: u32,
}

impl Header {
    pub fn encode(&self) -> [u8; HDR] {
        let mut b = [0u8; HDR];
        b[0..4].copy_from_slice(&(self.kind as u32).to_le_bytes());
        b[4..8].copy_from_slice(&self.tag.to_le_bytes());
        b[8..16].copy_from_slice(&self.aux.to_le_bytes());
        b[16..20].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> io::Result<Header> {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let kind = match u32_at(0) {
            1 => Kind::Hello,
            2 => Kind::Data,
            3 => Kind::Ack,
            4 => Kind::Fin,
            k => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unknown frame kind {k}"),
                ));
            }
        };
        Ok(Header {
            kind,
            tag: u32_at(4) as i32,
            aux: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            len: u32_at(16),
        })
    }
}

/// A received frame.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    pub hdr: Header,
    pub payload: Vec<u8>,
}

struct OutFrame {
    hdr: [u8; HDR],
    payload: Vec<u8>,
    /// Bytes of header + payload already written.
    off: usize,
}

/// Frames waiting to be written on one connection. Payloads are written from
/// the message's own buffer (sendmsg with an iovec per piece): no copy into a
/// staging buffer.
#[derive(Default)]
pub struct OutQueue {
    frames: VecDeque<OutFrame>,
    bytes: usize,
}

impl OutQueue {
    pub fn push(&mut self, hdr: Header, payload: Vec<u8>) {
        self.bytes += HDR + payload.len();
        self.frames.push_back(OutFrame {
            hdr: hdr.encode(),
            payload,
            off: 0,
        });
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Bytes not yet written.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Write as much as the socket takes. Returns bytes written; `Ok(0)` when
    /// the socket is full (or nothing is queued).
    pub fn write_some(&mut self, fd: &OwnedFd) -> io::Result<usize> {
        let mut total = 0;
        while !self.frames.is_empty() {
            let mut iov: Vec<libc::iovec> = Vec::with_capacity(32);
            for f in self.frames.iter().take(16) {
                let (h, p) = if f.off < HDR {
                    (&f.hdr[f.off..], &f.payload[..])
                } else {
                    (&[][..], &f.payload[f.off - HDR..])
                };
                for piece in [h, p] {
                    if !piece.is_empty() {
                        iov.push(libc::iovec {
                            iov_base: piece.as_ptr() as *mut _,
                            iov_len: piece.len(),
                        });
                    }
                }
            }
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = iov.as_mut_ptr();
            msg.msg_iovlen = iov.len() as _;
            // MSG_NOSIGNAL: a peer that died gives EPIPE, not a SIGPIPE that kills the job.
            let n = unsafe {
                libc::sendmsg(
                    fd.as_raw_fd(),
                    &msg,
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                return match e.kind() {
                    io::ErrorKind::WouldBlock => Ok(total),
                    io::ErrorKind::Interrupted => continue,
                    _ => Err(e),
                };
            }
            let mut n = n as usize;
            total += n;
            self.bytes -= n;
            while n > 0 {
                let f = self
                    .frames
                    .front_mut()
                    .expect("sendmsg wrote more than was queued");
                let left = HDR + f.payload.len() - f.off;
                if n >= left {
                    n -= left;
                    self.frames.pop_front();
                } else {
                    f.off += n;
                    n = 0;
                }
            }
        }
        Ok(total)
    }
}

/// Incremental frame parser over a non-blocking socket. Small frames are
/// parsed out of a 64 KiB buffer; a large payload is read straight into the
/// message's own vector once its header is known.
pub struct Reader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// A large payload being read in place: header, buffer, bytes filled.
    partial: Option<(Header, Vec<u8>, usize)>,
}

const RBUF: usize = 64 << 10;

/// What one `read_some` call saw.
#[derive(Default, Debug)]
pub struct ReadOutcome {
    pub bytes: usize,
    pub eof: bool,
}

impl Default for Reader {
    fn default() -> Self {
        Reader {
            buf: vec![0u8; RBUF],
            start: 0,
            end: 0,
            partial: None,
        }
    }
}

impl Reader {
    /// Read until the socket is empty (or `budget` bytes), appending whole frames to `out`.
    pub fn read_some(
        &mut self,
        fd: &OwnedFd,
        out: &mut Vec<Frame>,
        budget: usize,
    ) -> io::Result<ReadOutcome> {
        let mut res = ReadOutcome::default();
        while res.bytes < budget {
            let target: &mut [u8] = match &mut self.partial {
                Some((_, v, got)) => &mut v[*got..],
                None => {
                    if self.start > 0 {
                        self.buf.copy_within(self.start..self.end, 0);
                        self.end -= self.start;
                        self.start = 0;
                    }
                    &mut self.buf[self.end..]
                }
            };
            let n =
                unsafe { libc::read(fd.as_raw_fd(), target.as_mut_ptr() as *mut _, target.len()) };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => return Ok(res),
                    io::ErrorKind::Interrupted => continue,
                    _ => return Err(e),
                }
            }
            if n == 0 {
                res.eof = true;
                return Ok(res);
            }
            let n = n as usize;
            res.bytes += n;
            match &mut self.partial {
                Some((_, v, got)) => {
                    *got += n;
                    if *got == v.len() {
                        let (hdr, payload, _) = self.partial.take().unwrap();
                        out.push(Frame { hdr, payload });
                    }
                }
                None => {
                    self.end += n;
                    self.parse(out)?;
                }
            }
        }
        Ok(res)
    }

    fn parse(&mut self, out: &mut Vec<Frame>) -> io::Result<()> {
        while self.end - self.start >= HDR {
            let hdr = Header::decode(&self.buf[self.start..self.start + HDR])?;
            let len = hdr.len as usize;
            let avail = self.end - self.start - HDR;
            if avail >= len {
                let p = self.start + HDR;
                out.push(Frame {
                    hdr,
                    payload: self.buf[p..p + len].to_vec(),
                });
                self.start = p + len;
            } else if HDR + len > RBUF / 2 {
                // Too big to stage: move what we have into the message's vector
                // and read the rest into it directly.
                let mut v = vec![0u8; len];
                let p = self.start + HDR;
                v[..avail].copy_from_slice(&self.buf[p..self.end]);
                self.start = 0;
                self.end = 0;
                self.partial = Some((hdr, v, avail));
                return Ok(());
            } else {
                return Ok(());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn frames_of_every_size_cross_a_socket_pair() {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        let (a, b): (OwnedFd, OwnedFd) = (a.into(), b.into());
        let sizes = [0usize, 1, 23, 24, 1000, 40_000, 200_000, 3 << 20, 5];
        let mut q = OutQueue::default();
        for (i, &s) in sizes.iter().enumerate() {
            let payload: Vec<u8> = (0..s).map(|j| (i * 31 + j) as u8).collect();
            q.push(
                Header {
                    kind: Kind::Data,
                    tag: i as i32,
                    aux: 0,
                    len: s as u32,
                },
                payload,
            );
        }
        q.push(
            Header {
                kind: Kind::Fin,
                tag: 0,
                aux: 9,
                len: 0,
            },
            Vec::new(),
        );
        let mut r = Reader::default();
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while got.len() < sizes.len() + 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "stalled at {} frames",
                got.len()
            );
            q.write_some(&a).unwrap();
            r.read_some(&b, &mut got, 1 << 20).unwrap();
        }
        assert!(q.is_empty() && q.bytes() == 0);
        for (i, &s) in sizes.iter().enumerate() {
            assert_eq!(got[i].hdr.tag, i as i32);
            assert_eq!(got[i].payload.len(), s);
            assert!(
                got[i]
                    .payload
                    .iter()
                    .enumerate()
                    .all(|(j, &v)| v == (i * 31 + j) as u8)
            );
        }
        assert_eq!(got[sizes.len()].hdr.kind, Kind::Fin);
        assert_eq!(got[sizes.len()].hdr.aux, 9);
    }
}
