/* Shared by the C examples, as examples/common/util.rs is by the Rust ones:
 * `--key value` arguments, self-checking payloads (the same bytes as the
 * Rust examples' make/verify: sender, receiver, sequence number, checksum of
 * a pseudo-random body), message sizes, and a collective stop decision for
 * runs bounded by time or by a file.
 *
 * Include it first: it asks for POSIX (clock_gettime, access) before any
 * system header is read. Everything is static inline, so a program that uses
 * only part of it compiles without unused-function warnings. */
#ifndef GM_EXAMPLES_UTIL_H
#define GM_EXAMPLES_UTIL_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gang_msg.h"

/* "rank R: message" on stderr, exit 1 (as util.rs's die). */
static inline _Noreturn void ex_die(const char *fmt, ...) {
    const char *r = getenv("GANG_RANK");
    fprintf(stderr, "rank %s: ", r ? r : "");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* Every gm_* call returns a negative code on failure (gm_rank/gm_size return
 * the value itself otherwise). */
#define EX_CHECK(call)                                                                   \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        if (rc_ < 0) ex_die("%s failed (%d): %s", #call, rc_, gm_last_error());          \
    } while (0)

/* ---- arguments: `--key value` pairs ---- */

typedef struct {
    int argc;
    char **argv;
} ex_args;

static inline ex_args ex_args_parse(int argc, char **argv) {
    for (int i = 1; i < argc; i += 2) {
        if (strncmp(argv[i], "--", 2) != 0) ex_die("unexpected argument \"%s\"", argv[i]);
    }
    ex_args a = {argc, argv};
    return a;
}

/* The value of --key, or NULL. A key given last without a value reads as "". */
static inline const char *ex_arg(const ex_args *a, const char *key) {
    const char *v = NULL;
    for (int i = 1; i < a->argc; i += 2) {
        if (strcmp(a->argv[i] + 2, key) == 0) v = i + 1 < a->argc ? a->argv[i + 1] : "";
    }
    return v;
}

static inline uint64_t ex_arg_u64(const ex_args *a, const char *key, uint64_t dflt) {
    const char *v = ex_arg(a, key);
    if (!v) return dflt;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (*v == '\0' || *v == '-' || *end != '\0' || errno != 0) ex_die("--%s %s: not a number", key, v);
    return (uint64_t)x;
}

static inline double ex_arg_f64(const ex_args *a, const char *key, double dflt) {
    const char *v = ex_arg(a, key);
    if (!v) return dflt;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (*v == '\0' || *end != '\0' || errno != 0) ex_die("--%s %s: not a number", key, v);
    return x;
}

static inline const char *ex_arg_str(const ex_args *a, const char *key, const char *dflt) {
    const char *v = ex_arg(a, key);
    return v ? v : dflt;
}

/* ---- little-endian fields ---- */

static inline void ex_put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static inline void ex_put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint32_t ex_get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static inline uint64_t ex_get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* ---- checked payloads ---- */

/* Header of every checked payload: src (u32), dst (u32), seq (u64),
 * checksum of the body (u64), little-endian. */
#define EX_HEAD 24

/* The pseudo-random body of message seq from src to dst: xorshift from a
 * seed of the three. ex_fill_from continues from state *x. */
static inline uint64_t ex_seed(uint32_t src, uint32_t dst, uint64_t seq) {
    return (seq * 0x9E3779B97F4A7C15ull) ^ (((uint64_t)src << 32) | dst) ^ 0xD1B54A32D192ED03ull;
}

static inline void ex_fill_from(uint64_t *x, unsigned char *body, size_t len) {
    uint64_t v = *x;
    for (size_t i = 0; i < len; i++) {
        v ^= v << 13;
        v ^= v >> 7;
        v ^= v << 17;
        body[i] = (unsigned char)v;
    }
    *x = v;
}

static inline void ex_fill(uint32_t src, uint32_t dst, uint64_t seq, unsigned char *body, size_t len) {
    uint64_t x = ex_seed(src, dst, seq);
    ex_fill_from(&x, body, len);
}

/* FNV-1a, 64 bits. */
static inline uint64_t ex_checksum(const unsigned char *p, size_t len) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Write into buf a message of len (>= EX_HEAD) bytes that names its sender,
 * receiver and sequence number and carries a checksum of its body. */
