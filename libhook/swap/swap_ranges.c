/*
 * swap_ranges.c - a sorted array of ranges under a mutex (swap_ranges.h).
 */
#include "swap_ranges.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gs_assert.h"

struct gs_swap_ranges {
    pthread_mutex_t mu;
    gs_swap_range_t *r;
    size_t n, cap;
};

gs_swap_ranges_t *gs_swap_ranges_new(void)
{
    gs_swap_ranges_t *self = calloc(1, sizeof *self);
    if (self)
        pthread_mutex_init(&self->mu, NULL);
    return self;
}

void gs_swap_ranges_destroy(gs_swap_ranges_t **self_p)
{
    gs_swap_ranges_t *self = self_p ? *self_p : NULL;
    if (!self)
        return;
    pthread_mutex_destroy(&self->mu);
    /* A range still here (its program never freed it) takes its segment
     * table along: this is the last place that points to it. */
    for (size_t i = 0; i < self->n; i++)
        free(self->r[i].seg);
    free(self->r);
    free(self);
    *self_p = NULL;
}

/* The index of the first range whose va is > addr (mu held). */
static size_t upper_locked(const gs_swap_ranges_t *self, CUdeviceptr addr)
{
    GS_ASSERT_HELD((pthread_mutex_t *)&self->mu);
    size_t lo = 0, hi = self->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (self->r[mid].va <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The index of the range holding addr, or n (mu held). */
static size_t holding_locked(const gs_swap_ranges_t *self, CUdeviceptr addr)
{
    GS_ASSERT_HELD((pthread_mutex_t *)&self->mu);
    size_t i = upper_locked(self, addr);
    if (i == 0)
        return self->n;
    const gs_swap_range_t *r = &self->r[i - 1];
    return addr - r->va < r->bytes ? i - 1 : self->n;
}

int gs_swap_ranges_add(gs_swap_ranges_t *self, const gs_swap_range_t *r)
{
    GS_ASSERT(r->bytes >= r->size && r->bytes > 0);
    int rc = -1;
    pthread_mutex_lock(&self->mu);
    size_t i = upper_locked(self, r->va);
    int overlaps = (i > 0 && r->va - self->r[i - 1].va < self->r[i - 1].bytes) ||
                   (i < self->n && self->r[i].va - r->va < r->bytes);
    if (!overlaps) {
        if (self->n == self->cap) {
            size_t ncap = self->cap ? 2 * self->cap : 64;
            gs_swap_range_t *nr = realloc(self->r, ncap * sizeof *nr);
            if (!nr)
                goto out;
            self->r = nr;
            self->cap = ncap;
        }
        memmove(&self->r[i + 1], &self->r[i], (self->n - i) * sizeof *self->r);
        self->r[i] = *r;
        self->n++;
        rc = 0;
    }
out:
    pthread_mutex_unlock(&self->mu);
    return rc;
}

int gs_swap_ranges_remove(gs_swap_ranges_t *self, CUdeviceptr va, gs_swap_range_t *out)
{
    int found = 0;
    pthread_mutex_lock(&self->mu);
    size_t i = holding_locked(self, va);
    if (i < self->n && self->r[i].va == va) {
        if (out)
            *out = self->r[i];
        memmove(&self->r[i], &self->r[i + 1], (self->n - i - 1) * sizeof *self->r);
        self->n--;
        found = 1;
    }
    pthread_mutex_unlock(&self->mu);
    return found;
}

int gs_swap_ranges_find(gs_swap_ranges_t *self, CUdeviceptr addr, gs_swap_range_t *out)
{
    pthread_mutex_lock(&self->mu);
    size_t i = holding_locked(self, addr);
    int found = i < self->n;
    if (found && out)
        *out = self->r[i];
    pthread_mutex_unlock(&self->mu);
    return found;
}

int gs_swap_ranges_update(gs_swap_ranges_t *self, const gs_swap_range_t *r)
{
    int rc = -1;
    pthread_mutex_lock(&self->mu);
    size_t i = holding_locked(self, r->va);
    if (i < self->n && self->r[i].va == r->va) {
        GS_ASSERT(self->r[i].bytes == r->bytes);
        self->r[i] = *r;
        rc = 0;
    }
    pthread_mutex_unlock(&self->mu);
    return rc;
}

size_t gs_swap_ranges_list(gs_swap_ranges_t *self, int dev, int parked, gs_swap_range_t *out,
                           size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&self->mu);
    for (size_t i = 0; i < self->n; i++) {
        const gs_swap_range_t *r = &self->r[i];
        int want = parked == GS_SWAP_ALL ? 1
                   : parked              ? gs_swap_range_parked(r)
                                         : r->resident_bytes > 0 && !r->pinned;
        if ((dev < 0 || r->dev == dev) && want) {
            if (n < max)
                out[n] = *r;
            n++;
        }
    }
    pthread_mutex_unlock(&self->mu);
    return n;
}

size_t gs_swap_ranges_span(gs_swap_ranges_t *self, CUdeviceptr va, size_t size,
                           gs_swap_range_t *out, size_t max)
{
    size_t n = 0;
    if (!size)
        return 0;
    pthread_mutex_lock(&self->mu);
    size_t i = upper_locked(self, va);
    if (i > 0 && va - self->r[i - 1].va < self->r[i - 1].bytes) {
        if (n < max) /* the range that holds va */
            out[n] = self->r[i - 1];
        n++;
    }
    for (; i < self->n && self->r[i].va - va < size; i++) { /* those that start inside */
        if (n < max)
            out[n] = self->r[i];
        n++;
    }
    pthread_mutex_unlock(&self->mu);
    return n;
}

void gs_swap_ranges_totals(gs_swap_ranges_t *self, int dev, uint64_t *resident, uint64_t *parked)
{
    uint64_t res = 0, par = 0;
    pthread_mutex_lock(&self->mu);
    for (size_t i = 0; i < self->n; i++)
        if ((dev < 0 || self->r[i].dev == dev) && !self->r[i].pinned) {
            res += self->r[i].resident_bytes;
            par += self->r[i].bytes - self->r[i].resident_bytes;
        }
    pthread_mutex_unlock(&self->mu);
    if (resident)
        *resident = res;
    if (parked)
        *parked = par;
}
