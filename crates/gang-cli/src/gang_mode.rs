//! Gang modes on the command line (`prun --gang`, `gangctl start --gang-mode`) and in
//! output: how a job's ranks are switched out while its row of the slice table is not
//! running (issue #4).

use gang_proto::v1::GangMode;

/// A gang mode as typed on the command line. No value means the cluster default (the
/// master's `--gang-mode`), sent as `GANG_MODE_UNSPECIFIED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GangModeArg {
    /// Strict gang scheduling: SIGSTOP the job's process groups when its slot ends, SIGCONT
    /// them when it comes back; it never runs outside its slices.
    Stop,
    /// AP/Linux style: never stopped; at its base nice in its slices and at nice +15
    /// outside them, so it only gets the CPU the running job leaves idle.
    Priority,
    /// Space sharing only: never stopped or reniced (it still holds its nodes in its
    /// slices).
    None,
    /// Like stop, through the cgroup freezer (the job's ranks frozen and thawed as one);
    /// stop by signals on nodes where no freezer is available.
    Freeze,
}

impl GangModeArg {
    pub fn proto(self) -> GangMode {
        match self {
            GangModeArg::Stop => GangMode::Stop,
            GangModeArg::Priority => GangMode::Priority,
            GangModeArg::None => GangMode::None,
            GangModeArg::Freeze => GangMode::Freeze,
        }
    }

    /// The word on the command line (and in `gang-master --gang-mode`).
    pub fn as_str(self) -> &'static str {
        label(self.proto())
    }
}

/// The mode's word: `stop`, `priority`, `none`, `freeze`; `default` for UNSPECIFIED (the
/// cluster default, not resolved).
pub fn label(mode: GangMode) -> &'static str {
    match mode {
        GangMode::Unspecified => "default",
        GangMode::Stop => "stop",
        GangMode::Priority => "priority",
        GangMode::None => "none",
        GangMode::Freeze => "freeze",
    }
}

/// The proto value of an optional command-line mode (`None`: the cluster default).
pub fn to_proto(arg: Option<GangModeArg>) -> GangMode {
    arg.map_or(GangMode::Unspecified, GangModeArg::proto)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn words_round_trip() {
        for m in GangModeArg::value_variants() {
            let word = m.to_possible_value().unwrap().get_name().to_string();
            assert_eq!(word, m.as_str());
            assert_eq!(GangModeArg::from_str(&word, false), Ok(*m));
        }
        assert_eq!(to_proto(None), GangMode::Unspecified);
        assert_eq!(to_proto(Some(GangModeArg::Freeze)), GangMode::Freeze);
        assert_eq!(label(GangMode::Unspecified), "default");
        assert!(GangModeArg::from_str("strict", false).is_err());
    }
}
