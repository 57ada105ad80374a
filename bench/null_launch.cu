// null_launch.cu - CPU cost of launching an empty kernel, and the share of
// it that libgpushare-hook.so adds.
//
// Under the hook, one process alternates batches of launches through the
// hook's wrapper (cuLaunchKernel bound by ELF) and through the real
// driver's cuLaunchKernel (its address from gpushare_hook_real), so both
// are measured side by side with the same GPU, queue and caches; the
// difference of the medians is the wrapper's overhead.  A third series
// uses the runtime (<<<>>>, which reaches the driver via cuGetProcAddress).
// Batches are smaller than the launch queue so the CPU cost of the call is
// measured, not queue back-pressure.
//   null_launch [batches] [batch_size]   -> one JSON line on stdout
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void null_kernel() {}

#define CHECK(x)                                                                   \
    do {                                                                           \
        auto rc_ = (x);                                                            \
        if (rc_ != 0) {                                                            \
            fprintf(stderr, "%s failed: %d at line %d\n", #x, (int)rc_, __LINE__); \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);

static double now_ns()
{
    return std::chrono::duration<double, std::nano>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static double batch_ns(launch_fn launch, CUfunction fn, int batch)
{
    double t0 = now_ns();
    for (int i = 0; i < batch; i++)
        CHECK(launch(fn, 1, 1, 1, 1, 1, 1, 0, 0, nullptr, nullptr));
    double t1 = now_ns();
    CHECK(cudaDeviceSynchronize());
    return (t1 - t0) / batch;
}

int main(int argc, char **argv)
{
    int batches = argc > 1 ? atoi(argv[1]) : 3000;
    int batch = argc > 2 ? atoi(argv[2]) : 256;
    CHECK(cudaFree(0));
    cudaFunction_t f;
    CHECK(cudaGetFuncBySymbol(&f, (const void *)null_kernel));
    CUfunction fn = (CUfunction)f;
    typedef void *(*real_fn)(const char *);
    real_fn hook_real = (real_fn)dlsym(RTLD_DEFAULT, "gpushare_hook_real");
    launch_fn bound = cuLaunchKernel; // the hook's wrapper when it is preloaded
    launch_fn real = hook_real ? (launch_fn)hook_real("cuLaunchKernel") : nullptr;
    std::vector<double> via_bound, via_real, via_runtime;
    for (int pass = 0; pass < 2; pass++) { // the first pass warms up
        via_bound.clear();
        via_real.clear();
        via_runtime.clear();
        for (int b = 0; b < batches; b++) {
            via_bound.push_back(batch_ns(bound, fn, batch));
            if (real)
                via_real.push_back(batch_ns(real, fn, batch));
            double t0 = now_ns();
            for (int i = 0; i < batch; i++)
                null_kernel<<<1, 1>>>();
            double t1 = now_ns();
            CHECK(cudaGetLastError());
            CHECK(cudaDeviceSynchronize());
            via_runtime.push_back((t1 - t0) / batch);
        }
    }
    printf("{\"batches\": %d, \"batch\": %d, \"hooked\": %s, \"elf_bound_ns\": %.2f, "
           "\"real_driver_ns\": %.2f, \"runtime_ns\": %.2f",
           batches, batch, hook_real ? "true" : "false", median(via_bound),
           real ? median(via_real) : -1.0, median(via_runtime));
    if (real) {
        std::vector<double> diff;
        for (size_t i = 0; i < via_bound.size(); i++)
            diff.push_back(via_bound[i] - via_real[i]);
        printf(", \"hook_overhead_ns_median_of_paired_diffs\": %.2f", median(diff));
    }
    printf("}\n");
    return 0;
}
