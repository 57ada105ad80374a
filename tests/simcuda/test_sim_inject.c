/*
 * test_sim_inject.c - gpusim_inject_failure: the next N calls fail with
 * the chosen (or default) error and change nothing; a pid filter; the
 * argument checks; the checkpoint alias.  The parent arms failures for a
 * child that has already called cuInit (as a test would for the program
 * under test).
 */
#include "simtest.h"

#include <string.h>

/* Child: init, report ready, wait for the parent to arm, then check. */
static void wait_armed(int rd, int wr)
{
    simtest_send_u64(wr, 1);
    (void)simtest_recv_u64(rd);
}

static void child_alloc_and_copy(int rd, int wr, void *arg)
{
    (void)arg;
    simtest_init();
    CUdeviceptr d = 0, p;
    size_t fr0, fr, total;
    REQ_CU(cuMemAlloc(&d, 4096));
    REQ_CU(cuMemsetD8(d, 0x11, 4096));
    REQ_CU(cuMemGetInfo(&fr0, &total));
    wait_armed(rd, wr);
    /* two allocations fail with the default error, nothing is counted */
    REQ_CU_EQ(cuMemAlloc(&p, 4096), CUDA_ERROR_OUT_OF_MEMORY);
    REQ_CU_EQ(cuMemAllocManaged(&p, 4096, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
    REQ_CU(cuMemGetInfo(&fr, &total));
    REQUIRE(fr == fr0);
    REQ_CU(cuMemAlloc(&p, 4096)); /* the third works */
    REQ_CU(cuMemFree(p));
    /* pinned host memory is not "cuMemAlloc" */
    void *h;
    REQ_CU(cuMemAllocHost(&h, 4096));
    memset(h, 0x22, 4096);
    /* one copy fails with the error asked for and copies nothing */
    REQ_CU_EQ(cuMemcpyHtoD(d, h, 4096), CUDA_ERROR_ILLEGAL_ADDRESS);
    unsigned char back[4096];
    REQ_CU(cuMemcpyDtoH(back, d, sizeof back));
    REQUIRE(back[0] == 0x11 && back[4095] == 0x11);
    REQ_CU(cuMemcpyHtoD(d, h, 4096));
    REQ_CU(cuMemcpyDtoH(back, d, sizeof back));
    REQUIRE(back[0] == 0x22);
    REQ_CU(cuMemFreeHost(h));
    REQ_CU(cuMemFree(d));
}

static void test_alloc_and_copy(void **state)
{
    (void)state;
    simtest_fresh("64M", NULL);
    /* no segment yet: nothing to arm */
    assert_int_equal(gpusim_inject_failure("cuMemAlloc", 1, 0, 0), -1);
    struct simchild c;
    simtest_spawn(&c, child_alloc_and_copy, NULL);
    (void)simtest_recv_u64(c.rd);
    assert_int_equal(gpusim_inject_failure("cuMemAlloc", 2, 0, 0), 0);
    assert_int_equal(gpusim_inject_failure("cuMemcpy", 1, CUDA_ERROR_ILLEGAL_ADDRESS, c.pid), 0);
    simtest_send_u64(c.wr, 1);
    simtest_join(&c);
}

static void child_vmm(int rd, int wr, void *arg)
{
    (void)arg;
    simtest_init();
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    size_t gran = 2u << 20, fr0, fr, total;
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    REQ_CU(cuMemGetInfo(&fr0, &total));
    wait_armed(rd, wr);
    REQ_CU_EQ(cuMemAddressReserve(&va, gran, 0, 0, 0), CUDA_ERROR_OUT_OF_MEMORY);
    REQ_CU(cuMemAddressReserve(&va, gran, 0, 0, 0));
    REQ_CU_EQ(cuMemCreate(&h, gran, &prop, 0), CUDA_ERROR_UNKNOWN);
    REQ_CU(cuMemGetInfo(&fr, &total));
    REQUIRE(fr == fr0); /* the failed create counted nothing */
    REQ_CU(cuMemCreate(&h, gran, &prop, 0));
    REQ_CU_EQ(cuMemMap(va, gran, 0, h, 0), CUDA_ERROR_OUT_OF_MEMORY);
    REQ_CU(cuMemMap(va, gran, 0, h, 0)); /* the failed map left the range free */
    REQ_CU_EQ(cuMemSetAccess(va, gran, &acc, 1), CUDA_ERROR_UNKNOWN);
    REQ_CU(cuMemSetAccess(va, gran, &acc, 1));
    REQ_CU_EQ(cuMemUnmap(va, gran), CUDA_ERROR_UNKNOWN);
    REQ_CU(cuMemsetD8(va, 1, gran)); /* still mapped */
    REQ_CU(cuMemUnmap(va, gran));
    REQ_CU(cuMemRelease(h));
    REQ_CU(cuMemAddressFree(va, gran));
}

static void test_vmm_calls(void **state)
{
    (void)state;
    simtest_fresh("64M", NULL);
    struct simchild c;
    simtest_spawn(&c, child_vmm, NULL);
    (void)simtest_recv_u64(c.rd);
    assert_int_equal(gpusim_inject_failure("cuMemAddressReserve", 1, 0, 0), 0);
    assert_int_equal(gpusim_inject_failure("cuMemCreate", 1, CUDA_ERROR_UNKNOWN, 0), 0);
    assert_int_equal(gpusim_inject_failure("cuMemMap", 1, 0, 0), 0);
    assert_int_equal(gpusim_inject_failure("cuMemSetAccess", 1, 0, 0), 0);
    assert_int_equal(gpusim_inject_failure("cuMemUnmap", 1, 0, 0), 0);
    simtest_send_u64(c.wr, 1);
    simtest_join(&c);
}

/* A failure armed for another pid leaves this process alone; re-arming
 * replaces; count 0 disarms. */
static void child_pid_filter(int rd, int wr, void *arg)
{
    (void)arg;
    simtest_init();
    wait_armed(rd, wr);
    CUdeviceptr p;
    REQ_CU_EQ(cuMemAlloc(&p, 512), CUDA_ERROR_UNKNOWN); /* ours, as re-armed: once */
    REQ_CU(cuMemAlloc(&p, 512));     /* the one armed for another pid does not apply */
    REQ_CU(cuMemcpyHtoD(p, "x", 1)); /* disarmed */
}

static void test_pid_filter(void **state)
{
    (void)state;
    simtest_fresh(NULL, NULL);
    struct simchild c;
    simtest_spawn(&c, child_pid_filter, NULL);
    (void)simtest_recv_u64(c.rd);
    assert_int_equal(gpusim_inject_failure("cuMemAlloc", 1, 0, 1), 0); /* init's pid */
    assert_int_equal(gpusim_inject_failure("cuMemAlloc", 5, 0, c.pid), 0);
    assert_int_equal(gpusim_inject_failure("cuMemAlloc", 1, CUDA_ERROR_UNKNOWN, c.pid), 0);
    assert_int_equal(gpusim_inject_failure("cuMemcpy", 3, 0, 0), 0);
    assert_int_equal(gpusim_inject_failure("cuMemcpy", 0, 0, 0), 0);
    simtest_send_u64(c.wr, 1);
    simtest_join(&c);
}

static void child_idle(int rd, int wr, void *arg)
{
    (void)arg;
    simtest_init();
    wait_armed(rd, wr);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    simtest_fresh(NULL, NULL);
    struct simchild c;
    simtest_spawn(&c, child_idle, NULL);
    (void)simtest_recv_u64(c.rd);
    assert_int_equal(gpusim_inject_failure(NULL, 1, 0, 0), -1);
    assert_int_equal(gpusim_inject_failure("cuLaunchKernel", 1, 0, 0), -1); /* not injectable */
    assert_int_equal(gpusim_inject_failure("cuMemAlloc_v2", 1, 0, 0), -1);  /* the family name */
    assert_int_equal(gpusim_inject_failure("cuMemAlloc", -1, 0, 0), -1);
    assert_int_equal(gpusim_inject_failure("cuMemAlloc", 1, 0, -5), -1);
    assert_int_equal(gpusim_inject_checkpoint_failure("bogus", 1), -1);
    /* 16 slots: the 17th distinct (call, pid) is refused */
    for (int i = 0; i < 16; i++)
        assert_int_equal(gpusim_inject_failure("cuMemMap", 1, 0, 1000 + i), 0);
    assert_int_equal(gpusim_inject_failure("cuMemMap", 1, 0, 2000), -1);
    assert_int_equal(gpusim_inject_failure("cuMemMap", 0, 0, 1000), 0);
    assert_int_equal(gpusim_inject_failure("cuMemMap", 1, 0, 2000), 0);
    simtest_send_u64(c.wr, 1);
    simtest_join(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_alloc_and_copy, simtest_teardown),
        cmocka_unit_test_teardown(test_vmm_calls, simtest_teardown),
        cmocka_unit_test_teardown(test_pid_filter, simtest_teardown),
        cmocka_unit_test_teardown(test_bad_arguments, simtest_teardown),
    };
    return cmocka_run_group_tests_name("simcuda failure injection", tests, NULL, NULL);
}
