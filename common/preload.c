/*
 * preload.c - see preload.h.  ld.so accepts ':' and ' ' as separators.
 */
#include "preload.h"

#include <stdio.h>
#include <string.h>

int gs_preload_value(const char *hook, const char *existing, char *out, size_t outlen)
{
    size_t used = (size_t)snprintf(out, outlen, "%s", hook);
    if (used >= outlen)
        return -1;
    if (!existing)
        return 0;
    const char *p = existing;
    while (*p) {
        size_t len = strcspn(p, ": ");
        if (len > 0 && !(len == strlen(hook) && strncmp(p, hook, len) == 0)) {
            int n = snprintf(out + used, outlen - used, ":%.*s", (int)len, p);
            if (n < 0 || (size_t)n >= outlen - used)
                return -1;
            used += (size_t)n;
        }
        p += len;
        while (*p == ':' || *p == ' ')
            p++;
    }
    return 0;
}
