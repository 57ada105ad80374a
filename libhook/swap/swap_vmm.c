/*
 * swap_vmm.c - the program's own virtual-memory mappings, adopted by the
 * swap tier so that they move with the rest (swap_engine.h).
 *
 * Every function holds the engine's lock across the driver call it makes,
 * so a move never runs in the middle of one of the program's calls, and
 * answers PARKED instead of calling the driver when the program's call
 * would touch memory that is out: the caller brings the GPU back (its gate
 * asks the broker, which swaps the process in) and calls again.
 */
#include <stdlib.h>
#include <string.h>

#include "gs_assert.h"
#include "swap_state.h"

#define MAX_DEVS 64

/* The adopted ranges among those overlapping [va, va + size) (op held):
 * a malloc'd array (NULL when none) and its count; *parked_dev is the GPU
 * of a parked one, or -1. */
static gs_swap_range_t *adopted_in(gs_swap_engine_t *e, CUdeviceptr va, size_t size, size_t *n,
                                   int *parked_dev)
{
    *parked_dev = -1;
    *n = 0;
    size_t all = gs_swap_ranges_span(e->ranges, va, size, NULL, 0);
    if (!all)
        return NULL;
    gs_swap_range_t *rs = malloc(all * sizeof *rs);
    if (!rs)
        return NULL;
    all = gs_swap_ranges_span(e->ranges, va, size, rs, all);
    for (size_t i = 0; i < all; i++)
        if (rs[i].vmm) {
            if (gs_swap_range_parked(&rs[i]))
                *parked_dev = rs[i].dev;
            rs[(*n)++] = rs[i];
        }
    if (!*n) {
        free(rs);
        return NULL;
    }
    return rs;
}

/* The adopted range at va never moves again (op held). */
static void fix_range(gs_swap_engine_t *e, CUdeviceptr va)
{
    gs_swap_range_t r;
    if (va && gs_swap_ranges_find(e->ranges, va, &r) && r.va == va && !r.pinned) {
        r.pinned = 1;
        gs_swap_ranges_update(e->ranges, &r);
    }
}

void gs_swap_vmm_created(gs_swap_engine_t *e, CUmemGenericAllocationHandle *handle, size_t size,
                         int dev)
{
    if (!handle || !*handle || dev < 0 || dev >= MAX_DEVS)
        return;
    pthread_mutex_lock(&e->op);
    gs_swap_name_t n = {.real = *handle, .size = size, .dev = dev, .refs = 1};
    n.name = gs_swap_names_choose(e->names, *handle);
    if (gs_swap_names_add(e->names, &n) == 0)
        *handle = n.name;
    /* else untracked: the program keeps the driver's handle, which then
     * never moves */
    pthread_mutex_unlock(&e->op);
}

gs_swap_vmm_t gs_swap_vmm_map(gs_swap_engine_t *e, CUcontext ctx, CUdeviceptr va, size_t size,
                              size_t offset, CUmemGenericAllocationHandle name,
                              unsigned long long flags, CUresult *res, int *dev)
{
    pthread_mutex_lock(&e->op);
    gs_swap_name_t *n = gs_swap_names_get(e->names, name);
    gs_swap_vmm_t out = GS_SWAP_VMM_DONE;
    if (!n)
        out = GS_SWAP_VMM_PASS;
    else if (!n->real) {
        *dev = n->dev; /* its memory is out: mapping it needs it back */
        out = GS_SWAP_VMM_PARKED;
    } else if ((*res = e->d->map(va, size, offset, n->real, flags)) == CUDA_SUCCESS) {
        CUmemAllocationProp prop;
        gs_swap_range_t r = {.va = va, .size = size, .bytes = size, .ctx = ctx, .dev = n->dev};
        if (n->va || n->fixed || offset || size != n->size || !ctx) {
            /* Mapped twice or in part: the memory cannot be given back by
             * one unmap, so it stays where it is. */
            n->fixed = 1;
            fix_range(e, n->va);
        } else if (e->d->props(&prop, n->real) == CUDA_SUCCESS &&
                   (r.seg = calloc(1, sizeof *r.seg))) {
            r.seg_bytes = size;
            r.nseg = 1;
            r.seg[0] = n->real;
            r.resident_bytes = size;
            r.vmm = 1;
            r.name = name;
            r.prop = prop;
            if (gs_swap_ranges_add(e->ranges, &r) == 0) {
                n->va = va;
                gs_swap_lane_prepare(e, ctx);
            } else
                free(r.seg);
        }
    }
    pthread_mutex_unlock(&e->op);
    return out;
}

gs_swap_vmm_t gs_swap_vmm_unmap(gs_swap_engine_t *e, CUdeviceptr va, size_t size, CUresult *res,
                                int *dev)
{
    pthread_mutex_lock(&e->op);
    size_t n;
    gs_swap_range_t *rs = adopted_in(e, va, size, &n, dev);
    gs_swap_vmm_t out = GS_SWAP_VMM_PASS;
    /* Unmapping memory that is out would lose nothing, but the program may
     * map its handle again and find its bytes there: they come back first. */
    if (*dev >= 0)
        out = GS_SWAP_VMM_PARKED;
    else if (rs) {
        out = GS_SWAP_VMM_DONE;
        if ((*res = e->d->unmap(va, size)) == CUDA_SUCCESS)
            for (size_t i = 0; i < n; i++) {
                gs_swap_range_t r;
                if (!gs_swap_ranges_remove(e->ranges, rs[i].va, &r))
                    continue;
                gs_swap_name_t *nm = r.name ? gs_swap_names_get(e->names, r.name) : NULL;
                if (nm)
                    nm->va = 0;
                free(r.seg);
            }
    }
    pthread_mutex_unlock(&e->op);
    free(rs);
    return out;
}

