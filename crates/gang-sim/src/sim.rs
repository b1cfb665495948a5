//! Turning a trace into a workload, replaying it through the core, and the figures.

use std::io::Write;
use std::time::Instant;

use gang_core::{
    Config, Interval, IntervalTracker, JobId, Outcome, Scheduler, Shape, WorkloadJob, replay,
    shape_for_count,
};
use serde::Serialize;

use crate::swf::Swf;

/// Jobs below this run time count as this long in the bounded slowdown (seconds).
pub const BSLD_THRESHOLD_S: f64 = 10.0;

/// The most nearly square mesh with at least `n` nodes, by the same rule that turns a
/// job's processor count into a shape (no mesh bound; long side at most twice the short).
pub fn default_mesh(n: u64) -> Shape {
    let side = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
    shape_for_count(n.max(1), Shape::new(side, side)).expect("an n x n mesh holds n nodes")
}

/// Jobs of the trace that were not replayed, by reason. None is dropped silently.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Skipped {
    /// Malformed lines skipped under `--skip-bad`.
    pub malformed: usize,
    /// More processors than the mesh has nodes (or a shape that fits no orientation).
    pub too_large: usize,
    /// No run time in the trace (field 4 is -1).
    pub no_runtime: usize,
    /// No processor count (fields 5 and 8 are -1 or 0).
    pub no_procs: usize,
    /// Ids of the first few jobs skipped as too large, for the report.
    pub too_large_examples: Vec<u64>,
}

impl Skipped {
    pub fn total(&self) -> usize {
        self.malformed + self.too_large + self.no_runtime + self.no_procs
    }
}

/// What the simulator knows about one job beside the scheduler's view.
#[derive(Debug, Clone)]
pub struct JobMeta {
    /// The job's number in the trace (SWF field 1): what people look the job up by. Not
    /// the scheduler's id, since trace numbers are not always unique.
    pub swf_job: u64,
    pub procs: u64,
    pub runtime: f64,
    pub recorded_wait: Option<f64>,
}

/// A trace ready to replay.
#[derive(Debug, Clone)]
pub struct Workload {
    pub mesh: Shape,
    pub jobs: Vec<WorkloadJob>,
    pub meta: std::collections::HashMap<JobId, JobMeta>,
    pub skipped: Skipped,
    /// Processors of the traced machine (`MaxProcs`), for the recorded utilization.
    pub machine_procs: u64,
}

/// Map each usable job of `swf` to a shape on `mesh` (default: [`default_mesh`] of
/// `MaxProcs`, else of the largest job). `limit`: only the first `limit` job lines.
pub fn workload(swf: &Swf, mesh: Option<Shape>, limit: Option<usize>, cfg: &Config) -> Workload {
    let lines = &swf.jobs[..limit.unwrap_or(usize::MAX).min(swf.jobs.len())];
    let largest = lines.iter().filter_map(|j| j.procs).max().unwrap_or(1);
    let machine_procs = swf
        .header_u64("MaxProcs")
        .filter(|&p| p > 0)
        .unwrap_or(largest);
    let mesh = mesh.unwrap_or_else(|| default_mesh(machine_procs));
    let placer = cfg.placer.get();
    let mut skipped = Skipped {
        malformed: swf.bad_lines.len(),
        ..Skipped::default()
    };
    let mut jobs = Vec::with_capacity(lines.len());
    let mut meta = std::collections::HashMap::with_capacity(lines.len());
    for (i, j) in lines.iter().enumerate() {
        let Some(procs) = j.procs else {
            skipped.no_procs += 1;
            continue;
        };
        let Some(runtime) = j.runtime else {
            skipped.no_runtime += 1;
            continue;
        };
        let shape = match shape_for_count(procs, mesh) {
            Ok(s) if placer.can_ever_fit(mesh, s) => s,
            _ => {
                skipped.too_large += 1;
                if skipped.too_large_examples.len() < 10 {
                    skipped.too_large_examples.push(j.id);
                }
                continue;
            }
        };
        // Trace job numbers are not always unique; the line index is.
        let id = JobId(i as u64);
        jobs.push(WorkloadJob {
            id,
            submit: j.submit,
            shape,
            runtime,
            estimate: j.requested_time,
        });
        meta.insert(
            id,
            JobMeta {
                swf_job: j.id,
                procs,
                runtime,
                recorded_wait: j.wait,
            },
        );
    }
    Workload {
        mesh,
        jobs,
        meta,
        skipped,
        machine_procs,
    }
}

/// The headline figures of a schedule.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Figures {
    pub jobs: usize,
    /// Processor-seconds of work over node-seconds available from the first submission to
    /// the last completion (nodes held but unused by rounding count as idle).
    pub utilization: f64,
    pub mean_wait_s: f64,
    pub mean_response_s: f64,
    /// Mean of max(1, response / max(run time, 10 s)).
    pub mean_bounded_slowdown: f64,
    pub p95_bounded_slowdown: f64,
    pub makespan_s: f64,
}

