/* The state page and the process-level hooks: MPI_Init maps the page, a constructor
 * refuses to run under the other MPI implementation's ABI. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

struct gang_state_page *gang_page;

#ifdef OPEN_MPI
#define THIS_IMPL "Open MPI"
#define OTHER_IMPL "MPICH"
#define OTHER_MARK "MPIR_Err_return_comm"
#define OTHER_FLAG "prun --mpi pmi1"
#else
#define THIS_IMPL "MPICH"
#define OTHER_IMPL "Open MPI"
#define OTHER_MARK "ompi_mpi_comm_world"
#define OTHER_FLAG "prun --mpi pmix"
#endif

/* The wrappers are compiled against one implementation's ABI (handle types, status
 * layout, constants); under the other's they would pass truncated handles into it. Say
 * so and stop before main rather than crash somewhere inside MPI. Processes of the rank
 * that load no MPI (a shell, a wrapper script) see neither mark and are left alone. */
__attribute__((constructor)) static void refuse_the_other_abi(void) {
    if (dlsym(RTLD_DEFAULT, OTHER_MARK)) {
        fprintf(stderr,
                "gang-mpi-check: this program is linked with %s, but --mpi-check preloaded "
                "the %s checking library (chosen by the job's --mpi, or under auto by the "
                "file the rank starts): run it with %s\n",
                OTHER_IMPL, THIS_IMPL, OTHER_FLAG);
        _exit(127);
    }
}

static uint64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void gang_open_page(void) {
    const char *dir = getenv("GANG_MSG_DIR");
    if (!dir || !*dir || gang_page) return;
    char path[4096];
    /* The agent passes the page as sealed memory ($GANG_STATE_FD, kept open for the
     * rank's other processes); a tool without an agent puts it in the directory. */
    const char *fd_var = getenv("GANG_STATE_FD");
    int fd, inherited = fd_var && *fd_var;
    if (inherited) {
        snprintf(path, sizeof path, "descriptor %s", fd_var);
        fd = atoi(fd_var);
    } else {
        snprintf(path, sizeof path, "%s/state.page", dir);
        fd = open(path, O_RDWR | O_CLOEXEC);
    }
    struct stat st;
    void *p = MAP_FAILED;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size >= GANG_PAGE_SIZE)
        p = mmap(NULL, GANG_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0 && !inherited) close(fd);
    if (p == MAP_FAILED) {
        /* The program runs on, unchecked: a missing page must not fail a job. */
        fprintf(stderr, "gang-mpi-check: cannot map %s: this rank's deadlocks will not be seen\n",
                path);
        return;
    }
    struct gang_state_page *s = p;
    atomic_store(&s->version, GANG_STATE_VERSION);
    atomic_store(&s->pid, (uint32_t)getpid());
    atomic_store(&s->wait_src, -1);
    atomic_store(&s->wait_tag, -1);
    /* The magic last: the agent reports the rank from the moment it reads it. */
    atomic_store(&s->magic, GANG_STATE_MAGIC);
    gang_page = s;
}

void gang_block(int src, int tag) {
    struct gang_state_page *s = gang_page;
    if (!s) return;
    atomic_store(&s->wait_src, src);
    atomic_store(&s->wait_tag, tag);
    atomic_store(&s->blocked_since_ns, monotonic_ns());
}

void gang_unblock(uint64_t delivered) {
    struct gang_state_page *s = gang_page;
    if (!s) return;
    atomic_store(&s->blocked_since_ns, 0);
    if (delivered) atomic_fetch_add(&s->delivered, delivered);
}

int gang_world_rank(MPI_Comm comm, int r) {
    if (r < 0 || r == MPI_ANY_SOURCE || r == MPI_PROC_NULL) return -1;
    if (comm == MPI_COMM_WORLD) return r;
    int inter = 0, out = MPI_UNDEFINED;
    MPI_Group g, world;
    PMPI_Comm_test_inter(comm, &inter);
    if ((inter ? PMPI_Comm_remote_group(comm, &g) : PMPI_Comm_group(comm, &g)) != MPI_SUCCESS)
        return -1;
    PMPI_Comm_group(MPI_COMM_WORLD, &world);
    PMPI_Group_translate_ranks(g, 1, &r, world, &out);
    PMPI_Group_free(&g);
    PMPI_Group_free(&world);
    return out == MPI_UNDEFINED ? -1 : out;
}

int MPI_Init(int *argc, char ***argv) {
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) gang_open_page();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) gang_open_page();
    return rc;
}
