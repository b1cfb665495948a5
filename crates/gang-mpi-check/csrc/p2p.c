/* Point-to-point: sends are posted before they start, receives delivered once
 * complete; a blocking receive (or a wait on a receive request, or a probe) marks the
 * rank blocked for its duration. */
#include <stdlib.h>

#include "check.h"
#include "requests.h"

#define SEND_WRAPPER(NAME, ...)                                    \
    int NAME(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm __VA_ARGS__)

/* Blocking and nonblocking sends alike: counted once, before the call. */
SEND_WRAPPER(MPI_Send) {
    if (dest != MPI_PROC_NULL) gang_posted(1);
    return PMPI_Send(buf, count, dt, dest, tag, comm);
}
SEND_WRAPPER(MPI_Ssend) {
    if (dest != MPI_PROC_NULL) gang_posted(1);
    return PMPI_Ssend(buf, count, dt, dest, tag, comm);
}
SEND_WRAPPER(MPI_Bsend) {
    if (dest != MPI_PROC_NULL) gang_posted(1);
    return PMPI_Bsend(buf, count, dt, dest, tag, comm);
}
SEND_WRAPPER(MPI_Rsend) {
    if (dest != MPI_PROC_NULL) gang_posted(1);
    return PMPI_Rsend(buf, count, dt, dest, tag, comm);
}
SEND_WRAPPER(MPI_Isend, , MPI_Request *req) {
    if (dest != MPI_PROC_NULL) gang_posted(1);
    return PMPI_Isend(buf, count, dt, dest, tag, comm, req);
}
SEND_WRAPPER(MPI_Issend, , MPI_Request *req) {
    if (dest != MPI_PROC_NULL) gang_posted(1);
    return PMPI_Issend(buf, count, dt, dest, tag, comm, req);
}
SEND_WRAPPER(MPI_Ibsend, , MPI_Request *req) {
    if (dest != MPI_PROC_NULL) gang_posted(1);
    return PMPI_Ibsend(buf, count, dt, dest, tag, comm, req);
}
SEND_WRAPPER(MPI_Irsend, , MPI_Request *req) {
    if (dest != MPI_PROC_NULL) gang_posted(1);
    return PMPI_Irsend(buf, count, dt, dest, tag, comm, req);
}

/* Persistent sends: each MPI_Start is one message; `src` holds whether it has a peer. */
#define SEND_INIT(NAME, PNAME)                                                           \
    SEND_WRAPPER(NAME, , MPI_Request *req) {                                             \
        int rc = PNAME(buf, count, dt, dest, tag, comm, req);                            \
        if (rc == MPI_SUCCESS) req_put(gang_key(*req), REQ_PSEND, dest == MPI_PROC_NULL ? -1 : 0, 0, 0); \
        return rc;                                                                       \
    }
SEND_INIT(MPI_Send_init, PMPI_Send_init)
SEND_INIT(MPI_Ssend_init, PMPI_Ssend_init)
SEND_INIT(MPI_Bsend_init, PMPI_Bsend_init)
SEND_INIT(MPI_Rsend_init, PMPI_Rsend_init)

int MPI_Recv(void *buf, int count, MPI_Datatype dt, int src, int tag, MPI_Comm comm,
             MPI_Status *status) {
    if (src == MPI_PROC_NULL || !gang_page) return PMPI_Recv(buf, count, dt, src, tag, comm, status);
    gang_block(gang_world_rank(comm, src), gang_tag(tag));
    int rc = PMPI_Recv(buf, count, dt, src, tag, comm, status);
    gang_unblock(rc == MPI_SUCCESS);
    return rc;
}

int MPI_Irecv(void *buf, int count, MPI_Datatype dt, int src, int tag, MPI_Comm comm,
              MPI_Request *req) {
    int rc = PMPI_Irecv(buf, count, dt, src, tag, comm, req);
    if (rc == MPI_SUCCESS && src != MPI_PROC_NULL && gang_page)
        req_put(gang_key(*req), REQ_RECV, gang_world_rank(comm, src), gang_tag(tag), 1);
    return rc;
}

int MPI_Recv_init(void *buf, int count, MPI_Datatype dt, int src, int tag, MPI_Comm comm,
                  MPI_Request *req) {
    int rc = PMPI_Recv_init(buf, count, dt, src, tag, comm, req);
    if (rc == MPI_SUCCESS && src != MPI_PROC_NULL && gang_page)
        req_put(gang_key(*req), REQ_PRECV, gang_world_rank(comm, src), gang_tag(tag), 0);
    return rc;
}

