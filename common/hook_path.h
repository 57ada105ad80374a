/*
 * hook_path.h - which libgpushare-hook.so gpushare-launch and `gpushare
 * run` preload.
 */
#ifndef GS_HOOK_PATH_H
#define GS_HOOK_PATH_H

#include <stddef.h>

/* $GPUSHARE_HOOK when set; else installed (the configured
 * $(libdir)/libgpushare-hook.so) when it exists; else the one beside this
 * program's own install (DIR/../lib/libgpushare-hook.so for DIR/bin/PROG:
 * an install staged or moved away from its configured prefix); else
 * installed, for the caller to say it is missing.  Writes it into out. */
void gs_hook_path(const char *installed, char *out, size_t outlen);

#endif
