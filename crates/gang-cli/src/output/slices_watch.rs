//! `gangctl slices --watch`: the slice matrix redrawn until Ctrl-C, the running slice
//! moved on at each slot boundary between fetches.

use std::io::Write;
use std::time::Duration;

use gang_proto::client::MasterChannel;
use gang_proto::v1::admin_service_client::AdminServiceClient;
use gang_proto::v1::{GetMatrixRequest, Matrix};
use tokio::time::Instant;

use crate::error::CliError;
use crate::output::OutputMode;
use crate::output::matrix_view;
use crate::output::views::MatrixView;

/// The running slice is recomputed at most this often between fetches.
const MIN_REDRAW: Duration = Duration::from_millis(100);

/// A matrix and the local instant matching its `now_ns` on the master clock.
struct Fetched {
    matrix: Matrix,
    at: Instant,
}

impl Fetched {
    /// The master's clock at local instant `t` (extrapolated from the answer).
    fn master_ns(&self, t: Instant) -> i64 {
        let d = if t >= self.at {
            (t - self.at).as_nanos() as i64
        } else {
            -((self.at - t).as_nanos() as i64)
        };
        self.matrix.now_ns + d
    }

    /// The local instant of master time `ns`.
    fn local(&self, ns: i64) -> Instant {
        let d = ns - self.matrix.now_ns;
        if d >= 0 {
            self.at + Duration::from_nanos(d as u64)
        } else {
            self.at
                .checked_sub(Duration::from_nanos(d.unsigned_abs()))
                .unwrap_or(self.at)
        }
    }
}

/// `gangctl slices --watch`.
pub async fn watch_slices(
    client: &mut AdminServiceClient<MasterChannel>,
    mode: OutputMode,
    master: &str,
    interval_ms: u64,
) -> Result<i32, CliError> {
    let interval = Duration::from_millis(interval_ms);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut next_fetch = Instant::now();
    let mut fetched: Option<Fetched> = None;
    // When the text was last computed (drawn or found unchanged).
    let mut last_check = Instant::now();
    let mut last_text = String::new();
    loop {
        // Wake for the next fetch, or (text) for the next slot boundary, if sooner.
        let mut wake = next_fetch;
        if mode == OutputMode::Cli
            && let Some(f) = &fetched
            && let Some(b) =
                matrix_view::next_boundary_after(&f.matrix, f.master_ns(Instant::now()))
        {
            // A little past the boundary, so that the row computed there is the new one.
            let at = (f.local(b) + Duration::from_millis(1)).max(last_check + MIN_REDRAW);
            wake = wake.min(at);
        }
        tokio::select! {
            _ = &mut ctrl_c => return Ok(0),
            _ = tokio::time::sleep_until(wake) => {}
        }
        let now = Instant::now();
        let mut new_fetch = false;
        if now >= next_fetch {
            let sent = Instant::now();
            let matrix = client.get_matrix(GetMatrixRequest {}).await?.into_inner();
            let received = Instant::now();
            // The master read its clock about halfway through the round trip.
            fetched = Some(Fetched {
                matrix,
                at: sent + (received - sent) / 2,
            });
            next_fetch = (next_fetch + interval).max(received);
            new_fetch = true;
        }
        let Some(f) = &fetched else { continue };
        let text = match mode {
            OutputMode::Json if new_fetch => mode.render_compact(&MatrixView(&f.matrix)),
            OutputMode::Json => continue,
            OutputMode::Cli => {
                last_check = Instant::now();
                let m = matrix_view::at(&f.matrix, f.master_ns(last_check));
                let body = format!(
                    "{master} every {interval_ms} ms (Ctrl-C to stop)\n\n{}",
                    mode.render(&MatrixView(&m))
                );
                if body == last_text {
                    continue;
                }
                let first = last_text.is_empty();
                last_text = body;
                redraw_text(&last_text, first)
            }
        };
        let mut out = std::io::stdout().lock();
        if out
            .write_all(text.as_bytes())
            .and_then(|_| out.flush())
            .is_err()
        {
            return Ok(0); // the reader went away
        }
    }
}

/// Terminal text that replaces the screen with `body` without flicker: home, each line
/// cleared to its end, then the rest of the screen cleared (the whole screen the first
/// time).
fn redraw_text(body: &str, first: bool) -> String {
    let mut out = String::from(if first { "\x1b[H\x1b[2J" } else { "\x1b[H" });
    for line in body.lines() {
        out.push_str(line);
        out.push_str("\x1b[K\n");
    }
    out.push_str("\x1b[J");
    out
}
