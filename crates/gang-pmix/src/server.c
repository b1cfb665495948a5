/*
 * The agent's PMIx server: OpenPMIx's server library, driven through a handful of plain
 * functions that Rust calls (lib.rs), and its upcalls forwarded to Rust as plain
 * callbacks. The library runs its own progress thread; every upcall arrives on it, so
 * the callbacks must not block (Rust queues the work and returns), and the blocking
 * calls here (registration) are only ever made from threads other than that one.
 *
 * Fences are not completed here: the local ranks' blob goes up to Rust, which gathers
 * every node's blob through the job's fence at the master and hands back their
 * concatenation (gp_fence_done), which is what the library expects from a host. A fence
 * that does not ask for the data (PMIX_COLLECT_DATA unset: Open MPI's
 * pmix_base_collect_data=0) is a barrier only, and a rank's data is then fetched when a
 * peer asks for it (direct_modex): Rust asks the hosting node, whose library answers
 * from its own rank's put (gp_dmodex_request).
 */
#define _GNU_SOURCE /* asprintf */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>

#include <pmix.h>
#include <pmix_server.h>

typedef void (*gp_fence_fn)(void *ctx, const char *nspace, const char *data, size_t ndata,
                            int collect, void *req);
typedef void (*gp_dmodex_fn)(void *ctx, const char *nspace, uint32_t rank, void *req);
typedef void (*gp_blob_fn)(void *ctx, int status, const char *data, size_t ndata);
typedef void (*gp_abort_fn)(void *ctx, const char *nspace, uint32_t rank, int status,
                            const char *msg);
typedef void (*gp_client_fn)(void *ctx, const char *nspace, uint32_t rank, int finalized);

static void *g_ctx;
static gp_fence_fn g_fence;
static gp_abort_fn g_abort;
static gp_client_fn g_client;
static gp_dmodex_fn g_dmodex;

static void put_err(char *err, size_t errlen, const char *what, pmix_status_t rc) {
    if (err != NULL && errlen > 0) {
        snprintf(err, errlen, "%s: %s (%d)", what, PMIx_Error_string(rc), rc);
    }
}

/* A blocking wait on one of the library's operation callbacks. */
typedef struct {
    pthread_mutex_t m;
    pthread_cond_t c;
    int done;
    pmix_status_t status;
} gp_wait_t;

static void wait_init(gp_wait_t *w) {
    pthread_mutex_init(&w->m, NULL);
    pthread_cond_init(&w->c, NULL);
    w->done = 0;
    w->status = PMIX_SUCCESS;
}

static void op_done(pmix_status_t status, void *cbdata) {
    gp_wait_t *w = cbdata;
    pthread_mutex_lock(&w->m);
    w->status = status;
    w->done = 1;
    pthread_cond_signal(&w->c);
    pthread_mutex_unlock(&w->m);
}

/* The status of a call that either finished at once or calls op_done later. */
static pmix_status_t wait_for(gp_wait_t *w, pmix_status_t rc) {
    if (rc == PMIX_OPERATION_SUCCEEDED) {
        rc = PMIX_SUCCESS;
    } else if (rc == PMIX_SUCCESS) {
        pthread_mutex_lock(&w->m);
        while (!w->done) {
            pthread_cond_wait(&w->c, &w->m);
        }
        rc = w->status;
        pthread_mutex_unlock(&w->m);
    }
    pthread_mutex_destroy(&w->m);
    pthread_cond_destroy(&w->c);
    return rc;
}

/* ---- upcalls ---- */

static pmix_status_t client_connected(const pmix_proc_t *proc, void *server_object,
                                      pmix_op_cbfunc_t cbfunc, void *cbdata) {
    (void)server_object;
    (void)cbfunc;
    (void)cbdata;
    g_client(g_ctx, proc->nspace, proc->rank, 0);
    return PMIX_OPERATION_SUCCEEDED;
}

static pmix_status_t client_finalized(const pmix_proc_t *proc, void *server_object,
                                      pmix_op_cbfunc_t cbfunc, void *cbdata) {
    (void)server_object;
    (void)cbfunc;
    (void)cbdata;
    g_client(g_ctx, proc->nspace, proc->rank, 1);
    return PMIX_OPERATION_SUCCEEDED;
}

