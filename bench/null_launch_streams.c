/*
 * null_launch_streams.c - null_launch.cu over several streams: the CPU cost
 * of launching an empty kernel when one thread cycles over 1, 4, 8 and 16
 * streams, through the hook's wrapper and through the real driver, side by
 * side in one process.
 *
 * The hook remembers, per thread, the streams that already got work in the
 * current grant; a launch to a stream it does not remember takes a lock.
 * This measures what cycling over more streams costs.  Under the hook each
 * batch of launches goes once through the hook's cuLaunchKernel (what
 * dlsym hands a program: the hook substitutes its wrapper) and once
 * through the real driver's (gpushare_hook_real), for every stream count in
 * turn, so all series see the same GPU, queue and caches; the overhead is
 * the median of the paired per-batch differences (which of a pair goes
 * first alternates).  Without the hook only the driver series is
 * measured.  Batches are smaller than the launch queue, so the CPU cost of
 * the call is measured, not back-pressure.
 *
 * Driver API only, the kernel as PTX for the driver to compile, and libcuda
 * opened at run time: it builds without nvcc or libcuda and also runs on
 * the simulated driver (tests/simcuda), where the numbers mean nothing but
 * show that it works.
 *
 *   null_launch_streams [batches] [batch_size] [stream counts, e.g. 1,4,8,16]
 *
 * One JSON line per stream count on stdout.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>

#define MAX_COUNTS  8
#define MAX_STREAMS 64

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);

static struct {
    CUresult (*init)(unsigned);
    CUresult (*deviceGet)(CUdevice *, int);
    CUresult (*primaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*ctxSetCurrent)(CUcontext);
    CUresult (*moduleLoadData)(CUmodule *, const void *);
    CUresult (*moduleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*streamCreate)(CUstream *, unsigned);
    CUresult (*ctxSynchronize)(void);
    launch_fn launch;
} cu;

static void check(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "null_launch_streams: %s failed: error %d\n", what, (int)r);
        exit(1);
    }
}

static void *need(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "null_launch_streams: the driver has no %s\n", name);
        exit(1);
    }
    return p;
}

static void load_driver(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "null_launch_streams: %s\n", dlerror());
        exit(1);
    }
    *(void **)&cu.init = need(lib, "cuInit");
    *(void **)&cu.deviceGet = need(lib, "cuDeviceGet");
    *(void **)&cu.primaryCtxRetain = need(lib, "cuDevicePrimaryCtxRetain");
    *(void **)&cu.ctxSetCurrent = need(lib, "cuCtxSetCurrent");
    *(void **)&cu.moduleLoadData = need(lib, "cuModuleLoadData");
    *(void **)&cu.moduleGetFunction = need(lib, "cuModuleGetFunction");
    *(void **)&cu.streamCreate = need(lib, "cuStreamCreate");
    *(void **)&cu.ctxSynchronize = need(lib, "cuCtxSynchronize");
    *(void **)&cu.launch = need(lib, "cuLaunchKernel"); /* the hook's, when preloaded */
}

/* An empty kernel.  The oldest target first: the driver compiles PTX for
 * any newer GPU. */
