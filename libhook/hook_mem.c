/*
 * hook_mem.c - device memory: what this process holds on each GPU, an
 * optional limit, managed memory instead of device memory, and asking the
 * broker for room when an allocation does not fit.
 *
 * Every allocation and free path is accounted per device: cuMemAlloc*,
 * cuMemAllocPitch*, cuMemAllocAsync*, cuMemAllocFromPoolAsync* (the size
 * asked for; what the pool keeps cached is not seen), cuMemAllocManaged,
 * cuMemFree*, cuMemFreeAsync*, and the virtual memory API: physical memory
 * counts from cuMemCreate until it is really freed, which is at cuMemRelease
 * or, when it is still mapped then, at its last cuMemUnmap; mapping does not
 * count again (PyTorch's expandable segments map and unmap as they grow and
 * shrink).  Allocations of a context go with it when it is destroyed.  The
 * sizes live in hash maps (open addressing, one mutex: O(1) per call) from
 * pointer, handle or mapped address to (device, size, kind).
 *
 * A change of a device's footprint marks it; the I/O thread sends `memory`
 * (used, managed, peak) at most every HOOK_MEM_REPORT_MS per device, always
 * the latest value (hook_client.c).
 *
 * GPUSHARE_MEMORY_LIMIT caps the process' footprint per device: an
 * allocation past it fails with CUDA_ERROR_OUT_OF_MEMORY without reaching
 * the driver, and cuMemGetInfo / cuDeviceTotalMem report the limit.
 * GPUSHARE_MEMORY=managed serves cuMemAlloc_v2 and cuMemAllocPitch_v2 with
 * cuMemAllocManaged(CU_MEM_ATTACH_GLOBAL) (see README.md for what it does
 * not cover).  In device mode, an allocation the driver refuses for lack of
 * memory asks the broker to make room (make_room) and is retried once when
 * it did, unless the thread is capturing a stream.
 *
 * A free is taken out of the maps before the real call and put back if the
 * call fails, so an address or handle the driver hands out again at once
 * cannot be confused with the one being freed.
 */
#define _GNU_SOURCE
#include "gpushare_hook.h"
#include "hook_internal.h"
#include "hook_ipc.h"
#include "hook_swap.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "gs_assert.h"

enum mkind { MK_DEVICE = 1, MK_MANAGED, MK_PHYS, MK_MAP };

struct mval {
    uint64_t size;
    uint64_t handle; /* MK_MAP: the physical allocation mapped there */
    CUcontext ctx;   /* MK_DEVICE/MK_MANAGED: freed with this context */
    int32_t dev;
    uint8_t kind;
    uint8_t released; /* MK_PHYS: cuMemRelease called while still mapped */
    uint32_t maps;    /* MK_PHYS: live mappings */
};

struct mslot {
    uint64_t key; /* 0: empty */
    struct mval v;
};

struct mtab {
    struct mslot *s;
    size_t cap, n; /* cap: a power of two, or 0 */
};

static pthread_mutex_t memu = PTHREAD_MUTEX_INITIALIZER; /* leaf lock */
static struct mtab ptrs, handles, vas;
static struct {
    uint64_t used, managed, peak, reserved;
    int changed;
} md[HOOK_MAX_DEVICES];

/* ---- the hash maps (memu held) ------------------------------------------- */

static size_t mhash(uint64_t k)
{
    k ^= k >> 30;
    k *= 0xbf58476d1ce4e5b9ULL;
    k ^= k >> 27;
    k *= 0x94d049bb133111ebULL;
    k ^= k >> 31;
    return (size_t)k;
}

static struct mval *mget(struct mtab *t, uint64_t key)
{
    if (!t->cap || !key)
        return NULL;
    size_t mask = t->cap - 1;
    for (size_t i = mhash(key) & mask;; i = (i + 1) & mask) {
        if (t->s[i].key == key)
            return &t->s[i].v;
        if (!t->s[i].key)
            return NULL;
    }
}

