//! What the progress thread does around a switch-out boundary `b` read from
//! the table page (master clock):
//!
//! ```text
//!  Running ──(now >= b - lead)──> Flushing ──(posted-before-quiesce all acked)──┐
//!     ^                              (resident) ───────────────────────────────>├─> Quiesced ──(now >= b)──> Running
//!     │                              (save-restore) Closing ──(all closed, ctx copied out)──┘                 (restore)
//!     └───────────────(now >= b + grace, or the boundary moved, in any phase: resume)────────────────────────
//! ```
//! Injection stops at the quiesce start: messages posted later wait in the
//! local queue; the flush completes the ones posted before (the "horizon").
//! Acks keep flowing in every phase, so a quiesced rank never holds up its
//! peers' flushes. Nothing here waits: if the boundary arrives first, the
//! rank resumes and counts the switch as unflushed. The agent stops the job at
//! `b` regardless, so in stop mode "resume" runs after SIGCONT; the grace
//! (`GANG_MSG_GRACE_US`) keeps a rank from resuming in the instant between
//! the boundary and a SIGSTOP that comes a little late.

use std::sync::atomic::Ordering::*;
use std::time::Instant;

use crate::config::ContextMode;
use crate::progress::Progress;
use crate::shared::{OutMsg, monotonic_ns};
use crate::switch_state::{Phase, SavedContext};
use std::collections::VecDeque;

impl Progress {
    /// Look at the table page: start a quiesce, or resume after the boundary.
    pub fn tick_switch(&mut self) {
        let tab = self.sh.table.read();
        let now = self.sh.master_now_ns();
        let b = tab.switch_out_at_ns;
        let st = self.sh.state.layout();
        if self.sw.phase == Phase::Running {
            if b == 0 || b <= self.sw.last_passed {
                return;
            }
            if now >= b {
                // Passed without a quiesce: flush off, or the page came too late.
                self.sw.last_passed = b;
                st.last_boundary_ns.store(b, Relaxed);
                st.switches.fetch_add(1, Relaxed);
                st.unflushed.fetch_add(1, Relaxed);
            } else if self.cfg.flush && now + self.cfg.lead_ns >= b {
                self.start_quiesce(b);
            }
            return;
        }
        if now >= self.sw.boundary + self.cfg.grace_ns {
            let quiesced = self.sw.phase == Phase::Quiesced;
            self.sw.last_passed = self.sw.boundary;
            st.last_boundary_ns.store(self.sw.boundary, Relaxed);
            st.switches.fetch_add(1, Relaxed);
            if !quiesced {
                st.unflushed.fetch_add(1, Relaxed);
            }
            self.resume();
        } else if b != self.sw.boundary {
            // The agent moved or cancelled the boundary: give the quiesce up.
            self.resume();
        }
    }

    fn start_quiesce(&mut self, b: u64) {
        {
            let q = self.sh.sendq.lock().unwrap();
            self.sw.horizon.copy_from_slice(&q.posted);
        }
        // Everything posted so far is in `pending` after this.
        self.take_all_queued();
        let inflight: u64 = self
            .peers
            .iter()
            .map(|p| p.unacked_bytes + p.pending.iter().map(|m| m.data.len() as u64).sum::<u64>())
            .sum();
        self.sh
            .state
            .layout()
            .inflight_bytes_at_quiesce
            .store(inflight, Relaxed);
        self.sw.phase = Phase::Flushing;
        self.sw.boundary = b;
        self.sw.started = Instant::now();
        self.sw.flush_done = None;
    }

    fn take_all_queued(&mut self) {
        let mut q = self.sh.sendq.lock().unwrap();
        for (d, queue) in q.queues.iter_mut().enumerate() {
            self.peers[d].pending.append(queue);
        }
    }

    /// After the turn's I/O: has the flush, or the save, completed?
    pub fn advance_quiesce(&mut self) {
        if self.sw.phase == Phase::Flushing && self.flushed() {
            let now = Instant::now();
            self.sw.flush_ns = (now - self.sw.started).as_nanos() as u64;
            self.sw.flush_done = Some(now);
            match self.cfg.context {
                ContextMode::Resident => self.quiesced(),
                ContextMode::SaveRestore => {
                    for p in &mut self.peers {
                        if let Some(c) = p.conn.as_mut() {
                            c.send_fin();
                        }
                    }
                    self.sw.phase = Phase::Closing;
                }
            }
        }
        if self.sw.phase == Phase::Closing && self.all_closed() {
            let mut pending: Vec<VecDeque<OutMsg>> = self
                .peers
                .iter_mut()
                .map(|p| std::mem::take(&mut p.pending))
                .collect();
            let mut mb = self.sh.mailbox.lock().unwrap();
            self.sw.saved = Some(SavedContext::save(&mut pending, &mut mb.unexpected));
            drop(mb);
            self.quiesced();
        }
        if let Some(t0) = self.sw.restoring
            && self.all_connected()
        {
            self.sh
                .state
                .layout()
                .restore_ns
                .store((Instant::now() - t0).as_nanos() as u64, Relaxed);
            self.sw.restoring = None;
        }
    }

