//! The switch thread: one std thread per agent that sleeps to absolute deadlines on the
//! master clock and, at each slot boundary, switches out the outgoing ranks first and then
//! switches in the incoming ones.
//!
//! Sleeping: a `timerfd` on CLOCK_REALTIME armed with TFD_TIMER_ABSTIME at
//! `deadline - offset` (the same hrtimer as `clock_nanosleep(TIMER_ABSTIME)`), polled
//! together with an `eventfd` the async side writes to when the plan (or the clock offset)
//! changes. Unlike a signal sent to interrupt `clock_nanosleep`, an eventfd write cannot be
//! lost between checking for a new plan and going to sleep.
//!
//! Hot path: the plan is read through `ArcSwap` (no lock); the lists are precomputed; the
//! actions are single system calls; the record goes to a preallocated lock-free ring.
//! Nothing allocates, nothing logs. Errors are counted in atomics and logged by the
//! reporter.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

use arc_swap::ArcSwap;

use crate::rt::clock::{Clock, realtime_ns};
use crate::switch::actions::{Acts, Target};
use crate::switch::plan::{Plan, Want};
use crate::switch::ring::{Record, Ring};

/// What the switch thread works from: a plan and the ranks its indices refer to.
#[derive(Debug, Default)]
pub struct SwitchPlan {
    pub generation: u64,
    pub plan: Plan,
    pub targets: Vec<Arc<Target>>,
}

/// Shared between the switch thread and the async side.
#[derive(Debug)]
pub struct Shared {
    pub plan: ArcSwap<SwitchPlan>,
    pub clock: Arc<Clock>,
    pub ring: Ring,
    wake: OwnedFd,
    pub stop: AtomicBool,
    /// The generation of the plan the thread holds (older ones can be freed).
    pub seen_generation: AtomicU64,
    /// Boundaries at which the thread acted.
    pub switches: AtomicU64,
    /// Failed actions (other than "no such process"), and the last errno.
    pub errors: AtomicU64,
    pub last_errno: AtomicI32,
    /// Whether the thread got SCHED_FIFO.
    pub realtime: AtomicBool,
    /// Switch-outs of messaging-library ranks that had quiesced for the boundary, and
    /// those that had not (switched out anyway: the switch never waits).
    pub msg_flushed: AtomicU64,
    pub msg_unflushed: AtomicU64,
    /// Wake this long before each deadline and spin to it (0: sleep to the deadline).
    spin_ns: i64,
}