static pmix_status_t abort_fn(const pmix_proc_t *proc, void *server_object, int status,
                              const char msg[], pmix_proc_t procs[], size_t nprocs,
                              pmix_op_cbfunc_t cbfunc, void *cbdata) {
    (void)server_object;
    (void)procs;
    (void)nprocs;
    (void)cbfunc;
    (void)cbdata;
    /* Whichever procs it names, the whole job fails: a job is all or nothing here. */
    g_abort(g_ctx, proc->nspace, proc->rank, status, msg != NULL ? msg : "");
    return PMIX_OPERATION_SUCCEEDED;
}

/* A fence in flight: the library's callback to call once every node's blob is in. */
typedef struct {
    pmix_modex_cbfunc_t cbfunc;
    void *cbdata;
} gp_fence_req;

static pmix_status_t fence_nb(const pmix_proc_t procs[], size_t nprocs,
                              const pmix_info_t info[], size_t ninfo, char *data, size_t ndata,
                              pmix_modex_cbfunc_t cbfunc, void *cbdata) {
    /* The data is collected only when asked: PMIx's default for a fence is no data. */
    int collect = 0;
    for (size_t i = 0; i < ninfo; i++) {
        if (PMIX_CHECK_KEY(&info[i], PMIX_COLLECT_DATA)) {
            collect = PMIX_INFO_TRUE(&info[i]) ? 1 : 0;
        }
    }
    /* The job's fence at the master is over every rank of one job: a fence over a
     * subset (or over several jobs) has no counterpart there. */
    if (nprocs != 1 || procs[0].rank != PMIX_RANK_WILDCARD) {
        return PMIX_ERR_NOT_SUPPORTED;
    }
    gp_fence_req *req = malloc(sizeof *req);
    if (req == NULL) {
        return PMIX_ERR_NOMEM;
    }
    req->cbfunc = cbfunc;
    req->cbdata = cbdata;
    /* data belongs to the library and is valid during this call only: Rust copies it. */
    g_fence(g_ctx, procs[0].nspace, data, ndata, collect, req);
    return PMIX_SUCCESS;
}

static void release_blob(void *cbdata) { free(cbdata); }

/* Complete a fence (every node's blob, concatenated) or a direct modex (the rank's
 * blob): `data` is copied; a failure keeps its status (PMIX_ERR_NOT_FOUND,
 * PMIX_ERR_TIMEOUT mean something to the client), anything else not negative is an
 * error. */
void gp_fence_done(void *vreq, int status, const char *data, size_t ndata) {
    gp_fence_req *req = vreq;
    char *copy = NULL;
    if (status == PMIX_SUCCESS && ndata > 0) {
        copy = malloc(ndata);
        if (copy == NULL) {
            status = PMIX_ERR_NOMEM;
            ndata = 0;
        } else {
            memcpy(copy, data, ndata);
        }
    } else {
        ndata = 0;
    }
    if (status > 0) {
        status = PMIX_ERROR;
    }
    if (req->cbfunc != NULL) {
        req->cbfunc(status, copy, ndata, req->cbdata, copy != NULL ? release_blob : NULL, copy);
    } else {
        free(copy);
    }
    free(req);
}

/* Data a rank asks for that no fence brought (the fence did not collect): Rust fetches
 * it from the node that runs the rank and completes the request with gp_fence_done. */
static pmix_status_t direct_modex(const pmix_proc_t *proc, const pmix_info_t info[],
                                  size_t ninfo, pmix_modex_cbfunc_t cbfunc, void *cbdata) {
    (void)info;
    (void)ninfo;
    if (proc->rank == PMIX_RANK_WILDCARD) {
        return PMIX_ERR_NOT_FOUND;
    }
    gp_fence_req *req = malloc(sizeof *req);
    if (req == NULL) {
        return PMIX_ERR_NOMEM;
    }
    req->cbfunc = cbfunc;
    req->cbdata = cbdata;
    g_dmodex(g_ctx, proc->nspace, proc->rank, req);
    return PMIX_SUCCESS;
}

static pmix_server_module_t module = {
    .client_connected = client_connected,
    .client_finalized = client_finalized,
    .abort = abort_fn,
    .fence_nb = fence_nb,
    .direct_modex = direct_modex,
};

/* ---- calls from Rust ---- */

