//! The merged keys (`layers::Settings`) checked and turned into what the master runs
//! with: each step below checks one concern and says what is wrong in the words of the
//! config key or flag.

use std::path::PathBuf;

use anyhow::bail;
use gang_auth::pki::TlsFiles;
use gang_core::{Backfill, DeadlockPolicy, GangMode, PlacerKind, Shape};

use crate::config::{
    AuthPolicy, DEFAULT_AGENT_LEASE_MS, DEFAULT_CLOCK_PROBE_MAX_MS, DEFAULT_HEARTBEAT_MS,
    DEFAULT_IDLE_HEARTBEAT_MS, DEFAULT_NODE_TIMEOUT_MS, Fanout, LivenessTimes, MasterConfig,
    check_liveness, default_adopt_timeout, default_idle_node_timeout, liveness_scale, parse_mesh,
};
use crate::connections::ConnLimits;
use crate::daemon_config::layers::Settings;
use crate::daemon_config::{DaemonConfig, check_origin};

/// What the master runs with, and the log format, from the merged keys.
pub fn resolve(s: Settings) -> anyhow::Result<(DaemonConfig, String)> {
    let mesh = match &s.mesh {
        Some(m) => parse_mesh(m).map_err(anyhow::Error::msg)?,
        None => bail!("the mesh is required: --mesh WxH or mesh = \"WxH\" in the config"),
    };
    let master = master_config(&s, mesh)?;
    let (state, etcd) = store(&s)?;
    if s.etcd_lease_s == 0 {
        bail!("--etcd-lease-s must be at least 1");
    }
    for o in &s.web.allow_origins {
        check_origin(o).map_err(anyhow::Error::msg)?;
    }
    let daemon = DaemonConfig {
        fanout: fanout(&s)?,
        listen: s.listen,
        metrics_listen: s.metrics_listen,
        etcd_lease_s: s.etcd_lease_s,
        etcd_timeout_ms: s.etcd_timeout_ms.max(1),
        output_dir: s.output_dir.clone(),
        ready_file: None,
        token_key: s
            .token_key
            .clone()
            .unwrap_or_else(|| state.with_extension("token-key")),
        state,
        etcd,
        socket: s.socket.clone(),
        agent_listen: s.agent_listen,
        tls: TlsFiles {
            ca: s.tls.ca.clone(),
            cert: s.tls.cert.clone(),
            key: s.tls.key.clone(),
        },
        connections: ConnLimits::default().with(&s.connections),
        web_origins: s.web.allow_origins.clone(),
        web_portal: s.web.portal,
        master,
    };
    Ok((daemon, s.log_format))
}

/// What the state decides with: scheduling, liveness, who may do what, limits.
fn master_config(s: &Settings, mesh: Shape) -> anyhow::Result<MasterConfig> {
    if s.mpl == 0 {
        bail!("mpl must be at least 1");
    }
    if !(1..=60_000).contains(&s.quantum_ms) {
        bail!(
            "quantum_ms must be between 1 and 60000, got {}",
            s.quantum_ms
        );
    }
    let scale = liveness_scale(mesh.area());
    let live = liveness(s, scale)?;
    Ok(MasterConfig {
        mesh,
        mpl: s.mpl,
        placer: parsed::<PlacerKind>(&s.placer)?.unwrap_or_default(),
        backfill: s.backfill.parse::<Backfill>().map_err(anyhow::Error::msg)?,
        fair_share: match s.queue_order.as_str() {
            "fair-share" => true,
            "fcfs" => false,
            other => {
                bail!("queue_order = {other:?} in the config file: expected fair-share or fcfs")
            }
        },
        heartbeat_ms: live.heartbeat_ms,
        node_timeout_ms: live.node_timeout_ms,
        idle_heartbeat_ms: live.idle_heartbeat_ms,
        idle_node_timeout_ms: live.idle_node_timeout_ms,
        agent_lease_ms: live.agent_lease_ms,
        adopt_timeout_ms: live.adopt_timeout_ms,
        clock_probe_max_ms: DEFAULT_CLOCK_PROBE_MAX_MS * scale,
        kill_grace_ms: s.kill_grace_ms,
        quantum_ms: s.quantum_ms,
        gang_mode: parsed::<GangMode>(&s.gang_mode)?.unwrap_or_default(),
        on_deadlock: parsed::<DeadlockPolicy>(&s.on_deadlock)?.unwrap_or_default(),
        mpi: parsed::<crate::job::Mpi>(&s.mpi)?.unwrap_or(crate::job::Mpi::CLUSTER_DEFAULT),
        table_lead_ms: s.table_lead_ms,
        auth: auth_policy(s)?,
        limits: s.limits.clone(),
        liveness_width: s.fanout_width,
    })
}

/// A key given as text, parsed as its type says (its own message if it does not parse).
fn parsed<T: std::str::FromStr>(v: &Option<String>) -> anyhow::Result<Option<T>>
where
    T::Err: std::fmt::Display,
{
    v.as_deref()
        .map(|s| s.parse::<T>().map_err(|e| anyhow::anyhow!("{e}")))
        .transpose()
}

