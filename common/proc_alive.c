/*
 * proc_alive.c - see proc_alive.h.
 */
#include "proc_alive.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

/* /proc/PID/stat's state letter and starttime; -1 when the file cannot be
 * read (errno set), 0 when it can. */
static int read_stat(long pid, char *state, unsigned long long *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the name may contain anything */
    if (!p || p[1] != ' ') {
        errno = EINVAL;
        return -1;
    }
    *state = p[2];
    /* The fields after the name start at 3 (state); starttime is 22. */
    p += 2;
    for (int field = 3; field < 22 && *p; p++)
        if (*p == ' ')
            field++;
    *start = strtoull(p, NULL, 10);
    return 0;
}

unsigned long long gs_proc_start(long pid)
{
    char state;
    unsigned long long start;
    if (pid <= 0 || read_stat(pid, &state, &start) != 0 || state == 'Z' || state == 'X')
        return 0;
    return start;
}

int gs_proc_alive(long pid, unsigned long long start)
{
    if (pid <= 0)
        return 1;
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return 0;
    char state;
    unsigned long long now_start;
    if (read_stat(pid, &state, &now_start) != 0)
        return errno == ENOENT ? 0 : 1;
    if (state == 'Z' || state == 'X')
        return 0;
    return !start || now_start == start;
}
