/*
 * swap_probe.c - measures, on a real GPU, the pieces of parking at the speed
 * of the link (issue 14) before they are built into the hook and the broker:
 *
 *   alloc  cuMemAlloc/cuMemFree against the same sizes backed by the
 *          virtual-memory API (reserve, create, map, set access; unmap,
 *          release, free), with and without a cached address reservation:
 *          what backing every allocation with VMM costs.
 *   swap   a "broker" process (forked before any CUDA call, so the two are
 *          separate driver clients) pins host memory with cuMemCreate on the
 *          GPU's NUMA node with POSIX descriptor handles, right after cuInit
 *          and without a context, and passes the descriptors over a Unix
 *          socket (SCM_RIGHTS).  The "notebook" process holds device memory
 *          in VMM mappings filled with a pattern, imports and maps the
 *          chunks, copies its memory out on several streams, frees the
 *          physical memory (same addresses kept), copies it back in and
 *          checks every word; then both directions at once (half out, half
 *          in).  The broker also tries to map a chunk for the CPU without a
 *          context (to zero a chunk before it goes to another user).
 *
 * One JSON object per measurement on stdout.  Driver API only; build:
 *   gcc -O2 -std=c11 -I/usr/local/cuda/include bench/swap_probe.c \
 *       -L/usr/local/cuda/lib64/stubs -lcuda -lpthread -o swap_probe
 * Run (on the GPU machine): swap_probe alloc; swap_probe swap GIB [STREAMS]
 *
 *   engine GIB [STREAMS]  the hook's own swap code (libhook/swap/) with the
 *          same pool: a mix of allocations, window open, three rounds of
 *          swap out and in, the last one verified; then the import's steps
 *          timed one by one.  Build with -DSWAP_PROBE_ENGINE -Ilibhook/swap
 *          -Icommon and the libhook/swap sources (see the run command).
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MIB        (1ull << 20)
#define GIB        (1ull << 30)
#define CHUNK      (1ull * GIB) /* host pool chunk */
#define MAX_CHUNKS 256

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            const char *n_ = "?";                                                                  \
            cuGetErrorName(r_, &n_);                                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, n_);                     \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

static const char *errname(CUresult r)
{
    const char *n = "?";
    cuGetErrorName(r, &n);
    return n;
}

static int host_numa_id(CUdevice dev)
{
    int id = -1;
    if (cuDeviceGetAttribute(&id, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, dev) != CUDA_SUCCESS || id < 0)
        id = 0;
    return id;
}

static CUmemAllocationProp device_prop(CUdevice dev)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    return p;
}

static CUmemAccessDesc device_rw(CUdevice dev)
{
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = dev;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return a;
}

/* ---- alloc: the cost of VMM backing ------------------------------------- */