static int mput(struct mtab *t, uint64_t key, const struct mval *v)
{
    if (!key)
        return -1;
    if (2 * (t->n + 1) > t->cap) {
        size_t ncap = t->cap ? 2 * t->cap : 256;
        struct mslot *ns = calloc(ncap, sizeof *ns);
        if (!ns)
            return -1;
        for (size_t i = 0; i < t->cap; i++)
            if (t->s[i].key) {
                size_t j = mhash(t->s[i].key) & (ncap - 1);
                while (ns[j].key)
                    j = (j + 1) & (ncap - 1);
                ns[j] = t->s[i];
            }
        free(t->s);
        t->s = ns;
        t->cap = ncap;
    }
    size_t mask = t->cap - 1, i = mhash(key) & mask;
    while (t->s[i].key && t->s[i].key != key)
        i = (i + 1) & mask;
    if (!t->s[i].key)
        t->n++;
    t->s[i].key = key;
    t->s[i].v = *v;
    return 0;
}

/* Removes key (backward-shift deletion: no tombstones); 1 when it was there. */
static int mdel(struct mtab *t, uint64_t key, struct mval *out)
{
    if (!t->cap || !key)
        return 0;
    size_t mask = t->cap - 1, i = mhash(key) & mask;
    while (t->s[i].key != key) {
        if (!t->s[i].key)
            return 0;
        i = (i + 1) & mask;
    }
    if (out)
        *out = t->s[i].v;
    for (size_t j = (i + 1) & mask; t->s[j].key; j = (j + 1) & mask) {
        size_t h = mhash(t->s[j].key) & mask;
        /* the entry at j may move to the hole at i unless its home lies
         * cyclically in (i, j] */
        int stays = i <= j ? (h > i && h <= j) : (h > i || h <= j);
        if (!stays) {
            t->s[i] = t->s[j];
            i = j;
        }
    }
    t->s[i].key = 0;
    t->n--;
    return 1;
}

/* ---- footprints ----------------------------------------------------------- */

/* memu held; returns 1 when the device was unchanged until now (the I/O
 * thread needs a wake-up). */
static int count_locked(int dev, int64_t delta, int managed)
{
    GS_ASSERT_HELD(&memu);
    if (dev < 0 || dev >= HOOK_MAX_DEVICES)
        return 0;
    uint64_t d = (uint64_t)(delta < 0 ? -delta : delta);
    if (delta < 0) {
        md[dev].used -= d < md[dev].used ? d : md[dev].used;
        if (managed)
            md[dev].managed -= d < md[dev].managed ? d : md[dev].managed;
    } else {
        md[dev].used += d;
        if (managed)
            md[dev].managed += d;
        if (md[dev].used > md[dev].peak)
            md[dev].peak = md[dev].used;
    }
    int first = !md[dev].changed;
    md[dev].changed = 1;
    return first;
}

static void changed(int first)
{
    if (first)
        hook_client_kick();
}

int hook_mem_take(int dev, uint64_t *used, uint64_t *managed, uint64_t *peak)
{
    if (dev < 0 || dev >= HOOK_MAX_DEVICES)
        return 0;
    pthread_mutex_lock(&memu);
    int c = md[dev].changed;
    *used = md[dev].used;
    *managed = md[dev].managed;
    *peak = md[dev].peak;
    md[dev].changed = 0;
    pthread_mutex_unlock(&memu);
    return c;
}

uint64_t hook_mem_changed_mask(void)
{
    uint64_t m = 0;
    pthread_mutex_lock(&memu);
    for (int i = 0; i < HOOK_MAX_DEVICES; i++)
        if (md[i].changed)
            m |= 1ULL << i;
    pthread_mutex_unlock(&memu);
    return m;
}

void hook_mem_mark_all(void)
{
    pthread_mutex_lock(&memu);
    for (int i = 0; i < HOOK_MAX_DEVICES; i++)
        if (md[i].peak)
            md[i].changed = 1;
    pthread_mutex_unlock(&memu);
}

static int is_managed(const struct mval *v)
{
    return v->kind == MK_MANAGED;
}

/* Whatever a destroyed context held is gone with it. */
void hook_mem_forget_ctx(CUcontext ctx)
{
    hook_swap_forget_ctx(ctx);
    int first = 0;
    pthread_mutex_lock(&memu);
    for (size_t i = 0; i < ptrs.cap;) {
        struct mslot *sl = &ptrs.s[i];
        if (sl->key && sl->v.ctx == ctx) {
            struct mval v;
            mdel(&ptrs, sl->key, &v); /* may move another entry into slot i */
            first |= count_locked(v.dev, -(int64_t)v.size, is_managed(&v));
        } else
            i++;
    }
    pthread_mutex_unlock(&memu);
    changed(first);
}

