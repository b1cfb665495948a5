//! Output modes (`--output cli|json`) and the views `gangctl` renders in them.
//!
//! Every command result is a [`View`]: it knows its text for people ([`View::cli`]) and its
//! JSON value ([`View::json`]). [`OutputMode::render`] picks one; commands never branch on
//! the mode themselves.
//!
//! - [`views`]: one view per command result; [`job_view`]: one job's (`gangctl job`);
//!   [`jobs_view`]: `gangctl jobs` (steps and array tasks as Slurm names them).
//! - [`json`]: the JSON shapes, converted from the proto types.
//! - [`format`](mod@format): pure formatting helpers (durations, times, tables, shell words).
//! - [`matrix_view`]: the slice matrix drawn as text; [`slices_watch`]: `gangctl slices
//!   --watch`.
//! - [`steps_view`]: an allocation's steps under its job (`gangctl job`).
//!
//! Imports run one way: `views` -> `json` -> `format`, and `views` / `json` ->
//! [`crate::output::matrix_view`] -> `format`; this module imports none of them.

use std::io::Write;

use serde::Serialize;

pub mod format;
pub mod job_view;
pub mod jobs_view;
pub mod json;
pub mod matrix_view;
pub mod slices_watch;
pub mod steps_view;
pub mod views;

#[cfg(test)]
mod fixtures;

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutputMode {
    /// Tables and text for people.
    #[default]
    Cli,
    /// JSON for programs (one document per command).
    Json,
}

/// Something a command prints.
pub trait View {
    type Json: Serialize;
    /// The JSON value (serialized by [`OutputMode::render`]).
    fn json(&self) -> Self::Json;
    /// The text for people, ending with a newline (or empty).
    fn cli(&self) -> String;
}

impl OutputMode {
    /// The text to print for `view` in this mode (ends with a newline unless empty).
    pub fn render<V: View>(self, view: &V) -> String {
        match self {
            OutputMode::Cli => view.cli(),
            OutputMode::Json => {
                let mut s = serde_json::to_string_pretty(&view.json())
                    .expect("JSON views always serialize");
                s.push('\n');
                s
            }
        }
    }

    /// Like [`render`](Self::render), but JSON on one line (for `--watch` streams).
    pub fn render_compact<V: View>(self, view: &V) -> String {
        match self {
            OutputMode::Cli => view.cli(),
            OutputMode::Json => {
                let mut s =
                    serde_json::to_string(&view.json()).expect("JSON views always serialize");
                s.push('\n');
                s
            }
        }
    }

    /// Write [`render`](Self::render)'s text to stdout and flush it. Write errors are
    /// ignored: a reader that went away (`gangctl jobs | head`) is no failure of the command.
    pub fn print<V: View>(self, view: &V) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(self.render(view).as_bytes());
        let _ = out.flush();
    }
}

impl OutputMode {
    /// Like [`print`](Self::print), but one line on stderr: errors, which a program reads
    /// apart from the result (stdout then holds what did succeed, or nothing).
    pub fn eprint<V: View>(self, view: &V) {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(self.render_compact(view).as_bytes());
        let _ = err.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Pair;

    impl View for Pair {
        type Json = Vec<u32>;
        fn json(&self) -> Vec<u32> {
            vec![1, 2]
        }
        fn cli(&self) -> String {
            "one two\n".into()
        }
    }

    #[test]
    fn modes_pick_text_or_json() {
        assert_eq!(OutputMode::Cli.render(&Pair), "one two\n");
        assert_eq!(OutputMode::Cli.render_compact(&Pair), "one two\n");
        assert_eq!(OutputMode::Json.render(&Pair), "[\n  1,\n  2\n]\n");
        assert_eq!(OutputMode::Json.render_compact(&Pair), "[1,2]\n");
    }
}
