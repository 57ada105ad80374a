/*
 * test_sim_api.c - the simulator's single-process API: initialisation and
 * its errors, device queries, contexts, memory (device, pitch, host,
 * managed, virtual memory management), copies and sets in 1D/2D/3D,
 * modules, the execution log format.  Each test runs in a child process of
 * its own (cuInit binds a process to one simulated machine).
 */
#include "simtest.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---- initialisation ---------------------------------------------------- */

static void child_not_initialized(int rd, int wr, void *arg)
{
    int v = 0, n = 0;
    CUdevice d;
    CUdeviceptr p;
    CUcontext c;
    REQ_CU(cuDriverGetVersion(&v)); /* works before cuInit */
    REQUIRE(v == 13000);
    REQ_CU_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    REQ_CU_EQ(cuDeviceGet(&d, 0), CUDA_ERROR_NOT_INITIALIZED);
    REQ_CU_EQ(cuMemAlloc(&p, 16), CUDA_ERROR_NOT_INITIALIZED);
    REQ_CU_EQ(cuCtxGetCurrent(&c), CUDA_ERROR_NOT_INITIALIZED);
    REQ_CU_EQ(cuInit(1), CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuInit(0));
    REQ_CU(cuInit(0)); /* idempotent */
    REQ_CU(cuDeviceGetCount(&n));
    REQUIRE(n == 1);
    REQ_CU_EQ(cuDriverGetVersion(NULL), CUDA_ERROR_INVALID_VALUE);
}

static void test_not_initialized(void **state)
{
    simtest_fresh(NULL, NULL);
    simtest_in_child(child_not_initialized, NULL);
}

/* A malformed GPUSHARE_SIM_MEMORY fails cuInit with one clear stderr line;
 * once fixed, cuInit succeeds. */
