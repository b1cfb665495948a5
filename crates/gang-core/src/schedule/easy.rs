//! EASY backfilling: the head's reservation, and the jobs behind it that may start now
//! without delaying it.

use super::scheduler::{Reservation, Scheduler};
use crate::mesh::{Shape, Submesh};
use crate::plan::{Decision, SliceId};
use crate::time::matrix::SliceChoice;

impl Scheduler {
    /// EASY: start jobs behind the blocked head where that cannot delay its reservation.
    pub(super) fn backfill(&mut self, head: usize, out: &mut Vec<Decision>) {
        let placer = self.placer();
        let rotates = placer.rotates();
        let mut reservation: Option<Option<Reservation>> = None;
        // Within a pass nodes are only taken, never freed, so a shape that found no spot
        // finds none later either, nor does any shape at least as large. `failed_any`:
        // no spot at all; `failed_clear`: no spot clear of the reserved submesh.
        let (mut failed_any, mut failed_clear): (Vec<Shape>, Vec<Shape>) = (vec![], vec![]);
        let dominated = |s: Shape, fails: &[Shape]| {
            fails
                .iter()
                .any(|f| (s.w >= f.w && s.h >= f.h) || (rotates && s.w >= f.h && s.h >= f.w))
        };
        let mut i = head + 1;
        let mut examined = 0;
        while i < self.queue.len() && examined < self.cfg.backfill_depth {
            examined += 1;
            let shape = self.queue[i].shape;
            if dominated(shape, &failed_any) {
                i += 1;
                continue;
            }
            let res = match reservation {
                Some(Some(r)) => r,
                // No guarantee can be given to the head: backfilling could starve it.
                Some(None) => break,
                None => {
                    // The forecast costs more than a search: make it only once some job fits.
                    if self
                        .matrix
                        .find(placer, shape, SliceChoice::First)
                        .is_none()
                    {
                        failed_any.push(shape);
                        i += 1;
                        continue;
                    }
                    match *reservation.insert(self.reservation(head)) {
                        Some(r) => r,
                        None => break,
                    }
                }
            };
            let ends_in_time = self.queue[i]
                .estimate
                .is_some_and(|e| self.now + e / self.min_rate() <= res.at);
            if !ends_in_time && dominated(shape, &failed_clear) {
                i += 1;
                continue;
            }
            let spot = if ends_in_time {
                self.matrix.find(placer, shape, SliceChoice::First)
            } else {
                self.matrix.slices().iter().find_map(|s| {
                    if s.id != res.slice {
                        placer
                            .find(&self.matrix.placeable(s), shape)
                            .map(|sm| (s.id, sm))
                    } else {
                        let mut masked = self.matrix.placeable(s).into_owned();
                        masked.cover(res.submesh);
                        placer.find(&masked, shape).map(|sm| (s.id, sm))
                    }
                })
            };
            match spot {
                Some((slice, sm)) => {
                    let spec = self.queue.remove(i).expect("index in range");
                    self.start(&spec, slice, sm, out);
                }
                None => {
                    if ends_in_time {
                        failed_any.push(shape)
                    } else {
                        failed_clear.push(shape)
                    }
                    i += 1;
                }
            }
        }
        if let Some(Some(r)) = reservation
            && self
                .last_reservation
                .is_none_or(|(j, at)| j != r.job || at != r.at)
        {
            self.last_reservation = Some((r.job, r.at));
            out.push(Decision::Reserve {
                job: r.job,
                at: r.at,
                slice: r.slice,
                submesh: r.submesh,
            });
        }
    }

    /// When, where the head of the queue is guaranteed to fit if every running job ends by
    /// its requested time at the slowest rate it can have. `None` if that depends on a job
    /// without a requested time.
    fn reservation(&self, head: usize) -> Option<Reservation> {
        let head = self.queue.get(head)?;
        let placer = self.placer();
        let rate = self.min_rate();
        let mut ends: Vec<(f64, SliceId, Submesh)> = vec![];
        for (job, p) in self.matrix.placements() {
            let pr = &self.progress[&job];
            let Some(est) = pr.estimate else { continue };
            ends.push((
                self.now + (est - pr.work).max(0.0) / rate,
                p.home,
                p.submesh,
            ));
        }
        ends.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut occs: Vec<_> = self
            .matrix
            .slices()
            .iter()
            .map(|s| (s.id, self.matrix.placeable(s).into_owned()))
            .collect();
        for (at, slice, sm) in ends {
            let occ = &mut occs
                .iter_mut()
                .find(|(id, _)| *id == slice)
                .expect("home slice exists")
                .1;
            occ.release(sm);
            if let Some(submesh) = placer.find(occ, head.shape) {
                return Some(Reservation {
                    job: head.id,
                    at,
                    slice,
                    submesh,
                });
            }
        }
        None
    }
}
