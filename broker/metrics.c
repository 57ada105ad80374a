/*
 * metrics.c - see metrics.h.
 */
#define _GNU_SOURCE /* accept4 */
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONNS   8
#define MAX_REQUEST 4096

typedef struct {
    int fd;
    size_t got;
    char buf[MAX_REQUEST];
} conn_t;

struct gs_metrics {
    int listen_fd;
    int port;
    conn_t conns[MAX_CONNS];
};

gs_metrics_t *gs_metrics_new(const char *address, int port, char *err, size_t errlen)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, address && *address ? address : "127.0.0.1", &sa.sin_addr) != 1) {
        snprintf(err, errlen, "metrics_address \"%s\" is not an IPv4 address", address);
        return NULL;
    }
    gs_metrics_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    for (int i = 0; i < MAX_CONNS; i++)
        self->conns[i].fd = -1;
    self->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(self->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    socklen_t len = sizeof sa;
    if (self->listen_fd < 0 || bind(self->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(self->listen_fd, 16) != 0 ||
        getsockname(self->listen_fd, (struct sockaddr *)&sa, &len) != 0) {
        snprintf(err, errlen, "cannot serve metrics on %s:%d: %s",
                 address && *address ? address : "127.0.0.1", port, strerror(errno));
        if (self->listen_fd >= 0)
            close(self->listen_fd);
        free(self);
        return NULL;
    }
    self->port = ntohs(sa.sin_port);
    return self;
}

void gs_metrics_destroy(gs_metrics_t **self_p)
{
    gs_metrics_t *self = *self_p;
    if (!self)
        return;
    for (int i = 0; i < MAX_CONNS; i++)
        if (self->conns[i].fd >= 0)
            close(self->conns[i].fd);
    close(self->listen_fd);
    free(self);
    *self_p = NULL;
}

int gs_metrics_port(const gs_metrics_t *self)
{
    return self->port;
}

int gs_metrics_poll_items(gs_metrics_t *self, zmq_pollitem_t *items, int max)
{
    int n = 0;
    if (max > 0)
        items[n++] = (zmq_pollitem_t){NULL, self->listen_fd, ZMQ_POLLIN, 0};
    for (int i = 0; i < MAX_CONNS && n < max; i++)
        if (self->conns[i].fd >= 0)
            items[n++] = (zmq_pollitem_t){NULL, self->conns[i].fd, ZMQ_POLLIN, 0};
    return n;
}

static void conn_close(conn_t *c)
{
    close(c->fd);
    c->fd = -1;
    c->got = 0;
}

static void respond(conn_t *c, const char *status, const char *type, const char *body)
{
    char head[256];
    size_t blen = strlen(body);
    int hlen = snprintf(head, sizeof head,
                        "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                        "Connection: close\r\n\r\n",
                        status, type, blen);
    /* Small answers to a local scraper: a short blocking send is fine, but
     * never let a stuck peer hold the loop. */
    int fl = fcntl(c->fd, F_GETFL);
    fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK);
    struct timeval tv = {0, 200000};
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (send(c->fd, head, (size_t)hlen, MSG_NOSIGNAL) == hlen)
        (void)!send(c->fd, body, blen, MSG_NOSIGNAL);
    conn_close(c);
}

static void serve(conn_t *c, json_t *(*status_fn)(void *), void *arg)
{
    if (strncmp(c->buf, "GET ", 4) != 0) {
        respond(c, "405 Method Not Allowed", "text/plain", "only GET\n");
        return;
    }
    if (strncmp(c->buf + 4, "/metrics ", 9) != 0 && strncmp(c->buf + 4, "/metrics?", 9) != 0) {
        respond(c, "404 Not Found", "text/plain", "see /metrics\n");
        return;
    }
    json_t *st = status_fn(arg);
    char *text = gs_metrics_render(st);
    json_decref(st);
    respond(c, "200 OK", "text/plain; version=0.0.4", text ? text : "");
    free(text);
}

