/*
 * swap_names.c - the program's handle names, a sorted array
 * (swap_names.h).
 */
#include "swap_names.h"

#include <stdlib.h>
#include <string.h>

struct gs_swap_names {
    gs_swap_name_t *v;
    size_t n, cap;
    CUmemGenericAllocationHandle next; /* the next name to try when choosing */
};

/* Chosen names come from a range the driver's handles (addresses of its
 * own objects) do not reach; a collision is checked all the same. */
#define CHOSEN_BASE 0x6773000000000000ull /* "gs" */

gs_swap_names_t *gs_swap_names_new(void)
{
    gs_swap_names_t *self = calloc(1, sizeof *self);
    if (self)
        self->next = CHOSEN_BASE;
    return self;
}

void gs_swap_names_destroy(gs_swap_names_t **self_p)
{
    gs_swap_names_t *self = self_p ? *self_p : NULL;
    if (!self)
        return;
    free(self->v);
    free(self);
    *self_p = NULL;
}

/* The index of the first entry whose name is >= name. */
static size_t lower(const gs_swap_names_t *self, CUmemGenericAllocationHandle name)
{
    size_t lo = 0, hi = self->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (self->v[mid].name < name)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int gs_swap_names_add(gs_swap_names_t *self, const gs_swap_name_t *n)
{
    size_t i = lower(self, n->name);
    if (i < self->n && self->v[i].name == n->name)
        return -1;
    if (self->n == self->cap) {
        size_t ncap = self->cap ? 2 * self->cap : 64;
        gs_swap_name_t *nv = realloc(self->v, ncap * sizeof *nv);
        if (!nv)
            return -1;
        self->v = nv;
        self->cap = ncap;
    }
    memmove(&self->v[i + 1], &self->v[i], (self->n - i) * sizeof *self->v);
    self->v[i] = *n;
    self->n++;
    return 0;
}

void gs_swap_names_remove(gs_swap_names_t *self, CUmemGenericAllocationHandle name)
{
    size_t i = lower(self, name);
    if (i < self->n && self->v[i].name == name) {
        memmove(&self->v[i], &self->v[i + 1], (self->n - i - 1) * sizeof *self->v);
        self->n--;
    }
}

gs_swap_name_t *gs_swap_names_get(gs_swap_names_t *self, CUmemGenericAllocationHandle name)
{
    size_t i = lower(self, name);
    return i < self->n && self->v[i].name == name ? &self->v[i] : NULL;
}

gs_swap_name_t *gs_swap_names_by_real(gs_swap_names_t *self, CUmemGenericAllocationHandle real)
{
    if (!real)
        return NULL;
    for (size_t i = 0; i < self->n; i++)
        if (self->v[i].real == real)
            return &self->v[i];
    return NULL;
}

CUmemGenericAllocationHandle gs_swap_names_choose(gs_swap_names_t *self,
                                                  CUmemGenericAllocationHandle real)
{
    if (!gs_swap_names_get(self, real))
        return real;
    for (;;) {
        CUmemGenericAllocationHandle c = self->next++;
        if (self->next < CHOSEN_BASE)
            self->next = CHOSEN_BASE;
        if (c && c != real && !gs_swap_names_get(self, c) && !gs_swap_names_by_real(self, c))
            return c;
    }
}

size_t gs_swap_names_count(const gs_swap_names_t *self)
{
    return self->n;
}
