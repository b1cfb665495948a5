//! The master's memory allocator: mimalloc (its v2), not glibc's malloc.
//!
//! During a 10,000-node launch the master's allocations (HTTP/2 streams and their buffers,
//! a task a request) spent 13-19 % of its CPU in glibc's `_int_malloc` alone. With
//! mimalloc the master's CPU a launched rank fell by about a third (benches/README.md,
//! issue 37's seventh part). The agent runs on it too (its `main.rs` says why).
//!
//! Memory is what mimalloc costs: after 10,000 agents registered, the idle master held
//! 488-503 MiB under v2 (v3: 530-593 MiB; glibc with its periodic trim: 150-235 MiB), and
//! 384 MiB once `main` turned transparent huge pages off for the process
//! (`no_transparent_huge_pages`: mimalloc asks for them on its arenas).
//! A thread's freed pages stay in its heap until it collects them, so a runtime thread
//! that goes idle collects, at most once every `COLLECT_EVERY`.

use std::cell::Cell;
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How often an idle runtime thread gives its free pages back, at most.
const COLLECT_EVERY: Duration = Duration::from_secs(5);

thread_local! {
    static COLLECTED: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// No transparent huge pages in the master's memory.
///
/// mimalloc asks for huge pages on the arenas it reserves (`madvise`), and a 2 MiB huge
/// page stays resident whole however little of it is in use, also once mimalloc gives
/// part of it back. After 4,096 emulated agents registered, the idle master held 288 MiB
/// with them and 180 MiB without, its CPU a launched rank unchanged (benches/README.md,
/// issue 37's ninth part). The flag covers the whole process, mappings made before it
/// included; it is also inherited across fork and exec, so the agent, which starts
/// users' programs, does not set it: their memory keeps the host's setting. A kernel
/// without it (before 3.15) keeps huge pages, which costs memory, not correctness.
pub fn no_transparent_huge_pages() {
    let _ = nix::sys::prctl::set_thp_disable(true);
}

/// For the runtime's `on_thread_park`: the parking thread's free pages go back to the
/// system if it has not done so for `COLLECT_EVERY`.
pub fn give_back_when_idle() {
    COLLECTED.with(|at| {
        let now = Instant::now();
        if at
            .get()
            .is_some_and(|t| now.duration_since(t) < COLLECT_EVERY)
        {
            return;
        }
        at.set(Some(now));
        // SAFETY: mi_collect only walks and frees the calling thread's own heap.
        unsafe { libmimalloc_sys::mi_collect(true) };
    });
}
