/*
 * test_sim_share.c - physical memory shared between processes with
 * cuMemExportToShareableHandle / cuMemImportFromShareableHandle and real
 * file descriptors passed over a Unix socket (SCM_RIGHTS), as the broker
 * will hand its pinned host pool to notebook processes: the bytes are
 * shared bit-exact, the importer's handle keeps them alive, device memory
 * is counted once and given back with the last holder (also a killed
 * one), and the export/import rules.
 */
#include "simtest.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>

#define GRAN (2u << 20)
#define POOL (4u << 20)

static CUmemAllocationProp prop_of(CUmemLocationType t, int handle_types)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = t;
    p.location.id = 0;
    p.requestedHandleTypes = (CUmemAllocationHandleType)handle_types;
    return p;
}

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    REQ_CU(cuMemGetInfo(&f, &t));
    return f;
}

static unsigned char pattern(size_t i, unsigned seed)
{
    return (unsigned char)((i * 2654435761u + seed) >> 11);
}

static int check_pattern(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != pattern(i, seed))
            return 0;
    return 1;
}

/* Maps handle h at a fresh reservation with the given grants. */
static CUdeviceptr map_with(CUmemGenericAllocationHandle h, size_t size, const CUmemAccessDesc *acc,
                            size_t n)
{
    CUdeviceptr va;
    REQ_CU(cuMemAddressReserve(&va, size, 0, 0, 0));
    REQ_CU(cuMemMap(va, size, 0, h, 0));
    REQ_CU(cuMemSetAccess(va, size, acc, n));
    return va;
}

static void unmap_free(CUdeviceptr va, size_t size)
{
    REQ_CU(cuMemUnmap(va, size));
    REQ_CU(cuMemAddressFree(va, size));
}

