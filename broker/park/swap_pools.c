/*
 * swap_pools.c - host pools per GPU, their worker and their leases
 * (swap_pools.h).
 */
#define _GNU_SOURCE
#include "swap_pools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gs_assert.h"
#include "host_pool.h"
#include "job_queue.h"
#include "pool_driver.h"

#define MAX_GPUS   64
#define MAX_LEASES 256

struct pool_task { /* one driver call on one chunk, on the worker */
    gs_job_t base; /* first */
    int gpu;
    gs_pool_job_t what;
    gs_pool_driver_t *drv;
    uint64_t handle; /* in: zero, unpin; out: pin */
    size_t bytes;
    int ok;
    char err[160];
};

struct pool {
    gs_host_pool_t *logic;
    gs_pool_driver_t *drv;
    uint64_t *handles; /* by chunk index */
    int nhandles;
    int busy; /* a task of this pool is on the worker */
    char last_error[160];
};

struct lease {
    uint64_t id; /* ours: unique over all GPUs */
    uint64_t inner;
    int gpu;
    uid_t uid;
    pid_t pid;
};

struct gs_swap_pools {
    gs_swap_pools_config_t cfg;
    int ngpus;
    struct pool pool[MAX_GPUS];
    gs_job_queue_t *queue;
    int hold;
    struct lease leases[MAX_LEASES];
    int nleases;
    uint64_t next_lease;
};

static void run_task(gs_job_t *job)
{
    struct pool_task *t = (struct pool_task *)job;
    switch (t->what.kind) {
    case GS_POOL_JOB_PIN:
        t->ok = gs_pool_driver_pin(t->drv, t->bytes, &t->handle, t->err, sizeof t->err) == 0;
        break;
    case GS_POOL_JOB_ZERO:
        t->ok = gs_pool_driver_zero(t->drv, t->handle, t->bytes, t->err, sizeof t->err) == 0;
        break;
    case GS_POOL_JOB_UNPIN:
        t->ok = gs_pool_driver_unpin(t->drv, t->handle, t->err, sizeof t->err) == 0;
        break;
    }
}

/* One budget for all the GPUs' pools: each may pin what the others have
 * not pinned (or are pinning), so that one GPU's 60 GB notebook can use the
 * host memory the idle GPUs beside it do not need, instead of an even
 * split that left it an eighth of the budget on an 8-GPU server.  Pins run
 * one at a time and the budgets are shared again before each job starts,
 * so together they never pass the budget. */
static void share_budget(gs_swap_pools_t *self)
{
    uint64_t held[MAX_GPUS], all = 0;
    for (int g = 0; g < self->ngpus; g++) {
        gs_host_pool_stats_t st;
        gs_host_pool_stats(self->pool[g].logic, &st);
        held[g] = st.pinned_bytes + st.pinning_bytes;
        all += held[g];
    }
    for (int g = 0; g < self->ngpus; g++) {
        uint64_t others = all - held[g];
        gs_host_pool_set_budget(self->pool[g].logic, self->cfg.budget_bytes > others
                                                         ? self->cfg.budget_bytes - others
                                                         : 0);
    }
}

gs_swap_pools_t *gs_swap_pools_new(int ngpus, const gs_swap_pools_config_t *cfg, char *why,
                                   size_t whylen)
{
    if (ngpus <= 0 || ngpus > MAX_GPUS || !cfg->chunk_bytes) {
        snprintf(why, whylen, "no GPUs for a host pool");
        return NULL;
    }
    gs_swap_pools_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    self->cfg = *cfg;
    self->ngpus = ngpus;
    self->next_lease = 1;
    gs_host_pool_config_t pc = {.chunk_bytes = cfg->chunk_bytes,
                                .budget_bytes = cfg->budget_bytes,
                                .release_after_us = cfg->release_after_us,
                                .retry_after_us = 10 * 1000000ULL};
    for (int g = 0; g < ngpus; g++) {
        self->pool[g].drv = gs_pool_driver_load(g, why, whylen);
        self->pool[g].logic = gs_host_pool_new(&pc);
        if (!self->pool[g].drv || !self->pool[g].logic)
            goto fail;
    }
    self->queue = gs_job_queue_new(1); /* pinning is serial in the driver anyway */
    if (!self->queue) {
        snprintf(why, whylen, "cannot start the host pool's thread");
        goto fail;
    }
    return self;
fail:
    gs_swap_pools_destroy(&self);
    return NULL;
}

static void drop_task(gs_job_t *job)
{
    free(job);
}