    /// Every message posted before the quiesce is injected and acknowledged,
    /// except those to a peer whose connection already closed for this
    /// boundary (it quiesced first and we answered its Fin): they were not
    /// in flight, and stay queued (saved with the context).
    fn flushed(&self) -> bool {
        let b = self.sw.boundary;
        self.peers.iter().enumerate().all(|(d, p)| {
            let closed = match &p.conn {
                Some(c) => c.fin_sent,
                None => p.closed_for(b),
            };
            p.gone
                || ((closed || p.pending.front().is_none_or(|m| m.seq > self.sw.horizon[d]))
                    && p.acked == p.injected
                    && p.conn.as_ref().is_none_or(|c| c.out.is_empty()))
        })
    }

    fn quiesced(&mut self) {
        // The counters first: the agent may SIGSTOP this rank the instant it sees
        // `quiesced_for_ns`, and must then read counters as of the quiesce, not of the
        // previous turn (acks taken this turn were once left unpublished that way, and a
        // fully acknowledged boundary showed unacknowledged bytes).
        self.publish_counters();
        let st = self.sh.state.layout();
        let save_ns = self
            .sw
            .flush_done
            .map_or(0, |t| (Instant::now() - t).as_nanos() as u64);
        st.flush_ns.store(self.sw.flush_ns, Relaxed);
        st.save_ns.store(save_ns, Relaxed);
        st.timings_for_ns.store(self.sw.boundary, Relaxed);
        st.quiesced_for_ns.store(self.sw.boundary, Release);
        self.sw.phase = Phase::Quiesced;
    }

    /// Back to Running: copy a saved context back in, and let the lower
    /// ranks reconnect (the turn's `connect_peers`); the restore is timed
    /// until every connection is back.
    fn resume(&mut self) {
        let t0 = Instant::now();
        if let Some(saved) = self.sw.saved.take() {
            let (sends, msgs) = saved.restore(self.peers.len());
            for (p, mut q) in self.peers.iter_mut().zip(sends) {
                q.append(&mut p.pending);
                p.pending = q;
            }
            let woken = self.sh.mailbox.lock().unwrap().restore(msgs);
            if !woken.is_empty() {
                self.sh.notify_all();
            }
        }
        self.sw.phase = Phase::Running;
        if self.all_connected() {
            self.sh
                .state
                .layout()
                .restore_ns
                .store((Instant::now() - t0).as_nanos() as u64, Relaxed);
        } else {
            self.sw.restoring = Some(t0);
        }
    }

    /// Nanoseconds until the next switch event this thread must act on.
    pub fn switch_timeout_ns(&self) -> u64 {
        let b = match self.sw.phase {
            Phase::Running => {
                let b = self.sh.table.read().switch_out_at_ns;
                if b == 0 || b <= self.sw.last_passed || !self.cfg.flush {
                    return u64::MAX;
                }
                b.saturating_sub(self.cfg.lead_ns)
            }
            _ => self.sw.boundary + self.cfg.grace_ns,
        };
        b.saturating_sub(self.sh.master_now_ns())
    }
}

/// CLOCK_MONOTONIC ns, for `blocked_since_ns`.
pub fn blocked_stamp() -> u64 {
    monotonic_ns().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mailbox::Msg;
    use crate::shared::SendDone;
    use std::sync::Arc;

    #[test]
    fn saved_context_round_trips_in_order() {
        let done = Arc::new(SendDone::default());
        let mut pending: Vec<VecDeque<OutMsg>> = vec![VecDeque::new(), VecDeque::new()];
        pending[1].push_back(OutMsg {
            tag: 3,
            data: vec![1, 2],
            seq: 1,
            done: Some(done.clone()),
        });
        pending[1].push_back(OutMsg {
            tag: 4,
            data: vec![],
            seq: 2,
            done: None,
        });
        pending[0].push_back(OutMsg {
            tag: 5,
            data: vec![9; 1000],
            seq: 7,
            done: None,
        });
        let mut unexpected: VecDeque<Msg> = [
            Msg {
                src: 1,
                tag: 0,
                data: vec![7],
            },
            Msg {
                src: 0,
                tag: -3,
                data: vec![8, 8],
            },
        ]
        .into();
        let saved = SavedContext::save(&mut pending, &mut unexpected);
        assert!(pending.iter().all(|q| q.is_empty()) && unexpected.is_empty());
        let (sends, msgs) = saved.restore(2);
        assert_eq!(
            sends[0]
                .iter()
                .map(|m| (m.tag, m.seq, m.data.len()))
                .collect::<Vec<_>>(),
            vec![(5, 7, 1000)]
        );
        assert_eq!(
            sends[1]
                .iter()
                .map(|m| (m.tag, m.seq, m.data.clone()))
                .collect::<Vec<_>>(),
            vec![(3, 1, vec![1, 2]), (4, 2, vec![])]
        );
        assert!(Arc::ptr_eq(sends[1][0].done.as_ref().unwrap(), &done));
        assert_eq!(
            msgs,
            vec![
                Msg {
                    src: 1,
                    tag: 0,
                    data: vec![7]
                },
                Msg {
                    src: 0,
                    tag: -3,
                    data: vec![8, 8]
                }
            ]
        );
    }
}
