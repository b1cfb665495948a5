//! How a job is switched out of its time slices: the one gang-mode type of the system.
//!
//! The master resolves a job's mode once (the cluster default for a job that names none)
//! and sends it with every rank's launch; slice tables carry no modes.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GangMode {
    /// Strict gang scheduling: SIGSTOP/SIGCONT to the ranks' process groups.
    #[default]
    Stop,
    /// AP/Linux moderate co-scheduling: base nice in its slots, +15 outside them.
    Priority,
    /// Space sharing only: never stopped or reniced.
    None,
    /// Like `Stop`, through the cgroup freezer (signals where no freezer is available).
    Freeze,
}

impl GangMode {
    pub const ALL: [GangMode; 4] = [
        GangMode::Stop,
        GangMode::Priority,
        GangMode::None,
        GangMode::Freeze,
    ];

    /// The word used on command lines, in configs and in output.
    pub fn as_str(self) -> &'static str {
        match self {
            GangMode::Stop => "stop",
            GangMode::Priority => "priority",
            GangMode::None => "none",
            GangMode::Freeze => "freeze",
        }
    }

    /// One line for help texts.
    pub fn describe(self) -> &'static str {
        match self {
            GangMode::Stop => {
                "strict gang scheduling: SIGSTOP the job's process groups when its slot ends, \
                 SIGCONT them when it comes back"
            }
            GangMode::Priority => {
                "AP/Linux style: never stopped; base nice in its slices, nice +15 outside them"
            }
            GangMode::None => "space sharing only: never stopped or reniced",
            GangMode::Freeze => {
                "like stop, through the cgroup freezer; stop by signals where there is none"
            }
        }
    }

    /// Whether the job is ever switched out (run time is then the time its rows run).
    pub fn is_switched(self) -> bool {
        self != GangMode::None
    }
}

impl fmt::Display for GangMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown gang-mode word.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown gang mode {0:?}: expected stop, priority, none or freeze")]
pub struct UnknownGangMode(pub String);

impl FromStr for GangMode {
    type Err = UnknownGangMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        GangMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| UnknownGangMode(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        for m in GangMode::ALL {
            assert_eq!(m.to_string().parse::<GangMode>(), Ok(m));
        }
        let e = "strict".parse::<GangMode>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown gang mode \"strict\": expected stop, priority, none or freeze"
        );
        assert!(!GangMode::None.is_switched() && GangMode::Freeze.is_switched());
    }
}
