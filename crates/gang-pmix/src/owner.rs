//! The `pmix-server` thread: the only thread that calls into the library. Callers send it
//! requests over a channel and never block on the library themselves; it answers each in
//! the order asked (so a deregistration always follows the registration it undoes), and
//! records what it is doing since when, so that a caller can tell a stalled library from a
//! busy one without waiting on it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use crate::gate::{self, Clients};
use crate::{Error, Host, Job, Prepared, Registration, ServerConfig, ffi};

static STARTED: AtomicBool = AtomicBool::new(false);

enum Request {
    Prepare(Registration, Box<dyn FnOnce(Prepared) + Send>),
    Deregister(String, u32),
    Dmodex(String, u32, ffi::BlobDone),
}

/// The call the thread is in, and since when.
#[derive(Default)]
struct Busy(Mutex<Option<(Instant, String)>>);

impl Busy {
    fn run<T>(&self, what: String, f: impl FnOnce() -> T) -> T {
        *self.0.lock().unwrap() = Some((Instant::now(), what));
        let r = f();
        *self.0.lock().unwrap() = None;
        r
    }

    /// The call that has been running longer than `limit`, if one has.
    fn stalled(&self, limit: Duration) -> Option<(String, Duration)> {
        let busy = self.0.lock().unwrap();
        let (since, what) = busy.as_ref()?;
        let waited = since.elapsed();
        (waited > limit).then(|| (what.clone(), waited))
    }
}

pub struct Owner {
    tx: Mutex<mpsc::Sender<Request>>,
    busy: Arc<Busy>,
    clients: Arc<Clients>,
    call_timeout: Duration,
    inner: PathBuf,
}

impl Owner {
    pub fn start(config: &ServerConfig, host: Arc<dyn Host>) -> Result<Owner, Error> {
        if STARTED.swap(true, Ordering::SeqCst) {
            return Err(Error::AlreadyStarted);
        }
        let r = Self::spawn(config, host);
        if r.is_err() {
            STARTED.store(false, Ordering::SeqCst);
        }
        r
    }

    fn spawn(config: &ServerConfig, host: Arc<dyn Host>) -> Result<Owner, Error> {
        // The gate's files: the library's URI and the Unix socket it accepts on behind the
        // gate, where only this process's user can reach them.
        let gate_dir = config.tmpdir.join("gate");
        let _ = std::fs::remove_dir_all(&gate_dir);
        std::fs::create_dir_all(&gate_dir)
            .and_then(|()| {
                std::fs::set_permissions(&gate_dir, std::fs::Permissions::from_mode(0o700))
            })
            .map_err(|e| Error::Pmix(format!("cannot make {}: {e}", gate_dir.display())))?;
        let inner = gate_dir.join("pmix.sock");
        let clients = Arc::new(Clients::default());
        let busy = Arc::new(Busy::default());
        let (tx, rx) = mpsc::channel::<Request>();
        let (started_tx, started_rx) = mpsc::channel();
        let thread = {
            let (config, inner, clients, busy) = (
                config.clone(),
                inner.clone(),
                Arc::clone(&clients),
                Arc::clone(&busy),
            );
            std::thread::Builder::new()
                .name("pmix-server".into())
                .spawn(move || {
                    let started = busy.run("starting".into(), || {
                        start_gated(&config, &gate_dir, &inner, host, &clients)
                    });
                    let ok = started.is_ok();
                    let _ = started_tx.send(started);
                    if ok {
                        serve(rx, &busy, &clients);
                    }
                })
        };
        thread.map_err(|e| Error::Pmix(format!("cannot start the server's thread: {e}")))?;
        let waited = config.call_timeout;
        started_rx
            .recv_timeout(waited)
            .map_err(|_| Error::NotAnswering {
                what: "starting the server".into(),
                waited,
            })??;
        Ok(Owner {
            tx: Mutex::new(tx),
            busy,
            clients,
            call_timeout: config.call_timeout,
            inner,
        })
    }

    /// Queue a registration, unless the thread is stalled.
    pub fn prepare(
        &self,
        reg: Registration,
        done: Box<dyn FnOnce(Prepared) + Send>,
    ) -> Result<(), Error> {
        if let Some((what, waited)) = self.busy.stalled(self.call_timeout) {
            return Err(Error::NotAnswering {
                what: format!("{what} (still running)"),
                waited,
            });
        }
        self.send(Request::Prepare(reg, done))
    }

    /// Queue a direct modex request, unless the thread is stalled.
    pub fn dmodex(&self, nspace: &str, rank: u32, done: ffi::BlobDone) -> Result<(), Error> {
        if let Some((what, waited)) = self.busy.stalled(self.call_timeout) {
            return Err(Error::NotAnswering {
                what: format!("{what} (still running)"),
                waited,
            });
        }
        self.send(Request::Dmodex(nspace.to_string(), rank, done))
    }

    pub fn deregister(&self, nspace: &str, rank: u32) {
        self.clients.remove(nspace, rank);
        let _ = self.send(Request::Deregister(nspace.to_string(), rank));
    }

