//! What the node agent and a rank share: environment names, the files in
//! `GANG_MSG_DIR`, the two shared pages and the control protocol.
//!
//! Nothing here starts a thread or touches the process: the agent depends on
//! this module to create the pages, serve `ctl.sock` and read a rank's counters.
//! `AGENT-INTERFACE.md` beside the crate is the prose version of this contract.

mod ctl;
mod pages;

pub use ctl::{
    CTL_KEY_MAX, CTL_PUTS_MAX, CTL_VALUE_MAX, CtlReply, CtlRequest, MAX_CTL_FRAME, read_frame,
    write_frame,
};
pub use pages::{PAGE_SIZE, StatePage, StateSnapshot, TablePage, TableSnapshot, state_layout};
pub use pages::{STATE_MAGIC, STATE_VERSION, TABLE_MAGIC, TABLE_VERSION};

/// Environment set by the agent for every rank.
pub mod env {
    /// Job id (decimal).
    pub const JOB_ID: &str = "GANG_JOB_ID";
    /// This process's rank, 0..size.
    pub const RANK: &str = "GANG_RANK";
    /// Number of ranks in the job.
    pub const SIZE: &str = "GANG_SIZE";
    /// The node's mesh x coordinate.
    pub const MESH_X: &str = "GANG_MESH_X";
    /// The node's mesh y coordinate.
    pub const MESH_Y: &str = "GANG_MESH_Y";
    /// The job's rectangle, "x0,y0,w,h"; rank r sits at (x0 + r % w, y0 + r / w).
    pub const PART: &str = "GANG_PART";
    /// A directory private to this rank (mode 0700, owned by the job's user).
    pub const MSG_DIR: &str = "GANG_MSG_DIR";
    /// The descriptor of the rank's state page, inherited from the agent (a sealed
    /// memfd); without it, the rank maps `state.page` in `GANG_MSG_DIR`.
    pub const STATE_FD: &str = "GANG_STATE_FD";
    /// Host identity: ranks with equal ids share a host and talk over Unix sockets.
    pub const HOST_ID: &str = "GANG_HOST_ID";
    /// `resident` (default) or `save-restore`.
    pub const MSG_CONTEXT: &str = "GANG_MSG_CONTEXT";
    /// Quiesce lead before a boundary, microseconds (default 1000).
    pub const MSG_LEAD_US: &str = "GANG_MSG_LEAD_US";
    /// Grace after a boundary before a quiesced rank resumes on its own clock,
    /// microseconds (default 1000): covers the agent's SIGSTOP arriving a little
    /// after the boundary. In stop mode the rank runs again only long after it.
    pub const MSG_GRACE_US: &str = "GANG_MSG_GRACE_US";
    /// `on` (default) or `off`: whether the library quiesces at boundaries at all.
    pub const MSG_FLUSH: &str = "GANG_MSG_FLUSH";
    /// `tcp` forces TCP between every pair; `unix` never opens a TCP listener.
    pub const MSG_TRANSPORT: &str = "GANG_MSG_TRANSPORT";
    /// Receive spin before blocking, microseconds (default 0).
    pub const MSG_SPIN_US: &str = "GANG_MSG_SPIN_US";
    /// Optional: the IP address other hosts reach this rank's TCP listener on.
    pub const MSG_TCP_ADDR: &str = "GANG_MSG_TCP_ADDR";
}

/// File names inside `GANG_MSG_DIR`.
pub mod files {
    /// The agent's control socket (SOCK_STREAM), created by the agent.
    pub const CTL_SOCK: &str = "ctl.sock";
    /// Written by the agent, mapped read-only by the rank.
    pub const TABLE_PAGE: &str = "table.page";
    /// Written by the rank, read by the agent: where a test or tool without an agent
    /// puts it (the agent passes sealed memory instead, `GANG_STATE_FD`).
    pub const STATE_PAGE: &str = "state.page";
    /// The rank's own listener for peers on the same host, created by the rank.
    pub const PEER_SOCK: &str = "peer.sock";
}

/// Default quiesce lead.
pub const DEFAULT_LEAD_US: u64 = 1000;
/// Default resume grace.
pub const DEFAULT_GRACE_US: u64 = 1000;

/// The KVS key a rank puts its endpoint under.
pub fn endpoint_key(rank: usize) -> String {
    format!("ep.{rank}")
}

