/*
 * log.c - one formatted line per call, written with a single write(2) so
 * that lines from several threads or processes never interleave.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static const char *names[] = {"error", "warn", "info", "debug"};
static char prog[32] = "gpushare";
static int current = GS_LOG_WARN;

int gs_log_level_parse(const char *name)
{
    for (int i = 0; i <= GS_LOG_DEBUG; i++)
        if (name && strcasecmp(name, names[i]) == 0)
            return i;
    return -1;
}

void gs_log_init(const char *program, gs_log_level_t dflt)
{
    snprintf(prog, sizeof prog, "%s", program);
    int lvl = gs_log_level_parse(getenv("GPUSHARE_LOG"));
    current = lvl >= 0 ? lvl : (int)dflt;
}

void gs_log_set_level(gs_log_level_t level)
{
    current = level;
}

int gs_log_enabled(gs_log_level_t level)
{
    return (int)level <= current;
}

void gs_log(gs_log_level_t level, const char *fmt, ...)
{
    if (!gs_log_enabled(level))
        return;
    char line[1024];
    int n = snprintf(line, sizeof line, "%s[%d]: %s: ", prog, (int)getpid(), names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
