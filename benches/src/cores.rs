//! Where a bench's daemons run on this machine's cores: the emulated fleet shares the
//! master's two cores, so without this its work is the master's lost time and the
//! master's figures are partly the fleet's.
//!
//! Nice and affinity are per thread on Linux, so they are set on every thread a process
//! has now; threads it starts later inherit them from the thread that starts them.

use std::io;

/// Set `nice` and, if given, the CPUs of every thread of `pid`. The number of threads set.
pub fn nice_and_pin(pid: u32, nice: i32, cpus: Option<&[usize]>) -> io::Result<usize> {
    let mut done = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let Some(tid) = entry?
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: setpriority has no memory preconditions; a thread that ended meanwhile
        // makes it fail with ESRCH, which is skipped.
        let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ESRCH) {
                continue;
            }
            return Err(e);
        }
        if let Some(cpus) = cpus {
            let mut set = nix::sched::CpuSet::new();
            for &c in cpus {
                set.set(c).map_err(io::Error::other)?;
            }
            match nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(tid), &set) {
                Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
                Err(e) => return Err(e.into()),
            }
        }
        done += 1;
    }
    Ok(done)
}

/// `"0"`, `"1-3"`, `"0,2"`: a CPU list as taskset takes it; empty: none.
pub fn parse_cpus(list: &str) -> Result<Vec<usize>, String> {
    let mut out = vec![];
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("CPU list {list:?}: {part:?} is not N or N-M");
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
        if a > b || b >= 1024 {
            return Err(bad());
        }
        out.extend(a..=b);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_read_as_taskset_reads_them() {
        assert_eq!(parse_cpus("0").unwrap(), vec![0]);
        assert_eq!(parse_cpus("1-3,5").unwrap(), vec![1, 2, 3, 5]);
        assert_eq!(parse_cpus("").unwrap(), Vec::<usize>::new());
        assert!(parse_cpus("3-1").is_err());
        assert!(parse_cpus("x").is_err());
    }

    #[test]
    fn a_process_can_be_niced_thread_by_thread() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let n = nice_and_pin(child.id(), 7, Some(&[0])).unwrap();
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
        let nice: i32 = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .nth(16)
            .unwrap()
            .parse()
            .unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!((n, nice), (1, 7));
    }
}
