/*
 * hook_table.h - the table of interposed entry points (hook_table.def) as
 * an enum and an array, and finding an entry by name.  Pure data: no
 * driver is needed to use it.
 */
#ifndef GS_HOOK_TABLE_H
#define GS_HOOK_TABLE_H

#include <stddef.h>

enum hook_class {
    HOOK_SUBMIT,
    HOOK_SYNC,
    HOOK_LOAD,
    HOOK_ALLOC,
    HOOK_FREE,
    HOOK_RESOLVE,
    HOOK_OTHER
};

enum hook_idx {
#define HOOK_FN(cls, abi, base, pt, stream, params, args) HOOK_IDX_##abi,
#include "hook_table.def"
    HOOK_N
};

struct hook_entry {
    const char *abi;  /* exported name */
    const char *base; /* name given to cuGetProcAddress */
    enum hook_class cls;
    int per_thread; /* _ptsz/_ptds variant */
};

extern const struct hook_entry hook_table[HOOK_N];

/* Index of an ABI name, or -1. */
int hook_table_find_abi(const char *name);
/* Indices [*first, *first + n) of hook_table_by_base() share base name
 * `base`; returns n (0 when unknown). */
size_t hook_table_find_base(const char *base, size_t *first);
const int *hook_table_by_base(void);

#endif
