/*
 * swap_window.c - importing and mapping the pool's chunks (swap_window.h).
 */
#include "swap_window.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int failed(const gs_swap_driver_t *d, const char *what, CUresult r, char *err, size_t errlen)
{
    const char *name = NULL;
    d->error_name(r, &name);
    snprintf(err, errlen, "%s: %s", what, name ? name : "unknown error");
    return -1;
}

int gs_swap_window_open(const gs_swap_driver_t *d, int dev, const int *fds, int n,
                        size_t chunk_bytes, gs_swap_window_t *w, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    if (n <= 0 || chunk_bytes == 0) {
        snprintf(err, errlen, "no host memory lent");
        return -1;
    }
    if (!d->import) {
        snprintf(err, errlen,
                 "the driver cannot import host memory (no cuMemImportFromShareableHandle)");
        return -1;
    }
    size_t bytes = (size_t)n * chunk_bytes;
    CUdeviceptr va = 0;
    CUresult r = d->reserve(&va, bytes, 0, 0, 0);
    if (r != CUDA_SUCCESS)
        return failed(d, "cuMemAddressReserve", r, err, errlen);
    int mapped = 0;
    const char *what = NULL;
    for (; mapped < n; mapped++) {
        CUmemGenericAllocationHandle h = 0;
        r = d->import(&h, (void *)(intptr_t)fds[mapped], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (r != CUDA_SUCCESS) {
            what = "cuMemImportFromShareableHandle";
            break;
        }
        r = d->map(va + (size_t)mapped * chunk_bytes, chunk_bytes, 0, h, 0);
        d->release(h); /* the mapping holds the memory from now on */
        if (r != CUDA_SUCCESS) {
            what = "cuMemMap";
            break;
        }
    }
    if (!what) {
        /* One call for the whole window: the GPU reaches it, the CPU need
         * not (only copy engines touch it). */
        CUmemAccessDesc a;
        memset(&a, 0, sizeof a);
        a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        a.location.id = dev;
        a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        r = d->set_access(va, bytes, &a, 1);
        if (r != CUDA_SUCCESS)
            what = "cuMemSetAccess";
    }
    if (what) {
        for (int i = 0; i < mapped; i++)
            d->unmap(va + (size_t)i * chunk_bytes, chunk_bytes);
        d->address_free(va, bytes);
        return failed(d, what, r, err, errlen);
    }
    *w = (gs_swap_window_t){va, bytes, chunk_bytes, n, dev};
    return 0;
}

void gs_swap_window_close(const gs_swap_driver_t *d, gs_swap_window_t *w)
{
    if (!w->va)
        return;
    for (int i = 0; i < w->chunks; i++)
        d->unmap(w->va + (size_t)i * w->chunk_bytes, w->chunk_bytes);
    d->address_free(w->va, w->bytes);
    memset(w, 0, sizeof *w);
}
