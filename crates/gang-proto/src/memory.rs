//! How the daemons use memory: glibc keeping what is freed (the processes that carry job
//! output), and no transparent huge pages for the master.

/// Keep freed memory for reuse instead of giving it back to the kernel at once (glibc).
///
/// Job output moves through buffers of up to 1 MiB (the agent's pushes, the master's log
/// reads, `prun`'s messages). Under glibc's defaults each was returned to the kernel when
/// freed, so every message paid for fresh zeroed pages: a third of `prun`'s CPU and a
/// fifth of the agent's when relaying (`benches/benches/cluster/relay.rs`; the same tuning by
/// `GLIBC_TUNABLES` made a 512 MiB relay 1.35x faster). Allocations below 4 MiB now come
/// from the heap, and up to 64 MiB of free heap is kept. Call once, first thing in `main`.
pub fn keep_freed_memory() {
    // SAFETY: mallopt only sets the allocator's parameters, under its own lock.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
    }
}

/// No transparent huge pages in this process's memory (the master's).
///
/// mimalloc asks for huge pages on the arenas it reserves (`madvise`), and a 2 MiB huge
/// page stays resident whole however little of it is in use, also once mimalloc gives
/// part of it back. After 4,096 emulated agents registered, the idle master held 288 MiB
/// with them and 180 MiB without, its CPU a launched rank unchanged (benches/README.md,
/// issue 37's ninth part). The flag covers the whole process, mappings made before it
/// included; it is also inherited across fork and exec, so a daemon that starts users'
/// programs (the agent) must not set it: their memory keeps the host's setting. A kernel
/// without it (before 3.15) keeps huge pages, which costs memory, not correctness.
pub fn no_transparent_huge_pages() {
    // SAFETY: PR_SET_THP_DISABLE sets one flag on this process's memory map.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}
