/*
 * simtest.c - see simtest.h.
 */
#include "simtest.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

static char seg_name[128];
static char log_path[256];
static int counter;
static int in_child;

const char *simtest_err(CUresult r)
{
    const char *n = NULL;
    if (cuGetErrorName(r, &n) != CUDA_SUCCESS || !n)
        return "(unknown CUresult)";
    return n;
}

void simtest_child_fail(const char *file, int line, const char *what, CUresult r)
{
    fprintf(stderr, "child %d: %s:%d: %s failed", (int)getpid(), file, line, what);
    if (r)
        fprintf(stderr, " with %s", simtest_err(r));
    fprintf(stderr, "\n");
    _exit(1);
}

const char *simtest_name(void)
{
    return seg_name;
}

void simtest_fresh(const char *memory, const char *concurrency)
{
    snprintf(seg_name, sizeof seg_name, "/gpusim-test-%d-%d", (int)getpid(), ++counter);
    setenv("GPUSHARE_SIM_NAME", seg_name, 1);
    if (memory)
        setenv("GPUSHARE_SIM_MEMORY", memory, 1);
    else
        unsetenv("GPUSHARE_SIM_MEMORY");
    if (concurrency)
        setenv("GPUSHARE_SIM_CONCURRENCY", concurrency, 1);
    else
        unsetenv("GPUSHARE_SIM_CONCURRENCY");
    unsetenv("GPUSHARE_SIM_DEVICES");
    unsetenv("GPUSHARE_SIM_LOG");
    unsetenv("GPUSHARE_SIM_KERNEL_US");
    unsetenv("GPUSHARE_SIM_HOST_MEMORY");
    unsetenv("GPUSHARE_SIM_CONTEXT_MEMORY");
    log_path[0] = 0;
    gpusim_reset(seg_name);
}

const char *simtest_fresh_log(void)
{
    const char *dir = getenv("TMPDIR");
    snprintf(log_path, sizeof log_path, "%s/gpusim-test-%d-%d.log", dir && *dir ? dir : "/tmp",
             (int)getpid(), counter);
    unlink(log_path);
    setenv("GPUSHARE_SIM_LOG", log_path, 1);
    return log_path;
}

int simtest_teardown(void **state)
{
    (void)state;
    if (seg_name[0])
        gpusim_reset(seg_name);
    if (log_path[0])
        unlink(log_path);
    return 0;
}

CUcontext simtest_init(void)
{
    CUcontext ctx = NULL;
    CUdevice dev;
    REQ_CU(cuInit(0));
    REQ_CU(cuDeviceGet(&dev, 0)); /* a handle, not the ordinal (CUDA_VISIBLE_DEVICES) */
    REQ_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    REQ_CU(cuCtxSetCurrent(ctx));
    return ctx;
}

uint64_t simtest_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void simtest_spawn(struct simchild *c, simchild_fn fn, void *arg)
{
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0)
        fail_msg("pipe: %s", strerror(errno));
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0) {
        in_child = 1;
        close(down[1]);
        close(up[0]);
        fn(down[0], up[1], arg);
        exit(0); /* runs the simulator's destructor (and LeakSanitizer) */
    }
    close(down[0]);
    close(up[1]);
    c->pid = pid;
    c->rd = up[0];
    c->wr = down[1];
}

void simtest_join(struct simchild *c)
{
    int st = 0;
    close(c->wr);
    close(c->rd);
    while (waitpid(c->pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("child %d failed (status 0x%x)", (int)c->pid, st);
}

void simtest_in_child(simchild_fn fn, void *arg)
{
    struct simchild c;
    simtest_spawn(&c, fn, arg);
    simtest_join(&c);
}

static void io_fail(const char *what)
{
    if (in_child) {
        fprintf(stderr, "child %d: %s failed (peer gone?)\n", (int)getpid(), what);
        _exit(2);
    }
    fail_msg("%s failed (child gone?)", what);
}

void simtest_send(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            io_fail("pipe write");
        b += w;
        n -= (size_t)w;
    }
}

void simtest_recv(int fd, void *p, size_t n)
{
    char *b = p;
    while (n) {
        ssize_t r = read(fd, b, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            io_fail("pipe read");
        b += r;
        n -= (size_t)r;
    }
}

void simtest_send_u64(int fd, uint64_t v)
{
    simtest_send(fd, &v, sizeof v);
}

uint64_t simtest_recv_u64(int fd)
{
    uint64_t v;
    simtest_recv(fd, &v, sizeof v);
    return v;
}

void simtest_wait_zombie(pid_t pid)
{
    siginfo_t si;
    while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) != 0)
        if (errno != EINTR)
            fail_msg("waitid(%d): %s", (int)pid, strerror(errno));
}

int simtest_readable(int fd)
{
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
}

void simtest_send_fd(int sock, int fd)
{
    char byte = 'F';
    struct iovec iov = {&byte, 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof ctl.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    while (sendmsg(sock, &msg, 0) < 0)
        if (errno != EINTR)
            io_fail("sendmsg");
}

int simtest_recv_fd(int sock)
{
    char byte;
    struct iovec iov = {&byte, 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof ctl.buf;
    ssize_t n;
    while ((n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
        ;
    struct cmsghdr *c = n == 1 ? CMSG_FIRSTHDR(&msg) : NULL;
    if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
        io_fail("recvmsg");
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

int simtest_access_faults(volatile void *addr, int write)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* the default action, not a sanitizer's handler: die of the fault */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);
        volatile char *p = addr;
        if (write)
            *p = 1;
        else
            (void)*p;
        _exit(0);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV)
        return 1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static int field_str(const char *line, const char *key, char *out, size_t len)
{
    char pat[32];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = strstr(line, pat);
    if (!p)
        return -1;
    p += strlen(pat);
    size_t i = 0;
    while (*p && *p != '"' && i + 1 < len)
        out[i++] = *p++;
    out[i] = 0;
    return 0;
}

static int field_num(const char *line, const char *key, long long *out)
{
    char pat[32];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p)
        return -1;
    *out = strtoll(p + strlen(pat), NULL, 10);
    return 0;
}

int simtest_read_log(const char *path, struct simlog *out, int max)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[2048];
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        struct simlog *r = &out[n];
        long long v;
        memset(r, 0, sizeof *r);
        r->bytes = -1;
        if (field_num(line, "pid", &v) == 0)
            r->pid = (int)v;
        if (field_num(line, "dev", &v) == 0)
            r->dev = (int)v;
        if (field_num(line, "start_ns", &v) == 0)
            r->start = (unsigned long long)v;
        if (field_num(line, "end_ns", &v) == 0)
            r->end = (unsigned long long)v;
        if (field_num(line, "bytes", &v) == 0)
            r->bytes = v;
        field_str(line, "op", r->op, sizeof r->op);
        field_str(line, "name", r->name, sizeof r->name);
        field_str(line, "stream", r->stream, sizeof r->stream);
        n++;
    }
    fclose(f);
    return n;
}