/* ---- allocation --------------------------------------------------------- */

struct where {
    CUcontext ctx;
    int dev;
};

static void current(struct where *w)
{
    CUdevice d;
    w->ctx = NULL;
    w->dev = -1;
    if (hook_cu.ctxGetCurrent && hook_cu.ctxGetCurrent(&w->ctx) == CUDA_SUCCESS && w->ctx &&
        hook_cu.ctxGetDevice && hook_cu.ctxGetDevice(&d) == CUDA_SUCCESS && (int)d >= 0 &&
        (int)d < HOOK_MAX_DEVICES)
        w->dev = (int)d;
}

static void on_stream(CUstream s, int pt, struct where *w)
{
    if (hook_stream_where(hook_norm_stream(s, pt), &w->ctx, &w->dev) != 0 || w->dev < 0 ||
        w->dev >= HOOK_MAX_DEVICES) {
        w->ctx = NULL;
        w->dev = -1;
    }
}

/* Before an allocation of `bytes` on w->dev: reserves it under the limit. */
static CUresult admit(const struct where *w, uint64_t bytes)
{
    if (w->dev < 0)
        return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&memu);
    uint64_t lim = hook_cfg.memory_limit;
    uint64_t have = md[w->dev].used + md[w->dev].reserved;
    if (lim && (bytes > lim || have > lim - bytes))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else
        md[w->dev].reserved += bytes;
    pthread_mutex_unlock(&memu);
    if (r != CUDA_SUCCESS)
        gs_debug("allocation of %llu bytes on GPU %d refused: past GPUSHARE_MEMORY_LIMIT",
                 (unsigned long long)bytes, w->dev);
    return r;
}

/* After it: counts what was allocated (r == CUDA_SUCCESS) and drops the
 * reservation. */
static void settle(const struct where *w, uint64_t reserved, CUresult r, struct mtab *t,
                   uint64_t key, uint64_t size, int kind)
{
    if (w->dev < 0)
        return;
    int first = 0;
    pthread_mutex_lock(&memu);
    md[w->dev].reserved -= reserved < md[w->dev].reserved ? reserved : md[w->dev].reserved;
    if (r == CUDA_SUCCESS && key) {
        struct mval v = {.size = size,
                         .ctx = kind == MK_PHYS ? NULL : w->ctx,
                         .dev = w->dev,
                         .kind = (uint8_t)kind};
        struct mval old;
        if (mdel(t, key, &old)) /* freed behind our back (context teardown we missed) */
            first |= count_locked(old.dev, -(int64_t)old.size, is_managed(&old));
        if (mput(t, key, &v) == 0)
            first |= count_locked(w->dev, (int64_t)size, kind == MK_MANAGED);
    }
    pthread_mutex_unlock(&memu);
    changed(first);
}

/* Out of memory in device mode: may the broker make room?  1: retry. */
static int room(struct hook_thr *t, const struct where *w, uint64_t bytes, CUresult r,
                int capturing)
{
    if (r != CUDA_ERROR_OUT_OF_MEMORY || hook_cfg.managed || w->dev < 0 || capturing ||
        atomic_load_explicit(&t->captures, memory_order_relaxed) > 0)
        return 0;
    char reason[256] = "";
    uint64_t t0 = hook_now_ns();
    int ok = hook_client_make_room(w->dev, bytes, hook_cfg.make_room_ms, reason, sizeof reason);
    if (ok)
        gs_debug("the broker made room for %llu bytes on GPU %d in %llu ms; retrying",
                 (unsigned long long)bytes, w->dev,
                 (unsigned long long)(hook_now_ns() - t0) / 1000000ULL);
    else if (reason[0])
        gs_warn("out of GPU memory (%llu bytes on GPU %d): %s", (unsigned long long)bytes, w->dev,
                reason);
    return ok;
}

static int stream_capturing(CUstream s, int pt)
{
    if (atomic_load_explicit(&hook_capture_count, memory_order_acquire) == 0)
        return 0;
    s = hook_norm_stream(s, pt);
    return s != CU_STREAM_LEGACY && hook_stream_capturing(s);
}

/* Entry of every memory wrapper: nested calls and GPUSHARE_DISABLE go
 * straight to the driver. */
