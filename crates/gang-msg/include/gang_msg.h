/*
 * gang_msg.h: the C interface of gang-msg, the messaging library of jobs run
 * by the gang scheduler. Hand-written to mirror src/ffi.rs; tests/c_abi.rs
 * compiles and runs C programs against it, so a signature that drifts fails
 * the build of those programs or their checks.
 *
 * Link with libgang_msg.a (plus -lpthread -ldl -lm) or libgang_msg.so.
 * Every call returns GM_OK (0) or a negative GM_ERR* code; gm_last_error()
 * names the problem. Ranks and tags are ints; GM_ANY (-1) as a source or tag
 * of a receive matches any source, or any tag >= 0. User tags are >= 0.
 */
#ifndef GANG_MSG_H
#define GANG_MSG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GM_OK 0
#define GM_ERR (-1)
#define GM_ERR_TRUNCATED (-2) /* the message did not fit; *out_len says its size */
#define GM_ERR_NOT_INIT (-3)

#define GM_ANY (-1)

/* Reduction operators of gm_allreduce_*. */
#define GM_SUM 0
#define GM_MIN 1
#define GM_MAX 2

/* A pending gm_isend or gm_irecv; freed by gm_wait or a gm_test that completes it. */
typedef struct GmRequest gm_request;

/* Start from the environment the node agent set (GANG_RANK, GANG_MSG_DIR, ...). */
int gm_init(void);
/* Barrier, wait until every message this rank sent is delivered, stop. */
int gm_finalize(void);

int gm_rank(void);
int gm_size(void);
/* This rank's node on the mesh. */
int gm_coord(int *x, int *y);
/* out[0..4] = north (y-1), south (y+1), east (x+1), west (x-1) ranks in the
 * job's rectangle, -1 at an edge. */
int gm_neighbours(int out[4]);

/* Eager send: the data is copied before the call returns. */
int gm_send(int dest, int tag, const void *buf, size_t len);
/* Blocking receive into buf (cap bytes). Out pointers may be NULL. */
int gm_recv(int src, int tag, void *buf, size_t cap, int *out_src, int *out_tag, size_t *out_len);

/* The request completes once the receiver has the message in its buffers. */
int gm_isend(int dest, int tag, const void *buf, size_t len, gm_request **req);
/* buf must stay valid until the request completes. */
int gm_irecv(int src, int tag, void *buf, size_t cap, gm_request **req);
/* Wait for and free the request; for a receive, fill its buffer and the out pointers. */
int gm_wait(gm_request *req, int *out_src, int *out_tag, size_t *out_len);
/* *flag = 1 (and the request is freed) if it completed, else 0. */
int gm_test(gm_request *req, int *flag, int *out_src, int *out_tag, size_t *out_len);

int gm_barrier(void);
/* len bytes from root's buf into every rank's buf (len equal on all ranks). */
int gm_broadcast(int root, void *buf, size_t len);
/* Element-wise over all ranks, in place; op is GM_SUM, GM_MIN or GM_MAX. */
int gm_allreduce_i64(int64_t *vals, size_t n, int op);
int gm_allreduce_f64(double *vals, size_t n, int op);

/* Spin this long in a blocking receive before sleeping (GANG_MSG_SPIN_US). */
int gm_set_spin_us(uint64_t us);
/* The master clock (CLOCK_REALTIME + the agent's offset), ns; 0 before gm_init. */
uint64_t gm_master_now_ns(void);

/* The message of this thread's last failing call ("" if none). */
const char *gm_last_error(void);
/* Tell the agent the job failed, and exit with code. */
void gm_abort(int code, const char *msg);

#ifdef __cplusplus
}
#endif

#endif /* GANG_MSG_H */
