//! Each rank's control socket (`ctl.sock` in its messaging directory): the messaging
//! library's Hello, Put, Fence and Abort, from processes of the rank's own user only
//! (`SO_PEERCRED`). A fence goes to the job's key-value space (`space.rs`) with
//! everything the rank put.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::chown;
use std::path::Path;
use std::sync::{Arc, Mutex};

use gang_msg::abi::{
    CTL_KEY_MAX, CTL_PUTS_MAX, CTL_VALUE_MAX, CtlReply, CtlRequest, MAX_CTL_FRAME, files,
};
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
    let mut rank = RankCtl::default();
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
        converse(&spaces, &mut conn, key, &mut rank).await;
    }
}

/// One connection's requests, until it closes or sends a bad frame.
async fn converse(spaces: &Spaces, conn: &mut UnixStream, key: RankKey, rank: &mut RankCtl) {
    loop {
        let req: CtlRequest = match read(conn).await {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(e) => {
                warn!(job_id = key.job_id, rank = key.rank, error = %e, "control socket: bad frame");
                return;
            }
        };
        let reply = match rank.take(key, req) {
            CtlStep::Nothing => continue,
            CtlStep::Refuse(message) => CtlReply::Error { message },
            CtlStep::Fence(epoch) => match spaces.fence(key, epoch, &rank.puts).await {
                Ok(kvs) => CtlReply::FenceDone {
                    kvs: (*kvs).clone(),
                },
                Err(message) => CtlReply::Error { message },
            },
        };
        if write(conn, &reply).await.is_err() {
            return;
        }
    }
}

/// What the agent keeps of a rank's control socket across its connections: everything
/// the rank put, sent whole with each fence (a restarted master rebuilds the job's space
/// from them), within limits.
#[derive(Debug, Default)]
pub(crate) struct RankCtl {
    pub(crate) puts: BTreeMap<String, String>,
    /// Bytes of the keys and values in `puts` (at most `CTL_PUTS_MAX`).
    pub(crate) held: usize,
    pub(crate) epoch: u32,
    /// A put dropped since the last fence: the next fence is refused with this.
    refused: Option<String>,
}

/// What to do for a request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum CtlStep {
    /// No reply.
    Nothing,
    /// The fence of this epoch, with `puts`; reply with its answer.
    Fence(u32),
    /// Reply with this error.
    Refuse(String),
}

impl RankCtl {
    /// Take a decoded request (the pure part of the conversation).
    pub(crate) fn take(&mut self, key: RankKey, req: CtlRequest) -> CtlStep {
        match req {
            CtlRequest::Hello { pid, rank } => {
                info!(
                    job_id = key.job_id,
                    rank = key.rank,
                    pid,
                    said_rank = rank,
                    "messaging library started"
                );
                CtlStep::Nothing
            }
            CtlRequest::Put { key: k, value } => {
                if let Err(why) = self.put(k, value) {
                    warn!(
                        job_id = key.job_id,
                        rank = key.rank,
                        "control socket: {why}"
                    );
                    self.refused.get_or_insert(why);
                }
                CtlStep::Nothing
            }
            CtlRequest::Fence => {
                if let Some(why) = self.refused.take() {
                    return CtlStep::Refuse(why);
                }
                self.epoch = self.epoch.saturating_add(1);
                CtlStep::Fence(self.epoch)
            }
            CtlRequest::Abort { code, message } => {
                warn!(job_id = key.job_id, rank = key.rank, code, %message, "the rank aborted");
                CtlStep::Nothing
            }
        }
    }

    fn put(&mut self, k: String, value: String) -> Result<(), String> {
        if k.len() > CTL_KEY_MAX || value.len() > CTL_VALUE_MAX {
            return Err(format!(
                "a put of a {}-byte key and a {}-byte value was dropped: keys are at most \
                 {CTL_KEY_MAX} bytes, values at most {CTL_VALUE_MAX}",
                k.len(),
                value.len()
            ));
        }
        let old = self.puts.get(&k).map_or(0, |v| k.len() + v.len());
        let held = self.held - old + k.len() + value.len();
        if held > CTL_PUTS_MAX {
            return Err(format!(
                "a put of key {k:?} was dropped: the rank's puts would hold {held} bytes, \
                 over the limit of {CTL_PUTS_MAX}"
            ));
        }
        self.puts.insert(k, value);
        self.held = held;
        Ok(())
    }
}

/// One request from the rank: `Ok(None)` at a clean end; the frame's body is allocated
/// only once its length is known to be within `MAX_CTL_FRAME`.
pub(crate) async fn read<R: tokio::io::AsyncRead + Unpin>(
    conn: &mut R,
) -> std::io::Result<Option<CtlRequest>> {
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
    // Grown as bytes arrive: a length alone (a peer that then goes quiet) costs nothing.
    let mut body = Vec::new();
    (&mut *conn)
        .take(u64::from(len))
        .read_to_end(&mut body)
        .await?;
    if body.len() < len as usize {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("the connection ended inside a frame of {len} bytes"),
        ));
    }
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
