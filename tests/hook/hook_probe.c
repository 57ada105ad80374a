/*
 * hook_probe.c - a small CUDA program the hook's Python tests script from
 * the command line.  Its arguments are steps run in order; it reports each
 * on stdout as one line "<event> <fields...> t=<CLOCK_MONOTONIC ns>" (the
 * clock of the simulated driver's execution log and of the fake broker), so
 * a test can wait for a line instead of sleeping.  "wait" reads a line from
 * stdin: the test decides when the program goes on.
 *
 * Steps:
 *   init [dev]          cuInit, retain the primary context of dev (0), make
 *                       it current, load a module
 *   use dev             make dev's primary context current
 *   stream              create a stream (printed: its index)
 *   launch S us [kname] cuLaunchKernel on stream S (index; L = legacy,
 *                       P = per-thread) for us microseconds
 *   trickle n us gap    n launches of us microseconds on the legacy stream,
 *                       gap microseconds of host time apart (a program that
 *                       keeps submitting while the GPU idles in between)
 *   memcpy S            a 4 KiB cuMemcpyHtoDAsync on stream S (L: cuMemcpyHtoD)
 *   sync | ssync S      cuCtxSynchronize | cuStreamSynchronize
 *   threads n us        n threads launching one kernel each on the legacy
 *                       stream, joined
 *   bg_launch us        a thread launching one kernel (not joined)
 *   capture_begin S | capture_end S | graph_launch S
 *   destroy S           cuStreamDestroy
 *   wait                print "wait", read a line from stdin
 *   sleep ms
 *   gate                print the hook's gate word
 *   count name          print gpushare_hook_calls(name)
 *   fork nocuda|cuda|linger  fork; the child exits at once, or runs
 *                       "init launch L 1000 sync", or sleeps 3 s; the parent
 *                       reports the child's exit status (not for linger)
 * Memory (sizes take K/M/G; each allocation gets the next index, printed):
 *   alloc N | alloc1 N  cuMemAlloc_v2 | cuMemAlloc (32-bit ABI)
 *   allocs n N          n allocations of N bytes in a row, one line at the end
 *   pitch W H           cuMemAllocPitch_v2 (element size 4)
 *   managed N           cuMemAllocManaged (CU_MEM_ATTACH_GLOBAL)
 *   aalloc S N          cuMemAllocAsync on stream S
 *   palloc S N          cuMemAllocFromPoolAsync on stream S, from a pool of
 *                       the current device (created at the first palloc)
 *   free i | afree i S  cuMemFree_v2 | cuMemFreeAsync on stream S
 *   frees               cuMemFree_v2 of every allocation not freed yet
 *   vcreate N           cuMemCreate on the current device (handle index)
 *   vmap h              reserve an address range and map handle h there
 *                       (read/write access; mapping index)
 *   vunmap m            unmap mapping m and free its address range
 *   vrelease h          cuMemRelease
 *   meminfo | totalmem  cuMemGetInfo_v2 | cuDeviceTotalMem_v2
 *   hookmem             the hook's count (gpushare_hook_memory)
 *   newctx | delctx     create a context on the current device and make it
 *                       current | destroy it, the primary context current
 *   bursts              the hook's burst statistics (gpushare_hook_bursts),
 *                       once no burst is under way or being measured
 *   notices on          gpushare_hook_wait_notices(on) (prints the previous
 *                       setting)
 *   waitwatch           a thread that prints "waitstate <json>" with
 *                       gpushare_hook_wait_state() whenever what it says
 *                       changes, apart from the times running on (for_s,
 *                       left_s, done_bytes)
 *   exit                exit(0) from this thread
 *   end                 stop here (return from main)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "gpusim.h"

#define MAX_STREAMS 16
#define MAX_DEVS    8

static CUcontext ctxs[MAX_DEVS];
static int cur_dev;
static CUmodule mods[MAX_DEVS];
static CUstream streams[MAX_STREAMS];
static int nstreams;
static CUgraph graph;
static CUgraphExec graph_exec;

#define MAX_ALLOCS 1024
static CUdeviceptr allocs[MAX_ALLOCS];
static int nallocs;
static CUmemGenericAllocationHandle handles[64];
static size_t handle_size[64];
static int nhandles;
static struct {
    CUdeviceptr va;
    size_t size;
} maps[64];
static int nmaps;
static CUcontext own_ctx;

static unsigned long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&out_mu);
    printf("%s t=%llu\n", line, now_ns());
    fflush(stdout);
    pthread_mutex_unlock(&out_mu);
}

/* The wait state without the values that change by themselves. */
static void wait_key(const char *json, char *key, size_t len)
{
    static const char *const running[] = {"\"for_s\":", "\"left_s\":", "\"done_bytes\":"};
    size_t o = 0;
    for (const char *p = json; *p && o + 1 < len;) {
        int skipped = 0;
        for (size_t k = 0; k < sizeof running / sizeof running[0]; k++) {
            size_t n = strlen(running[k]);
            if (!strncmp(p, running[k], n)) {
                p += n;
                while (*p && *p != ',' && *p != '}')
                    p++;
                skipped = 1;
                break;
            }
        }
        if (!skipped)
            key[o++] = *p++;
    }
    key[o] = 0;
}

