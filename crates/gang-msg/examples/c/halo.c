/* 2D halo exchange in C (examples/halo.rs): a Jacobi sweep over a global
 * grid split into one --block x --block tile per rank of the job's
 * rectangle, exchanging one-cell halos with the N/S/E/W neighbours every
 * iteration. At the end every rank recomputes the whole grid serially and
 * checks its tile bit for bit, and the allreduced sum against the serial
 * sum; any mismatch exits 1. --iters N or --seconds S or --until-file F.
 *
 * A halo message: iteration (u64), FNV-1a checksum of the values (u64), the
 * values (f64), little-endian; checked on receipt. The C interface has no
 * gm_part(): the rectangle is found with an allreduce of the coordinates. */
#include "util.h"

enum { TAG_N = 10, TAG_S = 11, TAG_E = 12, TAG_W = 13 }; /* direction of travel */

/* Fixed values outside the global grid (global coordinates, -1..=n). */
static double boundary(int64_t gx, int64_t gy) {
    int64_t m = (gx * 7 + gy * 13) % 17;
    if (m < 0) m += 17;
    return (double)m + 0.5;
}

/* A tile with a one-cell ghost ring, row-major, (w+2) x (h+2). */
typedef struct {
    size_t w, h;
    double *u, *next;
} tile;

static tile tile_new(size_t w, size_t h, int64_t gx0, int64_t gy0, int64_t gw, int64_t gh) {
    tile t = {w, h, calloc((w + 2) * (h + 2), sizeof(double)), calloc((w + 2) * (h + 2), sizeof(double))};
    if (!t.u || !t.next) ex_die("out of memory");
    for (size_t y = 0; y < h + 2; y++) {
        for (size_t x = 0; x < w + 2; x++) {
            int64_t gx = gx0 + (int64_t)x - 1, gy = gy0 + (int64_t)y - 1;
            if (gx < 0 || gy < 0 || gx >= gw || gy >= gh) t.u[y * (w + 2) + x] = boundary(gx, gy);
        }
    }
    return t;
}

static double at(const tile *t, size_t x, size_t y) { return t->u[y * (t->w + 2) + x]; }

static void set(tile *t, size_t x, size_t y, double v) { t->u[y * (t->w + 2) + x] = v; }

static void sweep(tile *t) {
    memcpy(t->next, t->u, (t->w + 2) * (t->h + 2) * sizeof(double));
    for (size_t y = 1; y <= t->h; y++) {
        for (size_t x = 1; x <= t->w; x++) {
            t->next[y * (t->w + 2) + x] = 0.25 * (at(t, x - 1, y) + at(t, x + 1, y) + at(t, x, y - 1) + at(t, x, y + 1));
        }
    }
    double *old = t->u;
    t->u = t->next;
    t->next = old;
}