static void bench_alloc(void)
{
    CUdevice dev;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CUmemAllocationProp prop = device_prop(dev);
    CUmemAccessDesc acc = device_rw(dev);
    size_t gran = 0;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size_t sizes[] = {4096, 2 * MIB, 20 * MIB, 256 * MIB, 2 * GIB};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t size = sizes[si], rounded = (size + gran - 1) / gran * gran;
        int iters = size >= GIB ? 20 : size >= 256 * MIB ? 100 : 2000;
        for (int round = 0; round < 3; round++) {
            /* native */
            double t0 = now_s();
            for (int i = 0; i < iters; i++) {
                CUdeviceptr p;
                CK(cuMemAlloc(&p, size));
                CK(cuMemFree(p));
            }
            double native = (now_s() - t0) / iters;
            /* VMM, every step */
            t0 = now_s();
            for (int i = 0; i < iters; i++) {
                CUdeviceptr va;
                CUmemGenericAllocationHandle h;
                CK(cuMemAddressReserve(&va, rounded, 0, 0, 0));
                CK(cuMemCreate(&h, rounded, &prop, 0));
                CK(cuMemMap(va, rounded, 0, h, 0));
                CK(cuMemSetAccess(va, rounded, &acc, 1));
                CK(cuMemUnmap(va, rounded));
                CK(cuMemRelease(h));
                CK(cuMemAddressFree(va, rounded));
            }
            double vmm = (now_s() - t0) / iters;
            /* VMM with the address range kept (a reservation cache) */
            CUdeviceptr va;
            CK(cuMemAddressReserve(&va, rounded, 0, 0, 0));
            t0 = now_s();
            for (int i = 0; i < iters; i++) {
                CUmemGenericAllocationHandle h;
                CK(cuMemCreate(&h, rounded, &prop, 0));
                CK(cuMemMap(va, rounded, 0, h, 0));
                CK(cuMemSetAccess(va, rounded, &acc, 1));
                CK(cuMemUnmap(va, rounded));
                CK(cuMemRelease(h));
            }
            double vmm_cached = (now_s() - t0) / iters;
            CK(cuMemAddressFree(va, rounded));
            printf("{\"probe\":\"alloc\",\"bytes\":%zu,\"round\":%d,\"iters\":%d,"
                   "\"native_us\":%.2f,\"vmm_us\":%.2f,\"vmm_cached_va_us\":%.2f}\n",
                   size, round, iters, native * 1e6, vmm * 1e6, vmm_cached * 1e6);
            fflush(stdout);
        }
    }
    /* Many allocations outstanding, then freed (a framework's warm-up). */
    enum { N = 2000 };
    static CUdeviceptr ps[N];
    static CUmemGenericAllocationHandle hs[N];
    size_t size = 2 * MIB;
    double t0 = now_s();
    for (int i = 0; i < N; i++)
        CK(cuMemAlloc(&ps[i], size));
    for (int i = 0; i < N; i++)
        CK(cuMemFree(ps[i]));
    double native = (now_s() - t0) / N;
    t0 = now_s();
    for (int i = 0; i < N; i++) {
        CK(cuMemAddressReserve(&ps[i], size, 0, 0, 0));
        CK(cuMemCreate(&hs[i], size, &prop, 0));
        CK(cuMemMap(ps[i], size, 0, hs[i], 0));
        CK(cuMemSetAccess(ps[i], size, &acc, 1));
    }
    for (int i = 0; i < N; i++) {
        CK(cuMemUnmap(ps[i], size));
        CK(cuMemRelease(hs[i]));
        CK(cuMemAddressFree(ps[i], size));
    }
    double vmm = (now_s() - t0) / N;
    printf("{\"probe\":\"alloc_outstanding\",\"bytes\":%zu,\"n\":%d,\"native_us\":%.2f,"
           "\"vmm_us\":%.2f}\n",
           size, N, native * 1e6, vmm * 1e6);
    CK(cuDevicePrimaryCtxRelease(dev));
}

/* ---- descriptors over a Unix socket ------------------------------------- */

static void send_fd(int sock, int fd, uint64_t tag)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    memset(cbuf, 0, sizeof cbuf);
    struct iovec iov = {&tag, sizeof tag};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (sendmsg(sock, &mh, 0) != (ssize_t)sizeof tag) {
        perror("sendmsg");
        exit(2);
    }
}

static int recv_fd(int sock, uint64_t *tag)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {tag, sizeof *tag};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
    ssize_t n = recvmsg(sock, &mh, 0);
    if (n != (ssize_t)sizeof *tag) {
        fprintf(stderr, "recvmsg: %zd %s\n", n, strerror(errno));
        exit(2);
    }
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    if (!c || c->cmsg_type != SCM_RIGHTS)
        return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

/* ---- the broker's side: a pool pinned once, without a context ------------ */