/// The liveness periods: as set, or the defaults scaled with the mesh; checked together.
fn liveness(s: &Settings, scale: u32) -> anyhow::Result<LivenessTimes> {
    let heartbeat_ms = s.heartbeat_ms.unwrap_or(DEFAULT_HEARTBEAT_MS * scale);
    let node_timeout_ms = s.node_timeout_ms.unwrap_or(DEFAULT_NODE_TIMEOUT_MS * scale);
    let idle_heartbeat_ms = s
        .idle_heartbeat_ms
        .unwrap_or(DEFAULT_IDLE_HEARTBEAT_MS * scale);
    let idle_node_timeout_ms = s
        .idle_node_timeout_ms
        .unwrap_or_else(|| default_idle_node_timeout(idle_heartbeat_ms, node_timeout_ms));
    let agent_lease_ms = s
        .agent_lease_ms
        .unwrap_or_else(|| DEFAULT_AGENT_LEASE_MS.max(node_timeout_ms.saturating_mul(2)));
    let adopt_timeout_ms = s
        .adopt_timeout_ms
        .unwrap_or_else(|| default_adopt_timeout(node_timeout_ms, agent_lease_ms));
    let times = LivenessTimes {
        heartbeat_ms,
        node_timeout_ms,
        idle_heartbeat_ms,
        idle_node_timeout_ms,
        agent_lease_ms,
        adopt_timeout_ms,
    };
    check_liveness(&times).map_err(anyhow::Error::msg)?;
    Ok(times)
}

/// Admins (users and groups, the groups resolved here), root jobs, token lifetimes.
fn auth_policy(s: &Settings) -> anyhow::Result<AuthPolicy> {
    let admin_gids = s
        .admin_groups
        .iter()
        .map(|g| match nix::unistd::Group::from_name(g) {
            Ok(Some(g)) => Ok(g.gid.as_raw()),
            Ok(None) => bail!("admin group {g:?} is not a group on this host"),
            Err(e) => bail!("cannot look up admin group {g:?}: {e}"),
        })
        .collect::<anyhow::Result<Vec<u32>>>()?;
    Ok(AuthPolicy {
        admins: s.admins.clone(),
        admin_gids,
        allow_root_jobs: s.allow_root_jobs,
        token_ttl_s: s.token_ttl_s.min(s.token_max_ttl_s),
        token_max_ttl_s: s.token_max_ttl_s,
    })
}

/// Where the state is kept: the SQLite path, or etcd (`etcd://...`) with its TLS. With
/// etcd the path default stands for what lives beside it (the token key, unless set;
/// output logs, unless `output_dir`).
fn store(s: &Settings) -> anyhow::Result<(PathBuf, Option<gang_etcd::Target>)> {
    let (state, mut etcd) = match s.state.to_str() {
        Some(t) if t.starts_with("etcd://") => (
            PathBuf::from("gang-master.db"),
            Some(t.parse::<gang_etcd::Target>()?),
        ),
        _ => (s.state.clone(), None),
    };
    // Like the other etcd_* keys, read only when the state is in etcd.
    match (&mut etcd, &s.etcd_ca, &s.etcd_cert, &s.etcd_key) {
        (None, ..) | (_, None, None, None) => {}
        (Some(_), None, ..) => bail!(
            "etcd_cert and etcd_key need etcd_ca: the CA that signed the etcd members' certificates"
        ),
        (Some(_), Some(_), Some(_), None) | (Some(_), Some(_), None, Some(_)) => {
            bail!("etcd_cert and etcd_key go together")
        }
        (Some(t), Some(ca), cert, key) => {
            let pair = cert.as_deref().zip(key.as_deref());
            t.tls = Some(gang_etcd::Tls::read(ca, pair)?);
        }
    }
    if let Some(t) = &etcd
        && t.tls.as_ref().is_none_or(|tls| tls.identity.is_none())
        && !s.etcd_trusted_network
    {
        bail!(
            "etcd at {} is reached without a client certificate: anyone who can write it \
             can queue jobs there to run as any user. Give the master its certificate \
             (--etcd-ca, --etcd-cert, --etcd-key, with etcd run with --client-cert-auth), \
             or, if the network to etcd is the masters' alone, say so with \
             --etcd-trusted-network (etcd_trusted_network = true)",
            t.endpoints.join(",")
        );
    }
    Ok((state, etcd))
}

/// The order tree and where fences are gathered.
fn fanout(s: &Settings) -> anyhow::Result<Fanout> {
    Fanout {
        width: s.fanout_width,
        hop_timeout_ms: s.relay_hop_timeout_ms,
        fences_among_agents: match s.fences.as_str() {
            "agents" => true,
            "master" => false,
            other => bail!("fences = {other:?} in the config file: expected master or agents"),
        },
    }
    .check()
    .map_err(anyhow::Error::msg)
}
