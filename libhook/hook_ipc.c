/*
 * hook_ipc.c - legacy IPC handles for swap-tier memory (hook_ipc.h).
 *
 * The exporting process serves "\0gpushare-ipc-<pid>-<random>" (a Linux
 * abstract socket: nothing on the filesystem, gone with the process) on a
 * thread started by its first export.  A request is the range's base and
 * the handle's ask key; the answer is the range's shape, the handle's
 * proof and one descriptor per segment.  Who may trust whom, and why, is
 * in hook_ipc_handle.h.
 */
#define _GNU_SOURCE
#include "hook_cuda.h" /* first: it sets how cuda.h declares the ABI */
#include "hook_real.h"

#include "hook_ipc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fd_pass.h"
#include "hook_ipc_handle.h"
#include "hook_swap.h"
#include "log.h"
#include "proc_alive.h"

_Static_assert(GS_IPC_HANDLE_BYTES == CU_IPC_HANDLE_SIZE, "the handle is a CUipcMemHandle");

struct request {
    uint64_t base;
    unsigned char ask[GS_SWAP_IPC_KEY];
    uint32_t unused;
};

struct answer {
    int32_t ok;
    int32_t nseg;
    uint64_t size, bytes, seg_bytes;
    int32_t dev;
    unsigned char proof[GS_SWAP_IPC_KEY];
    char error[100];
};

/* Connections waiting for their request: the server never waits on one
 * (a peer that connects and says nothing would hold up everybody else's
 * imports); each has REQUEST_MS to ask, and when PENDING are waiting the
 * oldest is dropped for a new one.  A real importer asks as soon as it
 * has connected. */
#define PENDING    64
#define REQUEST_MS 2000
#define ANSWER_MS  5000

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int server_fd = -1;
static pid_t server_pid;
static ino_t server_ino;                /* its inode: still ours after a fork? */
static uint64_t server_name;            /* the random part of its name */
static unsigned long long server_start; /* this process' start time */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A request refused (a wrong key, a range freed): said a few times, so
 * that someone asking in a loop cannot fill the program's output. */
static void refused(int c, const char *why)
{
    static unsigned count;
    unsigned n = __atomic_add_fetch(&count, 1, __ATOMIC_RELAXED);
    if (n > 5)
        return;
    struct ucred cred = {0, 0, 0};
    socklen_t len = sizeof cred;
    getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len);
    gs_warn("CUDA IPC: refused pid %d (uid %u) the memory it asked for: %s%s", (int)cred.pid,
            (unsigned)cred.uid, why, n == 5 ? " (further refusals are not logged)" : "");
}

