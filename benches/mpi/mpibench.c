/* The MPI side of benches/benches/mpi/mpi.rs, built with mpicc.mpich.
 *   init            each rank prints "INIT <rank> <CLOCK_REALTIME ns>" right after MPI_Init
 *   pingpong S      ranks 0 and 1 bounce 8 bytes for S seconds; rank 0 times each round trip
 *   allreduce S     every rank sums one double for S seconds; rank 0 times each call
 * Timed runs last long enough to span many time slots (a run of a few milliseconds could
 * fit in one slot and never be switched), and print one JSON line from rank 0: the count,
 * median, p99, mean and max in microseconds.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, double *t, int n) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += t[i];
    qsort(t, n, sizeof *t, cmp);
    int p99 = (int)(0.99 * n);
    if (p99 >= n) p99 = n - 1;
    printf("{\"what\":\"%s\",\"n\":%d,\"median_us\":%.2f,\"p99_us\":%.2f,\"mean_us\":%.2f,"
           "\"max_us\":%.2f}\n", what, n, t[n / 2], t[p99], sum / n, t[n - 1]);
    fflush(stdout);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    struct timespec w;
    clock_gettime(CLOCK_REALTIME, &w);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = argc > 1 ? argv[1] : "init";
    double seconds = argc > 2 ? atof(argv[2]) : 1.0;
    /* Room for every operation of the run: at most one per 0.25 us. */
    int cap = (int)(seconds * 4e6) + 16, n = 0;
    if (strcmp(mode, "init") == 0) {
        printf("INIT %d %lld\n", rank, (long long)w.tv_sec * 1000000000LL + w.tv_nsec);
        fflush(stdout);
    } else if (strcmp(mode, "pingpong") == 0 && size >= 2) {
        double *t = malloc(sizeof(double) * cap);
        char buf[8] = {0};
        MPI_Barrier(MPI_COMM_WORLD);
        double end = now_us() + seconds * 1e6;
        /* buf[0] = 1: rank 0's last round. */
        while (!buf[0] && n < cap) {
            double s = now_us();
            if (rank == 0) {
                buf[0] = s >= end || n + 1 == cap;
                MPI_Send(buf, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
                MPI_Recv(buf, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                MPI_Recv(buf, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
            } else {
                break;
            }
            t[n++] = now_us() - s;
        }
        if (rank == 0) report("pingpong_round_trip", t, n);
        free(t);
    } else if (strcmp(mode, "allreduce") == 0) {
        double *t = malloc(sizeof(double) * cap);
        MPI_Barrier(MPI_COMM_WORLD);
        double end = now_us() + seconds * 1e6;
        /* The second element is rank 0's "last call" flag, summed with the rest. */
        for (int stop = 0; !stop;) {
            double s = now_us();
            double x[2] = {rank + n, rank == 0 && (s >= end || n + 1 == cap)}, y[2];
            MPI_Allreduce(x, y, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            t[n] = now_us() - s;
            if (y[0] != (double)size * n + (double)size * (size - 1) / 2) {
                fprintf(stderr, "allreduce %d: got %f\n", n, y[0]);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            n++;
            stop = y[1] > 0;
        }
        if (rank == 0) report("allreduce", t, n);
        free(t);
    }
    MPI_Finalize();
    return 0;
}
