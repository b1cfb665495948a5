/* Completing requests: a wait on a set holding a pending receive is a blocked receive;
 * each receive request that completes (by a wait or a test) is one delivery. Handles
 * are copied before the call, which sets completed ones to MPI_REQUEST_NULL. */
#include <stdlib.h>

#include "check.h"
#include "requests.h"

enum { ON_STACK = 64 };

struct keys {
    uint64_t stack[ON_STACK];
    uint64_t *k;
};

static void keys_of(struct keys *ks, int n, const MPI_Request *reqs) {
    ks->k = n <= ON_STACK ? ks->stack : malloc((size_t)n * sizeof *ks->k);
    if (!ks->k) return; /* unfollowed: deliveries undercounted, never invented */
    for (int i = 0; i < n; i++) ks->k[i] = gang_key(reqs[i]);
}

static void keys_done(struct keys *ks) {
    if (ks->k && ks->k != ks->stack) free(ks->k);
}

/* Block on the first pending receive among `keys`, if any; whether it did. */
static int block_on_any(const uint64_t *keys, int n) {
    if (!gang_page || !keys) return 0;
    for (int i = 0; i < n; i++) {
        struct req_entry e = req_get(keys[i]);
        if ((e.kind == REQ_RECV) || (e.kind == REQ_PRECV && e.active)) {
            gang_block(e.src, e.tag);
            return 1;
        }
    }
    return 0;
}

/* The request `key` completed. Persistent ones stay (inactive) until freed. */
static void completed(uint64_t key) {
    struct req_entry e = req_complete(key);
    if (!e.key || e.cancelled) return;
    if (e.kind == REQ_RECV || (e.kind == REQ_PRECV && e.active)) gang_delivered(1);
}

int MPI_Wait(MPI_Request *req, MPI_Status *status) {
    uint64_t key = gang_key(*req);
    int blocked = block_on_any(&key, 1);
    int rc = PMPI_Wait(req, status);
    if (blocked) gang_unblock(0);
    if (rc == MPI_SUCCESS) completed(key);
    return rc;
}

/* MPI_Waitall over two or more pending receives, one of which arrives and one never
 * will: inside one PMPI_Waitall the arrived one would stay undelivered for good, and the
 * job would never look stuck. So it waits by parts: PMPI_Waitsome until at most one
 * receive is pending, delivering what each returns and blocking anew on the first
 * receive still pending; then PMPI_Waitall for the rest. Statuses go where Waitall puts
 * them. Returns 0 (and nothing done) when out of memory: the caller waits whole. */
static int waitall_by_parts(int n, MPI_Request reqs[], MPI_Status statuses[],
                            const uint64_t *keys, int *rc_out) {
    int ignore = statuses == MPI_STATUSES_IGNORE;
    int *idx = malloc((size_t)n * sizeof *idx);
    char *recv = malloc((size_t)n), *early = calloc((size_t)n, 1);
    MPI_Status *got = ignore ? NULL : malloc((size_t)n * sizeof *got);
    MPI_Status *saved = ignore ? NULL : malloc((size_t)n * sizeof *saved);
    struct req_entry *entry = malloc((size_t)n * sizeof *entry);
    int ok = idx && recv && early && entry && (ignore || (got && saved));
    int rc = MPI_SUCCESS;
    if (ok) {
        for (int i = 0; i < n; i++) {
            entry[i] = req_get(keys[i]);
            recv[i] = entry[i].kind == REQ_RECV || (entry[i].kind == REQ_PRECV && entry[i].active);
        }
        for (;;) {
            int pending = 0, first = -1;
            for (int i = 0; i < n; i++)
                if (recv[i] && !early[i] && pending++ == 0) first = i;
            if (pending < 2) break;
            gang_block(entry[first].src, entry[first].tag);
            int outcount = 0;
            rc = PMPI_Waitsome(n, reqs, &outcount, idx, ignore ? MPI_STATUSES_IGNORE : got);
            gang_unblock(0);
            if (rc != MPI_SUCCESS || outcount == MPI_UNDEFINED) break;
            for (int k = 0; k < outcount; k++) {
                early[idx[k]] = 1;
                if (!ignore) saved[idx[k]] = got[k];
                completed(keys[idx[k]]);
            }
        }
        if (rc == MPI_SUCCESS) {
            int blocked = 0;
            for (int i = 0; i < n && !blocked; i++)
                if (recv[i] && !early[i]) {
                    gang_block(entry[i].src, entry[i].tag);
                    blocked = 1;
                }
            rc = PMPI_Waitall(n, reqs, statuses);
            if (blocked) gang_unblock(0);
            if (rc == MPI_SUCCESS)
                for (int i = 0; i < n; i++)
                    if (!early[i]) completed(keys[i]);
            /* Waitall reports the ones Waitsome completed as empty: put theirs back. */
            if (!ignore)
                for (int i = 0; i < n; i++)
                    if (early[i]) statuses[i] = saved[i];
        }
        *rc_out = rc;
    }
    free(idx);
    free(recv);
    free(early);
    free(got);
    free(saved);
    free(entry);
    return ok;
}