int gp_init(const char *tmpdir, const char *uri_file, const char *hostname,
            const char *server_nspace, uint32_t server_rank, void *ctx, gp_fence_fn fence, gp_abort_fn abortf,
            gp_client_fn client, gp_dmodex_fn dmodex, char *err, size_t errlen) {
    g_ctx = ctx;
    g_dmodex = dmodex;
    g_fence = fence;
    g_abort = abortf;
    g_client = client;
    pmix_info_t *info;
    size_t n = 0, ninfo = 8;
    bool no = false, yes = true;
    pmix_rank_t rank = server_rank;
    PMIX_INFO_CREATE(info, ninfo);
    /* Many agents may share a host (a local test cluster): each keeps its files in its
     * own directory and none claims to be the host's system server. */
    PMIX_INFO_LOAD(&info[n++], PMIX_SERVER_TMPDIR, tmpdir, PMIX_STRING);
    PMIX_INFO_LOAD(&info[n++], PMIX_SYSTEM_TMPDIR, tmpdir, PMIX_STRING);
    PMIX_INFO_LOAD(&info[n++], PMIX_SERVER_SYSTEM_SUPPORT, &no, PMIX_BOOL);
    /* The node's name in the jobs' node maps: the library finds its own node there. */
    PMIX_INFO_LOAD(&info[n++], PMIX_HOSTNAME, hostname, PMIX_STRING);
    PMIX_INFO_LOAD(&info[n++], PMIX_SERVER_NSPACE, server_nspace, PMIX_STRING);
    PMIX_INFO_LOAD(&info[n++], PMIX_SERVER_RANK, &rank, PMIX_PROC_RANK);
    /* One IPv4 listener on loopback, whose URI (and so port) goes to a file: the gate
     * (gate.rs) finds the listener by that port and takes it over (gp_gate_listener). */
    PMIX_INFO_LOAD(&info[n++], PMIX_TCP_DISABLE_IPV6, &yes, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[n++], PMIX_TCP_REPORT_URI, uri_file, PMIX_STRING);
    pmix_status_t rc = PMIx_server_init(&module, info, n);
    PMIX_INFO_FREE(info, ninfo);
    if (rc != PMIX_SUCCESS) {
        put_err(err, errlen, "PMIx_server_init", rc);
    }
    return rc;
}

int gp_finalize(void) { return PMIx_server_finalize(); }

/* Register a job with one local rank, `my_rank`, of `size`; rank r runs on node
 * nodes[r] (a comma-separated list, one name a rank: one rank per node). */
