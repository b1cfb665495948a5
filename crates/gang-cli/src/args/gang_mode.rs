//! Gang modes on the command line (`prun --gang`, `gangctl start --gang-mode`) and in
//! output: how a job's ranks are switched out while its row of the slice table is not
//! running (issue #4). The modes are [`gang_core::GangMode`], the one type the master and
//! agents use too; this module only adds the command-line parser and the output label.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use gang_core::GangMode;
use gang_proto::v1;

/// The value parser of a gang-mode flag: the words of [`GangMode::ALL`], each listed in
/// `--help` with its [`GangMode::describe`] line. No value means the cluster default (the
/// master's `--gang-mode`), sent as `GANG_MODE_UNSPECIFIED` (see [`to_proto`]).
pub fn parser() -> impl TypedValueParser<Value = GangMode> {
    PossibleValuesParser::new(
        GangMode::ALL.map(|m| PossibleValue::new(m.as_str()).help(m.describe())),
    )
    // Only the words above get this far, and each is its mode's `as_str`.
    .map(|word| {
        word.parse::<GangMode>()
            .expect("a possible value names a mode")
    })
}

/// The mode's word: `stop`, `priority`, `none`, `freeze`; `default` for UNSPECIFIED (the
/// cluster default, not resolved).
pub fn label(mode: v1::GangMode) -> &'static str {
    mode.resolved().map_or("default", GangMode::as_str)
}

/// The proto value of an optional command-line mode (`None`: the cluster default).
pub fn to_proto(mode: Option<GangMode>) -> v1::GangMode {
    mode.map_or(v1::GangMode::Unspecified, v1::GangMode::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> clap::Command {
        clap::Command::new("t").arg(
            clap::Arg::new("gang")
                .long("gang")
                .value_name("MODE")
                .value_parser(parser()),
        )
    }

    fn parse(word: &str) -> Result<Option<GangMode>, clap::Error> {
        command()
            .try_get_matches_from(["t", "--gang", word])
            .map(|m| m.get_one::<GangMode>("gang").copied())
    }

    #[test]
    fn every_mode_parses_from_its_word() {
        for m in GangMode::ALL {
            assert_eq!(parse(m.as_str()).unwrap(), Some(m));
        }
        let e = parse("strict").unwrap_err().to_string();
        assert!(
            e.contains("[possible values: stop, priority, none, freeze]"),
            "{e}"
        );
    }

    #[test]
    fn help_lists_every_mode_with_its_description() {
        let help = command().render_long_help().to_string();
        for m in GangMode::ALL {
            let line = format!("- {}:", m.as_str());
            assert!(help.contains(&line), "{line} missing:\n{help}");
        }
        assert!(
            help.contains("SIGSTOP") && help.contains("nice +15"),
            "{help}"
        );
    }

    #[test]
    fn labels_and_proto_values() {
        assert_eq!(to_proto(None), v1::GangMode::Unspecified);
        assert_eq!(to_proto(Some(GangMode::Freeze)), v1::GangMode::Freeze);
        assert_eq!(label(v1::GangMode::Unspecified), "default");
        for m in GangMode::ALL {
            assert_eq!(label(to_proto(Some(m))), m.as_str());
        }
    }
}