static const CUmemAccessDesc host_rw = {{CU_MEM_LOCATION_TYPE_HOST_NUMA, 0},
                                        CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
static const CUmemAccessDesc dev0_rw = {{CU_MEM_LOCATION_TYPE_DEVICE, 0},
                                        CU_MEM_ACCESS_FLAGS_PROT_READWRITE};

/* ---- a host NUMA pool: broker exports, notebook imports --------------- */

/* The broker: cuInit only, creates and exports the pool, hands the fd
 * over, then checks what the notebook wrote and releases its handle. */
static void broker(int rd, int wr, void *arg)
{
    int sock = *(int *)arg;
    CUmemAllocationProp hp =
        prop_of(CU_MEM_LOCATION_TYPE_HOST_NUMA, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmemGenericAllocationHandle h;
    int fd = -1;
    REQ_CU(cuInit(0)); /* no context: the broker never shows on the GPU */
    REQ_CU(cuMemCreate(&h, POOL, &hp, 0));
    CUdeviceptr va = map_with(h, POOL, &host_rw, 1);
    for (size_t i = 0; i < POOL; i++)
        ((unsigned char *)va)[i] = pattern(i, 1);
    REQ_CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    REQUIRE(fd >= 0);
    simtest_send_fd(sock, fd);
    REQUIRE(close(fd) == 0);
    simtest_send_u64(wr, 1);
    (void)simtest_recv_u64(rd); /* the notebook has written */
    REQUIRE(check_pattern((unsigned char *)va, POOL, 2));
    unmap_free(va, POOL);
    REQ_CU(cuMemRelease(h));
    simtest_send_u64(wr, 2);
}

static void notebook(int rd, int wr, void *arg)
{
    int sock = *(int *)arg;
    simtest_init();
    (void)simtest_recv_u64(rd);
    int fd = simtest_recv_fd(sock);
    CUmemGenericAllocationHandle h, r;
    REQ_CU(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    REQUIRE(close(fd) == 0); /* the handle does not need the descriptor */
    CUmemAllocationProp got;
    REQ_CU(cuMemGetAllocationPropertiesFromHandle(&got, h));
    REQUIRE(got.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && got.location.id == 0);
    REQUIRE(got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    size_t f0 = free_bytes();
    /* mapped for the device only, the way the hook parks memory */
    CUdeviceptr pool = map_with(h, POOL, &dev0_rw, 1);
    REQ_CU(cuMemRetainAllocationHandle(&r, (void *)(pool + 100)));
    REQUIRE(r == h);
    REQ_CU(cuMemRelease(r));
    /* device memory to park */
    CUmemAllocationProp dp = prop_of(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemGenericAllocationHandle dh;
    REQ_CU(cuMemCreate(&dh, POOL, &dp, 0));
    CUdeviceptr dev = map_with(dh, POOL, &dev0_rw, 1);
    REQUIRE(free_bytes() == f0 - POOL); /* the pool is not device memory */
    REQ_CU(cuMemcpyDtoD(dev, pool, POOL));
    unsigned char *buf = malloc(POOL);
    REQUIRE(buf);
    REQ_CU(cuMemcpyDtoH(buf, dev, POOL));
    REQUIRE(check_pattern(buf, POOL, 1)); /* the broker's bytes */
    for (size_t i = 0; i < POOL; i++)
        buf[i] = pattern(i, 2);
    REQ_CU(cuMemcpyHtoD(dev, buf, POOL));
    REQ_CU(cuMemcpyDtoD(pool, dev, POOL)); /* park into the shared pool */
    simtest_send_u64(wr, 1);
    (void)simtest_recv_u64(rd); /* the broker has released its handle */
    memset(buf, 0, POOL);
    REQ_CU(cuMemcpyDtoH(buf, pool, POOL)); /* still there: our handle keeps it */
    REQUIRE(check_pattern(buf, POOL, 2));
    free(buf);
    unmap_free(pool, POOL);
    unmap_free(dev, POOL);
    REQ_CU(cuMemRelease(h));
    REQ_CU(cuMemRelease(dh));
}

static void test_host_pool(void **state)
{
    (void)state;
    simtest_fresh("64M", NULL);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    struct simchild b, n;
    simtest_spawn(&b, broker, &sv[0]);
    simtest_spawn(&n, notebook, &sv[1]);
    assert_int_equal(simtest_recv_u64(b.rd), 1);
    simtest_send_u64(n.wr, 1);
    assert_int_equal(simtest_recv_u64(n.rd), 1);
    simtest_send_u64(b.wr, 1);
    assert_int_equal(simtest_recv_u64(b.rd), 2);
    simtest_send_u64(n.wr, 2);
    simtest_join(&n);
    simtest_join(&b);
    close(sv[0]);
    close(sv[1]);
}

/* ---- device memory: counted once, back with the last holder ----------- */

static void exporter(int rd, int wr, void *arg)
{
    int sock = *(int *)arg;
    simtest_init();
    CUmemAllocationProp dp =
        prop_of(CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmemGenericAllocationHandle h;
    int fd;
    REQ_CU(cuMemCreate(&h, 8u << 20, &dp, 0));
    CUdeviceptr va = map_with(h, 8u << 20, &dev0_rw, 1);
    REQ_CU(cuMemsetD8(va, 0x42, 8u << 20));
    REQ_CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    simtest_send_fd(sock, fd);
    close(fd);
    simtest_send_u64(wr, free_bytes());
    (void)simtest_recv_u64(rd); /* imported (and checkpoint refused) */
    unmap_free(va, 8u << 20);
    REQ_CU(cuMemRelease(h));
    simtest_send_u64(wr, free_bytes()); /* the importer still holds it */
}

struct importer_arg {
    int sock;
    int keep; /* hold the handle until killed */
};

static void importer(int rd, int wr, void *arg)
{
    const struct importer_arg *a = arg;
    simtest_init();
    int fd = simtest_recv_fd(a->sock);
    CUmemGenericAllocationHandle h;
    REQ_CU(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);
    simtest_send_u64(wr, free_bytes());
    (void)simtest_recv_u64(rd); /* the exporter has released its handle, or died */
    CUdeviceptr va = map_with(h, 8u << 20, &dev0_rw, 1);
    unsigned char b = 0;
    REQ_CU(cuMemcpyDtoH(&b, va + 12345, 1));
    REQUIRE(b == 0x42);
    simtest_send_u64(wr, free_bytes());
    (void)simtest_recv_u64(rd);
    if (a->keep)
        pause(); /* until killed */
    unmap_free(va, 8u << 20);
    REQ_CU(cuMemRelease(h));
    simtest_send_u64(wr, free_bytes());
}

static void kill_child(struct simchild *c)
{
    kill(c->pid, SIGKILL);
    waitpid(c->pid, NULL, 0);
    close(c->rd);
    close(c->wr);
}

static void checker(int rd, int wr, void *arg)
{
    (void)rd, (void)arg;
    simtest_init();
    simtest_send_u64(wr, free_bytes());
}

static uint64_t free_seen_by_new_process(void)
{
    struct simchild c;
    simtest_spawn(&c, checker, NULL);
    uint64_t f = simtest_recv_u64(c.rd);
    simtest_join(&c);
    return f;
}

static void test_device_counted_once(void **state)
{
    (void)state;
    simtest_fresh("16M", NULL);
    const uint64_t M = 1u << 20;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    struct importer_arg ia = {sv[1], 0};
    struct simchild e, i;
    simtest_spawn(&e, exporter, &sv[0]);
    simtest_spawn(&i, importer, &ia);
    assert_int_equal(simtest_recv_u64(e.rd), 8 * M);
    assert_int_equal(simtest_recv_u64(i.rd), 8 * M); /* imported: not counted again */
    /* a process with exported device memory cannot be checkpointed
     * (cuda-checkpoint does not support IPC memory) */
    CK(cuCheckpointProcessLock(e.pid, NULL));
    CK_EQ(cuCheckpointProcessCheckpoint(e.pid, NULL), CUDA_ERROR_NOT_SUPPORTED);
    CK(cuCheckpointProcessUnlock(e.pid, NULL));
    simtest_send_u64(e.wr, 1);
    assert_int_equal(simtest_recv_u64(e.rd), 8 * M); /* released, but the importer holds it */
    simtest_join(&e);
    simtest_send_u64(i.wr, 1);
    assert_int_equal(simtest_recv_u64(i.rd), 8 * M);
    simtest_send_u64(i.wr, 1);
    assert_int_equal(simtest_recv_u64(i.rd), 16 * M); /* the last holder released it */
    simtest_join(&i);
    assert_int_equal(free_seen_by_new_process(), 16 * M);

    /* holders that are killed: the exporter first (the importer keeps the
     * memory, its bytes intact), then the importer (all of it comes back) */
    ia.keep = 1;
    simtest_spawn(&e, exporter, &sv[0]);
    simtest_spawn(&i, importer, &ia);
    assert_int_equal(simtest_recv_u64(e.rd), 8 * M);
    assert_int_equal(simtest_recv_u64(i.rd), 8 * M);
    kill_child(&e);
    assert_int_equal(free_seen_by_new_process(), 8 * M);
    simtest_send_u64(i.wr, 1);
    assert_int_equal(simtest_recv_u64(i.rd), 8 * M);
    kill_child(&i);
    assert_int_equal(free_seen_by_new_process(), 16 * M);
    close(sv[0]);
    close(sv[1]);
}

/* ---- the rules ---------------------------------------------------------- */

static void child_rules(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    simtest_init();
    CUmemAllocationProp plain = prop_of(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemAllocationProp fdprop =
        prop_of(CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmemGenericAllocationHandle a, b, imp, gone;
    int fd = -1;
    REQ_CU(cuMemCreate(&a, GRAN, &plain, 0));
    REQ_CU(cuMemCreate(&b, GRAN, &fdprop, 0));
    /* only what cuMemCreate was asked to make exportable */
    REQ_CU_EQ(cuMemExportToShareableHandle(&fd, a, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_ERROR_INVALID_VALUE);
    REQ_CU_EQ(cuMemExportToShareableHandle(&fd, b, CU_MEM_HANDLE_TYPE_FABRIC, 0),
              CUDA_ERROR_INVALID_VALUE);
    REQ_CU_EQ(cuMemExportToShareableHandle(&fd, b, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1),
              CUDA_ERROR_INVALID_VALUE);
    REQ_CU_EQ(cuMemExportToShareableHandle(NULL, b, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuMemCreate(&gone, GRAN, &fdprop, 0));
    REQ_CU(cuMemRelease(gone));
    REQ_CU_EQ(cuMemExportToShareableHandle(&fd, gone, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_ERROR_INVALID_VALUE);
    REQUIRE(fd == -1);
    /* descriptors that are not simulated physical memory */
    int devnull = open("/dev/null", O_RDONLY);
    int other = memfd_create("not-gpu-memory", 0);
    REQUIRE(devnull >= 0 && other >= 0 && ftruncate(other, GRAN + 4096) == 0);
    REQ_CU_EQ(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)devnull,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
              CUDA_ERROR_INVALID_VALUE);
    REQ_CU_EQ(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)other,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
              CUDA_ERROR_INVALID_VALUE);
    REQ_CU_EQ(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)-1,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
              CUDA_ERROR_INVALID_VALUE);
    close(devnull);
    close(other);
    /* exported and imported in one process: a new handle, the same bytes */
    size_t f0 = free_bytes();
    REQ_CU(cuMemExportToShareableHandle(&fd, b, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    REQ_CU_EQ(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_WIN32),
              CUDA_ERROR_NOT_SUPPORTED);
    REQ_CU_EQ(
        cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd, (CUmemAllocationHandleType)0),
        CUDA_ERROR_INVALID_VALUE);
    /* an injected failure creates nothing */
    REQUIRE(gpusim_inject_failure("cuMemImportFromShareableHandle", 1, 0, 0) == 0);
    REQUIRE(gpusim_inject_failure("cuMemExportToShareableHandle", 1, 0, 0) == 0);
    int fd2 = -1;
    REQ_CU_EQ(cuMemExportToShareableHandle(&fd2, b, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_ERROR_UNKNOWN);
    REQUIRE(fd2 == -1);
    REQ_CU_EQ(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
              CUDA_ERROR_OUT_OF_MEMORY);
    REQ_CU(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd,
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);
    REQUIRE(imp != b);
    REQUIRE(free_bytes() == f0); /* counted once */
    CUdeviceptr va = map_with(b, GRAN, &dev0_rw, 1), vb = map_with(imp, GRAN, &dev0_rw, 1);
    REQ_CU(cuMemsetD8(va, 0x17, GRAN));
    unsigned char c = 0;
    REQ_CU(cuMemcpyDtoH(&c, vb + GRAN - 1, 1));
    REQUIRE(c == 0x17);
    unmap_free(va, GRAN);
    REQ_CU(cuMemRelease(b));
    REQUIRE(free_bytes() == f0); /* the imported handle keeps it */
    unmap_free(vb, GRAN);
    REQ_CU(cuMemRelease(imp));
    REQUIRE(free_bytes() == f0 + GRAN);
    REQ_CU(cuMemRelease(a));
}

static void test_rules(void **state)
{
    (void)state;
    simtest_fresh("64M", NULL);
    simtest_in_child(child_rules, NULL);
}

/* ---- legacy IPC of cuMemAlloc memory ----------------------------------- */

#define IPC_SIZE ((1u << 20) + 13)

static void ipc_exporter(int rd, int wr, void *arg)
{
    (void)arg;
    simtest_init();
    CUdeviceptr d, d2, as;
    CUipcMemHandle h1, h2;
    unsigned char *buf = malloc(IPC_SIZE);
    REQUIRE(buf);
    for (size_t i = 0; i < IPC_SIZE; i++)
        buf[i] = pattern(i, 3);
    REQ_CU(cuMemAlloc(&d, IPC_SIZE));
    CUstream s;
    REQ_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    REQ_CU(cuMemcpyHtoDAsync(d, buf, IPC_SIZE, s)); /* still queued, maybe */
    REQ_CU(cuIpcGetMemHandle(&h1, d));
    REQ_CU(cuIpcGetMemHandle(&h2, d + 100)); /* an interior pointer: the allocation's */
    REQUIRE(memcmp(&h1, &h2, sizeof h1) == 0);
    /* the process that made the handle cannot open it */
    CUdeviceptr p;
    REQ_CU_EQ(cuIpcOpenMemHandle(&p, h1, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
              CUDA_ERROR_INVALID_CONTEXT);
    /* only cuMemAlloc memory: not virtual memory (the hook must emulate
     * IPC for the memory it maps itself), stream-ordered or host memory */
    CUmemAllocationProp dp = prop_of(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemGenericAllocationHandle vh;
    REQ_CU(cuMemCreate(&vh, GRAN, &dp, 0));
    CUdeviceptr va = map_with(vh, GRAN, &dev0_rw, 1);
    REQ_CU_EQ(cuIpcGetMemHandle(&h2, va), CUDA_ERROR_INVALID_VALUE);
    REQ_CU_EQ(cuIpcGetMemHandle(&h2, va + 4096), CUDA_ERROR_INVALID_VALUE);
    unmap_free(va, GRAN);
    REQ_CU(cuMemRelease(vh));
    REQ_CU(cuMemAllocAsync(&as, 4096, s));
    REQ_CU_EQ(cuIpcGetMemHandle(&h2, as), CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuMemFreeAsync(as, s));
    void *host;
    REQ_CU(cuMemAllocHost(&host, 4096));
    REQ_CU_EQ(cuIpcGetMemHandle(&h2, (CUdeviceptr)host), CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuMemFreeHost(host));
    REQ_CU_EQ(cuIpcGetMemHandle(&h2, (CUdeviceptr)buf), CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuStreamSynchronize(s));
    REQ_CU(cuStreamDestroy(s));
    simtest_send_u64(wr, free_bytes());
    simtest_send(wr, &h1, sizeof h1);
    (void)simtest_recv_u64(rd); /* the opener has written */
    REQ_CU(cuMemcpyDtoH(buf, d, IPC_SIZE));
    REQUIRE(check_pattern(buf, IPC_SIZE, 4));
    /* a handle of memory freed since */
    REQ_CU(cuMemAlloc(&d2, 4096));
    REQ_CU(cuIpcGetMemHandle(&h2, d2));
    REQ_CU(cuMemFree(d2));
    simtest_send(wr, &h2, sizeof h2);
    (void)simtest_recv_u64(rd);
    REQ_CU(cuMemFree(d));
    free(buf);
}

static void ipc_opener(int rd, int wr, void *arg)
{
    (void)arg;
    simtest_init();
    CUipcMemHandle h, bad;
    CUdeviceptr p, p2, base;
    size_t size;
    uint64_t exporter_free = simtest_recv_u64(rd);
    simtest_recv(rd, &h, sizeof h);
    REQ_CU_EQ(cuIpcOpenMemHandle(&p, h, 7), CUDA_ERROR_INVALID_VALUE);
    memset(&bad, 0x5c, sizeof bad);
    REQ_CU_EQ(cuIpcOpenMemHandle(&p, bad, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
              CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    REQUIRE(free_bytes() == exporter_free); /* not counted again */
    REQ_CU(cuMemGetAddressRange(&base, &size, p + 5));
    REQUIRE(base == p && size == IPC_SIZE);
    unsigned char *buf = malloc(IPC_SIZE);
    REQUIRE(buf);
    REQ_CU(cuMemcpyDtoH(buf, p, IPC_SIZE));
    REQUIRE(check_pattern(buf, IPC_SIZE, 3)); /* bit-exact */
    REQ_CU(cuIpcOpenMemHandle_v2(&p2, h, 0)); /* open already: same pointer, a reference */
    REQUIRE(p2 == p);
    unsigned char capable = 1;
    REQ_CU(cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p));
    REQUIRE(capable == 0);
    REQ_CU_EQ(cuMemFree(p), CUDA_ERROR_INVALID_VALUE); /* closed, not freed */
    for (size_t i = 0; i < IPC_SIZE; i++)
        buf[i] = pattern(i, 4);
    REQ_CU(cuMemcpyHtoD(p, buf, IPC_SIZE));
    REQ_CU(cuIpcCloseMemHandle(p));
    REQ_CU(cuMemcpyDtoH(buf, p + IPC_SIZE - 1, 1)); /* one reference left */
    REQ_CU_EQ(cuIpcCloseMemHandle(p + 1), CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuIpcCloseMemHandle(p));
    REQ_CU_EQ(cuMemGetAddressRange(&base, &size, p), CUDA_ERROR_NOT_FOUND);
    REQ_CU_EQ(cuIpcCloseMemHandle(p), CUDA_ERROR_INVALID_VALUE);
    simtest_send_u64(wr, 1);
    simtest_recv(rd, &bad, sizeof bad);
    REQ_CU_EQ(cuIpcOpenMemHandle(&p, bad, 0), CUDA_ERROR_INVALID_VALUE); /* freed */
    simtest_send_u64(wr, 2);
    (void)simtest_recv_u64(rd); /* the exporter has exited */
    REQ_CU_EQ(cuIpcOpenMemHandle(&p, h, 0), CUDA_ERROR_INVALID_VALUE);
    free(buf);
}

static void test_legacy_ipc(void **state)
{
    (void)state;
    simtest_fresh("64M", NULL);
    struct simchild e, o;
    CUipcMemHandle h;
    simtest_spawn(&e, ipc_exporter, NULL);
    simtest_spawn(&o, ipc_opener, NULL);
    simtest_send_u64(o.wr, simtest_recv_u64(e.rd));
    simtest_recv(e.rd, &h, sizeof h);
    simtest_send(o.wr, &h, sizeof h);
    assert_int_equal(simtest_recv_u64(o.rd), 1);
    /* memory shared by IPC cannot be checkpointed */
    CK(cuCheckpointProcessLock(e.pid, NULL));
    CK_EQ(cuCheckpointProcessCheckpoint(e.pid, NULL), CUDA_ERROR_NOT_SUPPORTED);
    CK(cuCheckpointProcessUnlock(e.pid, NULL));
    simtest_send_u64(e.wr, 1);
    simtest_recv(e.rd, &h, sizeof h);
    simtest_send(o.wr, &h, sizeof h);
    assert_int_equal(simtest_recv_u64(o.rd), 2);
    simtest_send_u64(e.wr, 1);
    simtest_join(&e);
    simtest_send_u64(o.wr, 1);
    simtest_join(&o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_host_pool, simtest_teardown),
        cmocka_unit_test_teardown(test_device_counted_once, simtest_teardown),
        cmocka_unit_test_teardown(test_rules, simtest_teardown),
        cmocka_unit_test_teardown(test_legacy_ipc, simtest_teardown),
    };
    return cmocka_run_group_tests_name("simcuda shared memory", tests, NULL, NULL);
}