impl Shared {
    pub fn new(clock: Arc<Clock>, ring_capacity: usize, spin_ns: i64) -> io::Result<Self> {
        // SAFETY: eventfd(2) returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Shared {
            plan: ArcSwap::from_pointee(SwitchPlan::default()),
            clock,
            ring: Ring::new(ring_capacity),
            // SAFETY: a fresh descriptor nobody else owns.
            wake: unsafe { OwnedFd::from_raw_fd(fd) },
            stop: AtomicBool::new(false),
            seen_generation: AtomicU64::new(0),
            switches: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            last_errno: AtomicI32::new(0),
            realtime: AtomicBool::new(false),
            msg_flushed: AtomicU64::new(0),
            msg_unflushed: AtomicU64::new(0),
            spin_ns: spin_ns.max(0),
        })
    }

    /// Wake the thread: it reloads the plan and re-arms its timer.
    pub fn kick(&self) {
        let one: u64 = 1;
        // SAFETY: an 8-byte write to our eventfd. EAGAIN (counter full) means a wake-up
        // is pending anyway.
        unsafe {
            libc::write(
                self.wake.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }
}

/// A CLOCK_REALTIME timerfd armed at absolute times.
struct Timer(OwnedFd);

impl Timer {
    fn new() -> io::Result<Self> {
        // SAFETY: timerfd_create returns a new descriptor or -1.
        let fd = unsafe {
            libc::timerfd_create(libc::CLOCK_REALTIME, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(Timer(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Fire at `at_ns` on CLOCK_REALTIME (at once if that is past); None disarms.
    fn arm(&self, at_ns: Option<i64>) {
        let value = match at_ns {
            // A zero it_value would disarm: the past is 1 ns after the epoch.
            Some(ns) => {
                let ns = ns.max(1);
                libc::timespec {
                    tv_sec: ns.div_euclid(1_000_000_000),
                    tv_nsec: ns.rem_euclid(1_000_000_000),
                }
            }
            None => libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
        };
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: value,
        };
        // SAFETY: valid descriptor and pointers.
        unsafe {
            libc::timerfd_settime(
                self.0.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
    }
}

/// Read and discard an eventfd/timerfd counter (non-blocking).
fn drain(fd: &OwnedFd) {
    let mut buf = 0u64;
    // SAFETY: an 8-byte read into a local.
    unsafe {
        libc::read(
            fd.as_raw_fd(),
            (&mut buf as *mut u64).cast(),
            std::mem::size_of::<u64>(),
        )
    };
}

/// Ask for SCHED_FIFO at `priority` (0: do not ask); logs the outcome.
fn set_realtime(priority: i32, shared: &Shared) {
    if crate::rt::priority::request_fifo("switch thread", priority) {
        shared.realtime.store(true, Ordering::Relaxed);
    }
}

/// At most this many boundaries ahead is a rank's next switch-out looked for.
const SWITCH_OUT_HORIZON: usize = 64;

/// The next boundary after `at` at which `target` is switched out (0: none ahead). Within a
/// phase the rows repeat, so its row count plus one boundaries (the next phase's start
/// among them, if it comes first) tell all: a rank the phase leaves running costs a few
/// steps on the switch path, not the whole horizon.
fn next_switch_out(plan: &Plan, target: u32, at: i64) -> u64 {
    let steps = plan
        .phase_at(at)
        .map_or(1, |p| p.rows.len() + 1)
        .min(SWITCH_OUT_HORIZON);
    let mut t = at;
    for _ in 0..steps {
        let Some(b) = plan.next_boundary_after(t) else {
            return 0;
        };
        if let Want::Slot { row, .. } = plan.want_at(b)
            && row.out.iter().any(|o| o.target == target)
        {
            return b.max(0) as u64;
        }
        t = b;
    }
    0
}

/// A rank that runs from `at`: its library learns when it will next be switched out (before
/// it is continued, so it never reads a boundary already past).
fn announce(sp: &SwitchPlan, i: u32, at: i64) {
    if let Some(m) = &sp.targets[i as usize].msg {
        m.table.write_switch_out(next_switch_out(&sp.plan, i, at));
    }
}

/// Bring every target to what `want` says at `at`, outgoing first. Returns the acts.
fn apply(shared: &Shared, sp: &SwitchPlan, want: Want<'_>, at: i64, offset_ns: i64) -> Acts {
    let mut acts = Acts::new(offset_ns);
    let t = &sp.targets;
    match want {
        Want::Free(all) => {
            for &i in all {
                announce(sp, i, at);
                t[i as usize].switch_in(&mut acts);
            }
        }
        Want::Slot { row, free, .. } => {
            for o in &row.out {
                let target = &t[o.target as usize];
                let page = target.msg.as_ref().map(|m| m.state.snapshot());
                if let Some(page) = page
                    && page.ready
                    && !target.is_out()
                {
                    // Quiesced for this very boundary, or not (it is stopped anyway).
                    let done = page.quiesced_for_ns == at.max(0) as u64;
                    let counter = if done {
                        &shared.msg_flushed
                    } else {
                        &shared.msg_unflushed
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                target.switch_out(o.method, &mut acts);
            }
            for &i in row.run.iter().chain(free) {
                announce(sp, i, at);
                t[i as usize].switch_in(&mut acts);
            }
        }
    }
    acts
}

fn count_errors(shared: &Shared, acts: &Acts) {
    if acts.errors > 0 {
        shared
            .errors
            .fetch_add(u64::from(acts.errors), Ordering::Relaxed);
        shared.last_errno.store(acts.last_errno, Ordering::Relaxed);
    }
}

/// The thread's body. Runs until `shared.stop`.
pub fn run(shared: Arc<Shared>, rt_priority: i32) {
    set_realtime(rt_priority, &shared);
    let timer = match Timer::new() {
        Ok(t) => t,
        Err(e) => {
            // Cannot happen short of running out of descriptors; without a timer there is
            // no switching, and the jobs keep running.
            tracing::error!(
                "switch thread: cannot create its timer: {e}; no time slicing on this node"
            );
            return;
        }
    };
    let mut current: Arc<SwitchPlan> = shared.plan.load_full();
    let mut fresh = true;
    let mut next: Option<i64> = None;
    let mut fds = [
        libc::pollfd {
            fd: timer.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: shared.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    'outer: loop {
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        if let Some(boundary) = take_new_plan(&shared, &mut current, &mut fresh) {
            next = boundary;
        }

        // Sleep to the next boundary (or until kicked); with `spin_ns`, to a little before.
        let offset = shared.clock.offset_ns();
        timer.arm(next.map(|d| d - offset - shared.spin_ns));
        fds[0].revents = 0;
        fds[1].revents = 0;
        // SAFETY: two valid pollfds.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if r < 0 {
            // EINTR: just look again.
            continue;
        }
        if fds[1].revents != 0 {
            drain(&shared.wake);
        }
        if fds[0].revents != 0 {
            drain(&timer.0);
        }
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        let Some(deadline) = next else { continue };
        let mut offset = shared.clock.offset_ns();
        let mut now = realtime_ns() + offset;
        if now < deadline - shared.spin_ns {
            // Woken early (a kick, or the offset moved): re-arm.
            continue;
        }
        // The timer's wake-up latency (tens of microseconds, more from a deep idle state)
        // is spent here instead of after the deadline.
        while now < deadline {
            std::hint::spin_loop();
            offset = shared.clock.offset_ns();
            now = realtime_ns() + offset;
            if now < deadline - shared.spin_ns {
                // The offset moved back meanwhile: sleep again rather than spin.
                continue 'outer;
            }
        }
        next = switch_at_boundary(&shared, &current, deadline, now, offset);
    }
}

/// A new plan: take it, and bring every rank to the state it says holds now. Returns the
/// next boundary to sleep to, or None if the plan held is still the newest.
fn take_new_plan(
    shared: &Shared,
    current: &mut Arc<SwitchPlan>,
    fresh: &mut bool,
) -> Option<Option<i64>> {
    let latest = shared.plan.load();
    if !*fresh && latest.generation == current.generation {
        return None;
    }
    // An Arc clone: no allocation. The old plan stays alive in the async side's retired
    // list until `seen_generation` passes it, so it is not freed here.
    *current = arc_swap::Guard::into_inner(latest);
    shared
        .seen_generation
        .store(current.generation, Ordering::Release);
    *fresh = false;
    let offset = shared.clock.offset_ns();
    let now = realtime_ns() + offset;
    let acts = apply(shared, current, current.plan.want_at(now), now, offset);
    count_errors(shared, &acts);
    Some(current.plan.next_boundary_after(now))
}

/// At (or, after a stall, past) the boundary `deadline`: switch for the latest boundary
/// reached, skipping any missed in between, and record it. Returns the next boundary.
fn switch_at_boundary(
    shared: &Shared,
    current: &SwitchPlan,
    deadline: i64,
    now: i64,
    offset: i64,
) -> Option<i64> {
    let at = current
        .plan
        .boundary_at_or_before(now)
        .unwrap_or(deadline)
        .max(deadline);
    let want = current.plan.want_at(at);
    let acts = apply(shared, current, want, at, offset);
    count_errors(shared, &acts);
    if acts.count > 0 {
        let (version, slot) = match want {
            Want::Slot { phase, slot, .. } => (phase.version, slot),
            Want::Free(_) => (
                current.plan.phase_at(at).map_or(0, |p| p.version),
                current.plan.phase_at(at).map_or(0, |p| p.grid.slot_at(at)),
            ),
        };
        shared.ring.push(Record {
            table_version: version,
            slot,
            deadline_ns: at,
            first_ns: acts.first_ns,
            last_ns: acts.last_ns,
            actions: acts.count,
            clock_error_ns: shared.clock.error_ns(),
        });
        shared.switches.fetch_add(1, Ordering::Relaxed);
    }
    current.plan.next_boundary_after(at)
}
