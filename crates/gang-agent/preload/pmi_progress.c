/* Preloaded into ranks the agent serves the simple PMI protocol (`pmi::progress_preload`).
 *
 * MPICH 4.0 (ch4:ucx) ends MPI_Finalize by closing every UCX endpoint in flush mode, then
 * waiting in a PMI barrier, then destroying its UCX workers. Over UCX's TCP transport a
 * flush of an endpoint that sent anything asks the peer for an acknowledgement (a PUT of
 * no bytes, 25 bytes on the wire), which the peer sends only from inside
 * ucp_worker_progress. A rank whose own flushes are done waits in the PMI barrier, in a
 * blocking read() of its PMI socket, and progresses nothing: a peer that reaches finalize
 * later flushes to it and waits forever (ranks in read(PMI_FD), one in
 * ucp_worker_progress, the probe unread in the waiting rank's socket). MPICH moved the
 * barrier before the flushes after 4.0 (pmodels/mpich 08d8105b7b, d6c7cd5b64).
 *
 * So: once the process has closed a UCX endpoint (ucp_disconnect_nb: it is finalizing), a
 * read() of the PMI socket waits in poll() and progresses the process's UCX workers while
 * it waits. Nothing else changes: before finalize, and in a process that uses no UCX or
 * no PMI, every call goes straight to the real one. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

typedef void *gp_worker;
typedef int gp_status;
typedef gp_status (*worker_create_fn)(void *, const void *, gp_worker *);
typedef void (*worker_destroy_fn)(gp_worker);
typedef unsigned (*worker_progress_fn)(gp_worker);
typedef void *(*disconnect_fn)(void *);
typedef ssize_t (*read_fn)(int, void *, size_t);

#define MAX_WORKERS 64

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static gp_worker workers[MAX_WORKERS];
static int n_workers;
static volatile int finalizing;
static int pmi_fd = -1;

__attribute__((constructor)) static void gp_progress_init(void) {
    const char *fd = getenv("PMI_FD");
    if (fd != NULL && *fd != '\0') {
        char *end = NULL;
        long v = strtol(fd, &end, 10);
        if (end != NULL && *end == '\0' && v >= 0 && v < 65536) {
            pmi_fd = (int)v;
        }
    }
}

static void *next(const char *name) { return dlsym(RTLD_NEXT, name); }

gp_status ucp_worker_create(void *context, const void *params, gp_worker *worker) {
    worker_create_fn real = (worker_create_fn)next("ucp_worker_create");
    if (real == NULL) {
        return -1; /* UCS_ERR_NO_MESSAGE: no UCX behind us (never called then) */
    }
    gp_status st = real(context, params, worker);
    if (st == 0) {
        pthread_mutex_lock(&lock);
        if (n_workers < MAX_WORKERS) {
            workers[n_workers++] = *worker;
        }
        pthread_mutex_unlock(&lock);
    }
    return st;
}

void ucp_worker_destroy(gp_worker worker) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_workers; i++) {
        if (workers[i] == worker) {
            workers[i] = workers[--n_workers];
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    worker_destroy_fn real = (worker_destroy_fn)next("ucp_worker_destroy");
    if (real != NULL) {
        real(worker);
    }
}

void *ucp_disconnect_nb(void *ep) {
    finalizing = 1;
    disconnect_fn real = (disconnect_fn)next("ucp_disconnect_nb");
    return real != NULL ? real(ep) : NULL;
}

ssize_t read(int fd, void *buf, size_t count) {
    static read_fn real;
    if (real == NULL) {
        real = (read_fn)next("read");
    }
    if (finalizing && fd == pmi_fd && n_workers > 0) {
        worker_progress_fn progress = (worker_progress_fn)dlsym(RTLD_DEFAULT, "ucp_worker_progress");
        for (;;) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            int r = poll(&p, 1, 1);
            if (r != 0 && !(r < 0 && errno == EINTR)) {
                break; /* readable, closed, or an error read() will report */
            }
            if (progress == NULL) {
                continue;
            }
            /* The same thread that waits in the barrier owns the workers (MPICH is in
             * MPI_Finalize): no other thread progresses them now. */
            gp_worker now[MAX_WORKERS];
            pthread_mutex_lock(&lock);
            int n = n_workers;
            for (int i = 0; i < n; i++) {
                now[i] = workers[i];
            }
            pthread_mutex_unlock(&lock);
            for (int i = 0; i < n; i++) {
                progress(now[i]);
            }
        }
    }
    return real(fd, buf, count);
}
