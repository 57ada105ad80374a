/*
 * sim_api_copy.c - copies and sets (cuMemcpy*, cuMemset*), in all their
 * ABI versions: _v2, the legacy 32-bit ones, and the _ptds/_ptsz
 * per-thread-default-stream variants (distinct functions; the same
 * default stream here).  Every operation is queued on a stream and done by
 * its worker in stream order; the synchronous forms use the context's
 * default stream and wait for completion.  Pointers are plain addresses
 * (unified addressing), so 2D/3D copies honour pitches and offsets
 * directly; CUDA arrays are not simulated (CUDA_ERROR_NOT_SUPPORTED).
 */
#include "sim_internal.h"

struct copy_desc {
    char *dst;
    const char *src;
    size_t width, height, depth;
    size_t dpitch, spitch, dslice, sslice;
    const char *kind;
};

/* The bytes an operation touches from its start address. */
static size_t span(size_t width, size_t height, size_t depth, size_t pitch, size_t slice)
{
    return (depth - 1) * slice + (height - 1) * pitch + width;
}

/* Virtual-memory mappings must grant the stream's device the access (a
 * real GPU faults: CUDA_ERROR_ILLEGAL_ADDRESS); checked at enqueue, so the
 * caller gets the error instead of the simulator's worker crashing. */
static CUresult check_access_locked(const struct sim_op *op, int dev)
{
    if (op->type == SIM_OP_COPY) {
        const char *src = op->u.copy.src;
        char *dst = op->u.copy.dst;
        size_t w = op->u.copy.width, h = op->u.copy.height, d = op->u.copy.depth;
        CUresult rc = sim_vmm_check_access_locked(
            (uintptr_t)src, span(w, h, d, op->u.copy.spitch, op->u.copy.sslice), dev, 0);
        if (rc == CUDA_SUCCESS)
            rc = sim_vmm_check_access_locked(
                (uintptr_t)dst, span(w, h, d, op->u.copy.dpitch, op->u.copy.dslice), dev, 1);
        return rc;
    }
    if (op->type == SIM_OP_SET)
        return sim_vmm_check_access_locked((uintptr_t)op->u.set.dst,
                                           span(op->u.set.width * (size_t)op->u.set.elsize,
                                                op->u.set.height, 1, op->u.set.pitch, 0),
                                           dev, 1);
    return CUDA_SUCCESS;
}

static CUresult submit(CUstream h, int pt, int sync, struct sim_op *op)
{
    sim_lock();
    struct sim_stream *s;
    CUresult rc = sim_stream_resolve(h, pt, &s);
    if (rc == CUDA_SUCCESS)
        rc = check_access_locked(op, s->ctx->dev);
    if (rc != CUDA_SUCCESS)
        sim_op_free_locked(op);
    else if (sync)
        rc = sim_submit_sync_locked(s, op);
    else
        rc = sim_submit_locked(s, op);
    sim_unlock();
    return rc;
}

static CUresult do_copy(const struct copy_desc *d, CUstream h, int pt, int sync)
{
    CUresult injected = sim_inject_take("cuMemcpy");
    if (injected != CUDA_SUCCESS)
        return injected;
    if (d->width == 0 || d->height == 0 || d->depth == 0) {
        /* nothing to copy; still check the stream */
        sim_lock();
        struct sim_stream *s;
        CUresult rc = sim_stream_resolve(h, pt, &s);
        sim_unlock();
        return rc;
    }
    if (!d->dst || !d->src)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_op *op = sim_op_new(SIM_OP_COPY);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.copy.dst = d->dst;
    op->u.copy.src = d->src;
    op->u.copy.width = d->width;
    op->u.copy.height = d->height;
    op->u.copy.depth = d->depth;
    op->u.copy.dpitch = d->dpitch;
    op->u.copy.spitch = d->spitch;
    op->u.copy.dslice = d->dslice;
    op->u.copy.sslice = d->sslice;
    op->u.copy.kind = d->kind;
    return submit(h, pt, sync, op);
}

static CUresult copy1d(void *dst, const void *src, size_t n, CUstream h, int pt, int sync,
                       const char *kind)
{
    struct copy_desc d = {dst, src, n, 1, 1, 0, 0, 0, 0, kind};
    return do_copy(&d, h, pt, sync);
}

