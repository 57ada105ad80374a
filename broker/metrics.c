/*
 * metrics.c - the Prometheus endpoint's HTTP server: libmicrohttpd, driven
 * from the broker's loop (see metrics.h).
 *
 * Why from the loop and not on libmicrohttpd's own thread: the answer is
 * built from the scheduler, the session table and parking, which only the
 * loop's thread touches (the broker has no locks, by design: broker.h).
 * An internal thread would need a snapshot of the metrics text that the
 * loop republishes under a mutex after every change, or at some rate, and
 * a scrape would read old numbers; from the loop each scrape renders the
 * state as it is, with no lock and no second thread.  libmicrohttpd's
 * epoll mode makes that one descriptor to poll beside the ROUTER
 * (MHD_DAEMON_INFO_EPOLL_FD), and it never blocks the loop: sockets are
 * non-blocking, and its connection limit and timeout bound what slow or
 * idle clients can hold (the hand-written server this replaces let 8 idle
 * connections shut every scrape out).
 *
 * What is left of HTTP here: the method (GET or HEAD) and the path
 * (/metrics; libmicrohttpd has split off any query string).
 */
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONNECTIONS 64 /* a few scrapers and curl; more waits in the backlog */
#define IDLE_TIMEOUT_S  10 /* an idle or stalled connection is closed after this */

struct gs_metrics {
    struct MHD_Daemon *daemon;
    int port;
    gs_metrics_status_fn status_fn;
    void *arg;
};

/* The listening socket, bound here rather than by libmicrohttpd so that a
 * port in use is reported with its errno ("Address already in use"). */
static int listen_on(const char *address, int port, int *bound, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    socklen_t len;
    if (inet_pton(AF_INET, address, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        len = sizeof *v4;
    } else if (inet_pton(AF_INET6, address, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        len = sizeof *v6;
    } else {
        snprintf(err, errlen, "metrics_address \"%.60s\" is not an IPv4 or IPv6 address", address);
        return -1;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        snprintf(err, errlen, "cannot serve metrics on %s port %d: %s", address, port,
                 strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *bound = ntohs(ss.ss_family == AF_INET ? v4->sin_port : v6->sin6_port);
    return fd;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned code, const char *type,
                             char *body, int body_malloced)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), body, body_malloced ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        if (body_malloced)
            free(body);
        return MHD_NO; /* out of memory: libmicrohttpd closes the connection */
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result ok = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **con_cls)
{
    (void)version;
    (void)upload_data;
    static int headers_seen;
    gs_metrics_t *self = cls;
    /* Called once the headers are in, then with any body, then once more:
     * answer only then.  A response queued at the first call makes
     * libmicrohttpd close the connection (no keep-alive). */
    if (!*con_cls) {
        *con_cls = &headers_seen;
        return MHD_YES;
    }
    if (*upload_data_size) {
        *upload_data_size = 0; /* a body means nothing here */
        return MHD_YES;
    }
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", "only GET\n", 0);
    if (strcmp(url, "/metrics") != 0)
        return reply(conn, MHD_HTTP_NOT_FOUND, "text/plain", "see /metrics\n", 0);
    json_t *st = self->status_fn(self->arg);
    char *text = gs_metrics_render(st);
    json_decref(st);
    if (!text)
        return MHD_NO;
    return reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4", text, 1);
}

gs_metrics_t *gs_metrics_new(const char *address, int port, gs_metrics_status_fn status_fn,
                             void *arg, char *err, size_t errlen)
{
    gs_metrics_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    self->status_fn = status_fn;
    self->arg = arg;
    int fd = listen_on(address && *address ? address : "127.0.0.1", port, &self->port, err, errlen);
    if (fd < 0) {
        free(self);
        return NULL;
    }
    /* No internal thread (see the top of this file); the daemon owns fd
     * from here and closes it when stopped. */
    self->daemon =
        MHD_start_daemon(MHD_USE_EPOLL, 0, NULL, NULL, answer, self, MHD_OPTION_LISTEN_SOCKET,
                         (MHD_socket)fd, MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S, MHD_OPTION_END);
    if (!self->daemon) {
        /* Not closed here: libmicrohttpd closes a socket it was given when
         * it fails to start (0.9.75, on all paths but an epoll setup
         * failure, where it leaks), and a second close could hit another
         * thread's descriptor. */
        snprintf(err, errlen, "cannot serve metrics: libmicrohttpd did not start (%s)",
                 strerror(errno));
        free(self);
        return NULL;
    }
    return self;
}

void gs_metrics_destroy(gs_metrics_t **self_p)
{
    gs_metrics_t *self = *self_p;
    if (!self)
        return;
    MHD_stop_daemon(self->daemon);
    free(self);
    *self_p = NULL;
}

int gs_metrics_port(const gs_metrics_t *self)
{
    return self->port;
}

int gs_metrics_fd(const gs_metrics_t *self)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(self->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    return info ? info->epoll_fd : -1;
}

long gs_metrics_timeout_ms(const gs_metrics_t *self)
{
    MHD_UNSIGNED_LONG_LONG ms;
    if (MHD_get_timeout(self->daemon, &ms) != MHD_YES)
        return -1;
    return ms > 3600000 ? 3600000 : (long)ms;
}

void gs_metrics_run(gs_metrics_t *self)
{
    MHD_run(self->daemon);
}
