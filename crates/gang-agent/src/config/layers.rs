//! The layers of the agent's configuration, merged by `figment`: defaults, then the
//! `--config` file, then the environment (`GANG_AGENT_<KEY>`), then the flags, each
//! overriding the one below; then the merged settings are checked and turned into the
//! `AgentConfig` the agent runs with. Every layer is a `FileConfig`, whose unset keys
//! are absent, so a lower layer shows through them.

use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Serialized};
use gang_auth::pki::TlsFiles;

use super::{
    AgentConfig, ConfigError, DEFAULT_KILL_GRACE_MS, DEFAULT_LISTEN, FileConfig, Flags,
    default_spool_dir, normalize_master,
};
use crate::error::Coord;
use crate::launch::env_policy::DROPPED_ENV;
use crate::switch::RT_PRIORITY;

/// Environment variables `GANG_AGENT_<KEY>` set the file's keys (`GANG_AGENT_KILL_GRACE_MS`).
pub const ENV_PREFIX: &str = "GANG_AGENT_";

/// The keys the environment may set: the file's, so that no other `GANG_AGENT_*`
/// variable is taken for a setting.
const ENV_KEYS: [&str; 20] = [
    "master",
    "x",
    "y",
    "listen",
    "ready_file",
    "tls_ca",
    "tls_cert",
    "tls_key",
    "allow_root",
    "env_allow",
    "kill_grace_ms",
    "log_format",
    "clock",
    "clock_probe_max_ms",
    "freezer",
    "rt_priority",
    "switch_spin_us",
    "msg_dir",
    "spool_dir",
    "output_spool_mb",
];

impl Flags {
    /// Layer the flags over the environment, the config file (if any) and the defaults.
    pub fn resolve(self) -> Result<AgentConfig, ConfigError> {
        let file = match &self.config {
            Some(path) => FileConfig::load(path)?,
            None => FileConfig::default(),
        };
        self.resolve_with(file)
    }

    /// As `resolve`, with the file's settings given.
    pub fn resolve_with(self, file: FileConfig) -> Result<AgentConfig, ConfigError> {
        let merged: FileConfig = Figment::new()
            .merge(Serialized::defaults(defaults()))
            .merge(Serialized::defaults(file))
            .merge(Env::prefixed(ENV_PREFIX).only(&ENV_KEYS))
            .merge(Serialized::defaults(self.layer()))
            .extract()
            .map_err(|e| ConfigError::Env(e.to_string()))?;
        settle(merged, self.emulate)
    }

    /// The flags given, as a layer: a flag not given sets nothing.
    fn layer(&self) -> FileConfig {
        FileConfig {
            master: self.master.clone(),
            x: self.x,
            y: self.y,
            listen: self.listen,
            ready_file: self.ready_file.clone(),
            tls_ca: self.tls_ca.clone(),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            allow_root: self.allow_root.then_some(true),
            env_allow: (!self.env_allow.is_empty()).then(|| self.env_allow.clone()),
            kill_grace_ms: self.kill_grace_ms,
            log_format: self.log_format,
            clock: self.clock,
            clock_probe_max_ms: self.clock_probe_max_ms,
            freezer: self.freezer.clone(),
            rt_priority: self.rt_priority,
            switch_spin_us: self.switch_spin_us,
            msg_dir: self.msg_dir.clone(),
            spool_dir: self.spool_dir.clone(),
            output_spool_mb: self.output_spool_mb,
        }
    }
}

/// The bottom layer: every setting that has a default. The master, the coordinate and
/// the TLS files have none.
fn defaults() -> FileConfig {
    let euid = nix::unistd::geteuid().as_raw();
    FileConfig {
        listen: Some(DEFAULT_LISTEN.parse().expect("literal")),
        allow_root: Some(false),
        env_allow: Some(Vec::new()),
        kill_grace_ms: Some(DEFAULT_KILL_GRACE_MS),
        log_format: Some(Default::default()),
        clock: Some(Default::default()),
        clock_probe_max_ms: Some(crate::rt::clock::DEFAULT_MAX_PERIOD.as_millis() as u32),
        freezer: Some(Default::default()),
        rt_priority: Some(RT_PRIORITY),
        switch_spin_us: Some(0),
        msg_dir: Some(crate::msg::default_base(euid)),
        spool_dir: Some(default_spool_dir(euid)),
        ..FileConfig::default()
    }
}

