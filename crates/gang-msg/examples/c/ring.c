/* Ring pass in C: every iteration each rank sends a message carrying its
 * rank, the iteration and a checksum to its right neighbour and checks the
 * one from its left. Usage: ring [iterations]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gang_msg.h"

#define CHECK(call)                                                                 \
    do {                                                                            \
        int rc_ = (call);                                                           \
        if (rc_ != GM_OK) {                                                         \
            fprintf(stderr, "%s failed (%d): %s\n", #call, rc_, gm_last_error());  \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

static uint64_t checksum(const uint64_t *v, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ v[i]) * 1099511628211ull;
    return h;
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 200;
    CHECK(gm_init());
    int r = gm_rank(), n = gm_size();
    int right = (r + 1) % n, left = (r + n - 1) % n;
    enum { WORDS = 512 };
    uint64_t msg[WORDS + 1], in[WORDS + 1];
    for (long i = 0; i < iters; i++) {
        for (int k = 0; k < WORDS; k++) msg[k] = ((uint64_t)r << 48) ^ ((uint64_t)i << 16) ^ (uint64_t)k;
        msg[WORDS] = checksum(msg, WORDS);
        size_t words = 1 + (size_t)(i % WORDS); /* vary the size: 1..512 words, then the sum */
        memmove(&msg[words], &msg[WORDS], sizeof(uint64_t));
        CHECK(gm_send(right, 1, msg, (words + 1) * sizeof(uint64_t)));
        int src = -1, tag = -1;
        size_t len = 0;
        CHECK(gm_recv(left, 1, in, sizeof in, &src, &tag, &len));
        if (src != left || tag != 1 || len != (words + 1) * sizeof(uint64_t)) {
            fprintf(stderr, "rank %d: bad envelope src=%d tag=%d len=%zu\n", r, src, tag, len);
            return 1;
        }
        for (size_t k = 0; k < words; k++) {
            if (in[k] != (((uint64_t)left << 48) ^ ((uint64_t)i << 16) ^ (uint64_t)k)) {
                fprintf(stderr, "rank %d: word %zu of iteration %ld differs\n", r, k, i);
                return 1;
            }
        }
    }
    if (r == 0) printf("{\"example\":\"ring.c\",\"ranks\":%d,\"iterations\":%ld}\n", n, iters);
    CHECK(gm_finalize());
    return 0;
}