int gp_register_job(const char *nspace, uint32_t size, uint32_t my_rank, const char *nodes,
                    char *err, size_t errlen) {
    char *node_regex = NULL, *proc_regex = NULL, *ppn = NULL, *peers = NULL;
    pmix_status_t rc;
    /* Rank r alone on node r: the proc map is "0;1;2;...". */
    size_t cap = (size_t)size * 11 + 1;
    ppn = malloc(cap);
    if (ppn == NULL) {
        put_err(err, errlen, "register job", PMIX_ERR_NOMEM);
        return PMIX_ERR_NOMEM;
    }
    size_t at = 0;
    for (uint32_t r = 0; r < size; r++) {
        at += snprintf(ppn + at, cap - at, r == 0 ? "%u" : ";%u", r);
    }
    if ((rc = PMIx_generate_regex(nodes, &node_regex)) != PMIX_SUCCESS) {
        put_err(err, errlen, "PMIx_generate_regex (node map)", rc);
        goto out;
    }
    if ((rc = PMIx_generate_ppn(ppn, &proc_regex)) != PMIX_SUCCESS) {
        put_err(err, errlen, "PMIx_generate_ppn (proc map)", rc);
        goto out;
    }
    if (asprintf(&peers, "%u", my_rank) < 0) {
        peers = NULL;
        rc = PMIX_ERR_NOMEM;
        put_err(err, errlen, "register job", rc);
        goto out;
    }
    /* The node names, one a rank, for each rank's hostname. */
    char *names = strdup(nodes);
    if (names == NULL) {
        rc = PMIX_ERR_NOMEM;
        put_err(err, errlen, "register job", rc);
        goto out;
    }
    char **name_of = calloc(size, sizeof(char *));
    if (name_of == NULL) {
        free(names);
        rc = PMIX_ERR_NOMEM;
        put_err(err, errlen, "register job", rc);
        goto out;
    }
    char *save = NULL, *tok = strtok_r(names, ",", &save);
    for (uint32_t r = 0; r < size && tok != NULL; r++, tok = strtok_r(NULL, ",", &save)) {
        name_of[r] = tok;
    }

    size_t ninfo = 15 + size, n = 0;
    pmix_info_t *info;
    PMIX_INFO_CREATE(info, ninfo);
    uint32_t one = 1, zero = 0;
    pmix_rank_t leader = my_rank, app_leader = 0;
    PMIX_INFO_LOAD(&info[n++], PMIX_UNIV_SIZE, &size, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[n++], PMIX_JOB_SIZE, &size, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[n++], PMIX_MAX_PROCS, &size, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[n++], PMIX_JOBID, nspace, PMIX_STRING);
    PMIX_INFO_LOAD(&info[n++], PMIX_JOB_NUM_APPS, &one, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[n++], PMIX_NUM_NODES, &size, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[n++], PMIX_NODE_MAP, node_regex, PMIX_STRING);
    PMIX_INFO_LOAD(&info[n++], PMIX_PROC_MAP, proc_regex, PMIX_STRING);
    PMIX_INFO_LOAD(&info[n++], PMIX_LOCAL_SIZE, &one, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[n++], PMIX_NODE_SIZE, &one, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[n++], PMIX_LOCAL_PEERS, peers, PMIX_STRING);
    PMIX_INFO_LOAD(&info[n++], PMIX_LOCALLDR, &leader, PMIX_PROC_RANK);
    PMIX_INFO_LOAD(&info[n++], PMIX_APPLDR, &app_leader, PMIX_PROC_RANK);
    PMIX_INFO_LOAD(&info[n++], PMIX_NODEID, &my_rank, PMIX_UINT32);
    PMIX_INFO_LOAD(&info[n++], PMIX_SPAWNED, &(bool){false}, PMIX_BOOL);
    /* Every rank's own data, so that a rank can ask where any peer runs. */
    for (uint32_t r = 0; r < size; r++) {
        pmix_data_array_t *darray;
        PMIX_DATA_ARRAY_CREATE(darray, 9, PMIX_INFO);
        pmix_info_t *pi = darray->array;
        pmix_rank_t pr = r;
        uint16_t lr = 0;
        PMIX_INFO_LOAD(&pi[0], PMIX_RANK, &pr, PMIX_PROC_RANK);
        PMIX_INFO_LOAD(&pi[1], PMIX_APPNUM, &zero, PMIX_UINT32);
        PMIX_INFO_LOAD(&pi[2], PMIX_APPLDR, &app_leader, PMIX_PROC_RANK);
        PMIX_INFO_LOAD(&pi[3], PMIX_GLOBAL_RANK, &pr, PMIX_PROC_RANK);
        PMIX_INFO_LOAD(&pi[4], PMIX_APP_RANK, &pr, PMIX_PROC_RANK);
        PMIX_INFO_LOAD(&pi[5], PMIX_LOCAL_RANK, &lr, PMIX_UINT16);
        PMIX_INFO_LOAD(&pi[6], PMIX_NODE_RANK, &lr, PMIX_UINT16);
        PMIX_INFO_LOAD(&pi[7], PMIX_NODEID, &r, PMIX_UINT32);
        PMIX_INFO_LOAD(&pi[8], PMIX_HOSTNAME, name_of[r] != NULL ? name_of[r] : "", PMIX_STRING);
        /* Handed over whole: PMIX_INFO_FREE releases it with the array. */
        strncpy(info[n].key, PMIX_PROC_INFO_ARRAY, PMIX_MAX_KEYLEN);
        info[n].value.type = PMIX_DATA_ARRAY;
        info[n].value.data.darray = darray;
        n++;
    }
    gp_wait_t w;
    wait_init(&w);
    rc = wait_for(&w, PMIx_server_register_nspace(nspace, 1, info, n, op_done, &w));
    if (rc != PMIX_SUCCESS) {
        put_err(err, errlen, "PMIx_server_register_nspace", rc);
    }
    PMIX_INFO_FREE(info, ninfo);
    free(name_of);
    free(names);
out:
    free(node_regex);
    free(proc_regex);
    free(ppn);
    free(peers);
    return rc;
}

int gp_register_client(const char *nspace, uint32_t rank, uint32_t uid, uint32_t gid,
                       char *err, size_t errlen) {
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, nspace, rank);
    gp_wait_t w;
    wait_init(&w);
    pmix_status_t rc =
        wait_for(&w, PMIx_server_register_client(&proc, uid, gid, NULL, op_done, &w));
    if (rc != PMIX_SUCCESS) {
        put_err(err, errlen, "PMIx_server_register_client", rc);
    }
    return rc;
}

