/*
 * test_sim_vmm.c - the virtual-memory API's rules as the simulator
 * enforces them: host NUMA memory (no context needed, not counted),
 * no access before cuMemSetAccess (host access really faults, API copies
 * fail), mapping/unmapping/freeing rules, handle references and
 * cuMemRetainAllocationHandle, capacity given back, copies between device
 * and host mappings (logged), peer access grants, and checkpointing with
 * host memory mapped.
 */
#include "simtest.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define GRAN (2u << 20)

static CUmemAllocationProp prop_of(CUmemLocationType t, int id, int handle_types)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = t;
    p.location.id = id;
    p.requestedHandleTypes = (CUmemAllocationHandleType)handle_types;
    return p;
}

static CUmemAccessDesc dev_rw(int dev)
{
    CUmemAccessDesc a = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    return a;
}

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    REQ_CU(cuMemGetInfo(&f, &t));
    return f;
}

/* Host NUMA memory needs only cuInit (no context, as on a real driver
 * where no process shows on the GPU then) and is not device capacity. */
static void child_host_numa(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    CUmemAllocationProp hp =
        prop_of(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmemGenericAllocationHandle h, h2;
    CUdeviceptr va;
    CUcontext cur = (CUcontext)1;
    size_t gran = 0;
    int numa = -1;
    REQ_CU(cuInit(0));
    REQ_CU(cuCtxGetCurrent(&cur));
    REQUIRE(cur == NULL);
    REQ_CU(cuDeviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 0));
    REQUIRE(numa == 0);
    REQ_CU(cuDeviceGetAttribute(
        &numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
    REQUIRE(numa == 1);
    REQ_CU(cuMemGetAllocationGranularity(&gran, &hp, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    REQUIRE(gran == GRAN);
    REQ_CU(cuMemGetAllocationGranularity(&gran, &hp, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    REQUIRE(gran == GRAN);
    /* twice the device's capacity: host memory is not counted */
    REQ_CU(cuMemCreate(&h, 64u << 20, &hp, 0));
    REQ_CU(cuMemAddressReserve(&va, 64u << 20, 0, 0, 0));
    REQ_CU(cuMemMap(va, 64u << 20, 0, h, 0));
    CUmemAccessDesc acc[2] = {
        {{CU_MEM_LOCATION_TYPE_HOST_NUMA, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE},
        dev_rw(0),
    };
    REQ_CU(cuMemSetAccess(va, 64u << 20, acc, 2));
    memset((void *)va, 0x5a, 1 << 20); /* the host writes it directly */
    unsigned long long f = 0;
    CUmemLocation hl = {CU_MEM_LOCATION_TYPE_HOST_NUMA, 0};
    REQ_CU(cuMemGetAccess(&f, &hl, va + 100));
    REQUIRE(f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CUmemAllocationProp got;
    REQ_CU(cuMemGetAllocationPropertiesFromHandle(&got, h));
    REQUIRE(got.type == CU_MEM_ALLOCATION_TYPE_PINNED);
    REQUIRE(got.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && got.location.id == 0);
    REQUIRE(got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    /* the creation rules for host memory (documented) */
    CUmemAllocationProp bad =
        prop_of(CU_MEM_LOCATION_TYPE_HOST, 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    REQ_CU_EQ(cuMemCreate(&h2, GRAN, &bad, 0), CUDA_ERROR_INVALID_VALUE); /* not IPC capable */
    bad = prop_of(CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0, 0);
    REQ_CU_EQ(cuMemCreate(&h2, GRAN, &bad, 0), CUDA_ERROR_INVALID_VALUE);
    bad = prop_of(CU_MEM_LOCATION_TYPE_HOST_NUMA, 4096, 0);
    REQ_CU_EQ(cuMemCreate(&h2, GRAN, &bad, 0), CUDA_ERROR_INVALID_VALUE); /* no such node */
    bad = prop_of(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, CU_MEM_HANDLE_TYPE_FABRIC);
    REQ_CU_EQ(cuMemCreate(&h2, GRAN, &bad, 0), CUDA_ERROR_NOT_SUPPORTED);
    CUmemAllocationProp plain = prop_of(CU_MEM_LOCATION_TYPE_HOST, 0, 0);
    REQ_CU(cuMemCreate(&h2, GRAN, &plain, 0));
    REQ_CU(cuMemRelease(h2));
    /* a context now: the device's memory is all free */
    simtest_init();
    size_t fr, total;
    REQ_CU(cuMemGetInfo(&fr, &total));
    REQUIRE(fr == total);
    REQUIRE(((unsigned char *)va)[12345] == 0x5a);
    REQ_CU(cuMemUnmap(va, 64u << 20));
    REQ_CU(cuMemRelease(h));
    REQ_CU(cuMemAddressFree(va, 64u << 20));
}

static void test_host_numa(void **state)
{
    (void)state;
    simtest_fresh("32M", NULL);
    simtest_in_child(child_host_numa, NULL);
}

/* No access until cuMemSetAccess: the host faults, API copies fail. */
static void child_access(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    simtest_init();
    CUmemAllocationProp dp = prop_of(CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    char buf[256];
    REQ_CU(cuMemAddressReserve(&va, 4 * GRAN, 0, 0, 0));
    REQ_CU(cuMemCreate(&h, 2 * GRAN, &dp, 0));
    REQ_CU(cuMemMap(va, 2 * GRAN, 0, h, 0));
    unsigned long long f = 99;
    CUmemLocation dl = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    REQ_CU(cuMemGetAccess(&f, &dl, va));
    REQUIRE(f == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    REQUIRE(simtest_access_faults((void *)va, 0) == 1);
    REQUIRE(simtest_access_faults((void *)(va + GRAN + 7), 1) == 1);
    REQ_CU_EQ(cuMemcpyHtoD(va, "abc", 3), CUDA_ERROR_ILLEGAL_ADDRESS);
    REQ_CU_EQ(cuMemcpyDtoH(buf, va, 3), CUDA_ERROR_ILLEGAL_ADDRESS);
    REQ_CU_EQ(cuMemsetD8(va, 0, 16), CUDA_ERROR_ILLEGAL_ADDRESS);
    CUstream s;
    REQ_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    REQ_CU_EQ(cuMemcpyHtoDAsync(va + 64, buf, 64, s), CUDA_ERROR_ILLEGAL_ADDRESS);
    /* the unmapped half of the reservation is no memory at all */
    REQ_CU_EQ(cuMemcpyHtoD(va + 2 * GRAN, "abc", 3), CUDA_ERROR_INVALID_VALUE);
    /* host access cannot be granted to device memory (documented) */
    CUmemAccessDesc host = {{CU_MEM_LOCATION_TYPE_HOST_NUMA, 0},
                            CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    REQ_CU_EQ(cuMemSetAccess(va, 2 * GRAN, &host, 1), CUDA_ERROR_INVALID_VALUE);
    CUmemAccessDesc acc = dev_rw(0);
    REQ_CU_EQ(cuMemSetAccess(va, GRAN, &acc, 1), CUDA_ERROR_INVALID_VALUE); /* part of a mapping */
    REQ_CU_EQ(cuMemSetAccess(va, 3 * GRAN, &acc, 1), CUDA_ERROR_INVALID_VALUE); /* and a gap */
    acc.location.id = 7;
    REQ_CU_EQ(cuMemSetAccess(va, 2 * GRAN, &acc, 1), CUDA_ERROR_INVALID_DEVICE);
    acc = dev_rw(0);
    acc.flags = (CUmemAccess_flags)2;
    REQ_CU_EQ(cuMemSetAccess(va, 2 * GRAN, &acc, 1), CUDA_ERROR_INVALID_VALUE);
    /* read-only: reads work, writes do not */
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
    REQ_CU(cuMemSetAccess(va, 2 * GRAN, &acc, 1));
    REQ_CU(cuMemcpyDtoH(buf, va, sizeof buf));
    REQUIRE(buf[0] == 0 && buf[255] == 0);
    REQ_CU_EQ(cuMemcpyHtoD(va, "abc", 3), CUDA_ERROR_ILLEGAL_ADDRESS);
    REQ_CU_EQ(cuMemcpyDtoD(va, va + GRAN, 3), CUDA_ERROR_ILLEGAL_ADDRESS);
    REQUIRE(simtest_access_faults((void *)va, 0) == 0);
    REQUIRE(simtest_access_faults((void *)va, 1) == 1);
    /* read-write */
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    REQ_CU(cuMemSetAccess(va, 2 * GRAN, &acc, 1));
    REQ_CU(cuMemGetAccess(&f, &dl, va + GRAN));
    REQUIRE(f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    REQ_CU(cuMemcpyHtoDAsync(va + 64, "hello", 6, s));
    REQ_CU(cuStreamSynchronize(s));
    REQUIRE(strcmp((const char *)(va + 64), "hello") == 0);
    REQUIRE(simtest_access_faults((void *)va, 1) == 0);
    /* and taken away again */
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    REQ_CU(cuMemSetAccess(va, 2 * GRAN, &acc, 1));
    REQUIRE(simtest_access_faults((void *)va, 0) == 1);
    REQ_CU_EQ(cuMemcpyDtoH(buf, va, 1), CUDA_ERROR_ILLEGAL_ADDRESS);
    REQ_CU(cuStreamDestroy(s));
    REQ_CU(cuMemUnmap(va, 2 * GRAN));
    /* a new mapping starts without access again (documented) */
    REQ_CU(cuMemMap(va, 2 * GRAN, 0, h, 0));
    REQUIRE(simtest_access_faults((void *)va, 0) == 1);
    REQ_CU(cuMemUnmap(va, 2 * GRAN));
    REQ_CU(cuMemRelease(h));
    REQ_CU(cuMemAddressFree(va, 4 * GRAN));
}

static void test_access(void **state)
{
    (void)state;
    simtest_fresh("64M", NULL);
    simtest_in_child(child_access, NULL);
}

/* Mapping over a mapping, unmapping part of one or across a gap, and
 * freeing a reservation that is still mapped all fail. */
static void child_map_rules(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    simtest_init();
    CUmemAllocationProp dp = prop_of(CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
    CUmemGenericAllocationHandle a, b;
    CUdeviceptr va, other;
    REQ_CU(cuMemAddressReserve(&va, 8 * GRAN, 0, 0, 0));
    REQ_CU(cuMemAddressReserve(&other, 2 * GRAN, 0, 0, 0));
    REQ_CU(cuMemCreate(&a, 2 * GRAN, &dp, 0));
    REQ_CU(cuMemCreate(&b, 2 * GRAN, &dp, 0));
    REQ_CU(cuMemMap(va, 2 * GRAN, 0, a, 0));
    REQ_CU_EQ(cuMemMap(va, 2 * GRAN, 0, b, 0), CUDA_ERROR_INVALID_VALUE);
    REQ_CU_EQ(cuMemMap(va + GRAN, 2 * GRAN, 0, b, 0), CUDA_ERROR_INVALID_VALUE);
    REQ_CU_EQ(cuMemMap(va + 7 * GRAN, 2 * GRAN, 0, b, 0), CUDA_ERROR_INVALID_VALUE); /* past end */
    REQ_CU_EQ(cuMemMap(va + 2 * GRAN, 2 * GRAN, GRAN, b, 0), CUDA_ERROR_INVALID_VALUE);
    REQ_CU_EQ(cuMemMap(va + 2 * GRAN, GRAN, 0, (CUmemGenericAllocationHandle)8, 0),
              CUDA_ERROR_INVALID_HANDLE);
    REQ_CU(cuMemMap(va + 2 * GRAN, 2 * GRAN, 0, b, 0));        /* adjacent */
    REQ_CU(cuMemMap(va + 6 * GRAN, GRAN, GRAN, b, 0));         /* b again, its second half */
    REQ_CU_EQ(cuMemUnmap(va, GRAN), CUDA_ERROR_INVALID_VALUE); /* part */
    REQ_CU_EQ(cuMemUnmap(va + GRAN, 2 * GRAN), CUDA_ERROR_INVALID_VALUE); /* parts of two */
    REQ_CU_EQ(cuMemUnmap(va, 6 * GRAN), CUDA_ERROR_INVALID_VALUE);        /* a gap */
    REQ_CU_EQ(cuMemUnmap(other, 2 * GRAN), CUDA_ERROR_INVALID_VALUE);     /* nothing mapped */
    REQ_CU_EQ(cuMemAddressFree(va, 8 * GRAN), CUDA_ERROR_INVALID_VALUE);  /* still mapped */
    CUmemAccessDesc acc = dev_rw(0);
    REQ_CU(cuMemSetAccess(va, 4 * GRAN, &acc, 1)); /* two whole mappings at once */
    REQ_CU(cuMemsetD8(va, 0x33, 4 * GRAN));
    REQ_CU(cuMemUnmap(va, 4 * GRAN)); /* two whole mappings at once */
    REQ_CU(cuMemSetAccess(va + 6 * GRAN, GRAN, &acc, 1));
    REQUIRE(*(unsigned char *)(va + 6 * GRAN) == 0x33); /* b's second half, shared */
    REQ_CU(cuMemUnmap(va + 6 * GRAN, GRAN));
    REQ_CU(cuMemAddressFree(va, 8 * GRAN));
    REQ_CU_EQ(cuMemAddressFree(va, 8 * GRAN), CUDA_ERROR_INVALID_VALUE);
    REQ_CU_EQ(cuMemAddressFree(other, GRAN), CUDA_ERROR_INVALID_VALUE); /* not its size */
    REQ_CU(cuMemAddressFree(other, 2 * GRAN));
    REQ_CU(cuMemRelease(a));
    REQ_CU(cuMemRelease(b));
}

static void test_map_rules(void **state)
{
    (void)state;
    simtest_fresh("64M", NULL);
    simtest_in_child(child_map_rules, NULL);
}

/* References: the memory (and its capacity) goes with the last reference
 * and the last mapping; cuMemRetainAllocationHandle gives the mapped
 * handle with one more reference. */
static void child_references(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    simtest_init();
    CUmemAllocationProp dp =
        prop_of(CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmemGenericAllocationHandle h, r1, r2;
    CUdeviceptr va;
    size_t f0 = free_bytes();
    REQ_CU(cuMemAddressReserve(&va, 2 * GRAN, 0, 0, 0));
    REQ_CU(cuMemCreate(&h, 2 * GRAN, &dp, 0));
    REQUIRE(free_bytes() == f0 - 2 * GRAN);
    REQ_CU_EQ(cuMemRetainAllocationHandle(&r1, (void *)va),
              CUDA_ERROR_INVALID_VALUE); /* unmapped */
    REQ_CU(cuMemMap(va, 2 * GRAN, 0, h, 0));
    REQ_CU(cuMemRetainAllocationHandle(&r1, (void *)(va + GRAN + 5)));
    REQUIRE(r1 == h);
    CUmemAllocationProp got;
    REQ_CU(cuMemGetAllocationPropertiesFromHandle(&got, r1));
    REQUIRE(got.location.type == CU_MEM_LOCATION_TYPE_DEVICE && got.location.id == 0);
    REQUIRE(got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    REQ_CU(cuMemRelease(h));  /* 1 reference left (the retained one) */
    REQ_CU(cuMemRelease(r1)); /* none left, but mapped: stays */
    REQ_CU_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    REQUIRE(free_bytes() == f0 - 2 * GRAN);
    REQ_CU(cuMemRetainAllocationHandle(&r2, (void *)va)); /* revived through the mapping */
    REQUIRE(r2 == h);
    REQ_CU(cuMemUnmap(va, 2 * GRAN));
    REQUIRE(free_bytes() == f0 - 2 * GRAN); /* r2 holds it */
    REQ_CU(cuMemRelease(r2));
    REQUIRE(free_bytes() == f0); /* gone, capacity back */
    REQ_CU_EQ(cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuMemAddressFree(va, 2 * GRAN));
}

static void test_references(void **state)
{
    (void)state;
    simtest_fresh("64M", NULL);
    simtest_in_child(child_references, NULL);
}

/* Released memory returns to the capacity. */
static void child_capacity(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    simtest_init();
    CUmemAllocationProp dp = prop_of(CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
    CUmemGenericAllocationHandle h[5];
    for (int i = 0; i < 4; i++)
        REQ_CU(cuMemCreate(&h[i], GRAN, &dp, 0));
    REQUIRE(free_bytes() == 0);
    REQ_CU_EQ(cuMemCreate(&h[4], GRAN, &dp, 0), CUDA_ERROR_OUT_OF_MEMORY);
    REQ_CU(cuMemRelease(h[2]));
    REQUIRE(free_bytes() == GRAN);
    REQ_CU(cuMemCreate(&h[4], GRAN, &dp, 0));
    REQ_CU_EQ(cuMemCreate(&h[2], GRAN, &dp, 0), CUDA_ERROR_OUT_OF_MEMORY);
    /* device memory is counted; the same size of host memory is not */
    CUmemAllocationProp hp = prop_of(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, 0);
    REQ_CU(cuMemCreate(&h[2], 4 * GRAN, &hp, 0));
    REQ_CU(cuMemRelease(h[2]));
    for (int i = 0; i < 5; i++)
        if (i != 2)
            REQ_CU(cuMemRelease(h[i]));
    REQUIRE(free_bytes() == 4 * GRAN);
}

static void test_capacity(void **state)
{
    (void)state;
    simtest_fresh("8M", NULL);
    simtest_in_child(child_capacity, NULL);
}

/* Copies between device mappings and host NUMA mappings, all kinds, are
 * bit-exact and logged as memcpy with their bytes. */
static void child_copies(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    simtest_init();
    CUmemAllocationProp dp = prop_of(CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
    CUmemAllocationProp hp =
        prop_of(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmemGenericAllocationHandle dh, hh;
    CUdeviceptr dva, hva;
    REQ_CU(cuMemAddressReserve(&dva, GRAN, 0, 0, 0));
    REQ_CU(cuMemAddressReserve(&hva, GRAN, 0, 0, 0));
    REQ_CU(cuMemCreate(&dh, GRAN, &dp, 0));
    REQ_CU(cuMemCreate(&hh, GRAN, &hp, 0));
    REQ_CU(cuMemMap(dva, GRAN, 0, dh, 0));
    REQ_CU(cuMemMap(hva, GRAN, 0, hh, 0));
    CUmemAccessDesc acc = dev_rw(0);
    REQ_CU(cuMemSetAccess(dva, GRAN, &acc, 1));
    /* the device may not use the host memory before it is granted access */
    REQ_CU_EQ(cuMemcpyDtoD(hva, dva, 4096), CUDA_ERROR_ILLEGAL_ADDRESS);
    REQ_CU(cuMemSetAccess(hva, GRAN, &acc, 1)); /* device only: what the broker grants */
    unsigned char *src = malloc(GRAN), *back = malloc(GRAN);
    REQUIRE(src && back);
    for (size_t i = 0; i < GRAN; i++)
        src[i] = (unsigned char)(i * 2654435761u >> 13);
    REQ_CU(cuMemcpyHtoD(dva, src, GRAN));
    REQ_CU(cuMemcpyDtoD(hva, dva, GRAN)); /* park */
    REQ_CU(cuMemsetD8(dva, 0, GRAN));
    CUstream s;
    REQ_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    REQ_CU(cuMemcpyAsync(dva, hva, GRAN, s)); /* unpark */
    REQ_CU(cuStreamSynchronize(s));
    REQ_CU(cuMemcpyDtoH(back, dva, GRAN));
    REQUIRE(memcmp(back, src, GRAN) == 0);
    memset(back, 0, GRAN);
    REQ_CU(cuMemcpy((CUdeviceptr)back, hva, GRAN));
    REQUIRE(memcmp(back, src, GRAN) == 0);
    REQ_CU(cuStreamDestroy(s));
    free(src);
    free(back);
    REQ_CU(cuMemUnmap(dva, GRAN));
    REQ_CU(cuMemUnmap(hva, GRAN));
    REQ_CU(cuMemRelease(dh));
    REQ_CU(cuMemRelease(hh));
    REQ_CU(cuMemAddressFree(dva, GRAN));
    REQ_CU(cuMemAddressFree(hva, GRAN));
}

static void test_copies(void **state)
{
    (void)state;
    simtest_fresh("64M", NULL);
    const char *log = simtest_fresh_log();
    simtest_in_child(child_copies, NULL);
    struct simlog r[16];
    int n = simtest_read_log(log, r, 16);
    const char *names[] = {"HtoD", "DtoD", "any", "DtoH", "any"};
    int copies = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(r[i].op, "memcpy") != 0)
            continue;
        assert_true(copies < 5);
        assert_string_equal(r[i].name, names[copies]);
        assert_int_equal(r[i].bytes, GRAN);
        copies++;
    }
    assert_int_equal(copies, 5);
}

/* With two devices, device 1 may be granted access to device 0's memory;
 * a copy on device 1 needs it. */
static void child_peer(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    CUcontext c0 = simtest_init(), c1;
    CUmemAllocationProp dp = prop_of(CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    REQ_CU(cuDevicePrimaryCtxRetain(&c1, 1));
    REQ_CU(cuMemAddressReserve(&va, GRAN, 0, 0, 0));
    REQ_CU(cuMemCreate(&h, GRAN, &dp, 0));
    REQ_CU(cuMemMap(va, GRAN, 0, h, 0));
    CUmemAccessDesc acc = dev_rw(0);
    REQ_CU(cuMemSetAccess(va, GRAN, &acc, 1));
    REQ_CU(cuCtxSetCurrent(c1));
    REQ_CU_EQ(cuMemsetD8(va, 1, 64), CUDA_ERROR_ILLEGAL_ADDRESS);
    CUmemAccessDesc both[2] = {dev_rw(0), dev_rw(1)};
    REQ_CU(cuMemSetAccess(va, GRAN, both, 2));
    REQ_CU(cuMemsetD8(va, 1, 64));
    REQ_CU(cuCtxSetCurrent(c0));
    REQUIRE(*(unsigned char *)(va + 63) == 1);
    REQ_CU(cuMemUnmap(va, GRAN));
    REQ_CU(cuMemRelease(h));
    REQ_CU(cuMemAddressFree(va, GRAN));
}

static void test_peer(void **state)
{
    (void)state;
    simtest_fresh("64M", NULL);
    setenv("GPUSHARE_SIM_DEVICES", "2", 1);
    simtest_in_child(child_peer, NULL);
}

/* Checkpointing parks device memory only: host memory stays mapped and
 * readable by the process while it is checkpointed. */
static void child_checkpointed(int rd, int wr, void *arg)
{
    (void)arg;
    simtest_init();
    CUmemAllocationProp dp = prop_of(CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
    CUmemAllocationProp hp = prop_of(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, 0);
    CUmemGenericAllocationHandle dh, hh;
    CUdeviceptr dva, hva;
    REQ_CU(cuMemAddressReserve(&dva, GRAN, 0, 0, 0));
    REQ_CU(cuMemAddressReserve(&hva, GRAN, 0, 0, 0));
    REQ_CU(cuMemCreate(&dh, GRAN, &dp, 0));
    REQ_CU(cuMemCreate(&hh, GRAN, &hp, 0));
    REQ_CU(cuMemMap(dva, GRAN, 0, dh, 0));
    REQ_CU(cuMemMap(hva, GRAN, 0, hh, 0));
    CUmemAccessDesc acc[2] = {
        dev_rw(0),
        {{CU_MEM_LOCATION_TYPE_HOST_NUMA, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE},
    };
    REQ_CU(cuMemSetAccess(dva, GRAN, acc, 1));
    REQ_CU(cuMemSetAccess(hva, GRAN, acc, 2));
    REQ_CU(cuMemsetD32(dva, 0xdeadbeef, GRAN / 4));
    memset((void *)hva, 0x77, GRAN);
    simtest_send_u64(wr, 1);
    (void)simtest_recv_u64(rd); /* checkpointed now */
    REQUIRE(((unsigned char *)hva)[GRAN - 1] == 0x77);
    ((unsigned char *)hva)[0] = 0x78;
    REQUIRE(simtest_access_faults((void *)dva, 0) == 1); /* parked */
    simtest_send_u64(wr, 2);
    (void)simtest_recv_u64(rd); /* restored and unlocked */
    REQUIRE(((unsigned int *)dva)[GRAN / 4 - 1] == 0xdeadbeef);
    unsigned char b;
    REQ_CU(cuMemcpyDtoH(&b, hva, 1));
    REQUIRE(b == 0x78);
    REQ_CU(cuMemUnmap(dva, GRAN));
    REQ_CU(cuMemUnmap(hva, GRAN));
    REQ_CU(cuMemRelease(dh));
    REQ_CU(cuMemRelease(hh));
}

static void test_checkpoint_keeps_host_memory(void **state)
{
    (void)state;
    simtest_fresh("64M", NULL);
    struct simchild c;
    simtest_spawn(&c, child_checkpointed, NULL);
    assert_int_equal(simtest_recv_u64(c.rd), 1);
    CK(cuCheckpointProcessLock(c.pid, NULL));
    CK(cuCheckpointProcessCheckpoint(c.pid, NULL));
    simtest_send_u64(c.wr, 1);
    assert_int_equal(simtest_recv_u64(c.rd), 2);
    CK(cuCheckpointProcessRestore(c.pid, NULL));
    CK(cuCheckpointProcessUnlock(c.pid, NULL));
    simtest_send_u64(c.wr, 2);
    simtest_join(&c);
}

/* cuPointerGetAttribute(s) and cuMemGetAddressRange for every kind of
 * memory; for virtual memory the range attributes are the reservation and
 * cuMemGetAddressRange the mapping (documented). */
static void child_pointers(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    CUcontext ctx = simtest_init();
    CUdeviceptr d, m, as, base;
    void *hostmem;
    size_t size;
    unsigned int u;
    unsigned char b;
    CUcontext c;
    CUstream s;
    REQ_CU(cuStreamCreate(&s, 0));
    REQ_CU(cuMemAlloc(&d, 1000));
    REQ_CU(cuMemAllocManaged(&m, 1000, CU_MEM_ATTACH_GLOBAL));
    REQ_CU(cuMemAllocAsync(&as, 1000, s));
    REQ_CU(cuMemAllocHost(&hostmem, 1000));
    /* cuMemAlloc memory */
    REQ_CU(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 100));
    REQ_CU(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 100));
    REQUIRE(base == d && size == 1000);
    REQ_CU(cuMemGetAddressRange(&base, &size, d + 999));
    REQUIRE(base == d && size == 1000);
    REQ_CU(cuPointerGetAttribute(&u, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d));
    REQUIRE(u == CU_MEMORYTYPE_DEVICE);
    REQ_CU(cuPointerGetAttribute(&u, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d));
    REQUIRE(u == 0);
    REQ_CU(cuPointerGetAttribute(&c, CU_POINTER_ATTRIBUTE_CONTEXT, d));
    REQUIRE(c == ctx);
    REQ_CU(cuPointerGetAttribute(&b, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, d));
    REQUIRE(b == 1);
    REQ_CU(cuPointerGetAttribute(&b, CU_POINTER_ATTRIBUTE_IS_MANAGED, d));
    REQUIRE(b == 0);
    void *hp = (void *)1;
    REQ_CU_EQ(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, d),
              CUDA_ERROR_INVALID_VALUE);
    unsigned long long id1, id2;
    REQ_CU(cuPointerGetAttribute(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, d));
    REQ_CU(cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, m));
    REQUIRE(id1 && id2 && id1 != id2);
    REQ_CU(cuPointerGetAttribute(&b, CU_POINTER_ATTRIBUTE_IS_MANAGED, m));
    REQUIRE(b == 1);
    REQ_CU(cuPointerGetAttribute(&b, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, as));
    REQUIRE(b == 0); /* stream-ordered memory is not */
    REQ_CU(cuPointerGetAttribute(&u, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)hostmem));
    REQUIRE(u == CU_MEMORYTYPE_HOST);
    REQ_CU(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, (CUdeviceptr)hostmem));
    REQUIRE(hp == hostmem);
    /* virtual memory: reservation [va, va + 4 GRAN), mapping at + GRAN */
    CUmemAllocationProp dp =
        prop_of(CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmemAllocationProp hprop = prop_of(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, 0);
    CUmemGenericAllocationHandle h, hh;
    CUdeviceptr va, hva;
    REQ_CU(cuMemAddressReserve(&va, 4 * GRAN, 0, 0, 0));
    REQ_CU(cuMemCreate(&h, 2 * GRAN, &dp, 0));
    REQ_CU(cuMemMap(va + GRAN, 2 * GRAN, 0, h, 0));
    CUdeviceptr p = va + GRAN + 100;
    CUpointer_attribute attrs[8] = {
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        CU_POINTER_ATTRIBUTE_MAPPED,
        CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
        CU_POINTER_ATTRIBUTE_MAPPING_SIZE,
        CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
        CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
        CU_POINTER_ATTRIBUTE_ACCESS_FLAGS,
    };
    CUdeviceptr rstart = 0;
    size_t rsize = 0, msize = 0;
    unsigned char mapped = 0, legacy = 1;
    void *mbase = NULL;
    unsigned int types = 0, access = 9;
    void *data[8] = {&rstart, &rsize, &mapped, &mbase, &msize, &types, &legacy, &access};
    REQ_CU(cuPointerGetAttributes(8, attrs, data, p));
    REQUIRE(rstart == va && rsize == 4 * GRAN && mapped == 1);
    REQUIRE(mbase == (void *)(va + GRAN) && msize == 2 * GRAN);
    REQUIRE(types == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && legacy == 0);
    REQUIRE(access == CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE);
    CUmemAccessDesc acc = dev_rw(0);
    REQ_CU(cuMemSetAccess(va + GRAN, 2 * GRAN, &acc, 1));
    REQ_CU(cuPointerGetAttribute(&access, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, p));
    REQUIRE(access == CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE);
    REQ_CU(cuMemGetAddressRange(&base, &size, p));
    REQUIRE(base == va + GRAN && size == 2 * GRAN);
    REQ_CU(cuPointerGetAttribute(&u, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p));
    REQUIRE(u == CU_MEMORYTYPE_DEVICE);
    REQ_CU(cuPointerGetAttribute(&c, CU_POINTER_ATTRIBUTE_CONTEXT, p));
    REQUIRE(c == NULL);
    REQ_CU(cuPointerGetAttribute(&id1, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, p));
    REQUIRE(id1 != 0);
    /* the unmapped part of the reservation: the range, nothing else */
    rstart = 0;
    mapped = 1;
    REQ_CU(cuPointerGetAttributes(3, attrs, data, va + 5));
    REQUIRE(rstart == va && rsize == 4 * GRAN && mapped == 0);
    REQ_CU_EQ(cuPointerGetAttribute(&u, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + 5),
              CUDA_ERROR_INVALID_VALUE);
    REQ_CU_EQ(cuMemGetAddressRange(&base, &size, va + 5), CUDA_ERROR_NOT_FOUND);
    /* host NUMA memory is host memory of no device */
    REQ_CU(cuMemAddressReserve(&hva, GRAN, 0, 0, 0));
    REQ_CU(cuMemCreate(&hh, GRAN, &hprop, 0));
    REQ_CU(cuMemMap(hva, GRAN, 0, hh, 0));
    REQ_CU(cuPointerGetAttribute(&u, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, hva));
    REQUIRE(u == CU_MEMORYTYPE_HOST);
    REQ_CU(cuPointerGetAttribute(&u, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, hva));
    REQUIRE((int)u == CU_DEVICE_CPU);
    REQ_CU(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, hva + 8));
    REQUIRE(hp == (void *)(hva + 8));
    /* not CUDA memory: an error from the one, defaults from the other */
    int local = 0;
    CUdeviceptr lp = (CUdeviceptr)&local;
    REQ_CU_EQ(cuPointerGetAttribute(&u, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, lp),
              CUDA_ERROR_INVALID_VALUE);
    REQ_CU_EQ(cuMemGetAddressRange(&base, &size, lp), CUDA_ERROR_NOT_FOUND);
    CUpointer_attribute a2[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_MAPPED,
                                 CU_POINTER_ATTRIBUTE_CONTEXT};
    u = 7;
    mapped = 1;
    c = ctx;
    void *d2[3] = {&u, &mapped, &c};
    REQ_CU(cuPointerGetAttributes(3, a2, d2, lp));
    REQUIRE(u == 0 && mapped == 0 && c == NULL);
    REQ_CU_EQ(cuPointerGetAttribute(&u, (CUpointer_attribute)999, d), CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuMemUnmap(va + GRAN, 2 * GRAN));
    REQ_CU(cuMemUnmap(hva, GRAN));
    REQ_CU(cuMemRelease(h));
    REQ_CU(cuMemRelease(hh));
    REQ_CU(cuMemAddressFree(va, 4 * GRAN));
    REQ_CU(cuMemAddressFree(hva, GRAN));
    REQ_CU(cuMemFreeAsync(as, s));
    REQ_CU(cuStreamSynchronize(s));
    REQ_CU(cuStreamDestroy(s));
    REQ_CU(cuMemFree(d));
    REQ_CU(cuMemFree(m));
    REQ_CU(cuMemFreeHost(hostmem));
}

static void test_pointer_attributes(void **state)
{
    (void)state;
    simtest_fresh("64M", NULL);
    simtest_in_child(child_pointers, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_host_numa, simtest_teardown),
        cmocka_unit_test_teardown(test_access, simtest_teardown),
        cmocka_unit_test_teardown(test_map_rules, simtest_teardown),
        cmocka_unit_test_teardown(test_references, simtest_teardown),
        cmocka_unit_test_teardown(test_capacity, simtest_teardown),
        cmocka_unit_test_teardown(test_copies, simtest_teardown),
        cmocka_unit_test_teardown(test_peer, simtest_teardown),
        cmocka_unit_test_teardown(test_checkpoint_keeps_host_memory, simtest_teardown),
        cmocka_unit_test_teardown(test_pointer_attributes, simtest_teardown),
    };
    return cmocka_run_group_tests_name("simcuda virtual memory", tests, NULL, NULL);
}
