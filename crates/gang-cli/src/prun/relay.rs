//! `prun`'s output relay, free of I/O so it can be tested:
//! - [`Dedup`]: the master replays a job's output from the start on every attach; after a
//!   reconnection, bytes already written are skipped (counted per rank and stream).
//! - [`Labeler`]: `--label` prefixes every line with `RANK: `, buffering partial lines per
//!   rank and stream.

use std::collections::{BTreeMap, HashMap};

use gang_proto::v1::Stream;

/// Where a chunk goes on our side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dest {
    Stdout,
    Stderr,
}

impl Dest {
    /// The proto stream as an `i32` (as in `Output.stream`); anything but stderr is stdout.
    pub fn from_proto(stream: i32) -> Dest {
        if stream == Stream::Stderr as i32 {
            Dest::Stderr
        } else {
            Dest::Stdout
        }
    }
}

type Key = (u32, Dest);

/// Skips output already written in an earlier attach session.
#[derive(Debug, Default)]
pub struct Dedup {
    /// Bytes written so far, over all sessions.
    written: HashMap<Key, u64>,
    /// Bytes received in the current session.
    session: HashMap<Key, u64>,
}

impl Dedup {
    pub fn new() -> Self {
        Self::default()
    }

    /// A new attach session starts: the master replays from the beginning.
    pub fn new_session(&mut self) {
        self.session.clear();
    }

    /// The part of `data` (received now for `rank`/`dest`) not written before.
    pub fn accept<'a>(&mut self, rank: u32, dest: Dest, data: &'a [u8]) -> &'a [u8] {
        let key = (rank, dest);
        let start = self.session.entry(key).or_insert(0);
        let begin = *start;
        let end = begin + data.len() as u64;
        *start = end;
        let written = self.written.entry(key).or_insert(0);
        if end <= *written {
            return &[];
        }
        let skip = written.saturating_sub(begin) as usize;
        *written = end;
        &data[skip..]
    }
}

/// Prefixes lines with `RANK: `, holding partial lines until their newline arrives.
#[derive(Debug, Default)]
pub struct Labeler {
    partial: BTreeMap<Key, Vec<u8>>,
}

impl Labeler {
    pub fn new() -> Self {
        Self::default()
    }

    /// The complete lines `data` finishes, labeled; the unterminated rest is kept.
    pub fn push(&mut self, rank: u32, dest: Dest, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let buf = self.partial.entry((rank, dest)).or_default();
        let mut rest = data;
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            out.extend_from_slice(format!("{rank}: ").as_bytes());
            out.append(buf);
            out.extend_from_slice(&rest[..=i]);
            rest = &rest[i + 1..];
        }
        buf.extend_from_slice(rest);
        if buf.is_empty() {
            self.partial.remove(&(rank, dest));
        }
        out
    }

    /// Every unterminated line, labeled and ended with a newline, in (rank, stream) order.
    pub fn finish(&mut self) -> Vec<(Dest, Vec<u8>)> {
        std::mem::take(&mut self.partial)
            .into_iter()
            .filter(|(_, buf)| !buf.is_empty())
            .map(|((rank, dest), buf)| {
                let mut line = format!("{rank}: ").into_bytes();
                line.extend_from_slice(&buf);
                line.push(b'\n');
                (dest, line)
            })
            .collect()
    }
}

/// De-duplication then (optionally) labeling: what `prun` writes for each chunk.
#[derive(Debug)]
pub struct Relay {
    dedup: Dedup,
    labeler: Option<Labeler>,
}

impl Relay {
    pub fn new(label: bool) -> Self {
        Relay {
            dedup: Dedup::new(),
            labeler: label.then(Labeler::new),
        }
    }

    pub fn new_session(&mut self) {
        self.dedup.new_session();
    }

