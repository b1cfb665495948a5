//! How the processes that carry job output use memory.

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
