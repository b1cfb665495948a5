//! The host's process table as tests read it (from /proc): what a cluster, a dead agent or
//! a signalled `gangctl start` leaves behind. One reader for every test that counts
//! processes.

/// A process, from /proc.
#[derive(Debug, Clone)]
pub struct ProcEntry {
    pub pid: i32,
    pub ppid: i32,
    /// The state letter of /proc/PID/stat (`R`, `S`, `T`, `Z`, ...).
    pub state: char,
    /// The command line, arguments joined by spaces.
    pub cmdline: String,
}

impl ProcEntry {
    /// Not a zombie (exited, not yet reaped) nor dead.
    pub fn alive(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }

    /// Its environment (`NAME=value` each); empty if it is gone or not ours to read.
    pub fn env(&self) -> Vec<String> {
        std::fs::read(format!("/proc/{}/environ", self.pid))
            .map(|b| {
                b.split(|&c| c == 0)
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Every process this process can see.
pub fn all_procs() -> Vec<ProcEntry> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // "pid (comm) S ppid ...": comm may hold spaces and parentheses.
        let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
        let state = rest.next()?.chars().next()?;
        let ppid = rest.next()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .trim_end_matches('\0')
                    .replace('\0', " ")
            })
            .unwrap_or_default();
        Some(ProcEntry {
            pid,
            ppid,
            state,
            cmdline,
        })
    })
    .collect()
}

/// Every process below `root`, by ppid links.
pub fn descendants_of(root: i32) -> Vec<ProcEntry> {
    let all = all_procs();
    let mut found: Vec<ProcEntry> = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for p in all.iter().filter(|p| p.ppid == parent) {
            if !found.iter().any(|f| f.pid == p.pid) {
                frontier.push(p.pid);
                found.push(p.clone());
            }
        }
    }
    found
}

/// Every process below this one.
pub fn descendants() -> Vec<ProcEntry> {
    descendants_of(std::process::id() as i32)
}
