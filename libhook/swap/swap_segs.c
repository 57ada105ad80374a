/*
 * swap_segs.c - the swap engine's building blocks, below both the engine's
 * allocations (swap_engine.c), its moves (swap_move.c) and the program's
 * own mappings (swap_vmm.c): a segment's physical memory made and mapped
 * with its access, or unmapped and released; the streams and events of a
 * context (its lane); the clock and the driver's error names.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "swap_state.h"

int64_t gs_swap_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

const char *gs_swap_errname(const gs_swap_engine_t *e, CUresult r)
{
    const char *n = NULL;
    e->d->error_name(r, &n);
    return n ? n : "unknown error";
}

/* Device memory as the tier makes it: exportable as a descriptor where the
 * GPU allows it, so that a range can be shared with another process when
 * the program asks for a legacy IPC handle (swap_engine.h). */
CUmemAllocationProp gs_swap_device_prop(gs_swap_engine_t *e, int dev)
{
    if (!e->shareable[dev]) {
        int v = 0;
        e->shareable[dev] = e->d->device_attribute(
                                &v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                dev) == CUDA_SUCCESS &&
                                    v
                                ? 1
                                : -1;
    }
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    if (e->shareable[dev] > 0)
        p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

/* The access list for ranges on GPU dev: itself and its peers. */
size_t gs_swap_access_list(const gs_swap_engine_t *e, int dev, CUmemAccessDesc *a)
{
    size_t n = 0;
    for (int g = 0; g < MAX_DEVS; g++)
        if (g == dev || (e->peers[dev] >> g & 1)) {
            memset(&a[n], 0, sizeof a[n]);
            a[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            a[n].location.id = g;
            a[n].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
            n++;
        }
    return n;
}

/* The access the program gave its own mapping. */
static size_t vmm_access_list(const gs_swap_range_t *r, CUmemAccessDesc *a)
{
    size_t n = 0;
    for (int g = 0; g < MAX_DEVS; g++)
        if ((r->access_rw | r->access_ro) >> g & 1) {
            memset(&a[n], 0, sizeof a[n]);
            a[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            a[n].location.id = g;
            a[n].flags = r->access_rw >> g & 1 ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                                               : CU_MEM_ACCESS_FLAGS_PROT_READ;
            n++;
        }
    return n;
}

/* A program's mapping comes back as new memory to the driver: the program
 * keeps its name for it (swap_names.h), or, when it had released its
 * handle, the mapping alone holds the memory again. */
CUresult gs_swap_seg_back(gs_swap_engine_t *e, gs_swap_range_t *r, int k)
{
    CUmemAllocationProp prop = r->vmm ? r->prop : gs_swap_device_prop(e, r->dev);
    CUmemGenericAllocationHandle h = 0;
    size_t len = gs_swap_seg_len(r, k);
    CUdeviceptr at = r->va + gs_swap_seg_off(r, k);
    CUresult res = e->d->create(&h, len, &prop, 0);
    if (res != CUDA_SUCCESS)
        return res;
    res = e->d->map(at, len, 0, h, 0);
    if (res != CUDA_SUCCESS) {
        e->d->release(h);
        return res;
    }
    CUmemAccessDesc a[MAX_DEVS];
    size_t na = r->vmm ? vmm_access_list(r, a) : gs_swap_access_list(e, r->dev, a);
    res = na ? e->d->set_access(at, len, a, na) : CUDA_SUCCESS;
    if (res != CUDA_SUCCESS) {
        e->d->unmap(at, len);
        e->d->release(h);
        return res;
    }
    if (r->vmm) {
        gs_swap_name_t *n = r->name ? gs_swap_names_get(e->names, r->name) : NULL;
        if (n)
            n->real = h;
        else
            e->d->release(h); /* released by the program: the mapping holds it */
    }
    r->seg[k] = h;
    r->resident_bytes += len;
    return CUDA_SUCCESS;
}

CUresult gs_swap_seg_unback(gs_swap_engine_t *e, gs_swap_range_t *r, int k)
{
    size_t len = gs_swap_seg_len(r, k);
    CUresult res = e->d->unmap(r->va + gs_swap_seg_off(r, k), len);
    if (res != CUDA_SUCCESS)
        return res;
    if (r->vmm) {
        gs_swap_name_t *n = r->name ? gs_swap_names_get(e->names, r->name) : NULL;
        if (n) {
            e->d->release(r->seg[k]);
            n->real = 0;
        } /* else the program released it: the unmap freed it */
    } else
        e->d->release(r->seg[k]);
    r->seg[k] = 0;
    r->resident_bytes -= len;
    return CUDA_SUCCESS;
}

struct lane *gs_swap_lane_of(gs_swap_engine_t *e, CUcontext ctx, char *err, size_t errlen)
{
    for (int i = 0; i < e->nlanes; i++)
        if (e->lanes[i].ctx == ctx)
            return &e->lanes[i];
    if (e->nlanes == MAX_LANES) {
        snprintf(err, errlen, "more than %d contexts hold device memory", MAX_LANES);
        return NULL;
    }
    struct lane *l = &e->lanes[e->nlanes];
    memset(l, 0, sizeof *l);
    l->ctx = ctx;
    for (int k = 0; k < e->cfg.streams; k++) {
        CUresult r = e->d->stream_create(&l->s[k], CU_STREAM_NON_BLOCKING);
        if (r == CUDA_SUCCESS)
            r = e->d->event_create(&l->ev[0][k], CU_EVENT_DISABLE_TIMING);
        if (r == CUDA_SUCCESS)
            r = e->d->event_create(&l->ev[1][k], CU_EVENT_DISABLE_TIMING);
        if (r != CUDA_SUCCESS) {
            snprintf(err, errlen, "creating the swap's streams: %s", gs_swap_errname(e, r));
            return NULL; /* what was made stays unused: a later call does not reuse it */
        }
    }
    e->nlanes++;
    return l;
}

void gs_swap_lane_prepare(gs_swap_engine_t *e, CUcontext ctx)
{
    char err[200];
    if (ctx)
        (void)gs_swap_lane_of(e, ctx, err, sizeof err); /* on failure the move tries again */
}
