/*
 * disk_probe.c - what the disk tier (issue 37) can count on, measured on a
 * real GPU machine before it is built: the disk's own sequential speed with
 * O_DIRECT from ordinary aligned memory, and whether O_DIRECT reads and
 * writes work straight from a pinned host chunk of the swap pool (host
 * cuMemCreate, CU_MEM_LOCATION_TYPE_HOST_NUMA, mapped for the CPU with
 * cuMemMap + cuMemSetAccess, as broker/park/pool_driver.c zeroes it), and
 * at what speed.  If the kernel cannot pin such a mapping for direct I/O
 * (get_user_pages on a driver mapping), the tier needs a bounce buffer.
 *
 *   disk_probe FILE GIB [CHUNK_MIB]
 *
 * One JSON line per measurement on stdout.  FILE is created, overwritten
 * and removed.  No CUDA context is made (the pool never makes one).
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                              unsigned long long);
typedef CUresult (*reserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                           unsigned long long);
typedef CUresult (*access_fn)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A pattern that differs per 8-byte word and per chunk, so that a chunk
 * read back into the wrong place or short is seen. */
static void fill(uint64_t *p, size_t bytes, uint64_t seed)
{
    for (size_t i = 0; i < bytes / 8; i++)
        p[i] = (seed << 40) ^ (i * 0x9E3779B97F4A7C15ull);
}

static int same(const uint64_t *p, size_t bytes, uint64_t seed)
{
    for (size_t i = 0; i < bytes / 8; i++)
        if (p[i] != ((seed << 40) ^ (i * 0x9E3779B97F4A7C15ull)))
            return 0;
    return 1;
}

/* Writes (or reads) `bytes` at `off` in pieces of at most 64 MiB; 0 or errno. */
static int direct_io(int fd, int write_it, char *buf, size_t bytes, off_t off)
{
    size_t done = 0;
    while (done < bytes) {
        size_t n = bytes - done < (64u << 20) ? bytes - done : (64u << 20);
        ssize_t r = write_it ? pwrite(fd, buf + done, n, off + (off_t)done)
                             : pread(fd, buf + done, n, off + (off_t)done);
        if (r <= 0)
            return r < 0 ? errno : EIO;
        done += (size_t)r;
    }
    return 0;
}

static void row(const char *what, size_t bytes, double s, int err, int exact)
{
    printf(
        "{\"probe\": \"%s\", \"bytes\": %zu, \"seconds\": %.4f, \"gbps\": %.3f, \"error\": \"%s\", "
        "\"bit_exact\": %s}\n",
        what, bytes, s, s > 0 && !err ? bytes / s / 1e9 : 0.0, err ? strerror(err) : "",
        exact < 0 ? "null"
        : exact   ? "true"
                  : "false");
    fflush(stdout);
}