/// Check the merged settings and turn them into what the agent runs with.
fn settle(m: FileConfig, emulate: bool) -> Result<AgentConfig, ConfigError> {
    let master = m
        .master
        .ok_or(ConfigError::Missing("--master (or GANG_MASTER)"))?;
    let x = m.x.ok_or(ConfigError::Missing("--x"))?;
    let y = m.y.ok_or(ConfigError::Missing("--y"))?;
    let rt_priority = m.rt_priority.unwrap_or(RT_PRIORITY);
    if !(0..=99).contains(&rt_priority) {
        return Err(ConfigError::RtPriority(rt_priority));
    }
    let probe_max_ms = m.clock_probe_max_ms.unwrap_or_default();
    if probe_max_ms < 1000 {
        return Err(ConfigError::ClockProbeMax(probe_max_ms));
    }
    let spin_us = m.switch_spin_us.unwrap_or(0);
    if spin_us > 5000 {
        return Err(ConfigError::SwitchSpin(spin_us));
    }
    let tls = tls_files(m.tls_ca, m.tls_cert, m.tls_key, x, y)?;
    let env_allow = m.env_allow.unwrap_or_default();
    // A misspelt name would silently keep dropping the variable it meant.
    if let Some(name) = env_allow
        .iter()
        .find(|n| !DROPPED_ENV.contains(&n.as_str()))
    {
        return Err(ConfigError::EnvAllow { name: name.clone() });
    }
    let euid = || nix::unistd::geteuid().as_raw();
    Ok(AgentConfig {
        master: normalize_master(&master)?,
        coord: Coord { x, y },
        listen: m
            .listen
            .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("literal")),
        ready_file: m.ready_file,
        tls,
        allow_root: m.allow_root.unwrap_or(false),
        emulate,
        env_allow: env_allow.into_iter().collect(),
        kill_grace: Duration::from_millis(u64::from(
            m.kill_grace_ms.unwrap_or(DEFAULT_KILL_GRACE_MS),
        )),
        log_format: m.log_format.unwrap_or_default(),
        clock: m.clock.unwrap_or_default(),
        clock_probe_max: Duration::from_millis(u64::from(probe_max_ms)),
        freezer: m.freezer.unwrap_or_default(),
        rt_priority,
        switch_spin: Duration::from_micros(u64::from(spin_us)),
        guard_exe: None,
        msg_dir: m
            .msg_dir
            .unwrap_or_else(|| crate::msg::default_base(euid())),
        spool_dir: m.spool_dir.unwrap_or_else(|| default_spool_dir(euid())),
        spool_cap: m
            .output_spool_mb
            .map_or(crate::output::SPOOL_CAP, |mb| u64::from(mb) << 20),
    })
}

/// The three TLS files, or which are missing (the agent speaks only mutual TLS).
fn tls_files(
    ca: Option<std::path::PathBuf>,
    cert: Option<std::path::PathBuf>,
    key: Option<std::path::PathBuf>,
    x: u32,
    y: u32,
) -> Result<TlsFiles, ConfigError> {
    match (ca, cert, key) {
        (Some(ca), Some(cert), Some(key)) => Ok(TlsFiles { ca, cert, key }),
        (ca, cert, key) => {
            let missing: Vec<&str> = [
                ("tls_ca", ca.is_none()),
                ("tls_cert", cert.is_none()),
                ("tls_key", key.is_none()),
            ]
            .into_iter()
            .filter_map(|(name, missing)| missing.then_some(name))
            .collect();
            Err(ConfigError::MissingTls {
                missing: missing.join(", "),
                x,
                y,
            })
        }
    }
}