static void *wait_watch(void *arg)
{
    int (*state)(char *, size_t) = (int (*)(char *, size_t))arg;
    static char json[8192], key[8192], last[8192];
    for (;;) {
        if (state(json, sizeof json) > 0) {
            wait_key(json, key, sizeof key);
            if (strcmp(key, last) != 0) {
                memcpy(last, key, sizeof last);
                pthread_mutex_lock(&out_mu);
                printf("waitstate %s t=%llu\n", json, now_ns());
                fflush(stdout);
                pthread_mutex_unlock(&out_mu);
            }
        }
        struct timespec ms = {0, 2000000};
        nanosleep(&ms, NULL);
    }
    return NULL;
}

static const char *err_name(CUresult r)
{
    const char *n = NULL;
    if (cuGetErrorName(r, &n) != CUDA_SUCCESS || !n)
        return "?";
    return n;
}

static void die(const char *what, CUresult r)
{
    say("error %s %s", what, err_name(r));
    exit(2);
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS)                                                                    \
            die(#call, r_);                                                                        \
    } while (0)

static CUstream stream_arg(const char *s)
{
    if (strcmp(s, "L") == 0)
        return CU_STREAM_LEGACY;
    if (strcmp(s, "P") == 0)
        return CU_STREAM_PER_THREAD;
    int i = atoi(s);
    if (i < 0 || i >= nstreams) {
        say("error bad-stream %s", s);
        exit(2);
    }
    return streams[i];
}

static CUfunction function(const char *name)
{
    CUfunction f;
    CK(cuModuleGetFunction(&f, mods[cur_dev], name));
    return f;
}

static CUresult launch(CUstream s, unsigned long long us, const char *name)
{
    CUfunction f = function(name);
    gpusim_set_next_kernel_us(us);
    return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL);
}

static unsigned long long size_arg(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    switch (*end) {
    case 'K':
        return v << 10;
    case 'M':
        return v << 20;
    case 'G':
        return v << 30;
    default:
        return v;
    }
}

static CUmemoryPool pool;

static CUresult new_pool(CUmemoryPool *out)
{
    CUdevice d;
    CUresult r = cuCtxGetDevice(&d);
    if (r != CUDA_SUCCESS)
        return r;
    CUmemPoolProps props = {0};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = d;
    return cuMemPoolCreate(out, &props);
}

static void new_alloc(const char *what, CUresult r, CUdeviceptr p)
{
    if (r == CUDA_SUCCESS && nallocs < MAX_ALLOCS) {
        allocs[nallocs] = p;
        say("%s %d %s", what, nallocs++, err_name(r));
    } else
        say("%s -1 %s", what, err_name(r));
}

