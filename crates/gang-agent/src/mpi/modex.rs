//! PMIx direct modex (issue 37, "fences in milliseconds"): when a fence does not collect
//! the ranks' data (Open MPI's `pmix_base_collect_data=0` with `pmix_base_async_modex=1`),
//! a rank that needs a peer's data asks its PMIx server, whose library asks the agent
//! (`direct_modex`); the agent fetches that one rank's blob from the node that runs it
//! (`NodeRelay.Modex`), whose agent asks its own library for it
//! (`PMIx_server_dmodex_request`, which waits for the rank's commit).
//!
//! Where each rank runs: its node is its place in the job's part (the master's order);
//! where that node's agent listens is put by every rank's agent at the job's first PMIx
//! fence (`pmix.at.R`, a few bytes a rank, once), so a fence that carries no blob still
//! brings every rank's address. Open MPI fences once in `MPI_Init` before any message,
//! so a request waits for that fence at most [`MODEX_WAIT`].
//!
//! Trust: a node answers only callers whose certificate names a node of the job's part,
//! only for its own rank of that job; answers are bounded ([`MODEX_MAX`]) both ways.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gang_proto::v1::ModexRequest;
use tonic::{Code, Status};
use tracing::debug;

use crate::error::Coord;

/// The longest a rank's blob may be (Open MPI's is a few hundred bytes a transport).
pub const MODEX_MAX: usize = 1 << 20;
/// The longest a request waits: for the addresses' fence, for the rank's node to have it
/// registered, and for the rank to put. PMIx's clients wait as long as their host does.
pub const MODEX_WAIT: Duration = Duration::from_secs(60);

const ADDRESS_PREFIX: &str = "pmix.at.";

/// Where the job's ranks' agents listen, by rank.
pub type Addresses = Arc<HashMap<u32, String>>;

/// The key under which rank `rank`'s agent puts its address.
pub fn address_key(rank: u32) -> String {
    format!("{ADDRESS_PREFIX}{rank}")
}

/// Every rank's address in a fence's space (none before the first PMIx fence).
pub fn addresses(space: &BTreeMap<String, String>) -> HashMap<u32, String> {
    space
        .range(ADDRESS_PREFIX.to_string()..)
        .map_while(|(k, v)| Some((k.strip_prefix(ADDRESS_PREFIX)?, v)))
        .filter_map(|(r, v)| Some((r.parse().ok()?, v.clone())))
        .collect()
}

/// A job's part as the master ordered it: rank r on (x0 + r mod w, y0 + r div w).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub x0: u32,
    pub y0: u32,
    pub w: u32,
    pub size: u32,
}

impl Part {
    pub fn new(part: Option<(u32, u32, u32, u32)>, size: u32) -> Option<Part> {
        let (x0, y0, w, _) = part?;
        (w > 0).then_some(Part { x0, y0, w, size })
    }

    pub fn node_of(&self, r: u32) -> Coord {
        Coord {
            x: self.x0 + r % self.w,
            y: self.y0 + r / self.w,
        }
    }

    /// The rank that runs on `node`, if one of the job's does.
    pub fn rank_on(&self, node: Coord) -> Option<u32> {
        let dx = node.x.checked_sub(self.x0).filter(|&dx| dx < self.w)?;
        let dy = node.y.checked_sub(self.y0)?;
        let r = u64::from(dy) * u64::from(self.w) + u64::from(dx);
        (r < u64::from(self.size)).then_some(r as u32)
    }
}

/// What the fetching side needs from the agent: its own address (for the first fence)
/// and a call to another node.
pub trait ModexPeers: Send + Sync + 'static {
    fn own_address(&self) -> Option<String>;
    fn modex(
        &self,
        node: Coord,
        address: String,
        req: ModexRequest,
    ) -> impl std::future::Future<Output = Result<Vec<u8>, Status>> + Send;
}

