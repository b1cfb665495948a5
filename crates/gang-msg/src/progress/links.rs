//! Opening connections to peers, accepting theirs, and losing one.

use super::*;

impl Progress {
    /// Whether connections may be opened (connect, accept): not from the
    /// save's close until the resume, so a peer that reconnects early waits
    /// in our backlog instead of undoing the save.
    pub(super) fn may_connect(&self) -> bool {
        matches!(self.sw.phase, Phase::Running | Phase::Flushing)
    }

    /// Lower ranks (re)connect to higher ones.
    pub(super) fn connect_peers(&mut self) {
        if !self.may_connect() {
            return;
        }
        let now = Instant::now();
        // A connection closed for boundary b is reopened once b (plus the grace every
        // rank resumes after) is past on the master clock. Not "once this rank counted b
        // as passed": a boundary the agent moves or cancels (the matrix changed, a job
        // ended) is never counted, and a connection closed for it stayed closed for good,
        // its peer's messages queued forever (the save-restore halo that hung).
        let reopen_from = self.sh.master_now_ns().saturating_sub(self.cfg.grace_ns);
        for d in self.sh.rank + 1..self.sh.size {
            let p = &mut self.peers[d];
            if p.conn.is_some() || p.gone || now < p.next_connect || reopen_from < p.reconnect_after
            {
                continue;
            }
            match transport::connect(&p.ep, p.tcp) {
                Ok(fd) => {
                    let mut c = Conn::new(fd);
                    let hello = transport::hello_payload(&self.cfg.job_id, &p.ep.token);
                    c.out.push(
                        Header {
                            kind: Kind::Hello,
                            tag: 0,
                            aux: self.sh.rank as u64,
                            len: hello.len() as u32,
                        },
                        hello,
                    );
                    p.conn = Some(c);
                    p.connect_fails = 0;
                }
                Err(e) => {
                    p.connect_fails += 1;
                    p.next_connect = now + CONNECT_RETRY;
                    if p.connect_fails >= CONNECT_GIVE_UP {
                        if p.outstanding() > 0 {
                            p.gone = true;
                            self.sh
                                .set_fatal(format!("cannot connect to rank {d} for 30 s: {e}"));
                        } else {
                            // Owing it nothing: it may simply have finished (finalized and
                            // exited) while this rank runs on. Failing a correct program for
                            // that would be wrong; keep trying, slowly, in case it is back.
                            p.next_connect = now + CONNECT_RETRY_IDLE;
                        }
                    }
                }
            }
        }
    }

    pub(super) fn accept(&mut self) {
        if !self.may_connect() {
            return;
        }
        loop {
            match transport::accept(&self.lst) {
                Ok(Some(fd)) => self.accepting.push(Conn::new(fd)),
                Ok(None) => break,
                Err(e) => {
                    eprintln!("gang-msg rank {}: accept: {e}", self.sh.rank);
                    break;
                }
            }
        }
        let mut i = 0;
        while i < self.accepting.len() {
            let mut frames = Vec::new();
            let c = &mut self.accepting[i];
            let r = c.rd.read_some(&c.fd, &mut frames, READ_BUDGET);
            self.sh
                .state
                .layout()
                .bytes_read
                .fetch_add(r.as_ref().map_or(0, |r| r.bytes) as u64, Relaxed);
            if frames.is_empty() {
                match r {
                    Ok(o) if !o.eof => i += 1,
                    _ => {
                        self.accepting.swap_remove(i);
                    }
                }
                continue;
            }
            let c = self.accepting.swap_remove(i);
            let h = &frames[0];
            let from = h.hdr.aux as usize;
            let ok = h.hdr.kind == Kind::Hello
                && from < self.sh.rank
                && transport::check_hello(&h.payload, &self.cfg.job_id, &self.lst.endpoint.token);
            if !ok {
                eprintln!(
                    "gang-msg rank {}: refused a connection with a bad hello",
                    self.sh.rank
                );
                continue;
            }
            let p = &mut self.peers[from];
            if let Some(old) = p.conn.replace(c) {
                self.draining.push((from, old));
            }
            p.gone = false;
            // Frames that came in behind the Hello in the same read.
            let rest: Vec<Frame> = frames.into_iter().skip(1).collect();
            self.handle_frames(from, false, rest);
        }
    }

    /// The connection to `d` ended: after both Fins it is a planned close
    /// (reconnected later); otherwise the peer is gone.
    pub(super) fn lost_conn(&mut self, d: usize, err: Option<String>) {
        let boundary = self.sh.table.read().switch_out_at_ns;
        let p = &mut self.peers[d];
        let planned = p.conn.as_ref().is_some_and(|c| c.fin_recv);
        p.conn = None;
        if planned {
            p.reconnect_after = boundary;
            return;
        }
        p.gone = true;
        // A peer that finalized and exited closes its end: a write to it then fails
        // (EPIPE: a save-restore Fin sent at the next boundary) just as a read sees EOF.
        // Neither is an error when nothing to it is undelivered.
        let outstanding = p.outstanding();
        if outstanding > 0 {
            self.sh.set_fatal(format!(
                "rank {d} closed its connection with {outstanding} message(s) to it undelivered{}",
                err.map(|e| format!(": {e}")).unwrap_or_default()
            ));
        }
    }
}
