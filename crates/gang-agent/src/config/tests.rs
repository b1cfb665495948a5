//! Flags, the TOML file and their defaults, resolved together.

use super::*;

const TLS: [&str; 6] = [
    "--tls-ca",
    "/etc/gang/tls/ca.pem",
    "--tls-cert",
    "/etc/gang/tls/node.pem",
    "--tls-key",
    "/etc/gang/tls/node-key.pem",
];

/// `args` and the TLS files.
fn flags(args: &[&str]) -> Flags {
    let mut all = args.to_vec();
    all.extend_from_slice(&TLS);
    bare_flags(&all)
}

fn bare_flags(args: &[&str]) -> Flags {
    let mut all = vec!["gang-agent"];
    all.extend_from_slice(args);
    Flags::try_parse_from(all).expect("flags parse")
}

#[test]
fn flags_override_file() {
    let file = FileConfig::parse(
        Path::new("agent.toml"),
        "master = \"10.0.0.1:7470\"\nx = 3\ny = 4\nlisten = \"127.0.0.1:9000\"\nkill_grace_ms = 50\nlog_format = \"json\"\n",
    )
    .unwrap();
    let cfg = flags(&["--master", "https://127.0.0.1:1", "--x", "1"])
        .resolve_with(file)
        .unwrap();
    assert_eq!(cfg.master, "https://127.0.0.1:1");
    assert_eq!(cfg.coord, Coord { x: 1, y: 4 });
    assert_eq!(cfg.listen, "127.0.0.1:9000".parse().unwrap());
    assert_eq!(cfg.kill_grace, Duration::from_millis(50));
    assert_eq!(cfg.log_format, LogFormat::Json);
}

#[test]
fn clock_freezer_and_priority() {
    let file = FileConfig::parse(
        Path::new("agent.toml"),
        "clock = \"host\"\nfreezer = \"/sys/fs/cgroup/freezer/g\"\nrt_priority = 0\nswitch_spin_us = 150\n",
    )
    .unwrap();
    let cfg = flags(&["--master", "h:1", "--x", "0", "--y", "0"])
        .resolve_with(file)
        .unwrap();
    assert_eq!(cfg.clock, ClockMode::Host);
    assert_eq!(
        cfg.freezer,
        FreezerSetting::Path("/sys/fs/cgroup/freezer/g".into())
    );
    assert_eq!(cfg.rt_priority, 0);
    assert_eq!(cfg.switch_spin, Duration::from_micros(150));
    let cfg = flags(&[
        "--master",
        "h:1",
        "--x",
        "0",
        "--y",
        "0",
        "--clock",
        "probe",
        "--freezer",
        "off",
        "--rt-priority",
        "20",
    ])
    .resolve_with(FileConfig::default())
    .unwrap();
    assert_eq!(
        (cfg.clock, cfg.freezer, cfg.rt_priority),
        (ClockMode::Probe, FreezerSetting::Off, 20)
    );
    let err = FileConfig::parse(Path::new("a.toml"), "freezer = \"nope\"\n").unwrap_err();
    assert!(err.to_string().contains("expected auto, off"), "{err}");
    assert_eq!(cfg.clock_probe_max, Duration::from_secs(8));
    let cfg = flags(&["--master", "h:1", "--x", "0", "--y", "0"])
        .resolve_with(FileConfig {
            clock_probe_max_ms: Some(30_000),
            ..FileConfig::default()
        })
        .unwrap();
    assert_eq!(cfg.clock_probe_max, Duration::from_secs(30));
    let err = flags(&["--master", "h:1", "--x", "0", "--y", "0"])
        .resolve_with(FileConfig {
            clock_probe_max_ms: Some(500),
            ..FileConfig::default()
        })
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("clock_probe_max_ms 500 is too short"),
        "{err}"
    );
    let err = FileConfig::parse(Path::new("a.toml"), "clock = \"ntp\"\n").unwrap_err();
    assert!(err.to_string().contains("clock"), "{err}");
    let err = flags(&["--master", "h:1", "--x", "0", "--y", "0"])
        .resolve_with(FileConfig::parse(Path::new("a.toml"), "rt_priority = 120\n").unwrap())
        .unwrap_err();
    assert!(err.to_string().contains("rt_priority 120"), "{err}");
    assert!(Flags::try_parse_from(["gang-agent", "--rt-priority", "100"]).is_err());
}