void gs_swap_pools_destroy(gs_swap_pools_t **self_p)
{
    gs_swap_pools_t *self = self_p ? *self_p : NULL;
    if (!self)
        return;
    gs_job_queue_destroy(&self->queue, drop_task); /* waits for the call under way */
    for (int g = 0; g < self->ngpus; g++) {
        struct pool *p = &self->pool[g];
        char err[160];
        for (int i = 0; p->drv && i < p->nhandles; i++)
            if (p->handles[i])
                gs_pool_driver_unpin(p->drv, p->handles[i], err, sizeof err);
        free(p->handles);
        gs_host_pool_destroy(&p->logic);
        gs_pool_driver_free(&p->drv);
    }
    free(self);
    *self_p = NULL;
}

int gs_swap_pools_fd(const gs_swap_pools_t *self)
{
    return gs_job_queue_fd(self->queue);
}

static int store_handle(struct pool *p, int chunk, uint64_t handle)
{
    if (chunk >= p->nhandles) {
        int n = p->nhandles ? p->nhandles : 16;
        while (n <= chunk)
            n *= 2;
        uint64_t *h = realloc(p->handles, (size_t)n * sizeof *h);
        if (!h)
            return -1;
        memset(h + p->nhandles, 0, (size_t)(n - p->nhandles) * sizeof *h);
        p->handles = h;
        p->nhandles = n;
    }
    p->handles[chunk] = handle;
    return 0;
}

/* The next driver job of each idle pool goes to the worker. */
static void start_jobs(gs_swap_pools_t *self, int64_t now)
{
    for (int g = 0; g < self->ngpus && !self->hold; g++) {
        struct pool *p = &self->pool[g];
        gs_pool_job_t job;
        share_budget(self); /* with what the pools before this one just started */
        if (p->busy || !gs_host_pool_next_job(p->logic, (uint64_t)now, &job))
            continue;
        struct pool_task *t = calloc(1, sizeof *t);
        if (!t) {
            gs_host_pool_job_done(p->logic, &job, 0, (uint64_t)now);
            continue;
        }
        t->base.run = run_task;
        t->gpu = g;
        t->what = job;
        t->drv = p->drv;
        t->bytes = self->cfg.chunk_bytes;
        t->handle = job.chunk < p->nhandles ? p->handles[job.chunk] : 0;
        p->busy = 1;
        gs_job_queue_submit(self->queue, &t->base);
    }
}

int gs_swap_pools_poll(gs_swap_pools_t *self, int64_t now)
{
    int changed = 0;
    gs_job_t *j;
    while ((j = gs_job_queue_done(self->queue)) != NULL) {
        struct pool_task *t = (struct pool_task *)j;
        struct pool *p = &self->pool[t->gpu];
        int ok = t->ok;
        if (ok && t->what.kind == GS_POOL_JOB_PIN && store_handle(p, t->what.chunk, t->handle)) {
            char err[160];
            gs_pool_driver_unpin(p->drv, t->handle, err, sizeof err);
            ok = 0;
        }
        if (ok && t->what.kind == GS_POOL_JOB_UNPIN)
            p->handles[t->what.chunk] = 0;
        if (!ok)
            snprintf(p->last_error, sizeof p->last_error, "%s", t->err);
        gs_host_pool_job_done(p->logic, &t->what, ok, (uint64_t)now);
        p->busy = 0;
        changed = 1;
        free(t);
    }
    start_jobs(self, now);
    return changed;
}

int64_t gs_swap_pools_next_deadline(const gs_swap_pools_t *self)
{
    uint64_t next = UINT64_MAX;
    for (int g = 0; g < self->ngpus; g++) {
        uint64_t d = gs_host_pool_next_deadline(self->pool[g].logic);
        if (d < next)
            next = d;
    }
    return next > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)next;
}

void gs_swap_pools_set_target(gs_swap_pools_t *self, int gpu, uint64_t bytes)
{
    if (gpu >= 0 && gpu < self->ngpus)
        gs_host_pool_set_target(self->pool[gpu].logic, bytes);
}

void gs_swap_pools_set_budget(gs_swap_pools_t *self, uint64_t bytes)
{
    self->cfg.budget_bytes = bytes;
    share_budget(self);
}

void gs_swap_pools_hold(gs_swap_pools_t *self, int hold, int64_t now)
{
    int lifted = self->hold && !hold;
    self->hold = hold;
    if (lifted) /* now, not at the loop's next event: pinning waited */
        start_jobs(self, now);
}

