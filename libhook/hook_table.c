/*
 * hook_table.c - the table of interposed entry points, built from
 * hook_table.def, and its two sorted indices: by ABI name (dlsym, the
 * gpushare_hook_* exports) and by base name (cuGetProcAddress).
 */
#include "hook_table.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define HOOK_CLASS_SUBMIT  HOOK_SUBMIT
#define HOOK_CLASS_SYNC    HOOK_SYNC
#define HOOK_CLASS_LOAD    HOOK_LOAD
#define HOOK_CLASS_ALLOC   HOOK_ALLOC
#define HOOK_CLASS_FREE    HOOK_FREE
#define HOOK_CLASS_RESOLVE HOOK_RESOLVE
#define HOOK_CLASS_OTHER   HOOK_OTHER
#define HOOK_PT_PT         1
#define HOOK_PT_LG         0

const struct hook_entry hook_table[HOOK_N] = {
#define HOOK_FN(cls, abi, base, pt, stream, params, args)                                          \
    {#abi, #base, HOOK_CLASS_##cls, HOOK_PT_##pt},
#include "hook_table.def"
};

static int by_abi[HOOK_N], by_base[HOOK_N];

static int cmp_abi(const void *a, const void *b)
{
    return strcmp(hook_table[*(const int *)a].abi, hook_table[*(const int *)b].abi);
}

static int cmp_base(const void *a, const void *b)
{
    int c = strcmp(hook_table[*(const int *)a].base, hook_table[*(const int *)b].base);
    return c ? c : *(const int *)a - *(const int *)b;
}

/* The sorted indices need no CUDA and no libcuda: built on first use. */
static void sort_once(void)
{
    for (int i = 0; i < HOOK_N; i++)
        by_abi[i] = by_base[i] = i;
    qsort(by_abi, HOOK_N, sizeof by_abi[0], cmp_abi);
    qsort(by_base, HOOK_N, sizeof by_base[0], cmp_base);
}
static pthread_once_t sort_once_ctl = PTHREAD_ONCE_INIT;

int hook_table_find_abi(const char *name)
{
    pthread_once(&sort_once_ctl, sort_once);
    size_t lo = 0, hi = HOOK_N;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(name, hook_table[by_abi[mid]].abi);
        if (c == 0)
            return by_abi[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -1;
}

size_t hook_table_find_base(const char *base, size_t *first)
{
    pthread_once(&sort_once_ctl, sort_once);
    size_t lo = 0, hi = HOOK_N;
    while (lo < hi) { /* first entry >= base */
        size_t mid = (lo + hi) / 2;
        if (strcmp(hook_table[by_base[mid]].base, base) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t n = 0;
    while (lo + n < HOOK_N && strcmp(hook_table[by_base[lo + n]].base, base) == 0)
        n++;
    *first = lo;
    return n;
}

const int *hook_table_by_base(void)
{
    pthread_once(&sort_once_ctl, sort_once);
    return by_base;
}