/// Fetch `req.rank`'s blob from `node` at `address`, retried while that node has no rank
/// of the job yet (a late launch) or is away, until [`MODEX_WAIT`] after `since`; the
/// PMIx status to fail the request with otherwise.
pub async fn fetch<P: ModexPeers>(
    peers: &P,
    node: Coord,
    address: String,
    req: ModexRequest,
    since: Instant,
) -> Result<Vec<u8>, i32> {
    let mut delay = Duration::from_millis(10);
    loop {
        let left = MODEX_WAIT.saturating_sub(since.elapsed());
        let call = peers.modex(node, address.clone(), req.clone());
        let status = match tokio::time::timeout(left, call).await {
            Ok(Ok(blob)) if blob.len() <= MODEX_MAX => return Ok(blob),
            Ok(Ok(blob)) => {
                debug!(
                    rank = req.rank,
                    bytes = blob.len(),
                    "PMIx direct modex: too long"
                );
                return Err(gang_pmix::NOT_FOUND);
            }
            Ok(Err(s)) => s,
            Err(_) => return Err(gang_pmix::TIMEOUT),
        };
        debug!(rank = req.rank, %node, "PMIx direct modex: {}", status.message());
        match status.code() {
            Code::NotFound | Code::Unavailable | Code::Unknown | Code::Cancelled => {}
            Code::DeadlineExceeded => return Err(gang_pmix::TIMEOUT),
            _ => return Err(gang_pmix::NOT_FOUND),
        }
        if since.elapsed() + delay >= MODEX_WAIT {
            return Err(gang_pmix::TIMEOUT);
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}

/// The library's answer for a peer, as the RPC's.
pub fn answer(result: Result<gang_pmix::BlobResult, ()>, rank: u32) -> Result<Vec<u8>, Status> {
    match result {
        Ok(Ok(blob)) if blob.len() <= MODEX_MAX => Ok(blob),
        Ok(Ok(blob)) => Err(Status::resource_exhausted(format!(
            "rank {rank}'s data is {} bytes, over {MODEX_MAX}",
            blob.len()
        ))),
        Ok(Err(status)) => Err(Status::not_found(format!(
            "rank {rank}'s data: PMIx status {status}"
        ))),
        Err(()) => Err(Status::deadline_exceeded(format!(
            "rank {rank} has not put its data within {} s",
            MODEX_WAIT.as_secs()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_names_each_ranks_node_and_no_other() {
        let p = Part::new(Some((2, 1, 3, 2)), 5).unwrap();
        assert_eq!(p.node_of(4), Coord { x: 3, y: 2 });
        assert_eq!(p.rank_on(Coord { x: 3, y: 2 }), Some(4));
        assert_eq!(p.rank_on(Coord { x: 2, y: 1 }), Some(0));
        // Inside the rectangle but past the job's size; outside it.
        assert_eq!(p.rank_on(Coord { x: 4, y: 2 }), None);
        assert_eq!(p.rank_on(Coord { x: 5, y: 1 }), None);
        assert_eq!(p.rank_on(Coord { x: 1, y: 1 }), None);
        assert_eq!(p.rank_on(Coord { x: 2, y: 0 }), None);
        assert_eq!(Part::new(None, 5), None);
    }

    #[test]
    fn addresses_are_read_from_their_keys_only() {
        let space = BTreeMap::from([
            (address_key(0), "a:1".to_string()),
            (address_key(12), "b:2".to_string()),
            ("pmix.1.0".to_string(), "blob".to_string()),
            ("pmix.at.x".to_string(), "junk".to_string()),
            ("zz".to_string(), "z".to_string()),
        ]);
        let a = addresses(&space);
        assert_eq!(a.len(), 2);
        assert_eq!(a[&0], "a:1");
        assert_eq!(a[&12], "b:2");
    }

    #[test]
    fn the_librarys_answer_is_bounded() {
        assert_eq!(answer(Ok(Ok(vec![1, 2])), 3).unwrap(), vec![1, 2]);
        let big = answer(Ok(Ok(vec![0; MODEX_MAX + 1])), 3).unwrap_err();
        assert_eq!(big.code(), Code::ResourceExhausted);
        assert_eq!(answer(Ok(Err(-46)), 3).unwrap_err().code(), Code::NotFound);
        assert_eq!(
            answer(Err(()), 3).unwrap_err().code(),
            Code::DeadlineExceeded
        );
    }
}