#define DP(p)  ((void *)(uintptr_t)(p))
#define CDP(p) ((const void *)(uintptr_t)(p))

/* ---- 1D --------------------------------------------------------------- */

SIM_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    SIM_GATED(copy1d(DP(dst), CDP(src), ByteCount, NULL, 0, 1, "any"));
}

SIM_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    SIM_GATED(copy1d(DP(dst), CDP(src), ByteCount, NULL, 1, 1, "any"));
}

SIM_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                  CUstream hStream)
{
    SIM_GATED(copy1d(DP(dst), CDP(src), ByteCount, hStream, 0, 0, "any"));
}

SIM_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                       CUstream hStream)
{
    SIM_GATED(copy1d(DP(dst), CDP(src), ByteCount, hStream, 1, 0, "any"));
}

SIM_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    SIM_GATED(copy1d(DP(dstDevice), srcHost, ByteCount, NULL, 0, 1, "HtoD"));
}

SIM_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost,
                                         size_t ByteCount)
{
    SIM_GATED(copy1d(DP(dstDevice), srcHost, ByteCount, NULL, 1, 1, "HtoD"));
}

SIM_EXPORT CUresult cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void *srcHost,
                                 unsigned int ByteCount)
{
    SIM_GATED(copy1d(DP(dstDevice), srcHost, ByteCount, NULL, 0, 1, "HtoD"));
}

SIM_EXPORT CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    SIM_GATED(copy1d(dstHost, CDP(srcDevice), ByteCount, NULL, 0, 1, "DtoH"));
}

SIM_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    SIM_GATED(copy1d(dstHost, CDP(srcDevice), ByteCount, NULL, 1, 1, "DtoH"));
}

SIM_EXPORT CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount)
{
    SIM_GATED(copy1d(dstHost, CDP(srcDevice), ByteCount, NULL, 0, 1, "DtoH"));
}

SIM_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    SIM_GATED(copy1d(DP(dstDevice), CDP(srcDevice), ByteCount, NULL, 0, 1, "DtoD"));
}

SIM_EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                         size_t ByteCount)
{
    SIM_GATED(copy1d(DP(dstDevice), CDP(srcDevice), ByteCount, NULL, 1, 1, "DtoD"));
}

SIM_EXPORT CUresult cuMemcpyDtoD(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice,
                                 unsigned int ByteCount)
{
    SIM_GATED(copy1d(DP(dstDevice), CDP(srcDevice), ByteCount, NULL, 0, 1, "DtoD"));
}

SIM_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
                                         size_t ByteCount, CUstream hStream)
{
    SIM_GATED(copy1d(DP(dstDevice), srcHost, ByteCount, hStream, 0, 0, "HtoD"));
}

SIM_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
                                              size_t ByteCount, CUstream hStream)
{
    SIM_GATED(copy1d(DP(dstDevice), srcHost, ByteCount, hStream, 1, 0, "HtoD"));
}

SIM_EXPORT CUresult cuMemcpyHtoDAsync(CUdeviceptr_v1 dstDevice, const void *srcHost,
                                      unsigned int ByteCount, CUstream hStream)
{
    SIM_GATED(copy1d(DP(dstDevice), srcHost, ByteCount, hStream, 0, 0, "HtoD"));
}

SIM_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                         CUstream hStream)
{
    SIM_GATED(copy1d(dstHost, CDP(srcDevice), ByteCount, hStream, 0, 0, "DtoH"));
}

SIM_EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice,
                                              size_t ByteCount, CUstream hStream)
{
    SIM_GATED(copy1d(dstHost, CDP(srcDevice), ByteCount, hStream, 1, 0, "DtoH"));
}

SIM_EXPORT CUresult cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr_v1 srcDevice,
                                      unsigned int ByteCount, CUstream hStream)
{
    SIM_GATED(copy1d(dstHost, CDP(srcDevice), ByteCount, hStream, 0, 0, "DtoH"));
}

SIM_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                         size_t ByteCount, CUstream hStream)
{
    SIM_GATED(copy1d(DP(dstDevice), CDP(srcDevice), ByteCount, hStream, 0, 0, "DtoD"));
}

