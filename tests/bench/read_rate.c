/* Reads a buffer larger than the caches again and again and prints GB/s: one core's memory read rate, the bound of a
 * token on a CPU (every weight read once). tests/bench/tensor.py runs one, then two at once (two cores' rate).
 *
 *   read_rate [MIB=512] [SECONDS=3] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
int main(int argc, char ** argv) {
    size_t bytes = (argc > 1 ? strtoull(argv[1], 0, 10) : 512) << 20;
    double seconds = argc > 2 ? atof(argv[2]) : 3.0;
    uint64_t * data = malloc(bytes);
    memset(data, 1, bytes);
    size_t n = bytes / 8, rounds = 0;
    uint64_t sum = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double elapsed = 0;
    while (elapsed < seconds) {
        uint64_t a = 0, b = 0, c = 0, d = 0;
        for (size_t i = 0; i < n; i += 4) { a += data[i]; b += data[i+1]; c += data[i+2]; d += data[i+3]; }
        sum += a + b + c + d;
        rounds++;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        elapsed = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    }
    printf("%.2f\n", rounds * (double) bytes / elapsed / 1e9);
    return sum == 42;
}