#define MEM_ENTER(abi, args)                                                                       \
    struct hook_thr *t_ = hook_self();                                                             \
    if (!t_->nest)                                                                                 \
        hook_ready();                                                                              \
    __typeof__(&abi) real_ = (__typeof__(&abi))hook_real_get(HOOK_IDX_##abi);                      \
    if (!real_)                                                                                    \
        return CUDA_ERROR_NOT_FOUND;                                                               \
    if (t_->nest || hook_cfg.disabled)                                                             \
        return real_ args;                                                                         \
    hook_count(t_, HOOK_IDX_##abi);                                                                \
    t_->nest++

#define MEM_LEAVE(r)                                                                               \
    do {                                                                                           \
        t_->nest--;                                                                                \
        return (r);                                                                                \
    } while (0)

/* Calls `call` (assigning r), once more if the broker made room. */
#define WITH_ROOM(w, bytes, capturing, call)                                                       \
    do {                                                                                           \
        call;                                                                                      \
        if (room(t_, (w), (bytes), r, (capturing)))                                                \
            call;                                                                                  \
    } while (0)

static CUresult managed_alloc(CUdeviceptr *dptr, size_t bytes)
{
    __typeof__(&cuMemAllocManaged) f = HOOK_REAL_FN(cuMemAllocManaged);
    return f ? f(dptr, bytes, CU_MEM_ATTACH_GLOBAL) : CUDA_ERROR_NOT_SUPPORTED;
}

/* Device memory that the swap tier can move when it takes it (hook_swap.h),
 * else the driver's own. */
static CUresult device_alloc(__typeof__(&cuMemAlloc_v2) real, const struct where *w,
                             CUdeviceptr *dptr, size_t bytes)
{
    CUresult r;
    if (w->dev >= 0 && w->ctx && hook_swap_alloc(w->ctx, w->dev, bytes, dptr, &r))
        return r;
    return real(dptr, bytes);
}

HOOK_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    MEM_ENTER(cuMemAlloc_v2, (dptr, bytesize));
    struct where w;
    current(&w);
    CUresult r = admit(&w, bytesize);
    if (r == CUDA_SUCCESS) {
        if (hook_cfg.managed)
            r = managed_alloc(dptr, bytesize);
        else
            WITH_ROOM(&w, bytesize, 0, r = device_alloc(real_, &w, dptr, bytesize));
        settle(&w, bytesize, r, &ptrs, r == CUDA_SUCCESS && dptr ? *dptr : 0, bytesize,
               hook_cfg.managed ? MK_MANAGED : MK_DEVICE);
    }
    MEM_LEAVE(r);
}

/* The 32-bit ABI: never converted (managed memory may lie above 4 GiB). */
HOOK_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    MEM_ENTER(cuMemAlloc, (dptr, bytesize));
    struct where w;
    current(&w);
    CUresult r = admit(&w, bytesize);
    if (r == CUDA_SUCCESS) {
        WITH_ROOM(&w, bytesize, 0, r = real_(dptr, bytesize));
        settle(&w, bytesize, r, &ptrs, r == CUDA_SUCCESS && dptr ? *dptr : 0, bytesize, MK_DEVICE);
    }
    MEM_LEAVE(r);
}

#define PITCH_ALIGN 512 /* what cuMemAllocPitch gives on current GPUs */