/// (submit, start, end, run time, procs) per job -> figures on a machine of `nodes`.
fn figures(rows: impl Iterator<Item = (f64, f64, f64, f64, u64)>, nodes: u64) -> Figures {
    let (mut n, mut wait, mut resp, mut work) = (0usize, 0.0, 0.0, 0.0);
    let (mut first, mut last) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut bsld = vec![];
    for (submit, start, end, run, procs) in rows {
        n += 1;
        wait += start - submit;
        resp += end - submit;
        work += run * procs as f64;
        first = first.min(submit);
        last = last.max(end);
        bsld.push(((end - submit) / run.max(BSLD_THRESHOLD_S)).max(1.0));
    }
    if n == 0 {
        return Figures::default();
    }
    bsld.sort_by(f64::total_cmp);
    let p95 = gang_core::quantile::nearest_rank(&bsld, 0.95).unwrap_or_default();
    let makespan = last - first;
    Figures {
        jobs: n,
        utilization: if makespan > 0.0 {
            work / (nodes as f64 * makespan)
        } else {
            0.0
        },
        mean_wait_s: wait / n as f64,
        mean_response_s: resp / n as f64,
        mean_bounded_slowdown: bsld.iter().sum::<f64>() / n as f64,
        p95_bounded_slowdown: p95,
        makespan_s: makespan,
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub mesh: String,
    pub nodes: u64,
    /// The placer (`adaptive-scan`, `first-fit`, `best-fit`).
    pub placer: String,
    /// Old name of `placer`, still emitted for one release (see the README, Renamed).
    pub allocator: String,
    pub mpl: u32,
    pub backfill: String,
    pub multiple_tasks: bool,
    pub slice_choice: String,
    pub switch_overhead: f64,
    #[serde(flatten)]
    pub figures: Figures,
    pub max_slices_used: usize,
    /// Time-weighted mean number of slices while any job ran.
    pub mean_slices: f64,
    /// Nodes held (whole submeshes) times run time, over node-seconds available.
    pub occupancy: f64,
    /// Share of held node-seconds lost to rounding counts up to shapes.
    pub internal_fragmentation: f64,
    pub skipped: Skipped,
    /// The same figures from the trace's own wait times, on the same jobs.
    pub recorded: Figures,
    pub recorded_machine_procs: u64,
    pub sim_seconds: f64,
    /// Per job, in completion order (not part of the JSON report).
    #[serde(skip)]
    pub outcomes: Vec<JobOutcome>,
}

/// One replayed job, for `--outcomes`.
#[derive(Debug, Clone, Serialize)]
pub struct JobOutcome {
    /// Index of the job among the trace's job lines (0-based).
    pub job: u64,
    pub submit: f64,
    pub start: f64,
    pub end: f64,
    pub runtime: f64,
    pub procs: u64,
    pub w: u32,
    pub h: u32,
    pub recorded_wait: Option<f64>,
}

/// One line of `--placements`: the interval, and the job's number in the trace.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PlacementLine {
    #[serde(flatten)]
    pub interval: Interval,
    pub swf_job: u64,
}

/// Replay `w` under `cfg`. `placements`: where to write one JSON line per placement
/// interval ([`PlacementLine`]). `check`: run the full invariant check after every step
/// (slow; for tests).
pub fn run(
    w: &Workload,
    cfg: &Config,
    placements: Option<&mut dyn Write>,
    check: bool,
) -> anyhow::Result<Report> {
    let t0 = Instant::now();
    let mut sched = Scheduler::new(w.mesh, cfg.clone())?;
    let mut slices = SliceUse::default();
    let mut writer = PlacementWriter {
        out: placements,
        tracker: IntervalTracker::default(),
        err: None,
    };
    let mut broken: Option<String> = None;
    let outcomes: Vec<Outcome> = replay(&mut sched, &w.jobs, |s, plan| {
        slices.observe(plan.now, s.matrix().slices().len());
        if check && broken.is_none() {
            broken = s
                .check_invariants()
                .err()
                .map(|e| format!("at t={}: {e}", plan.now));
        }
        writer.apply(plan, w);
    })?;
    if let Some(e) = broken {
        anyhow::bail!("invariant broken {e}");
    }
    writer.finish()?;
    let mut report = report(w, cfg, &outcomes, &slices);
    report.sim_seconds = t0.elapsed().as_secs_f64();
    Ok(report)
}

/// How many slices were in force over the replay.
#[derive(Debug, Default)]
struct SliceUse {
    max: usize,
    /// Slices times seconds, and seconds, while any slice existed.
    slice_time: f64,
    busy_time: f64,
    /// Slices in force since the previous step: (since, count).
    last: Option<(f64, usize)>,
}

