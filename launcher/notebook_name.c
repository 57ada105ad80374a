/*
 * notebook_name.c - see notebook_name.h.
 *
 * The thread owns everything it uses (a job) and hands the answer over
 * through a pipe: the notebook's path, then end of file.  The watcher polls
 * the pipe's read end with its other sockets, and there is no memory shared
 * between the two.
 */
#define _GNU_SOURCE
#include "notebook_name.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "nb_server.h"

#define LOOKUP_S       30  /* how long to wait for the server to save the session */
#define FIRST_DELAY_MS 100 /* then x1.5 per attempt, up to MAX_DELAY_MS */
#define MAX_DELAY_MS   2000
#define IO_TIMEOUT_MS  2000 /* connect, send, each read */
#define MAX_ANSWER     (4 << 20)
#define MAX_FILE       65536

struct gs_nbname {
    int fd;
    char buf[4096];
    size_t len;
};

typedef struct {
    int fd; /* the pipe's write end */
    char kernel_id[160];
    char conn_dir[4096];
    pid_t parent;
} job_t;

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The whole of a small file that is the user's own and nobody else may
 * change (a token goes where it says).  Returns its length, or -1. */
static ssize_t read_own_file(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    struct stat st;
    ssize_t used = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == getuid() &&
        !(st.st_mode & 022)) {
        used = 0;
        ssize_t n;
        while ((size_t)used < len && (n = read(fd, buf + used, len - (size_t)used)) != 0) {
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                used = -1;
                break;
            }
            used += n;
        }
        if ((size_t)used == len)
            used = -1; /* too big for a runtime file */
    }
    close(fd);
    return used;
}

/* The runtime file of the server whose pid is parent, from the directories
 * Jupyter puts it in; 0 when found and usable. */
static int find_server(const job_t *job, gs_nb_server_t *server)
{
    char dirs[5][4096];
    int n = 0;
    if (job->conn_dir[0])
        snprintf(dirs[n++], sizeof dirs[0], "%s", job->conn_dir);
    const char *rt = getenv("JUPYTER_RUNTIME_DIR"), *data = getenv("JUPYTER_DATA_DIR");
    const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    if (rt && *rt)
        snprintf(dirs[n++], sizeof dirs[0], "%s", rt);
    if (data && *data)
        snprintf(dirs[n++], sizeof dirs[0], "%.4000s/runtime", data);
    else if (xdg && *xdg)
        snprintf(dirs[n++], sizeof dirs[0], "%.4000s/jupyter/runtime", xdg);
    else if (home && *home)
        snprintf(dirs[n++], sizeof dirs[0], "%.4000s/.local/share/jupyter/runtime", home);
    static const char *const kinds[] = {"nbserver", "jpserver"};
    char *text = malloc(MAX_FILE);
    if (!text)
        return -1;
    int rc = -1;
    for (int d = 0; d < n && rc != 0; d++)
        for (size_t k = 0; k < 2 && rc != 0; k++) {
            char path[4200], err[200];
            snprintf(path, sizeof path, "%.4096s/%s-%ld.json", dirs[d], kinds[k],
                     (long)job->parent);
            ssize_t len = read_own_file(path, text, MAX_FILE);
            if (len < 0)
                continue;
            if (gs_nb_server_parse(text, (size_t)len, server, err, sizeof err) != 0)
                gs_debug("notebook server file %s: %s", path, err);
            else if (server->secure)
                gs_debug("notebook server file %s: https, which is not spoken here", path);
            else
                rc = 0;
        }
    free(text);
    return rc;
}

static int wait_fd(int fd, short events)
{
    struct pollfd p = {.fd = fd, .events = events};
    int n;
    while ((n = poll(&p, 1, IO_TIMEOUT_MS)) < 0 && errno == EINTR)
        ;
    return n == 1 ? 0 : -1;
}

static int connect_with_timeout(int fd, const struct sockaddr *a, socklen_t alen)
{
    if (connect(fd, a, alen) == 0)
        return 0;
    if (errno != EINPROGRESS || wait_fd(fd, POLLOUT) != 0)
        return -1;
    int e = 0;
    socklen_t el = sizeof e;
    return getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0 ? 0 : -1;
}

