//! Clients on the Unix socket that name it as their HTTP/2 `:authority`.
//!
//! grpcio (Python, C++ since 1.57) and grpc-java send a Unix socket's path, raw or
//! percent-encoded, as `:authority`; the master's HTTP/2 (h2, under hyper and tonic)
//! refuses that as a malformed header and resets every stream (`RST_STREAM`, "Stream
//! removed"), so those clients needed `grpc.default_authority` set by hand. On the socket
//! the authority names nothing (the peer is who the kernel says), so this reader stands
//! between the socket and h2: it reads the client's first header block, and if its
//! `:authority` is not one h2 takes, it re-encodes that block and every later one with
//! `:authority: localhost` (HPACK, `fluke-hpack`: decoded with the client's context,
//! encoded with ours). A client whose first authority is fine (tonic, grpc-go, prun) gets
//! every byte through untouched from then on. What the server writes is never touched.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The connection preface every HTTP/2 client sends first.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// Every peer takes frames this large (SETTINGS_MAX_FRAME_SIZE's initial value).
const MAX_FRAME: usize = 16_384;
/// A header block larger than this is refused (h2's own default limit is 16 KiB of
/// decoded headers; gRPC clients send a few hundred bytes).
const MAX_BLOCK: usize = 1 << 20;
/// What the authority becomes.
const LOCALHOST: &[u8] = b"localhost";

#[derive(Debug, PartialEq, Eq)]
enum Mode {
    /// Before the first header block: frames are parsed.
    Undecided,
    /// The first authority was fine: bytes pass as they are.
    Passthrough,
    /// Header blocks are re-encoded.
    Rewrite,
}

/// A header block being gathered: its first frame's header fields and its fragments.
struct Block {
    stream: u32,
    flags: u8,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
    /// The frames as they came, for a block passed on unchanged.
    raw: Vec<u8>,
}

pub struct AuthorityFix<IO> {
    io: IO,
    mode: Mode,
    preface_seen: usize,
    /// Bytes read from the client not yet parsed.
    input: Vec<u8>,
    /// Bytes ready for h2.
    output: Vec<u8>,
    block: Option<Block>,
    decoder: fluke_hpack::Decoder<'static>,
    encoder: fluke_hpack::Encoder<'static>,
    eof: bool,
}

impl<IO> AuthorityFix<IO> {
    pub fn new(io: IO) -> Self {
        AuthorityFix {
            io,
            mode: Mode::Undecided,
            preface_seen: 0,
            input: Vec::new(),
            output: Vec::new(),
            block: None,
            decoder: fluke_hpack::Decoder::new(),
            encoder: fluke_hpack::Encoder::new(),
            eof: false,
        }
    }

    pub fn get_ref(&self) -> &IO {
        &self.io
    }

    /// Move what can be moved from `input` to `output`.
    fn process(&mut self) -> io::Result<()> {
        loop {
            if self.mode == Mode::Passthrough {
                self.output.append(&mut self.input);
                return Ok(());
            }
            if self.preface_seen < PREFACE.len() {
                let n = (PREFACE.len() - self.preface_seen).min(self.input.len());
                if n == 0 {
                    return Ok(());
                }
                // Not HTTP/2: passed on for h2 to refuse as it always did.
                if self.input[..n] != PREFACE[self.preface_seen..self.preface_seen + n] {
                    self.mode = Mode::Passthrough;
                    continue;
                }
                self.output.extend(self.input.drain(..n));
                self.preface_seen += n;
                continue;
            }
            if self.input.len() < 9 {
                return Ok(());
            }
            let len = u32::from_be_bytes([0, self.input[0], self.input[1], self.input[2]]) as usize;
            if self.input.len() < 9 + len {
                return Ok(());
            }
            let kind = self.input[3];
            let flags = self.input[4];
            let stream =
                u32::from_be_bytes(self.input[5..9].try_into().expect("4 bytes")) & 0x7fff_ffff;
            let frame: Vec<u8> = self.input.drain(..9 + len).collect();
            match (kind, &mut self.block) {
                (HEADERS, None) => {
                    let mut payload = &frame[9..];
                    let mut pad = 0;
                    if flags & PADDED != 0 {
                        pad = *payload
                            .first()
                            .ok_or_else(|| bad("a HEADERS frame without its pad length"))?
                            as usize;
                        payload = &payload[1..];
                    }
                    let mut priority = None;
                    if flags & PRIORITY != 0 {
                        let p: [u8; 5] = payload
                            .get(..5)
                            .and_then(|p| p.try_into().ok())
                            .ok_or_else(|| bad("a HEADERS frame without its priority"))?;
                        priority = Some(p);
                        payload = &payload[5..];
                    }
                    let end = payload
                        .len()
                        .checked_sub(pad)
                        .ok_or_else(|| bad("a HEADERS frame's padding is longer than it"))?;
                    self.block = Some(Block {
                        stream,
                        flags,
                        priority,
                        fragment: payload[..end].to_vec(),
                        raw: frame,
                    });
                }
                (CONTINUATION, Some(b)) if b.stream == stream => {
                    b.fragment.extend_from_slice(&frame[9..]);
                    b.raw.extend_from_slice(&frame);
                    if b.fragment.len() > MAX_BLOCK {
                        return Err(bad("a header block over 1 MiB"));
                    }
                    b.flags |= flags & END_HEADERS;
                }
                // Anything else inside a header block is the client's protocol error: let
                // h2 see it as it came.
                (_, Some(_)) => {
                    let b = self.block.take().expect("matched");
                    self.output.extend_from_slice(&b.raw);
                    self.output.extend_from_slice(&frame);
                    self.mode = Mode::Passthrough;
                    continue;
                }
                (_, None) => {
                    self.output.extend_from_slice(&frame);
                    continue;
                }
            }
            if self
                .block
                .as_ref()
                .is_some_and(|b| b.flags & END_HEADERS != 0)
            {
                let b = self.block.take().expect("checked");
                self.finish_block(b)?;
            }
        }
    }