    /// The bytes to write for one `Output` chunk (may be empty): borrowed from `data`
    /// unless labelled (a relay moves every byte of a job's output: no copy it can avoid).
    pub fn output<'a>(
        &mut self,
        rank: u32,
        stream: i32,
        data: &'a [u8],
    ) -> (Dest, std::borrow::Cow<'a, [u8]>) {
        let dest = Dest::from_proto(stream);
        let fresh = self.dedup.accept(rank, dest, data);
        let bytes = match &mut self.labeler {
            Some(l) => std::borrow::Cow::Owned(l.push(rank, dest, fresh)),
            None => std::borrow::Cow::Borrowed(fresh),
        };
        (dest, bytes)
    }

    /// What is still held back at the end (unterminated labeled lines).
    pub fn finish(&mut self) -> Vec<(Dest, Vec<u8>)> {
        match &mut self.labeler {
            Some(l) => l.finish(),
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: i32 = Stream::Stdout as i32;
    const ERR: i32 = Stream::Stderr as i32;

    fn s(b: &[u8]) -> &str {
        std::str::from_utf8(b).unwrap()
    }

    #[test]
    fn labels_whole_lines() {
        let mut l = Labeler::new();
        assert_eq!(
            s(&l.push(3, Dest::Stdout, b"hello\nworld\n")),
            "3: hello\n3: world\n"
        );
        assert!(l.finish().is_empty());
    }

    #[test]
    fn labels_partial_lines_across_chunks() {
        let mut l = Labeler::new();
        assert_eq!(s(&l.push(0, Dest::Stdout, b"hel")), "");
        assert_eq!(s(&l.push(0, Dest::Stdout, b"lo")), "");
        assert_eq!(
            s(&l.push(0, Dest::Stdout, b" there\nsecond")),
            "0: hello there\n"
        );
        assert_eq!(
            s(&l.push(0, Dest::Stdout, b" line\n\n")),
            "0: second line\n0: \n"
        );
        assert!(l.finish().is_empty());
    }

    #[test]
    fn labels_interleaved_ranks_and_streams() {
        let mut l = Labeler::new();
        assert_eq!(s(&l.push(0, Dest::Stdout, b"a0")), "");
        assert_eq!(s(&l.push(1, Dest::Stdout, b"b1")), "");
        assert_eq!(s(&l.push(0, Dest::Stderr, b"e0\n")), "0: e0\n");
        assert_eq!(s(&l.push(1, Dest::Stdout, b"-end\nb2")), "1: b1-end\n");
        assert_eq!(s(&l.push(0, Dest::Stdout, b"-end\n")), "0: a0-end\n");
        assert_eq!(s(&l.push(12, Dest::Stderr, b"tail")), "");
        let rest = l.finish();
        assert_eq!(
            rest,
            vec![
                (Dest::Stdout, b"1: b2\n".to_vec()),
                (Dest::Stderr, b"12: tail\n".to_vec())
            ]
        );
        assert!(l.finish().is_empty(), "finish empties the buffers");
    }

    #[test]
    fn dedup_skips_what_a_replay_repeats() {
        let mut d = Dedup::new();
        assert_eq!(d.accept(0, Dest::Stdout, b"hel"), b"hel");
        assert_eq!(d.accept(1, Dest::Stdout, b"x"), b"x");
        // The stream breaks; the master replays everything from the start.
        d.new_session();
        assert_eq!(d.accept(0, Dest::Stdout, b"he"), b"");
        assert_eq!(d.accept(0, Dest::Stdout, b"llo\n"), b"lo\n");
        assert_eq!(d.accept(0, Dest::Stderr, b"err"), b"err");
        assert_eq!(d.accept(1, Dest::Stdout, b"xyz"), b"yz");
        assert_eq!(d.accept(0, Dest::Stdout, b"more"), b"more");
        d.new_session();
        assert_eq!(d.accept(0, Dest::Stdout, b"hello\nmore!"), b"!");
    }

    fn owned((dest, bytes): (Dest, std::borrow::Cow<'_, [u8]>)) -> (Dest, Vec<u8>) {
        (dest, bytes.into_owned())
    }

    #[test]
    fn relay_labels_after_dedup() {
        let mut r = Relay::new(true);
        assert_eq!(owned(r.output(2, OUT, b"par")), (Dest::Stdout, vec![]));
        r.new_session();
        assert_eq!(
            owned(r.output(2, OUT, b"partial\n")),
            (Dest::Stdout, b"2: partial\n".to_vec())
        );
        assert_eq!(owned(r.output(2, ERR, b"oops")), (Dest::Stderr, vec![]));
        assert_eq!(r.finish(), vec![(Dest::Stderr, b"2: oops\n".to_vec())]);

        let mut raw = Relay::new(false);
        assert_eq!(
            owned(raw.output(0, 0, b"no newline")),
            (Dest::Stdout, b"no newline".to_vec())
        );
        assert!(raw.finish().is_empty());
    }
}
