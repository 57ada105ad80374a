/*
 * hook_mem.c - device memory: what this process holds on each GPU, and the
 * optional limit.  The wrappers that call this are hook_mem_wrap.c.
 *
 * Every allocation and free path is accounted per device (hook_mem_wrap.c
 * lists them): physical memory of the virtual memory API counts from
 * cuMemCreate until it is really freed, which is at cuMemRelease or, when
 * it is still mapped then, at its last cuMemUnmap; mapping does not count
 * again (PyTorch's expandable segments map and unmap as they grow and
 * shrink).  Allocations of a context go with it when it is destroyed.  The
 * sizes live in hash maps (open addressing, one mutex: O(1) per call) from
 * pointer, handle or mapped address to (device, size, kind).
 *
 * A change of a device's footprint marks it and calls the function the
 * broker client registered; the I/O thread then sends `memory` (used,
 * managed, peak) at most every MEM_REPORT_MS per device, always the latest
 * value (hook_client.c).
 *
 * GPUSHARE_MEMORY_LIMIT caps the process' footprint per device: an
 * allocation past it is refused before it reaches the driver (reserved
 * under the lock, so concurrent allocations cannot overshoot).
 *
 * A free is taken out of the maps before the real call and put back if the
 * call fails, so an address or handle the driver hands out again at once
 * cannot be confused with the one being freed.
 */
#include "hook_mem.h"
#include "hook_swap.h"
#include "hook_swap_thread.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "hook_config.h"
#include "gs_assert.h"
#include "log.h"

struct mslot {
    uint64_t key; /* 0: empty */
    struct hook_mem_entry v;
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
static void (*notify)(void);

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

static struct hook_mem_entry *mget(struct mtab *t, uint64_t key)
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

static int mput(struct mtab *t, uint64_t key, const struct hook_mem_entry *v)
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
static int mdel(struct mtab *t, uint64_t key, struct hook_mem_entry *out)
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

void hook_mem_set_notify(void (*fn)(void))
{
    notify = fn;
}

static void changed(int first)
{
    if (first && notify)
        notify();
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

static int is_managed(const struct hook_mem_entry *v)
{
    return v->kind == HOOK_MEM_MANAGED;
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
            struct hook_mem_entry v;
            mdel(&ptrs, sl->key, &v); /* may move another entry into slot i */
            first |= count_locked(v.dev, -(int64_t)v.size, is_managed(&v));
        } else
            i++;
    }
    pthread_mutex_unlock(&memu);
    changed(first);
}

/* ---- allocation and free ------------------------------------------------- */

/* Before an allocation of `bytes` on w->dev: reserves it under the limit. */
CUresult hook_mem_admit(const struct hook_mem_where *w, uint64_t bytes)
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
void hook_mem_settle(const struct hook_mem_where *w, uint64_t reserved, CUresult r, uint64_t key,
                     uint64_t size, enum hook_mem_kind kind)
{
    if (w->dev < 0)
        return;
    struct mtab *t = kind == HOOK_MEM_PHYS ? &handles : &ptrs;
    int first = 0;
    pthread_mutex_lock(&memu);
    md[w->dev].reserved -= reserved < md[w->dev].reserved ? reserved : md[w->dev].reserved;
    if (r == CUDA_SUCCESS && key) {
        struct hook_mem_entry v = {.size = size,
                                   .ctx = kind == HOOK_MEM_PHYS ? NULL : w->ctx,
                                   .dev = w->dev,
                                   .kind = (uint8_t)kind};
        struct hook_mem_entry old;
        if (mdel(t, key, &old)) /* freed behind our back (context teardown we missed) */
            first |= count_locked(old.dev, -(int64_t)old.size, is_managed(&old));
        if (mput(t, key, &v) == 0)
            first |= count_locked(w->dev, (int64_t)size, kind == HOOK_MEM_MANAGED);
    }
    pthread_mutex_unlock(&memu);
    changed(first);
}

/* The memory goes away: uncount it (memu held). */
static int uncount_locked(const struct hook_mem_entry *v)
{
    GS_ASSERT_HELD(&memu);
    return count_locked(v->dev, -(int64_t)v->size, is_managed(v));
}

int hook_mem_free_begin(CUdeviceptr p, struct hook_mem_entry *v)
{
    pthread_mutex_lock(&memu);
    int had = mdel(&ptrs, p, v);
    pthread_mutex_unlock(&memu);
    return had;
}

