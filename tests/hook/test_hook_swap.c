/*
 * test_hook_swap.c - the swap tier's backing as a program sees it through
 * the preloaded hook (GPUSHARE_SWAP=on), on the simulated driver: a
 * cuMemAlloc the tier takes is a VMM mapping of whole granules to the
 * driver (the simulator counts it at cuMemCreate), yet cuMemGetAddressRange
 * and cuPointerGetAttribute describe the allocation the program asked for;
 * bytes written come back; cuMemFree gives the memory back; small
 * allocations stay plain; a destroyed context takes its memory with it.
 *
 * Run with the hook preloaded (tests/hook/Makefile.am); the environment is
 * set here before the first CUDA call, when the hook reads it
 * (hook_fixture.h, shared with test_hook_ipc.c).
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "hook_fixture.h"
#include "simtest.h"

#define MIB (1ull << 20)

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    REQ_CU(cuMemGetInfo(&f, &t));
    return f;
}

static void backed_child(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    simtest_init();
    size_t before = free_bytes();
    size_t size = 20 * MIB + 100; /* 22 MiB of granules: backed (waste under 1/8) */
    CUdeviceptr p = 0;
    REQ_CU(cuMemAlloc(&p, size));
    REQUIRE(free_bytes() == before - 22 * MIB); /* a VMM mapping, counted whole */
    CUdeviceptr base = 0;
    size_t got = 0;
    REQ_CU(cuMemGetAddressRange(&base, &got, p + 5 * MIB));
    REQUIRE(base == p && got == size);
    size_t attr_size = 0;
    REQ_CU(cuPointerGetAttribute(&attr_size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 1));
    REQUIRE(attr_size == size);
    CUdeviceptr attr_base = 0;
    CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR};
    void *data[] = {&attr_base};
    REQ_CU(cuPointerGetAttributes(1, which, data, p + 7));
    REQUIRE(attr_base == p);
    unsigned char *b = malloc(size), *c = malloc(size);
    for (size_t i = 0; i < size; i++)
        b[i] = (unsigned char)(i * 7 + 1);
    REQ_CU(cuMemcpyHtoD(p, b, size));
    REQ_CU(cuMemcpyDtoH(c, p, size));
    REQUIRE(memcmp(b, c, size) == 0);
    free(b);
    free(c);
    REQ_CU(cuMemFree(p));
    REQUIRE(free_bytes() == before);
    REQ_CU_EQ(cuMemFree(p), CUDA_ERROR_INVALID_VALUE); /* freed once, as cuMemFree */
}

static void a_backed_allocation_looks_like_a_plain_one(void **state)
{
    (void)state;
    simtest_fresh("256M", NULL);
    simtest_in_child(backed_child, NULL);
}

static void small_child(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    simtest_init();
    size_t before = free_bytes();
    CUdeviceptr p = 0;
    REQ_CU(cuMemAlloc(&p, 4096));
    REQUIRE(free_bytes() == before - 4096); /* plain: the simulator counts 512-byte units */
    REQ_CU(cuMemFree(p));
    REQUIRE(free_bytes() == before);
}

static void small_allocations_stay_plain(void **state)
{
    (void)state;
    simtest_fresh("256M", NULL);
    simtest_in_child(small_child, NULL);
}

static void ctx_child(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    simtest_init();
    size_t before = free_bytes();
    CUdevice dev;
    CUcontext ctx, prev;
    REQ_CU(cuDeviceGet(&dev, 0));
    REQ_CU(cuCtxGetCurrent(&prev));
    REQ_CU(cuCtxCreate(&ctx, NULL, 0, dev));
    CUdeviceptr p = 0;
    REQ_CU(cuMemAlloc(&p, 8 * MIB));
    REQUIRE(free_bytes() == before - 8 * MIB);
    REQ_CU(cuCtxDestroy(ctx));
    REQ_CU(cuCtxSetCurrent(prev));
    REQUIRE(free_bytes() == before);
}

static void a_destroyed_context_takes_its_memory(void **state)
{
    (void)state;
    simtest_fresh("256M", NULL);
    simtest_in_child(ctx_child, NULL);
}

/* ---- legacy IPC of backed memory -------------------------------------------- */

static void exporter(int rd, int wr, void *arg)
{
    (void)arg;
    simtest_init();
    size_t size = 6 * MIB;
    CUdeviceptr p = 0;
    REQ_CU(cuMemAlloc(&p, size));
    hook_fixture_fill(p, size, 5);
    CUipcMemHandle h;
    REQ_CU(cuIpcGetMemHandle(&h, p + 4096)); /* any address inside names the allocation */
    CUdeviceptr self_open;
    REQ_CU_EQ(cuIpcOpenMemHandle(&self_open, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
              CUDA_ERROR_INVALID_VALUE); /* as the driver: not in the process that made it */
    simtest_send(wr, &h, sizeof h);
    (void)simtest_recv_u64(rd); /* the other process wrote into it */
    unsigned char mark = 0;
    REQ_CU(cuMemcpyDtoH(&mark, p + 1000, 1));
    REQUIRE(mark == 0xAB);
    REQ_CU(cuMemFree(p));
}

static void importer(int rd, int wr, void *arg)
{
    (void)arg;
    simtest_init();
    CUipcMemHandle h;
    simtest_recv(rd, &h, sizeof h);
    CUdeviceptr p = 0;
    REQ_CU(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    REQUIRE(hook_fixture_holds(p, 6 * MIB, 5));
    unsigned char mark = 0xAB;
    REQ_CU(cuMemcpyHtoD(p + 1000, &mark, 1)); /* the same memory, not a copy */
    REQ_CU(cuIpcCloseMemHandle(p));
    simtest_send_u64(wr, 1);
}

static void ipc_handles_of_backed_memory_work_between_processes(void **state)
{
    (void)state;
    hook_fixture_relay(exporter, importer, sizeof(CUipcMemHandle));
}

int main(void)
{
    hook_fixture_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(a_backed_allocation_looks_like_a_plain_one, simtest_teardown),
        cmocka_unit_test_teardown(small_allocations_stay_plain, simtest_teardown),
        cmocka_unit_test_teardown(a_destroyed_context_takes_its_memory, simtest_teardown),
        cmocka_unit_test_teardown(ipc_handles_of_backed_memory_work_between_processes,
                                  simtest_teardown),
    };
    return cmocka_run_group_tests_name("hook_swap", tests, NULL, NULL);
}
