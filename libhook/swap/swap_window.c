/*
 * swap_window.c - importing and mapping the pool's chunks (swap_window.h).
 */
#include "swap_window.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed(const gs_swap_driver_t *d, const char *what, CUresult r, char *err, size_t errlen)
{
    const char *name = NULL;
    d->error_name(r, &name);
    snprintf(err, errlen, "%s: %s", what, name ? name : "unknown error");
    return -1;
}

/* Imports and maps fds[0 .. n) at positions first .., then grants the GPU
 * access to them in one call (the CPU need not: only copy engines touch
 * the window).  0, or -1 with err set and nothing of them left mapped. */
static int map_chunks(const gs_swap_driver_t *d, gs_swap_window_t *w, int first, const int *fds,
                      int n, char *err, size_t errlen)
{
    if (first + n > w->chunks) {
        snprintf(err, errlen, "more host memory than the window has room for");
        return -1;
    }
    CUdeviceptr at = w->va + (size_t)first * w->chunk_bytes;
    CUresult r = CUDA_SUCCESS;
    int mapped = 0;
    const char *what = NULL;
    for (; mapped < n; mapped++) {
        CUmemGenericAllocationHandle h = 0;
        r = d->import(&h, (void *)(intptr_t)fds[mapped], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (r != CUDA_SUCCESS) {
            what = "cuMemImportFromShareableHandle";
            break;
        }
        r = d->map(at + (size_t)mapped * w->chunk_bytes, w->chunk_bytes, 0, h, 0);
        d->release(h); /* the mapping holds the memory from now on */
        if (r != CUDA_SUCCESS) {
            what = "cuMemMap";
            break;
        }
    }
    if (!what && n > 0) {
        CUmemAccessDesc a;
        memset(&a, 0, sizeof a);
        a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        a.location.id = w->dev;
        a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        r = d->set_access(at, (size_t)n * w->chunk_bytes, &a, 1);
        if (r != CUDA_SUCCESS)
            what = "cuMemSetAccess";
    }
    if (what) {
        for (int i = 0; i < mapped; i++)
            d->unmap(at + (size_t)i * w->chunk_bytes, w->chunk_bytes);
        return failed(d, what, r, err, errlen);
    }
    return 0;
}

int gs_swap_window_open_part(const gs_swap_driver_t *d, int dev, const int *fds, int n, int want,
                             size_t chunk_bytes, gs_swap_window_t *w, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    if (want <= 0 || n < 0 || n > want || chunk_bytes == 0) {
        snprintf(err, errlen, "no host memory lent");
        return -1;
    }
    if (!d->import) {
        snprintf(err, errlen,
                 "the driver cannot import host memory (no cuMemImportFromShareableHandle)");
        return -1;
    }
    size_t bytes = (size_t)want * chunk_bytes;
    unsigned char *gone = calloc((size_t)want, 1);
    if (!gone) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    CUdeviceptr va = 0;
    CUresult r = d->reserve(&va, bytes, 0, 0, 0);
    if (r != CUDA_SUCCESS) {
        free(gone);
        return failed(d, "cuMemAddressReserve", r, err, errlen);
    }
    *w = (gs_swap_window_t){va, bytes, chunk_bytes, want, 0, gone, dev};
    if (map_chunks(d, w, 0, fds, n, err, errlen) != 0) {
        d->address_free(va, bytes);
        free(gone);
        memset(w, 0, sizeof *w);
        return -1;
    }
    w->mapped = n;
    return 0;
}

int gs_swap_window_open(const gs_swap_driver_t *d, int dev, const int *fds, int n,
                        size_t chunk_bytes, gs_swap_window_t *w, char *err, size_t errlen)
{
    if (n <= 0) {
        memset(w, 0, sizeof *w);
        snprintf(err, errlen, "no host memory lent");
        return -1;
    }
    return gs_swap_window_open_part(d, dev, fds, n, n, chunk_bytes, w, err, errlen);
}

int gs_swap_window_extend(const gs_swap_driver_t *d, gs_swap_window_t *w, const int *fds, int n,
                          char *err, size_t errlen)
{
    if (!w->va) {
        snprintf(err, errlen, "no host window open");
        return -1;
    }
    if (map_chunks(d, w, w->mapped, fds, n, err, errlen) != 0)
        return -1;
    w->mapped += n;
    return 0;
}

size_t gs_swap_window_mapped_bytes(const gs_swap_window_t *w)
{
    return (size_t)w->mapped * w->chunk_bytes;
}

void gs_swap_window_drop(const gs_swap_driver_t *d, gs_swap_window_t *w, int pos)
{
    if (!w->va || pos < 0 || pos >= w->mapped || w->gone[pos])
        return;
    d->unmap(w->va + (size_t)pos * w->chunk_bytes, w->chunk_bytes);
    w->gone[pos] = 1;
}

/* Every chunk still mapped is unmapped (its memory goes back to the pool
 * when the last mapping goes). */
static void unmap_chunks(const gs_swap_driver_t *d, gs_swap_window_t *w)
{
    for (int i = 0; i < w->mapped; i++)
        if (!w->gone[i])
            d->unmap(w->va + (size_t)i * w->chunk_bytes, w->chunk_bytes);
}

void gs_swap_window_hollow(const gs_swap_driver_t *d, gs_swap_window_t *w)
{
    if (!w->va)
        return;
    unmap_chunks(d, w);
    memset(w->gone, 0, (size_t)w->chunks);
    w->mapped = 0;
}

void gs_swap_window_close(const gs_swap_driver_t *d, gs_swap_window_t *w)
{
    if (!w->va)
        return;
    unmap_chunks(d, w);
    d->address_free(w->va, w->bytes);
    free(w->gone);
    memset(w, 0, sizeof *w);
}