impl SliceUse {
    /// `k` slices exist from `now` on.
    fn observe(&mut self, now: f64, k: usize) {
        if let Some((t, k_before)) = self.last
            && k_before > 0
        {
            self.slice_time += k_before as f64 * (now - t);
            self.busy_time += now - t;
        }
        self.last = Some((now, k));
        self.max = self.max.max(k);
    }

    /// Time-weighted mean number of slices while any job ran.
    fn mean(&self) -> f64 {
        if self.busy_time > 0.0 {
            self.slice_time / self.busy_time
        } else {
            0.0
        }
    }
}

/// Writes `--placements` lines as the replay goes, keeping the first error for its end
/// (the replay's callback cannot fail).
struct PlacementWriter<'a> {
    out: Option<&'a mut dyn Write>,
    tracker: IntervalTracker,
    err: Option<std::io::Error>,
}

impl PlacementWriter<'_> {
    fn apply(&mut self, plan: &gang_core::Plan, w: &Workload) {
        let Some(out) = self.out.as_deref_mut() else {
            return;
        };
        let err = &mut self.err;
        self.tracker.apply(plan, |interval| {
            let line = PlacementLine {
                interval,
                swf_job: w.meta[&interval.job].swf_job,
            };
            if err.is_none()
                && let Err(e) = serde_json::to_writer(&mut *out, &line)
                    .map_err(std::io::Error::from)
                    .and_then(|_| out.write_all(b"\n"))
            {
                *err = Some(e);
            }
        });
    }

    fn finish(self) -> anyhow::Result<()> {
        if let Some(e) = self.err {
            return Err(anyhow::Error::new(e).context("writing placements"));
        }
        if let Some(out) = self.out {
            out.flush()?;
        }
        Ok(())
    }
}

/// The report of a finished replay (`sim_seconds` is left for the caller to set).
fn report(w: &Workload, cfg: &Config, outcomes: &[Outcome], slices: &SliceUse) -> Report {
    let nodes = w.mesh.area();
    let figures = figures(
        outcomes.iter().map(|o| {
            let m = &w.meta[&o.job];
            (o.submit, o.start, o.end, m.runtime, m.procs)
        }),
        nodes,
    );
    // Node-seconds the jobs held (whole submeshes) and used (their processor counts).
    let (mut held_work, mut used_work) = (0.0, 0.0);
    for j in &w.jobs {
        held_work += j.shape.area() as f64 * j.runtime;
        used_work += w.meta[&j.id].procs as f64 * j.runtime;
    }
    Report {
        mesh: w.mesh.to_string(),
        nodes,
        placer: cfg.placer.to_string(),
        allocator: cfg.placer.to_string(),
        mpl: cfg.mpl,
        backfill: cfg.backfill.to_string(),
        multiple_tasks: cfg.multiple_tasks,
        slice_choice: cfg.slice_choice.to_string(),
        switch_overhead: cfg.switch_overhead,
        occupancy: if figures.makespan_s > 0.0 {
            held_work / (nodes as f64 * figures.makespan_s)
        } else {
            0.0
        },
        internal_fragmentation: if held_work > 0.0 {
            1.0 - used_work / held_work
        } else {
            0.0
        },
        figures,
        max_slices_used: slices.max,
        mean_slices: slices.mean(),
        skipped: w.skipped.clone(),
        recorded: figures_recorded(w),
        recorded_machine_procs: w.machine_procs,
        sim_seconds: 0.0,
        outcomes: job_outcomes(w, outcomes),
    }
}

/// Per job, in completion order, for `--outcomes`.
fn job_outcomes(w: &Workload, outcomes: &[Outcome]) -> Vec<JobOutcome> {
    let by_id: std::collections::HashMap<JobId, &WorkloadJob> =
        w.jobs.iter().map(|j| (j.id, j)).collect();
    outcomes
        .iter()
        .map(|o| {
            let m = &w.meta[&o.job];
            let shape = by_id[&o.job].shape;
            JobOutcome {
                job: o.job.0,
                submit: o.submit,
                start: o.start,
                end: o.end,
                runtime: m.runtime,
                procs: m.procs,
                w: shape.w,
                h: shape.h,
                recorded_wait: m.recorded_wait,
            }
        })
        .collect()
}

/// What the traced site achieved on the same jobs (those with a recorded wait time).
pub fn figures_recorded(w: &Workload) -> Figures {
    figures(
        w.jobs.iter().filter_map(|j| {
            let m = &w.meta[&j.id];
            let start = j.submit + m.recorded_wait?;
            Some((j.submit, start, start + m.runtime, m.runtime, m.procs))
        }),
        w.machine_procs,
    )
}
