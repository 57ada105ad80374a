/*
 * swap_engine.c - VMM-backed allocations (swap_engine.h): the engine,
 * allocation and free, and sharing ranges with other processes, over
 * swap_segs.c (segments backed and unbacked); swap_move.c moves them.
 */
#define _GNU_SOURCE
#include "swap_engine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gs_assert.h"
#include "swap_state.h"

gs_swap_engine_t *gs_swap_engine_new(const gs_swap_driver_t *d, gs_swap_ranges_t *ranges,
                                     const gs_swap_engine_config_t *cfg)
{
    gs_swap_engine_t *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->d = d;
    e->ranges = ranges;
    e->cfg = *cfg;
    if (e->cfg.streams < 1)
        e->cfg.streams = 1;
    if (e->cfg.streams > MAX_STREAMS)
        e->cfg.streams = MAX_STREAMS;
    if (!e->cfg.piece_bytes)
        e->cfg.piece_bytes = 64u << 20;
    if (!e->cfg.batch_bytes)
        e->cfg.batch_bytes = GS_SWAP_SEGMENT_DEFAULT;
    if (!e->cfg.seg_bytes)
        e->cfg.seg_bytes = GS_SWAP_SEGMENT_DEFAULT;
    e->names = gs_swap_names_new();
    if (!e->names) {
        free(e);
        return NULL;
    }
    pthread_mutex_init(&e->op, NULL);
    return e;
}

size_t gs_swap_engine_segment_bytes(const gs_swap_engine_t *self)
{
    return self ? self->cfg.seg_bytes : 0;
}

void gs_swap_engine_destroy(gs_swap_engine_t **self_p)
{
    gs_swap_engine_t *e = self_p ? *self_p : NULL;
    if (!e)
        return;
    for (int i = 0; i < e->nlanes; i++) {
        struct lane *l = &e->lanes[i];
        if (e->d->ctx_push(l->ctx) != CUDA_SUCCESS)
            continue; /* the context is gone, and its streams with it */
        for (int k = 0; k < e->cfg.streams; k++) {
            e->d->event_destroy(l->ev[0][k]);
            e->d->event_destroy(l->ev[1][k]);
            e->d->stream_destroy(l->s[k]);
        }
        CUcontext old;
        e->d->ctx_pop(&old);
    }
    pthread_mutex_destroy(&e->op);
    gs_swap_names_destroy(&e->names);
    free(e);
    *self_p = NULL;
}

static CUresult back_seg(gs_swap_engine_t *e, gs_swap_range_t *r, int k)
{
    return gs_swap_seg_back(e, r, k);
}

static CUresult unback_seg(gs_swap_engine_t *e, gs_swap_range_t *r, int k)
{
    return gs_swap_seg_unback(e, r, k);
}

/* Every segment still on the GPU goes (op held). */
static CUresult unback_all(gs_swap_engine_t *e, gs_swap_range_t *r)
{
    CUresult res = CUDA_SUCCESS;
    for (int k = 0; k < r->nseg; k++)
        if (r->seg[k]) {
            CUresult x = unback_seg(e, r, k);
            if (x != CUDA_SUCCESS)
                res = x;
        }
    return res;
}

/* ---- allocation ---------------------------------------------------------- */

static size_t granularity(gs_swap_engine_t *e, int dev)
{
    if (!e->gran[dev]) {
        CUmemAllocationProp prop = gs_swap_device_prop(e, dev);
        size_t g = 0;
        if (e->d->granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || !g)
            g = 2u << 20;
        e->gran[dev] = g;
    }
    return e->gran[dev];
}

CUresult gs_swap_alloc(gs_swap_engine_t *e, CUcontext ctx, int dev, size_t size, CUdeviceptr *va)
{
    if (!va || size == 0 || dev < 0 || dev >= MAX_DEVS)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&e->op);
    size_t g = granularity(e, dev);
    gs_swap_range_t r = {.size = size, .ctx = ctx, .dev = dev};
    r.bytes = size / g * g + (size % g ? g : 0);
    r.seg_bytes = e->cfg.seg_bytes / g * g;
    if (r.seg_bytes < g)
        r.seg_bytes = g;
    r.nseg = (int)((r.bytes + r.seg_bytes - 1) / r.seg_bytes);
    r.seg = calloc((size_t)r.nseg, sizeof *r.seg);
    CUresult res = r.seg ? e->d->reserve(&r.va, r.bytes, 0, 0, 0) : CUDA_ERROR_OUT_OF_MEMORY;
    if (res == CUDA_SUCCESS) {
        for (int k = 0; k < r.nseg && res == CUDA_SUCCESS; k++)
            res = back_seg(e, &r, k);
        if (res == CUDA_SUCCESS && gs_swap_ranges_add(e->ranges, &r) != 0)
            res = CUDA_ERROR_OUT_OF_MEMORY;
        if (res != CUDA_SUCCESS) {
            unback_all(e, &r);
            e->d->address_free(r.va, r.bytes);
        }
    }
    if (res == CUDA_SUCCESS)
        gs_swap_lane_prepare(e, ctx);
    pthread_mutex_unlock(&e->op);
    if (res == CUDA_SUCCESS)
        *va = r.va;
    else
        free(r.seg);
    return res;
}