static uint64_t f64_bits(double v) {
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

static double f64_from_bits(uint64_t b) {
    double v;
    memcpy(&v, &b, sizeof v);
    return v;
}

/* Row y (horizontal = 1) or column x of the interior into a halo message. */
static size_t encode(const tile *t, int horizontal, size_t at_, uint64_t iter, unsigned char *buf) {
    size_t n = horizontal ? t->w : t->h;
    for (size_t k = 0; k < n; k++) {
        double v = horizontal ? at(t, k + 1, at_) : at(t, at_, k + 1);
        ex_put_u64(buf + 16 + 8 * k, f64_bits(v));
    }
    ex_put_u64(buf, iter);
    ex_put_u64(buf + 8, ex_checksum(buf + 16, 8 * n));
    return 16 + 8 * n;
}

/* Check a halo message and write it into ghost row y (horizontal) or column x. */
static void decode(tile *t, int horizontal, size_t at_, uint64_t iter, const unsigned char *buf, size_t len, int src) {
    size_t n = horizontal ? t->w : t->h;
    uint64_t got = len >= 8 ? ex_get_u64(buf) : UINT64_MAX;
    if (got != iter || len != 16 + 8 * n) {
        ex_die("halo from %d of iteration %llu (%zu bytes) in iteration %llu", src, (unsigned long long)got, len,
               (unsigned long long)iter);
    }
    if (ex_checksum(buf + 16, 8 * n) != ex_get_u64(buf + 8)) {
        ex_die("halo from %d of iteration %llu: checksum mismatch", src, (unsigned long long)iter);
    }
    for (size_t k = 0; k < n; k++) {
        double v = f64_from_bits(ex_get_u64(buf + 16 + 8 * k));
        if (horizontal) {
            set(t, k + 1, at_, v);
        } else {
            set(t, at_, k + 1, v);
        }
    }
}

static void exchange(tile *t, const int nb[4], uint64_t iter, unsigned char *buf, size_t cap) {
    /* Eager sends never block, so send all four, then receive. */
    size_t len;
    if (nb[0] >= 0) {
        len = encode(t, 1, 1, iter, buf);
        EX_CHECK(gm_send(nb[0], TAG_N, buf, len));
    }
    if (nb[1] >= 0) {
        len = encode(t, 1, t->h, iter, buf);
        EX_CHECK(gm_send(nb[1], TAG_S, buf, len));
    }
    if (nb[2] >= 0) {
        len = encode(t, 0, t->w, iter, buf);
        EX_CHECK(gm_send(nb[2], TAG_E, buf, len));
    }
    if (nb[3] >= 0) {
        len = encode(t, 0, 1, iter, buf);
        EX_CHECK(gm_send(nb[3], TAG_W, buf, len));
    }
    /* From the north comes what travels south, and so on. */
    if (nb[0] >= 0) {
        EX_CHECK(gm_recv(nb[0], TAG_S, buf, cap, NULL, NULL, &len));
        decode(t, 1, 0, iter, buf, len, nb[0]);
    }
    if (nb[1] >= 0) {
        EX_CHECK(gm_recv(nb[1], TAG_N, buf, cap, NULL, NULL, &len));
        decode(t, 1, t->h + 1, iter, buf, len, nb[1]);
    }
    if (nb[2] >= 0) {
        EX_CHECK(gm_recv(nb[2], TAG_W, buf, cap, NULL, NULL, &len));
        decode(t, 0, t->w + 1, iter, buf, len, nb[2]);
    }
    if (nb[3] >= 0) {
        EX_CHECK(gm_recv(nb[3], TAG_E, buf, cap, NULL, NULL, &len));
        decode(t, 0, 0, iter, buf, len, nb[3]);
    }
}

/* Shortest "%.*g" that reads back as the same double (as Rust prints f64). */
static void print_f64(char *out, size_t cap, double v) {
    for (int p = 1; p <= 17; p++) {
        snprintf(out, cap, "%.*g", p, v);
        if (strtod(out, NULL) == v) return;
    }
}

int main(int argc, char **argv) {
    ex_args a = ex_args_parse(argc, argv);
    EX_CHECK(gm_init());
    int rank = gm_rank(), size = gm_size();
    EX_CHECK(rank);
    EX_CHECK(size);
    int cx, cy, nb[4];
    EX_CHECK(gm_coord(&cx, &cy));
    EX_CHECK(gm_neighbours(nb));
    /* The rectangle: the extremes of every rank's coordinates. */
    int64_t ext[4] = {-(int64_t)cx, -(int64_t)cy, cx, cy};
    EX_CHECK(gm_allreduce_i64(ext, 4, GM_MAX));
    int64_t x0 = -ext[0], y0 = -ext[1];
    size_t pw = (size_t)(ext[2] - x0 + 1), ph = (size_t)(ext[3] - y0 + 1);
    if ((size_t)size != pw * ph) ex_die("halo needs a full rectangle: %d ranks on %zux%zu", size, pw, ph);
    size_t px = (size_t)(cx - x0), py = (size_t)(cy - y0);
    if ((nb[0] >= 0) != (py > 0) || (nb[1] >= 0) != (py + 1 < ph) || (nb[2] >= 0) != (px + 1 < pw) ||
        (nb[3] >= 0) != (px > 0)) {
        ex_die("neighbours %d %d %d %d do not match (%zu,%zu) in %zux%zu", nb[0], nb[1], nb[2], nb[3], px, py, pw,
               ph);
    }
    size_t b = (size_t)ex_arg_u64(&a, "block", 8);
    if (b == 0) ex_die("--block must be at least 1");
    ex_stop stop = ex_stop_from_args(&a);
    int64_t gw = (int64_t)(pw * b), gh = (int64_t)(ph * b);
    tile t = tile_new(b, b, (int64_t)(px * b), (int64_t)(py * b), gw, gh);
    size_t cap = 16 + 8 * b;
    unsigned char *buf = malloc(cap);
    if (!buf) ex_die("out of memory");
    uint64_t iters = 0;
    while (!ex_stop_done(&stop, iters)) {
        exchange(&t, nb, iters, buf, cap);
        sweep(&t);
        iters++;
    }
    /* The serial recomputation: the same arithmetic in the same order per cell. */
    tile whole = tile_new((size_t)gw, (size_t)gh, 0, 0, gw, gh);
    for (uint64_t k = 0; k < iters; k++) sweep(&whole);
    for (size_t y = 1; y <= b; y++) {
        for (size_t x = 1; x <= b; x++) {
            double want = at(&whole, px * b + x, py * b + y), got = at(&t, x, y);
            if (f64_bits(want) != f64_bits(got)) {
                ex_die("cell (%zu,%zu) after %llu iterations: %.17g != serial %.17g", x, y, (unsigned long long)iters,
                       got, want);
            }
        }
    }
    double sum = 0.0;
    for (size_t y = 1; y <= b; y++) {
        for (size_t x = 1; x <= b; x++) sum += at(&t, x, y);
    }
    EX_CHECK(gm_allreduce_f64(&sum, 1, GM_SUM));
    double serial = 0.0;
    for (size_t y = 1; y <= (size_t)gh; y++) {
        for (size_t x = 1; x <= (size_t)gw; x++) serial += at(&whole, x, y);
    }
    double scale = serial < 0 ? -serial : serial;
    double diff = (sum - serial) / (scale > 1.0 ? scale : 1.0);
    if (diff > 1e-9 || diff < -1e-9) ex_die("global sum %.17g != serial %.17g", sum, serial);
    if (rank == 0) {
        char s[32];
        print_f64(s, sizeof s, sum);
        printf("{\"example\":\"halo.c\",\"grid\":\"%lldx%lld\",\"ranks\":\"%zux%zu\",\"iterations\":%llu,\"sum\":%s}\n",
               (long long)gw, (long long)gh, pw, ph, (unsigned long long)iters, s);
    }
    free(t.u);
    free(t.next);
    free(whole.u);
    free(whole.next);
    free(buf);
    EX_CHECK(gm_finalize());
    return 0;
}
