/*
 * hook_ipc.c - legacy IPC handles for swap-tier memory (hook_ipc.h).
 *
 * The exporting process serves "\0gpushare-ipc-<pid>" (a Linux abstract
 * socket: nothing on the filesystem, gone with the process) on a thread
 * started by its first export.  A request is the range's base address; the
 * answer is the range's shape and one descriptor per segment.
 */
#define _GNU_SOURCE
#include "hook_cuda.h" /* first: it sets how cuda.h declares the ABI */
#include "hook_real.h"

#include "hook_ipc.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fd_pass.h"
#include "hook_swap.h"
#include "log.h"

static const char magic[8] = "gsIPCv1";

struct handle_bits { /* inside CUipcMemHandle's 64 bytes */
    char magic[8];
    int32_t pid;
    int32_t unused;
    uint64_t base;
};

struct answer {
    int32_t ok;
    int32_t nseg;
    uint64_t size, bytes, seg_bytes;
    int32_t dev;
    char error[100];
};

_Static_assert(sizeof(struct handle_bits) <= CU_IPC_HANDLE_SIZE, "IPC handle too small");

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int server_fd = -1;
static pid_t server_pid;

static socklen_t address(pid_t pid, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "gpushare-ipc-%d", (int)pid);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static void serve_one(int c)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    uint64_t base = 0;
    struct answer a = {0};
    int fds[GS_FD_PASS_MAX], n = 0;
    struct pollfd p = {c, POLLIN, 0};
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        (cred.uid != getuid() && cred.uid != 0)) {
        snprintf(a.error, sizeof a.error, "not the same user");
    } else if (poll(&p, 1, 2000) != 1 || recv(c, &base, sizeof base, 0) != sizeof base) {
        snprintf(a.error, sizeof a.error, "no request");
    } else {
        gs_swap_shape_t shape;
        gs_swap_engine_t *e = hook_swap_engine();
        n = e ? gs_swap_export(e, (CUdeviceptr)base, fds, GS_FD_PASS_MAX, &shape, a.error,
                               sizeof a.error)
              : -1;
        if (n > 0) {
            a = (struct answer){1, n, shape.size, shape.bytes, shape.seg_bytes, shape.dev, ""};
        } else
            n = 0;
    }
    gs_fd_send(c, &a, sizeof a, fds, n);
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

/* The listening socket comes as the argument: server_fd is set only after
 * the thread starts, and a thread that read it first accepted on -1 and
 * quit, leaving the process's handles unanswerable (seen under load). */
static void *server_main(void *arg)
{
    int listen_fd = (int)(intptr_t)arg;
    for (;;) {
        int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            gs_warn("CUDA IPC server stops: accept: %s", strerror(errno));
            return NULL;
        }
        serve_one(c);
        close(c);
    }
}

/* The server of this process, started once (again in a forked child). */
static int serve(void)
{
    pthread_mutex_lock(&mu);
    if (server_fd >= 0 && server_pid == getpid()) {
        pthread_mutex_unlock(&mu);
        return 0;
    }
    struct sockaddr_un sa;
    socklen_t len = address(getpid(), &sa);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    int rc = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, len) == 0 && listen(fd, 16) == 0) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old); /* signals are the program's */
        pthread_t t;
        if (pthread_create(&t, NULL, server_main, (void *)(intptr_t)fd) == 0) {
            pthread_detach(t);
            server_fd = fd;
            server_pid = getpid();
            rc = 0;
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (rc != 0 && fd >= 0)
        close(fd);
    pthread_mutex_unlock(&mu);
    return rc;
}

int hook_ipc_get(CUipcMemHandle *handle, CUdeviceptr p, CUresult *r)
{
    CUdeviceptr base;
    size_t size;
    if (!hook_swap_range(p, &base, &size))
        return 0; /* plain memory: the driver's own handle */
    if (!handle) {
        *r = CUDA_ERROR_INVALID_VALUE;
        return 1;
    }
    if (serve() != 0) {
        gs_warn("cannot share GPU memory with other processes: %s", strerror(errno));
        *r = CUDA_ERROR_OUT_OF_MEMORY;
        return 1;
    }
    struct handle_bits h = {.pid = (int32_t)getpid(), .base = (uint64_t)base};
    memcpy(h.magic, magic, sizeof magic);
    memset(handle, 0, sizeof *handle);
    memcpy(handle->reserved, &h, sizeof h);
    *r = CUDA_SUCCESS;
    return 1;
}

int hook_ipc_open(CUdeviceptr *p, const CUipcMemHandle *handle, CUresult *r)
{
    struct handle_bits h;
    memcpy(&h, handle->reserved, sizeof h);
    if (memcmp(h.magic, magic, sizeof magic) != 0)
        return 0; /* the driver's handle */
    *r = CUDA_ERROR_INVALID_VALUE;
    if (!p)
        return 1;
    if (h.pid == (int32_t)getpid()) /* as the driver: not in the process that made it */
        return 1;
    gs_swap_engine_t *e = hook_swap_engine();
    CUcontext ctx = NULL;
    CUdevice dev = 0;
    if (!e || !hook_cu.ctxGetCurrent || hook_cu.ctxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx ||
        !hook_cu.ctxGetDevice || hook_cu.ctxGetDevice(&dev) != CUDA_SUCCESS) {
        *r = CUDA_ERROR_INVALID_CONTEXT;
        return 1;
    }
    struct sockaddr_un sa;
    socklen_t len = address((pid_t)h.pid, &sa);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct answer a = {0};
    int fds[GS_FD_PASS_MAX], n = 0;
    struct pollfd pf = {s, POLLIN, 0};
    const char *step = NULL;
    if (s < 0)
        step = "socket";
    else if (connect(s, (struct sockaddr *)&sa, len) != 0)
        step = "connect";
    else if (send(s, &h.base, sizeof h.base, MSG_NOSIGNAL) != sizeof h.base)
        step = "send";
    else if (poll(&pf, 1, 5000) != 1) {
        step = "no answer in 5 s";
        errno = ETIMEDOUT;
    } else if (gs_fd_recv(s, &a, sizeof a, fds, GS_FD_PASS_MAX, &n) != (ssize_t)sizeof a)
        step = "receive";
    if (step || !a.ok || n != a.nseg) {
        int err = errno;
        a.error[sizeof a.error - 1] = '\0';
        if (step)
            gs_warn("cannot open a CUDA IPC handle of pid %d: its process does not answer (%s: %s)",
                    (int)h.pid, step, strerror(err));
        else
            gs_warn("cannot open a CUDA IPC handle of pid %d: %s", (int)h.pid,
                    a.error[0] ? a.error : "descriptors missing from its answer");
        for (int i = 0; i < n; i++)
            close(fds[i]);
        if (s >= 0)
            close(s);
        return 1;
    }
    close(s);
    gs_swap_shape_t shape = {(CUdeviceptr)h.base, a.size, a.bytes, a.seg_bytes, a.nseg, a.dev};
    *r = gs_swap_import(e, (int)dev, &shape, fds, p);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    return 1;
}

int hook_ipc_close(CUdeviceptr p, CUresult *r)
{
    gs_swap_engine_t *e = hook_swap_engine();
    int ours = 0;
    if (e)
        *r = gs_swap_unimport(e, p, &ours);
    return ours;
}
