/*
 * alloc_bench.c - cuMemAlloc + cuMemFree pairs per size, in µs, as a
 * program sees them: run natively and under the hook with GPUSHARE_SWAP=on
 * (the swap tier backs each allocation with the virtual-memory API) to
 * compare.  One JSON line per size.  Build: gcc -O2 -I/usr/local/cuda/include
 * bench/alloc_bench.c -lcuda -o alloc_bench
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx)) {
        fprintf(stderr, "no GPU\n");
        return 1;
    }
    /* 8 GiB: the swap tier backs it with 8 segments of 1 GiB or 32 of
     * 256 MiB (bench/seg_alloc_ab.sh compares the two). */
    size_t sizes[] = {4096, 2u << 20, 20u << 20, 256u << 20, 2ull << 30, 8ull << 30};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        int iters = sizes[i] >= (4ull << 30)   ? 5
                    : sizes[i] >= (1ull << 30) ? 20
                    : sizes[i] >= (256u << 20) ? 100
                                               : 1000;
        double best = 1e9;
        for (int round = 0; round < 3; round++) {
            double t0 = now_s();
            for (int k = 0; k < iters; k++) {
                CUdeviceptr p;
                if (cuMemAlloc(&p, sizes[i]) || cuMemFree(p)) {
                    fprintf(stderr, "alloc failed\n");
                    return 1;
                }
            }
            double us = (now_s() - t0) / iters * 1e6;
            if (us < best)
                best = us;
        }
        printf("{\"bytes\":%zu,\"iters\":%d,\"alloc_free_us\":%.2f}\n", sizes[i], iters, best);
    }
    return 0;
}
