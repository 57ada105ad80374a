/*
 * hook_path.c - see hook_path.h.
 */
#include "hook_path.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void gs_hook_path(const char *installed, char *out, size_t outlen)
{
    const char *env = getenv("GPUSHARE_HOOK");
    if (env && *env) {
        snprintf(out, outlen, "%s", env);
        return;
    }
    snprintf(out, outlen, "%s", installed);
    if (access(installed, R_OK) == 0)
        return;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return;
    *slash = '\0'; /* DIR/bin */
    char beside[4200];
    snprintf(beside, sizeof beside, "%s/../lib/libgpushare-hook.so", exe);
    char resolved[4096];
    if (access(beside, R_OK) == 0 && realpath(beside, resolved))
        snprintf(out, outlen, "%s", resolved);
}