int MPI_Sendrecv(const void *sbuf, int scount, MPI_Datatype sdt, int dest, int stag, void *rbuf,
                 int rcount, MPI_Datatype rdt, int src, int rtag, MPI_Comm comm,
                 MPI_Status *status) {
    if (dest != MPI_PROC_NULL) gang_posted(1);
    int recv = src != MPI_PROC_NULL && gang_page;
    if (recv) gang_block(gang_world_rank(comm, src), gang_tag(rtag));
    int rc = PMPI_Sendrecv(sbuf, scount, sdt, dest, stag, rbuf, rcount, rdt, src, rtag, comm,
                           status);
    if (recv) gang_unblock(rc == MPI_SUCCESS);
    return rc;
}

int MPI_Sendrecv_replace(void *buf, int count, MPI_Datatype dt, int dest, int stag, int src,
                         int rtag, MPI_Comm comm, MPI_Status *status) {
    if (dest != MPI_PROC_NULL) gang_posted(1);
    int recv = src != MPI_PROC_NULL && gang_page;
    if (recv) gang_block(gang_world_rank(comm, src), gang_tag(rtag));
    int rc = PMPI_Sendrecv_replace(buf, count, dt, dest, stag, src, rtag, comm, status);
    if (recv) gang_unblock(rc == MPI_SUCCESS);
    return rc;
}

/* A probe waits for a message without receiving it: blocked, nothing delivered. */
int MPI_Probe(int src, int tag, MPI_Comm comm, MPI_Status *status) {
    int wait = src != MPI_PROC_NULL && gang_page;
    if (wait) gang_block(gang_world_rank(comm, src), gang_tag(tag));
    int rc = PMPI_Probe(src, tag, comm, status);
    if (wait) gang_unblock(0);
    return rc;
}

int MPI_Mprobe(int src, int tag, MPI_Comm comm, MPI_Message *msg, MPI_Status *status) {
    int wait = src != MPI_PROC_NULL && gang_page;
    if (wait) gang_block(gang_world_rank(comm, src), gang_tag(tag));
    int rc = PMPI_Mprobe(src, tag, comm, msg, status);
    if (wait) gang_unblock(0);
    return rc;
}

/* A matched message is already here: receiving it is a delivery, never a wait. */
int MPI_Mrecv(void *buf, int count, MPI_Datatype dt, MPI_Message *msg, MPI_Status *status) {
    int real = *msg != MPI_MESSAGE_NO_PROC;
    int rc = PMPI_Mrecv(buf, count, dt, msg, status);
    if (rc == MPI_SUCCESS && real) gang_delivered(1);
    return rc;
}

int MPI_Imrecv(void *buf, int count, MPI_Datatype dt, MPI_Message *msg, MPI_Request *req) {
    int real = *msg != MPI_MESSAGE_NO_PROC;
    int rc = PMPI_Imrecv(buf, count, dt, msg, req);
    if (rc == MPI_SUCCESS && real && gang_page) req_put(gang_key(*req), REQ_RECV, -1, -1, 1);
    return rc;
}

#if MPI_VERSION >= 4
/* MPI-4's sends (MPICH 4: large-count, persistent large-count, partitioned,
 * Isendrecv): posted like the others, since a message delivered whose send was never
 * posted could balance one still in flight. Their receives are not counted, which can
 * only hide a deadlock. */
#define SEND_C(NAME, PNAME)                                                              \
    int NAME(const void *buf, MPI_Count count, MPI_Datatype dt, int dest, int tag,       \
             MPI_Comm comm) {                                                            \
        if (dest != MPI_PROC_NULL) gang_posted(1);                                       \
        return PNAME(buf, count, dt, dest, tag, comm);                                   \
    }
#define ISEND_C(NAME, PNAME)                                                             \
    int NAME(const void *buf, MPI_Count count, MPI_Datatype dt, int dest, int tag,       \
             MPI_Comm comm, MPI_Request *req) {                                          \
        if (dest != MPI_PROC_NULL) gang_posted(1);                                       \
        return PNAME(buf, count, dt, dest, tag, comm, req);                              \
    }
