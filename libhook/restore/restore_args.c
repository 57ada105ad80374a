/*
 * restore_args.c - parsing gpushare-restore's command line (see
 * restore_args.h).  By hand rather than getopt: each refusal names the
 * option and the value, in one line the notebook's log can show.
 */
#include "restore_args.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A decimal number in [1, max]; -1 when s is anything else. */
static int parse_positive(const char *s, unsigned long long max, unsigned long long *out)
{
    if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v == 0 || v > max)
        return -1;
    *out = v;
    return 0;
}

/* The value of option `name` at argv[*i]: "--name=V" or "--name V". */
static const char *value_of(int argc, char **argv, int *i, const char *name, int *matched)
{
    const char *arg = argv[*i];
    size_t n = strlen(name);
    *matched = 0;
    if (strncmp(arg, name, n) != 0)
        return NULL;
    if (arg[n] == '=') {
        *matched = 1;
        return arg + n + 1;
    }
    if (arg[n] != '\0')
        return NULL;
    *matched = 1;
    if (*i + 1 >= argc)
        return NULL;
    return argv[++*i];
}

int gs_restore_args_parse(int argc, char **argv, gs_restore_args_t *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    int have_pid = 0, have_start = 0;
    for (int i = 1; i < argc; i++) {
        int matched;
        unsigned long long v;
        const char *val;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            a->help = 1;
            return 0;
        }
        if ((val = value_of(argc, argv, &i, "--pid", &matched)) != NULL || matched) {
            if (!val) {
                snprintf(err, errlen, "--pid needs a process id");
                return -1;
            }
            if (parse_positive(val, INT_MAX, &v) != 0) {
                snprintf(err, errlen, "--pid %.40s: not a process id (a number from 1 to %d)", val,
                         INT_MAX);
                return -1;
            }
            a->pid = (int)v;
            have_pid = 1;
        } else if ((val = value_of(argc, argv, &i, "--start", &matched)) != NULL || matched) {
            if (!val) {
                snprintf(err, errlen, "--start needs the process' start time");
                return -1;
            }
            if (parse_positive(val, ULLONG_MAX, &v) != 0) {
                snprintf(err, errlen,
                         "--start %.40s: not a start time (field 22 of /proc/PID/stat, a "
                         "positive number)",
                         val);
                return -1;
            }
            a->start = v;
            have_start = 1;
        } else if ((val = value_of(argc, argv, &i, "--gpu", &matched)) != NULL || matched) {
            const char *eq = val ? strrchr(val, '=') : NULL;
            if (!val || !eq || eq == val || (size_t)(eq - val) >= sizeof a->gpu[0].uuid) {
                snprintf(err, errlen, "--gpu %.60s: expected UUID=BYTES (GPU-...=42949672960)",
                         val ? val : "");
                return -1;
            }
            if (parse_positive(eq + 1, ULLONG_MAX, &v) != 0) {
                snprintf(err, errlen, "--gpu %.60s: BYTES must be a positive number", val);
                return -1;
            }
            if (a->ngpus >= GS_RESTORE_MAX_GPUS) {
                snprintf(err, errlen, "--gpu: at most %d GPUs", GS_RESTORE_MAX_GPUS);
                return -1;
            }
            snprintf(a->gpu[a->ngpus].uuid, sizeof a->gpu[0].uuid, "%.*s", (int)(eq - val), val);
            a->gpu[a->ngpus++].bytes = v;
        } else {
            snprintf(err, errlen, "unknown argument %.60s", argv[i]);
            return -1;
        }
    }
    if (!have_pid) {
        snprintf(err, errlen, "--pid is missing: which process to bring back");
        return -1;
    }
    if (!have_start) {
        snprintf(err, errlen,
                 "--start is missing: without the start time a reused pid could be touched");
        return -1;
    }
    return 0;
}
