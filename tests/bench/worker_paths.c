/* The RPC worker's own work per byte of a tensor, outside its hashing, as llama.cpp b11312 does it
 * (ggml/src/ggml-rpc/ggml-rpc.cpp), on one core: the constants the load-time model takes for the workers.
 *
 *   worker_paths hit FILE TENSOR_BYTES
 *     A cache hit (rpc_server::set_tensor_hash): get_cached_file resizes a std::vector to the file's size (zeroed),
 *     reads the file into it, and ggml_backend_tensor_set copies it into the tensor's buffer (memory the worker
 *     allocated for the model and has not touched yet).
 *   worker_paths store FILE TENSOR_BYTES DIR
 *     A cache miss with -c (rpc_server::set_tensor): the message lands in a resized (zeroed) std::vector (here copied
 *     from FILE, as recv copies from the socket), the bytes are written to a new cache file (ofstream, no sync) and
 *     copied into the tensor's buffer. The hash the worker computes in between is hash_rate's.
 *
 * FILE is read TENSOR_BYTES at a time, each piece one tensor; FILE should be in the page cache. Prints the bytes
 * per second of wall time. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* std::vector::resize zeroes through memset; called through a pointer here, since gcc turns malloc and then memset into
 * calloc, whose fresh pages need no zeroing pass, and would measure a hit a fifth faster than the worker runs it */
static void *(*volatile zero_bytes)(void *, int, size_t) = memset;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int read_all(int fd, char *into, size_t size, off_t offset) {
    while (size > 0) {
        ssize_t got = pread(fd, into, size, offset);
        if (got <= 0) return -1;
        into += got; size -= (size_t)got; offset += got;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4 || (strcmp(argv[1], "store") == 0 && argc < 5)) {
        fprintf(stderr, "usage: %s hit FILE TENSOR_BYTES | store FILE TENSOR_BYTES DIR\n", argv[0]);
        return 2;
    }
    int store = strcmp(argv[1], "store") == 0;
    int fd = open(argv[2], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) { perror(argv[2]); return 1; }
    size_t total = (size_t)st.st_size, piece = strtoull(argv[3], NULL, 10);
    char *buffer = NULL;  /* the model's buffer on the worker: allocated, not touched */
    if (posix_memalign((void **)&buffer, 64, total) != 0) { perror("posix_memalign"); return 1; }
    double started = now();
    int index = 0;
    for (size_t offset = 0; offset < total; offset += piece, index++) {
        size_t size = total - offset < piece ? total - offset : piece;
        char *message = malloc(size);
        if (!message) { perror("malloc"); return 1; }
        zero_bytes(message, 0, size);                              /* std::vector::resize */
        if (read_all(fd, message, size, (off_t)offset) != 0) {     /* the cache file's read, or recv */
            perror("read"); return 1;
        }
        if (store) {
            char path[4096];
            snprintf(path, sizeof(path), "%s/%016x", argv[4], index);
            int out = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);  /* ofstream: buffered, never synced */
            if (out < 0) { perror(path); return 1; }
            for (size_t done = 0; done < size;) {
                ssize_t wrote = write(out, message + done, size - done);
                if (wrote <= 0) { perror("write"); return 1; }
                done += (size_t)wrote;
            }
            close(out);
        }
        memcpy(buffer + offset, message, size);                    /* ggml_backend_tensor_set */
        free(message);
    }
    double seconds = now() - started;
    printf("%.0f\n", total / seconds);
    free(buffer);
    return 0;
}
