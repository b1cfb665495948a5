//! Start-up: map the pages, bind the listeners, exchange endpoints through
//! the agent's control socket (Hello, Put, Fence), start the progress thread.

use std::os::unix::net::UnixStream;
use std::sync::Arc;

use crate::abi::{
    CtlReply, CtlRequest, Endpoint, StatePage, TablePage, endpoint_key, files, read_frame,
    write_frame,
};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::progress::Progress;
use crate::shared::Shared;
use crate::transport;

pub struct Started {
    pub shared: Arc<Shared>,
    pub progress: std::thread::JoinHandle<()>,
    pub ctl: Option<UnixStream>,
}

pub fn start(cfg: &Config) -> Result<Started> {
    let (state, table) = match &cfg.dir {
        Some(dir) => {
            let sp = dir.join(files::STATE_PAGE);
            let tp = dir.join(files::TABLE_PAGE);
            let state = match cfg.state_fd {
                Some(fd) => StatePage::open_write_fd(fd)
                    .map_err(|e| Error::io(format!("state page (descriptor {fd})"), e))?,
                None => StatePage::open_write(&sp)
                    .map_err(|e| Error::io(format!("state page {}", sp.display()), e))?,
            };
            (
                state,
                TablePage::open_read(&tp)
                    .map_err(|e| Error::io(format!("table page {}", tp.display()), e))?,
            )
        }
        None => (
            StatePage::anonymous().map_err(|e| Error::io("state page", e))?,
            TablePage::anonymous().map_err(|e| Error::io("table page", e))?,
        ),
    };
    let lst = transport::bind(cfg)?;
    let (eps, ctl) = match &cfg.dir {
        Some(dir) => {
            let (eps, ctl) = exchange(cfg, dir, &lst.endpoint)?;
            (eps, Some(ctl))
        }
        None => (vec![lst.endpoint.clone()], None),
    };
    let shared = Arc::new(
        Shared::new(cfg.rank, cfg.size, state, table, cfg.spin_us)
            .map_err(|e| Error::io("eventfd", e))?,
    );
    let progress = Progress::new(shared.clone(), cfg.clone(), lst, eps);
    let progress = std::thread::Builder::new()
        .name("gang-msg-progress".into())
        .spawn(move || progress.run())
        .map_err(|e| Error::io("spawn the progress thread", e))?;
    Ok(Started {
        shared,
        progress,
        ctl,
    })
}

/// Put our endpoint, fence, and read every rank's.
fn exchange(
    cfg: &Config,
    dir: &std::path::Path,
    me: &Endpoint,
) -> Result<(Vec<Endpoint>, UnixStream)> {
    let path = dir.join(files::CTL_SOCK);
    let mut ctl = UnixStream::connect(&path)
        .map_err(|e| Error::io(format!("connect {}", path.display()), e))?;
    let io = |e| Error::io("control socket", e);
    write_frame(
        &mut ctl,
        &CtlRequest::Hello {
            pid: std::process::id(),
            rank: cfg.rank as u32,
        },
    )
    .map_err(io)?;
    write_frame(
        &mut ctl,
        &CtlRequest::Put {
            key: endpoint_key(cfg.rank),
            value: me.encode(),
        },
    )
    .map_err(io)?;
    write_frame(&mut ctl, &CtlRequest::Fence).map_err(io)?;
    let kvs = match read_frame::<CtlReply>(&mut ctl).map_err(io)? {
        Some(CtlReply::FenceDone { kvs }) => kvs,
        Some(CtlReply::Error { message }) => return Err(Error::Ctl(message)),
        None => {
            return Err(Error::Ctl(
                "the agent closed the control socket during the fence".into(),
            ));
        }
    };
    let eps = (0..cfg.size)
        .map(|r| {
            let v = kvs
                .get(&endpoint_key(r))
                .ok_or_else(|| Error::Ctl(format!("no endpoint for rank {r} after the fence")))?;
            Endpoint::parse(v)
                .ok_or_else(|| Error::Ctl(format!("rank {r}'s endpoint {v:?} does not parse")))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((eps, ctl))
}

/// Tell the agent this rank gives up (best effort: the process exits next).
pub fn abort(ctl: Option<&mut UnixStream>, code: i32, message: &str) {
    if let Some(ctl) = ctl {
        let _ = write_frame(
            ctl,
            &CtlRequest::Abort {
                code,
                message: message.to_string(),
            },
        );
    }
}
