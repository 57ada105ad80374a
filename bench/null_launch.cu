// null_launch.cu - CPU cost of launching an empty kernel, through the driver
// API (cuLaunchKernel, bound by ELF) and through the runtime (<<<>>>, which
// reaches the driver through cuGetProcAddress).  Run it natively and under
// libgpushare-hook.so; the difference is the hook's launch-path overhead.
//
// Launches are timed in batches smaller than the GPU's launch queue so the
// measurement is the CPU cost of the call, not queue back-pressure.
//   null_launch [batches] [batch_size]   -> one JSON line on stdout
#include <cuda.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void null_kernel() {}

#define CHECK(x)                                                                 \
    do {                                                                         \
        auto rc_ = (x);                                                          \
        if (rc_ != 0) {                                                          \
            fprintf(stderr, "%s failed: %d at line %d\n", #x, (int)rc_, __LINE__); \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

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

int main(int argc, char **argv)
{
    int batches = argc > 1 ? atoi(argv[1]) : 2000;
    int batch = argc > 2 ? atoi(argv[2]) : 256;
    CHECK(cudaFree(0));
    cudaFunction_t f;
    CHECK(cudaGetFuncBySymbol(&f, (const void *)null_kernel));
    CUfunction fn = (CUfunction)f;
    std::vector<double> drv, rt;
    for (int warm = 0; warm < 2; warm++) {
        drv.clear();
        rt.clear();
        for (int b = 0; b < batches; b++) {
            double t0 = now_ns();
            for (int i = 0; i < batch; i++)
                CHECK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0, nullptr, nullptr));
            double t1 = now_ns();
            CHECK(cudaDeviceSynchronize());
            double t2 = now_ns();
            for (int i = 0; i < batch; i++)
                null_kernel<<<1, 1>>>();
            double t3 = now_ns();
            CHECK(cudaGetLastError());
            CHECK(cudaDeviceSynchronize());
            drv.push_back((t1 - t0) / batch);
            rt.push_back((t3 - t2) / batch);
        }
    }
    printf("{\"batches\": %d, \"batch\": %d, \"driver_ns_per_launch\": %.2f, "
           "\"runtime_ns_per_launch\": %.2f}\n",
           batches, batch, median(drv), median(rt));
    return 0;
}
