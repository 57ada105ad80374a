/*
 * test_sim_engine.c - the execution engine: kernel durations in the log and
 * in the busy counters, engine slots shared by processes (no overlap with
 * concurrency 1, overlap with 2), stream order, events and their timing,
 * cross-stream waits, legacy default-stream ordering, host functions and
 * callbacks, stream queries, stream-ordered allocation.
 */
#include "simtest.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#define MS 1000000ULL

static CUfunction get_kernel(const char *name)
{
    static CUmodule m;
    CUfunction f;
    if (!m)
        REQ_CU(cuModuleLoadData(&m, "image"));
    REQ_CU(cuModuleGetFunction(&f, m, name));
    return f;
}

static void launch(const char *name, unsigned long long us, CUstream s)
{
    gpusim_set_next_kernel_us(us);
    REQ_CU(cuLaunchKernel(get_kernel(name), 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
}

static const struct simlog *find(const struct simlog *r, int n, const char *op, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(r[i].op, op) == 0 && (!name || strcmp(r[i].name, name) == 0))
            return &r[i];
    fail_msg("no %s %s in the log", op, name ? name : "");
    return NULL;
}

/* ---- done-criterion 2: a 100 ms kernel is 100 ms of busy time ---------- */

static void child_100ms(int rd, int wr, void *arg)
{
    simtest_init();
    launch("hundred", 100000, NULL);
    REQ_CU(cuCtxSynchronize());
    simtest_send_u64(wr, gpusim_process_busy_ns(0));
    simtest_send_u64(wr, gpusim_busy_ns(0));
}

static void test_kernel_100ms(void **state)
{
    struct simchild c;
    simtest_fresh(NULL, NULL);
    const char *log = simtest_fresh_log();
    simtest_spawn(&c, child_100ms, NULL);
    uint64_t proc_busy = simtest_recv_u64(c.rd);
    uint64_t dev_busy = simtest_recv_u64(c.rd);
    simtest_join(&c);
    struct simlog r[4];
    assert_int_equal(simtest_read_log(log, r, 4), 1);
    uint64_t dur = r[0].end - r[0].start;
    assert_int_equal(dur, 100 * MS); /* the simulated duration, exactly */
    assert_true(proc_busy == dur);
    assert_true(dev_busy == dur);
    /* the device-wide counter is in the segment: readable by anyone */
    assert_int_equal(gpusim_busy_ns(0), dur);
    assert_int_equal(gpusim_busy_ns(5), 0);
}

/* ---- done-criterion 3: engine slots across processes ------------------- */

struct burst {
    int kernels;
    unsigned long long us;
};

static void child_burst(int rd, int wr, void *arg)
{
    const struct burst *b = arg;
    CUstream s[2];
    simtest_init();
    REQ_CU(cuStreamCreate(&s[0], CU_STREAM_NON_BLOCKING));
    REQ_CU(cuStreamCreate(&s[1], CU_STREAM_NON_BLOCKING));
    get_kernel("burst");
    simtest_send_u64(wr, 1);
    simtest_recv_u64(rd); /* go */
    for (int i = 0; i < b->kernels; i++)
        launch("burst", b->us, s[i % 2]);
    REQ_CU(cuCtxSynchronize());
    simtest_send_u64(wr, gpusim_process_busy_ns(0));
}

static int overlaps(const struct simlog *a, const struct simlog *b)
{
    return a->start < b->end && b->start < a->end;
}

static void run_bursts(const char *concurrency, const struct burst *b, struct simlog *r, int *n,
                       uint64_t *busy)
{
    struct simchild c[2];
    simtest_fresh(NULL, concurrency);
    const char *log = simtest_fresh_log();
    for (int i = 0; i < 2; i++) {
        simtest_spawn(&c[i], child_burst, (void *)b);
        simtest_recv_u64(c[i].rd);
    }
    for (int i = 0; i < 2; i++)
        simtest_send_u64(c[i].wr, 1);
    *busy = 0;
    for (int i = 0; i < 2; i++) {
        *busy += simtest_recv_u64(c[i].rd);
        simtest_join(&c[i]);
    }
    *n = simtest_read_log(log, r, 64);
}

static void test_no_overlap_concurrency_1(void **state)
{
    struct burst b = {4, 15000};
    struct simlog r[64];
    int n;
    uint64_t busy;
    run_bursts(NULL, &b, r, &n, &busy);
    assert_int_equal(n, 8);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (overlaps(&r[i], &r[j]))
                fail_msg("kernels %d (pid %d) and %d (pid %d) overlap", i, r[i].pid, j, r[j].pid);
    int first = 0;
    for (int i = 0; i < n; i++)
        first += r[i].pid == r[0].pid;
    assert_int_equal(first, 4); /* four from each process */
    assert_true(busy >= 8 * 15 * MS);
    assert_int_equal(gpusim_busy_ns(0), busy);
}

/* A process killed while its kernel holds the only engine slot: another
 * process' kernel gets the slot once its wait notices (every 10 ms), not
 * when the dead one's kernel would have ended (the slot stays held for a
 * kernel's whole duration otherwise). */
#define HOG_US 30000000 /* 30 s */
static void signal_fn(void *arg)
{
    simtest_send_u64(*(int *)arg, 1);
}

static void child_hog(int rd, int wr, void *arg)
{
    static int fd;
    fd = wr;
    simtest_init();
    REQ_CU(cuLaunchHostFunc(NULL, signal_fn, &fd));
    launch("hog", HOG_US, NULL);
    REQ_CU(cuCtxSynchronize());
}

static void child_short(int rd, int wr, void *arg)
{
    simtest_init();
    get_kernel("short");
    simtest_send_u64(wr, 1);
    simtest_recv_u64(rd); /* go */
    uint64_t t0 = simtest_now_ns();
    launch("short", 1000, NULL);
    REQ_CU(cuCtxSynchronize());
    simtest_send_u64(wr, simtest_now_ns() - t0);
}

/* Wait until n kernels hold slots of dev.  The slot is taken in another
 * process: there is no event to wait on, so this looks every millisecond. */
static void wait_kernels_running(int dev, int n)
{
    uint64_t deadline = simtest_now_ns() + 60000 * MS;
    while (gpusim_kernels_running(dev) != n) {
        if (simtest_now_ns() > deadline)
            fail_msg("%d kernels running on device %d after 60 s, not %d",
                     gpusim_kernels_running(dev), dev, n);
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

/* Concurrency 2: another process' kernel runs while the hog's 30 s kernel
 * holds a slot.  It is launched only once the hog's kernel runs (holds its
 * slot, not merely queued), so it ends long before the hog's would, where
 * with concurrency 1 it would wait the 30 s; then the hog is killed.  Order,
 * not speed: a loaded machine may run the two processes as slowly as it
 * likes (CI once saw two 100 ms kernels launched together not overlap). */
static void test_overlap_concurrency_2(void **state)
{
    struct simchild hog, other;
    simtest_fresh(NULL, "2");
    const char *log = simtest_fresh_log();
    simtest_spawn(&other, child_short, NULL);
    assert_int_equal(simtest_recv_u64(other.rd), 1);
    simtest_spawn(&hog, child_hog, NULL);
    assert_int_equal(simtest_recv_u64(hog.rd), 1);
    wait_kernels_running(0, 1); /* the hog's kernel holds a slot */
    simtest_send_u64(other.wr, 1);
    uint64_t took = simtest_recv_u64(other.rd);
    simtest_join(&other);
    assert_true(took < (uint64_t)HOG_US * 1000 / 2);
    assert_int_equal(gpusim_kernels_running(0), 1); /* the hog's kernel still runs */
    kill(hog.pid, SIGKILL);
    int st;
    waitpid(hog.pid, &st, 0);
    close(hog.rd);
    close(hog.wr);
    struct simlog r[8];
    int n = simtest_read_log(log, r, 8);
    find(r, n, "kernel", "short");
    for (int i = 0; i < n; i++) /* the hog's kernel never ended */
        assert_false(strcmp(r[i].op, "kernel") == 0 && strcmp(r[i].name, "hog") == 0);
}

/* One round; returns how long the other process' 1 ms kernel took. */
static uint64_t dead_slot_round(void)
{
    struct simchild hog, other;
    simtest_fresh(NULL, NULL);
    simtest_spawn(&other, child_short, NULL); /* registered before the hog dies */
    assert_int_equal(simtest_recv_u64(other.rd), 1);
    simtest_spawn(&hog, child_hog, NULL);
    assert_int_equal(simtest_recv_u64(hog.rd), 1); /* its next op is the 30 s kernel */
    kill(hog.pid, SIGKILL);
    simtest_wait_zombie(hog.pid);
    simtest_send_u64(other.wr, 1);
    uint64_t took = simtest_recv_u64(other.rd);
    simtest_join(&other);
    int st;
    waitpid(hog.pid, &st, 0);
    close(hog.rd);
    close(hog.wr);
    simtest_teardown(NULL);
    return took;
}

static void test_dead_slot_holder(void **state)
{
    /* The hog may die just before its worker takes the slot; then the
     * other kernel runs at once.  A few rounds make it likely that one
     * round has the slot held by the dead hog (reclaimed after 10 ms).
     * What is asserted is the order, not a speed: the other kernel ends
     * before the dead hog's kernel would have (however loaded the machine,
     * 10 ms polls take far less than that). */
    for (int round = 0; round < 4; round++) {
        uint64_t took = dead_slot_round();
        assert_true(took < (uint64_t)HOG_US * 1000);
        if (took >= 10 * MS)
            break;
    }
}

/* ---- streams ----------------------------------------------------------- */

static unsigned char seen[64];
static uint64_t host_fn_time;

static void host_fn(void *arg)
{
    memcpy(seen, arg, sizeof seen);
    host_fn_time = simtest_now_ns();
}

static void child_stream_order(int rd, int wr, void *arg)
{
    CUstream s;
    CUdeviceptr d;
    static unsigned char hostbuf[64];
    simtest_init();
    REQ_CU(cuStreamCreate(&s, 0));
    REQ_CU(cuMemAlloc(&d, 64));
    launch("first", 30000, s);
    REQ_CU(cuMemsetD8Async(d, 0x42, 64, s));
    REQ_CU(cuMemcpyDtoHAsync(hostbuf, d, 64, s));
    REQ_CU(cuLaunchHostFunc(s, host_fn, hostbuf));
    launch("second", 5000, s);
    REQ_CU_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    REQ_CU(cuStreamSynchronize(s));
    REQ_CU(cuStreamQuery(s));
    REQUIRE(seen[0] == 0x42 && seen[63] == 0x42); /* copied before the host function */
    REQ_CU(cuStreamDestroy(s));
    REQ_CU_EQ(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
}

static void test_stream_order(void **state)
{
    simtest_fresh(NULL, NULL);
    const char *log = simtest_fresh_log();
    simtest_in_child(child_stream_order, NULL);
    struct simlog r[8];
    int n = simtest_read_log(log, r, 8);
    assert_int_equal(n, 5);
    const char *order[] = {"kernel", "memset", "memcpy", "host_func", "kernel"};
    for (int i = 0; i < n; i++) {
        assert_string_equal(r[i].op, order[i]);
        if (i)
            assert_true(r[i].start >= r[i - 1].end);
    }
    assert_string_equal(r[0].name, "first");
    assert_string_equal(r[4].name, "second");
    assert_true(r[0].end - r[0].start >= 30 * MS);
}

static void child_events(int rd, int wr, void *arg)
{
    CUevent e0, e1, never, notime;
    float ms = -1;
    simtest_init();
    REQ_CU(cuEventCreate(&e0, 0));
    REQ_CU(cuEventCreate(&e1, CU_EVENT_BLOCKING_SYNC));
    REQ_CU(cuEventCreate(&never, 0));
    REQ_CU(cuEventCreate(&notime, CU_EVENT_DISABLE_TIMING));
    REQ_CU_EQ(cuEventCreate(&never, 0x100), CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuEventQuery(never)); /* never recorded: complete */
    uint64_t before = simtest_now_ns();
    REQ_CU(cuEventRecord(e0, NULL));
    launch("timed", 50000, NULL);
    REQ_CU(cuEventRecord(e1, NULL));
    REQ_CU(cuEventRecord(notime, NULL));
    REQ_CU_EQ(cuEventQuery(e1), CUDA_ERROR_NOT_READY);
    REQ_CU_EQ(cuEventElapsedTime(&ms, e0, e1), CUDA_ERROR_NOT_READY);
    REQ_CU(cuEventSynchronize(e1));
    uint64_t after = simtest_now_ns();
    REQ_CU(cuEventQuery(e1));
    REQ_CU(cuEventElapsedTime(&ms, e0, e1)); /* cuEventElapsedTime_v2 */
    /* The kernel's 50 ms at least, and no more than this process saw pass
     * from before e0's record to after e1's synchronize (an order, not a
     * speed: a loaded machine makes both sides longer alike). */
    REQUIRE(ms >= 50.0f && ms <= (after - before) / 1e6f);
    float ms1 = -1;
    CUresult (*legacy)(float *, CUevent, CUevent);
    CUdriverProcAddressQueryResult st;
    REQ_CU(cuGetProcAddress("cuEventElapsedTime", (void **)&legacy, 12000, 0, &st));
    REQ_CU(legacy(&ms1, e0, e1));
    REQUIRE(ms1 == ms);
    REQ_CU(cuEventElapsedTime(&ms, e1, e0));
    REQUIRE(ms <= -50.0f);
    REQ_CU_EQ(cuEventElapsedTime(&ms, e0, never), CUDA_ERROR_INVALID_HANDLE);
    REQ_CU_EQ(cuEventElapsedTime(&ms, e0, notime), CUDA_ERROR_INVALID_HANDLE);
    REQ_CU_EQ(cuEventElapsedTime(NULL, e0, e1), CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuEventDestroy(e0));
    REQ_CU_EQ(cuEventQuery(e0), CUDA_ERROR_INVALID_HANDLE);
    REQ_CU(cuEventDestroy(e1));
}

static void test_events(void **state)
{
    simtest_fresh(NULL, NULL);
    simtest_in_child(child_events, NULL);
}

/* cuStreamWaitEvent orders a stream after another stream's work. */
static void child_wait_event(int rd, int wr, void *arg)
{
    CUstream s1, s2;
    CUevent e;
    simtest_init();
    REQ_CU(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    REQ_CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    REQ_CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    launch("producer", 40000, s1);
    REQ_CU(cuEventRecord(e, s1));
    REQ_CU(cuEventDestroy(e)); /* its queued record keeps it alive inside */
    REQ_CU_EQ(cuStreamWaitEvent(s2, e, 0), CUDA_ERROR_INVALID_HANDLE);
    REQ_CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    REQ_CU(cuEventRecord(e, s1));
    REQ_CU(cuStreamWaitEvent(s2, e, 0));
    REQ_CU(cuEventDestroy(e));
    static unsigned char dummy[64];
    REQ_CU(cuLaunchHostFunc(s2, host_fn, dummy));
    REQ_CU(cuStreamSynchronize(s2));
    simtest_send_u64(wr, host_fn_time);
}

static void test_wait_event_across_streams(void **state)
{
    struct simchild c;
    simtest_fresh(NULL, NULL);
    const char *log = simtest_fresh_log();
    simtest_spawn(&c, child_wait_event, NULL);
    uint64_t t = simtest_recv_u64(c.rd);
    simtest_join(&c);
    struct simlog r[8];
    int n = simtest_read_log(log, r, 8);
    const struct simlog *k = find(r, n, "kernel", "producer");
    const struct simlog *h = find(r, n, "host_func", NULL);
    assert_true(h->start >= k->end);
    assert_true(t >= k->end);
}

/* Legacy default stream: it waits for blocking streams' queued work and
 * they wait for it; non-blocking streams do neither. */
static void child_legacy(int rd, int wr, void *arg)
{
    CUstream blocking, nonblocking;
    CUdeviceptr d;
    static unsigned char dummy[64];
    simtest_init();
    REQ_CU(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
    REQ_CU(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING));
    REQ_CU(cuMemAlloc(&d, 64));
    launch("on_blocking", 40000, blocking);
    REQ_CU(cuLaunchHostFunc(nonblocking, host_fn, dummy));
    REQ_CU(cuMemsetD8Async(d, 1, 64, CU_STREAM_LEGACY));
    launch("after_default", 1000, blocking);
    REQ_CU(cuCtxSynchronize());
}

static void test_legacy_default_stream(void **state)
{
    simtest_fresh(NULL, NULL);
    const char *log = simtest_fresh_log();
    simtest_in_child(child_legacy, NULL);
    struct simlog r[8];
    int n = simtest_read_log(log, r, 8);
    assert_int_equal(n, 4);
    const struct simlog *k = find(r, n, "kernel", "on_blocking");
    const struct simlog *h = find(r, n, "host_func", NULL);
    const struct simlog *m = find(r, n, "memset", NULL);
    const struct simlog *k2 = find(r, n, "kernel", "after_default");
    assert_true(h->start < k->end);   /* non-blocking: not held back */
    assert_true(m->start >= k->end);  /* default waits for the blocking stream */
    assert_true(k2->start >= m->end); /* and the blocking stream for it */
}

static CUstream cb_stream;
static CUresult cb_status = CUDA_ERROR_UNKNOWN;
static void callback(CUstream s, CUresult status, void *arg)
{
    cb_stream = s;
    cb_status = status;
    *(int *)arg = 1;
}

static void child_callbacks(int rd, int wr, void *arg)
{
    CUstream s;
    int called = 0;
    simtest_init();
    REQ_CU(cuStreamCreateWithPriority(&s, 0, -1));
    int prio = 0;
    REQ_CU(cuStreamGetPriority(s, &prio));
    REQUIRE(prio == -1);
    launch("before_cb", 5000, s);
    REQ_CU(cuStreamAddCallback(s, callback, &called, 0));
    REQ_CU_EQ(cuStreamAddCallback(s, callback, &called, 1), CUDA_ERROR_INVALID_VALUE);
    REQ_CU_EQ(cuLaunchHostFunc(s, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuStreamSynchronize(s));
    REQUIRE(called == 1 && cb_stream == s && cb_status == CUDA_SUCCESS);
}

static void test_callbacks(void **state)
{
    simtest_fresh(NULL, NULL);
    simtest_in_child(child_callbacks, NULL);
}

/* gpusim_set_next_kernel_us applies to one launch only. */
static void child_next_us(int rd, int wr, void *arg)
{
    simtest_init();
    launch("long", 20000, NULL);
    REQ_CU(cuLaunchKernel(get_kernel("default"), 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    REQ_CU(cuCtxSynchronize());
}

static void test_next_kernel_us_once(void **state)
{
    simtest_fresh(NULL, NULL);
    setenv("GPUSHARE_SIM_KERNEL_US", "3000", 1);
    const char *log = simtest_fresh_log();
    simtest_in_child(child_next_us, NULL);
    struct simlog r[4];
    assert_int_equal(simtest_read_log(log, r, 4), 2);
    assert_int_equal(r[0].end - r[0].start, 20 * MS);
    assert_int_equal(r[1].end - r[1].start, 3 * MS);
}

/* Stream-ordered allocation: freed (capacity back) in stream order. */
static void child_alloc_async(int rd, int wr, void *arg)
{
    CUstream s;
    CUdeviceptr p;
    size_t fr, total;
    simtest_init();
    REQ_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    REQ_CU(cuMemAllocAsync(&p, 1 << 20, s));
    REQ_CU(cuMemsetD8Async(p, 9, 1 << 20, s));
    launch("uses_it", 20000, s);
    REQ_CU(cuMemFreeAsync(p, s));
    REQ_CU_EQ(cuMemFreeAsync(p, s), CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuMemGetInfo(&fr, &total));
    REQUIRE(fr == total - (1 << 20)); /* the kernel is still running */
    REQ_CU(cuStreamSynchronize(s));
    REQ_CU(cuMemGetInfo(&fr, &total));
    REQUIRE(fr == total);
}

static void test_alloc_async(void **state)
{
    simtest_fresh(NULL, NULL);
    simtest_in_child(child_alloc_async, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_kernel_100ms, simtest_teardown),
        cmocka_unit_test_teardown(test_no_overlap_concurrency_1, simtest_teardown),
        cmocka_unit_test_teardown(test_overlap_concurrency_2, simtest_teardown),
        cmocka_unit_test_teardown(test_dead_slot_holder, simtest_teardown),
        cmocka_unit_test_teardown(test_stream_order, simtest_teardown),
        cmocka_unit_test_teardown(test_events, simtest_teardown),
        cmocka_unit_test_teardown(test_wait_event_across_streams, simtest_teardown),
        cmocka_unit_test_teardown(test_legacy_default_stream, simtest_teardown),
        cmocka_unit_test_teardown(test_callbacks, simtest_teardown),
        cmocka_unit_test_teardown(test_next_kernel_us_once, simtest_teardown),
        cmocka_unit_test_teardown(test_alloc_async, simtest_teardown),
    };
    return cmocka_run_group_tests_name("simcuda engine", tests, NULL, NULL);
}