static void pool_process(int sock, int nchunks)
{
    CK(cuInit(0));
    CUdevice dev;
    CK(cuDeviceGet(&dev, 0));
    int numa = host_numa_id(dev);
    CUmemAllocationProp hp;
    memset(&hp, 0, sizeof hp);
    hp.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    hp.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    hp.location.id = numa;
    hp.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0;
    CUresult gr = cuMemGetAllocationGranularity(&gran, &hp, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    CUcontext cur = NULL;
    cuCtxGetCurrent(&cur);
    CUmemGenericAllocationHandle h[MAX_CHUNKS];
    double t0 = now_s(), first = 0;
    for (int i = 0; i < nchunks; i++) {
        CK(cuMemCreate(&h[i], CHUNK, &hp, 0));
        if (i == 0)
            first = now_s() - t0;
    }
    double pin = now_s() - t0;
    printf("{\"probe\":\"pool_pin\",\"pid\":%d,\"numa\":%d,\"granularity\":%zu,\"granularity_rc\":"
           "\"%s\","
           "\"context_current\":%s,\"chunk_bytes\":%llu,\"chunks\":%d,\"pin_s\":%.3f,"
           "\"first_chunk_s\":%.3f,\"pin_gbps\":%.2f}\n",
           (int)getpid(), numa, gran, errname(gr), cur ? "true" : "false", CHUNK, nchunks, pin,
           first, nchunks * (double)CHUNK / pin / 1e9);
    fflush(stdout);

    /* Can the broker touch a chunk with the CPU, without a context (to zero
     * it before it goes to another user)? */
    {
        CUdeviceptr va = 0;
        CUresult r1 = cuMemAddressReserve(&va, CHUNK, 0, 0, 0), r2 = CUDA_ERROR_UNKNOWN,
                 r3 = CUDA_ERROR_UNKNOWN;
        if (r1 == CUDA_SUCCESS)
            r2 = cuMemMap(va, CHUNK, 0, h[0], 0);
        CUmemAccessDesc a;
        memset(&a, 0, sizeof a);
        a.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        a.location.id = numa;
        a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        if (r2 == CUDA_SUCCESS)
            r3 = cuMemSetAccess(va, CHUNK, &a, 1);
        double zero_s = -1;
        if (r3 == CUDA_SUCCESS) {
            double z0 = now_s();
            memset((void *)(uintptr_t)va, 0, CHUNK);
            zero_s = now_s() - z0;
        }
        cuCtxGetCurrent(&cur);
        printf(
            "{\"probe\":\"pool_cpu_map\",\"reserve\":\"%s\",\"map\":\"%s\",\"set_access\":\"%s\","
            "\"zero_1gib_s\":%.3f,\"context_current\":%s}\n",
            errname(r1), errname(r2), errname(r3), zero_s, cur ? "true" : "false");
        fflush(stdout);
        if (r2 == CUDA_SUCCESS)
            cuMemUnmap(va, CHUNK);
        if (r1 == CUDA_SUCCESS)
            cuMemAddressFree(va, CHUNK);
    }

    t0 = now_s();
    for (int i = 0; i < nchunks; i++) {
        int fd = -1;
        CK(cuMemExportToShareableHandle(&fd, h[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        send_fd(sock, fd, (uint64_t)i);
        close(fd);
    }
    printf("{\"probe\":\"pool_export\",\"chunks\":%d,\"export_send_s\":%.3f}\n", nchunks,
           now_s() - t0);
    fflush(stdout);
    /* Keep the pool until the notebook is done; then release it (timed). */
    char b;
    if (read(sock, &b, 1) != 1)
        fprintf(stderr, "pool: notebook went away\n");
    t0 = now_s();
    for (int i = 0; i < nchunks; i++)
        CK(cuMemRelease(h[i]));
    printf("{\"probe\":\"pool_release\",\"chunks\":%d,\"release_s\":%.3f}\n", nchunks,
           now_s() - t0);
    fflush(stdout);
}

/* ---- the notebook's side -------------------------------------------------- */

struct region { /* one VMM-backed allocation of the "program" */
    CUdeviceptr va;
    size_t size;
    CUmemGenericAllocationHandle h;
};

struct notebook {
    CUdevice dev;
    int numa;
    CUmemAllocationProp prop;
    CUmemAccessDesc acc;
    struct region *r;
    int nr;
    CUdeviceptr host_va; /* the imported chunks, mapped contiguously */
    size_t host_size;
    CUstream s[16];
    int ns;
};

static uint32_t pattern(size_t block)
{
    return (uint32_t)(block * 2654435761u) ^ 0x5a5aa5a5u;
}

static void fill(struct notebook *nb)
{
    size_t block = 0;
    for (int i = 0; i < nb->nr; i++)
        for (size_t off = 0; off < nb->r[i].size; off += 2 * MIB, block++)
            CK(cuMemsetD32Async(nb->r[i].va + off, pattern(block), 2 * MIB / 4,
                                nb->s[block % nb->ns]));
    CK(cuCtxSynchronize());
}

/* Copy [from, from+size) of the regions to or from the host chunks, split in
 * pieces of `piece` bytes round-robin over the streams. */
static double copy_regions(struct notebook *nb, int first, int count, size_t host_off, int out,
                           size_t piece)
{
    double t0 = now_s();
    int k = 0;
    for (int i = first; i < first + count; i++) {
        for (size_t off = 0; off < nb->r[i].size; off += piece) {
            size_t n = nb->r[i].size - off < piece ? nb->r[i].size - off : piece;
            CUdeviceptr dv = nb->r[i].va + off, hv = nb->host_va + host_off + off;
            CK(cuMemcpyAsync(out ? hv : dv, out ? dv : hv, n, nb->s[k++ % nb->ns]));
        }
        host_off += nb->r[i].size;
    }
    for (int i = 0; i < nb->ns; i++)
        CK(cuStreamSynchronize(nb->s[i]));
    return now_s() - t0;
}

static void drop_physical(struct notebook *nb, int first, int count)
{
    for (int i = first; i < first + count; i++) {
        CK(cuMemUnmap(nb->r[i].va, nb->r[i].size));
        CK(cuMemRelease(nb->r[i].h));
    }
}

static void take_physical(struct notebook *nb, int first, int count)
{
    for (int i = first; i < first + count; i++) {
        CK(cuMemCreate(&nb->r[i].h, nb->r[i].size, &nb->prop, 0));
        CK(cuMemMap(nb->r[i].va, nb->r[i].size, 0, nb->r[i].h, 0));
        CK(cuMemSetAccess(nb->r[i].va, nb->r[i].size, &nb->acc, 1));
    }
}

struct verify_job {
    const uint32_t *p;
    size_t first_block, blocks;
    size_t bad;
};

static void *verify_thread(void *arg)
{
    struct verify_job *j = arg;
    for (size_t b = 0; b < j->blocks; b++) {
        uint32_t want = pattern(j->first_block + b);
        const uint32_t *w = j->p + b * (2 * MIB / 4);
        for (size_t i = 0; i < 2 * MIB / 4; i++)
            j->bad += w[i] != want;
    }
    return NULL;
}

/* Check the host copy word by word (the host chunks must be mapped for the
 * CPU too). */
static size_t verify_host(struct notebook *nb, size_t bytes)
{
    enum { T = 8 };
    pthread_t th[T];
    struct verify_job j[T];
    size_t blocks = bytes / (2 * MIB), per = (blocks + T - 1) / T;
    for (int t = 0; t < T; t++) {
        size_t b0 = t * per, n = b0 >= blocks ? 0 : (blocks - b0 < per ? blocks - b0 : per);
        j[t] = (struct verify_job){(const uint32_t *)(uintptr_t)(nb->host_va + b0 * 2 * MIB), b0, n,
                                   0};
        pthread_create(&th[t], NULL, verify_thread, &j[t]);
    }
    size_t bad = 0;
    for (int t = 0; t < T; t++) {
        pthread_join(th[t], NULL);
        bad += j[t].bad;
    }
    return bad;
}

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    CK(cuMemGetInfo(&f, &t));
    return f;
}

static void notebook_process(int sock, int gib, int nstreams, size_t region_bytes)
{
    struct notebook nb;
    memset(&nb, 0, sizeof nb);
    CK(cuInit(0));
    CK(cuDeviceGet(&nb.dev, 0));
    CUcontext ctx;
    CK(cuDevicePrimaryCtxRetain(&ctx, nb.dev));
    CK(cuCtxSetCurrent(ctx));
    nb.numa = host_numa_id(nb.dev);
    nb.prop = device_prop(nb.dev);
    nb.acc = device_rw(nb.dev);
    nb.ns = nstreams;
    for (int i = 0; i < nb.ns; i++)
        CK(cuStreamCreate(&nb.s[i], CU_STREAM_NON_BLOCKING));
    size_t total = (size_t)gib * GIB, free0 = free_bytes();
    nb.nr = (int)(total / region_bytes);
    nb.r = calloc(nb.nr, sizeof *nb.r);
    for (int i = 0; i < nb.nr; i++) {
        nb.r[i].size = region_bytes;
        CK(cuMemAddressReserve(&nb.r[i].va, region_bytes, 0, 0, 0));
    }
    take_physical(&nb, 0, nb.nr);
    fill(&nb);
    size_t free_resident = free_bytes();

    /* Import the chunks and map them contiguously, for the GPU and the CPU. */
    double t0 = now_s();
    int nchunks = (int)(total / CHUNK);
    nb.host_size = (size_t)nchunks * CHUNK;
    CK(cuMemAddressReserve(&nb.host_va, nb.host_size, 0, 0, 0));
    CUmemAccessDesc ha[2];
    ha[0] = nb.acc;
    memset(&ha[1], 0, sizeof ha[1]);
    ha[1].location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    ha[1].location.id = nb.numa;
    ha[1].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    const char *host_access = "device+host";
    for (int i = 0; i < nchunks; i++) {
        uint64_t tag;
        int fd = recv_fd(sock, &tag);
        CUmemGenericAllocationHandle h;
        CK(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        close(fd);
        CUdeviceptr at = nb.host_va + tag * CHUNK;
        CK(cuMemMap(at, CHUNK, 0, h, 0));
        CUresult r = cuMemSetAccess(at, CHUNK, ha, 2);
        if (r != CUDA_SUCCESS) {
            host_access = "device-only";
            CK(cuMemSetAccess(at, CHUNK, ha, 1));
        }
        CK(cuMemRelease(h)); /* the mapping keeps it */
    }
    double import_s = now_s() - t0;
    printf("{\"probe\":\"import\",\"pid\":%d,\"chunks\":%d,\"import_map_s\":%.3f,\"host_access\":"
           "\"%s\"}\n",
           (int)getpid(), nchunks, import_s, host_access);
    fflush(stdout);
    int cpu_ok = strcmp(host_access, "device+host") == 0;

    /* Warm-up copy of one region (first touch of the link). */
    copy_regions(&nb, 0, 1, 0, 1, 64 * MIB);

    size_t pieces[] = {64 * MIB, 256 * MIB};
    for (size_t pi = 0; pi < sizeof pieces / sizeof *pieces; pi++) {
        size_t piece = pieces[pi];
        double out_copy = copy_regions(&nb, 0, nb.nr, 0, 1, piece);
        double d0 = now_s();
        drop_physical(&nb, 0, nb.nr);
        double drop = now_s() - d0;
        size_t free_parked = free_bytes();
        size_t bad_host = cpu_ok ? verify_host(&nb, total) : (size_t)-1;
        double i0 = now_s();
        take_physical(&nb, 0, nb.nr);
        double take = now_s() - i0;
        double in_copy = copy_regions(&nb, 0, nb.nr, 0, 0, piece);
        /* Check what came back: copy out again into the chunks (zeroed
         * first on the CPU when it can) and compare. */
        size_t bad = (size_t)-1;
        if (cpu_ok) {
            memset((void *)(uintptr_t)nb.host_va, 0, total);
            copy_regions(&nb, 0, nb.nr, 0, 1, piece);
            bad = verify_host(&nb, total);
        }
        printf("{\"probe\":\"swap\",\"tier\":\"swap\",\"bytes\":%zu,\"region_bytes\":%zu,"
               "\"streams\":%d,\"piece_bytes\":%zu,\"park_s\":%.3f,\"park_copy_s\":%.3f,"
               "\"park_release_s\":%.3f,\"unpark_s\":%.3f,\"unpark_map_s\":%.3f,"
               "\"unpark_copy_s\":%.3f,\"out_gbps\":%.1f,\"in_gbps\":%.1f,"
               "\"free_before_alloc\":%zu,\"free_resident\":%zu,\"free_parked\":%zu,"
               "\"host_copy_bad_words\":%zd,\"bad_words\":%zd,\"bit_exact\":%s}\n",
               total, region_bytes, nb.ns, piece, out_copy + drop, out_copy, drop, take + in_copy,
               take, in_copy, total / out_copy / 1e9, total / in_copy / 1e9, free0, free_resident,
               free_parked, (ssize_t)bad_host, (ssize_t)bad, bad == 0 ? "true" : "false");
        fflush(stdout);
    }

    /* Both directions at once: the first half goes out while the second half
     * (parked first) comes in: a switch between two notebooks. */
    int half = nb.nr / 2;
    if (half > 0) {
        copy_regions(&nb, half, nb.nr - half, (size_t)half * region_bytes, 1, 64 * MIB);
        drop_physical(&nb, half, nb.nr - half);
        double t1 = now_s();
        take_physical(&nb, half, nb.nr - half);
        /* out on streams [0, ns/2), in on [ns/2, ns) */
        int k = 0, ns2 = nb.ns / 2 ? nb.ns / 2 : 1;
        size_t piece = 64 * MIB;
        for (int i = 0; i < nb.nr; i++) {
            int out = i < half;
            for (size_t off = 0; off < region_bytes; off += piece) {
                CUdeviceptr dv = nb.r[i].va + off, hv = nb.host_va + (size_t)i * region_bytes + off;
                CUstream st = nb.s[(out ? 0 : ns2) + (k++ % ns2)];
                CK(cuMemcpyAsync(out ? hv : dv, out ? dv : hv, piece, st));
            }
        }
        for (int i = 0; i < nb.ns; i++)
            CK(cuStreamSynchronize(nb.s[i]));
        double copy = now_s() - t1;
        drop_physical(&nb, 0, half);
        double sw = now_s() - t1;
        printf("{\"probe\":\"duplex\",\"bytes_each_way\":%zu,\"switch_s\":%.3f,\"copy_s\":%.3f,"
               "\"gbps_total\":%.1f}\n",
               (size_t)half * region_bytes, sw, copy, 2.0 * half * region_bytes / copy / 1e9);
        fflush(stdout);
        take_physical(&nb, 0, half);
    }
    if (write(sock, "x", 1) != 1)
        perror("write");
    CK(cuDevicePrimaryCtxRelease(nb.dev));
}

/* ---- engine: the hook's own swap code (libhook/swap/) on the real driver -- */

#ifdef SWAP_PROBE_ENGINE
#include <dlfcn.h>

#include "swap_engine.h"

static void *lookup(void *lib, const char *name)
{
    return dlsym(lib, name);
}

/* Import cost, broken down: the same chunks imported, mapped and given
 * access one step at a time (per chunk, or one cuMemSetAccess for all). */
static void engine_process(int sock, int gib, int nstreams)
{
    CK(cuInit(0));
    CUdevice dev;
    CK(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    gs_swap_driver_t drv;
    char why[200];
    if (gs_swap_driver_resolve(&drv, RTLD_DEFAULT, lookup, why, sizeof why)) {
        fprintf(stderr, "%s\n", why);
        exit(2);
    }
    gs_swap_ranges_t *ranges = gs_swap_ranges_new();
    gs_swap_engine_config_t cfg = {
        .streams = nstreams, .piece_bytes = 64 * MIB, .batch_bytes = 1 * GIB};
    gs_swap_engine_t *e = gs_swap_engine_new(&drv, ranges, &cfg);
    size_t total = (size_t)gib * GIB, free0 = free_bytes();
    /* A PyTorch-like mix: mostly large segments, some 2 MiB and 20 MiB. */
    size_t nalloc = 0, cap = 4096, have = 0;
    CUdeviceptr *p = calloc(cap, sizeof *p);
    size_t *sz = calloc(cap, sizeof *sz);
    double ta = now_s();
    while (have < total && nalloc < cap) {
        size_t s = nalloc % 8 == 0 ? 2 * MIB : nalloc % 8 == 1 ? 20 * MIB : 1 * GIB;
        if (have + s > total)
            s = total - have;
        CK(gs_swap_alloc(e, ctx, dev, s, &p[nalloc]));
        sz[nalloc] = s;
        size_t blocks = s / (2 * MIB);
        for (size_t b = 0; b < blocks; b++)
            CK(cuMemsetD32(p[nalloc] + b * 2 * MIB, pattern(have / (2 * MIB) + b), 2 * MIB / 4));
        have += s;
        nalloc++;
    }
    double alloc_s = now_s() - ta;
    size_t free_resident = free_bytes();
    int nchunks = gib;
    int *fds = calloc(nchunks, sizeof *fds);
    for (int i = 0; i < nchunks; i++) {
        uint64_t tag;
        fds[i] = recv_fd(sock, &tag);
    }
    double t0 = now_s();
    gs_swap_window_t w;
    if (gs_swap_window_open(&drv, dev, fds, nchunks, CHUNK, &w, why, sizeof why)) {
        fprintf(stderr, "window: %s\n", why);
        exit(2);
    }
    double open_s = now_s() - t0;
    for (int round = 0; round < 3; round++) {
        gs_swap_result_t out, in;
        if (gs_swap_out(e, dev, &w, NULL, NULL, &out)) {
            fprintf(stderr, "swap out: %s\n", out.error);
            exit(2);
        }
        size_t free_parked = free_bytes();
        if (gs_swap_in(e, dev, &w, 10000, NULL, NULL, &in)) {
            fprintf(stderr, "swap in: %s\n", in.error);
            exit(2);
        }
        /* Verify on the device's side: each 2 MiB block against its word,
         * read back through a pinned buffer. */
        size_t bad = 0, off = 0;
        uint32_t *hb = NULL;
        CK(cuMemAllocHost((void **)&hb, 2 * MIB));
        for (size_t i = 0; i < nalloc && round == 2; i++)
            for (size_t b = 0; b < sz[i] / (2 * MIB); b++, off++) {
                CK(cuMemcpyDtoH(hb, p[i] + b * 2 * MIB, 2 * MIB));
                uint32_t want = pattern(off);
                for (size_t k = 0; k < 2 * MIB / 4; k++)
                    bad += hb[k] != want;
            }
        CK(cuMemFreeHost(hb));
        printf("{\"probe\":\"engine\",\"tier\":\"swap\",\"bytes\":%llu,\"allocs\":%zu,"
               "\"streams\":%d,\"round\":%d,\"alloc_fill_s\":%.3f,\"window_open_s\":%.3f,"
               "\"park_s\":%.3f,\"unpark_s\":%.3f,\"out_gbps\":%.1f,\"in_gbps\":%.1f,"
               "\"free_before_alloc\":%zu,\"free_resident\":%zu,\"free_parked\":%zu,"
               "\"verified\":%s,\"bad_words\":%zu,\"bit_exact\":%s}\n",
               (unsigned long long)out.bytes, nalloc, nstreams, round, alloc_s, open_s,
               out.elapsed_ns / 1e9, in.elapsed_ns / 1e9, out.bytes / (out.elapsed_ns / 1e9) / 1e9,
               in.bytes / (in.elapsed_ns / 1e9) / 1e9, free0, free_resident, free_parked,
               round == 2 ? "true" : "false", bad, round == 2 && bad == 0 ? "true" : "false");
        fflush(stdout);
    }
    gs_swap_window_close(&drv, &w);
    /* The import's cost, step by step, on the same descriptors. */
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, (size_t)nchunks * CHUNK, 0, 0, 0));
    double imp = 0, map = 0, acc_each = 0;
    CUmemGenericAllocationHandle *h = calloc(nchunks, sizeof *h);
    for (int i = 0; i < nchunks; i++) {
        double s0 = now_s();
        CK(cuMemImportFromShareableHandle(&h[i], (void *)(uintptr_t)fds[i],
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        double s1 = now_s();
        CK(cuMemMap(va + (size_t)i * CHUNK, CHUNK, 0, h[i], 0));
        double s2 = now_s();
        CUmemAccessDesc a = device_rw(dev);
        CK(cuMemSetAccess(va + (size_t)i * CHUNK, CHUNK, &a, 1));
        acc_each += now_s() - s2;
        imp += s1 - s0;
        map += s2 - s1;
    }
    printf("{\"probe\":\"import_steps\",\"chunks\":%d,\"import_s\":%.3f,\"map_s\":%.3f,"
           "\"set_access_per_chunk_s\":%.3f}\n",
           nchunks, imp, map, acc_each);
    for (int i = 0; i < nchunks; i++) {
        CK(cuMemUnmap(va + (size_t)i * CHUNK, CHUNK));
        CK(cuMemRelease(h[i]));
        close(fds[i]);
    }
    CK(cuMemAddressFree(va, (size_t)nchunks * CHUNK));
    for (size_t i = 0; i < nalloc; i++) {
        int ours;
        CK(gs_swap_free(e, p[i], &ours));
    }
    if (write(sock, "x", 1) != 1)
        perror("write");
    gs_swap_engine_destroy(&e);
    gs_swap_ranges_destroy(&ranges);
}
#endif

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && !strcmp(argv[1], "alloc")) {
        bench_alloc();
        return 0;
    }
    if (argc >= 3 && (!strcmp(argv[1], "swap") || !strcmp(argv[1], "engine"))) {
        int gib = atoi(argv[2]), streams = argc > 3 ? atoi(argv[3]) : 4;
        size_t region = argc > 4 ? (size_t)atoll(argv[4]) * MIB : 2 * GIB;
        if (gib < 1 || gib > MAX_CHUNKS || streams < 1 || streams > 16 || region < 2 * MIB ||
            ((size_t)gib * GIB) % region) {
            fprintf(stderr, "swap_probe swap GIB [STREAMS 1..16] [REGION_MIB dividing GIB]\n");
            return 2;
        }
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
            perror("socketpair");
            return 2;
        }
        pid_t pid = fork(); /* before any CUDA call in either process */
        if (pid == 0) {
            close(sv[0]);
            pool_process(sv[1], gib);
            _exit(0);
        }
        close(sv[1]);
#ifdef SWAP_PROBE_ENGINE
        if (!strcmp(argv[1], "engine"))
            engine_process(sv[0], gib, streams);
        else
#endif
            notebook_process(sv[0], gib, streams, region);
        int st = 0;
        waitpid(pid, &st, 0);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 3;
    }
    fprintf(stderr, "usage: swap_probe alloc | swap GIB [STREAMS] [REGION_MIB]\n");
    return 2;
}
