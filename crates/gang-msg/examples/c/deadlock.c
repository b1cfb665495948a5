/* Deadlocks on purpose, in C (examples/deadlock.rs): after ten ring passes
 * of checked messages, every rank first receives from its right neighbour,
 * which is doing the same. Nothing is in flight, every rank is blocked: what
 * the master's deadlock detector looks for. Never returns on its own. */
#include "util.h"

int main(void) {
    EX_CHECK(gm_init());
    int r = gm_rank(), n = gm_size();
    EX_CHECK(r);
    EX_CHECK(n);
    int right = (r + 1) % n, left = (r + n - 1) % n;
    unsigned char msg[EX_HEAD], in[EX_HEAD];
    for (uint64_t i = 0; i < 10; i++) {
        ex_make(r, right, i, msg, sizeof msg);
        EX_CHECK(gm_send(right, 1, msg, sizeof msg));
        size_t len = 0;
        EX_CHECK(gm_recv(left, 1, in, sizeof in, NULL, NULL, &len));
        ex_verify(in, len, left, r, i);
    }
    fprintf(stderr, "rank %d: receiving from %d before sending: deadlock\n", r, right);
    char never[8];
    (void)gm_recv(right, 2, never, sizeof never, NULL, NULL, NULL);
    EX_CHECK(gm_send(left, 2, "never", 5));
    EX_CHECK(gm_finalize());
    return 0;
}
