/*
 * sim_env.c - reads the GPUSHARE_SIM_* environment variables.  Kept apart
 * so that the parsing rules (and the one-line error for a malformed value)
 * live in one place; cuInit fails with CUDA_ERROR_INVALID_VALUE when any of
 * them is malformed, in every process, whoever created the segment.
 */
#include "sim_internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int sim_parse_size(const char *s, unsigned long long *out)
{
    if (!s)
        return -1;
    while (isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K':
        shift = 10;
        end++;
        break;
    case 'M':
        shift = 20;
        end++;
        break;
    case 'G':
        shift = 30;
        end++;
        break;
    case 'T':
        shift = 40;
        end++;
        break;
    default:
        break;
    }
    if (shift) {
        /* accept the common spellings 16G, 16GB, 16GiB */
        if (end[0] == 'i' && toupper((unsigned char)end[1]) == 'B')
            end += 2;
        else if (toupper((unsigned char)end[0]) == 'B')
            end++;
    } else if (toupper((unsigned char)*end) == 'B') {
        end++;
    }
    while (isspace((unsigned char)*end))
        end++;
    if (*end)
        return -1;
    if (shift && v > (ULLONG_MAX >> shift))
        return -1;
    *out = v << shift;
    return 0;
}

static int parse_uint(const char *s, unsigned long long max, unsigned long long *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > max)
        return -1;
    *out = v;
    return 0;
}

static int bad(const char *var, const char *val, const char *what)
{
    fprintf(stderr, "gpushare simulated driver: malformed %s='%s' (%s)\n", var, val, what);
    return -1;
}

void sim_config_segment_name(char *out, size_t len)
{
    const char *n = getenv("GPUSHARE_SIM_NAME");
    if (n && *n)
        snprintf(out, len, "%s%s", n[0] == '/' ? "" : "/", n);
    else
        snprintf(out, len, "/gpushare-sim-%u", (unsigned)getuid());
}

int sim_config_load(struct sim_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    sim_config_segment_name(cfg->name, sizeof cfg->name);
    if (strchr(cfg->name + 1, '/'))
        return bad("GPUSHARE_SIM_NAME", getenv("GPUSHARE_SIM_NAME"),
                   "a shared-memory name: one '/' at the start only");

    cfg->devices = 1;
    cfg->memory = 16ULL << 30;
    cfg->concurrency = 1;
    cfg->kernel_us = 1000;

    const char *v = getenv("GPUSHARE_SIM_DEVICES");
    unsigned long long n;
    if (v && *v) {
        if (parse_uint(v, SIM_MAX_DEVICES, &n) || n < 1)
            return bad("GPUSHARE_SIM_DEVICES", v, "expected 1 to 8");
        cfg->devices = (int)n;
    }
    v = getenv("GPUSHARE_SIM_MEMORY");
    if (v && *v) {
        if (sim_parse_size(v, &n) || n == 0)
            return bad("GPUSHARE_SIM_MEMORY", v,
                       "expected a byte count with optional K/M/G/T suffix, e.g. 16G");
        cfg->memory = n;
    }
    v = getenv("GPUSHARE_SIM_CONCURRENCY");
    if (v && *v) {
        if (parse_uint(v, 1024, &n) || n < 1)
            return bad("GPUSHARE_SIM_CONCURRENCY", v, "expected 1 to 1024");
        cfg->concurrency = (unsigned)n;
    }
    v = getenv("GPUSHARE_SIM_KERNEL_US");
    if (v && *v) {
        if (parse_uint(v, 3600ULL * 1000 * 1000, &n))
            return bad("GPUSHARE_SIM_KERNEL_US", v, "expected microseconds, 0 to 3600000000");
        cfg->kernel_us = n;
    }
    v = getenv("GPUSHARE_SIM_HOST_MEMORY");
    if (v && *v) {
        if (sim_parse_size(v, &n) || n == 0)
            return bad("GPUSHARE_SIM_HOST_MEMORY", v,
                       "expected a byte count with optional K/M/G/T suffix, e.g. 64G; "
                       "unset for no limit");
        cfg->host_memory = n;
    }
    v = getenv("GPUSHARE_SIM_SHARED");
    if (v && *v) {
        if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
            return bad("GPUSHARE_SIM_SHARED", v, "expected 1 (every user may attach) or 0");
        cfg->shared = v[0] == '1';
    }
    v = getenv("GPUSHARE_SIM_CONTEXT_MEMORY");
    if (v && *v) {
        if (sim_parse_size(v, &n))
            return bad("GPUSHARE_SIM_CONTEXT_MEMORY", v,
                       "expected a byte count with optional K/M/G/T suffix, e.g. 512M");
        cfg->context_memory = n;
    }
    v = getenv("GPUSHARE_SIM_LOG");
    if (v && *v)
        snprintf(cfg->log_path, sizeof cfg->log_path, "%s", v);
    return 0;
}
