/* The rank's state page, `state.page` in $GANG_MSG_DIR: the C mirror of gang-msg's
 * `StateLayout` (crates/gang-msg/src/abi/pages.rs). The agent creates the page; the rank
 * writes it and the agent reads it for the master's deadlock check. The test
 * `c_layout_matches_gang_msg` compiles a program printing these offsets and compares them
 * with the Rust ones, so the two cannot drift apart silently. */
#ifndef GANG_STATE_PAGE_H
#define GANG_STATE_PAGE_H

#include <stdatomic.h>
#include <stdint.h>

#define GANG_STATE_MAGIC 0x31305453474e4147ULL /* "GANGST01" little-endian */
#define GANG_STATE_VERSION 1u
#define GANG_PAGE_SIZE 4096

struct gang_state_page {
    _Atomic uint64_t magic;
    _Atomic uint32_t version;
    _Atomic uint32_t pid;
    /* CLOCK_MONOTONIC ns when the rank blocked; 0 = not blocked. */
    _Atomic uint64_t blocked_since_ns;
    _Atomic int32_t wait_src;
    _Atomic int32_t wait_tag;
    /* Counted before a send returns. */
    _Atomic uint64_t posted_sends;
    /* Counted after a receive completed (here: the program has the message). */
    _Atomic uint64_t delivered;
    /* The messaging library's transport and switch fields, unused by MPI ranks. */
    _Atomic uint64_t bytes_written;
    _Atomic uint64_t bytes_read;
    _Atomic uint64_t quiesced_for_ns;
    _Atomic uint64_t switches;
    _Atomic uint64_t unflushed;
    _Atomic uint64_t flush_ns;
    _Atomic uint64_t save_ns;
    _Atomic uint64_t restore_ns;
    _Atomic uint64_t inflight_bytes_at_quiesce;
    _Atomic uint64_t unacked_bytes;
    _Atomic uint64_t timings_for_ns;
    _Atomic uint64_t last_boundary_ns;
};

#endif