static uint64_t pitch_estimate(size_t width, size_t height)
{
    uint64_t p = ((uint64_t)width + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
    return height && p > UINT64_MAX / height ? UINT64_MAX : p * height;
}

static CUresult managed_pitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                              unsigned elsize)
{
    if (!dptr || !pitch || width == 0 || height == 0 ||
        (elsize != 4 && elsize != 8 && elsize != 16))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes = pitch_estimate(width, height);
    if (bytes > SIZE_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = managed_alloc(dptr, (size_t)bytes);
    if (r == CUDA_SUCCESS)
        *pitch = (size_t)(bytes / height);
    return r;
}

HOOK_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                        size_t Height, unsigned int ElementSizeBytes)
{
    MEM_ENTER(cuMemAllocPitch_v2, (dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
    struct where w;
    current(&w);
    uint64_t est = pitch_estimate(WidthInBytes, Height);
    CUresult r = admit(&w, est);
    if (r == CUDA_SUCCESS) {
        if (hook_cfg.managed)
            r = managed_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
        else
            WITH_ROOM(&w, est, 0, r = real_(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
        uint64_t size = r == CUDA_SUCCESS && pPitch ? (uint64_t)*pPitch * Height : est;
        settle(&w, est, r, &ptrs, r == CUDA_SUCCESS && dptr ? *dptr : 0, size,
               hook_cfg.managed ? MK_MANAGED : MK_DEVICE);
    }
    MEM_LEAVE(r);
}

HOOK_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                     unsigned int WidthInBytes, unsigned int Height,
                                     unsigned int ElementSizeBytes)
{
    MEM_ENTER(cuMemAllocPitch, (dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
    struct where w;
    current(&w);
    uint64_t est = pitch_estimate(WidthInBytes, Height);
    CUresult r = admit(&w, est);
    if (r == CUDA_SUCCESS) {
        WITH_ROOM(&w, est, 0, r = real_(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
        uint64_t size = r == CUDA_SUCCESS && pPitch ? (uint64_t)*pPitch * Height : est;
        settle(&w, est, r, &ptrs, r == CUDA_SUCCESS && dptr ? *dptr : 0, size, MK_DEVICE);
    }
    MEM_LEAVE(r);
}

HOOK_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    MEM_ENTER(cuMemAllocManaged, (dptr, bytesize, flags));
    struct where w;
    current(&w);
    CUresult r = admit(&w, bytesize);
    if (r == CUDA_SUCCESS) {
        WITH_ROOM(&w, bytesize, 0, r = real_(dptr, bytesize, flags));
        settle(&w, bytesize, r, &ptrs, r == CUDA_SUCCESS && dptr ? *dptr : 0, bytesize, MK_MANAGED);
    }
    MEM_LEAVE(r);
}

/* Stream-ordered allocations are counted when they are asked for, and
 * uncounted at cuMemFreeAsync (not when the stream reaches it). */
#define ALLOC_ASYNC(abi, pt, call_args)                                                            \
    MEM_ENTER(abi, call_args);                                                                     \
    struct where w;                                                                                \
    on_stream(hStream, pt, &w);                                                                    \
    int capturing = stream_capturing(hStream, pt);                                                 \
    CUresult r = admit(&w, bytesize);                                                              \
    if (r == CUDA_SUCCESS) {                                                                       \
        WITH_ROOM(&w, bytesize, capturing, r = real_ call_args);                                   \
        settle(&w, bytesize, r, &ptrs, r == CUDA_SUCCESS && dptr ? *dptr : 0, bytesize,            \
               MK_DEVICE);                                                                         \
    }                                                                                              \
    MEM_LEAVE(r)

HOOK_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    ALLOC_ASYNC(cuMemAllocAsync, 0, (dptr, bytesize, hStream));
}

HOOK_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    ALLOC_ASYNC(cuMemAllocAsync_ptsz, 1, (dptr, bytesize, hStream));
}

HOOK_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream)
{
    ALLOC_ASYNC(cuMemAllocFromPoolAsync, 0, (dptr, bytesize, pool, hStream));
}

HOOK_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                  CUmemoryPool pool, CUstream hStream)
{
    ALLOC_ASYNC(cuMemAllocFromPoolAsync_ptsz, 1, (dptr, bytesize, pool, hStream));
}

/* Physical memory of the virtual memory API: counted from here. */
HOOK_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                 const CUmemAllocationProp *prop, unsigned long long flags)
{
    MEM_ENTER(cuMemCreate, (handle, size, prop, flags));
    struct where w = {NULL, -1};
    if (prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop->location.id >= 0 &&
        prop->location.id < HOOK_MAX_DEVICES)
        w.dev = prop->location.id; /* host-located allocations are not GPU memory */
    CUresult r = admit(&w, size);
    if (r == CUDA_SUCCESS) {
        WITH_ROOM(&w, size, 0, r = real_(handle, size, prop, flags));
        settle(&w, size, r, &handles, r == CUDA_SUCCESS && handle ? *handle : 0, size, MK_PHYS);
    }
    MEM_LEAVE(r);
}

HOOK_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    MEM_ENTER(cuMemMap, (ptr, size, offset, handle, flags));
    CUresult r = real_(ptr, size, offset, handle, flags);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&memu);
        struct mval *h = mget(&handles, handle);
        if (h) {
            struct mval v = {.size = size, .handle = handle, .dev = h->dev, .kind = MK_MAP};
            if (mput(&vas, ptr, &v) == 0)
                h->maps++;
        }
        pthread_mutex_unlock(&memu);
    }
    MEM_LEAVE(r);
}