void gs_metrics_handle(gs_metrics_t *self, const zmq_pollitem_t *items, int n,
                       json_t *(*status_fn)(void *), void *arg)
{
    for (int k = 0; k < n; k++) {
        if (!(items[k].revents & ZMQ_POLLIN))
            continue;
        if (items[k].fd == self->listen_fd) {
            int fd = accept4(self->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0)
                continue;
            conn_t *slot = NULL;
            for (int i = 0; i < MAX_CONNS && !slot; i++)
                if (self->conns[i].fd < 0)
                    slot = &self->conns[i];
            if (!slot) {
                close(fd); /* busy: the scraper will retry */
                continue;
            }
            slot->fd = fd;
            slot->got = 0;
            continue;
        }
        for (int i = 0; i < MAX_CONNS; i++) {
            conn_t *c = &self->conns[i];
            if (c->fd != items[k].fd)
                continue;
            ssize_t r = recv(c->fd, c->buf + c->got, sizeof c->buf - 1 - c->got, 0);
            if (r <= 0) {
                if (r == 0 || (errno != EAGAIN && errno != EINTR))
                    conn_close(c);
                break;
            }
            c->got += (size_t)r;
            c->buf[c->got] = '\0';
            /* memmem, not strstr: a request may carry NUL bytes. */
            if (memmem(c->buf, c->got, "\r\n\r\n", 4) || memmem(c->buf, c->got, "\n\n", 2))
                serve(c, status_fn, arg);
            else if (c->got >= sizeof c->buf - 1)
                respond(c, "431 Request Header Fields Too Large", "text/plain", "too large\n");
            break;
        }
    }
}

/* Label values are escaped per the exposition format. */
static void label(FILE *out, const char *name, const char *value)
{
    fprintf(out, "%s=\"", name);
    for (const char *p = value ? value : ""; *p; p++) {
        if (*p == '\\' || *p == '"')
            fputc('\\', out);
        if (*p == '\n')
            fputs("\\n", out);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

static double num(const json_t *obj, const char *key)
{
    return json_number_value(json_object_get(obj, key));
}

static const char *str(const json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : "";
}

char *gs_metrics_render(const json_t *st)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    if (!out)
        return NULL;
    fprintf(out,
            "# HELP gpushare_scheduler_on 1 when the scheduler gates GPU work.\n"
            "# TYPE gpushare_scheduler_on gauge\n"
            "gpushare_scheduler_on %d\n",
            strcmp(str(st, "scheduler"), "on") == 0);
    static const struct {
        const char *name, *type, *help, *key;
    } gpu_metrics[] = {
        {"gpushare_gpu_memory_total_bytes", "gauge", "GPU memory.", "memory_total"},
        {"gpushare_gpu_memory_used_bytes", "gauge", "GPU memory held by sessions.", "memory_used"},
    };
    static const struct {
        const char *name, *type, *help, *key;
    } session_metrics[] = {
        {"gpushare_session_resident_bytes", "gauge", "Session memory on the GPU.",
         "resident_bytes"},
        {"gpushare_session_parked_bytes", "gauge", "Session memory parked in host RAM.",
         "parked_bytes"},
        {"gpushare_session_gpu_seconds_total", "counter", "Time holding the GPU.", "gpu_time_s"},
        {"gpushare_session_wait_seconds_total", "counter", "Time waiting for the GPU.",
         "wait_time_s"},
        {"gpushare_session_grants_total", "counter", "Grants received.", "grants"},
        {"gpushare_session_revokes_total", "counter", "Grants revoked.", "revokes"},
    };
    json_t *gpus = json_object_get(st, "gpus");
    for (size_t m = 0; m < sizeof gpu_metrics / sizeof *gpu_metrics; m++) {
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", gpu_metrics[m].name, gpu_metrics[m].help,
                gpu_metrics[m].name, gpu_metrics[m].type);
        size_t i;
        json_t *g;
        json_array_foreach(gpus, i, g)
        {
            fprintf(out, "%s{", gpu_metrics[m].name);
            label(out, "gpu", str(g, "uuid"));
            fprintf(out, "} %.0f\n", num(g, gpu_metrics[m].key));
        }
    }
    for (size_t m = 0; m < sizeof session_metrics / sizeof *session_metrics; m++) {
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", session_metrics[m].name,
                session_metrics[m].help, session_metrics[m].name, session_metrics[m].type);
        size_t i, j;
        json_t *g, *s;
        json_array_foreach(gpus, i, g)
        {
            json_array_foreach(json_object_get(g, "sessions"), j, s)
            {
                fprintf(out, "%s{", session_metrics[m].name);
                label(out, "gpu", str(g, "uuid"));
                fputc(',', out);
                label(out, "session", str(s, "id"));
                fputc(',', out);
                label(out, "user", str(s, "user"));
                fprintf(out, "} %.17g\n", num(s, session_metrics[m].key));
            }
        }
    }
    fclose(out);
    return buf;
}