#[test]
fn defaults_and_scheme() {
    let cfg = flags(&["--master", "127.0.0.1:7470", "--x", "0", "--y", "2"])
        .resolve_with(FileConfig::default())
        .unwrap();
    assert_eq!(cfg.master, "https://127.0.0.1:7470");
    assert_eq!(cfg.listen, DEFAULT_LISTEN.parse().unwrap());
    assert!(!cfg.allow_root && cfg.env_allow.is_empty());
    assert_eq!(cfg.tls.cert, Path::new("/etc/gang/tls/node.pem"));
    assert_eq!(cfg.kill_grace, Duration::from_millis(2000));
    assert_eq!(cfg.log_format, LogFormat::Human);
    assert!(cfg.ready_file.is_none());
    assert_eq!(cfg.clock, ClockMode::Probe);
    assert_eq!(cfg.freezer, FreezerSetting::Auto);
    assert_eq!(cfg.rt_priority, RT_PRIORITY);
}

#[test]
fn missing_coordinate_is_named() {
    let err = flags(&["--master", "127.0.0.1:1", "--x", "0"])
        .resolve_with(FileConfig::default())
        .unwrap_err();
    assert!(err.to_string().contains("--y"), "{err}");
}

#[test]
fn malformed_file_names_file_and_problem() {
    let err = FileConfig::parse(Path::new("/etc/agent.toml"), "x = \"three\"\n").unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("config file /etc/agent.toml: "), "{msg}");
    assert!(msg.contains("invalid type"), "{msg}");
    let err = FileConfig::parse(Path::new("a.toml"), "colour = 1\n").unwrap_err();
    assert!(err.to_string().contains("unknown field `colour`"), "{err}");
}

#[test]
fn bad_master_is_rejected() {
    assert!(normalize_master("ftp://h:1").is_err());
    let err = normalize_master("http://h:1").unwrap_err().to_string();
    assert!(
        err.contains("only TLS") && err.contains("https://"),
        "{err}"
    );
    assert!(normalize_master("https://").is_err());
    assert_eq!(normalize_master("https://h:1").unwrap(), "https://h:1");
    assert_eq!(
        normalize_master(" localhost:7 ").unwrap(),
        "https://localhost:7"
    );
}

#[test]
fn tls_files_are_required_and_the_missing_ones_named() {
    let err = bare_flags(&["--master", "h:1", "--x", "2", "--y", "5"])
        .resolve_with(FileConfig::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("missing tls_ca, tls_cert, tls_key "),
        "{err}"
    );
    assert!(
        err.contains("gangctl certs init DIR --mesh WxH")
            && err.contains("DIR/nodes/node-2-5.pem")
            && err.contains("own CA"),
        "{err}"
    );
    let file = FileConfig::parse(
        Path::new("a.toml"),
        "tls_ca = \"/t/ca.pem\"\ntls_key = \"/t/k.pem\"\n",
    )
    .unwrap();
    let err = bare_flags(&["--master", "h:1", "--x", "2", "--y", "5"])
        .resolve_with(file)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("missing tls_cert "), "{err}");
    let file = FileConfig::parse(
        Path::new("a.toml"),
        "tls_ca = \"/t/ca.pem\"\ntls_cert = \"/t/c.pem\"\ntls_key = \"/t/k.pem\"\n",
    )
    .unwrap();
    let cfg = bare_flags(&[
        "--master",
        "h:1",
        "--x",
        "2",
        "--y",
        "5",
        "--tls-key",
        "/u/k.pem",
    ])
    .resolve_with(file)
    .unwrap();
    assert_eq!(
        cfg.tls,
        TlsFiles {
            ca: "/t/ca.pem".into(),
            cert: "/t/c.pem".into(),
            key: "/u/k.pem".into()
        }
    );
}

#[test]
fn allow_root_and_env_allow() {
    let file = FileConfig::parse(
        Path::new("a.toml"),
        "allow_root = true\nenv_allow = [\"LD_PRELOAD\", \"MALLOC_TRACE\"]\n",
    )
    .unwrap();
    let cfg = flags(&["--master", "h:1", "--x", "0", "--y", "0"])
        .resolve_with(file)
        .unwrap();
    assert!(cfg.allow_root);
    assert_eq!(
        cfg.env_allow,
        ["LD_PRELOAD".to_owned(), "MALLOC_TRACE".to_owned()].into()
    );
    let cfg = flags(&[
        "--master",
        "h:1",
        "--x",
        "0",
        "--y",
        "0",
        "--allow-root",
        "--env-allow",
        "LD_AUDIT,GCONV_PATH",
    ])
    .resolve_with(FileConfig::default())
    .unwrap();
    assert!(cfg.allow_root);
    assert_eq!(
        cfg.env_allow,
        ["GCONV_PATH".to_owned(), "LD_AUDIT".to_owned()].into()
    );
    let err = flags(&[
        "--master",
        "h:1",
        "--x",
        "0",
        "--y",
        "0",
        "--env-allow",
        "LD_PRELAOD",
    ])
    .resolve_with(FileConfig::default())
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("\"LD_PRELAOD\" is not a variable the agent drops")
            && err.contains("LD_PRELOAD"),
        "{err}"
    );
}
