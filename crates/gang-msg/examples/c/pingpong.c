/* Fine-grain ping-pong in C (examples/pingpong.rs) between ranks 0 and 1:
 * prints the one-way latency (half a round trip), median and p99, as one
 * JSON line of the same shape. --iters N --warmup N --size BYTES
 * --spin-us US (default: GANG_MSG_SPIN_US, else 0, as the library).
 *
 * Rank 1 echoes every ping; every message is checked, off the timed path
 * where possible: a ping of at least 24 bytes is a checked message (sender,
 * receiver, sequence number, checksum of the body), a shorter one is the
 * first bytes of that message's pseudo-random body, compared whole. Rank 1
 * checks the ping after echoing it, rank 0 the pong after timing it. */
#include "util.h"

/* Ping number seq, from 0 to 1, of len bytes. */
static void make_ping(uint64_t seq, unsigned char *buf, size_t len) {
    if (len >= EX_HEAD) {
        ex_make(0, 1, seq, buf, len);
    } else {
        ex_fill(0, 1, seq, buf, len);
    }
}

static void check_ping(const unsigned char *m, size_t got, size_t len, uint64_t seq, const char *what) {
    if (got != len) ex_die("%s #%llu of %zu bytes, expected %zu", what, (unsigned long long)seq, got, len);
    if (len >= EX_HEAD) {
        ex_verify(m, len, 0, 1, seq);
    } else {
        unsigned char want[EX_HEAD];
        ex_fill(0, 1, seq, want, len);
        if (memcmp(want, m, len) != 0) ex_die("%s #%llu differs", what, (unsigned long long)seq);
    }
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    ex_args a = ex_args_parse(argc, argv);
    EX_CHECK(gm_init());
    int r = gm_rank(), n = gm_size();
    EX_CHECK(r);
    EX_CHECK(n);
    if (n < 2) ex_die("ping-pong needs two ranks");
    const char *env_spin = getenv("GANG_MSG_SPIN_US");
    uint64_t spin = ex_arg_u64(&a, "spin-us", env_spin && *env_spin ? strtoull(env_spin, NULL, 10) : 0);
    EX_CHECK(gm_set_spin_us(spin));
    uint64_t iters = ex_arg_u64(&a, "iters", 10000), warmup = ex_arg_u64(&a, "warmup", 1000);
    size_t size = (size_t)ex_arg_u64(&a, "size", 8);
    if (iters == 0) ex_die("--iters must be at least 1");
    /* +1: a buffer of at least one byte, and room to see a longer message. */
    unsigned char *ping = malloc(size + 1), *in = malloc(size + 1);
    uint64_t *rtt = malloc(iters * sizeof *rtt);
    if (!ping || !in || !rtt) ex_die("out of memory");
    if (r == 0) {
        for (uint64_t i = 0; i < warmup + iters; i++) {
            make_ping(i, ping, size);
            size_t len = 0;
            uint64_t t = ex_now_ns();
            EX_CHECK(gm_send(1, 0, ping, size));
            EX_CHECK(gm_recv(1, 0, in, size + 1, NULL, NULL, &len));
            uint64_t dt = ex_now_ns() - t;
            if (i >= warmup) rtt[i - warmup] = dt;
            check_ping(in, len, size, i, "pong");
        }
    } else if (r == 1) {
        for (uint64_t i = 0; i < warmup + iters; i++) {
            size_t len = 0;
            EX_CHECK(gm_recv(0, 0, in, size + 1, NULL, NULL, &len));
            EX_CHECK(gm_send(0, 0, in, len));
            check_ping(in, len, size, i, "ping");
        }
    }
    if (r == 0) {
        qsort(rtt, iters, sizeof *rtt, cmp_u64);
        /* As the Rust example: index (len-1)*q rounded down, half, in µs. */
        double med = (double)rtt[(size_t)((double)(iters - 1) * 0.5)] / 2000.0;
        double p99 = (double)rtt[(size_t)((double)(iters - 1) * 0.99)] / 2000.0;
        printf("{\"example\":\"pingpong.c\",\"spin_us\":%llu,\"size\":%zu,\"iters\":%llu,\"one_way_median_us\":%.2f,"
               "\"one_way_p99_us\":%.2f}\n",
               (unsigned long long)spin, size, (unsigned long long)iters, med, p99);
    }
    free(ping);
    free(in);
    free(rtt);
    EX_CHECK(gm_finalize());
    return 0;
}