static inline void ex_make(int src, int dst, uint64_t seq, unsigned char *buf, size_t len) {
    if (len < EX_HEAD) ex_die("a checked message needs %d bytes, not %zu", EX_HEAD, len);
    ex_fill((uint32_t)src, (uint32_t)dst, seq, buf + EX_HEAD, len - EX_HEAD);
    ex_put_u32(buf, (uint32_t)src);
    ex_put_u32(buf + 4, (uint32_t)dst);
    ex_put_u64(buf + 8, seq);
    ex_put_u64(buf + 16, ex_checksum(buf + EX_HEAD, len - EX_HEAD));
}

/* Check a message made by ex_make: sender, receiver, the expected sequence
 * number, the checksum, and the body itself. Exits on any mismatch. */
static inline void ex_verify(const unsigned char *m, size_t len, int src, int dst, uint64_t seq) {
    if (len < EX_HEAD) ex_die("message of %zu bytes from %d", len, src);
    uint32_t gs = ex_get_u32(m), gd = ex_get_u32(m + 4);
    uint64_t gseq = ex_get_u64(m + 8);
    if (gs != (uint32_t)src || gd != (uint32_t)dst || gseq != seq) {
        ex_die("expected %d->%d #%llu, got %lu->%lu #%llu", src, dst, (unsigned long long)seq,
               (unsigned long)gs, (unsigned long)gd, (unsigned long long)gseq);
    }
    if (ex_checksum(m + EX_HEAD, len - EX_HEAD) != ex_get_u64(m + 16)) {
        ex_die("%d->%d #%llu: checksum mismatch", src, dst, (unsigned long long)seq);
    }
    /* Regenerate the body in chunks and compare. */
    unsigned char want[4096];
    uint64_t x = ex_seed((uint32_t)src, (uint32_t)dst, seq);
    const unsigned char *body = m + EX_HEAD;
    size_t left = len - EX_HEAD;
    while (left > 0) {
        size_t k = left < sizeof want ? left : sizeof want;
        ex_fill_from(&x, want, k);
        if (memcmp(want, body, k) != 0) ex_die("%d->%d #%llu: body differs", src, dst, (unsigned long long)seq);
        body += k;
        left -= k;
    }
}

/* Message length for iteration i: cycles through small to max bytes. */
static inline size_t ex_size_for(uint64_t i, size_t max) {
    static const size_t sizes[] = {EX_HEAD, 100, 1000, 8000, 65536, 300000};
    size_t s = sizes[i % (sizeof sizes / sizeof sizes[0])];
    size_t cap = max > EX_HEAD ? max : EX_HEAD;
    return s < cap ? s : cap;
}

/* ---- time ---- */

static inline uint64_t ex_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- the stop decision ---- */

/* Stop after --iters iterations, or once any rank has run --seconds or seen
 * --until-file exist (checked collectively every 16 iterations, so all ranks
 * stop at the same one). */
typedef struct {
    uint64_t iters;
    uint64_t until_ns; /* 0: no time limit */
    const char *file;  /* NULL: none */
} ex_stop;

static inline ex_stop ex_stop_from_args(const ex_args *a) {
    double secs = ex_arg_f64(a, "seconds", 0.0);
    const char *file = ex_arg_str(a, "until-file", "");
    ex_stop s;
    s.file = *file ? file : NULL;
    int open_ended = secs > 0.0 || s.file != NULL;
    s.iters = ex_arg_u64(a, "iters", open_ended ? UINT64_MAX : 100);
    s.until_ns = secs > 0.0 ? ex_now_ns() + (uint64_t)(secs * 1e9) : 0;
    return s;
}

static inline int ex_stop_done(const ex_stop *s, uint64_t i) {
    if (i >= s->iters) return 1;
    if ((s->until_ns == 0 && s->file == NULL) || i % 16 != 0) return 0;
    int64_t f = (s->until_ns != 0 && ex_now_ns() >= s->until_ns) || (s->file && access(s->file, F_OK) == 0);
    EX_CHECK(gm_allreduce_i64(&f, 1, GM_MAX));
    return f == 1;
}

#endif /* GM_EXAMPLES_UTIL_H */
