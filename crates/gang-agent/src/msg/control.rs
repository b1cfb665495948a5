//! Each rank's control socket (`ctl.sock` in its messaging directory): the messaging
//! library's Hello, Put, Fence and Abort, from processes of the rank's own user only
//! (`SO_PEERCRED`). A fence goes to the job's key-value space (`space.rs`) with
//! everything the rank put.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::chown;
use std::path::Path;
use std::sync::{Arc, Mutex};

use gang_msg::abi::{CtlReply, CtlRequest, MAX_CTL_FRAME, files};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::space::Spaces;
use crate::ranks::RankKey;

/// The ranks' control-socket servers.
#[derive(Default)]
pub struct Controls {
    servers: Mutex<HashMap<RankKey, JoinHandle<()>>>,
}

impl Controls {
    /// Bind the rank's socket in `dir`, owned by `uid` (user, group; None: the agent's),
    /// and serve it. Must run inside the runtime (the socket is served by a task).
    pub fn start(
        &self,
        spaces: Arc<Spaces>,
        dir: &Path,
        key: RankKey,
        uid: Option<(u32, u32)>,
    ) -> std::io::Result<()> {
        let path = dir.join(files::CTL_SOCK);
        let listener = UnixListener::bind(&path)?;
        if let Some((uid, gid)) = uid {
            chown(&path, Some(uid), Some(gid))?;
        }
        let server = tokio::spawn(serve(spaces, listener, key, uid.map(|(u, _)| u)));
        if let Some(old) = self.servers.lock().unwrap().insert(key, server) {
            old.abort();
        }
        Ok(())
    }

    /// The rank is gone: stop serving its socket.
    pub fn stop(&self, key: RankKey) {
        if let Some(server) = self.servers.lock().unwrap().remove(&key) {
            server.abort();
        }
    }
}

/// Whether a peer of uid `peer` may speak for a rank of `rank_uid` (None: the agent's).
fn allowed(rank_uid: Option<u32>, peer: Option<u32>) -> bool {
    match (rank_uid, peer) {
        (_, Some(0)) => true,
        (Some(want), Some(got)) => want == got,
        (None, Some(got)) => got == nix::unistd::geteuid().as_raw(),
        (_, None) => false,
    }
}

/// Serve a rank's control socket, one connection after the other.
async fn serve(spaces: Arc<Spaces>, listener: UnixListener, key: RankKey, uid: Option<u32>) {
    // Everything the rank put, sent whole with each fence (a restarted master rebuilds
    // the job's space from them).
    let mut puts = BTreeMap::new();
    let mut epoch = 0u32;
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            return;
        };
        let peer = conn.peer_cred().ok().map(|c| c.uid());
        if !allowed(uid, peer) {
            warn!(
                job_id = key.job_id,
                rank = key.rank,
                ?peer,
                "control socket: a process of another user was refused"
            );
            continue;
        }
        converse(&spaces, &mut conn, key, &mut puts, &mut epoch).await;
    }
}

/// One connection's requests, until it closes or sends a bad frame.
async fn converse(
    spaces: &Spaces,
    conn: &mut UnixStream,
    key: RankKey,
    puts: &mut BTreeMap<String, String>,
    epoch: &mut u32,
) {
    loop {
        let req: CtlRequest = match read(conn).await {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(e) => {
                warn!(job_id = key.job_id, rank = key.rank, error = %e, "control socket: bad frame");
                return;
            }
        };
        match req {
            CtlRequest::Hello { pid, rank } => {
                info!(
                    job_id = key.job_id,
                    rank = key.rank,
                    pid,
                    said_rank = rank,
                    "messaging library started"
                );
            }
            CtlRequest::Put { key: k, value } => {
                puts.insert(k, value);
            }
            CtlRequest::Fence => {
                *epoch += 1;
                let reply = match spaces.fence(key, *epoch, puts).await {
                    Ok(kvs) => CtlReply::FenceDone { kvs },
                    Err(message) => CtlReply::Error { message },
                };
                if write(conn, &reply).await.is_err() {
                    return;
                }
            }
            CtlRequest::Abort { code, message } => {
                warn!(job_id = key.job_id, rank = key.rank, code, %message, "the rank aborted");
            }
        }
    }
}

async fn read(conn: &mut UnixStream) -> std::io::Result<Option<CtlRequest>> {
    let mut len = [0u8; 4];
    match conn.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len);
    if len > MAX_CTL_FRAME {
        return Err(std::io::Error::other(format!("a frame of {len} bytes")));
    }
    let mut body = vec![0u8; len as usize];
    conn.read_exact(&mut body).await?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(std::io::Error::other)
}

async fn write(conn: &mut UnixStream, reply: &CtlReply) -> std::io::Result<()> {
    let body = serde_json::to_vec(reply).map_err(std::io::Error::other)?;
    let mut buf = (body.len() as u32).to_le_bytes().to_vec();
    buf.extend_from_slice(&body);
    conn.write_all(&buf).await
}