    fn send(&self, req: Request) -> Result<(), Error> {
        self.tx
            .lock()
            .unwrap()
            .send(req)
            .map_err(|_| Error::Pmix("the server's thread has ended".into()))
    }

    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    pub fn inner_socket(&self) -> PathBuf {
        self.inner.clone()
    }
}

/// Start the library, then take its listener over for the gate.
fn start_gated(
    config: &ServerConfig,
    gate_dir: &Path,
    inner: &Path,
    host: Arc<dyn Host>,
    clients: &Arc<Clients>,
) -> Result<(), Error> {
    let uri_file = gate_dir.join("uri");
    ffi::start(
        &ffi::Init {
            tmpdir: &config.tmpdir,
            uri_file: &uri_file,
            node_name: &config.node_name,
            server_nspace: &config.server_nspace,
            server_rank: config.server_rank,
        },
        Arc::clone(&host),
    )?;
    let gate_err = |e: String| Error::Pmix(format!("cannot put the gate in front of it: {e}"));
    let uri = std::fs::read_to_string(&uri_file)
        .map_err(|e| gate_err(format!("{}: {e}", uri_file.display())))?;
    let port = port_of(&uri).ok_or_else(|| gate_err(format!("no port in its URI {uri:?}")))?;
    let unix = std::os::unix::net::UnixListener::bind(inner)
        .map_err(|e| gate_err(format!("{}: {e}", inner.display())))?;
    let tcp = ffi::take_listener(port, &unix)?;
    // The library's descriptor now names the Unix socket; this one is no longer needed.
    drop(unix);
    gate::start(tcp.into(), inner.to_path_buf(), Arc::clone(clients), host)
        .map_err(|e| gate_err(e.to_string()))
}

/// The port of the library's URI, the report file's first line (the library's version
/// follows): `nspace.rank;tcp4://127.0.0.1:PORT`.
fn port_of(report: &str) -> Option<u16> {
    let addr = report.lines().next()?.trim().split_once(";tcp4://")?.1;
    addr.rsplit_once(':')?.1.parse().ok()
}

fn serve(rx: mpsc::Receiver<Request>, busy: &Busy, clients: &Clients) {
    for req in rx {
        match req {
            Request::Prepare(reg, done) => {
                // Let in before it is registered: the rank forks only after the answer,
                // and a claim before then finds the library does not know it.
                clients.insert(&reg.nspace, reg.my_rank, reg.uid);
                let what = format!("registering rank {} of {}", reg.my_rank, reg.nspace);
                let r = busy.run(what, || prepare_now(&reg));
                if r.is_err() {
                    clients.remove(&reg.nspace, reg.my_rank);
                }
                done(r);
            }
            Request::Dmodex(nspace, rank, done) => {
                // Non-blocking: the library answers on its own thread.
                let what = format!("asking for rank {rank} of {nspace}'s data");
                busy.run(what, || ffi::dmodex_request(&nspace, rank, done));
            }
            Request::Deregister(nspace, rank) => {
                // Only once the library has closed the rank's connection itself (see the
                // gate's module comment): cut at the client's side, it does so at once.
                let what = format!("waiting for the library to close rank {rank} of {nspace}");
                busy.run(what, || {
                    clients.cut(&nspace, rank);
                    clients.wait_closed(&nspace, rank, gate::LIBRARY_CLOSE_DEADLINE)
                });
                let what = format!("deregistering rank {rank} of {nspace}");
                busy.run(what, || ffi::deregister(&nspace, rank));
            }
        }
    }
}

fn prepare_now(reg: &Registration) -> Prepared {
    let job = Job {
        nspace: &reg.nspace,
        size: reg.size,
        my_rank: reg.my_rank,
        nodes: &reg.nodes,
    };
    ffi::register_job(&job)?;
    if let Err(e) = ffi::register_client(&reg.nspace, reg.my_rank, reg.uid, reg.gid) {
        ffi::deregister(&reg.nspace, reg.my_rank);
        return Err(e);
    }
    ffi::setup_fork(&reg.nspace, reg.my_rank).inspect_err(|_| {
        ffi::deregister(&reg.nspace, reg.my_rank);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_is_read_from_the_librarys_uri() {
        assert_eq!(
            port_of("gang-agent-0-0.0;tcp4://127.0.0.1:40123\nv4.2.2rc2\n"),
            Some(40123)
        );
        assert_eq!(port_of("x.0;tcp6://[::1]:4"), None);
        assert_eq!(port_of(""), None);
    }

    #[test]
    fn only_a_call_past_the_limit_is_stalled() {
        let busy = Busy::default();
        assert!(busy.stalled(Duration::ZERO).is_none());
        *busy.0.lock().unwrap() = Some((Instant::now() - Duration::from_secs(3), "x".into()));
        assert!(busy.stalled(Duration::from_secs(10)).is_none());
        let (what, waited) = busy.stalled(Duration::from_secs(2)).unwrap();
        assert_eq!(what, "x");
        assert!(waited >= Duration::from_secs(3));
    }
}
