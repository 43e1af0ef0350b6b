/*
 * llama-rpc-cache: the names llama.cpp's RPC workers give their tensor cache files, computed at disk speed.
 * Part of graviton.llama_rpc (GPL-3.0-or-later); built by the llama_build role beside llama.cpp.
 *
 * A worker started with -c keeps each weight tensor over 10 MiB in <cache>/<FNV-1a 64 of its bytes,
 * %016 PRIx64> and trusts the file's bytes when the master asks for that hash. This program computes
 * the same hash (ggml-rpc.cpp's fnv_hash, byte-serial, so no faster than it) for the collection's
 * staging and integrity checks, where Python would be a hundred times slower.
 *
 *   llama-rpc-cache hash FILE [OFFSET SIZE]...   one line per range (the whole file without ranges):
 *                                               <hash> <size>
 */
#define _FILE_OFFSET_BITS 64
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK (8u << 20)
#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

static uint64_t fnv(const unsigned char *data, size_t len, uint64_t hash) {
    for (size_t i = 0; i < len; ++i) {
        hash ^= data[i];
        hash *= FNV_PRIME;
    }
    return hash;
}

static int fail(const char *what, const char *path) {
    fprintf(stderr, "llama-rpc-cache: %s %s: %s\n", what, path, strerror(errno));
    return 2;
}

/* Hash SIZE bytes of FD from OFFSET (pread: ranges need no seeking state); -1 on a short file. */
static int hash_range(int fd, off_t offset, uint64_t size, unsigned char *buffer, uint64_t *out) {
    uint64_t hash = FNV_OFFSET, done = 0;
    while (done < size) {
        size_t want = size - done < CHUNK ? (size_t)(size - done) : CHUNK;
        ssize_t got = pread(fd, buffer, want, offset + (off_t)done);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        hash = fnv(buffer, (size_t)got, hash);
        done += (uint64_t)got;
    }
    *out = hash;
    return 0;
}

static int cmd_hash(int argc, char **argv, unsigned char *buffer) {
    int fd = open(argv[0], O_RDONLY);
    if (fd < 0) return fail("cannot open", argv[0]);
    struct stat st;
    if (fstat(fd, &st) != 0) return fail("cannot stat", argv[0]);
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    int ranges = (argc - 1) / 2;
    for (int i = 0; i < (ranges ? ranges : 1); ++i) {
        uint64_t offset = ranges ? strtoull(argv[1 + 2 * i], NULL, 10) : 0;
        uint64_t size = ranges ? strtoull(argv[2 + 2 * i], NULL, 10) : (uint64_t)st.st_size;
        uint64_t hash;
        if (hash_range(fd, (off_t)offset, size, buffer, &hash) != 0) {
            fprintf(stderr, "llama-rpc-cache: %s ends before byte %" PRIu64 "\n", argv[0], offset + size);
            return 2;
        }
        printf("%016" PRIx64 " %" PRIu64 "\n", hash, size);
    }
    return close(fd) == 0 ? 0 : fail("cannot read", argv[0]);
}

int main(int argc, char **argv) {
    unsigned char *buffer = malloc(CHUNK);
    if (!buffer) return 2;
    if (argc >= 3 && strcmp(argv[1], "hash") == 0 && (argc - 3) % 2 == 0) return cmd_hash(argc - 2, argv + 2, buffer);
    fprintf(stderr, "usage: llama-rpc-cache hash FILE [OFFSET SIZE]...\n");
    return 2;
}
