//! The master's ready file.

use std::net::SocketAddr;
use std::path::PathBuf;

/// What the master's ready file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ready {
    pub(crate) grpc: SocketAddr,
    pub(crate) agents: SocketAddr,
    pub(crate) socket: PathBuf,
    pub(crate) metrics: SocketAddr,
    /// The portal's URL, when the master serves it.
    pub(crate) portal: Option<String>,
}

/// Parse a ready file: `grpc=`, `agents=`, `socket=` and `metrics=` lines. `None` until
/// all are there.
pub(crate) fn parse_ready(text: &str) -> Option<Ready> {
    let mut grpc = None;
    let mut agents = None;
    let mut socket = None;
    let mut metrics = None;
    let mut portal = None;
    for line in text.lines() {
        let Some((k, v)) = line.trim().split_once('=') else {
            continue;
        };
        let v = v.trim();
        if k.trim() == "portal" {
            portal = Some(v.to_string());
            continue;
        }
        let v = v.strip_prefix("http://").unwrap_or(v).trim_end_matches('/');
        let v = v.strip_suffix("/metrics").unwrap_or(v);
        match k.trim() {
            "grpc" => grpc = v.parse().ok(),
            "agents" => agents = v.parse().ok(),
            "socket" => socket = Some(PathBuf::from(v)),
            "metrics" => metrics = v.parse().ok(),
            _ => {}
        }
    }
    Some(Ready {
        grpc: grpc?,
        agents: agents?,
        socket: socket?,
        metrics: metrics?,
        portal,
    })
}
