/*
 * test_sim_checkpoint.c - the checkpoint API acting on another process:
 * lock/checkpoint/restore/unlock keep contents and addresses, free the
 * capacity while checkpointed and block the target's CUDA calls while
 * locked; a lock waits for queued work but not for callers blocked in a
 * synchronisation, and times out; wrong states; injected failures change
 * nothing; managed memory is not checkpointable; restore without room
 * stays checkpointed; a dead target is noticed.  The test process is the
 * "broker": it never calls cuInit.
 */
#include "simtest.h"

#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define MiB  (1ULL << 20)
#define MS   1000000ULL
#define MARK 0xCA11ULL

enum {
    CMD_EXIT = 1,
    CMD_SETUP,       /* n, sizes... -> pointers */
    CMD_VERIFY,      /* -> 1 if every buffer is intact at its address */
    CMD_ALLOC,       /* n -> MARK, result, time after the call */
    CMD_LAUNCH_SYNC, /* us -> MARK after the launch, then time after the sync */
    CMD_MANAGED,     /* -> result */
    CMD_INFO,        /* -> free bytes */
    CMD_FREE_ALL,    /* -> 1 */
    CMD_HELD_WORK,   /* -> 1; queues a host function that waits for held_release() */
};

/* Work the test controls: a host function blocked on a pipe of its own
 * (created before the fork) until the parent writes to it. */
static int held_pipe[2];

static void held_fn(void *arg)
{
    (void)arg;
    simtest_recv_u64(held_pipe[0]);
}

static void held_release(void)
{
    simtest_send_u64(held_pipe[1], 1);
}

#define MAXBUF 8

struct target {
    CUdeviceptr p[MAXBUF];
    size_t n[MAXBUF];
    int count;
    CUdeviceptr vmm_va;
    size_t vmm_size;
};

static unsigned char pattern(int buf, size_t page, size_t i)
{
    return (unsigned char)(buf * 31 + page * 13 + i * 7);
}

static void fill(unsigned char *p, size_t n, int buf)
{
    unsigned char tpl[4096];
    for (size_t off = 0; off < n; off += sizeof tpl) {
        size_t len = n - off < sizeof tpl ? n - off : sizeof tpl;
        for (size_t i = 0; i < len; i++)
            tpl[i] = pattern(buf, off / sizeof tpl, i);
        memcpy(p + off, tpl, len);
    }
}

static int intact(const unsigned char *p, size_t n, int buf)
{
    for (size_t off = 0; off < n; off += 4096) {
        size_t len = n - off < 4096 ? n - off : 4096;
        for (size_t i = 0; i < len; i += 61)
            if (p[off + i] != pattern(buf, off / 4096, i))
                return 0;
        if (p[off + len - 1] != pattern(buf, off / 4096, len - 1))
            return 0;
    }
    return 1;
}

static CUfunction kernel(void)
{
    static CUfunction f;
    CUmodule m;
    if (!f) {
        REQ_CU(cuModuleLoadData(&m, "image"));
        REQ_CU(cuModuleGetFunction(&f, m, "work"));
    }
    return f;
}

