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
            CUresult r = cuStreamEndCapture(stream_arg(ARG()), &graph);
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