/* ---- free ------------------------------------------------------------------ */

/* The memory goes away: uncount it (memu held). */
static int uncount_locked(const struct mval *v)
{
    return count_locked(v->dev, -(int64_t)v->size, is_managed(v));
}

static int take_ptr(CUdeviceptr p, struct mval *v)
{
    pthread_mutex_lock(&memu);
    int had = mdel(&ptrs, p, v);
    pthread_mutex_unlock(&memu);
    return had;
}

/* After the real free: the bytes are gone (ok), or the entry goes back. */
static void freed_ptr(CUdeviceptr p, const struct mval *v, int had, CUresult r)
{
    if (!had)
        return;
    int first = 0;
    pthread_mutex_lock(&memu);
    if (r == CUDA_SUCCESS)
        first = uncount_locked(v);
    else if (!mget(&ptrs, p))
        mput(&ptrs, p, v);
    pthread_mutex_unlock(&memu);
    changed(first);
}

/* The swap tier frees what it allocated (waiting for the context's work
 * first, as cuMemFree does); the rest goes to the driver. */
#define FREE_PTR(abi, p, args)                                                                     \
    MEM_ENTER(abi, args);                                                                          \
    struct mval v;                                                                                 \
    int had = take_ptr((CUdeviceptr)(p), &v);                                                      \
    CUresult r;                                                                                    \
    if (!hook_swap_free((CUdeviceptr)(p), &r))                                                     \
        r = real_ args;                                                                            \
    freed_ptr((CUdeviceptr)(p), &v, had, r);                                                       \
    MEM_LEAVE(r)

HOOK_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    FREE_PTR(cuMemFree_v2, dptr, (dptr));
}

HOOK_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    FREE_PTR(cuMemFree, dptr, (dptr));
}

HOOK_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    FREE_PTR(cuMemFreeAsync, dptr, (dptr, hStream));
}

HOOK_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    FREE_PTR(cuMemFreeAsync_ptsz, dptr, (dptr, hStream));
}

/* The physical memory is freed now when nothing maps it, else at the last
 * cuMemUnmap. */
HOOK_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    MEM_ENTER(cuMemRelease, (handle));
    struct mval v;
    int had = 0, mapped = 0;
    pthread_mutex_lock(&memu);
    struct mval *h = mget(&handles, handle);
    if (h && !h->released) {
        had = 1;
        if (h->maps > 0) {
            mapped = 1;
            h->released = 1;
        } else
            mdel(&handles, handle, &v);
    }
    pthread_mutex_unlock(&memu);
    CUresult r = real_(handle);
    int first = 0;
    pthread_mutex_lock(&memu);
    if (had && !mapped) {
        if (r == CUDA_SUCCESS)
            first = uncount_locked(&v);
        else if (!mget(&handles, handle))
            mput(&handles, handle, &v);
    } else if (had && r != CUDA_SUCCESS && (h = mget(&handles, handle)) != NULL)
        h->released = 0;
    pthread_mutex_unlock(&memu);
    changed(first);
    MEM_LEAVE(r);
}

#define MAX_UNMAP 64

/* Mappings inside [ptr, ptr + size): adjacent ones are found by address,
 * anything else by a scan.  memu held; removes them from vas. */
static size_t take_maps_locked(CUdeviceptr ptr, size_t size, uint64_t *keys, struct mval *out)
{
    GS_ASSERT_HELD(&memu);
    size_t n = 0;
    uint64_t at = ptr, end = (uint64_t)ptr + size;
    struct mval v;
    while (n < MAX_UNMAP && at < end && mdel(&vas, at, &v)) {
        keys[n] = at;
        out[n++] = v;
        at += v.size ? v.size : 1;
    }
    if (at >= end)
        return n;
    for (size_t i = 0; i < vas.cap && n < MAX_UNMAP;) {
        struct mslot *sl = &vas.s[i];
        if (sl->key && sl->key >= ptr && sl->key < end) {
            keys[n] = sl->key;
            mdel(&vas, sl->key, &out[n]);
            n++;
        } else
            i++;
    }
    return n;
}