static int pending_receives(const uint64_t *keys, int n) {
    int pending = 0;
    for (int i = 0; i < n && pending < 2; i++) {
        struct req_entry e = req_get(keys[i]);
        pending += e.kind == REQ_RECV || (e.kind == REQ_PRECV && e.active);
    }
    return pending;
}

int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status statuses[]) {
    struct keys ks;
    keys_of(&ks, n, reqs);
    int rc;
    if (gang_page && ks.k && n > 1 && pending_receives(ks.k, n) >= 2 &&
        waitall_by_parts(n, reqs, statuses, ks.k, &rc)) {
        keys_done(&ks);
        return rc;
    }
    int blocked = block_on_any(ks.k, n);
    rc = PMPI_Waitall(n, reqs, statuses);
    if (blocked) gang_unblock(0);
    /* On MPI_ERR_IN_STATUS some completed and some did not: count none. */
    if (rc == MPI_SUCCESS && ks.k)
        for (int i = 0; i < n; i++) completed(ks.k[i]);
    keys_done(&ks);
    return rc;
}

int MPI_Waitany(int n, MPI_Request reqs[], int *index, MPI_Status *status) {
    struct keys ks;
    keys_of(&ks, n, reqs);
    int blocked = block_on_any(ks.k, n);
    int rc = PMPI_Waitany(n, reqs, index, status);
    if (blocked) gang_unblock(0);
    if (rc == MPI_SUCCESS && ks.k && *index != MPI_UNDEFINED) completed(ks.k[*index]);
    keys_done(&ks);
    return rc;
}

int MPI_Waitsome(int n, MPI_Request reqs[], int *outcount, int indices[],
                 MPI_Status statuses[]) {
    struct keys ks;
    keys_of(&ks, n, reqs);
    int blocked = block_on_any(ks.k, n);
    int rc = PMPI_Waitsome(n, reqs, outcount, indices, statuses);
    if (blocked) gang_unblock(0);
    if (rc == MPI_SUCCESS && ks.k && *outcount != MPI_UNDEFINED)
        for (int i = 0; i < *outcount; i++) completed(ks.k[indices[i]]);
    keys_done(&ks);
    return rc;
}

int MPI_Test(MPI_Request *req, int *flag, MPI_Status *status) {
    uint64_t key = gang_key(*req);
    int rc = PMPI_Test(req, flag, status);
    if (rc == MPI_SUCCESS && *flag) completed(key);
    return rc;
}

int MPI_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status statuses[]) {
    struct keys ks;
    keys_of(&ks, n, reqs);
    int rc = PMPI_Testall(n, reqs, flag, statuses);
    if (rc == MPI_SUCCESS && *flag && ks.k)
        for (int i = 0; i < n; i++) completed(ks.k[i]);
    keys_done(&ks);
    return rc;
}

int MPI_Testany(int n, MPI_Request reqs[], int *index, int *flag, MPI_Status *status) {
    struct keys ks;
    keys_of(&ks, n, reqs);
    int rc = PMPI_Testany(n, reqs, index, flag, status);
    if (rc == MPI_SUCCESS && *flag && ks.k && *index != MPI_UNDEFINED) completed(ks.k[*index]);
    keys_done(&ks);
    return rc;
}

int MPI_Testsome(int n, MPI_Request reqs[], int *outcount, int indices[],
                 MPI_Status statuses[]) {
    struct keys ks;
    keys_of(&ks, n, reqs);
    int rc = PMPI_Testsome(n, reqs, outcount, indices, statuses);
    if (rc == MPI_SUCCESS && ks.k && *outcount != MPI_UNDEFINED)
        for (int i = 0; i < *outcount; i++) completed(ks.k[indices[i]]);
    keys_done(&ks);
    return rc;
}

/* Starting a persistent send posts one message; a persistent receive becomes pending. */
static void started(uint64_t key) {
    struct req_entry e = req_get(key);
    if (!e.key) return;
    if (e.kind == REQ_PSEND && e.src >= 0) gang_posted(1);
    req_set_active(key, 1);
}

int MPI_Start(MPI_Request *req) {
    started(gang_key(*req));
    return PMPI_Start(req);
}

int MPI_Startall(int n, MPI_Request reqs[]) {
    for (int i = 0; i < n; i++) started(gang_key(reqs[i]));
    return PMPI_Startall(n, reqs);
}

/* A freed receive may still complete unseen: a delivery missed is the safe way wrong. */
int MPI_Request_free(MPI_Request *req) {
    req_remove(gang_key(*req));
    return PMPI_Request_free(req);
}

/* A cancelled receive completes without a message. If the cancel came too late and it
 * did receive one, that delivery is missed (the safe way wrong). */
int MPI_Cancel(MPI_Request *req) {
    req_cancelled(gang_key(*req));
    return PMPI_Cancel(req);
}
