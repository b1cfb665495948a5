//! `gang-sim`: replay an SWF workload trace through the gang scheduler's core.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use gang_core::{Backfill, Config, PlacerKind, Request, Shape, SliceChoice};
use gang_sim::{report, sim, swf};

/// Replay a Standard Workload Format trace (`.swf` or `.swf.gz`) on a 2D mesh in virtual
/// time, through the same placer, slice matrix and queue as the master.
///
/// Prints one JSON object with the figures on stdout and a summary table on stderr.
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Args {
    /// The trace file.
    trace: PathBuf,
    /// Mesh size WxH. Default: the most nearly square mesh with at least MaxProcs nodes.
    #[arg(long, value_parser = parse_mesh)]
    mesh: Option<Shape>,
    /// The placer. `--allocator`, its old name, is still accepted for one release.
    #[arg(long, alias = "allocator", default_value = "adaptive-scan", value_parser = ["adaptive-scan", "first-fit", "best-fit"])]
    placer: String,
    /// Maximum multiprogramming level: slices in the matrix at once (1 = space sharing only).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    mpl: u32,
    #[arg(long, default_value = "easy", value_parser = ["none", "easy"])]
    backfill: String,
    /// Fraction of each time slot lost to switching when more than one slice exists.
    #[arg(long, default_value_t = 0.0)]
    switch_overhead: f64,
    /// Which slice a job goes into when it fits in several: the first in round-robin order,
    /// or the one with the most busy nodes.
    #[arg(long, default_value = "first", value_parser = ["first", "densest"])]
    slice_choice: String,
    /// Do not let jobs run in other slices where their nodes are free (multiple tasks).
    #[arg(long)]
    no_multiple_tasks: bool,
    /// Replay only the first N jobs of the trace.
    #[arg(long)]
    jobs: Option<usize>,
    /// Write one JSON line per placement interval here: {"job","slice","x","y","w","h","start","end","swf_job"}
    /// ("job": index among the trace's job lines; "swf_job": the trace's own job number).
    #[arg(long)]
    placements: Option<PathBuf>,
    /// Write one JSON line per job here: {"job","line","submit","start","end","runtime","procs","w","h","recorded_wait"}.
    #[arg(long)]
    outcomes: Option<PathBuf>,
    /// Count and skip malformed lines instead of stopping at the first.
    #[arg(long)]
    skip_bad: bool,
    /// Check every scheduler invariant after every step (slow).
    #[arg(long)]
    check: bool,
    /// No summary table on stderr.
    #[arg(long, short)]
    quiet: bool,
}

fn parse_mesh(s: &str) -> Result<Shape, String> {
    match s.parse::<Request>().map_err(|e| e.to_string())? {
        Request::Shape(m) => Ok(m),
        Request::Nodes(_) => Err(format!("expected a mesh as WxH (e.g. 10x10), got {s:?}")),
    }
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if !(0.0..1.0).contains(&a.switch_overhead) {
        anyhow::bail!(
            "--switch-overhead must be in [0, 1), got {}",
            a.switch_overhead
        );
    }
    let cfg = Config {
        mpl: a.mpl,
        placer: a.placer.parse::<PlacerKind>().map_err(anyhow::Error::msg)?,
        backfill: a.backfill.parse::<Backfill>().map_err(anyhow::Error::msg)?,
        multiple_tasks: !a.no_multiple_tasks,
        slice_choice: a
            .slice_choice
            .parse::<SliceChoice>()
            .map_err(anyhow::Error::msg)?,
        switch_overhead: a.switch_overhead,
        ..Config::default()
    };
    let trace = swf::read(&a.trace, a.skip_bad)?;
    let w = sim::workload(&trace, a.mesh, a.jobs, &cfg);
    if w.jobs.is_empty() {
        anyhow::bail!(
            "{} has no job that can run on a {} mesh",
            a.trace.display(),
            w.mesh
        );
    }
    let mut out = match &a.placements {
        Some(p) => Some(BufWriter::new(
            File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => None,
    };
    let r = sim::run(&w, &cfg, out.as_mut().map(|o| o as &mut dyn Write), a.check)?;
    if let Some(p) = &a.outcomes {
        let mut f = BufWriter::new(
            File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        );
        for o in &r.outcomes {
            serde_json::to_writer(&mut f, o)?;
            f.write_all(b"\n")?;
        }
        f.flush()?;
    }
    if !a.quiet {
        eprint!("{}", report::summary(&r));
    }
    serde_json::to_writer_pretty(std::io::stdout().lock(), &r)?;
    println!();
    Ok(())
}
