/*
 * test_sim_procaddr.c - cuGetProcAddress and cuGetProcAddress_v2: the ABI
 * version chosen for a requested CUDA version, the per-thread variants
 * chosen by the flags (distinct functions from the legacy ones), the
 * not-found and version-not-sufficient answers, self-lookup, and that
 * every answer is the exported symbol of that name.
 */
#include "simtest.h"

#include <dlfcn.h>
#include <string.h>

static void *sym(const char *name)
{
    void *p = dlsym(RTLD_DEFAULT, name);
    if (!p)
        fail_msg("%s is not exported", name);
    return p;
}

static void *get(const char *name, int version, cuuint64_t flags)
{
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
    CUresult r = cuGetProcAddress(name, &fn, version, flags, &st);
    if (r != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS || !fn)
        fail_msg("cuGetProcAddress(%s, %d, %llu) = %s, status %d", name, version,
                 (unsigned long long)flags, simtest_err(r), (int)st);
    return fn;
}

#define PTDS   CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
#define LEGACY CU_GET_PROC_ADDRESS_LEGACY_STREAM

/* {name, cudaVersion, flags, expected exported symbol} */
static const struct {
    const char *name;
    int version;
    cuuint64_t flags;
    const char *want;
} cases[] = {
    {"cuMemAlloc", 13000, 0, "cuMemAlloc_v2"},
    {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
    {"cuMemAlloc", 3010, 0, "cuMemAlloc"},
    {"cuMemAlloc", 2000, 0, "cuMemAlloc"},
    {"cuCtxCreate", 13000, 0, "cuCtxCreate_v4"},
    {"cuCtxCreate", 12000, 0, "cuCtxCreate_v3"},
    {"cuCtxCreate", 4000, 0, "cuCtxCreate_v2"},
    {"cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2"},
    {"cuCtxSynchronize", 12080, 0, "cuCtxSynchronize"},
    {"cuEventElapsedTime", 12080, 0, "cuEventElapsedTime_v2"},
    {"cuEventElapsedTime", 12060, 0, "cuEventElapsedTime"},
    {"cuDeviceGetUuid", 12000, 0, "cuDeviceGetUuid_v2"},
    {"cuDeviceGetUuid", 11000, 0, "cuDeviceGetUuid"},
    {"cuDevicePrimaryCtxRelease", 11000, 0, "cuDevicePrimaryCtxRelease_v2"},
    {"cuStreamGetCaptureInfo", 12030, 0, "cuStreamGetCaptureInfo_v3"},
    {"cuStreamGetCaptureInfo", 12000, 0, "cuStreamGetCaptureInfo_v2"},
    {"cuStreamGetCaptureInfo", 11000, 0, "cuStreamGetCaptureInfo"},
    {"cuGraphInstantiate", 12000, 0, "cuGraphInstantiateWithFlags"},
    {"cuGraphInstantiate", 11000, 0, "cuGraphInstantiate_v2"},
    {"cuGraphInstantiate", 10000, 0, "cuGraphInstantiate"},
    {"cuMemcpyHtoD", 13000, 0, "cuMemcpyHtoD_v2"},
    {"cuMemcpyHtoD", 13000, LEGACY, "cuMemcpyHtoD_v2"},
    {"cuMemcpyHtoD", 13000, PTDS, "cuMemcpyHtoD_v2_ptds"},
    {"cuMemcpyHtoD", 6050, PTDS, "cuMemcpyHtoD_v2"}, /* per-thread from 7.0 */
    {"cuMemcpyHtoD", 2000, PTDS, "cuMemcpyHtoD"},
    {"cuMemcpyHtoDAsync", 12000, PTDS, "cuMemcpyHtoDAsync_v2_ptsz"},
    {"cuMemcpyDtoH", 12000, PTDS, "cuMemcpyDtoH_v2_ptds"},
    {"cuMemcpy", 12000, PTDS, "cuMemcpy_ptds"},
    {"cuMemcpyAsync", 12000, PTDS, "cuMemcpyAsync_ptsz"},
    {"cuMemsetD8", 12000, PTDS, "cuMemsetD8_v2_ptds"},
    {"cuMemsetD32Async", 12000, PTDS, "cuMemsetD32Async_ptsz"},
    {"cuMemcpy2DAsync", 12000, PTDS, "cuMemcpy2DAsync_v2_ptsz"},
    {"cuMemcpy3D", 12000, PTDS, "cuMemcpy3D_v2_ptds"},
    {"cuLaunchKernel", 12000, 0, "cuLaunchKernel"},
    {"cuLaunchKernel", 12000, PTDS, "cuLaunchKernel_ptsz"},
    {"cuLaunchKernelEx", 12000, PTDS, "cuLaunchKernelEx_ptsz"},
    {"cuLaunchCooperativeKernel", 12000, PTDS, "cuLaunchCooperativeKernel_ptsz"},
    {"cuStreamSynchronize", 12000, PTDS, "cuStreamSynchronize_ptsz"},
    {"cuStreamQuery", 12000, PTDS, "cuStreamQuery_ptsz"},
    {"cuStreamWaitEvent", 12000, PTDS, "cuStreamWaitEvent_ptsz"},
    {"cuEventRecord", 12000, PTDS, "cuEventRecord_ptsz"},
    {"cuEventRecordWithFlags", 12000, PTDS, "cuEventRecordWithFlags_ptsz"},
    {"cuGraphLaunch", 12000, PTDS, "cuGraphLaunch_ptsz"},
    {"cuGraphLaunch", 12000, LEGACY, "cuGraphLaunch"},
    {"cuStreamBeginCapture", 12000, PTDS, "cuStreamBeginCapture_v2_ptsz"},
    {"cuStreamBeginCapture", 12000, 0, "cuStreamBeginCapture_v2"},
    {"cuStreamBeginCapture", 10000, PTDS, "cuStreamBeginCapture_ptsz"},
    {"cuStreamEndCapture", 12000, PTDS, "cuStreamEndCapture_ptsz"},
    {"cuStreamIsCapturing", 12000, PTDS, "cuStreamIsCapturing_ptsz"},
    {"cuMemAllocAsync", 12000, PTDS, "cuMemAllocAsync_ptsz"},
    {"cuMemFreeAsync", 12000, PTDS, "cuMemFreeAsync_ptsz"},
    {"cuLaunchHostFunc", 12000, PTDS, "cuLaunchHostFunc_ptsz"},
    {"cuStreamAddCallback", 12000, PTDS, "cuStreamAddCallback_ptsz"},
    {"cuMemcpyPeerAsync", 12000, PTDS, "cuMemcpyPeerAsync_ptsz"},
    {"cuMemGetAllocationGranularity", 12000, PTDS, "cuMemGetAllocationGranularity"},
    {"cuCheckpointProcessLock", 12080, 0, "cuCheckpointProcessLock"},
    {"cuGetProcAddress", 13000, 0, "cuGetProcAddress_v2"},
    {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
    {"cuGetProcAddress", 11030, 0, "cuGetProcAddress"},
};

static void test_versions_and_flags(void **state)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        void *fn = get(cases[i].name, cases[i].version, cases[i].flags);
        if (fn != sym(cases[i].want))
            fail_msg("cuGetProcAddress(%s, %d, %llu) is not %s", cases[i].name, cases[i].version,
                     (unsigned long long)cases[i].flags, cases[i].want);
    }
}