/* The variables the rank needs to reach this server: NULL-terminated, freed with
 * gp_free_env. */
int gp_setup_fork(const char *nspace, uint32_t rank, char ***env, char *err, size_t errlen) {
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, nspace, rank);
    *env = NULL;
    pmix_status_t rc = PMIx_server_setup_fork(&proc, env);
    if (rc != PMIX_SUCCESS) {
        put_err(err, errlen, "PMIx_server_setup_fork", rc);
    }
    return rc;
}

void gp_free_env(char **env) { PMIX_ARGV_FREE(env); }

/* A local rank's data for a peer on another node, as the library packs it for a direct
 * modex: `done(ctx, status, data, ndata)` once the rank has put it (the library waits
 * for its commit), on the library's thread; data is valid during that call only. */
typedef struct {
    gp_blob_fn done;
    void *ctx;
} gp_blob_req;

static void dmodex_answered(pmix_status_t status, char *data, size_t sz, void *cbdata) {
    gp_blob_req *r = cbdata;
    r->done(r->ctx, status, data, sz);
    free(r);
}

int gp_dmodex_request(const char *nspace, uint32_t rank, gp_blob_fn done, void *ctx) {
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, nspace, rank);
    gp_blob_req *r = malloc(sizeof *r);
    if (r == NULL) {
        return PMIX_ERR_NOMEM;
    }
    r->done = done;
    r->ctx = ctx;
    pmix_status_t rc = PMIx_server_dmodex_request(&proc, dmodex_answered, r);
    if (rc != PMIX_SUCCESS) {
        free(r);
    }
    return rc;
}

/* The rank is gone: forget it, and its job (one rank a job a node). */
void gp_deregister(const char *nspace, uint32_t rank) {
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, nspace, rank);
    gp_wait_t w;
    wait_init(&w);
    PMIx_server_deregister_client(&proc, op_done, &w);
    wait_for(&w, PMIX_SUCCESS);
    wait_init(&w);
    PMIx_server_deregister_nspace(nspace, op_done, &w);
    wait_for(&w, PMIX_SUCCESS);
}

/* Put the gate in front of the library's listener. The library accepts on its listening
 * socket (127.0.0.1:port) from its own thread and reads each connection's handshake on its
 * progress thread with blocking reads and no deadline, and over TCP it believes the uid a
 * client claims: anyone who can connect can stall or fool it. So the listening socket's
 * descriptor number is made to name `unix_fd` (a Unix socket only the agent's user can
 * reach), and the TCP listener moves to a new descriptor, returned in *tcp_fd, for the
 * gate to accept on. The library's listen thread picks the new socket up at its next
 * select (at most 2 s; nobody is registered to connect before then). */
int gp_gate_listener(int port, int unix_fd, int *tcp_fd, char *err, size_t errlen) {
    int found = -1;
    int max = (int)sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536) {
        max = 65536;
    }
    for (int fd = 0; fd < max; fd++) {
        int listening = 0;
        socklen_t len = sizeof listening;
        if (fd == unix_fd ||
            getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) {
            continue;
        }
        struct sockaddr_in sin;
        len = sizeof sin;
        if (getsockname(fd, (struct sockaddr *)&sin, &len) != 0 || sin.sin_family != AF_INET ||
            ntohs(sin.sin_port) != port || sin.sin_addr.s_addr != htonl(INADDR_LOOPBACK)) {
            continue;
        }
        if (found >= 0) {
            snprintf(err, errlen, "two listening sockets on 127.0.0.1:%d (%d and %d)", port,
                     found, fd);
            return -1;
        }
        found = fd;
    }
    if (found < 0) {
        snprintf(err, errlen, "no listening socket on 127.0.0.1:%d in this process", port);
        return -1;
    }
    int moved = fcntl(found, F_DUPFD_CLOEXEC, 0);
    if (moved < 0) {
        snprintf(err, errlen, "dup of the PMIx listener: %s", strerror(errno));
        return -1;
    }
    /* The library made it non-blocking; the gate's accept loop blocks. */
    int flags = fcntl(moved, F_GETFL, 0);
    if (flags < 0 || fcntl(moved, F_SETFL, flags & ~O_NONBLOCK) != 0 ||
        dup3(unix_fd, found, O_CLOEXEC) < 0) {
        snprintf(err, errlen, "taking over the PMIx listener: %s", strerror(errno));
        close(moved);
        return -1;
    }
    *tcp_fd = moved;
    return 0;
}
