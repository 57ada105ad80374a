// validate_cuda.cu - a CUDA program that reaches the GPU on every path the
// hook must interpose: driver API calls bound by ELF (cuLaunchKernel,
// cuMemcpy*, cuMemsetD32), the runtime (<<<>>>, cudaMemcpyAsync, streams,
// events; linked as shared or static cudart), and CUDA graphs (stream
// capture, instantiate, launch).  Integer arithmetic makes the checksum
// exact, so a run under libgpushare-hook.so must print the same line as a
// native run.  It also prints the launches it made and, when the hook is
// preloaded, the launches the hook saw.
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                     \
    do {                                                                          \
        long rc_ = (long)(x);                                                     \
        if (rc_ != 0) {                                                           \
            fprintf(stderr, "%s failed: %ld (line %d)\n", #x, rc_, __LINE__);     \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

__global__ void mix(unsigned *v, unsigned n, unsigned salt)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        v[i] = v[i] * 2654435761u + salt + i;
}

int main()
{
    const unsigned n = 1 << 20;
    long launches = 0, graph_launches = 0;
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    unsigned *d = nullptr;
    CK(cudaMalloc(&d, n * sizeof(unsigned)));

    // Driver API, bound by ELF.
    CK(cuMemsetD32((CUdeviceptr)d, 7, n));
    cudaFunction_t rf;
    CK(cudaGetFuncBySymbol(&rf, (const void *)mix));
    CUfunction f = (CUfunction)rf;
    for (unsigned k = 0; k < 50; k++) {
        unsigned salt = k;
        unsigned nn = n;
        void *args[] = {&d, &nn, &salt};
        CK(cuLaunchKernel(f, n / 256, 1, 1, 256, 1, 1, 0, 0, args, nullptr));
        launches++;
    }
    // Runtime API on a stream with events.
    cudaStream_t s;
    // A blocking stream: it orders after the driver launches on the legacy
    // default stream above (a non-blocking one would race with them).
    CK(cudaStreamCreate(&s));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, s));
    for (unsigned k = 0; k < 50; k++) {
        mix<<<n / 256, 256, 0, s>>>(d, n, 1000 + k);
        launches++;
    }
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    // A graph of 10 kernels, launched 20 times.
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (unsigned k = 0; k < 10; k++)
        mix<<<n / 256, 256, 0, s>>>(d, n, 5000 + k);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    for (int r = 0; r < 20; r++) {
        CK(cudaGraphLaunch(ge, s));
        graph_launches++;
    }
    launches += 10; // the captured launches also reach cuLaunchKernel
    CK(cudaStreamSynchronize(s));
    // Copy back with the driver API and with the runtime.
    std::vector<unsigned> h(n), h2(n);
    CK(cuMemcpyDtoH(h.data(), (CUdeviceptr)d, n * sizeof(unsigned)));
    CK(cudaMemcpyAsync(h2.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    unsigned long long sum = 0;
    for (unsigned i = 0; i < n; i++) {
        if (h[i] != h2[i]) {
            fprintf(stderr, "copies disagree at %u\n", i);
            return 1;
        }
        sum = sum * 31 + h[i];
    }
    long long (*hook_count)(void) =
        (long long (*)(void))dlsym(RTLD_DEFAULT, "gpushare_hook_launch_count");
    long long (*hook_calls)(const char *) =
        (long long (*)(const char *))dlsym(RTLD_DEFAULT, "gpushare_hook_calls");
    printf("{\"checksum\": \"%016llx\", \"kernel_launches\": %ld, \"graph_launches\": %ld, "
           "\"hook_kernel_launches\": %lld, \"hook_graph_launches\": %lld}\n",
           sum, launches, graph_launches, hook_count ? hook_count() : -1,
           hook_calls ? hook_calls("cuGraphLaunch") + hook_calls("cuGraphLaunch_ptsz") : -1);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaFree(d));
    return 0;
}
