/*
 * test_sim_capacity.c - the shared capacity accounting across processes:
 * out of memory exactly at capacity, allocation rounding, cuMemGetInfo
 * seeing every process, physical VMM memory counted at cuMemCreate, the
 * memory a context takes (GPUSHARE_SIM_CONTEXT_MEMORY), and the capacity
 * of dead processes (killed, even unreaped) reclaimed.
 */
#include "simtest.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#define MiB (1ULL << 20)

enum { CMD_ALLOC = 1, CMD_FREE, CMD_INFO, CMD_EXIT, CMD_CREATE };

/* A child that allocates, frees and reports on command:
 * CMD_ALLOC n -> CUresult; CMD_FREE -> frees the last allocation;
 * CMD_INFO -> free bytes; CMD_CREATE n -> cuMemCreate result;
 * CMD_EXIT -> returns. */
static void child_server(int rd, int wr, void *arg)
{
    CUdeviceptr last[16];
    int nlast = 0;
    simtest_init();
    simtest_send_u64(wr, 1); /* ready */
    for (;;) {
        uint64_t cmd = simtest_recv_u64(rd);
        if (cmd == CMD_ALLOC) {
            uint64_t n = simtest_recv_u64(rd);
            CUdeviceptr p = 0;
            CUresult r = cuMemAlloc(&p, n);
            if (r == CUDA_SUCCESS && nlast < 16)
                last[nlast++] = p;
            simtest_send_u64(wr, r);
        } else if (cmd == CMD_FREE) {
            REQUIRE(nlast > 0);
            simtest_send_u64(wr, cuMemFree(last[--nlast]));
        } else if (cmd == CMD_INFO) {
            size_t fr = 0, total = 0;
            REQ_CU(cuMemGetInfo(&fr, &total));
            simtest_send_u64(wr, fr);
        } else if (cmd == CMD_CREATE) {
            uint64_t n = simtest_recv_u64(rd);
            CUmemAllocationProp prop = {0};
            CUmemGenericAllocationHandle h;
            prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
            prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            simtest_send_u64(wr, cuMemCreate(&h, n, &prop, 0));
        } else {
            return;
        }
    }
}

static void start(struct simchild *c)
{
    simtest_spawn(c, child_server, NULL);
    assert_int_equal(simtest_recv_u64(c->rd), 1);
}

static CUresult do_alloc(struct simchild *c, uint64_t n)
{
    simtest_send_u64(c->wr, CMD_ALLOC);
    simtest_send_u64(c->wr, n);
    return (CUresult)simtest_recv_u64(c->rd);
}

static CUresult do_create(struct simchild *c, uint64_t n)
{
    simtest_send_u64(c->wr, CMD_CREATE);
    simtest_send_u64(c->wr, n);
    return (CUresult)simtest_recv_u64(c->rd);
}

static CUresult do_free(struct simchild *c)
{
    simtest_send_u64(c->wr, CMD_FREE);
    return (CUresult)simtest_recv_u64(c->rd);
}

static uint64_t do_info(struct simchild *c)
{
    simtest_send_u64(c->wr, CMD_INFO);
    return simtest_recv_u64(c->rd);
}

static void stop(struct simchild *c)
{
    simtest_send_u64(c->wr, CMD_EXIT);
    simtest_join(c);
}

/* Done-criterion 1: capacity 64M, A 40M, B 24M fits, B's next 512 bytes do
 * not; after A frees, B's allocation succeeds. */
static void test_two_processes_at_capacity(void **state)
{
    struct simchild a, b;
    simtest_fresh("64M", NULL);
    start(&a);
    start(&b);
    CK(do_alloc(&a, 40 * MiB));
    CK(do_alloc(&b, 24 * MiB));
    assert_int_equal(do_info(&a), 0);
    CK_EQ(do_alloc(&b, 512), CUDA_ERROR_OUT_OF_MEMORY);
    CK_EQ(do_alloc(&a, 1), CUDA_ERROR_OUT_OF_MEMORY);
    CK(do_free(&a));
    assert_int_equal(do_info(&b), 40 * MiB);
    CK(do_alloc(&b, 512));
    assert_int_equal(do_info(&a), 40 * MiB - 512);
    stop(&a);
    stop(&b);
}

/* Sizes are counted rounded up to 512 bytes. */
static void test_rounding(void **state)
{
    struct simchild a;
    simtest_fresh("1M", NULL);
    start(&a);
    CK(do_alloc(&a, 1));
    assert_int_equal(do_info(&a), MiB - 512);
    CK(do_alloc(&a, 513));
    assert_int_equal(do_info(&a), MiB - 1536);
    CK_EQ(do_alloc(&a, MiB - 1535), CUDA_ERROR_OUT_OF_MEMORY);
    CK(do_alloc(&a, MiB - 1536));
    assert_int_equal(do_info(&a), 0);
    CK_EQ(do_alloc(&a, 1), CUDA_ERROR_OUT_OF_MEMORY);
    stop(&a);
}