static CUfunction null_kernel(void)
{
    static const char *const targets[] = {"sm_50", "sm_90"};
    char ptx[256];
    CUmodule mod = NULL;
    CUresult r = CUDA_ERROR_INVALID_PTX;
    for (size_t i = 0; i < sizeof targets / sizeof targets[0] && r != CUDA_SUCCESS; i++) {
        snprintf(ptx, sizeof ptx,
                 ".version 7.0\n.target %s\n.address_size 64\n"
                 ".visible .entry null_kernel()\n{\n\tret;\n}\n",
                 targets[i]);
        r = cu.moduleLoadData(&mod, ptx);
    }
    check(r, "cuModuleLoadData");
    CUfunction f;
    check(cu.moduleGetFunction(&f, mod, "null_kernel"), "cuModuleGetFunction");
    return f;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* ns per launch of one batch cycling over streams s[0..n). */
static double batch_ns(launch_fn launch, CUfunction f, const CUstream *s, int n, int batch)
{
    double t0 = now_ns();
    for (int i = 0; i < batch; i++)
        check(launch(f, 1, 1, 1, 1, 1, 1, 0, s[i % n], NULL, NULL), "cuLaunchKernel");
    double t1 = now_ns();
    check(cu.ctxSynchronize(), "cuCtxSynchronize");
    return (t1 - t0) / batch;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static int parse_counts(const char *arg, int *counts)
{
    int n = 0;
    char *copy = strdup(arg), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok && n < MAX_COUNTS;
         tok = strtok_r(NULL, ",", &save)) {
        int c = atoi(tok);
        if (c < 1 || c > MAX_STREAMS) {
            fprintf(stderr, "null_launch_streams: stream counts are 1 to %d\n", MAX_STREAMS);
            exit(2);
        }
        counts[n++] = c;
    }
    free(copy);
    return n;
}

int main(int argc, char **argv)
{
    int batches = argc > 1 ? atoi(argv[1]) : 1500;
    int batch = argc > 2 ? atoi(argv[2]) : 256;
    int counts[MAX_COUNTS];
    int ncounts = parse_counts(argc > 3 ? argv[3] : "1,4,8,16", counts);
    if (batches < 1 || batch < 1 || ncounts < 1) {
        fprintf(stderr, "usage: null_launch_streams [batches] [batch_size] [counts: 1,4,8,16]\n");
        return 2;
    }
    load_driver();
    CUdevice dev;
    CUcontext ctx;
    check(cu.init(0), "cuInit");
    check(cu.deviceGet(&dev, 0), "cuDeviceGet");
    check(cu.primaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cu.ctxSetCurrent(ctx), "cuCtxSetCurrent");
    CUfunction f = null_kernel();
    int most = 0;
    for (int c = 0; c < ncounts; c++)
        most = counts[c] > most ? counts[c] : most;
    CUstream s[MAX_STREAMS];
    for (int i = 0; i < most; i++)
        check(cu.streamCreate(&s[i], CU_STREAM_NON_BLOCKING), "cuStreamCreate");

    void *(*hook_real)(const char *) =
        (void *(*)(const char *))dlsym(RTLD_DEFAULT, "gpushare_hook_real");
    int (*hook_gate)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "gpushare_hook_gate");
    launch_fn real = hook_real ? (launch_fn)hook_real("cuLaunchKernel") : cu.launch;
    int hooked = hook_real != NULL;

    double *via_hook = calloc((size_t)(ncounts * batches), sizeof(double));
    double *via_real = calloc((size_t)(ncounts * batches), sizeof(double));
    double *diff = calloc((size_t)batches, sizeof(double));
    if (!via_hook || !via_real || !diff)
        return 1;
    /* The first pass warms up.  Which series goes first alternates, so that
     * neither always follows the other's batch. */
    for (int pass = 0; pass < 2; pass++)
        for (int b = 0; b < batches; b++)
            for (int c = 0; c < ncounts; c++) {
                double *h = &via_hook[c * batches + b], *r = &via_real[c * batches + b];
                if (hooked && b % 2 == 0)
                    *h = batch_ns(cu.launch, f, s, counts[c], batch);
                *r = batch_ns(real, f, s, counts[c], batch);
                if (hooked && b % 2 == 1)
                    *h = batch_ns(cu.launch, f, s, counts[c], batch);
            }
    int gate = hook_gate ? hook_gate() : -1;
    for (int c = 0; c < ncounts; c++) {
        double *h = &via_hook[c * batches], *r = &via_real[c * batches];
        printf("{\"streams\": %d, \"batches\": %d, \"batch\": %d, \"hooked\": %s, \"gate\": %d, "
               "\"real_driver_ns\": ",
               counts[c], batches, batch, hooked ? "true" : "false", gate);
        if (hooked) {
            for (int b = 0; b < batches; b++)
                diff[b] = h[b] - r[b];
            double overhead = median(diff, batches);
            printf("%.2f, \"hook_ns\": %.2f, \"hook_overhead_ns_median_of_paired_diffs\": %.2f}\n",
                   median(r, batches), median(h, batches), overhead);
        } else
            printf("%.2f}\n", median(r, batches));
    }
    free(via_hook);
    free(via_real);
    free(diff);
    return 0;
}