static void do_init(int dev)
{
    CUdevice d;
    CK(cuInit(0));
    CK(cuDeviceGet(&d, dev));
    CK(cuDevicePrimaryCtxRetain(&ctxs[dev], d));
    CK(cuCtxSetCurrent(ctxs[dev]));
    CK(cuModuleLoadData(&mods[dev], "probe"));
    cur_dev = dev;
}

struct thr {
    int i;
    unsigned long long us;
    pthread_t th;
};

static void *thread_main(void *arg)
{
    struct thr *t = arg;
    char name[32];
    snprintf(name, sizeof name, "t%d", t->i);
    CK(cuCtxSetCurrent(ctxs[cur_dev]));
    say("thread %d launching", t->i);
    CUresult r = launch(CU_STREAM_LEGACY, t->us, name);
    say("thread %d launched %s", t->i, err_name(r));
    return NULL;
}

static void child_cuda(void)
{
    do_init(0);
    CUresult r = launch(CU_STREAM_LEGACY, 1000, "child");
    if (r == CUDA_SUCCESS)
        r = cuCtxSynchronize();
    say("child launched %s", err_name(r));
    exit(r == CUDA_SUCCESS ? 0 : 3);
}

int main(int argc, char **argv)
{
    long long (*calls)(const char *) =
        (long long (*)(const char *))dlsym(RTLD_DEFAULT, "gpushare_hook_calls");
    int (*gate)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "gpushare_hook_gate");
    say("start pid=%d", (int)getpid());
    for (int i = 1; i < argc; i++) {
        const char *c = argv[i];
#define ARG() (i + 1 < argc ? argv[++i] : (say("error missing-argument %s", c), exit(2), ""))
        if (strcmp(c, "init") == 0) {
            int dev = i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9'
                          ? atoi(argv[++i])
                          : 0;
            do_init(dev);
            say("init %d", dev);
        } else if (strcmp(c, "use") == 0) {
            cur_dev = atoi(ARG());
            CK(cuCtxSetCurrent(ctxs[cur_dev]));
            say("use %d", cur_dev);
        } else if (strcmp(c, "stream") == 0) {
            CK(cuStreamCreate(&streams[nstreams], CU_STREAM_NON_BLOCKING));
            say("stream %d", nstreams++);
        } else if (strcmp(c, "launch") == 0) {
            CUstream s = stream_arg(ARG());
            unsigned long long us = strtoull(ARG(), NULL, 10);
            /* an optional kernel name: steps never start with 'k' */
            const char *name = i + 1 < argc && argv[i + 1][0] == 'k' ? argv[++i] : "k";
            say("launching %s", name);
            CUresult r = launch(s, us, name);
            say("launched %s %s", name, err_name(r));
        } else if (strcmp(c, "trickle") == 0) {
            int n = atoi(ARG());
            unsigned long long us = strtoull(ARG(), NULL, 10);
            long gap = atol(ARG());
            say("launching ktrickle");
            CUresult r = CUDA_SUCCESS;
            for (int k = 0; k < n && r == CUDA_SUCCESS; k++) {
                r = launch(CU_STREAM_LEGACY, us, "ktrickle");
                struct timespec ts = {gap / 1000000, (gap % 1000000) * 1000L};
                nanosleep(&ts, NULL);
            }
            say("launched ktrickle %s", err_name(r));
        } else if (strcmp(c, "memcpy") == 0) {
            const char *sa = ARG();
            CUstream s = stream_arg(sa);
            static char host[4096];
            CUdeviceptr d;
            CK(cuMemAlloc(&d, sizeof host));
            CUresult r = s == CU_STREAM_LEGACY ? cuMemcpyHtoD(d, host, sizeof host)
                                               : cuMemcpyHtoDAsync(d, host, sizeof host, s);
            say("memcpy %s", err_name(r));
        } else if (strcmp(c, "sync") == 0) {
            CUresult r = cuCtxSynchronize();
            say("sync %s", err_name(r));
        } else if (strcmp(c, "ssync") == 0) {
            CUresult r = cuStreamSynchronize(stream_arg(ARG()));
            say("ssync %s", err_name(r));
        } else if (strcmp(c, "threads") == 0) {
            int n = atoi(ARG());
            unsigned long long us = strtoull(ARG(), NULL, 10);
            struct thr *t = calloc((size_t)n, sizeof *t);
            for (int k = 0; k < n; k++) {
                t[k].i = k;
                t[k].us = us;
                pthread_create(&t[k].th, NULL, thread_main, &t[k]);
            }
            for (int k = 0; k < n; k++)
                pthread_join(t[k].th, NULL);
            free(t);
            say("threads done");
        } else if (strcmp(c, "bg_launch") == 0) {
            static struct thr bg;
            bg.i = 99;
            bg.us = strtoull(ARG(), NULL, 10);
            pthread_create(&bg.th, NULL, thread_main, &bg);
            say("bg started");
        } else if (strcmp(c, "capture_begin") == 0) {
            CUresult r = cuStreamBeginCapture(stream_arg(ARG()), CU_STREAM_CAPTURE_MODE_GLOBAL);
            say("capture_begin %s", err_name(r));
        } else if (strcmp(c, "capture_end") == 0) {
            CUstream s = stream_arg(ARG());
            say("ending capture"); /* before the call: the drain may end as it returns */
            CUresult r = cuStreamEndCapture(s, &graph);
            if (r == CUDA_SUCCESS)
                r = cuGraphInstantiate(&graph_exec, graph, 0);
            say("capture_end %s", err_name(r));
        } else if (strcmp(c, "graph_launch") == 0) {
            CUresult r = cuGraphLaunch(graph_exec, stream_arg(ARG()));
            say("graph_launch %s", err_name(r));
        } else if (strcmp(c, "destroy") == 0) {
            CUresult r = cuStreamDestroy(stream_arg(ARG()));
            say("destroy %s", err_name(r));
        } else if (strcmp(c, "wait") == 0) {
            say("wait");
            char line[256];
            if (!fgets(line, sizeof line, stdin))
                exit(0);
        } else if (strcmp(c, "sleep") == 0) {
            unsigned ms = (unsigned)atoi(ARG());
            struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        } else if (strcmp(c, "gate") == 0) {
            say("gate %d", gate ? gate() : -1);
        } else if (strcmp(c, "count") == 0) {
            const char *n = ARG();
            say("count %s %lld", n, calls ? calls(n) : -2);
        } else if (strcmp(c, "fork") == 0) {
            const char *mode = ARG();
            pid_t pid = fork();
            if (pid == 0) {
                if (strcmp(mode, "cuda") == 0)
                    child_cuda();
                if (strcmp(mode, "linger") == 0) {
                    sleep(3);
                    _exit(0);
                }
                say("child ok");
                exit(0);
            }
            if (strcmp(mode, "linger") == 0) {
                say("forked linger child=%d", (int)pid);
                continue;
            }
            int st = 0;
            waitpid(pid, &st, 0);
            say("forked %s status=%d", mode, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
        } else if (strcmp(c, "alloc") == 0) {
            CUdeviceptr p = 0;
            CUresult r = cuMemAlloc(&p, size_arg(ARG()));
            new_alloc("alloc", r, p);
        } else if (strcmp(c, "alloc1") == 0) {
            unsigned int p = 0; /* CUdeviceptr_v1 */
            CUresult (*fn)(unsigned int *, unsigned int) =
                (CUresult(*)(unsigned int *, unsigned int))dlsym(RTLD_DEFAULT, "cuMemAlloc");
            CUresult r = fn ? fn(&p, (unsigned int)size_arg(ARG())) : CUDA_ERROR_NOT_FOUND;
            new_alloc("alloc1", r, p);
        } else if (strcmp(c, "allocs") == 0) {
            int n = atoi(ARG());
            unsigned long long sz = size_arg(ARG());
            CUresult r = CUDA_SUCCESS;
            for (int k = 0; k < n && r == CUDA_SUCCESS && nallocs < MAX_ALLOCS; k++) {
                CUdeviceptr p;
                r = cuMemAlloc(&p, sz);
                if (r == CUDA_SUCCESS)
                    allocs[nallocs++] = p;
            }
            say("allocs %d %s", nallocs, err_name(r));
        } else if (strcmp(c, "pitch") == 0) {
            size_t w = size_arg(ARG()), h = size_arg(ARG()), pitch = 0;
            CUdeviceptr p = 0;
            CUresult r = cuMemAllocPitch(&p, &pitch, w, h, 4);
            new_alloc("pitch", r, p);
            say("pitch_bytes %zu", pitch);
        } else if (strcmp(c, "managed") == 0) {
            CUdeviceptr p = 0;
            CUresult r = cuMemAllocManaged(&p, size_arg(ARG()), CU_MEM_ATTACH_GLOBAL);
            new_alloc("managed", r, p);
        } else if (strcmp(c, "aalloc") == 0) {
            CUstream s = stream_arg(ARG());
            CUdeviceptr p = 0;
            CUresult r = cuMemAllocAsync(&p, size_arg(ARG()), s);
            new_alloc("aalloc", r, p);
        } else if (strcmp(c, "palloc") == 0) {
            CUstream s = stream_arg(ARG());
            CUdeviceptr p = 0;
            CUresult r = pool ? CUDA_SUCCESS : new_pool(&pool);
            if (r == CUDA_SUCCESS)
                r = cuMemAllocFromPoolAsync(&p, size_arg(ARG()), pool, s);
            new_alloc("palloc", r, p);
        } else if (strcmp(c, "free") == 0 || strcmp(c, "afree") == 0) {
            int k = atoi(ARG());
            CUstream s = c[0] == 'a' ? stream_arg(ARG()) : NULL;
            CUresult r = k >= 0 && k < nallocs && allocs[k]
                             ? (c[0] == 'a' ? cuMemFreeAsync(allocs[k], s) : cuMemFree(allocs[k]))
                             : CUDA_ERROR_INVALID_VALUE;
            if (r == CUDA_SUCCESS)
                allocs[k] = 0;
            say("%s %d %s", c, k, err_name(r));
        } else if (strcmp(c, "frees") == 0) {
            CUresult r = CUDA_SUCCESS;
            for (int k = 0; k < nallocs && r == CUDA_SUCCESS; k++)
                if (allocs[k] && (r = cuMemFree(allocs[k])) == CUDA_SUCCESS)
                    allocs[k] = 0;
            say("frees %s", err_name(r));
        } else if (strcmp(c, "vcreate") == 0) {
            CUmemAllocationProp prop = {0};
            prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
            prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            prop.location.id = cur_dev;
            size_t sz = size_arg(ARG());
            CUresult r = nhandles < 64 ? cuMemCreate(&handles[nhandles], sz, &prop, 0)
                                       : CUDA_ERROR_INVALID_VALUE;
            if (r == CUDA_SUCCESS) {
                handle_size[nhandles] = sz;
                say("vcreate %d %s", nhandles++, err_name(r));
            } else
                say("vcreate -1 %s", err_name(r));
        } else if (strcmp(c, "vmap") == 0) {
            int h = atoi(ARG());
            size_t sz = h >= 0 && h < nhandles ? handle_size[h] : 0;
            CUdeviceptr va = 0;
            CUresult r =
                sz && nmaps < 64 ? cuMemAddressReserve(&va, sz, 0, 0, 0) : CUDA_ERROR_INVALID_VALUE;
            if (r == CUDA_SUCCESS)
                r = cuMemMap(va, sz, 0, handles[h], 0);
            if (r == CUDA_SUCCESS) {
                CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, cur_dev},
                                       CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
                r = cuMemSetAccess(va, sz, &acc, 1);
            }
            if (r == CUDA_SUCCESS) {
                maps[nmaps].va = va;
                maps[nmaps].size = sz;
                say("vmap %d %s", nmaps++, err_name(r));
            } else
                say("vmap -1 %s", err_name(r));
        } else if (strcmp(c, "vunmap") == 0) {
            int m = atoi(ARG());
            CUresult r = m >= 0 && m < nmaps ? cuMemUnmap(maps[m].va, maps[m].size)
                                             : CUDA_ERROR_INVALID_VALUE;
            if (r == CUDA_SUCCESS)
                r = cuMemAddressFree(maps[m].va, maps[m].size);
            say("vunmap %d %s", m, err_name(r));
        } else if (strcmp(c, "vrelease") == 0) {
            int h = atoi(ARG());
            CUresult r =
                h >= 0 && h < nhandles ? cuMemRelease(handles[h]) : CUDA_ERROR_INVALID_VALUE;
            say("vrelease %d %s", h, err_name(r));
        } else if (strcmp(c, "meminfo") == 0) {
            size_t f = 0, t = 0;
            CUresult r = cuMemGetInfo(&f, &t);
            say("meminfo %s %zu %zu", err_name(r), f, t);
        } else if (strcmp(c, "totalmem") == 0) {
            size_t t = 0;
            CUresult r = cuDeviceTotalMem(&t, cur_dev);
            say("totalmem %s %zu", err_name(r), t);
        } else if (strcmp(c, "newctx") == 0) {
            CUresult r = cuCtxCreate(&own_ctx, NULL, 0, cur_dev);
            if (r == CUDA_SUCCESS)
                r = cuCtxSetCurrent(own_ctx);
            say("newctx %s", err_name(r));
        } else if (strcmp(c, "delctx") == 0) {
            CUresult r = cuCtxDestroy(own_ctx);
            if (r == CUDA_SUCCESS)
                r = cuCtxSetCurrent(ctxs[cur_dev]);
            say("delctx %s", err_name(r));
        } else if (strcmp(c, "hookmem") == 0) {
            int (*hm)(int, unsigned long long *, unsigned long long *, unsigned long long *) =
                (int (*)(int, unsigned long long *, unsigned long long *,
                         unsigned long long *))dlsym(RTLD_DEFAULT, "gpushare_hook_memory");
            unsigned long long u = 0, m = 0, pk = 0;
            int r = hm ? hm(cur_dev, &u, &m, &pk) : -2;
            say("hookmem %d %llu %llu %llu", r, u, m, pk);
        } else if (strcmp(c, "bursts") == 0) {
            int (*hb)(int, long long *, long long *) =
                (int (*)(int, long long *, long long *))dlsym(RTLD_DEFAULT, "gpushare_hook_bursts");
            long long p90 = 0, last = 0;
            int r = hb ? hb(cur_dev, &p90, &last) : -2;
            for (int k = 0; r == 1 && k < 5000; k++) { /* until measured: 5 s at most */
                struct timespec ms = {0, 1000000};
                nanosleep(&ms, NULL);
                r = hb(cur_dev, &p90, &last);
            }
            say("bursts %d %lld %lld", r, p90, last);
        } else if (strcmp(c, "notices") == 0) {
            int (*fn)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "gpushare_hook_wait_notices");
            int on = atoi(ARG());
            say("notices %d", fn ? fn(on) : -1);
        } else if (strcmp(c, "waitwatch") == 0) {
            void *fn = dlsym(RTLD_DEFAULT, "gpushare_hook_wait_state");
            pthread_t th;
            if (!fn || pthread_create(&th, NULL, wait_watch, fn) != 0) {
                say("error waitwatch");
                return 2;
            }
            say("waitwatch");
        } else if (strcmp(c, "end") == 0) {
            break;
        } else if (strcmp(c, "exit") == 0) {
            say("exiting");
            exit(0);
        } else {
            say("error unknown-step %s", c);
            return 2;
        }
    }
    say("end");
    return 0;
}
