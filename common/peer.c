/*
 * peer.c - see peer.h.  The address part may itself contain ':' (IPv6),
 * so the three credentials are taken from the end.
 */
#include "peer.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static int parse_field(const char *s, size_t len, unsigned long *out)
{
    if (len == 0 || len > 10)
        return -1;
    unsigned long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return -1;
        v = v * 10 + (unsigned long)(s[i] - '0');
    }
    *out = v;
    return 0;
}

int gs_peer_parse(const char *addr, gs_peer_t *out)
{
    out->valid = 0;
    if (!addr)
        return -1;
    const char *end = addr + strlen(addr);
    unsigned long v[3];
    for (int k = 2; k >= 0; k--) {
        const char *p = end;
        while (p > addr && p[-1] != ':')
            p--;
        if (p == addr || parse_field(p, (size_t)(end - p), &v[k]) != 0)
            return -1;
        end = p - 1; /* the ':' before this field */
    }
    out->uid = (uid_t)v[0];
    out->gid = (gid_t)v[1];
    out->pid = (pid_t)v[2];
    out->valid = 1;
    return 0;
}