uint64_t gs_swap_pools_chunk_bytes(const gs_swap_pools_t *self)
{
    return self->cfg.chunk_bytes;
}

uint64_t gs_swap_pools_lease(gs_swap_pools_t *self, int gpu, uid_t uid, pid_t pid, uint64_t bytes,
                             int *chunks, uint64_t *short_bytes)
{
    *chunks = 0;
    *short_bytes = bytes;
    if (gpu < 0 || gpu >= self->ngpus || self->nleases == MAX_LEASES || bytes == 0)
        return 0;
    static int picked[4096];
    int n = 0;
    uint64_t inner =
        gs_host_pool_lease(self->pool[gpu].logic, (uint32_t)uid, bytes, picked, 4096, &n);
    if (!inner) {
        *short_bytes = (uint64_t)n * self->cfg.chunk_bytes;
        return 0;
    }
    struct lease *l = &self->leases[self->nleases++];
    *l = (struct lease){self->next_lease++, inner, gpu, uid, pid};
    *chunks = n;
    *short_bytes = 0;
    return l->id;
}

uint64_t gs_swap_pools_lease_growing(gs_swap_pools_t *self, int gpu, uid_t uid, pid_t pid,
                                     uint64_t bytes, int *chunks, int *now)
{
    *chunks = *now = 0;
    if (gpu < 0 || gpu >= self->ngpus || self->nleases == MAX_LEASES || bytes == 0)
        return 0;
    gs_host_pool_t *pool = self->pool[gpu].logic;
    uint64_t inner = gs_host_pool_lease_growing(pool, (uint32_t)uid, bytes, now);
    if (!inner)
        return 0;
    struct lease *l = &self->leases[self->nleases++];
    *l = (struct lease){self->next_lease++, inner, gpu, uid, pid};
    *chunks = gs_host_pool_lease_want(pool, inner);
    return l->id;
}

int gs_swap_pools_usable(const gs_swap_pools_t *self, int gpu, uid_t uid)
{
    return gpu >= 0 && gpu < self->ngpus ? gs_host_pool_usable(self->pool[gpu].logic, (uint32_t)uid)
                                         : 0;
}

int gs_swap_pools_lease_chunks(const gs_swap_pools_t *self, uint64_t lease, uid_t uid)
{
    for (int i = 0; i < self->nleases; i++)
        if (self->leases[i].id == lease && self->leases[i].uid == uid) {
            int n = 0, live = 0;
            const int *c = gs_host_pool_lease_chunks(self->pool[self->leases[i].gpu].logic,
                                                     self->leases[i].inner, &n);
            for (int k = 0; c && k < n; k++)
                live += c[k] >= 0;
            return live;
        }
    return 0;
}

int gs_swap_pools_coming(const gs_swap_pools_t *self, int gpu, uint64_t bytes)
{
    return gpu >= 0 && gpu < self->ngpus && gs_host_pool_coming(self->pool[gpu].logic, bytes);
}

int gs_swap_pools_lease_handles(const gs_swap_pools_t *self, uint64_t lease, uint64_t *handles,
                                int max, int *gpu)
{
    for (int i = 0; i < self->nleases; i++) {
        const struct lease *l = &self->leases[i];
        if (l->id != lease)
            continue;
        const struct pool *pl = &self->pool[l->gpu];
        int n = 0;
        const int *c = gs_host_pool_lease_chunks(pl->logic, l->inner, &n);
        if (!c || n > max || n != gs_host_pool_lease_want(pl->logic, l->inner))
            return -1;
        for (int k = 0; k < n; k++) {
            if (c[k] < 0 || c[k] >= pl->nhandles || !pl->handles[c[k]])
                return -1;
            handles[k] = pl->handles[c[k]];
        }
        *gpu = l->gpu;
        return n;
    }
    return -1;
}

gs_pool_driver_t *gs_swap_pools_driver(gs_swap_pools_t *self, int gpu)
{
    return gpu >= 0 && gpu < self->ngpus ? self->pool[gpu].drv : NULL;
}

static struct lease *find(gs_swap_pools_t *self, uint64_t id)
{
    for (int i = 0; i < self->nleases; i++)
        if (self->leases[i].id == id)
            return &self->leases[i];
    return NULL;
}

int gs_swap_pools_return(gs_swap_pools_t *self, uint64_t lease, int64_t now)
{
    struct lease *l = find(self, lease);
    if (!l)
        return -1;
    gs_host_pool_return(self->pool[l->gpu].logic, l->inner, (uint64_t)now);
    *l = self->leases[--self->nleases];
    start_jobs(self, now); /* zeroing may start */
    return 0;
}

