/* Collectives, and MPI_Finalize as one over MPI_COMM_WORLD.
 *
 * A rank inside a collective is blocked, but all its members being inside one is not a
 * deadlock: it completes, however long it takes (a large allreduce, a job switched out
 * by the gang scheduler mid-barrier), and nothing of it is visible here. So a rank
 * entering a collective of n members posts n-1 virtual messages (its part, one to each
 * other member) and has them delivered when it leaves: while any rank is inside a
 * collective the job's sums differ and it is never flagged. The price is a deadlock in
 * which some ranks wait in a collective others never enter: not flagged either (a miss,
 * never a false alarm). */
#include "check.h"

static uint64_t others(MPI_Comm comm) {
    int n = 0, inter = 0, remote = 0;
    if (!gang_page || PMPI_Comm_size(comm, &n) != MPI_SUCCESS) return 0;
    PMPI_Comm_test_inter(comm, &inter);
    if (inter && PMPI_Comm_remote_size(comm, &remote) == MPI_SUCCESS) n += remote;
    return n > 1 ? (uint64_t)(n - 1) : 0;
}

static void enter(uint64_t k) {
    if (!k) return;
    gang_posted(k);
    gang_block(-1, -2);
}

static void leave(uint64_t k) {
    if (k) gang_unblock(k);
}

#define COLLECTIVE(CALL, COMM)          \
    do {                                \
        uint64_t k_ = others(COMM);     \
        enter(k_);                      \
        int rc_ = CALL;                 \
        leave(k_);                      \
        return rc_;                     \
    } while (0)

int MPI_Barrier(MPI_Comm comm) { COLLECTIVE(PMPI_Barrier(comm), comm); }

int MPI_Bcast(void *buf, int count, MPI_Datatype dt, int root, MPI_Comm comm) {
    COLLECTIVE(PMPI_Bcast(buf, count, dt, root, comm), comm);
}

int MPI_Reduce(const void *s, void *r, int count, MPI_Datatype dt, MPI_Op op, int root,
               MPI_Comm comm) {
    COLLECTIVE(PMPI_Reduce(s, r, count, dt, op, root, comm), comm);
}

int MPI_Allreduce(const void *s, void *r, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm) {
    COLLECTIVE(PMPI_Allreduce(s, r, count, dt, op, comm), comm);
}

int MPI_Gather(const void *s, int sc, MPI_Datatype sdt, void *r, int rc, MPI_Datatype rdt,
               int root, MPI_Comm comm) {
    COLLECTIVE(PMPI_Gather(s, sc, sdt, r, rc, rdt, root, comm), comm);
}

int MPI_Gatherv(const void *s, int sc, MPI_Datatype sdt, void *r, const int rcs[],
                const int displs[], MPI_Datatype rdt, int root, MPI_Comm comm) {
    COLLECTIVE(PMPI_Gatherv(s, sc, sdt, r, rcs, displs, rdt, root, comm), comm);
}

int MPI_Scatter(const void *s, int sc, MPI_Datatype sdt, void *r, int rc, MPI_Datatype rdt,
                int root, MPI_Comm comm) {
    COLLECTIVE(PMPI_Scatter(s, sc, sdt, r, rc, rdt, root, comm), comm);
}

int MPI_Scatterv(const void *s, const int scs[], const int displs[], MPI_Datatype sdt, void *r,
                 int rc, MPI_Datatype rdt, int root, MPI_Comm comm) {
    COLLECTIVE(PMPI_Scatterv(s, scs, displs, sdt, r, rc, rdt, root, comm), comm);
}

int MPI_Allgather(const void *s, int sc, MPI_Datatype sdt, void *r, int rc, MPI_Datatype rdt,
                  MPI_Comm comm) {
    COLLECTIVE(PMPI_Allgather(s, sc, sdt, r, rc, rdt, comm), comm);
}

int MPI_Allgatherv(const void *s, int sc, MPI_Datatype sdt, void *r, const int rcs[],
                   const int displs[], MPI_Datatype rdt, MPI_Comm comm) {
    COLLECTIVE(PMPI_Allgatherv(s, sc, sdt, r, rcs, displs, rdt, comm), comm);
}

int MPI_Alltoall(const void *s, int sc, MPI_Datatype sdt, void *r, int rc, MPI_Datatype rdt,
                 MPI_Comm comm) {
    COLLECTIVE(PMPI_Alltoall(s, sc, sdt, r, rc, rdt, comm), comm);
}

int MPI_Alltoallv(const void *s, const int scs[], const int sdispls[], MPI_Datatype sdt, void *r,
                  const int rcs[], const int rdispls[], MPI_Datatype rdt, MPI_Comm comm) {
    COLLECTIVE(PMPI_Alltoallv(s, scs, sdispls, sdt, r, rcs, rdispls, rdt, comm), comm);
}

int MPI_Finalize(void) {
    uint64_t k = others(MPI_COMM_WORLD);
    enter(k);
    int rc = PMPI_Finalize();
    leave(k);
    return rc;
}