HOOK_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    MEM_ENTER(cuMemUnmap, (ptr, size));
    uint64_t keys[MAX_UNMAP];
    struct mval maps[MAX_UNMAP];
    pthread_mutex_lock(&memu);
    size_t n = take_maps_locked(ptr, size, keys, maps);
    pthread_mutex_unlock(&memu);
    CUresult r = real_(ptr, size);
    int first = 0;
    pthread_mutex_lock(&memu);
    for (size_t i = 0; i < n; i++) {
        if (r != CUDA_SUCCESS) {
            if (!mget(&vas, keys[i]))
                mput(&vas, keys[i], &maps[i]);
            continue;
        }
        struct mval *h = mget(&handles, maps[i].handle);
        if (!h)
            continue;
        if (h->maps > 0)
            h->maps--;
        if (h->maps == 0 && h->released) {
            struct mval hv;
            mdel(&handles, maps[i].handle, &hv);
            first |= uncount_locked(&hv);
        }
    }
    pthread_mutex_unlock(&memu);
    changed(first);
    MEM_LEAVE(r);
}

/* ---- what the program is told ------------------------------------------- */

/* Memory the swap tier backs is a VMM mapping of whole granules to the
 * driver; the program asked for an allocation of its own size, and is told
 * about that one, as for cuMemAlloc. */
HOOK_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    MEM_ENTER(cuMemGetAddressRange_v2, (pbase, psize, dptr));
    CUdeviceptr base;
    size_t size;
    CUresult r;
    if (hook_swap_range(dptr, &base, &size)) {
        if (pbase)
            *pbase = base;
        if (psize)
            *psize = size;
        r = CUDA_SUCCESS;
    } else
        r = real_(pbase, psize, dptr);
    MEM_LEAVE(r);
}

/* One attribute of a pointer into the swap tier's memory, where it differs
 * from what the driver says of a VMM mapping; 1 when answered. */
static int swap_attribute(void *data, CUpointer_attribute a, CUdeviceptr ptr)
{
    CUdeviceptr base;
    size_t size;
    if (!data || !hook_swap_range(ptr, &base, &size))
        return 0;
    switch (a) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = base;
        return 1;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = size;
        return 1;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(int *)data = 1; /* emulated (hook_ipc.h), as for cuMemAlloc memory */
        return 1;
    default:
        return 0;
    }
}

HOOK_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                                           CUdeviceptr ptr)
{
    MEM_ENTER(cuPointerGetAttribute, (data, attribute, ptr));
    CUresult r = real_(data, attribute, ptr);
    if (r == CUDA_SUCCESS)
        swap_attribute(data, attribute, ptr);
    MEM_LEAVE(r);
}

HOOK_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes,
                                            CUpointer_attribute *attributes, void **data,
                                            CUdeviceptr ptr)
{
    MEM_ENTER(cuPointerGetAttributes, (numAttributes, attributes, data, ptr));
    CUresult r = real_(numAttributes, attributes, data, ptr);
    for (unsigned i = 0; r == CUDA_SUCCESS && attributes && data && i < numAttributes; i++)
        swap_attribute(data[i], attributes[i], ptr);
    MEM_LEAVE(r);
}

/* Legacy IPC: emulated for the swap tier's memory (hook_ipc.h), the
 * driver's own for the rest. */
HOOK_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    MEM_ENTER(cuIpcGetMemHandle, (pHandle, dptr));
    CUresult r;
    if (!hook_ipc_get(pHandle, dptr, &r))
        r = real_(pHandle, dptr);
    MEM_LEAVE(r);
}

#define IPC_OPEN(abi)                                                                              \
    HOOK_EXPORT CUresult abi(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)        \
    {                                                                                              \
        MEM_ENTER(abi, (pdptr, handle, Flags));                                                    \
        CUresult r;                                                                                \
        if (!hook_ipc_open(pdptr, &handle, &r))                                                    \
            r = real_(pdptr, handle, Flags);                                                       \
        MEM_LEAVE(r);                                                                              \
    }
IPC_OPEN(cuIpcOpenMemHandle)
IPC_OPEN(cuIpcOpenMemHandle_v2)

HOOK_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    MEM_ENTER(cuIpcCloseMemHandle, (dptr));
    CUresult r;
    if (!hook_ipc_close(dptr, &r))
        r = real_(dptr);
    MEM_LEAVE(r);
}

/* Peer access covers cuMemAlloc memory but not VMM mappings: the swap
 * tier grants the peer GPU access to its ranges itself. */
