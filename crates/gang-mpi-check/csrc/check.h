/* What the wrappers share: the rank's state page and the accounting rules.
 *
 * The master flags a job when every rank is blocked, the job's posted and delivered
 * counts are equal, and nothing changed between two checks (crates/gang-core/src/job/
 * deadlock.rs). For that to be exact with MPI, whose buffers we cannot see:
 *  - a send is posted before the PMPI call (so a message is never delivered before it
 *    is posted, and a rank never blocks before its sends are counted);
 *  - a receive is delivered only once it completed, after blocked_since is cleared (a
 *    snapshot reads delivered, blocked, posted in that order: it never shows a rank
 *    blocked beside the message that woke it);
 *  - a message sent and not yet received by the program (eager, in MPI's buffers)
 *    keeps posted above delivered, so a rank waiting for it is never in a stuck job;
 *  - in doubt, count a send and not a delivery: that can only miss a deadlock, never
 *    invent one. */
#ifndef GANG_CHECK_H
#define GANG_CHECK_H

#include <mpi.h>
#include <stdint.h>
#include <string.h>

#include "state_page.h"

extern struct gang_state_page *gang_page;

/* Map the rank's state page (after MPI_Init): a no-op without $GANG_MSG_DIR. */
void gang_open_page(void);

void gang_block(int src, int tag);
/* Clear blocked_since, then count `delivered` messages. */
void gang_unblock(uint64_t delivered);

static inline void gang_posted(uint64_t n) {
    if (gang_page && n) atomic_fetch_add(&gang_page->posted_sends, n);
}

static inline void gang_delivered(uint64_t n) {
    if (gang_page && n) atomic_fetch_add(&gang_page->delivered, n);
}

/* `r` of `comm` as a rank of the job (MPI_COMM_WORLD), for the report; -1 for any
 * source or one outside the world group. */
int gang_world_rank(MPI_Comm comm, int r);

static inline int gang_tag(int tag) { return tag < 0 ? -1 : tag; }

static inline uint64_t gang_key(MPI_Request r) {
    uint64_t k = 0;
    memcpy(&k, &r, sizeof r < sizeof k ? sizeof r : sizeof k);
    return k;
}

#endif