SIM_EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                              size_t ByteCount, CUstream hStream)
{
    SIM_GATED(copy1d(DP(dstDevice), CDP(srcDevice), ByteCount, hStream, 1, 0, "DtoD"));
}

SIM_EXPORT CUresult cuMemcpyDtoDAsync(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice,
                                      unsigned int ByteCount, CUstream hStream)
{
    SIM_GATED(copy1d(DP(dstDevice), CDP(srcDevice), ByteCount, hStream, 0, 0, "DtoD"));
}

/* Peer copies: every simulated device shares one address space. */
static CUresult peer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,
                     CUstream h, int pt, int sync)
{
    sim_lock();
    int ok = sim_ctx_valid_locked((struct sim_ctx *)dctx) &&
             sim_ctx_valid_locked((struct sim_ctx *)sctx);
    sim_unlock();
    if (!ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    return copy1d(DP(dst), CDP(src), n, h, pt, sync, "peer");
}

SIM_EXPORT CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                 CUcontext srcContext, size_t ByteCount)
{
    SIM_GATED(peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, NULL, 0, 1));
}

SIM_EXPORT CUresult cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext,
                                      CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount)
{
    SIM_GATED(peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, NULL, 1, 1));
}

SIM_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext,
                                      CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount,
                                      CUstream hStream)
{
    SIM_GATED(peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, 0, 0));
}

SIM_EXPORT CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext,
                                           CUdeviceptr srcDevice, CUcontext srcContext,
                                           size_t ByteCount, CUstream hStream)
{
    SIM_GATED(peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, 1, 0));
}

/* ---- 2D / 3D ---------------------------------------------------------- */

static CUresult endpoint(CUmemorytype t, const void *host, CUdeviceptr dev, const void **out)
{
    switch (t) {
    case CU_MEMORYTYPE_HOST:
        *out = host;
        return CUDA_SUCCESS;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
        *out = CDP(dev);
        return CUDA_SUCCESS;
    case CU_MEMORYTYPE_ARRAY:
        return CUDA_ERROR_NOT_SUPPORTED;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult copy3d(const CUDA_MEMCPY3D *c, CUstream h, int pt, int sync, const char *kind)
{
    if (!c || c->srcLOD || c->dstLOD || c->reserved0 || c->reserved1)
        return CUDA_ERROR_INVALID_VALUE;
    const void *src, *dst;
    CUresult rc = endpoint(c->srcMemoryType, c->srcHost, c->srcDevice, &src);
    if (rc == CUDA_SUCCESS)
        rc = endpoint(c->dstMemoryType, c->dstHost, c->dstDevice, &dst);
    if (rc != CUDA_SUCCESS)
        return rc;
    size_t depth = c->Depth ? c->Depth : 1;
    if (c->Height > 1 && (c->srcPitch < c->WidthInBytes || c->dstPitch < c->WidthInBytes))
        return CUDA_ERROR_INVALID_VALUE;
    if (depth > 1 && (c->srcHeight < c->Height || c->dstHeight < c->Height))
        return CUDA_ERROR_INVALID_VALUE;
    struct copy_desc d = {
        .dst = (char *)dst + (c->dstZ * c->dstHeight + c->dstY) * c->dstPitch + c->dstXInBytes,
        .src =
            (const char *)src + (c->srcZ * c->srcHeight + c->srcY) * c->srcPitch + c->srcXInBytes,
        .width = c->WidthInBytes,
        .height = c->Height,
        .depth = depth,
        .dpitch = c->dstPitch,
        .spitch = c->srcPitch,
        .dslice = c->dstPitch * c->dstHeight,
        .sslice = c->srcPitch * c->srcHeight,
        .kind = kind,
    };
    return do_copy(&d, h, pt, sync);
}

static CUresult copy2d(const CUDA_MEMCPY2D *c, CUstream h, int pt, int sync)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEMCPY3D t = {
        .srcXInBytes = c->srcXInBytes,
        .srcY = c->srcY,
        .srcMemoryType = c->srcMemoryType,
        .srcHost = c->srcHost,
        .srcDevice = c->srcDevice,
        .srcArray = c->srcArray,
        .srcPitch = c->srcPitch,
        .dstXInBytes = c->dstXInBytes,
        .dstY = c->dstY,
        .dstMemoryType = c->dstMemoryType,
        .dstHost = c->dstHost,
        .dstDevice = c->dstDevice,
        .dstArray = c->dstArray,
        .dstPitch = c->dstPitch,
        .WidthInBytes = c->WidthInBytes,
        .Height = c->Height,
        .Depth = 1,
    };
    return copy3d(&t, h, pt, sync, "2D");
}

SIM_EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy)
{
    SIM_GATED(copy2d(pCopy, NULL, 0, 1));
}