static void test_per_thread_variants_are_distinct(void **state)
{
    static const char *pairs[][2] = {
        {"cuLaunchKernel", "cuLaunchKernel_ptsz"},
        {"cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz"},
        {"cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds"},
        {"cuStreamSynchronize", "cuStreamSynchronize_ptsz"},
        {"cuGraphLaunch", "cuGraphLaunch_ptsz"},
        {"cuStreamBeginCapture_v2", "cuStreamBeginCapture_v2_ptsz"},
        {"cuEventRecord", "cuEventRecord_ptsz"},
        {"cuMemAlloc", "cuMemAlloc_v2"},
        {"cuGetProcAddress", "cuGetProcAddress_v2"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        assert_ptr_not_equal(sym(pairs[i][0]), sym(pairs[i][1]));
}

static void test_not_found(void **state)
{
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
    CK_EQ(cuGetProcAddress("cuNoSuchFunction", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
    assert_null(fn);
    assert_int_equal(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    fn = (void *)1;
    CK_EQ(cuGetProcAddress("cuMemAllocAsync", &fn, 11010, 0, &st), CUDA_ERROR_NOT_FOUND);
    assert_null(fn);
    assert_int_equal(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    CK_EQ(cuGetProcAddress("cuCheckpointProcessLock", &fn, 12070, 0, &st), CUDA_ERROR_NOT_FOUND);
    assert_int_equal(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    /* "cuMemAlloc_v2" is not a base name */
    CK_EQ(cuGetProcAddress("cuMemAlloc_v2", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
    CK_EQ(cuGetProcAddress("cuMemAlloc", &fn, 13000, 0, NULL), CUDA_SUCCESS); /* status optional */
    CK_EQ(cuGetProcAddress(NULL, &fn, 13000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    CK_EQ(cuGetProcAddress("cuMemAlloc", NULL, 13000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    CK_EQ(cuGetProcAddress("cuMemAlloc", &fn, 13000, 8, &st), CUDA_ERROR_INVALID_VALUE);
    CK_EQ(cuGetProcAddress("cuMemAlloc", &fn, 13010, 0, &st), CUDA_ERROR_INVALID_VALUE);
}

/* The legacy 4-argument cuGetProcAddress and calls through the pointers. */
static void test_legacy_entry_and_calls(void **state)
{
    CUresult (*gpa4)(const char *, void **, int, cuuint64_t) = get("cuGetProcAddress", 11030, 0);
    CUresult (*version)(int *) = NULL;
    CK(gpa4("cuDriverGetVersion", (void **)&version, 11030, 0));
    int v = 0;
    CK(version(&v));
    assert_int_equal(v, 13000);
    void *fn = (void *)1;
    CK_EQ(gpa4("cuNoSuchFunction", &fn, 13000, 0), CUDA_ERROR_NOT_FOUND);
    assert_null(fn);
    CK(gpa4("cuMemcpyHtoD", &fn, 12000, PTDS));
    assert_ptr_equal(fn, sym("cuMemcpyHtoD_v2_ptds"));
    /* no cuInit needed for the lookup; the functions still check it */
    CUresult (*count)(int *) = get("cuDeviceGetCount", 12000, 0);
    int n;
    CK_EQ(count(&n), CUDA_ERROR_NOT_INITIALIZED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_versions_and_flags),
        cmocka_unit_test(test_per_thread_variants_are_distinct),
        cmocka_unit_test(test_not_found),
        cmocka_unit_test(test_legacy_entry_and_calls),
    };
    return cmocka_run_group_tests_name("simcuda procaddr", tests, NULL, NULL);
}
