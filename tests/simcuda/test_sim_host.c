/*
 * test_sim_host.c - the simulated host's memory (GPUSHARE_SIM_HOST_MEMORY):
 * pinned memory (a host cuMemCreate, as the broker's pool pins its chunks,
 * and cuMemAllocHost) is refused beyond it with out of memory; a
 * checkpoint image beyond it gets its process killed by the simulated OOM
 * killer (stderr line, log line, counters); restore and free give the
 * charge back; a dead process' charges are dropped; unset means no limit.
 * The test process is the "broker" for the checkpoint calls: it never
 * calls cuInit, and reads the counters with gpusim_host_stats.
 */
#include "simtest.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define MiB (1ULL << 20)

enum {
    CMD_EXIT = 1,
    CMD_PIN,       /* n -> cuMemCreate result (host NUMA node 0, POSIX fd handles) */
    CMD_HOSTALLOC, /* n -> cuMemAllocHost result */
    CMD_RELEASE,   /* -> result of releasing the last pinned chunk */
    CMD_FREEHOST,  /* -> result of freeing the last cuMemAllocHost memory */
    CMD_DEVICE,    /* n -> cuMemAlloc result (device memory, to be checkpointed) */
    CMD_FREEDEV,   /* -> result of freeing the last device allocation */
};

/* A process that pins, allocates and frees on command. */
static void child_server(int rd, int wr, void *arg)
{
    const char *err_path = arg;
    if (err_path) { /* its stderr, where the OOM killer's line goes */
        int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        REQUIRE(fd >= 0 && dup2(fd, STDERR_FILENO) == STDERR_FILENO);
        close(fd);
    }
    CUmemGenericAllocationHandle chunks[8];
    void *host[8];
    CUdeviceptr dev[8];
    int nchunks = 0, nhost = 0, ndev = 0;
    simtest_init();
    simtest_send_u64(wr, 1);
    for (;;) {
        uint64_t cmd = simtest_recv_u64(rd), n = 0;
        CUresult r = CUDA_SUCCESS;
        switch (cmd) {
        case CMD_PIN: {
            CUmemAllocationProp prop = {0};
            prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
            prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
            prop.location.id = 0;
            prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
            n = simtest_recv_u64(rd);
            r = cuMemCreate(&chunks[nchunks], n, &prop, 0);
            nchunks += r == CUDA_SUCCESS;
            break;
        }
        case CMD_HOSTALLOC:
            n = simtest_recv_u64(rd);
            r = cuMemAllocHost(&host[nhost], n);
            nhost += r == CUDA_SUCCESS;
            break;
        case CMD_RELEASE:
            REQUIRE(nchunks > 0);
            r = cuMemRelease(chunks[--nchunks]);
            break;
        case CMD_FREEHOST:
            REQUIRE(nhost > 0);
            r = cuMemFreeHost(host[--nhost]);
            break;
        case CMD_DEVICE:
            n = simtest_recv_u64(rd);
            r = cuMemAlloc(&dev[ndev], n);
            if (r == CUDA_SUCCESS)
                memset((void *)dev[ndev++], 0x5a, n);
            break;
        case CMD_FREEDEV:
            REQUIRE(ndev > 0);
            r = cuMemFree(dev[--ndev]);
            break;
        default:
            return;
        }
        REQUIRE(nchunks < 8 && nhost < 8 && ndev < 8);
        simtest_send_u64(wr, r);
    }
}

static void start(struct simchild *c, const char *err_path)
{
    simtest_spawn(c, child_server, (void *)err_path);
    assert_int_equal(simtest_recv_u64(c->rd), 1);
}

static CUresult ask(struct simchild *c, uint64_t cmd, uint64_t n)
{
    simtest_send_u64(c->wr, cmd);
    if (cmd == CMD_PIN || cmd == CMD_HOSTALLOC || cmd == CMD_DEVICE)
        simtest_send_u64(c->wr, n);
    return (CUresult)simtest_recv_u64(c->rd);
}

static void stop(struct simchild *c)
{
    simtest_send_u64(c->wr, CMD_EXIT);
    simtest_join(c);
}

static struct gpusim_host_stats stats(void)
{
    struct gpusim_host_stats s;
    assert_int_equal(gpusim_host_stats(&s), 0);
    return s;
}

static void park(pid_t pid)
{
    CK(cuCheckpointProcessLock(pid, NULL));
    CK(cuCheckpointProcessCheckpoint(pid, NULL));
}

