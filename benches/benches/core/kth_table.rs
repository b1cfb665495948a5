//! The KTH SP2 trace on a 10x10 mesh for each placer, MPL 1..5, with and without EASY
//! backfilling, beside the trace's recorded production figures. Prints a Markdown table
//! (stdout) and the rows as JSON lines (stderr).

use gang_benches::trace;
use gang_core::{Backfill, Config, PlacerKind, Shape, SliceChoice};
use gang_sim::{sim, swf};

fn main() {
    let t = swf::read(&trace("KTH-SP2-1996-2.1-cln.swf.gz"), false).unwrap();
    let mesh = Some(Shape::new(10, 10));
    let base = sim::workload(&t, mesh, None, &Config::default());
    let rec = sim::figures_recorded(&base);
    println!(
        "| placer | MPL | backfill | util | mean wait s | mean resp s | mean bsld | p95 bsld | bsld / recorded |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    println!(
        "| recorded (KTH EASY) | 1 | easy | {:.1}% | {:.0} | {:.0} | {:.1} | {:.1} | 1.00 |",
        rec.utilization * 100.0,
        rec.mean_wait_s,
        rec.mean_response_s,
        rec.mean_bounded_slowdown,
        rec.p95_bounded_slowdown
    );
    // The grid, then beyond it: higher MPLs and the densest-slice choice.
    let mut grid = vec![];
    for placer in PlacerKind::ALL {
        for backfill in [Backfill::None, Backfill::Easy] {
            for mpl in 1..=5 {
                grid.push((placer, backfill, mpl, SliceChoice::First));
            }
        }
    }
    for mpl in [5, 6, 8, 10, 16] {
        grid.push((
            PlacerKind::AdaptiveScan,
            Backfill::Easy,
            mpl,
            SliceChoice::Densest,
        ));
    }
    for mpl in [6, 8, 10, 16] {
        grid.push((
            PlacerKind::AdaptiveScan,
            Backfill::Easy,
            mpl,
            SliceChoice::First,
        ));
    }
    {
        for (placer, backfill, mpl, choice) in grid {
            {
                let cfg = Config {
                    mpl,
                    placer,
                    backfill,
                    slice_choice: choice,
                    ..Config::default()
                };
                let w = sim::workload(&t, mesh, None, &cfg);
                let r = sim::run(&w, &cfg, None, false).unwrap();
                let f = &r.figures;
                println!(
                    "| {placer}{} | {mpl} | {backfill} | {:.1}% | {:.0} | {:.0} | {:.1} | {:.1} | {:.3} |",
                    if choice == SliceChoice::Densest {
                        ", densest slice"
                    } else {
                        ""
                    },
                    f.utilization * 100.0,
                    f.mean_wait_s,
                    f.mean_response_s,
                    f.mean_bounded_slowdown,
                    f.p95_bounded_slowdown,
                    f.mean_bounded_slowdown / rec.mean_bounded_slowdown
                );
                eprintln!("{}", serde_json::to_string(&r).unwrap());
            }
        }
    }
}