CUresult gs_swap_free(gs_swap_engine_t *e, CUdeviceptr va, int *ours)
{
    gs_swap_range_t r;
    pthread_mutex_lock(&e->op);
    /* The program's own mappings are not cuMemAlloc memory: cuMemFree of
     * one is the driver's to refuse. */
    *ours = gs_swap_ranges_find(e->ranges, va, &r) && r.va == va && !r.vmm &&
            gs_swap_ranges_remove(e->ranges, va, &r);
    CUresult res = CUDA_SUCCESS;
    if (*ours) {
        if (r.resident_bytes) {
            /* cuMemFree waits for the work that may still use the memory. */
            if (e->d->ctx_push(r.ctx) == CUDA_SUCCESS) {
                e->d->ctx_synchronize();
                CUcontext old;
                e->d->ctx_pop(&old);
            }
            res = unback_all(e, &r);
        }
        if (res == CUDA_SUCCESS) {
            res = e->d->address_free(r.va, r.bytes);
            free(r.seg);
        } else
            gs_swap_ranges_add(e->ranges, &r); /* still mapped: keep it known */
    }
    pthread_mutex_unlock(&e->op);
    return res;
}

void gs_swap_forget_ctx(gs_swap_engine_t *e, CUcontext ctx)
{
    pthread_mutex_lock(&e->op);
    size_t n = gs_swap_ranges_list(e->ranges, -1, GS_SWAP_ALL, NULL, 0);
    gs_swap_range_t *rs = n ? malloc(n * sizeof *rs) : NULL;
    if (rs) {
        size_t k = gs_swap_ranges_list(e->ranges, -1, GS_SWAP_ALL, rs, n);
        for (size_t i = 0; i < k && i < n; i++) {
            gs_swap_range_t r;
            if (rs[i].ctx != ctx || (rs[i].vmm && gs_swap_range_parked(&rs[i])) ||
                !gs_swap_ranges_remove(e->ranges, rs[i].va, &r))
                continue;
            if (r.vmm) { /* the program's mapping outlives the context: it stays, unmoved */
                gs_swap_name_t *nm = r.name ? gs_swap_names_get(e->names, r.name) : NULL;
                if (nm)
                    nm->va = 0;
                free(r.seg);
                continue;
            }
            unback_all(e, &r);
            e->d->address_free(r.va, r.bytes);
            free(r.seg);
        }
        free(rs);
    }
    /* Its streams went with it. */
    for (int i = 0; i < e->nlanes; i++)
        if (e->lanes[i].ctx == ctx)
            e->lanes[i--] = e->lanes[--e->nlanes];
    pthread_mutex_unlock(&e->op);
}

CUresult gs_swap_grant_peer(gs_swap_engine_t *e, int owner, int accessor)
{
    if (owner < 0 || owner >= MAX_DEVS || accessor < 0 || accessor >= MAX_DEVS)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&e->op);
    e->peers[owner] |= 1ull << accessor;
    size_t n = gs_swap_ranges_list(e->ranges, owner, GS_SWAP_ALL, NULL, 0);
    gs_swap_range_t *rs = n ? malloc(n * sizeof *rs) : NULL;
    CUresult res = n && !rs ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    if (rs) {
        n = gs_swap_ranges_list(e->ranges, owner, GS_SWAP_ALL, rs, n);
        CUmemAccessDesc a[MAX_DEVS];
        size_t na = gs_swap_access_list(e, owner, a);
        for (size_t i = 0; i < n && res == CUDA_SUCCESS; i++)
            for (int k = 0; k < rs[i].nseg && res == CUDA_SUCCESS && !rs[i].vmm; k++)
                if (rs[i].seg[k])
                    res = e->d->set_access(rs[i].va + gs_swap_seg_off(&rs[i], k),
                                           gs_swap_seg_len(&rs[i], k), a, na);
        free(rs);
    }
    pthread_mutex_unlock(&e->op);
    return res;
}

/* ---- sharing with other processes (legacy IPC emulated) --------------------- */

int gs_swap_ipc_keys(gs_swap_engine_t *e, CUdeviceptr p, const gs_swap_ipc_keys_t *fresh,
                     gs_swap_ipc_keys_t *keys, CUdeviceptr *base)
{
    pthread_mutex_lock(&e->op);
    gs_swap_range_t r;
    int rc = -1;
    if (gs_swap_ranges_find(e->ranges, p, &r) && !r.vmm) {
        if (r.ipc_pid != getpid()) {
            r.ipc = *fresh;
            r.ipc_pid = getpid();
            gs_swap_ranges_update(e->ranges, &r);
        }
        *keys = r.ipc;
        *base = r.va;
        rc = 0;
    }
    pthread_mutex_unlock(&e->op);
    return rc;
}

