// sporadic.cu - touch the GPU now and then: one small kernel every PERIOD_US
// for SECONDS, like a notebook that is mostly idle.  The workload for
// revoke_latency.   sporadic [SECONDS] [PERIOD_US]
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

__global__ void tick(int *p) { *p += 1; }

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 5;
    int period = argc > 2 ? atoi(argv[2]) : 5000;
    int *d;
    if (cudaMalloc(&d, sizeof(int)) != cudaSuccess)
        return 1;
    long n = (long)(seconds * 1e6 / period);
    for (long i = 0; i < n; i++) {
        tick<<<1, 1>>>(d);
        usleep(period);
    }
    int h = 0;
    cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
    printf("{\"ticks\": %d}\n", h);
    return h == n ? 0 : 1;
}