static void child_bad_memory(int rd, int wr, void *arg)
{
    int err[2];
    REQUIRE(pipe(err) == 0);
    int saved = dup(2);
    dup2(err[1], 2);
    setenv("GPUSHARE_SIM_MEMORY", "12 parsecs", 1);
    CUresult r = cuInit(0);
    dup2(saved, 2);
    close(err[1]);
    char buf[512] = {0};
    ssize_t n = read(err[0], buf, sizeof buf - 1);
    REQUIRE(r == CUDA_ERROR_INVALID_VALUE);
    REQUIRE(n > 0);
    REQUIRE(strstr(buf, "GPUSHARE_SIM_MEMORY") != NULL);
    REQUIRE(strstr(buf, "12 parsecs") != NULL);
    REQUIRE(strchr(buf, '\n') == buf + n - 1); /* one line */
    int count;
    REQ_CU_EQ(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
    setenv("GPUSHARE_SIM_MEMORY", "3G", 1);
    REQ_CU(cuInit(0));
    size_t total = 0;
    REQ_CU(cuDeviceTotalMem(&total, 0));
    REQUIRE(total == 3ULL << 30);
}

static void test_bad_memory_env(void **state)
{
    simtest_fresh(NULL, NULL);
    simtest_in_child(child_bad_memory, NULL);
}

static void child_size(int rd, int wr, void *arg)
{
    size_t total = 0;
    REQ_CU(cuInit(0));
    REQ_CU(cuDeviceTotalMem(&total, 0));
    REQUIRE(total == *(unsigned long long *)arg);
}

static void test_size_parsing(void **state)
{
    static const struct {
        const char *text;
        unsigned long long bytes;
    } cases[] = {
        {"1048576", 1048576ULL}, {"64K", 64ULL << 10}, {"64M", 64ULL << 20},
        {"2g", 2ULL << 30},      {"1T", 1ULL << 40},   {"16GiB", 16ULL << 30},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        simtest_fresh(cases[i].text, NULL); /* the creator fixes the capacity */
        unsigned long long want = cases[i].bytes;
        simtest_in_child(child_size, &want);
        simtest_teardown(NULL);
    }
}

/* ---- devices ------------------------------------------------------------ */

static void child_devices(int rd, int wr, void *arg)
{
    int n = 0, v = 0;
    CUdevice d;
    char name[64];
    CUuuid u0, u1, u0b;
    size_t total;
    REQ_CU(cuInit(0));
    REQ_CU(cuDeviceGetCount(&n));
    REQUIRE(n == 2);
    REQ_CU(cuDeviceGet(&d, 1));
    REQUIRE(d == 1);
    REQ_CU_EQ(cuDeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE);
    REQ_CU_EQ(cuDeviceGet(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuDeviceGetName(name, sizeof name, 0));
    REQUIRE(strcmp(name, "gpushare simulated GPU") == 0);
    REQ_CU_EQ(cuDeviceGetName(name, sizeof name, 5), CUDA_ERROR_INVALID_DEVICE);
    REQ_CU(cuDeviceGetUuid(&u0, 0)); /* cuda.h maps this to _v2 */
    REQ_CU(cuDeviceGetUuid(&u1, 1));
    REQUIRE(memcmp(&u0, &u1, sizeof u0) != 0);
    REQ_CU(cuDeviceGetUuid(&u0b, 0));
    REQUIRE(memcmp(&u0, &u0b, sizeof u0) == 0);
    REQ_CU(cuDeviceTotalMem(&total, 1));
    REQUIRE(total == 256ULL << 20);
    struct {
        CUdevice_attribute a;
        int want;
    } attrs[] = {
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
        {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132},
        {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
        {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
        {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
        {CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1},
        {CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1},
        {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
        {CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT, 0},
    };
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
        REQ_CU(cuDeviceGetAttribute(&v, attrs[i].a, 0));
        REQUIRE(v == attrs[i].want);
    }
    REQ_CU_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
    REQ_CU_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 7),
              CUDA_ERROR_INVALID_DEVICE);
    REQ_CU_EQ(cuDeviceGetAttribute(NULL, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0),
              CUDA_ERROR_INVALID_VALUE);
    REQUIRE(gpusim_is_simulated() == 1);
    REQUIRE(strcmp(gpusim_segment_name(), getenv("GPUSHARE_SIM_NAME")) == 0);
}

static void test_devices(void **state)
{
    simtest_fresh("256M", NULL);
    setenv("GPUSHARE_SIM_DEVICES", "2", 1);
    simtest_in_child(child_devices, NULL);
}

/* The UUID depends only on the segment name and the index. */
static void child_uuid(int rd, int wr, void *arg)
{
    CUuuid u;
    REQ_CU(cuInit(0));
    REQ_CU(cuDeviceGetUuid_v2(&u, 0));
    simtest_send(wr, &u, sizeof u);
}

static void test_uuid_deterministic(void **state)
{
    CUuuid a, b;
    struct simchild c;
    simtest_fresh(NULL, NULL);
    simtest_spawn(&c, child_uuid, NULL);
    simtest_recv(c.rd, &a, sizeof a);
    simtest_join(&c);
    simtest_teardown(NULL);
    simtest_spawn(&c, child_uuid, NULL); /* same name, new segment */
    simtest_recv(c.rd, &b, sizeof b);
    simtest_join(&c);
    assert_memory_equal(&a, &b, sizeof a);
}

static void test_errors(void **state)
{
    const char *s = NULL;
    CK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
    assert_string_equal(s, "CUDA_ERROR_OUT_OF_MEMORY");
    CK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
    assert_string_equal(s, "out of memory");
    CK(cuGetErrorName(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, &s));
    assert_string_equal(s, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED");
    CK(cuGetErrorName(CUDA_ERROR_TIMEOUT, &s));
    assert_string_equal(s, "CUDA_ERROR_TIMEOUT");
    CK_EQ(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    assert_null(s);
    CK_EQ(cuGetErrorString(CUDA_SUCCESS, NULL), CUDA_ERROR_INVALID_VALUE);
}

/* ---- contexts ----------------------------------------------------------- */

static void child_contexts(int rd, int wr, void *arg)
{
    CUcontext c = NULL, p = NULL, cur = NULL, popped = NULL;
    CUdevice d = -1;
    CUdeviceptr ptr;
    unsigned flags = 99;
    int active = 9;
    REQ_CU(cuInit(0));
    REQ_CU(cuCtxGetCurrent(&cur));
    REQUIRE(cur == NULL);
    REQ_CU_EQ(cuCtxGetCurrent(NULL), CUDA_ERROR_INVALID_VALUE);
    REQ_CU_EQ(cuMemAlloc(&ptr, 64), CUDA_ERROR_INVALID_CONTEXT);
    REQ_CU_EQ(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    REQ_CU_EQ(cuCtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT);
    REQ_CU_EQ(cuCtxPopCurrent(&popped), CUDA_ERROR_INVALID_CONTEXT);

    REQ_CU(cuDevicePrimaryCtxGetState(0, &flags, &active));
    REQUIRE(flags == 0 && active == 0);
    REQ_CU(cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_BLOCKING_SYNC));
    REQ_CU(cuDevicePrimaryCtxRetain(&p, 0));
    REQ_CU(cuDevicePrimaryCtxGetState(0, &flags, &active));
    REQUIRE(flags == CU_CTX_SCHED_BLOCKING_SYNC && active == 1);
    REQ_CU_EQ(cuDevicePrimaryCtxRetain(&p, 3), CUDA_ERROR_INVALID_DEVICE);
    REQ_CU(cuCtxSetCurrent(p));
    REQ_CU(cuCtxGetCurrent(&cur));
    REQUIRE(cur == p);
    REQ_CU(cuCtxGetDevice(&d));
    REQUIRE(d == 0);
    REQ_CU_EQ(cuCtxDestroy(p), CUDA_ERROR_INVALID_CONTEXT); /* primary */

    REQ_CU(cuCtxCreate(&c, NULL, 0, 0)); /* cuCtxCreate_v4, pushes */
    REQ_CU(cuCtxGetCurrent(&cur));
    REQUIRE(cur == c && c != p);
    REQ_CU(cuCtxGetDevice_v2(&d, c));
    REQUIRE(d == 0);
    REQ_CU(cuMemAlloc(&ptr, 4096));
    REQ_CU(cuCtxPopCurrent(&popped));
    REQUIRE(popped == c);
    REQ_CU(cuCtxGetCurrent(&cur));
    REQUIRE(cur == p);
    REQ_CU(cuCtxPushCurrent(c));
    REQ_CU(cuCtxSynchronize_v2(NULL));
    REQ_CU(cuCtxDestroy(c)); /* frees ptr and pops c */
    REQ_CU(cuCtxGetCurrent(&cur));
    REQUIRE(cur == p);
    REQ_CU_EQ(cuCtxPushCurrent(c), CUDA_ERROR_INVALID_CONTEXT);
    REQ_CU_EQ(cuMemFree(ptr), CUDA_ERROR_INVALID_VALUE);

    REQ_CU(cuDevicePrimaryCtxRelease(0));
    REQ_CU(cuDevicePrimaryCtxGetState(0, &flags, &active));
    REQUIRE(active == 0);
    REQ_CU_EQ(cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);
    REQ_CU(cuDevicePrimaryCtxReset(0));
}

static void test_contexts(void **state)
{
    simtest_fresh(NULL, NULL);
    simtest_in_child(child_contexts, NULL);
}

/* ---- memory ------------------------------------------------------------- */

static void child_memory(int rd, int wr, void *arg)
{
    CUdeviceptr a, b, base;
    size_t fr, total, sz, pitch;
    simtest_init();
    REQ_CU(cuMemGetInfo(&fr, &total));
    REQUIRE(total == 64ULL << 20 && fr == total);
    REQ_CU_EQ(cuMemAlloc(&a, 0), CUDA_ERROR_INVALID_VALUE);
    REQ_CU_EQ(cuMemAlloc(NULL, 16), CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuMemAlloc(&a, 1000)); /* counted as 1024 */
    REQ_CU(cuMemGetInfo(&fr, &total));
    REQUIRE(fr == total - 1024);
    REQ_CU(cuMemGetAddressRange(&base, &sz, a + 10));
    REQUIRE(base == a && sz == 1000);

    unsigned char src[1000], dst[1000];
    for (int i = 0; i < 1000; i++)
        src[i] = (unsigned char)(i * 7);
    REQ_CU(cuMemcpyHtoD(a, src, sizeof src));
    REQUIRE(memcmp((void *)a, src, sizeof src) == 0); /* unified addressing */
    REQ_CU(cuMemAlloc(&b, 1000));
    REQ_CU(cuMemcpyDtoD(b, a, 1000));
    REQ_CU(cuMemcpyDtoH(dst, b, sizeof dst));
    REQUIRE(memcmp(dst, src, sizeof src) == 0);
    REQ_CU(cuMemcpy(b, (CUdeviceptr)src, 10)); /* unified: host pointer as address */

    REQ_CU(cuMemsetD8(a, 0xab, 1000));
    REQUIRE(((unsigned char *)a)[999] == 0xab);
    REQ_CU(cuMemsetD16(a, 0x1234, 10));
    REQUIRE(((unsigned short *)a)[9] == 0x1234 && ((unsigned char *)a)[20] == 0xab);
    REQ_CU(cuMemsetD32(a, 0xdeadbeef, 100));
    REQUIRE(((unsigned int *)a)[99] == 0xdeadbeef);
    REQ_CU_EQ(cuMemsetD32(a + 1, 0, 4), CUDA_ERROR_INVALID_VALUE); /* misaligned */
    REQ_CU(cuMemsetD8Async(a, 1, 4, NULL));
    REQ_CU(cuCtxSynchronize());
    REQUIRE(((unsigned char *)a)[3] == 1);

    REQ_CU(cuMemFree(a));
    REQ_CU(cuMemFree(b));
    REQ_CU_EQ(cuMemFree(a), CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuMemGetInfo(&fr, &total));
    REQUIRE(fr == total);

    /* pitch allocation and 2D set */
    REQ_CU(cuMemAllocPitch(&a, &pitch, 100, 8, 4));
    REQUIRE(pitch >= 100 && pitch % 256 == 0);
    REQ_CU(cuMemsetD2D8(a, pitch, 0, pitch, 8));
    REQ_CU(cuMemsetD2D32(a, pitch, 0x01020304, 10, 8));
    for (int y = 0; y < 8; y++) {
        unsigned int *row = (unsigned int *)(a + (size_t)y * pitch);
        REQUIRE(row[9] == 0x01020304 && row[10] == 0);
    }
    REQ_CU(cuMemFree(a));

    /* host memory is not counted; managed is */
    void *h;
    REQ_CU(cuMemAllocHost(&h, 1 << 20));
    REQ_CU(cuMemHostAlloc(&h, 1 << 20, CU_MEMHOSTALLOC_PORTABLE));
    REQ_CU(cuMemGetInfo(&fr, &total));
    REQUIRE(fr == total);
    memset(h, 3, 1 << 20);
    REQ_CU(cuMemFreeHost(h));
    REQ_CU_EQ(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuMemAllocManaged(&a, 4096, CU_MEM_ATTACH_GLOBAL));
    REQ_CU(cuMemGetInfo(&fr, &total));
    REQUIRE(fr == total - 4096);
    REQ_CU(cuMemFree(a));

    /* the 32-bit ABI (legacy cuMemAlloc, placed below 4 GiB) */
    CUresult (*alloc32)(unsigned int *, unsigned int);
    CUresult (*free32)(unsigned int);
    CUdriverProcAddressQueryResult st;
    REQ_CU(cuGetProcAddress("cuMemAlloc", (void **)&alloc32, 2000, 0, &st));
    REQ_CU(cuGetProcAddress("cuMemFree", (void **)&free32, 2000, 0, &st));
    unsigned int small = 0;
    REQ_CU(alloc32(&small, 4096));
    REQUIRE(small != 0);
    memset((void *)(uintptr_t)small, 1, 4096);
    REQ_CU(free32(small));
}

static void test_memory(void **state)
{
    simtest_fresh("64M", NULL);
    simtest_in_child(child_memory, NULL);
}

/* 2D and 3D copies honour offsets and pitches in both directions. */
static void child_copies_2d3d(int rd, int wr, void *arg)
{
    enum { W = 40, H = 6, D = 3, HP = 64, DP = 128 };
    CUdeviceptr dev;
    simtest_init();
    unsigned char host[D][H + 2][HP], back[D][H + 2][HP];
    for (int z = 0; z < D; z++)
        for (int y = 0; y < H + 2; y++)
            for (int x = 0; x < HP; x++)
                host[z][y][x] = (unsigned char)(z * 61 + y * 17 + x);
    REQ_CU(cuMemAlloc(&dev, (size_t)DP * (H + 2) * D));
    REQ_CU(cuMemsetD8(dev, 0, (size_t)DP * (H + 2) * D));

    /* 2D: rows 1..H, columns 3..3+W of the host plane 0 to (x=5,y=0) */
    CUDA_MEMCPY2D c2 = {0};
    c2.srcMemoryType = CU_MEMORYTYPE_HOST;
    c2.srcHost = host[0];
    c2.srcPitch = HP;
    c2.srcXInBytes = 3;
    c2.srcY = 1;
    c2.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c2.dstDevice = dev;
    c2.dstPitch = DP;
    c2.dstXInBytes = 5;
    c2.WidthInBytes = W;
    c2.Height = H;
    REQ_CU(cuMemcpy2D(&c2));
    for (int y = 0; y < H; y++) {
        const unsigned char *row = (const unsigned char *)dev + (size_t)y * DP;
        REQUIRE(memcmp(row + 5, &host[0][y + 1][3], W) == 0);
        REQUIRE(row[4] == 0 && row[5 + W] == 0);
    }
    c2.dstPitch = 10; /* narrower than the width */
    REQ_CU_EQ(cuMemcpy2D(&c2), CUDA_ERROR_INVALID_VALUE);
    c2.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    REQ_CU_EQ(cuMemcpy2D(&c2), CUDA_ERROR_NOT_SUPPORTED);

    /* 3D: the whole host box to the device and back with other pitches */
    CUDA_MEMCPY3D c3 = {0};
    c3.srcMemoryType = CU_MEMORYTYPE_HOST;
    c3.srcHost = host;
    c3.srcPitch = HP;
    c3.srcHeight = H + 2;
    c3.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c3.dstDevice = dev;
    c3.dstPitch = DP;
    c3.dstHeight = H + 2;
    c3.WidthInBytes = HP;
    c3.Height = H + 2;
    c3.Depth = D;
    REQ_CU(cuMemcpy3D(&c3));
    memset(back, 0, sizeof back);
    CUDA_MEMCPY3D r3 = {0};
    r3.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
    r3.srcDevice = dev;
    r3.srcPitch = DP;
    r3.srcHeight = H + 2;
    r3.srcZ = 1;
    r3.dstMemoryType = CU_MEMORYTYPE_HOST;
    r3.dstHost = back;
    r3.dstPitch = HP;
    r3.dstHeight = H + 2;
    r3.dstZ = 1;
    r3.WidthInBytes = HP;
    r3.Height = H + 2;
    r3.Depth = D - 1;
    CUstream s;
    REQ_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    REQ_CU(cuMemcpy3DAsync(&r3, s));
    REQ_CU(cuStreamSynchronize(s));
    REQUIRE(memcmp(back[1], host[1], sizeof host[1] * (D - 1)) == 0);
    REQUIRE(back[0][0][0] == 0);
    REQ_CU(cuStreamDestroy(s));
    REQ_CU(cuMemFree(dev));
}

static void test_copies_2d3d(void **state)
{
    simtest_fresh(NULL, NULL);
    simtest_in_child(child_copies_2d3d, NULL);
}

/* Virtual memory management as PyTorch's expandable segments use it. */
static void child_vmm(int rd, int wr, void *arg)
{
    CUmemAllocationProp prop = {0};
    size_t gran = 0, fr, total;
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    simtest_init();
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    REQ_CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    REQUIRE(gran == 2u << 20);
    REQ_CU(cuMemAddressReserve(&va, 8 * gran, 0, 0, 0));
    REQUIRE(va % gran == 0);
    REQ_CU(cuMemGetInfo(&fr, &total));
    REQUIRE(fr == total); /* reserving is free */
    REQ_CU_EQ(cuMemCreate(&h, gran + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuMemCreate(&h, 2 * gran, &prop, 0));
    REQ_CU(cuMemGetInfo(&fr, &total));
    REQUIRE(fr == total - 2 * gran); /* physical memory counts at create */
    REQ_CU(cuMemMap(va, 2 * gran, 0, h, 0));
    REQ_CU(cuMemMap(va + 4 * gran, gran, gran, h, 0));                /* second half again */
    REQ_CU_EQ(cuMemMap(va, gran, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* mapped */
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    REQ_CU(cuMemSetAccess(va, 2 * gran, &acc, 1));
    REQ_CU(cuMemSetAccess(va + 4 * gran, gran, &acc, 1));
    REQ_CU(cuMemsetD32(va + gran, 0x5a5a5a5a, gran / 4));
    REQUIRE(*(unsigned int *)(va + 4 * gran + 64) == 0x5a5a5a5a); /* shared pages */
    REQ_CU(cuMemRelease(h));                                      /* still mapped: stays counted */
    REQ_CU(cuMemGetInfo(&fr, &total));
    REQUIRE(fr == total - 2 * gran);
    REQ_CU_EQ(cuMemUnmap(va, gran), CUDA_ERROR_INVALID_VALUE); /* would split */
    REQ_CU(cuMemUnmap(va, 2 * gran));
    REQ_CU(cuMemUnmap(va + 4 * gran, gran));
    REQ_CU(cuMemGetInfo(&fr, &total));
    REQUIRE(fr == total);
    REQ_CU(cuMemAddressFree(va, 8 * gran));
    REQ_CU_EQ(cuMemAddressFree(va, 8 * gran), CUDA_ERROR_INVALID_VALUE);
}

static void test_vmm(void **state)
{
    simtest_fresh("64M", NULL);
    simtest_in_child(child_vmm, NULL);
}

/* Any image loads, any name resolves; the function keeps its name. */
static void child_modules(int rd, int wr, void *arg)
{
    CUmodule m, m2;
    CUfunction f, f2;
    CUlibrary lib;
    CUkernel k;
    const char *name;
    static const char image[] = "not really a cubin";
    REQ_CU(cuInit(0));
    REQ_CU_EQ(cuModuleLoadData(&m, image), CUDA_ERROR_INVALID_CONTEXT);
    simtest_init();
    REQ_CU(cuModuleLoadData(&m, image));
    REQ_CU(cuModuleGetFunction(&f, m, "my_kernel"));
    REQ_CU(cuModuleGetFunction(&f2, m, "my_kernel"));
    REQUIRE(f == f2);
    REQ_CU(cuFuncGetName(&name, f));
    REQUIRE(strcmp(name, "my_kernel") == 0);
    REQ_CU(cuModuleLoadDataEx(&m2, image, 0, NULL, NULL));
    REQ_CU_EQ(cuModuleLoad(&m2, "/nonexistent/kernel.cubin"), CUDA_ERROR_FILE_NOT_FOUND);
    REQ_CU(cuModuleLoad(&m2, "/proc/self/exe"));
    REQ_CU(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    REQ_CU_EQ(cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, NULL, NULL, NULL),
              CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuModuleUnload(m));
    REQ_CU_EQ(cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
    REQ_CU_EQ(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
    REQ_CU(cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0));
    REQ_CU(cuLibraryGetKernel(&k, lib, "lib_kernel"));
    REQ_CU(cuKernelGetFunction(&f, k));
    REQ_CU(cuFuncGetName(&name, f));
    REQUIRE(strcmp(name, "lib_kernel") == 0);
    REQ_CU(cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    REQ_CU(cuCtxSynchronize());
    REQ_CU(cuLibraryUnload(lib));
}

static void test_modules(void **state)
{
    simtest_fresh(NULL, NULL);
    setenv("GPUSHARE_SIM_KERNEL_US", "10", 1);
    simtest_in_child(child_modules, NULL);
}

/* The log: one JSON object per line with the documented fields. */
static void child_log(int rd, int wr, void *arg)
{
    CUmodule m;
    CUfunction f;
    CUdeviceptr d;
    char buf[64] = {0};
    simtest_init();
    REQ_CU(cuModuleLoadData(&m, "x"));
    REQ_CU(cuModuleGetFunction(&f, m, "quote\"kernel"));
    REQ_CU(cuMemAlloc(&d, 64));
    gpusim_set_next_kernel_us(2000);
    REQ_CU(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    REQ_CU(cuMemsetD8(d, 7, 64));
    REQ_CU(cuMemcpyDtoH(buf, d, 64));
    REQUIRE(buf[63] == 7);
}

static void test_log_format(void **state)
{
    simtest_fresh(NULL, NULL);
    const char *path = simtest_fresh_log();
    struct simchild c;
    simtest_spawn(&c, child_log, NULL);
    pid_t pid = c.pid;
    simtest_join(&c);
    struct simlog r[8];
    int n = simtest_read_log(path, r, 8);
    assert_int_equal(n, 3);
    assert_int_equal(r[0].pid, pid);
    assert_int_equal(r[0].dev, 0);
    assert_string_equal(r[0].op, "kernel");
    assert_string_equal(r[0].name, "quote\\");
    assert_true(r[0].end - r[0].start >= 2000000ULL);
    assert_int_equal(r[0].bytes, -1);
    assert_string_equal(r[1].op, "memset");
    assert_int_equal(r[1].bytes, 64);
    assert_true(r[1].start >= r[0].end);
    assert_string_equal(r[2].op, "memcpy");
    assert_string_equal(r[2].name, "DtoH");
    assert_int_equal(r[2].bytes, 64);
    assert_true(strncmp(r[2].stream, "0x", 2) == 0);
    /* every line is complete JSON-ish: starts with { and ends with }\n */
    FILE *fp = fopen(path, "r");
    char line[2048];
    while (fgets(line, sizeof line, fp)) {
        size_t len = strlen(line);
        assert_true(len > 2 && line[0] == '{' && line[len - 2] == '}' && line[len - 1] == '\n');
    }
    fclose(fp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_not_initialized, simtest_teardown),
        cmocka_unit_test_teardown(test_bad_memory_env, simtest_teardown),
        cmocka_unit_test_teardown(test_size_parsing, simtest_teardown),
        cmocka_unit_test_teardown(test_devices, simtest_teardown),
        cmocka_unit_test_teardown(test_uuid_deterministic, simtest_teardown),
        cmocka_unit_test(test_errors),
        cmocka_unit_test_teardown(test_contexts, simtest_teardown),
        cmocka_unit_test_teardown(test_memory, simtest_teardown),
        cmocka_unit_test_teardown(test_copies_2d3d, simtest_teardown),
        cmocka_unit_test_teardown(test_vmm, simtest_teardown),
        cmocka_unit_test_teardown(test_modules, simtest_teardown),
        cmocka_unit_test_teardown(test_log_format, simtest_teardown),
    };
    return cmocka_run_group_tests_name("simcuda api", tests, NULL, NULL);
}