/* After the real free: the bytes are gone (ok), or the entry goes back. */
void hook_mem_free_end(CUdeviceptr p, const struct hook_mem_entry *v, int had, CUresult r)
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

/* ---- the virtual memory API ---------------------------------------------- */

void hook_mem_mapped(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle handle)
{
    pthread_mutex_lock(&memu);
    struct hook_mem_entry *h = mget(&handles, handle);
    if (h) {
        struct hook_mem_entry v = {
            .size = size, .handle = handle, .dev = h->dev, .kind = HOOK_MEM_MAP};
        if (mput(&vas, ptr, &v) == 0)
            h->maps++;
    }
    pthread_mutex_unlock(&memu);
}

void hook_mem_release_begin(CUmemGenericAllocationHandle handle, struct hook_mem_release *rel)
{
    rel->had = rel->mapped = 0;
    pthread_mutex_lock(&memu);
    struct hook_mem_entry *h = mget(&handles, handle);
    if (h && !h->released) {
        rel->had = 1;
        if (h->maps > 0) {
            rel->mapped = 1;
            h->released = 1;
        } else
            mdel(&handles, handle, &rel->v);
    }
    pthread_mutex_unlock(&memu);
}

void hook_mem_release_end(CUmemGenericAllocationHandle handle, const struct hook_mem_release *rel,
                          CUresult r)
{
    int first = 0;
    struct hook_mem_entry *h;
    pthread_mutex_lock(&memu);
    if (rel->had && !rel->mapped) {
        if (r == CUDA_SUCCESS)
            first = uncount_locked(&rel->v);
        else if (!mget(&handles, handle))
            mput(&handles, handle, &rel->v);
    } else if (rel->had && r != CUDA_SUCCESS && (h = mget(&handles, handle)) != NULL)
        h->released = 0;
    pthread_mutex_unlock(&memu);
    changed(first);
}

/* Mappings inside [ptr, ptr + size): adjacent ones are found by address,
 * anything else by a scan.  memu held; removes them from vas. */
static size_t take_maps_locked(CUdeviceptr ptr, size_t size, uint64_t *keys,
                               struct hook_mem_entry *out)
{
    GS_ASSERT_HELD(&memu);
    size_t n = 0;
    uint64_t at = ptr, end = (uint64_t)ptr + size;
    struct hook_mem_entry v;
    while (n < HOOK_MEM_MAX_UNMAP && at < end && mdel(&vas, at, &v)) {
        keys[n] = at;
        out[n++] = v;
        at += v.size ? v.size : 1;
    }
    if (at >= end)
        return n;
    for (size_t i = 0; i < vas.cap && n < HOOK_MEM_MAX_UNMAP;) {
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

void hook_mem_unmap_begin(CUdeviceptr ptr, size_t size, struct hook_mem_unmap *u)
{
    pthread_mutex_lock(&memu);
    u->n = take_maps_locked(ptr, size, u->keys, u->maps);
    pthread_mutex_unlock(&memu);
}

void hook_mem_unmap_end(const struct hook_mem_unmap *u, CUresult r)
{
    int first = 0;
    pthread_mutex_lock(&memu);
    for (size_t i = 0; i < u->n; i++) {
        if (r != CUDA_SUCCESS) {
            if (!mget(&vas, u->keys[i]))
                mput(&vas, u->keys[i], &u->maps[i]);
            continue;
        }
        struct hook_mem_entry *h = mget(&handles, u->maps[i].handle);
        if (!h)
            continue;
        if (h->maps > 0)
            h->maps--;
        if (h->maps == 0 && h->released) {
            struct hook_mem_entry hv;
            mdel(&handles, u->maps[i].handle, &hv);
            first |= uncount_locked(&hv);
        }
    }
    pthread_mutex_unlock(&memu);
    changed(first);
}

/* ---- what the program is told, and introspection -------------------------- */

/* With a limit, the device looks as large as the limit. */
void hook_mem_limited(int dev, uint64_t *freeb, uint64_t *total)
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

int hook_mem_footprint(int dev, uint64_t *used, uint64_t *managed, uint64_t *peak)
{
    if (dev < 0 || dev >= HOOK_MAX_DEVICES)
        return -1;
    pthread_mutex_lock(&memu);
    *used = md[dev].used;
    *managed = md[dev].managed;
    *peak = md[dev].peak;
    pthread_mutex_unlock(&memu);
    return 0;
}

/* ---- fork ------------------------------------------------------------------ */

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
    hook_swap_thread_atfork_child(); /* its windows and queue: the parent's */
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