    fn finish_block(&mut self, b: Block) -> io::Result<()> {
        let mut headers = self
            .decoder
            .decode(&b.fragment)
            .map_err(|e| bad(&format!("a header block HPACK cannot decode: {e:?}")))?;
        if self.mode == Mode::Undecided {
            let fine = headers
                .iter()
                .find(|(n, _)| n == b":authority")
                .is_none_or(|(_, v)| authority_ok(v));
            if fine {
                self.output.extend_from_slice(&b.raw);
                self.mode = Mode::Passthrough;
                return Ok(());
            }
            self.mode = Mode::Rewrite;
        }
        for (n, v) in headers.iter_mut() {
            if n == b":authority" && !authority_ok(v) {
                *v = LOCALHOST.to_vec();
            }
        }
        let block = self
            .encoder
            .encode(headers.iter().map(|(n, v)| (&n[..], &v[..])));
        let first_room = MAX_FRAME - b.priority.map_or(0, |_| 5);
        let (first, mut rest) = block.split_at(block.len().min(first_room));
        let mut flags = b.flags & END_STREAM;
        if rest.is_empty() {
            flags |= END_HEADERS;
        }
        let mut payload = Vec::with_capacity(first.len() + 5);
        if let Some(p) = b.priority {
            flags |= PRIORITY;
            payload.extend_from_slice(&p);
        }
        payload.extend_from_slice(first);
        push_frame(&mut self.output, HEADERS, flags, b.stream, &payload);
        while !rest.is_empty() {
            let (chunk, more) = rest.split_at(rest.len().min(MAX_FRAME));
            let flags = if more.is_empty() { END_HEADERS } else { 0 };
            push_frame(&mut self.output, CONTINUATION, flags, b.stream, chunk);
            rest = more;
        }
        Ok(())
    }
}

/// Whether h2 takes this authority: a host and optional port, no path or escapes.
fn authority_ok(v: &[u8]) -> bool {
    !v.is_empty()
        && v.iter()
            .all(|&c| c.is_ascii_alphanumeric() || b"-._~:[]@!$&'()*+,;=".contains(&c))
}

fn push_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

fn bad(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("HTTP/2 from the client: {what}"),
    )
}