SIM_EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{
    SIM_GATED(copy2d(pCopy, NULL, 1, 1));
}

SIM_EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *pCopy)
{
    SIM_GATED(copy2d(pCopy, NULL, 0, 1));
}

SIM_EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{
    SIM_GATED(copy2d(pCopy, NULL, 1, 1));
}

SIM_EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
    SIM_GATED(copy2d(pCopy, hStream, 0, 0));
}

SIM_EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
    SIM_GATED(copy2d(pCopy, hStream, 1, 0));
}

SIM_EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *pCopy)
{
    SIM_GATED(copy3d(pCopy, NULL, 0, 1, "3D"));
}

SIM_EXPORT CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *pCopy)
{
    SIM_GATED(copy3d(pCopy, NULL, 1, 1, "3D"));
}

SIM_EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{
    SIM_GATED(copy3d(pCopy, hStream, 0, 0, "3D"));
}

SIM_EXPORT CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{
    SIM_GATED(copy3d(pCopy, hStream, 1, 0, "3D"));
}

/* ---- sets ------------------------------------------------------------- */

static CUresult set2d(CUdeviceptr dst, size_t pitch, uint32_t value, int elsize, size_t width,
                      size_t height, CUstream h, int pt, int sync)
{
    if (width == 0 || height == 0) {
        sim_lock();
        struct sim_stream *s;
        CUresult rc = sim_stream_resolve(h, pt, &s);
        sim_unlock();
        return rc;
    }
    if (!dst || dst % (CUdeviceptr)elsize ||
        (height > 1 && (pitch < width * (size_t)elsize || pitch % (size_t)elsize)))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_op *op = sim_op_new(SIM_OP_SET);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.set.dst = DP(dst);
    op->u.set.value = value;
    op->u.set.elsize = elsize;
    op->u.set.width = width;
    op->u.set.height = height;
    op->u.set.pitch = pitch;
    return submit(h, pt, sync, op);
}

#define SET1(n, e, v, h, pt, sync) set2d(dstDevice, 0, (uint32_t)(v), e, n, 1, h, pt, sync)

SIM_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    SIM_GATED(SET1(N, 1, uc, NULL, 0, 1));
}

SIM_EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    SIM_GATED(SET1(N, 1, uc, NULL, 1, 1));
}

SIM_EXPORT CUresult cuMemsetD8(CUdeviceptr_v1 dstDevice, unsigned char uc, unsigned int N)
{
    SIM_GATED(SET1(N, 1, uc, NULL, 0, 1));
}

SIM_EXPORT CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    SIM_GATED(SET1(N, 2, us, NULL, 0, 1));
}

SIM_EXPORT CUresult cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    SIM_GATED(SET1(N, 2, us, NULL, 1, 1));
}

SIM_EXPORT CUresult cuMemsetD16(CUdeviceptr_v1 dstDevice, unsigned short us, unsigned int N)
{
    SIM_GATED(SET1(N, 2, us, NULL, 0, 1));
}

SIM_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    SIM_GATED(SET1(N, 4, ui, NULL, 0, 1));
}

SIM_EXPORT CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    SIM_GATED(SET1(N, 4, ui, NULL, 1, 1));
}

SIM_EXPORT CUresult cuMemsetD32(CUdeviceptr_v1 dstDevice, unsigned int ui, unsigned int N)
{
    SIM_GATED(SET1(N, 4, ui, NULL, 0, 1));
}

SIM_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                    CUstream hStream)
{
    SIM_GATED(SET1(N, 1, uc, hStream, 0, 0));
}

SIM_EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                         CUstream hStream)
{
    SIM_GATED(SET1(N, 1, uc, hStream, 1, 0));
}

SIM_EXPORT CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                     CUstream hStream)
{
    SIM_GATED(SET1(N, 2, us, hStream, 0, 0));
}

