//! `gangctl`'s usage errors: clap's own, except under `--output json`, where a usage
//! error is a JSON object too (exit 2 either way).

use clap::CommandFactory;

use crate::gangctl::cli::Cli;
use crate::output::OutputMode;
use crate::output::views::ErrorView;

/// Whether the command line or GANG_OUTPUT asks for JSON, read by hand when clap refused
/// the command line (and so gave no `Cli`).
fn json_requested() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .any(|w| w[0] == "--output" && w[1] == "json")
        || args.iter().any(|a| a == "--output=json")
        || std::env::var("GANG_OUTPUT").is_ok_and(|v| v == "json")
}

/// A value clap took but the command refuses (`9-3`, `last` where it means nothing): a
/// usage error, exit 2, as clap's own.
pub fn bad_value(e: String) -> ! {
    usage_error(Cli::command().error(clap::error::ErrorKind::InvalidValue, e))
}

/// clap's own exit, but a usage error under `--output json` is a JSON object too (exit 2).
pub fn usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    let help = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    if help {
        e.exit()
    }
    if !json_requested() {
        crate::args::usage::exit_with("gangctl", e)
    }
    // clap's first line names the problem; the rest is usage text for people.
    let text = e.render().to_string();
    let message = text
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ")
        .to_owned();
    OutputMode::Json.eprint(&ErrorView {
        prog: "gangctl",
        code: "USAGE",
        message,
    });
    std::process::exit(2)
}