impl<IO: AsyncRead + Unpin> AsyncRead for AuthorityFix<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // The common case once decided: straight through, no copy.
        if this.mode == Mode::Passthrough && this.output.is_empty() && this.input.is_empty() {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        loop {
            if !this.output.is_empty() {
                let n = this.output.len().min(buf.remaining());
                buf.put_slice(&this.output[..n]);
                this.output.drain(..n);
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 8192];
            let mut rb = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.io).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) if rb.filled().is_empty() => {
                    this.eof = true;
                    // What is left unparsed goes to h2 as it is, to end as h2 decides.
                    this.output.append(&mut this.input);
                    if let Some(b) = this.block.take() {
                        this.output.extend_from_slice(&b.raw);
                    }
                }
                Poll::Ready(Ok(())) => {
                    this.input.extend_from_slice(rb.filled());
                    this.process()?;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn headers_frame(
        enc: &mut fluke_hpack::Encoder<'static>,
        stream: u32,
        authority: &[u8],
    ) -> Vec<u8> {
        let block = enc.encode([
            (&b":method"[..], &b"POST"[..]),
            (b":scheme", b"http"),
            (b":path", b"/gang.v1.JobService/ListJobs"),
            (b":authority", authority),
            (b"content-type", b"application/grpc"),
        ]);
        let mut f = Vec::new();
        push_frame(&mut f, HEADERS, END_HEADERS, stream, &block);
        f
    }

    /// What h2 would read: (kind, flags, stream, payload) frames after the preface.
    fn frames(mut b: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
        assert!(b.starts_with(PREFACE));
        b = &b[PREFACE.len()..];
        let mut out = Vec::new();
        while b.len() >= 9 {
            let len = u32::from_be_bytes([0, b[0], b[1], b[2]]) as usize;
            let stream = u32::from_be_bytes(b[5..9].try_into().unwrap());
            out.push((b[3], b[4], stream, b[9..9 + len].to_vec()));
            b = &b[9 + len..];
        }
        out
    }

    /// A client that sends 3 bytes at a time: frames and blocks arrive in pieces.
    struct Trickle(Vec<u8>);

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let n = self.0.len().min(3).min(buf.remaining());
            let piece: Vec<u8> = self.0.drain(..n).collect();
            buf.put_slice(&piece);
            Poll::Ready(Ok(()))
        }
    }

    async fn through(input: Vec<u8>) -> Vec<u8> {
        let mut fix = AuthorityFix::new(Trickle(input));
        let mut out = Vec::new();
        fix.read_to_end(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn a_socket_path_authority_becomes_localhost_in_every_block() {
        let mut enc = fluke_hpack::Encoder::new();
        let mut input = PREFACE.to_vec();
        push_frame(&mut input, 0x4, 0, 0, &[]); // SETTINGS
        input.extend(headers_frame(&mut enc, 1, b"%2Frun%2Fgang%2Fmaster.sock"));
        push_frame(&mut input, 0x0, END_STREAM, 1, b"\0\0\0\0\0"); // DATA
        input.extend(headers_frame(&mut enc, 3, b"/run/gang/master.sock"));
        let out = through(input).await;
        let f = frames(&out);
        assert_eq!(
            f.iter().map(|x| x.0).collect::<Vec<_>>(),
            [0x4, HEADERS, 0x0, HEADERS]
        );
        let mut dec = fluke_hpack::Decoder::new();
        for (kind, flags, _, payload) in &f {
            if *kind == HEADERS {
                assert_eq!(flags & END_HEADERS, END_HEADERS);
                let h = dec.decode(payload).unwrap();
                let auth = h.iter().find(|(n, _)| n == b":authority").unwrap();
                assert_eq!(auth.1, b"localhost");
                assert!(
                    h.iter()
                        .any(|(n, v)| n == b":path" && v == b"/gang.v1.JobService/ListJobs")
                );
            }
        }
        assert_eq!(f[2].3, b"\0\0\0\0\0", "data untouched");
    }

    #[tokio::test]
    async fn a_good_authority_passes_every_byte_untouched() {
        let mut enc = fluke_hpack::Encoder::new();
        let mut input = PREFACE.to_vec();
        push_frame(&mut input, 0x4, 0, 0, &[]);
        input.extend(headers_frame(&mut enc, 1, b"localhost"));
        input.extend(headers_frame(&mut enc, 3, b"%2Fother"));
        push_frame(&mut input, 0x0, END_STREAM, 3, b"xyz");
        assert_eq!(through(input.clone()).await, input);
        // Not HTTP/2 at all: as it came, for h2 to refuse.
        assert_eq!(
            through(b"GET / HTTP/1.1\r\n\r\n".to_vec()).await,
            b"GET / HTTP/1.1\r\n\r\n"
        );
    }

    #[test]
    fn authorities() {
        assert!(authority_ok(b"localhost") && authority_ok(b"master.gang:7470"));
        assert!(!authority_ok(b"/run/gang/master.sock"));
        assert!(!authority_ok(b"%2Frun%2Fgang%2Fmaster.sock"));
        assert!(!authority_ok(b""));
    }
}