HOOK_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    MEM_ENTER(cuCtxEnablePeerAccess, (peerContext, Flags));
    CUresult r = real_(peerContext, Flags);
    if (r == CUDA_SUCCESS) {
        struct where w;
        current(&w);
        CUdevice owner;
        __typeof__(&cuCtxGetDevice_v2) of = hook_cu.ctxGetDeviceOf;
        if (w.dev >= 0 && of && of(&owner, peerContext) == CUDA_SUCCESS)
            hook_swap_peer((int)owner, w.dev);
    }
    MEM_LEAVE(r);
}

/* With a limit, the device looks as large as the limit. */
static void limited(int dev, uint64_t *freeb, uint64_t *total)
{
    uint64_t lim = hook_cfg.memory_limit;
    if (!lim || dev < 0 || dev >= HOOK_MAX_DEVICES)
        return;
    pthread_mutex_lock(&memu);
    uint64_t used = md[dev].used;
    pthread_mutex_unlock(&memu);
    if (total && *total > lim)
        *total = lim;
    if (freeb) {
        uint64_t room = used < lim ? lim - used : 0;
        if (*freeb > room)
            *freeb = room;
    }
}

/* cuMemGetInfo's two ABI versions (size_t and the 32-bit one) differ only
 * in the type of what they report. */
#define MEM_GET_INFO(abi, T)                                                                       \
    HOOK_EXPORT CUresult abi(T *free_bytes, T *total)                                              \
    {                                                                                              \
        MEM_ENTER(abi, (free_bytes, total));                                                       \
        CUresult r = real_(free_bytes, total);                                                     \
        if (r == CUDA_SUCCESS && hook_cfg.memory_limit) {                                          \
            struct where w;                                                                        \
            current(&w);                                                                           \
            uint64_t f = free_bytes ? *free_bytes : 0, t = total ? *total : 0;                     \
            limited(w.dev, &f, &t);                                                                \
            if (free_bytes)                                                                        \
                *free_bytes = (T)f;                                                                \
            if (total)                                                                             \
                *total = (T)t;                                                                     \
        }                                                                                          \
        MEM_LEAVE(r);                                                                              \
    }
MEM_GET_INFO(cuMemGetInfo_v2, size_t)
MEM_GET_INFO(cuMemGetInfo, unsigned int)

HOOK_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    MEM_ENTER(cuDeviceTotalMem_v2, (bytes, dev));
    CUresult r = real_(bytes, dev);
    if (r == CUDA_SUCCESS && bytes && hook_cfg.memory_limit) {
        uint64_t t = *bytes;
        limited((int)dev, NULL, &t);
        *bytes = (size_t)t;
    }
    MEM_LEAVE(r);
}

HOOK_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    MEM_ENTER(cuDeviceTotalMem, (bytes, dev));
    CUresult r = real_(bytes, dev);
    if (r == CUDA_SUCCESS && bytes && hook_cfg.memory_limit) {
        uint64_t t = *bytes;
        limited((int)dev, NULL, &t);
        *bytes = (unsigned)t;
    }
    MEM_LEAVE(r);
}

/* ---- introspection and fork ----------------------------------------------- */

/* For tests and tools: dev's footprint as the hook counts it. */
HOOK_EXPORT int gpushare_hook_memory(int dev, unsigned long long *used, unsigned long long *managed,
                                     unsigned long long *peak)
{
    if (dev < 0 || dev >= HOOK_MAX_DEVICES)
        return -1;
    pthread_mutex_lock(&memu);
    if (used)
        *used = md[dev].used;
    if (managed)
        *managed = md[dev].managed;
    if (peak)
        *peak = md[dev].peak;
    pthread_mutex_unlock(&memu);
    return 0;
}

void hook_mem_atfork_prepare(void)
{
    pthread_mutex_lock(&memu);
}

void hook_mem_atfork_parent(void)
{
    pthread_mutex_unlock(&memu);
}

/* The child has no device memory of its own (CUDA does not survive fork). */
void hook_mem_atfork_child(void)
{
    hook_swap_atfork_child();
    pthread_mutex_init(&memu, NULL);
    free(ptrs.s);
    free(handles.s);
    free(vas.s);
    memset(&ptrs, 0, sizeof ptrs);
    memset(&handles, 0, sizeof handles);
    memset(&vas, 0, sizeof vas);
    memset(md, 0, sizeof md);
}