static void child_target(int rd, int wr, void *arg)
{
    struct target t = {0};
    simtest_init();
    simtest_send_u64(wr, 1);
    for (;;) {
        uint64_t cmd = simtest_recv_u64(rd);
        switch (cmd) {
        case CMD_SETUP: {
            t.count = (int)simtest_recv_u64(rd);
            for (int i = 0; i < t.count; i++) {
                t.n[i] = simtest_recv_u64(rd);
                REQ_CU(cuMemAlloc(&t.p[i], t.n[i]));
                /* through the driver, as an application would */
                unsigned char *staging = malloc(t.n[i]);
                REQUIRE(staging);
                fill(staging, t.n[i], i);
                REQ_CU(cuMemcpyHtoD(t.p[i], staging, t.n[i]));
                free(staging);
            }
            /* and 2 MiB of VMM memory, PyTorch-style */
            CUmemAllocationProp prop = {0};
            CUmemGenericAllocationHandle h;
            prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
            prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            t.vmm_size = 2 * MiB;
            REQ_CU(cuMemAddressReserve(&t.vmm_va, 4 * MiB, 0, 0, 0));
            REQ_CU(cuMemCreate(&h, t.vmm_size, &prop, 0));
            REQ_CU(cuMemMap(t.vmm_va, t.vmm_size, 0, h, 0));
            CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0},
                                   CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
            REQ_CU(cuMemSetAccess(t.vmm_va, t.vmm_size, &acc, 1));
            REQ_CU(cuMemRelease(h));
            fill((unsigned char *)t.vmm_va, t.vmm_size, MAXBUF);
            for (int i = 0; i < t.count; i++)
                simtest_send_u64(wr, t.p[i]);
            simtest_send_u64(wr, t.vmm_va);
            break;
        }
        case CMD_VERIFY: {
            int ok = 1;
            for (int i = 0; i < t.count; i++) {
                unsigned char *back = malloc(t.n[i]);
                REQUIRE(back);
                REQ_CU(cuMemcpyDtoH(back, t.p[i], t.n[i]));
                ok &= intact(back, t.n[i], i);
                ok &= intact((const unsigned char *)t.p[i], t.n[i], i);
                free(back);
            }
            if (t.vmm_va)
                ok &= intact((const unsigned char *)t.vmm_va, t.vmm_size, MAXBUF);
            simtest_send_u64(wr, (uint64_t)ok);
            break;
        }
        case CMD_ALLOC: {
            uint64_t n = simtest_recv_u64(rd);
            CUdeviceptr p;
            simtest_send_u64(wr, MARK);
            CUresult r = cuMemAlloc(&p, n);
            uint64_t when = simtest_now_ns();
            simtest_send_u64(wr, r);
            simtest_send_u64(wr, when);
            break;
        }
        case CMD_LAUNCH_SYNC:
            gpusim_set_next_kernel_us(simtest_recv_u64(rd));
            REQ_CU(cuLaunchKernel(kernel(), 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
            simtest_send_u64(wr, MARK);
            REQ_CU(cuStreamSynchronize(NULL));
            simtest_send_u64(wr, simtest_now_ns());
            break;
        case CMD_MANAGED: {
            CUdeviceptr p;
            simtest_send_u64(wr, cuMemAllocManaged(&p, MiB, CU_MEM_ATTACH_GLOBAL));
            break;
        }
        case CMD_INFO: {
            size_t fr, total;
            REQ_CU(cuMemGetInfo(&fr, &total));
            simtest_send_u64(wr, fr);
            break;
        }
        case CMD_HELD_WORK:
            REQ_CU(cuLaunchHostFunc(NULL, held_fn, NULL));
            simtest_send_u64(wr, 1);
            break;
        case CMD_FREE_ALL:
            for (int i = 0; i < t.count; i++)
                REQ_CU(cuMemFree(t.p[i]));
            t.count = 0;
            simtest_send_u64(wr, 1);
            break;
        default:
            return;
        }
    }
}

static void start(struct simchild *c)
{
    simtest_spawn(c, child_target, NULL);
    assert_int_equal(simtest_recv_u64(c->rd), 1);
}

static void stop(struct simchild *c)
{
    simtest_send_u64(c->wr, CMD_EXIT);
    simtest_join(c);
}

static void setup(struct simchild *c, int n, const uint64_t *sizes, uint64_t *ptrs)
{
    simtest_send_u64(c->wr, CMD_SETUP);
    simtest_send_u64(c->wr, (uint64_t)n);
    for (int i = 0; i < n; i++)
        simtest_send_u64(c->wr, sizes[i]);
    for (int i = 0; i <= n; i++) {
        uint64_t p = simtest_recv_u64(c->rd);
        if (ptrs)
            ptrs[i] = p;
    }
}

static int verify(struct simchild *c)
{
    simtest_send_u64(c->wr, CMD_VERIFY);
    return (int)simtest_recv_u64(c->rd);
}

static uint64_t info(struct simchild *c)
{
    simtest_send_u64(c->wr, CMD_INFO);
    return simtest_recv_u64(c->rd);
}

static CUresult alloc_now(struct simchild *c, uint64_t n)
{
    simtest_send_u64(c->wr, CMD_ALLOC);
    simtest_send_u64(c->wr, n);
    assert_int_equal(simtest_recv_u64(c->rd), MARK);
    CUresult r = (CUresult)simtest_recv_u64(c->rd);
    simtest_recv_u64(c->rd);
    return r;
}

static CUprocessState state_of(pid_t pid)
{
    CUprocessState s = (CUprocessState)-1;
    CK(cuCheckpointProcessGetState(pid, &s));
    return s;
}

static const uint64_t sizes40[] = {16 * MiB, 16 * MiB, 8 * MiB - 4096, 4096};

/* Done-criterion 4. */
static void test_checkpoint_restore_cycle(void **state)
{
    struct simchild t, other;
    uint64_t ptrs[8];
    simtest_fresh("64M", NULL);
    start(&t);
    start(&other);
    setup(&t, 4, sizes40, ptrs); /* 40 MiB + 2 MiB of VMM memory */
    assert_int_equal(info(&other), 22 * MiB);
    assert_int_equal(state_of(t.pid), CU_PROCESS_STATE_RUNNING);

    CK(cuCheckpointProcessLock(t.pid, NULL));
    assert_int_equal(state_of(t.pid), CU_PROCESS_STATE_LOCKED);
    /* the target's next CUDA call blocks */
    simtest_send_u64(t.wr, CMD_ALLOC);
    simtest_send_u64(t.wr, 4096);
    assert_int_equal(simtest_recv_u64(t.rd), MARK);

    CK(cuCheckpointProcessCheckpoint(t.pid, NULL));
    assert_int_equal(state_of(t.pid), CU_PROCESS_STATE_CHECKPOINTED);
    /* its capacity is free for others meanwhile */
    assert_int_equal(info(&other), 64 * MiB);
    CK(alloc_now(&other, 60 * MiB));
    simtest_send_u64(other.wr, CMD_EXIT);
    simtest_join(&other);
    assert_false(simtest_readable(t.rd)); /* still blocked */

    CK(cuCheckpointProcessRestore(t.pid, NULL));
    assert_int_equal(state_of(t.pid), CU_PROCESS_STATE_LOCKED);
    assert_false(simtest_readable(t.rd));
    int tid = 0;
    CK(cuCheckpointProcessGetRestoreThreadId(t.pid, &tid));
    char path[64];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%d/task/%d", (int)t.pid, tid);
    assert_int_equal(stat(path, &st), 0);

    uint64_t unlocked_at = simtest_now_ns();
    CK(cuCheckpointProcessUnlock(t.pid, NULL));
    assert_int_equal(state_of(t.pid), CU_PROCESS_STATE_RUNNING);
    CK((CUresult)simtest_recv_u64(t.rd));
    assert_true(simtest_recv_u64(t.rd) >= unlocked_at); /* returned after the unlock */
    assert_int_equal(verify(&t), 1);                    /* same contents at the same addresses */
    stop(&t);
}

/* A lock waits for queued work, not for callers blocked in a sync (which
 * return only after the unlock). */
static void test_lock_waits_for_work(void **state)
{
    struct simchild t;
    simtest_fresh(NULL, NULL);
    start(&t);
    simtest_send_u64(t.wr, CMD_LAUNCH_SYNC);
    simtest_send_u64(t.wr, 300000); /* the lock must come while it runs */
    assert_int_equal(simtest_recv_u64(t.rd), MARK);
    CUcheckpointLockArgs args = {0};
    args.timeoutMs = 5000;
    CK(cuCheckpointProcessLock(t.pid, &args));
    assert_true(gpusim_busy_ns(0) >= 300 * MS); /* the kernel finished first */
    assert_false(simtest_readable(t.rd));
    uint64_t unlocked_at = simtest_now_ns();
    CK(cuCheckpointProcessUnlock(t.pid, NULL));
    assert_true(simtest_recv_u64(t.rd) >= unlocked_at);
    stop(&t);
}

static void test_lock_timeout(void **state)
{
    struct simchild t;
    simtest_fresh(NULL, NULL);
    assert_int_equal(pipe(held_pipe), 0);
    start(&t);
    simtest_send_u64(t.wr, CMD_HELD_WORK); /* queued work that cannot finish yet */
    assert_int_equal(simtest_recv_u64(t.rd), 1);
    CUcheckpointLockArgs args = {0};
    args.timeoutMs = 30;
    uint64_t t0 = simtest_now_ns();
    CK_EQ(cuCheckpointProcessLock(t.pid, &args), CUDA_ERROR_TIMEOUT);
    uint64_t waited = simtest_now_ns() - t0;
    assert_true(waited >= 30 * MS);
    assert_int_equal(state_of(t.pid), CU_PROCESS_STATE_RUNNING);
    CK(alloc_now(&t, 4096)); /* the gate is open again */
    held_release();
    args.timeoutMs = 0;
    CK(cuCheckpointProcessLock(t.pid, &args)); /* no timeout: the work finishes */
    CK(cuCheckpointProcessUnlock(t.pid, NULL));
    stop(&t);
    close(held_pipe[0]);
    close(held_pipe[1]);
}

static void test_wrong_states(void **state)
{
    struct simchild t;
    uint64_t one = MiB;
    simtest_fresh(NULL, NULL);
    start(&t);
    setup(&t, 1, &one, NULL);
    pid_t pid = t.pid;
    CK_EQ(cuCheckpointProcessCheckpoint(pid, NULL), CUDA_ERROR_ILLEGAL_STATE);
    CK_EQ(cuCheckpointProcessRestore(pid, NULL), CUDA_ERROR_ILLEGAL_STATE);
    CK_EQ(cuCheckpointProcessUnlock(pid, NULL), CUDA_ERROR_ILLEGAL_STATE);
    CUcheckpointLockArgs bad = {0};
    bad.reserved0 = 1;
    CK_EQ(cuCheckpointProcessLock(pid, &bad), CUDA_ERROR_INVALID_VALUE);
    CK(cuCheckpointProcessLock(pid, NULL));
    CK_EQ(cuCheckpointProcessLock(pid, NULL), CUDA_ERROR_ILLEGAL_STATE);
    CK_EQ(cuCheckpointProcessRestore(pid, NULL), CUDA_ERROR_ILLEGAL_STATE);
    CK(cuCheckpointProcessCheckpoint(pid, NULL));
    CK_EQ(cuCheckpointProcessCheckpoint(pid, NULL), CUDA_ERROR_ILLEGAL_STATE);
    CK_EQ(cuCheckpointProcessUnlock(pid, NULL), CUDA_ERROR_ILLEGAL_STATE);
    CK_EQ(cuCheckpointProcessLock(pid, NULL), CUDA_ERROR_ILLEGAL_STATE);
    CUcheckpointGpuPair pair;
    memset(&pair, 0, sizeof pair);
    CUcheckpointRestoreArgs rargs;
    memset(&rargs, 0, sizeof rargs);
    rargs.gpuPairs = &pair;
    rargs.gpuPairsCount = 1;
    /* GPU pairs that do not name every GPU of the machine (here: an unknown
     * UUID): refused as the driver does, and the process stays checkpointed. */
    CK_EQ(cuCheckpointProcessRestore(pid, &rargs), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(state_of(pid), CU_PROCESS_STATE_CHECKPOINTED);
    CK(cuCheckpointProcessRestore(pid, NULL));
    CK(cuCheckpointProcessUnlock(pid, NULL));
    assert_int_equal(verify(&t), 1);
    /* not simulated CUDA processes */
    CUprocessState s;
    CK_EQ(cuCheckpointProcessGetState(getpid(), &s), CUDA_ERROR_INVALID_VALUE);
    CK_EQ(cuCheckpointProcessGetState(pid, NULL), CUDA_ERROR_INVALID_VALUE);
    CK_EQ(cuCheckpointProcessLock(getpid(), NULL), CUDA_ERROR_INVALID_VALUE);
    stop(&t);
    CK_EQ(cuCheckpointProcessGetState(pid, &s), CUDA_ERROR_INVALID_VALUE);
    CK_EQ(cuCheckpointProcessLock(pid, NULL), CUDA_ERROR_INVALID_VALUE);
}

/* An injected failure changes nothing: state, capacity, contents. */
static void test_injected_failures(void **state)
{
    struct simchild t, obs;
    simtest_fresh("64M", NULL);
    start(&t);
    start(&obs);
    setup(&t, 4, sizes40, NULL);
    pid_t pid = t.pid;
    assert_int_equal(gpusim_inject_checkpoint_failure("bogus", 1), -1);

    assert_int_equal(gpusim_inject_checkpoint_failure("lock", 1), 0);
    CK_EQ(cuCheckpointProcessLock(pid, NULL), CUDA_ERROR_UNKNOWN);
    assert_int_equal(state_of(pid), CU_PROCESS_STATE_RUNNING);
    CK(alloc_now(&t, 4096)); /* not locked */
    CK(cuCheckpointProcessLock(pid, NULL));

    assert_int_equal(gpusim_inject_checkpoint_failure("checkpoint", 2), 0);
    CK_EQ(cuCheckpointProcessCheckpoint(pid, NULL), CUDA_ERROR_UNKNOWN);
    CK_EQ(cuCheckpointProcessCheckpoint(pid, NULL), CUDA_ERROR_UNKNOWN);
    assert_int_equal(state_of(pid), CU_PROCESS_STATE_LOCKED);
    assert_int_equal(info(&obs), 64 * MiB - 42 * MiB - 4096);
    CK(cuCheckpointProcessCheckpoint(pid, NULL));
    assert_int_equal(info(&obs), 64 * MiB);

    assert_int_equal(gpusim_inject_checkpoint_failure("restore", 1), 0);
    CK_EQ(cuCheckpointProcessRestore(pid, NULL), CUDA_ERROR_UNKNOWN);
    assert_int_equal(state_of(pid), CU_PROCESS_STATE_CHECKPOINTED);
    assert_int_equal(info(&obs), 64 * MiB);
    CK(cuCheckpointProcessRestore(pid, NULL));
    assert_int_equal(info(&obs), 64 * MiB - 42 * MiB - 4096);

    assert_int_equal(gpusim_inject_checkpoint_failure("unlock", 1), 0);
    CK_EQ(cuCheckpointProcessUnlock(pid, NULL), CUDA_ERROR_UNKNOWN);
    assert_int_equal(state_of(pid), CU_PROCESS_STATE_LOCKED);
    CK(cuCheckpointProcessUnlock(pid, NULL));
    assert_int_equal(verify(&t), 1);
    stop(&t);
    stop(&obs);
}

static void test_managed_not_checkpointable(void **state)
{
    struct simchild t;
    uint64_t one = MiB;
    simtest_fresh(NULL, NULL);
    start(&t);
    setup(&t, 1, &one, NULL);
    simtest_send_u64(t.wr, CMD_MANAGED);
    CK((CUresult)simtest_recv_u64(t.rd));
    CK(cuCheckpointProcessLock(t.pid, NULL));
    CK_EQ(cuCheckpointProcessCheckpoint(t.pid, NULL), CUDA_ERROR_NOT_SUPPORTED);
    assert_int_equal(state_of(t.pid), CU_PROCESS_STATE_LOCKED);
    CK(cuCheckpointProcessUnlock(t.pid, NULL));
    assert_int_equal(verify(&t), 1);
    stop(&t);
}

static void test_restore_out_of_memory(void **state)
{
    struct simchild t, other;
    simtest_fresh("64M", NULL);
    start(&t);
    start(&other);
    setup(&t, 4, sizes40, NULL);
    CK(cuCheckpointProcessLock(t.pid, NULL));
    CK(cuCheckpointProcessCheckpoint(t.pid, NULL));
    CK(alloc_now(&other, 30 * MiB));
    CK_EQ(cuCheckpointProcessRestore(t.pid, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(state_of(t.pid), CU_PROCESS_STATE_CHECKPOINTED);
    assert_int_equal(info(&other), 34 * MiB);
    stop(&other); /* its exit gives the 30 MiB back */
    /* As the H100's driver 580 does (tests/gpu/restore_oom_probe.py): after
     * a restore ran out of memory no restore works again, room or not, and
     * the process cannot be unlocked. */
    CK_EQ(cuCheckpointProcessRestore(t.pid, NULL), CUDA_ERROR_OPERATING_SYSTEM);
    assert_int_equal(state_of(t.pid), CU_PROCESS_STATE_CHECKPOINTED);
    CK_EQ(cuCheckpointProcessUnlock(t.pid, NULL), CUDA_ERROR_ILLEGAL_STATE);
    stop(&t);
}

/* A target that dies while locked: requests fail, its capacity returns. */
static void test_dead_target(void **state)
{
    struct simchild t, other;
    simtest_fresh("64M", NULL);
    start(&t);
    start(&other);
    setup(&t, 4, sizes40, NULL);
    CK(cuCheckpointProcessLock(t.pid, NULL));
    kill(t.pid, SIGKILL);
    simtest_wait_zombie(t.pid); /* dead, not reaped */
    CK_EQ(cuCheckpointProcessCheckpoint(t.pid, NULL), CUDA_ERROR_INVALID_VALUE);
    CUprocessState s;
    CK_EQ(cuCheckpointProcessGetState(t.pid, &s), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(info(&other), 64 * MiB);
    int st;
    waitpid(t.pid, &st, 0);
    close(t.rd);
    close(t.wr);
    stop(&other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_checkpoint_restore_cycle, simtest_teardown),
        cmocka_unit_test_teardown(test_lock_waits_for_work, simtest_teardown),
        cmocka_unit_test_teardown(test_lock_timeout, simtest_teardown),
        cmocka_unit_test_teardown(test_wrong_states, simtest_teardown),
        cmocka_unit_test_teardown(test_injected_failures, simtest_teardown),
        cmocka_unit_test_teardown(test_managed_not_checkpointable, simtest_teardown),
        cmocka_unit_test_teardown(test_restore_out_of_memory, simtest_teardown),
        cmocka_unit_test_teardown(test_dead_target, simtest_teardown),
    };
    return cmocka_run_group_tests_name("simcuda checkpoint", tests, NULL, NULL);
}