gs_swap_vmm_t gs_swap_vmm_set_access(gs_swap_engine_t *e, CUdeviceptr va, size_t size,
                                     const CUmemAccessDesc *desc, size_t count, CUresult *res,
                                     int *dev)
{
    pthread_mutex_lock(&e->op);
    size_t n;
    gs_swap_range_t *rs = adopted_in(e, va, size, &n, dev);
    gs_swap_vmm_t out = GS_SWAP_VMM_PASS;
    if (*dev >= 0)
        out = GS_SWAP_VMM_PARKED;
    else if (rs) {
        out = GS_SWAP_VMM_DONE;
        if ((*res = e->d->set_access(va, size, desc, count)) == CUDA_SUCCESS)
            for (size_t i = 0; i < n; i++) {
                /* Remembered, to be given again when the memory comes back. */
                for (size_t k = 0; desc && k < count; k++) {
                    int g = desc[k].location.id;
                    if (desc[k].location.type != CU_MEM_LOCATION_TYPE_DEVICE || g < 0 ||
                        g >= MAX_DEVS)
                        continue;
                    uint64_t bit = 1ull << g;
                    rs[i].access_rw &= ~bit;
                    rs[i].access_ro &= ~bit;
                    if (desc[k].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
                        rs[i].access_rw |= bit;
                    else if (desc[k].flags == CU_MEM_ACCESS_FLAGS_PROT_READ)
                        rs[i].access_ro |= bit;
                }
                gs_swap_ranges_update(e->ranges, &rs[i]);
            }
    }
    pthread_mutex_unlock(&e->op);
    free(rs);
    return out;
}

gs_swap_vmm_t gs_swap_vmm_release(gs_swap_engine_t *e, CUmemGenericAllocationHandle name,
                                  CUresult *res, int *dev)
{
    pthread_mutex_lock(&e->op);
    gs_swap_name_t *n = gs_swap_names_get(e->names, name);
    gs_swap_vmm_t out = GS_SWAP_VMM_DONE;
    if (!n)
        out = GS_SWAP_VMM_PASS;
    else {
        /* Parked and still mapped: nothing exists at the driver to release;
         * from now on the mapping alone holds the memory, as it would. */
        GS_ASSERT(n->real || n->va);
        *res = n->real ? e->d->release(n->real) : CUDA_SUCCESS;
        if (*res == CUDA_SUCCESS && --n->refs == 0) {
            gs_swap_range_t r;
            if (n->va && gs_swap_ranges_find(e->ranges, n->va, &r) && r.va == n->va) {
                r.name = 0;
                gs_swap_ranges_update(e->ranges, &r);
            }
            gs_swap_names_remove(e->names, name);
        }
    }
    (void)dev;
    pthread_mutex_unlock(&e->op);
    return out;
}

gs_swap_vmm_t gs_swap_vmm_handle(gs_swap_engine_t *e, CUmemGenericAllocationHandle name, int fix,
                                 CUmemGenericAllocationHandle *real, int *dev)
{
    pthread_mutex_lock(&e->op);
    gs_swap_name_t *n = gs_swap_names_get(e->names, name);
    gs_swap_vmm_t out = GS_SWAP_VMM_DONE;
    if (!n)
        out = GS_SWAP_VMM_PASS;
    else if (!n->real) {
        *dev = n->dev;
        out = GS_SWAP_VMM_PARKED;
    } else {
        if (fix) { /* another process may map it: it stays where it is */
            n->fixed = 1;
            fix_range(e, n->va);
        }
        *real = n->real;
    }
    pthread_mutex_unlock(&e->op);
    return out;
}

gs_swap_vmm_t gs_swap_vmm_retain(gs_swap_engine_t *e, CUmemGenericAllocationHandle *out_h,
                                 CUdeviceptr addr, CUresult *res, int *dev)
{
    pthread_mutex_lock(&e->op);
    gs_swap_range_t r;
    gs_swap_vmm_t out = GS_SWAP_VMM_PASS;
    if (!gs_swap_ranges_find(e->ranges, addr, &r) || !r.vmm)
        goto done;
    if (gs_swap_range_parked(&r)) {
        *dev = r.dev;
        out = GS_SWAP_VMM_PARKED;
        goto done;
    }
    out = GS_SWAP_VMM_DONE;
    CUmemGenericAllocationHandle h = 0;
    if ((*res = e->d->retain(&h, (void *)(uintptr_t)addr)) != CUDA_SUCCESS)
        goto done;
    gs_swap_name_t *n = r.name ? gs_swap_names_get(e->names, r.name) : NULL;
    if (n) {
        n->refs++;
        n->fixed = 1;
    } else { /* the program had released it: a name again, for this handle */
        gs_swap_name_t fresh = {
            .real = h, .size = r.bytes, .dev = r.dev, .va = r.va, .refs = 1, .fixed = 1};
        fresh.name = gs_swap_names_choose(e->names, h);
        if (gs_swap_names_add(e->names, &fresh) == 0)
            r.name = fresh.name;
    }
    r.pinned = 1; /* retained: it stays where it is */
    gs_swap_ranges_update(e->ranges, &r);
    *out_h = r.name ? r.name : h;
done:
    pthread_mutex_unlock(&e->op);
    return out;
}

gs_swap_vmm_t gs_swap_vmm_touch(gs_swap_engine_t *e, CUdeviceptr va, size_t size, int *dev)
{
    pthread_mutex_lock(&e->op);
    size_t n;
    gs_swap_range_t *rs = adopted_in(e, va, size, &n, dev);
    pthread_mutex_unlock(&e->op);
    free(rs);
    return *dev >= 0 ? GS_SWAP_VMM_PARKED : GS_SWAP_VMM_PASS;
}