/* Physical memory of the VMM API counts at cuMemCreate, for everyone. */
static void test_vmm_counts(void **state)
{
    struct simchild a, b;
    simtest_fresh("64M", NULL);
    start(&a);
    start(&b);
    CK(do_create(&a, 32 * MiB));
    assert_int_equal(do_info(&b), 32 * MiB);
    CK_EQ(do_alloc(&b, 32 * MiB + 512), CUDA_ERROR_OUT_OF_MEMORY);
    CK_EQ(do_create(&b, 34 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    CK(do_alloc(&b, 32 * MiB));
    stop(&a);
    stop(&b);
}

/* A killed process' capacity comes back once another process needs it,
 * even before the killed one is reaped (a zombie counts as dead). */
static void test_dead_process_reclaimed(void **state)
{
    struct simchild a, b;
    simtest_fresh("64M", NULL);
    start(&a);
    start(&b);
    CK(do_alloc(&a, 48 * MiB));
    CK_EQ(do_alloc(&b, 32 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    kill(a.pid, SIGKILL);
    simtest_wait_zombie(a.pid); /* dead, not reaped */
    CK(do_alloc(&b, 32 * MiB));
    assert_int_equal(do_info(&b), 32 * MiB);
    int st;
    assert_int_equal(waitpid(a.pid, &st, 0), a.pid);
    close(a.rd);
    close(a.wr);
    stop(&b);
}

/* A process that exits normally gives its capacity back. */
static void child_exit_holding(int rd, int wr, void *arg)
{
    CUdeviceptr p;
    simtest_init();
    REQ_CU(cuMemAlloc(&p, 40 * MiB));
    exit(0); /* runs the library destructor */
}

static void test_exit_returns_capacity(void **state)
{
    struct simchild b;
    simtest_fresh("64M", NULL);
    simtest_in_child(child_exit_holding, NULL);
    start(&b);
    assert_int_equal(do_info(&b), 64 * MiB);
    CK(do_alloc(&b, 64 * MiB));
    stop(&b);
}

/* A context takes GPUSHARE_SIM_CONTEXT_MEMORY of its device while it lives
 * (a primary context: while retained), so that creating one on a full
 * device fails with out of memory, as on a real GPU. */
static void child_contexts(int rd, int wr, void *arg)
{
    (void)rd, (void)wr, (void)arg;
    size_t fr, total;
    CUcontext primary, c2;
    CUdeviceptr p;
    REQ_CU(cuInit(0));
    REQ_CU(cuDevicePrimaryCtxRetain(&primary, 0));
    REQ_CU(cuCtxSetCurrent(primary));
    REQ_CU(cuMemGetInfo(&fr, &total));
    REQUIRE(fr == 56 * MiB && total == 64 * MiB);
    REQ_CU(cuMemAlloc(&p, 52 * MiB));
    REQUIRE(cuCtxCreate(&c2, NULL, 0, 0) == CUDA_ERROR_OUT_OF_MEMORY);
    REQ_CU(cuMemFree(p));
    REQ_CU(cuCtxCreate(&c2, NULL, 0, 0));
    REQ_CU(cuMemGetInfo(&fr, &total));
    REQUIRE(fr == 48 * MiB);
    REQ_CU(cuCtxDestroy(c2));
    REQ_CU(cuCtxSetCurrent(primary));
    REQ_CU(cuMemGetInfo(&fr, &total));
    REQUIRE(fr == 56 * MiB);
    /* released to 0 and retained again: counted once, not twice */
    REQ_CU(cuDevicePrimaryCtxRelease(0));
    REQ_CU(cuDevicePrimaryCtxRetain(&primary, 0));
    REQ_CU(cuCtxSetCurrent(primary));
    REQ_CU(cuMemGetInfo(&fr, &total));
    REQUIRE(fr == 56 * MiB);
    exit(0);
}

static void test_context_memory(void **state)
{
    simtest_fresh("64M", NULL);
    setenv("GPUSHARE_SIM_CONTEXT_MEMORY", "8M", 1);
    simtest_in_child(child_contexts, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_two_processes_at_capacity, simtest_teardown),
        cmocka_unit_test_teardown(test_rounding, simtest_teardown),
        cmocka_unit_test_teardown(test_vmm_counts, simtest_teardown),
        cmocka_unit_test_teardown(test_dead_process_reclaimed, simtest_teardown),
        cmocka_unit_test_teardown(test_exit_returns_capacity, simtest_teardown),
        cmocka_unit_test_teardown(test_context_memory, simtest_teardown),
    };
    return cmocka_run_group_tests_name("simcuda capacity", tests, NULL, NULL);
}