static void serve_one(int c)
{
    struct request q;
    if (recv(c, &q, sizeof q, MSG_DONTWAIT) != (ssize_t)sizeof q)
        return; /* gone, or not an importer of ours */
    struct answer a;
    memset(&a, 0, sizeof a);
    int fds[GS_FD_PASS_MAX], n = -1;
    gs_swap_shape_t shape;
    gs_swap_engine_t *e = hook_swap_engine();
    if (e)
        n = gs_swap_export(e, (CUdeviceptr)q.base, q.ask, fds, GS_FD_PASS_MAX, &shape, a.proof,
                           a.error, sizeof a.error);
    else
        snprintf(a.error, sizeof a.error, "no swap tier in the exporter");
    if (n > 0) {
        a.ok = 1;
        a.nseg = n;
        a.size = shape.size;
        a.bytes = shape.bytes;
        a.seg_bytes = shape.seg_bytes;
        a.dev = shape.dev;
    } else {
        n = 0;
        refused(c, a.error);
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
    struct {
        int fd;
        int64_t since;
    } wait[PENDING];
    int nwait = 0;
    for (;;) {
        struct pollfd pf[PENDING + 1];
        pf[0] = (struct pollfd){listen_fd, POLLIN, 0};
        int64_t now = now_ms(), timeout = -1;
        for (int i = 0; i < nwait; i++) {
            pf[i + 1] = (struct pollfd){wait[i].fd, POLLIN, 0};
            int64_t left = wait[i].since + REQUEST_MS - now;
            left = left < 0 ? 0 : left;
            timeout = timeout < 0 || left < timeout ? left : timeout;
        }
        int r = poll(pf, (nfds_t)nwait + 1, (int)timeout);
        if (r < 0 && errno != EINTR) {
            gs_warn("CUDA IPC server stops: poll: %s", strerror(errno));
            break;
        }
        now = now_ms();
        int kept = 0;
        for (int i = 0; i < nwait; i++) {
            int ready = r > 0 && pf[i + 1].revents != 0;
            if (ready)
                serve_one(wait[i].fd);
            if (ready || now - wait[i].since >= REQUEST_MS)
                close(wait[i].fd);
            else
                wait[kept++] = wait[i];
        }
        nwait = kept;
        if (r <= 0 || !pf[0].revents)
            continue;
        if (!(pf[0].revents & POLLIN)) {
            gs_warn("CUDA IPC server stops: its socket failed");
            break;
        }
        for (int k = 0; k < 16; k++) { /* a round's worth: then the requests */
            int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (c < 0) {
                if (errno == EINTR || errno == ECONNABORTED)
                    continue;
                if (errno == EMFILE || errno == ENFILE) /* in the queue until there is room */
                    poll(NULL, 0, 100);
                else if (errno != EAGAIN)
                    gs_warn("CUDA IPC server: accept: %s", strerror(errno));
                break;
            }
            if (nwait == PENDING) {
                close(wait[0].fd);
                memmove(&wait[0], &wait[1], sizeof wait[0] * (PENDING - 1));
                nwait--;
            }
            wait[nwait].fd = c;
            wait[nwait].since = now;
            nwait++;
        }
    }
    for (int i = 0; i < nwait; i++)
        close(wait[i].fd);
    return NULL;
}

/* The server of this process, started once (again in a forked child);
 * its name and this process' start time in *name and *start.  0, or -1
 * with a reason in why. */
static int serve(uint64_t *name, unsigned long long *start, char *why, size_t whylen)
{
    pthread_mutex_lock(&mu);
    int rc = 0;
    if (server_fd < 0 || server_pid != getpid()) {
        /* The parent's, inherited: its name is not ours to hold (unless the
         * child closed it and the number is another file's now). */
        struct stat sb;
        if (server_fd >= 0 && fstat(server_fd, &sb) == 0 && sb.st_ino == server_ino)
            close(server_fd);
        server_fd = -1;
        rc = -1;
        unsigned long long st = gs_proc_start(getpid());
        uint64_t nm = 0;
        int fd = st ? gs_ipc_listen(getpid(), NULL, &nm) : -1;
        if (!st)
            snprintf(why, whylen, "cannot read this process' start time (/proc/%d/stat)",
                     (int)getpid());
        else if (fd < 0)
            snprintf(why, whylen, "cannot listen: %s", strerror(errno));
        else if (fcntl(fd, F_SETFL, O_NONBLOCK) != 0 || fstat(fd, &sb) != 0)
            snprintf(why, whylen, "fcntl: %s", strerror(errno));
        else {
            sigset_t all, old;
            sigfillset(&all);
            pthread_sigmask(SIG_SETMASK, &all, &old); /* signals are the program's */
            pthread_t t;
            int err = pthread_create(&t, NULL, server_main, (void *)(intptr_t)fd);
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            if (err == 0) {
                pthread_detach(t);
                server_fd = fd;
                server_pid = getpid();
                server_ino = sb.st_ino;
                server_name = nm;
                server_start = st;
                rc = 0;
            } else
                snprintf(why, whylen, "cannot start its thread: %s", strerror(err));
        }
        if (rc != 0 && fd >= 0)
            close(fd);
    }
    *name = server_name;
    *start = server_start;
    pthread_mutex_unlock(&mu);
    return rc;
}

int hook_ipc_get(CUipcMemHandle *handle, CUdeviceptr p, CUresult *r)
{
    if (!hook_swap_range(p, NULL, NULL))
        return 0; /* plain memory: the driver's own handle */
    if (!handle) {
        *r = CUDA_ERROR_INVALID_VALUE;
        return 1;
    }
    gs_ipc_handle_t h = {.pid = (int32_t)getpid(), .uid = (uint32_t)geteuid()};
    gs_swap_ipc_keys_t fresh;
    CUdeviceptr base = 0;
    char why[160];
    *r = CUDA_ERROR_OPERATING_SYSTEM;
    unsigned long long start = 0;
    if (serve(&h.name, &start, why, sizeof why) != 0) {
        gs_warn("cannot share GPU memory with other processes: %s", why);
        return 1;
    }
    if (gs_ipc_random(&fresh, sizeof fresh) != 0) {
        gs_warn("cannot share GPU memory with other processes: getrandom: %s", strerror(errno));
        return 1;
    }
    if (gs_swap_ipc_keys(hook_swap_engine(), p, &fresh, &h.keys, &base) != 0) {
        *r = CUDA_ERROR_INVALID_VALUE; /* freed meanwhile */
        return 1;
    }
    h.start = start;
    h.base = (uint64_t)base;
    memset(handle, 0, sizeof *handle);
    gs_ipc_handle_pack(&h, (unsigned char *)handle->reserved);
    *r = CUDA_SUCCESS;
    return 1;
}

/* Asks the exporter's server for the range: its answer and descriptors
 * (*n of them), or CUDA_ERROR_INVALID_HANDLE with the reason logged.  A
 * server that hung up without a word (it drops its oldest waiting
 * connection when others crowd in) is CUDA_ERROR_NOT_READY, not logged,
 * unless this is the last try. */
static CUresult ask(const gs_ipc_handle_t *h, struct answer *a, int *fds, int *n, int last)
{
    struct sockaddr_un sa;
    char at[64], why[200] = "";
    socklen_t len = gs_ipc_address((pid_t)h->pid, h->name, &sa, at, sizeof at);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    /* connect(2) waits while the server's queue is full: not for ever. */
    struct timeval tv = {ANSWER_MS / 1000, 0};
    struct request q;
    memset(&q, 0, sizeof q);
    q.base = h->base;
    memcpy(q.ask, h->keys.ask, sizeof q.ask);
    struct pollfd pf = {s, POLLIN, 0};
    const char *step = NULL;
    *n = 0;
    if (s < 0)
        step = "socket";
    else if (setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0)
        step = "setsockopt";
    else if (connect(s, (struct sockaddr *)&sa, len) != 0)
        step = "connect";
    else if (gs_ipc_check_server(s, h, why, sizeof why) != 0) {
        /* Before the key leaves this process: an impostor learns nothing. */
        gs_warn("refusing a CUDA IPC handle of pid %d: %s (at %s)", (int)h->pid, why, at);
        close(s);
        return CUDA_ERROR_INVALID_HANDLE;
    } else if (send(s, &q, sizeof q, MSG_NOSIGNAL) != (ssize_t)sizeof q)
        step = "send";
    else if (poll(&pf, 1, ANSWER_MS) != 1) {
        step = "no answer in 5 s";
        errno = ETIMEDOUT;
    } else {
        ssize_t got = gs_fd_recv(s, a, sizeof *a, fds, GS_FD_PASS_MAX, n);
        if (got == 0 && !last) {
            close(s);
            return CUDA_ERROR_NOT_READY;
        }
        if (got != (ssize_t)sizeof *a) {
            step = "receive";
            if (got >= 0)
                errno = got ? EPROTO : ECONNRESET;
        }
    }
    int err = errno;
    if (s >= 0)
        close(s);
    if (step)
        gs_warn("cannot open a CUDA IPC handle of pid %d: its exporter does not answer at %s "
                "(%s: %s)",
                (int)h->pid, at, step, strerror(err));
    else if (!a->ok) {
        a->error[sizeof a->error - 1] = '\0';
        gs_warn("cannot open a CUDA IPC handle of pid %d: %s", (int)h->pid,
                a->error[0] ? a->error : "refused");
    } else if (!gs_swap_ipc_same(a->proof, h->keys.proof))
        gs_warn("refusing a CUDA IPC handle of pid %d: the server at %s does not know the "
                "handle's proof",
                (int)h->pid, at);
    else if (a->nseg <= 0 || *n != a->nseg)
        gs_warn("cannot open a CUDA IPC handle of pid %d: %d descriptors in its answer, %d "
                "expected",
                (int)h->pid, *n, (int)a->nseg);
    else
        return CUDA_SUCCESS;
    for (int i = 0; i < *n; i++)
        close(fds[i]);
    *n = 0;
    return CUDA_ERROR_INVALID_HANDLE;
}

int hook_ipc_open(CUdeviceptr *p, const CUipcMemHandle *handle, CUresult *r)
{
    gs_ipc_handle_t h;
    int ours = gs_ipc_handle_unpack((const unsigned char *)handle->reserved, &h);
    if (ours == 0)
        return 0; /* the driver's handle */
    *r = CUDA_ERROR_INVALID_VALUE;
    if (!p)
        return 1;
    if (ours < 0) {
        gs_warn("refusing a CUDA IPC handle of an older gpushare: its exporter cannot be "
                "told from an impostor (export it again with this version)");
        *r = CUDA_ERROR_INVALID_HANDLE;
        return 1;
    }
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
    struct answer a;
    int fds[GS_FD_PASS_MAX], n = 0;
    for (int tries = 1; (*r = ask(&h, &a, fds, &n, tries == 3)) == CUDA_ERROR_NOT_READY; tries++)
        ;
    if (*r != CUDA_SUCCESS)
        return 1;
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