/* One pass over the file: every chunk written from (or read into) bufs. */
static void pass(const char *what, const char *path, int write_it, char **bufs, int n, size_t chunk,
                 int check)
{
    int fd = open(path, (write_it ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY) | O_DIRECT, 0600);
    if (fd < 0) {
        row(what, 0, 0, errno, -1);
        return;
    }
    if (!write_it)
        for (int i = 0; i < n; i++)
            memset(bufs[i], 0, chunk);
    double t0 = now_s();
    int err = 0;
    for (int i = 0; i < n && !err; i++)
        err = direct_io(fd, write_it, bufs[i], chunk, (off_t)i * (off_t)chunk);
    if (write_it && !err && fdatasync(fd) != 0)
        err = errno;
    double s = now_s() - t0;
    close(fd);
    int exact = -1;
    if (check && !err) {
        exact = 1;
        for (int i = 0; i < n; i++)
            exact &= same((uint64_t *)bufs[i], chunk, (uint64_t)i + 1);
    }
    row(what, (size_t)n * chunk, s, err, exact);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: disk_probe FILE GIB [CHUNK_MIB]\n");
        return 2;
    }
    const char *path = argv[1];
    size_t chunk = (size_t)(argc > 3 ? atoi(argv[3]) : 1024) << 20;
    int n = (int)((strtod(argv[2], NULL) * (1u << 30)) / chunk);
    if (n < 1 || chunk < (2u << 20)) {
        fprintf(stderr, "disk_probe: GIB and CHUNK_MIB make no chunk of at least 2 MiB\n");
        return 2;
    }

    /* 1. The disk alone, from ordinary aligned memory. */
    char **plain = calloc((size_t)n, sizeof *plain);
    for (int i = 0; i < n; i++) {
        if (posix_memalign((void **)&plain[i], 1u << 21, chunk) != 0) {
            fprintf(stderr, "disk_probe: out of memory\n");
            return 1;
        }
        fill((uint64_t *)plain[i], chunk, (uint64_t)i + 1);
    }
    pass("disk_write_plain", path, 1, plain, n, chunk, 0);
    pass("disk_read_plain", path, 0, plain, n, chunk, 1);
    for (int i = 0; i < n; i++)
        free(plain[i]);

    /* 2. Straight from pinned pool chunks. */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    init_fn init = lib ? (init_fn)dlsym(lib, "cuInit") : NULL;
    create_fn create = lib ? (create_fn)dlsym(lib, "cuMemCreate") : NULL;
    reserve_fn reserve = lib ? (reserve_fn)dlsym(lib, "cuMemAddressReserve") : NULL;
    map_fn map = lib ? (map_fn)dlsym(lib, "cuMemMap") : NULL;
    access_fn access = lib ? (access_fn)dlsym(lib, "cuMemSetAccess") : NULL;
    if (!init || !create || !reserve || !map || !access || init(0) != CUDA_SUCCESS) {
        printf("{\"probe\": \"pool_chunks\", \"error\": \"no CUDA driver\"}\n");
        unlink(path);
        return 0;
    }
    char **pinned = calloc((size_t)n, sizeof *pinned);
    double tp = now_s();
    for (int i = 0; i < n; i++) {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        prop.location.id = 0;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        CUmemGenericAllocationHandle h;
        CUdeviceptr va;
        CUmemAccessDesc cpu;
        memset(&cpu, 0, sizeof cpu);
        cpu.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        cpu.location.id = 0;
        cpu.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        CUresult r = create(&h, chunk, &prop, 0);
        if (r == CUDA_SUCCESS)
            r = reserve(&va, chunk, 0, 0, 0);
        if (r == CUDA_SUCCESS)
            r = map(va, chunk, 0, h, 0);
        if (r == CUDA_SUCCESS)
            r = access(va, chunk, &cpu, 1);
        if (r != CUDA_SUCCESS) {
            printf("{\"probe\": \"pool_chunks\", \"error\": \"CUDA error %d at chunk %d\"}\n",
                   (int)r, i);
            unlink(path);
            return 0;
        }
        pinned[i] = (char *)(uintptr_t)va;
        fill((uint64_t *)pinned[i], chunk, (uint64_t)i + 1);
    }
    row("pool_pin_and_fill", (size_t)n * chunk, now_s() - tp, 0, -1);
    pass("disk_write_from_pool_chunk", path, 1, pinned, n, chunk, 0);
    pass("disk_read_into_pool_chunk", path, 0, pinned, n, chunk, 1);

    /* 3. Through a bounce buffer, should direct I/O refuse the mapping. */
    char *bounce;
    if (posix_memalign((void **)&bounce, 1u << 21, 64u << 20) == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0600);
        double t0 = now_s();
        int err = fd < 0 ? errno : 0;
        for (int i = 0; i < n && !err; i++)
            for (size_t off = 0; off < chunk && !err; off += 64u << 20) {
                memcpy(bounce, pinned[i] + off, 64u << 20);
                err = direct_io(fd, 1, bounce, 64u << 20, (off_t)i * (off_t)chunk + (off_t)off);
            }
        if (!err && fdatasync(fd) != 0)
            err = errno;
        row("disk_write_bounced", (size_t)n * chunk, now_s() - t0, err, -1);
        if (fd >= 0)
            close(fd);
    }
    unlink(path);
    return 0;
}