int gs_swap_export(gs_swap_engine_t *e, CUdeviceptr base, const unsigned char *ask, int *fds,
                   int max, gs_swap_shape_t *shape, unsigned char *proof, char *err, size_t errlen)
{
    pthread_mutex_lock(&e->op);
    gs_swap_range_t r;
    int n = -1;
    if (!gs_swap_ranges_find(e->ranges, base, &r) || r.vmm || r.va != base ||
        r.ipc_pid != getpid() || !gs_swap_ipc_same(ask, r.ipc.ask))
        snprintf(err, errlen, "no memory of this process is shared under that handle");
    else if (gs_swap_range_parked(&r))
        snprintf(err, errlen, "the memory is parked");
    else if (r.nseg > max)
        snprintf(err, errlen, "too many segments (%d)", r.nseg);
    else if (e->shareable[r.dev] <= 0)
        snprintf(err, errlen, "this GPU cannot export memory as descriptors");
    else {
        n = 0;
        for (int k = 0; k < r.nseg; k++) {
            CUresult res =
                e->d->export_fd(&fds[k], r.seg[k], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
            if (res != CUDA_SUCCESS) {
                snprintf(err, errlen, "cuMemExportToShareableHandle: %s", gs_swap_errname(e, res));
                for (int j = 0; j < k; j++)
                    close(fds[j]);
                n = -1;
                break;
            }
            n++;
        }
        if (n > 0 && !r.pinned) { /* shared from now on: it stays where it is */
            r.pinned = 1;
            gs_swap_ranges_update(e->ranges, &r);
        }
        *shape = (gs_swap_shape_t){r.va, r.size, r.bytes, r.seg_bytes, r.nseg, r.dev};
        memcpy(proof, r.ipc.proof, GS_SWAP_IPC_KEY);
    }
    pthread_mutex_unlock(&e->op);
    return n;
}

CUresult gs_swap_import(gs_swap_engine_t *e, int dev, const gs_swap_shape_t *shape, const int *fds,
                        CUdeviceptr *va)
{
    if (shape->nseg <= 0 || !shape->bytes || dev < 0 || dev >= MAX_DEVS)
        return CUDA_ERROR_INVALID_VALUE;
    struct imported *im = calloc(1, sizeof *im);
    if (!im)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUdeviceptr at = 0;
    CUresult res = e->d->reserve(&at, shape->bytes, 0, 0, 0);
    int mapped = 0;
    for (; res == CUDA_SUCCESS && mapped < shape->nseg; mapped++) {
        size_t off = (size_t)mapped * shape->seg_bytes;
        size_t len = shape->bytes - off < shape->seg_bytes ? shape->bytes - off : shape->seg_bytes;
        CUmemGenericAllocationHandle h = 0;
        res = e->d->import(&h, (void *)(intptr_t)fds[mapped],
                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (res != CUDA_SUCCESS)
            break;
        res = e->d->map(at + off, len, 0, h, 0);
        e->d->release(h); /* the mapping holds it */
        if (res != CUDA_SUCCESS)
            break;
    }
    if (res == CUDA_SUCCESS) {
        CUmemAccessDesc a[MAX_DEVS];
        pthread_mutex_lock(&e->op);
        size_t na = gs_swap_access_list(e, dev, a);
        pthread_mutex_unlock(&e->op);
        res = e->d->set_access(at, shape->bytes, a, na);
    }
    if (res != CUDA_SUCCESS) {
        for (int k = 0; k < mapped; k++) {
            size_t off = (size_t)k * shape->seg_bytes;
            e->d->unmap(at + off, shape->bytes - off < shape->seg_bytes ? shape->bytes - off
                                                                        : shape->seg_bytes);
        }
        if (at)
            e->d->address_free(at, shape->bytes);
        free(im);
        return res;
    }
    *im = (struct imported){at, shape->bytes, shape->seg_bytes, shape->nseg, NULL};
    pthread_mutex_lock(&e->op);
    im->next = e->imports;
    e->imports = im;
    pthread_mutex_unlock(&e->op);
    *va = at;
    return CUDA_SUCCESS;
}

CUresult gs_swap_unimport(gs_swap_engine_t *e, CUdeviceptr va, int *ours)
{
    pthread_mutex_lock(&e->op);
    struct imported *im = NULL;
    for (struct imported **pp = &e->imports; *pp; pp = &(*pp)->next)
        if ((*pp)->va == va) {
            im = *pp;
            *pp = im->next;
            break;
        }
    pthread_mutex_unlock(&e->op);
    *ours = im != NULL;
    if (!im)
        return CUDA_SUCCESS;
    for (int k = 0; k < im->nseg; k++) {
        size_t off = (size_t)k * im->seg_bytes;
        e->d->unmap(im->va + off,
                    im->bytes - off < im->seg_bytes ? im->bytes - off : im->seg_bytes);
    }
    CUresult res = e->d->address_free(im->va, im->bytes);
    free(im);
    return res;
}
