/*
 * test_sim_graph.c - stream capture and graphs: captured operations are
 * recorded, not run; the graph runs them (kernels keeping their durations)
 * each time it is launched; capture status and info; synchronising a
 * capturing stream is refused and invalidates the capture; capture rules;
 * streams joining a capture through events.
 */
#include "simtest.h"

#include <string.h>

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

static void child_capture(int rd, int wr, void *arg)
{
    CUstream s;
    CUgraph g;
    CUgraphExec e;
    CUdeviceptr d;
    CUstreamCaptureStatus st;
    cuuint64_t id = 0;
    size_t nodes = 0;
    simtest_init();
    REQ_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    REQ_CU(cuMemAlloc(&d, 256));
    REQ_CU(cuMemsetD8(d, 0, 256));
    REQ_CU(cuStreamIsCapturing(s, &st));
    REQUIRE(st == CU_STREAM_CAPTURE_STATUS_NONE);
    REQ_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    REQ_CU(cuStreamIsCapturing(s, &st));
    REQUIRE(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    REQ_CU(cuStreamGetCaptureInfo(s, &st, &id, NULL, NULL, NULL, NULL));
    REQUIRE(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && id != 0);
    launch("cap_a", 10000, s);
    REQ_CU(cuMemsetD8Async(d, 5, 256, s));
    launch("cap_b", 20000, s);
    /* recorded, not run */
    REQUIRE(((unsigned char *)d)[0] == 0);
    REQUIRE(gpusim_process_busy_ns(0) == 0);
    REQ_CU(cuStreamEndCapture(s, &g));
    REQUIRE(g != NULL);
    REQ_CU(cuStreamIsCapturing(s, &st));
    REQUIRE(st == CU_STREAM_CAPTURE_STATUS_NONE);
    REQ_CU(cuGraphGetNodes(g, NULL, &nodes));
    REQUIRE(nodes == 3);
    REQ_CU(cuGraphInstantiate(&e, g, 0)); /* cuGraphInstantiateWithFlags */
    REQ_CU(cuGraphDestroy(g));            /* the instance is a copy */
    REQ_CU(cuGraphLaunch(e, s));
    REQ_CU(cuGraphLaunch(e, s));
    REQ_CU(cuGraphExecDestroy(e)); /* queued launches keep it */
    REQ_CU(cuStreamSynchronize(s));
    REQUIRE(((unsigned char *)d)[255] == 5);
    uint64_t busy = gpusim_process_busy_ns(0);
    REQUIRE(busy >= 60 * MS);
}

static void test_capture_and_launch(void **state)
{
    simtest_fresh(NULL, NULL);
    const char *log = simtest_fresh_log();
    simtest_in_child(child_capture, NULL);
    struct simlog r[16];
    int n = simtest_read_log(log, r, 16);
    /* memset (setup), then twice: cap_a, memset, cap_b, graph */
    assert_int_equal(n, 9);
    const char *ops[] = {"memset", "kernel", "memset", "kernel", "graph",
                         "kernel", "memset", "kernel", "graph"};
    for (int i = 0; i < n; i++)
        assert_string_equal(r[i].op, ops[i]);
    assert_string_equal(r[1].name, "cap_a");
    assert_string_equal(r[3].name, "cap_b");
    assert_string_equal(r[5].name, "cap_a");
    assert_true(r[1].end - r[1].start >= 10 * MS);
    assert_true(r[3].end - r[3].start >= 20 * MS);
    assert_true(r[7].end - r[7].start >= 20 * MS);
    assert_true(r[4].start <= r[1].start && r[4].end >= r[3].end);
    assert_true(r[5].start >= r[4].end);
}

static void child_sync_refused(int rd, int wr, void *arg)
{
    CUstream s;
    CUgraph g = (CUgraph)1;
    CUstreamCaptureStatus st;
    simtest_init();
    REQ_CU(cuStreamCreate(&s, 0));
    REQ_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    launch("k", 1000, s);
    REQ_CU_EQ(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    REQ_CU(cuStreamIsCapturing(s, &st));
    REQUIRE(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    REQ_CU_EQ(cuLaunchKernel(get_kernel("k"), 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL),
              CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    REQ_CU_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    REQUIRE(g == NULL);
    REQ_CU(cuStreamIsCapturing(s, &st));
    REQUIRE(st == CU_STREAM_CAPTURE_STATUS_NONE);

    REQ_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    REQ_CU_EQ(cuStreamQuery(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    REQ_CU_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    REQ_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    REQ_CU_EQ(cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    REQ_CU_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    /* the stream works normally again */
    launch("after", 1000, s);
    REQ_CU(cuStreamSynchronize(s));
    REQUIRE(gpusim_process_busy_ns(0) >= 1 * MS);
}

static void test_sync_on_capturing_stream_refused(void **state)
{
    simtest_fresh(NULL, NULL);
    simtest_in_child(child_sync_refused, NULL);
}

static void child_rules(int rd, int wr, void *arg)
{
    CUstream s;
    CUgraph g, empty;
    CUgraphExec e, e2, e3;
    CUgraphNode err = (CUgraphNode)1;
    char logbuf[16] = "x";
    simtest_init();
    REQ_CU(cuStreamCreate(&s, 0));
    REQ_CU_EQ(cuStreamBeginCapture(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL),
              CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    REQ_CU_EQ(cuStreamBeginCapture(s, (CUstreamCaptureMode)7), CUDA_ERROR_INVALID_VALUE);
    REQ_CU_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);
    REQ_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    REQ_CU_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
    launch("rule_k", 2000, s);
    REQ_CU(cuStreamEndCapture(s, &g));

    /* the legacy 5-argument cuGraphInstantiate, through cuGetProcAddress */
    CUresult (*inst_legacy)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
    CUdriverProcAddressQueryResult qr;
    REQ_CU(cuGetProcAddress("cuGraphInstantiate", (void **)&inst_legacy, 11000, 0, &qr));
    REQ_CU(inst_legacy(&e, g, &err, logbuf, sizeof logbuf));
    REQUIRE(err == NULL && logbuf[0] == 0);
    CUDA_GRAPH_INSTANTIATE_PARAMS ip = {0};
    REQ_CU(cuGraphInstantiateWithParams(&e2, g, &ip));
    REQUIRE(ip.result_out == CUDA_GRAPH_INSTANTIATE_SUCCESS);
    REQ_CU(cuGraphCreate(&empty, 0));
    REQ_CU(cuGraphInstantiateWithFlags(&e3, empty, 0));
    REQ_CU(cuGraphUpload(e, s));
    REQ_CU(cuGraphLaunch(e, s));
    REQ_CU(cuGraphLaunch(e2, NULL)); /* the default stream */
    REQ_CU(cuGraphLaunch(e3, s));
    REQ_CU(cuCtxSynchronize());
    REQUIRE(gpusim_process_busy_ns(0) >= 4 * 1000000ULL);
    REQ_CU(cuGraphExecDestroy(e));
    REQ_CU_EQ(cuGraphExecDestroy(e), CUDA_ERROR_INVALID_VALUE);
    REQ_CU_EQ(cuGraphLaunch(e, s), CUDA_ERROR_INVALID_VALUE);
    REQ_CU(cuGraphDestroy(g));
    REQ_CU_EQ(cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);
}

static void test_capture_rules(void **state)
{
    simtest_fresh(NULL, NULL);
    simtest_in_child(child_rules, NULL);
}

/* Fork/join: a stream waiting on an event recorded in a capture joins it. */
static void child_fork_join(int rd, int wr, void *arg)
{
    CUstream s1, s2;
    CUevent fork_ev, join_ev;
    CUgraph g;
    CUgraphExec e;
    CUstreamCaptureStatus st;
    size_t nodes = 0;
    simtest_init();
    REQ_CU(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    REQ_CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    REQ_CU(cuEventCreate(&fork_ev, CU_EVENT_DISABLE_TIMING));
    REQ_CU(cuEventCreate(&join_ev, CU_EVENT_DISABLE_TIMING));
    REQ_CU(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    launch("main_k", 3000, s1);
    REQ_CU(cuEventRecord(fork_ev, s1));
    REQ_CU(cuStreamWaitEvent(s2, fork_ev, 0));
    REQ_CU(cuStreamIsCapturing(s2, &st));
    REQUIRE(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    launch("side_k", 4000, s2);
    REQ_CU(cuEventRecord(join_ev, s2));
    REQ_CU(cuStreamWaitEvent(s1, join_ev, 0));
    REQ_CU_EQ(cuStreamEndCapture(s2, &g), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    REQ_CU(cuStreamEndCapture(s1, &g));
    REQ_CU(cuStreamIsCapturing(s2, &st));
    REQUIRE(st == CU_STREAM_CAPTURE_STATUS_NONE);
    REQ_CU(cuGraphGetNodes(g, NULL, &nodes));
    REQUIRE(nodes == 4); /* two kernels, two event records */
    REQ_CU(cuGraphInstantiate(&e, g, 0));
    REQ_CU(cuGraphLaunch(e, s1));
    REQ_CU(cuStreamSynchronize(s1));
    REQUIRE(gpusim_process_busy_ns(0) >= 7 * MS);
}

static void test_fork_join_capture(void **state)
{
    simtest_fresh(NULL, NULL);
    const char *log = simtest_fresh_log();
    simtest_in_child(child_fork_join, NULL);
    struct simlog r[8];
    int n = simtest_read_log(log, r, 8);
    assert_int_equal(n, 3);
    assert_string_equal(r[0].name, "main_k");
    assert_string_equal(r[1].name, "side_k");
    assert_string_equal(r[2].op, "graph");
}

/* Destroying the stream a capture began on ends the capture for the
 * streams that joined it; they work normally afterwards. */
static void child_destroy_origin(int rd, int wr, void *arg)
{
    CUstream s1, s2;
    CUevent ev;
    CUstreamCaptureStatus st;
    simtest_init();
    REQ_CU(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    REQ_CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    REQ_CU(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    REQ_CU(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    REQ_CU(cuEventRecord(ev, s1));
    REQ_CU(cuStreamWaitEvent(s2, ev, 0));
    launch("captured", 1000, s2);
    REQ_CU(cuStreamDestroy(s1));
    REQ_CU(cuStreamIsCapturing(s2, &st));
    REQUIRE(st == CU_STREAM_CAPTURE_STATUS_NONE);
    launch("normal", 2000, s2);
    REQ_CU(cuStreamSynchronize(s2));
    REQUIRE(gpusim_process_busy_ns(0) == 2 * MS);
}

static void test_destroy_capturing_stream(void **state)
{
    simtest_fresh(NULL, NULL);
    simtest_in_child(child_destroy_origin, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_capture_and_launch, simtest_teardown),
        cmocka_unit_test_teardown(test_sync_on_capturing_stream_refused, simtest_teardown),
        cmocka_unit_test_teardown(test_capture_rules, simtest_teardown),
        cmocka_unit_test_teardown(test_fork_join_capture, simtest_teardown),
        cmocka_unit_test_teardown(test_destroy_capturing_stream, simtest_teardown),
    };
    return cmocka_run_group_tests_name("simcuda graph", tests, NULL, NULL);
}