uint64_t gs_swap_pools_lent(const gs_swap_pools_t *self, int gpu)
{
    gs_host_pool_stats_t st;
    gs_swap_pools_stats(self, gpu, &st);
    return st.lent_bytes;
}

void gs_swap_pools_stats(const gs_swap_pools_t *self, int gpu, gs_host_pool_stats_t *out)
{
    memset(out, 0, sizeof *out);
    for (int g = 0; g < self->ngpus; g++)
        if (gpu < 0 || gpu == g) {
            gs_host_pool_stats_t st;
            gs_host_pool_stats(self->pool[g].logic, &st);
            out->chunk_bytes = st.chunk_bytes;
            out->budget_bytes += st.budget_bytes;
            out->target_bytes += st.target_bytes;
            out->pinned_bytes += st.pinned_bytes;
            out->lent_bytes += st.lent_bytes;
            out->free_bytes += st.free_bytes;
            out->clean_bytes += st.clean_bytes;
            out->pinning_bytes += st.pinning_bytes;
            out->pin_failures += st.pin_failures;
            out->leases += st.leases;
        }
}

int gs_swap_pools_serve(void *arg, const gs_pool_request_t *req, int *fds, int max,
                        uint64_t *chunk_bytes, int *want, char *err, size_t errlen)
{
    gs_swap_pools_t *self = arg;
    struct lease *l = find(self, req->lease);
    /* The same answer whether the lease does not exist or is someone
     * else's: nothing is learnt by asking. */
    if (!l || l->pid != req->pid || l->uid != req->uid) {
        snprintf(err, errlen, "no lease %llu for this process", (unsigned long long)req->lease);
        return -1;
    }
    struct pool *p = &self->pool[l->gpu];
    *chunk_bytes = self->cfg.chunk_bytes;
    *want = gs_host_pool_lease_want(p->logic, l->inner);
    if (req->nreturn > 0) {
        if (gs_host_pool_return_some(p->logic, l->inner, req->positions, req->nreturn,
                                     (uint64_t)req->now_us) != 0) {
            snprintf(err, errlen, "lease %llu has no such chunks to return",
                     (unsigned long long)req->lease);
            return -1;
        }
        start_jobs(self, req->now_us); /* zeroing for another user may start */
        return 0;
    }
    int n = 0;
    const int *chunks = gs_host_pool_lease_chunks(p->logic, l->inner, &n);
    if (!chunks || n - req->from > max) {
        snprintf(err, errlen, "lease %llu is too large to send", (unsigned long long)req->lease);
        return -1;
    }
    if (req->from >= n)
        return req->from < *want ? GS_POOL_LATER : 0;
    for (int i = req->from; i < n; i++) {
        if (chunks[i] < 0) {
            snprintf(err, errlen, "lease %llu: position %d was returned already",
                     (unsigned long long)req->lease, i);
            for (int k = req->from; k < i; k++)
                close(fds[k - req->from]);
            return -1;
        }
        GS_ASSERT(chunks[i] < p->nhandles && p->handles[chunks[i]]);
        if (gs_pool_driver_export(p->drv, p->handles[chunks[i]], &fds[i - req->from], err,
                                  errlen) != 0) {
            for (int k = req->from; k < i; k++)
                close(fds[k - req->from]);
            return -1;
        }
    }
    return n - req->from;
}

json_t *gs_swap_pools_status(const gs_swap_pools_t *self)
{
    json_t *arr = json_array();
    for (int g = 0; arr && g < self->ngpus; g++) {
        gs_host_pool_stats_t st;
        gs_host_pool_stats(self->pool[g].logic, &st);
        json_array_append_new(
            arr,
            json_pack("{s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s?}", "gpu", g,
                      "chunk_bytes", (json_int_t)st.chunk_bytes, "budget_bytes",
                      (json_int_t)st.budget_bytes, "target_bytes", (json_int_t)st.target_bytes,
                      "pinned_bytes", (json_int_t)st.pinned_bytes, "lent_bytes",
                      (json_int_t)st.lent_bytes, "free_bytes", (json_int_t)st.free_bytes,
                      "clean_bytes", (json_int_t)st.clean_bytes, "pinning_bytes",
                      (json_int_t)st.pinning_bytes, "pin_failures", (json_int_t)st.pin_failures,
                      "last_error", self->pool[g].last_error[0] ? self->pool[g].last_error : NULL));
    }
    return arr;
}