static void unpark(pid_t pid)
{
    CK(cuCheckpointProcessRestore(pid, NULL));
    CK(cuCheckpointProcessUnlock(pid, NULL));
}

/* The limit refuses a pinned chunk (the broker's pool) and cuMemAllocHost
 * memory alike, across processes, and freeing gives the room back. */
static void test_pinned_refused_beyond_limit(void **state)
{
    struct simchild a, b;
    simtest_fresh("256M", NULL);
    setenv("GPUSHARE_SIM_HOST_MEMORY", "64M", 1);
    start(&a, NULL);
    start(&b, NULL);
    CK(ask(&a, CMD_PIN, 48 * MiB));
    CK_EQ(ask(&b, CMD_PIN, 32 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    CK(ask(&b, CMD_HOSTALLOC, 16 * MiB));
    CK_EQ(ask(&b, CMD_HOSTALLOC, 4096), CUDA_ERROR_OUT_OF_MEMORY);
    struct gpusim_host_stats s = stats();
    assert_int_equal(s.limit, 64 * MiB);
    assert_int_equal(s.used, 64 * MiB);
    assert_int_equal(s.pinned, 64 * MiB);
    assert_int_equal(s.images, 0);
    CK(ask(&a, CMD_RELEASE, 0));
    CK(ask(&b, CMD_PIN, 32 * MiB));
    CK(ask(&b, CMD_FREEHOST, 0));
    s = stats();
    assert_int_equal(s.used, 32 * MiB);
    assert_int_equal(s.peak, 64 * MiB);
    assert_int_equal(s.kills, 0);
    stop(&a);
    stop(&b);
    assert_int_equal(stats().used, 0); /* exiting processes give theirs back */
}

/* A checkpoint whose image fits is charged until the restore. */
static void test_image_charged_until_restore(void **state)
{
    struct simchild pool, t;
    simtest_fresh("256M", NULL);
    setenv("GPUSHARE_SIM_HOST_MEMORY", "64M", 1);
    start(&pool, NULL);
    start(&t, NULL);
    CK(ask(&pool, CMD_PIN, 16 * MiB));
    CK(ask(&t, CMD_DEVICE, 40 * MiB));
    park(t.pid);
    struct gpusim_host_stats s = stats();
    assert_int_equal(s.images, 40 * MiB);
    assert_int_equal(s.used, 56 * MiB);
    /* the image's room is taken: pinning more than the rest fails */
    CK_EQ(ask(&pool, CMD_PIN, 10 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    unpark(t.pid);
    s = stats();
    assert_int_equal(s.images, 0);
    assert_int_equal(s.used, 16 * MiB);
    assert_int_equal(s.peak, 56 * MiB);
    CK(ask(&pool, CMD_PIN, 48 * MiB));
    CK(ask(&pool, CMD_RELEASE, 0));
    CK(ask(&t, CMD_FREEDEV, 0));
    stop(&pool);
    stop(&t);
}

/* A checkpoint beyond the host's memory: the OOM killer takes the target
 * (SIGKILL), says so on its stderr and in the log, and the checkpoint call
 * sees its target gone; its capacity and charges are given back. */
static void test_image_beyond_limit_kills_target(void **state)
{
    struct simchild pool, t;
    char err_path[256], line[512], want[256];
    simtest_fresh("256M", NULL);
    const char *log = simtest_fresh_log();
    setenv("GPUSHARE_SIM_HOST_MEMORY", "64M", 1);
    snprintf(err_path, sizeof err_path, "%s.stderr", log);
    start(&pool, NULL);
    start(&t, err_path);
    CK(ask(&pool, CMD_PIN, 32 * MiB));
    CK(ask(&t, CMD_DEVICE, 48 * MiB));
    CK(cuCheckpointProcessLock(t.pid, NULL));
    CK_EQ(cuCheckpointProcessCheckpoint(t.pid, NULL), CUDA_ERROR_INVALID_VALUE);
    int st = 0;
    assert_int_equal(waitpid(t.pid, &st, 0), t.pid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    close(t.rd);
    close(t.wr);

    FILE *f = fopen(err_path, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    snprintf(want, sizeof want,
             "gpusim: out of host memory: killed process %d (checkpoint of %llu bytes, %llu of "
             "%llu in use)\n",
             (int)t.pid, 48 * MiB, 32 * MiB, 64 * MiB);
    assert_string_equal(line, want);
    struct simlog recs[64];
    int n = simtest_read_log(log, recs, 64), seen = 0;
    for (int i = 0; i < n; i++)
        seen += strcmp(recs[i].op, "oom_kill") == 0 && recs[i].pid == t.pid &&
                recs[i].bytes == (long long)(48 * MiB);
    assert_int_equal(seen, 1);

    struct gpusim_host_stats s = stats();
    assert_int_equal(s.kills, 1);
    assert_int_equal(s.last_killed_pid, t.pid);
    assert_int_equal(s.used, 32 * MiB);
    assert_int_equal(s.peak, 32 * MiB);    /* the image was never charged */
    CK(ask(&pool, CMD_DEVICE, 256 * MiB)); /* the dead one's device memory is back */
    stop(&pool);
    unlink(err_path);
}

/* A process killed while it holds pinned memory or a checkpoint image
 * (even unreaped) holds nothing any more. */
static void test_dead_process_charges_dropped(void **state)
{
    struct simchild pool, t;
    simtest_fresh("256M", NULL);
    setenv("GPUSHARE_SIM_HOST_MEMORY", "64M", 1);
    start(&pool, NULL);
    start(&t, NULL);
    CK(ask(&pool, CMD_PIN, 32 * MiB));
    CK(ask(&pool, CMD_HOSTALLOC, 8 * MiB));
    CK(ask(&t, CMD_DEVICE, 16 * MiB));
    park(t.pid);
    assert_int_equal(stats().used, 56 * MiB);
    kill(pool.pid, SIGKILL);
    simtest_wait_zombie(pool.pid);
    struct gpusim_host_stats s = stats();
    assert_int_equal(s.used, 16 * MiB);
    assert_int_equal(s.pinned, 0);
    kill(t.pid, SIGKILL);
    simtest_wait_zombie(t.pid);
    s = stats();
    assert_int_equal(s.used, 0);
    assert_int_equal(s.images, 0);
    assert_int_equal(s.kills, 0); /* killed by us, not by the simulated OOM killer */
    struct simchild *both[] = {&pool, &t};
    for (int i = 0; i < 2; i++) {
        int st;
        assert_int_equal(waitpid(both[i]->pid, &st, 0), both[i]->pid);
        close(both[i]->rd);
        close(both[i]->wr);
    }
}

/* Unset: no limit, as before; the use is still counted. */
static void test_unset_is_unlimited(void **state)
{
    struct simchild a;
    simtest_fresh("64M", NULL);
    unsetenv("GPUSHARE_SIM_HOST_MEMORY");
    start(&a, NULL);
    CK(ask(&a, CMD_PIN, 1024 * MiB)); /* memfds are sparse until written */
    CK(ask(&a, CMD_HOSTALLOC, 1024 * MiB));
    struct gpusim_host_stats s = stats();
    assert_int_equal(s.limit, 0);
    assert_int_equal(s.used, 2048 * MiB);
    stop(&a);
}

/* A malformed value fails cuInit, naming the variable. */
static void child_malformed(int rd, int wr, void *arg)
{
    setenv("GPUSHARE_SIM_HOST_MEMORY", "lots", 1);
    REQ_CU_EQ(cuInit(0), CUDA_ERROR_INVALID_VALUE);
    setenv("GPUSHARE_SIM_HOST_MEMORY", "0", 1);
    REQ_CU_EQ(cuInit(0), CUDA_ERROR_INVALID_VALUE);
    setenv("GPUSHARE_SIM_HOST_MEMORY", "2G", 1);
    REQ_CU(cuInit(0));
}

static void test_malformed(void **state)
{
    simtest_fresh(NULL, NULL);
    simtest_in_child(child_malformed, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_pinned_refused_beyond_limit, simtest_teardown),
        cmocka_unit_test_teardown(test_image_charged_until_restore, simtest_teardown),
        cmocka_unit_test_teardown(test_image_beyond_limit_kills_target, simtest_teardown),
        cmocka_unit_test_teardown(test_dead_process_charges_dropped, simtest_teardown),
        cmocka_unit_test_teardown(test_unset_is_unlimited, simtest_teardown),
        cmocka_unit_test_teardown(test_malformed, simtest_teardown),
    };
    return cmocka_run_group_tests_name("simcuda host memory", tests, NULL, NULL);
}