SIM_EXPORT CUresult cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                          CUstream hStream)
{
    SIM_GATED(SET1(N, 2, us, hStream, 1, 0));
}

SIM_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                     CUstream hStream)
{
    SIM_GATED(SET1(N, 4, ui, hStream, 0, 0));
}

SIM_EXPORT CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                          CUstream hStream)
{
    SIM_GATED(SET1(N, 4, ui, hStream, 1, 0));
}

SIM_EXPORT CUresult cuMemsetD2D8_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                    size_t Width, size_t Height)
{
    SIM_GATED(set2d(dstDevice, dstPitch, uc, 1, Width, Height, NULL, 0, 1));
}

SIM_EXPORT CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                         size_t Width, size_t Height)
{
    SIM_GATED(set2d(dstDevice, dstPitch, uc, 1, Width, Height, NULL, 1, 1));
}

SIM_EXPORT CUresult cuMemsetD2D8(CUdeviceptr_v1 dstDevice, unsigned int dstPitch, unsigned char uc,
                                 unsigned int Width, unsigned int Height)
{
    SIM_GATED(set2d(dstDevice, dstPitch, uc, 1, Width, Height, NULL, 0, 1));
}

SIM_EXPORT CUresult cuMemsetD2D16_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                     size_t Width, size_t Height)
{
    SIM_GATED(set2d(dstDevice, dstPitch, us, 2, Width, Height, NULL, 0, 1));
}

SIM_EXPORT CUresult cuMemsetD2D16_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                          size_t Width, size_t Height)
{
    SIM_GATED(set2d(dstDevice, dstPitch, us, 2, Width, Height, NULL, 1, 1));
}

SIM_EXPORT CUresult cuMemsetD2D16(CUdeviceptr_v1 dstDevice, unsigned int dstPitch,
                                  unsigned short us, unsigned int Width, unsigned int Height)
{
    SIM_GATED(set2d(dstDevice, dstPitch, us, 2, Width, Height, NULL, 0, 1));
}

SIM_EXPORT CUresult cuMemsetD2D32_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                     size_t Width, size_t Height)
{
    SIM_GATED(set2d(dstDevice, dstPitch, ui, 4, Width, Height, NULL, 0, 1));
}

SIM_EXPORT CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                          size_t Width, size_t Height)
{
    SIM_GATED(set2d(dstDevice, dstPitch, ui, 4, Width, Height, NULL, 1, 1));
}

SIM_EXPORT CUresult cuMemsetD2D32(CUdeviceptr_v1 dstDevice, unsigned int dstPitch, unsigned int ui,
                                  unsigned int Width, unsigned int Height)
{
    SIM_GATED(set2d(dstDevice, dstPitch, ui, 4, Width, Height, NULL, 0, 1));
}

SIM_EXPORT CUresult cuMemsetD2D8Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                      size_t Width, size_t Height, CUstream hStream)
{
    SIM_GATED(set2d(dstDevice, dstPitch, uc, 1, Width, Height, hStream, 0, 0));
}

SIM_EXPORT CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                           size_t Width, size_t Height, CUstream hStream)
{
    SIM_GATED(set2d(dstDevice, dstPitch, uc, 1, Width, Height, hStream, 1, 0));
}

SIM_EXPORT CUresult cuMemsetD2D16Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                       size_t Width, size_t Height, CUstream hStream)
{
    SIM_GATED(set2d(dstDevice, dstPitch, us, 2, Width, Height, hStream, 0, 0));
}

SIM_EXPORT CUresult cuMemsetD2D16Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch,
                                            unsigned short us, size_t Width, size_t Height,
                                            CUstream hStream)
{
    SIM_GATED(set2d(dstDevice, dstPitch, us, 2, Width, Height, hStream, 1, 0));
}

SIM_EXPORT CUresult cuMemsetD2D32Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                       size_t Width, size_t Height, CUstream hStream)
{
    SIM_GATED(set2d(dstDevice, dstPitch, ui, 4, Width, Height, hStream, 0, 0));
}

SIM_EXPORT CUresult cuMemsetD2D32Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                            size_t Width, size_t Height, CUstream hStream)
{
    SIM_GATED(set2d(dstDevice, dstPitch, ui, 4, Width, Height, hStream, 1, 0));
}
