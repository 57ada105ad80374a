/*
 * sim_log.c - the execution log (GPUSHARE_SIM_LOG): one JSON object per
 * executed kernel, copy, set, host function or graph, each appended with a
 * single write() to an O_APPEND descriptor so that lines of concurrent
 * processes never interleave.  Times are CLOCK_MONOTONIC nanoseconds, which
 * are comparable across processes of one machine.
 */
#include "sim_internal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void sim_log_open(const char *path, int shared)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        perror("gpushare simulated driver: GPUSHARE_SIM_LOG");
        return;
    }
    if (shared) /* every user's processes append to it */
        (void)fchmod(fd, 0666);
    sim_g.log_fd = fd;
}

/* JSON string body of s (quotes, backslashes, control characters escaped),
 * truncated to fit. */
static void json_escape(char *out, size_t len, const char *s)
{
    size_t o = 0;
    for (; s && *s && o + 7 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20) {
            o += (size_t)snprintf(out + o, len - o, "\\u%04x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    out[o] = 0;
}

void sim_log_op(int dev, const char *op, const char *name, const void *stream, uint64_t start_ns,
                uint64_t end_ns, long long bytes)
{
    if (sim_g.log_fd < 0)
        return;
    char esc[1024], line[1400];
    json_escape(esc, sizeof esc, name);
    int n = snprintf(line, sizeof line,
                     "{\"pid\":%d,\"dev\":%d,\"op\":\"%s\",\"name\":\"%s\",\"stream\":\"0x%llx\","
                     "\"start_ns\":%llu,\"end_ns\":%llu",
                     (int)sim_g.pid, dev, op, esc, (unsigned long long)(uintptr_t)stream,
                     (unsigned long long)start_ns, (unsigned long long)end_ns);
    if (bytes >= 0)
        n += snprintf(line + n, sizeof line - (size_t)n, ",\"bytes\":%lld", bytes);
    n += snprintf(line + n, sizeof line - (size_t)n, "}\n");
    ssize_t w = write(sim_g.log_fd, line, (size_t)n);
    (void)w;
}
