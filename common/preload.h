/*
 * preload.h - put the hook in front of an existing LD_PRELOAD, never
 * replacing it (people preload jemalloc, sanitizers, other tools).
 */
#ifndef GS_PRELOAD_H
#define GS_PRELOAD_H

#include <stddef.h>

/* Write into out the LD_PRELOAD value with hook first and the entries of
 * existing (may be NULL) after it, without duplicating hook.  Returns 0,
 * or -1 when out is too small. */
int gs_preload_value(const char *hook, const char *existing, char *out, size_t outlen);

#endif
