//! A rank on a pseudo-terminal (`prun -u`, `--pty`, srun's): the agent opens the pair, the
//! rank gets the slave as its stdin, stdout, stderr and controlling terminal, so that a
//! program that buffers its output in a pipe (C stdio, Python) writes each line as it
//! prints it, and the agent reads the master side as the rank's stdout and writes the
//! job's stdin into it.
//!
//! The slave's line discipline is set so that what the rank writes arrives as written:
//! no echo of its input (prun's own terminal echoes what the user types), no `\n` to
//! `\r\n`, no signals or flow control from bytes of the input. Input stays canonical, a
//! line at a time as at a terminal, so that its end can be said with ^D, which is how the
//! rank's stdin ends (a hang-up instead would SIGHUP it).
//!
//! Reading the master is defensive: bounded reads by the pump, EIO (every slave closed:
//! the rank and whatever inherited its terminal are gone) is the end of the stream, and
//! a rank whose leftovers keep the slave open is cut off by the supervisor's drain limit.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use nix::sys::stat::Mode;
use nix::sys::termios::{self, InputFlags, LocalFlags, OutputFlags, SetArg};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, Interest, ReadBuf};
use tokio::sync::mpsc;
use tracing::debug;

use super::plan::RunAs;
use crate::ranks::{RankKey, StdinMsg};

/// ^D, the line discipline's end of input (VEOF): at the start of a line a read returns 0.
const EOF_CHAR: u8 = 0x04;

/// A rank's terminal: the agent's side and the rank's.
struct RankPty {
    master: OwnedFd,
    slave: OwnedFd,
}

/// Open a terminal for a rank that runs as `run_as`: the slave is that user's, mode 0620
/// (as login gives a terminal), and set to pass what the rank writes through unchanged.
fn open(run_as: &RunAs) -> io::Result<RankPty> {
    let pair = nix::pty::openpty(None, None)?;
    // Only the rank gets them, through its stdio: no other child may inherit them.
    for fd in [&pair.master, &pair.slave] {
        set_cloexec(fd.as_raw_fd())?;
    }
    if let RunAs::User { uid, .. } = run_as {
        nix::unistd::fchown(&pair.slave, Some((*uid).into()), None)?;
    }
    nix::sys::stat::fchmod(&pair.slave, Mode::from_bits_truncate(0o620))?;
    let mut t = termios::tcgetattr(&pair.slave)?;
    t.local_flags.remove(
        LocalFlags::ECHO
            | LocalFlags::ECHOE
            | LocalFlags::ECHOK
            | LocalFlags::ECHONL
            | LocalFlags::ECHOCTL
            | LocalFlags::ECHOKE
            | LocalFlags::ISIG
            | LocalFlags::IEXTEN,
    );
    t.local_flags.insert(LocalFlags::ICANON);
    t.input_flags
        .remove(InputFlags::IXON | InputFlags::IXOFF | InputFlags::ICRNL | InputFlags::INLCR);
    t.output_flags.remove(OutputFlags::OPOST);
    termios::tcsetattr(&pair.slave, SetArg::TCSANOW, &t)?;
    set_nonblocking(pair.master.as_raw_fd())?;
    Ok(RankPty {
        master: pair.master,
        slave: pair.slave,
    })
}

fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// In the forked child, with the slave already its stdin: a session of its own (so also
/// its own process group, as other ranks have) with the slave as its controlling
/// terminal. Async-signal-safe (two system calls).
pub fn take_terminal() -> io::Result<()> {
    // SAFETY: plain system calls in the child before exec.
    unsafe {
        if libc::setsid() < 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The master, watched by the runtime for `interest`.
fn register(master: OwnedFd, interest: Interest) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an owned descriptor stays open, and the same, for as long as it is owned.
    Ok(unsafe { AsyncFd::register_with_interest(master, interest) }?)
}

/// The master side, read as the rank's output: EIO (no slave open any more) is its end.
pub struct PtyReader(AsyncFd<OwnedFd>);

impl PtyReader {
    pub fn new(master: OwnedFd) -> io::Result<PtyReader> {
        Ok(PtyReader(register(master, Interest::READABLE)?))
    }
}

/// A rank's terminal, ready before the fork: the slave for the child, the master's
/// descriptors for the agent (read, kept, and written: dups made now, as nothing may fail
/// once the rank runs).
pub struct Terminal {
    pub slave: OwnedFd,
    master: PtyMaster,
    writer: OwnedFd,
}

impl Terminal {
    pub fn open(run_as: &RunAs) -> io::Result<Terminal> {
        let pty = open(run_as)?;
        let writer = writer_of(&pty.master)?;
        let keep = writer_of(&pty.master)?;
        Ok(Terminal {
            slave: pty.slave,
            master: PtyMaster {
                reader: PtyReader::new(pty.master)?,
                keep,
            },
            writer,
        })
    }

    /// The rank has the slave: the agent's copy goes; its master side and stdin writer.
    pub fn spawned(self) -> (PtyMaster, OwnedFd) {
        (self.master, self.writer)
    }
}

/// The master side as the supervisor has it: its reader, and a descriptor that keeps the
/// terminal up until the rank is reaped. A program that closes its stdio before it exits
/// (cat, every coreutil) ends the reader's stream while it still runs; were the master
/// closed then, the terminal would hang up and SIGHUP the rank in its last instructions.
pub struct PtyMaster {
    pub reader: PtyReader,
    pub keep: OwnedFd,
}

impl AsyncRead for PtyReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.0.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let read = guard.try_io(|fd| {
                // SAFETY: reads into a buffer of `unfilled.len()` initialized bytes.
                let n = unsafe {
                    libc::read(fd.as_raw_fd(), unfilled.as_mut_ptr().cast(), unfilled.len())
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match read {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Poll::Ready(Ok(())),
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

/// Write all of `data` to the master, waiting while the terminal's input is full.
async fn write_all(fd: &AsyncFd<OwnedFd>, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        let mut guard = fd.writable().await?;
        let wrote = guard.try_io(|fd| {
            // SAFETY: writes from a live slice of `data.len()` bytes.
            let n = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        });
        match wrote {
            Ok(Ok(n)) => data = &data[n..],
            Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => {}
        }
    }
    Ok(())
}

/// What ends the input: ^D after a newline (or nothing), twice after a partial line (the
/// first only hands that line over).
fn end_of_input(last: Option<u8>) -> &'static [u8] {
    match last {
        None | Some(b'\n') => &[EOF_CHAR],
        Some(_) => &[EOF_CHAR, EOF_CHAR],
    }
}

/// The job's stdin into the rank's terminal, in order; `Eof`, or the channel closing, ends
/// the input with ^D (the terminal stays: closing it would hang the rank up).
pub async fn feed(master: OwnedFd, mut rx: Option<mpsc::Receiver<StdinMsg>>, key: RankKey) {
    let fd = match register(master, Interest::WRITABLE) {
        Ok(fd) => fd,
        Err(e) => {
            debug!(job_id = key.job_id, rank = key.rank, "pty input: {e}");
            return;
        }
    };
    let mut last = None;
    while let Some(msg) = match rx.as_mut() {
        Some(rx) => rx.recv().await,
        None => None,
    } {
        let StdinMsg::Data(data) = msg else { break };
        if let Err(e) = write_all(&fd, &data).await {
            // The rank and its terminal are gone: later data has nowhere to go.
            debug!(
                job_id = key.job_id,
                rank = key.rank,
                "pty input closed: {e}"
            );
            return;
        }
        last = data.last().copied().or(last);
    }
    let _ = write_all(&fd, end_of_input(last)).await;
}

/// A second descriptor of the master: one is read, the other written (or kept).
fn writer_of(master: &OwnedFd) -> io::Result<OwnedFd> {
    let fd = master.as_fd().try_clone_to_owned()?;
    set_cloexec(fd.as_raw_fd())?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use tokio::io::AsyncReadExt;

    #[test]
    fn input_ends_with_one_eof_after_a_line_and_two_after_a_partial_one() {
        assert_eq!(end_of_input(None), [EOF_CHAR]);
        assert_eq!(end_of_input(Some(b'\n')), [EOF_CHAR]);
        assert_eq!(end_of_input(Some(b'x')), [EOF_CHAR, EOF_CHAR]);
    }

    /// The slave passes bytes through unchanged and does not echo; once it is closed, the
    /// master reads what was left, then its end.
    #[tokio::test]
    async fn output_arrives_as_written_and_the_end_is_eof() {
        let pty = open(&RunAs::Agent).unwrap();
        let mode = nix::sys::stat::fstat(&pty.slave).unwrap().st_mode & 0o777;
        assert_eq!(mode, 0o620);
        let writer = writer_of(&pty.master).unwrap();
        let keep = writer_of(&pty.master).unwrap();
        let mut slave = std::fs::File::from(pty.slave);
        slave.write_all(b"one\ntwo").unwrap();
        let (tx, rx) = mpsc::channel(4);
        tx.send(StdinMsg::Data(b"in\n".to_vec())).await.unwrap();
        tx.send(StdinMsg::Eof).await.unwrap();
        feed(writer, Some(rx), RankKey { job_id: 1, rank: 0 }).await;
        // Canonical input: the line, then ^D's end of input (a read of 0).
        let mut line = [0u8; 16];
        let n = slave.read(&mut line).unwrap();
        assert_eq!(&line[..n], b"in\n");
        assert_eq!(slave.read(&mut line).unwrap(), 0);
        drop(slave);
        let mut reader = PtyReader::new(pty.master).unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            reader.read_to_end(&mut out),
        )
        .await
        .expect("EIO ends the stream")
        .unwrap();
        // No "\r\n", and the input was not echoed.
        assert_eq!(out, b"one\ntwo");
        drop(keep);
    }
}