static int open_server(const gs_nb_server_t *s)
{
    if (s->sock[0]) {
        struct sockaddr_un un = {.sun_family = AF_UNIX};
        snprintf(un.sun_path, sizeof un.sun_path, "%s", s->sock);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd >= 0 && connect_with_timeout(fd, (struct sockaddr *)&un, sizeof un) == 0)
            return fd;
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(s->host, port, &hints, &res) != 0)
        return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd >= 0 && connect_with_timeout(fd, a->ai_addr, a->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

/* One GET api/sessions: 1 found (path in out), 0 not yet, -1 give up. */
static int ask_server(const gs_nb_server_t *s, const char *kernel_id, char *out, size_t outlen)
{
    char req[1024], err[200];
    int rlen = gs_nb_sessions_request(s, req, sizeof req);
    if (rlen < 0)
        return -1;
    int fd = open_server(s);
    if (fd < 0)
        return 0; /* starting, or busy: again */
    int rc = 0;
    char *resp = malloc(MAX_ANSWER);
    size_t used = 0;
    for (int sent = 0; resp && sent < rlen;) {
        ssize_t n = send(fd, req + sent, (size_t)(rlen - sent), MSG_NOSIGNAL);
        if (n < 0 && errno == EAGAIN && wait_fd(fd, POLLOUT) == 0)
            continue;
        if (n <= 0)
            goto done;
        sent += (int)n;
    }
    while (resp && used < MAX_ANSWER) {
        ssize_t n = read(fd, resp + used, MAX_ANSWER - used);
        if (n < 0 && errno == EAGAIN && wait_fd(fd, POLLIN) == 0)
            continue;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            goto done;
        if (n == 0)
            break;
        used += (size_t)n;
    }
    if (resp) {
        rc = gs_nb_sessions_find(resp, used, kernel_id, out, outlen, err, sizeof err);
        if (rc < 0)
            gs_debug("the notebook server's sessions: %s", err);
        rc = rc == 1 ? 1 : rc == 0 ? 0 : -1;
    }
done:
    free(resp);
    close(fd);
    return rc;
}

static void lookup(const job_t *job, char *out, size_t outlen)
{
    out[0] = '\0';
    gs_nb_server_t server;
    if (find_server(job, &server) != 0) {
        /* No server started the kernel: a program that runs a notebook may
         * name it on its command line. */
        char path[64], *cmd = malloc(MAX_FILE);
        snprintf(path, sizeof path, "/proc/%ld/cmdline", (long)job->parent);
        FILE *f = cmd ? fopen(path, "re") : NULL;
        if (f) {
            size_t n = fread(cmd, 1, MAX_FILE, f);
            fclose(f);
            if (!gs_nb_from_cmdline(cmd, n, out, outlen))
                out[0] = '\0';
        }
        free(cmd);
        return;
    }
    int64_t end = now_ms() + LOOKUP_S * 1000;
    int delay = FIRST_DELAY_MS;
    int rc = 0;
    while (rc == 0 && now_ms() < end) {
        rc = ask_server(&server, job->kernel_id, out, outlen);
        if (rc == 0) {
            usleep((useconds_t)delay * 1000);
            delay = delay * 3 / 2 > MAX_DELAY_MS ? MAX_DELAY_MS : delay * 3 / 2;
        }
    }
    if (rc != 1)
        out[0] = '\0';
    explicit_bzero(server.token, sizeof server.token);
}

static void *run(void *arg)
{
    job_t *job = arg;
    char name[1024];
    lookup(job, name, sizeof name);
    for (size_t done = 0, len = strlen(name); done < len;) {
        ssize_t n = write(job->fd, name + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    close(job->fd);
    free(job);
    return NULL;
}

gs_nbname_t *gs_nbname_start(const char *kernel_id, const char *conn_path, pid_t parent)
{
    gs_nbname_t *self = calloc(1, sizeof *self);
    job_t *job = calloc(1, sizeof *job);
    int fds[2] = {-1, -1};
    if (!self || !job || pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
        goto fail;
    snprintf(job->kernel_id, sizeof job->kernel_id, "%s", kernel_id);
    if (conn_path) {
        snprintf(job->conn_dir, sizeof job->conn_dir, "%s", conn_path);
        char *slash = strrchr(job->conn_dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(job->conn_dir, sizeof job->conn_dir, ".");
    }
    job->parent = parent;
    job->fd = fds[1];
    self->fd = fds[0];
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, run, job);
    pthread_attr_destroy(&attr);
    if (rc != 0)
        goto fail;
    return self;
fail:
    if (fds[0] >= 0) {
        close(fds[0]);
        close(fds[1]);
    }
    free(job);
    free(self);
    return NULL;
}

int gs_nbname_fd(const gs_nbname_t *self)
{
    return self->fd;
}

int gs_nbname_result(gs_nbname_t *self, char *out, size_t outlen)
{
    for (;;) {
        ssize_t n = read(self->fd, self->buf + self->len, sizeof self->buf - 1 - self->len);
        if (n > 0) {
            self->len += (size_t)n;
            if (self->len < sizeof self->buf - 1)
                continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return -1; /* not over yet */
        break;
    }
    self->buf[self->len] = '\0';
    if (!self->len || self->len >= outlen)
        return 0;
    memcpy(out, self->buf, self->len + 1);
    return 1;
}

void gs_nbname_destroy(gs_nbname_t **self_p)
{
    gs_nbname_t *self = *self_p;
    if (!self)
        return;
    if (self->fd >= 0)
        close(self->fd);
    free(self);
    *self_p = NULL;
}
