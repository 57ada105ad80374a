/*
 * gpu_access.c - which GPUs a user's sessions may be placed on
 * (gpu_access.h).
 */
#define _GNU_SOURCE
#include "gpu_access.h"

#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "0,1,4-6" -> bits; -1 on anything else. */
static int parse_list(const char *s, uint64_t *bits)
{
    *bits = 0;
    if (!*s)
        return -1;
    while (*s) {
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (end == s || a < 0 || a > 63)
            return -1;
        s = end;
        if (*s == '-') {
            b = strtol(s + 1, &end, 10);
            if (end == s + 1 || b < a || b > 63)
                return -1;
            s = end;
        }
        for (long i = a; i <= b; i++)
            *bits |= 1ull << i;
        if (*s == ',')
            s++;
        else if (*s)
            return -1;
    }
    return 0;
}

int gs_gpu_access_parse(const char *text, gs_gpu_access_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    char *copy = strdup(text ? text : "");
    if (!copy) {
        snprintf(err, errlen, "gpu_access: out of memory");
        return -1;
    }
    int rc = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        char *colon = strrchr(tok, ':');
        if (!colon || colon == tok) {
            snprintf(err, errlen, "gpu_access: \"%.60s\": expected USER:GPUS or @GROUP:GPUS", tok);
            rc = -1;
            break;
        }
        *colon = '\0';
        gs_gpu_access_entry_t e = {0};
        if (parse_list(colon + 1, &e.gpus) != 0) {
            snprintf(err, errlen,
                     "gpu_access: \"%.60s\": the GPUs are indices and ranges, e.g. 0,1 or 2-3",
                     colon + 1);
            rc = -1;
            break;
        }
        if (tok[0] == '@') {
            struct group *g = getgrnam(tok + 1);
            if (!g) {
                snprintf(err, errlen, "gpu_access: no group named \"%.60s\"", tok + 1);
                rc = -1;
                break;
            }
            e.is_group = 1;
            e.gid = g->gr_gid;
        } else {
            struct passwd *p = getpwnam(tok);
            if (!p) {
                snprintf(err, errlen, "gpu_access: no user named \"%.60s\"", tok);
                rc = -1;
                break;
            }
            e.uid = p->pw_uid;
        }
        if (out->n == GS_GPU_ACCESS_MAX) {
            snprintf(err, errlen, "gpu_access: more than %d entries", GS_GPU_ACCESS_MAX);
            rc = -1;
            break;
        }
        out->e[out->n++] = e;
    }
    free(copy);
    if (rc)
        memset(out, 0, sizeof *out);
    return rc;
}

/* uid is in group gid (primary or supplementary). */
static int member(uid_t uid, gid_t gid)
{
    struct passwd *p = getpwuid(uid);
    if (!p)
        return 0;
    if (p->pw_gid == gid)
        return 1;
    gid_t groups[256];
    int n = 256;
    if (getgrouplist(p->pw_name, p->pw_gid, groups, &n) < 0)
        return 0;
    for (int i = 0; i < n; i++)
        if (groups[i] == gid)
            return 1;
    return 0;
}

uint64_t gs_gpu_access_mask(const gs_gpu_access_t *a, uid_t uid)
{
    uint64_t mask = 0;
    int named = 0;
    for (int i = 0; a && i < a->n; i++) {
        const gs_gpu_access_entry_t *e = &a->e[i];
        if (e->is_group ? member(uid, e->gid) : e->uid == uid) {
            mask |= e->gpus;
            named = 1;
        }
    }
    return named ? mask : ~0ull;
}
