/* Exercises every call of gang_msg.h and checks the results. */
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
#define EXPECT(cond)                                                      \
    do {                                                                  \
        if (!(cond)) {                                                    \
            fprintf(stderr, "rank %d: %s is false\n", gm_rank(), #cond); \
            exit(1);                                                      \
        }                                                                 \
    } while (0)

int main(void) {
    EXPECT(gm_rank() == GM_ERR_NOT_INIT);
    CHECK(gm_init());
    int r = gm_rank(), n = gm_size();
    int x, y, nb[4];
    CHECK(gm_coord(&x, &y));
    CHECK(gm_neighbours(nb));
    /* The fake agent's rectangle starts at (0,0) and is n wide or 2 high. */
    EXPECT(nb[3] == (x > 0 ? r - 1 : -1));
    EXPECT(gm_master_now_ns() > 0);
    CHECK(gm_set_spin_us(20));

    /* Non-blocking: post receives from both neighbours on the ring, then send. */
    int right = (r + 1) % n, left = (r + n - 1) % n;
    char a[32] = {0}, b[64] = {0};
    gm_request *ra, *rb, *sa;
    CHECK(gm_irecv(left, 5, a, sizeof a, &ra));
    CHECK(gm_irecv(GM_ANY, GM_ANY, b, sizeof b, &rb));
    char out[32];
    snprintf(out, sizeof out, "from %d", r);
    CHECK(gm_isend(right, 5, out, strlen(out) + 1, &sa));
    CHECK(gm_send(right, 6, "second", 7));
    int flag = 0, src, tag;
    size_t len;
    while (!flag) CHECK(gm_test(ra, &flag, &src, &tag, &len));
    EXPECT(src == left && tag == 5);
    char want[32];
    snprintf(want, sizeof want, "from %d", left);
    EXPECT(strcmp(a, want) == 0);
    CHECK(gm_wait(rb, &src, &tag, &len));
    EXPECT(src == left && tag == 6 && len == 7 && strcmp(b, "second") == 0);
    CHECK(gm_wait(sa, NULL, NULL, NULL));

    /* Truncation is an error that still reports the size. */
    CHECK(gm_send(right, 7, "0123456789", 10));
    char small[4];
    EXPECT(gm_recv(left, 7, small, sizeof small, NULL, NULL, &len) == GM_ERR_TRUNCATED && len == 10);
    EXPECT(strstr(gm_last_error(), "does not fit") != NULL);
    EXPECT(gm_send(n, 0, "x", 1) == GM_ERR);

    /* Collectives. */
    CHECK(gm_barrier());
    char bc[8] = {0};
    if (r == n - 1) memcpy(bc, "bcast!!", 8);
    CHECK(gm_broadcast(n - 1, bc, sizeof bc));
    EXPECT(memcmp(bc, "bcast!!", 8) == 0);
    int64_t iv[2] = {r + 1, -r};
    CHECK(gm_allreduce_i64(iv, 2, GM_SUM));
    EXPECT(iv[0] == (int64_t)n * (n + 1) / 2 && iv[1] == -(int64_t)n * (n - 1) / 2);
    int64_t mn = 10 - r;
    CHECK(gm_allreduce_i64(&mn, 1, GM_MIN));
    EXPECT(mn == 10 - (n - 1));
    double dv = 0.5 * r;
    CHECK(gm_allreduce_f64(&dv, 1, GM_MAX));
    EXPECT(dv == 0.5 * (n - 1));
    EXPECT(gm_allreduce_f64(&dv, 1, 7) == GM_ERR);

    if (r == 0) printf("{\"example\":\"api.c\",\"ranks\":%d,\"ok\":true}\n", n);
    CHECK(gm_finalize());
    EXPECT(gm_size() == GM_ERR_NOT_INIT);
    return 0;
}