SEND_C(MPI_Send_c, PMPI_Send_c)
SEND_C(MPI_Ssend_c, PMPI_Ssend_c)
SEND_C(MPI_Bsend_c, PMPI_Bsend_c)
SEND_C(MPI_Rsend_c, PMPI_Rsend_c)
ISEND_C(MPI_Isend_c, PMPI_Isend_c)
ISEND_C(MPI_Issend_c, PMPI_Issend_c)
ISEND_C(MPI_Ibsend_c, PMPI_Ibsend_c)
ISEND_C(MPI_Irsend_c, PMPI_Irsend_c)

int MPI_Sendrecv_c(const void *sbuf, MPI_Count scount, MPI_Datatype sdt, int dest, int stag,
                   void *rbuf, MPI_Count rcount, MPI_Datatype rdt, int src, int rtag,
                   MPI_Comm comm, MPI_Status *status) {
    if (dest != MPI_PROC_NULL) gang_posted(1);
    return PMPI_Sendrecv_c(sbuf, scount, sdt, dest, stag, rbuf, rcount, rdt, src, rtag, comm,
                           status);
}

#define SEND_INIT_C(NAME, PNAME)                                                         \
    int NAME(const void *buf, MPI_Count count, MPI_Datatype dt, int dest, int tag,       \
             MPI_Comm comm, MPI_Request *req) {                                          \
        int rc = PNAME(buf, count, dt, dest, tag, comm, req);                            \
        if (rc == MPI_SUCCESS)                                                           \
            req_put(gang_key(*req), REQ_PSEND, dest == MPI_PROC_NULL ? -1 : 0, 0, 0);    \
        return rc;                                                                       \
    }
SEND_INIT_C(MPI_Send_init_c, PMPI_Send_init_c)
SEND_INIT_C(MPI_Ssend_init_c, PMPI_Ssend_init_c)
SEND_INIT_C(MPI_Bsend_init_c, PMPI_Bsend_init_c)
SEND_INIT_C(MPI_Rsend_init_c, PMPI_Rsend_init_c)

/* A partitioned send is one message per MPI_Start. */
int MPI_Psend_init(const void *buf, int partitions, MPI_Count count, MPI_Datatype dt, int dest,
                   int tag, MPI_Comm comm, MPI_Info info, MPI_Request *req) {
    int rc = PMPI_Psend_init(buf, partitions, count, dt, dest, tag, comm, info, req);
    if (rc == MPI_SUCCESS)
        req_put(gang_key(*req), REQ_PSEND, dest == MPI_PROC_NULL ? -1 : 0, 0, 0);
    return rc;
}

int MPI_Sendrecv_replace_c(void *buf, MPI_Count count, MPI_Datatype dt, int dest, int stag,
                           int src, int rtag, MPI_Comm comm, MPI_Status *status) {
    if (dest != MPI_PROC_NULL) gang_posted(1);
    return PMPI_Sendrecv_replace_c(buf, count, dt, dest, stag, src, rtag, comm, status);
}

int MPI_Isendrecv_c(const void *sbuf, MPI_Count scount, MPI_Datatype sdt, int dest, int stag,
                    void *rbuf, MPI_Count rcount, MPI_Datatype rdt, int src, int rtag,
                    MPI_Comm comm, MPI_Request *req) {
    if (dest != MPI_PROC_NULL) gang_posted(1);
    return PMPI_Isendrecv_c(sbuf, scount, sdt, dest, stag, rbuf, rcount, rdt, src, rtag, comm,
                            req);
}

int MPI_Isendrecv_replace_c(void *buf, MPI_Count count, MPI_Datatype dt, int dest, int stag,
                            int src, int rtag, MPI_Comm comm, MPI_Request *req) {
    if (dest != MPI_PROC_NULL) gang_posted(1);
    return PMPI_Isendrecv_replace_c(buf, count, dt, dest, stag, src, rtag, comm, req);
}

int MPI_Isendrecv(const void *sbuf, int scount, MPI_Datatype sdt, int dest, int stag,
                  void *rbuf, int rcount, MPI_Datatype rdt, int src, int rtag, MPI_Comm comm,
                  MPI_Request *req) {
    if (dest != MPI_PROC_NULL) gang_posted(1);
    return PMPI_Isendrecv(sbuf, scount, sdt, dest, stag, rbuf, rcount, rdt, src, rtag, comm,
                          req);
}

int MPI_Isendrecv_replace(void *buf, int count, MPI_Datatype dt, int dest, int stag, int src,
                          int rtag, MPI_Comm comm, MPI_Request *req) {
    if (dest != MPI_PROC_NULL) gang_posted(1);
    return PMPI_Isendrecv_replace(buf, count, dt, dest, stag, src, rtag, comm, req);
}
#endif
