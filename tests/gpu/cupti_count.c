/*
 * cupti_count.c - an injection library (CUDA_INJECTION64_PATH) that counts,
 * with CUPTI driver-API callbacks, every kernel and graph launch that
 * reaches the real driver, and writes the counts as JSON at exit to
 * $CUPTI_COUNT_FILE.  The H200 validation compares them with the counts
 * libgpushare-hook.so saw: any launch path the hook misses shows up as a
 * difference (the thesis' Table 11.6 check).
 */
#include <cupti.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static atomic_ullong kernels, graphs;

static void CUPTIAPI on_driver_api(void *udata, CUpti_CallbackDomain domain,
                                   CUpti_CallbackId cbid, const void *cbdata)
{
    (void)udata;
    const CUpti_CallbackData *cb = cbdata;
    if (domain != CUPTI_CB_DOMAIN_DRIVER_API || cb->callbackSite != CUPTI_API_ENTER)
        return;
    switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
        atomic_fetch_add(&kernels, 1);
        break;
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz:
        atomic_fetch_add(&graphs, 1);
        break;
    default:
        break;
    }
}

static void write_counts(void)
{
    const char *path = getenv("CUPTI_COUNT_FILE");
    FILE *f = path ? fopen(path, "w") : stderr;
    if (!f)
        return;
    fprintf(f, "{\"kernel_launches\": %llu, \"graph_launches\": %llu}\n",
            (unsigned long long)kernels, (unsigned long long)graphs);
    if (f != stderr)
        fclose(f);
}

__attribute__((visibility("default"))) int InitializeInjection(void)
{
    CUpti_SubscriberHandle sub;
    if (cuptiSubscribe(&sub, on_driver_api, NULL) != CUPTI_SUCCESS)
        return 0;
    cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API);
    atexit(write_counts);
    return 1;
}