/// A rank's endpoint as put in the KVS: `host=<id>;unix=<path>;tcp=<ip:port>;tok=<hex>`.
/// `unix` or `tcp` may be empty when that listener was not opened. `tok` is a
/// random secret a connecting peer must echo, so a stray process on the network
/// cannot pose as a rank on the TCP port (only the job's ranks read the KVS).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub unix: String,
    pub tcp: String,
    pub token: String,
}

impl Endpoint {
    pub fn encode(&self) -> String {
        format!(
            "host={};unix={};tcp={};tok={}",
            self.host, self.unix, self.tcp, self.token
        )
    }

    pub fn parse(s: &str) -> Option<Endpoint> {
        let mut ep = Endpoint {
            host: String::new(),
            unix: String::new(),
            tcp: String::new(),
            token: String::new(),
        };
        let mut seen_host = false;
        for part in s.split(';') {
            let (k, v) = part.split_once('=')?;
            match k {
                "host" => {
                    ep.host = v.to_string();
                    seen_host = true;
                }
                "unix" => ep.unix = v.to_string(),
                "tcp" => ep.tcp = v.to_string(),
                "tok" => ep.token = v.to_string(),
                // Unknown keys are skipped so a later version can add some.
                _ => {}
            }
        }
        seen_host.then_some(ep)
    }
}

/// The job's rectangle on the mesh (`GANG_PART`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    pub x0: u32,
    pub y0: u32,
    pub w: u32,
    pub h: u32,
}

impl Part {
    pub fn parse(s: &str) -> Option<Part> {
        let v: Vec<u32> = s
            .split(',')
            .map(|p| p.trim().parse().ok())
            .collect::<Option<_>>()?;
        match v[..] {
            [x0, y0, w, h] if w > 0 && h > 0 => Some(Part { x0, y0, w, h }),
            _ => None,
        }
    }

    /// Mesh coordinate of `rank` (row-major inside the rectangle).
    pub fn coord(&self, rank: usize) -> (u32, u32) {
        let w = self.w as usize;
        (self.x0 + (rank % w) as u32, self.y0 + (rank / w) as u32)
    }

    /// North (y-1), south (y+1), east (x+1), west (x-1) ranks of `rank` inside
    /// the rectangle, `None` at an edge. `size` bounds them when the job has
    /// fewer ranks than cells.
    pub fn neighbours(&self, rank: usize, size: usize) -> Neighbours {
        let w = self.w as usize;
        let h = self.h as usize;
        let (x, y) = (rank % w, rank / w);
        let ok = |r: usize| (r < size).then_some(r);
        Neighbours {
            north: if y > 0 { ok(rank - w) } else { None },
            south: if y + 1 < h { ok(rank + w) } else { None },
            east: if x + 1 < w { ok(rank + 1) } else { None },
            west: if x > 0 { ok(rank - 1) } else { None },
        }
    }
}

/// A rank's mesh neighbours within the job's rectangle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Neighbours {
    pub north: Option<usize>,
    pub south: Option<usize>,
    pub east: Option<usize>,
    pub west: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_round_trip() {
        let ep = Endpoint {
            host: "h1".into(),
            unix: "/d/peer.sock".into(),
            tcp: "127.0.0.1:9".into(),
            token: "ab".into(),
        };
        assert_eq!(Endpoint::parse(&ep.encode()), Some(ep));
        assert_eq!(Endpoint::parse("unix=/x"), None);
    }

    #[test]
    fn part_coords_and_neighbours() {
        let p = Part::parse("2,1,3,2").unwrap();
        assert_eq!(p.coord(0), (2, 1));
        assert_eq!(p.coord(4), (3, 2));
        let n = p.neighbours(4, 6);
        assert_eq!(
            n,
            Neighbours {
                north: Some(1),
                south: None,
                east: Some(5),
                west: Some(3)
            }
        );
        let n = p.neighbours(0, 6);
        assert_eq!(
            n,
            Neighbours {
                north: None,
                south: Some(3),
                east: Some(1),
                west: None
            }
        );
        // A job with fewer ranks than cells has no neighbour past its last rank.
        assert_eq!(p.neighbours(2, 4).south, None);
        assert!(Part::parse("1,2,0,1").is_none());
        assert!(Part::parse("1,2,3").is_none());
    }
}
