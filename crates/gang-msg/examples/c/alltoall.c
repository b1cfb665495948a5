/* All-to-all in C (examples/alltoall.rs): every iteration each rank sends a
 * checked message to every other rank, then receives n-1 messages with any
 * source, checking each sender's sequence numbers arrive in order.
 * --iters N or --seconds S or --until-file F, --max-size BYTES. */
#include "util.h"

int main(int argc, char **argv) {
    ex_args a = ex_args_parse(argc, argv);
    EX_CHECK(gm_init());
    int r = gm_rank(), n = gm_size();
    EX_CHECK(r);
    EX_CHECK(n);
    size_t max = (size_t)ex_arg_u64(&a, "max-size", 8000);
    ex_stop stop = ex_stop_from_args(&a);
    size_t cap = max > EX_HEAD ? max : EX_HEAD;
    unsigned char *out = malloc(cap), *in = malloc(cap);
    uint64_t *next = calloc((size_t)n, sizeof *next);
    if (!out || !in || !next) ex_die("out of memory");
    uint64_t i = 0;
    while (!ex_stop_done(&stop, i)) {
        for (int d = 0; d < n; d++) {
            if (d == r) continue;
            size_t len = ex_size_for(i + (uint64_t)d, max);
            ex_make(r, d, i, out, len);
            EX_CHECK(gm_send(d, 2, out, len));
        }
        for (int k = 1; k < n; k++) {
            int src = -1, tag = -1;
            size_t len = 0;
            EX_CHECK(gm_recv(GM_ANY, 2, in, cap, &src, &tag, &len));
            if (src < 0 || src >= n || src == r || tag != 2) ex_die("got (%d, %d) for (any, 2)", src, tag);
            /* Any source: a fast sender may already be one iteration ahead,
             * so only the order per sender is fixed, and that is checked. */
            ex_verify(in, len, src, r, next[src]);
            next[src]++;
        }
        i++;
    }
    for (int s = 0; s < n; s++) {
        if (s != r && next[s] != i) {
            ex_die("%llu messages from rank %d after %llu iterations", (unsigned long long)next[s], s,
                   (unsigned long long)i);
        }
    }
    if (r == 0) printf("{\"example\":\"alltoall.c\",\"ranks\":%d,\"iterations\":%llu}\n", n, (unsigned long long)i);
    free(out);
    free(in);
    free(next);
    EX_CHECK(gm_finalize());
    return 0;
}
