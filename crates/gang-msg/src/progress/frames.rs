//! Moving frames: injecting queued messages, reading and handling what arrives,
//! acknowledging it, writing what is queued, and closing connections whose Fin exchange
//! is done.

use super::*;

impl Progress {
    /// Move queued messages onto connections, as far as the switch phase allows.
    pub(super) fn inject(&mut self) {
        let me = self.sh.rank;
        let mut completed = false;
        for d in 0..self.peers.len() {
            let limit = self.sw.inject_limit(d);
            if d == me {
                // To self: straight into the mailbox, done at once.
                let p = &mut self.peers[d];
                let mut mb = None;
                while p.pending.front().is_some_and(|m| m.seq <= limit) {
                    let m = p.pending.pop_front().unwrap();
                    let mb = mb.get_or_insert_with(|| self.sh.mailbox.lock().unwrap());
                    mb.deliver(
                        Msg {
                            src: me,
                            tag: m.tag,
                            data: m.data,
                        },
                        &self.sh.state,
                    );
                    if let Some(done) = m.done {
                        done.done.store(true, Release);
                    }
                    p.injected += 1;
                    p.acked += 1;
                    completed = true;
                }
                continue;
            }
            let p = &mut self.peers[d];
            let Some(c) = p.conn.as_mut() else { continue };
            let limit = limit.min(c.fin_after.unwrap_or(u64::MAX));
            while !c.fin_sent
                && c.out.bytes() < OUT_HIGH
                && p.pending.front().is_some_and(|m| m.seq <= limit)
            {
                let m = p.pending.pop_front().unwrap();
                let len = m.data.len() as u64;
                c.out.push(
                    Header {
                        kind: Kind::Data,
                        tag: m.tag,
                        aux: 0,
                        len: len as u32,
                    },
                    m.data,
                );
                p.injected += 1;
                p.unacked.push_back((len, m.done));
                p.unacked_bytes += len;
            }
            if c.fin_after.is_some() && p.pending.front().is_none_or(|m| m.seq > limit) {
                c.send_fin();
            }
        }
        if completed {
            self.sh.notify_all();
        }
    }

    pub(super) fn read_all(&mut self) {
        for d in 0..self.peers.len() {
            let Some(c) = self.peers[d].conn.as_mut() else {
                continue;
            };
            let mut frames = std::mem::take(&mut self.frames);
            let r = c.rd.read_some(&c.fd, &mut frames, READ_BUDGET);
            let bytes = r.as_ref().map_or(0, |r| r.bytes);
            self.sh
                .state
                .layout()
                .bytes_read
                .fetch_add(bytes as u64, Relaxed);
            self.handle_frames(d, false, frames.drain(..));
            self.frames = frames;
            match r {
                Ok(o) if !o.eof => {}
                Ok(_) => self.lost_conn(d, None),
                Err(e) => self.lost_conn(d, Some(e.to_string())),
            }
        }
        let mut i = 0;
        while i < self.draining.len() {
            let (d, c) = &mut self.draining[i];
            let d = *d;
            let mut frames = Vec::new();
            let r = c.rd.read_some(&c.fd, &mut frames, READ_BUDGET);
            self.sh
                .state
                .layout()
                .bytes_read
                .fetch_add(r.as_ref().map_or(0, |r| r.bytes) as u64, Relaxed);
            self.handle_frames(d, true, frames);
            match r {
                Ok(o) if !o.eof => i += 1,
                _ => {
                    self.draining.swap_remove(i);
                }
            }
        }
    }

    pub(super) fn handle_frames(
        &mut self,
        d: usize,
        draining: bool,
        frames: impl IntoIterator<Item = Frame>,
    ) {
        let mut woken = false;
        let mut mb = None;
        for f in frames {
            match f.hdr.kind {
                Kind::Data if !draining => {
                    let mb = mb.get_or_insert_with(|| self.sh.mailbox.lock().unwrap());
                    woken |= mb
                        .deliver(
                            Msg {
                                src: d,
                                tag: f.hdr.tag,
                                data: f.payload,
                            },
                            &self.sh.state,
                        )
                        .is_some();
                    self.peers[d].received += 1;
                }
                Kind::Ack => {
                    let p = &mut self.peers[d];
                    while p.acked < f.hdr.aux {
                        let (len, done) = p
                            .unacked
                            .pop_front()
                            .expect("peer acknowledged more than was sent");
                        p.unacked_bytes -= len;
                        p.acked += 1;
                        if let Some(done) = done {
                            done.done.store(true, Release);
                            woken = true;
                        }
                    }
                }
                Kind::Fin if !draining => {
                    // The peer is saving its context and waits for our Fin to
                    // close. Answer once what we owe it is on the connection:
                    // in a flush, the messages posted before it began; else
                    // whatever is queued now. Later messages wait for the next
                    // connection.
                    let owed = match self.sw.phase {
                        Phase::Flushing => self.sw.inject_limit(d),
                        _ => self.peers[d].pending.back().map_or(0, |m| m.seq),
                    };
                    if let Some(c) = self.peers[d].conn.as_mut() {
                        c.fin_recv = true;
                        if !c.fin_sent {
                            c.fin_after = Some(owed);
                        }
                    }
                }
                Kind::Fin => {}
                kind => {
                    self.sh
                        .set_fatal(format!("rank {d} sent an unexpected {kind:?} frame"));
                }
            }
        }
        drop(mb);
        if woken {
            self.sh.notify_all();
        }
    }

    pub(super) fn queue_acks(&mut self) {
        for p in &mut self.peers {
            if p.received > p.ack_sent
                && let Some(c) = p.conn.as_mut()
            {
                c.out.push(
                    Header {
                        kind: Kind::Ack,
                        tag: 0,
                        aux: p.received,
                        len: 0,
                    },
                    Vec::new(),
                );
                p.ack_sent = p.received;
            }
        }
    }

    pub(super) fn flush_writes(&mut self) {
        let mut written = 0;
        let mut failed = Vec::new();
        for (d, p) in self.peers.iter_mut().enumerate() {
            if let Some(c) = p.conn.as_mut().filter(|c| !c.out.is_empty()) {
                match c.out.write_some(&c.fd) {
                    Ok(n) => written += n,
                    Err(e) => failed.push((d, e.to_string())),
                }
            }
        }
        self.sh
            .state
            .layout()
            .bytes_written
            .fetch_add(written as u64, Relaxed);
        for (d, e) in failed {
            self.lost_conn(d, Some(e));
        }
    }

    /// Close connections on which both sides sent Fin, once our data on it
    /// is acknowledged and our last frames are written.
    pub(super) fn close_finished(&mut self) {
        let boundary = self.sh.table.read().switch_out_at_ns;
        for p in &mut self.peers {
            let done = p.conn.as_ref().is_some_and(|c| {
                c.fin_sent && c.fin_recv && c.out.is_empty() && p.acked == p.injected
            });
            if done {
                p.conn = None;
                p.reconnect_after = boundary;
            }
        }
    }
}
