/* An emulated host's clock: every process of the host preloads this library
 * (/etc/ld.so.preload in the host's mount namespace), which shifts CLOCK_REALTIME by
 * the host's offset, read at each call from a page the harness writes:
 *
 *     offset(now) = offset_ns + drift_ppb * (now - t0_ns) / 1e9     (now: the real time)
 *
 * so a host's clock can be off, run fast or slow, and jump, while its monotonic clock
 * stays the machine's (as on a real host, where settimeofday moves only the wall clock).
 * Reads (clock_gettime, gettimeofday, time) and absolute timers on the wall clock
 * (timerfd_settime and clock_nanosleep with an absolute time) see the shift. Not
 * covered: pthread_cond_timedwait, sem_timedwait and other waits glibc hands an absolute
 * wall-clock time to the kernel itself; static binaries.
 *
 * The page ("GANGCLK1"): a seqlock'd record; a missing or foreign page means no shift.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/timerfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CLOCK_PAGE "/mnt/clock"
#define MAGIC 0x314b4c43474e4147ULL /* "GANGCLK1" */

struct page {
    uint64_t magic;
    _Atomic uint64_t seq;
    int64_t offset_ns;
    int64_t drift_ppb;
    int64_t t0_ns;
};

static const struct page *volatile g_page;
static _Atomic int g_state; /* 0 unopened, 1 opening, 2 open or absent */

static const struct page *page(void) {
    if (atomic_load_explicit(&g_state, memory_order_acquire) == 2) {
        return g_page;
    }
    int expect = 0;
    if (!atomic_compare_exchange_strong(&g_state, &expect, 1)) {
        /* Another thread is opening it: no shift for this one call. */
        return atomic_load(&g_state) == 2 ? g_page : NULL;
    }
    /* Raw syscalls: open() and mmap() may be preloaded by others, and must not recurse. */
    int fd = (int)syscall(SYS_openat, AT_FDCWD, CLOCK_PAGE, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        void *p = (void *)syscall(SYS_mmap, NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
        syscall(SYS_close, fd);
        if (p != MAP_FAILED && ((const struct page *)p)->magic == MAGIC) {
            g_page = p;
        }
    }
    atomic_store_explicit(&g_state, 2, memory_order_release);
    return g_page;
}

static int (*real_clock_gettime)(clockid_t, struct timespec *);

static int64_t real_now_ns(void) {
    struct timespec ts;
    if (real_clock_gettime == NULL) {
        real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    }
    real_clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The host's offset at real time `now`. */
static int64_t offset_at(int64_t now) {
    const struct page *p = page();
    if (p == NULL) {
        return 0;
    }
    for (;;) {
        uint64_t s1 = atomic_load_explicit(&((struct page *)p)->seq, memory_order_acquire);
        if (s1 & 1) {
            continue;
        }
        int64_t off = p->offset_ns, drift = p->drift_ppb, t0 = p->t0_ns;
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&((struct page *)p)->seq, memory_order_relaxed) == s1) {
            /* drift_ppb * elapsed_s, in ns, without overflow for years */
            __int128 d = (__int128)drift * (now - t0) / 1000000000;
            return off + (int64_t)d;
        }
    }
}

static int is_wall(clockid_t c) {
    return c == CLOCK_REALTIME || c == CLOCK_REALTIME_COARSE || c == CLOCK_TAI;
}

static void shift(struct timespec *ts, int64_t by) {
    /* "Never" (systemd arms its clock-change timerfd at TIME_T_MAX) stays never, and
     * nothing overflows. */
    if (by == 0 || ts->tv_sec > 4000000000LL * 4 || ts->tv_sec < 0) {
        return;
    }
    int64_t ns = (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec + by;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
    if (ts->tv_nsec < 0) {
        ts->tv_nsec += 1000000000LL;
        ts->tv_sec -= 1;
    }
}

int clock_gettime(clockid_t c, struct timespec *ts) {
    if (real_clock_gettime == NULL) {
        real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    }
    int rc = real_clock_gettime(c, ts);
    if (rc == 0 && is_wall(c)) {
        int64_t now = (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec;
        shift(ts, offset_at(now));
    }
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz;
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    /* glibc declares tv nonnull; a caller passing NULL gets what the kernel gives. */
    struct timeval *volatile out = tv;
    if (rc == 0 && out != NULL) {
        out->tv_sec = ts.tv_sec;
        out->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t != NULL) {
        *t = ts.tv_sec;
    }
    return ts.tv_sec;
}

/* Which timerfds count wall-clock time (fd numbers below 4096; others pass through). */
static _Atomic unsigned char g_wall_fd[4096];

int timerfd_create(int c, int flags) {
    static int (*real)(int, int);
    if (real == NULL) {
        real = dlsym(RTLD_NEXT, "timerfd_create");
    }
    int fd = real(c, flags);
    if (fd >= 0 && fd < 4096) {
        atomic_store(&g_wall_fd[fd], is_wall(c));
    }
    return fd;
}

int timerfd_settime(int fd, int flags, const struct itimerspec *nv, struct itimerspec *old) {
    static int (*real)(int, int, const struct itimerspec *, struct itimerspec *);
    if (real == NULL) {
        real = dlsym(RTLD_NEXT, "timerfd_settime");
    }
    if (nv != NULL && (flags & TFD_TIMER_ABSTIME) && fd >= 0 && fd < 4096 &&
        atomic_load(&g_wall_fd[fd]) && (nv->it_value.tv_sec != 0 || nv->it_value.tv_nsec != 0)) {
        struct itimerspec v = *nv;
        shift(&v.it_value, -offset_at(real_now_ns()));
        return real(fd, flags, &v, old);
    }
    return real(fd, flags, nv, old);
}

int clock_nanosleep(clockid_t c, int flags, const struct timespec *req, struct timespec *rem) {
    static int (*real)(clockid_t, int, const struct timespec *, struct timespec *);
    if (real == NULL) {
        real = dlsym(RTLD_NEXT, "clock_nanosleep");
    }
    if (req != NULL && (flags & TIMER_ABSTIME) && is_wall(c)) {
        struct timespec t = *req;
        shift(&t, -offset_at(real_now_ns()));
        return real(c, flags, &t, rem);
    }
    return real(c, flags, req, rem);
}
