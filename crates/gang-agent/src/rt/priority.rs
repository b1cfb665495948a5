//! Real-time scheduling for the agent's own threads that user ranks must never starve: the
//! switch thread (it stops and continues jobs at slot boundaries) and the session thread
//! (its heartbeats are how the master knows this node is alive).

use std::io;

use tracing::{info, warn};

/// Ask for SCHED_FIFO at `priority` for the calling thread (0 or less: do not ask), and log
/// the outcome naming `who`. Returns whether the thread got it.
pub fn request_fifo(who: &str, priority: i32) -> bool {
    if priority <= 0 {
        info!("{who} at normal priority (real-time priority not requested)");
        return false;
    }
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pid 0 is the calling thread; a valid parameter pointer. RESET_ON_FORK: a
    // child of this thread would not inherit it (ranks are forked elsewhere, but never
    // let a rank start real-time by accident).
    let set = || unsafe {
        libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param)
    };
    let mut r = set();
    if r != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EPERM) {
        // Root, refused: a cgroup without a real-time budget (crate::rt::budget).
        match crate::rt::budget::grant() {
            Ok(changed) if !changed.is_empty() => {
                for (dir, us) in &changed {
                    info!(
                        cgroup = %dir.display(),
                        rt_runtime_us = us,
                        "gave the agent's cgroup a real-time budget (the kernel schedules real-time threads by cgroup)"
                    );
                }
                r = set();
            }
            Ok(_) => {}
            Err(e) => info!("no real-time budget for the agent's cgroup: {e}"),
        }
    }
    if r == 0 {
        info!(priority, "{who} running SCHED_FIFO");
        true
    } else {
        let e = io::Error::last_os_error();
        warn!(
            priority,
            "{who} cannot get real-time priority (SCHED_FIFO): {e}; running at normal priority, with more latency under load"
        );
        false
    }
}
