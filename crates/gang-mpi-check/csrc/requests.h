/* The requests the checker follows: nonblocking and persistent receives (whose
 * completion is a delivery, and a wait on which is a blocked receive) and persistent
 * sends (each MPI_Start of one is a posted send). Keyed by the request handle's value,
 * which is an int in MPICH and a pointer in Open MPI: both fit in a uint64_t. */
#ifndef GANG_REQUESTS_H
#define GANG_REQUESTS_H

#include <stdint.h>

enum req_kind { REQ_RECV = 1, REQ_PRECV = 2, REQ_PSEND = 3 };

struct req_entry {
    uint64_t key; /* 0 = empty slot */
    uint8_t kind;
    uint8_t active; /* persistent ones: started and not yet completed */
    uint8_t cancelled;
    int32_t src, tag; /* what a wait on it waits for (src as a rank of the job) */
};

void req_put(uint64_t key, enum req_kind kind, int32_t src, int32_t tag, int active);
/* A copy of the entry (key 0 when the handle is not followed). */
struct req_entry req_get(uint64_t key);
void req_set_active(uint64_t key, int active);
void req_cancelled(uint64_t key);
void req_remove(uint64_t key);
/* The request completed: a receive is forgotten, a persistent one made inactive. Returns
 * the entry as it was (key 0 when not followed), in one lookup. */
struct req_entry req_complete(uint64_t key);

#endif
