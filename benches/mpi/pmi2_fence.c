/* The PMI fence of benches/benches/mpi/mpi.rs, through Slurm's libpmi2 (a client nobody here
 * wrote): N rounds of a put and a fence; rank 0 prints one JSON line of the fence times
 * in microseconds (median, p99, mean, max). Each rank puts what MPICH 4 puts at MPI_Init,
 * one key with a 450-byte business card, new each round (so every fence carries the
 * whole space anew, as a first fence does); argv[2] = "grow" puts a new key each round
 * instead, so the space grows (N x ranks keys by the end).
 */
#include <slurm/pmi2.h>
#include <stdio.h>
#include <stdlib.h>
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

int main(int argc, char **argv) {
    int spawned, size, rank, appnum;
    if (PMI2_Init(&spawned, &size, &rank, &appnum) != PMI2_SUCCESS) return 1;
    int n = argc > 1 ? atoi(argv[1]) : 100;
    double *t = malloc(sizeof(double) * n), sum = 0;
    int grow = argc > 2 && argv[2][0] == 'g';
    char key[64], value[451];
    /* The first fence waits for every rank to start: not a fence's cost. */
    PMI2_KVS_Fence();
    for (int i = 0; i < n; i++) {
        if (grow) {
            snprintf(key, sizeof key, "card-%d-%d", rank, i);
        } else {
            snprintf(key, sizeof key, "card-%d", rank);
        }
        /* A hex-like card of 450 characters, different each round. */
        for (int j = 0; j < 450; j++) value[j] = "0123456789abcdef"[(rank * 7 + i * 13 + j) % 16];
        value[450] = 0;
        PMI2_KVS_Put(key, value);
        double s = now_us();
        if (PMI2_KVS_Fence() != PMI2_SUCCESS) return 2;
        t[i] = now_us() - s;
        sum += t[i];
    }
    if (rank == 0) {
        qsort(t, n, sizeof *t, cmp);
        int p99 = (int)(0.99 * n);
        if (p99 >= n) p99 = n - 1;
        printf("{\"what\":\"pmi_fence\",\"space\":\"%s\",\"ranks\":%d,\"n\":%d,\"median_us\":%.1f,"
               "\"p99_us\":%.1f,\"mean_us\":%.1f,\"max_us\":%.1f}\n",
               grow ? "grows" : "one card per rank", size, n, t[n / 2], t[p99], sum / n, t[n - 1]);
    }
    PMI2_Finalize();
    return 0;
}
