/*
 * eventlog.c - see eventlog.h.
 */
#include "eventlog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

struct gs_eventlog {
    int fd;
    char path[512];
};

static int open_path(const char *path)
{
    return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
}

gs_eventlog_t *gs_eventlog_open(const char *path, char *err, size_t errlen)
{
    gs_eventlog_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(self->path, sizeof self->path, "%s", path);
    self->fd = open_path(path);
    if (self->fd < 0) {
        snprintf(err, errlen, "cannot open event log %s: %s", path, strerror(errno));
        free(self);
        return NULL;
    }
    return self;
}

int gs_eventlog_reopen(gs_eventlog_t *self)
{
    if (!self)
        return 0;
    int fd = open_path(self->path);
    if (fd < 0)
        return -1;
    close(self->fd);
    self->fd = fd;
    return 0;
}

void gs_eventlog_write(gs_eventlog_t *self, const char *event, json_t *fields)
{
    if (!self) {
        json_decref(fields);
        return;
    }
    json_t *obj = fields ? fields : json_object();
    struct timeval tv;
    gettimeofday(&tv, NULL);
    json_object_set_new(obj, "ts", json_real((double)tv.tv_sec + tv.tv_usec / 1e6));
    json_object_set_new(obj, "event", json_string(event));
    char *text = json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(16));
    json_decref(obj);
    if (!text)
        return;
    size_t len = strlen(text);
    text[len] = '\n'; /* overwrite the NUL: one write for the whole line */
    ssize_t w = write(self->fd, text, len + 1);
    (void)w;
    free(text);
}

const char *gs_eventlog_path(const gs_eventlog_t *self)
{
    return self ? self->path : NULL;
}

void gs_eventlog_close(gs_eventlog_t **self_p)
{
    gs_eventlog_t *self = *self_p;
    if (!self)
        return;
    close(self->fd);
    free(self);
    *self_p = NULL;
}
