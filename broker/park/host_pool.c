/*
 * host_pool.c - the host pool's state and decisions (host_pool.h).
 *
 * Chunks live in an array whose indices never change (the pinner keeps the
 * driver handle of chunk i at index i); a slot is EMPTY until it is pinned.
 * Leases are a short list: a parked session holds one lease per GPU.
 */
#include "host_pool.h"

#include <stdlib.h>
#include <string.h>

#include "gs_assert.h"

enum chunk_state {
    CHUNK_EMPTY = 0, /* no memory behind the slot */
    CHUNK_PINNING,
    CHUNK_FREE,
    CHUNK_ZEROING,
    CHUNK_LENT,
    CHUNK_UNPINNING,
};

struct chunk {
    enum chunk_state state;
    uint32_t owner;      /* who wrote it last; GS_POOL_NOBODY: clean */
    uint64_t lease;      /* CHUNK_LENT */
    uint64_t free_since; /* CHUNK_FREE */
};

struct lease {
    uint64_t id;
    uint32_t uid;
    int n;       /* positions filled so far */
    int want;    /* positions in all (n < want: it grows, gs_host_pool_lease_growing) */
    int *chunks; /* chunk index per position; -1: returned early */
};

struct gs_host_pool {
    gs_host_pool_config_t cfg;
    uint64_t target;
    struct chunk *c;
    int nc; /* slots */
    struct lease *l;
    int nl, capl;
    uint64_t next_lease;
    uint64_t retry_at; /* no pin before this time (after a failure) */
    uint64_t pin_failures;
    int failing; /* the last pin failed */
};

static void grow(gs_host_pool_t *self);

gs_host_pool_t *gs_host_pool_new(const gs_host_pool_config_t *cfg)
{
    if (!cfg || cfg->chunk_bytes == 0)
        return NULL;
    gs_host_pool_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->cfg = *cfg;
    self->next_lease = 1;
    return self;
}

void gs_host_pool_destroy(gs_host_pool_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    gs_host_pool_t *self = *self_p;
    for (int i = 0; i < self->nl; i++)
        free(self->l[i].chunks);
    free(self->l);
    free(self->c);
    free(self);
    *self_p = NULL;
}

static uint64_t chunks_for(const gs_host_pool_t *self, uint64_t bytes)
{
    return bytes / self->cfg.chunk_bytes + (bytes % self->cfg.chunk_bytes != 0);
}

/* Chunks that hold or are getting memory. */
static int pinned_chunks(const gs_host_pool_t *self)
{
    int n = 0;
    for (int i = 0; i < self->nc; i++)
        n += self->c[i].state != CHUNK_EMPTY;
    return n;
}

static uint64_t budget_chunks(const gs_host_pool_t *self)
{
    return self->cfg.budget_bytes / self->cfg.chunk_bytes;
}

static uint64_t target_chunks(const gs_host_pool_t *self)
{
    uint64_t t = chunks_for(self, self->target), b = budget_chunks(self);
    return t < b ? t : b;
}

void gs_host_pool_set_target(gs_host_pool_t *self, uint64_t bytes)
{
    self->target = bytes;
}

void gs_host_pool_set_budget(gs_host_pool_t *self, uint64_t bytes)
{
    self->cfg.budget_bytes = bytes;
}

/* A free slot index for a new chunk, growing the array; -1 without memory. */
static int empty_slot(gs_host_pool_t *self)
{
    for (int i = 0; i < self->nc; i++)
        if (self->c[i].state == CHUNK_EMPTY)
            return i;
    int ncap = self->nc ? 2 * self->nc : 16;
    struct chunk *nc = realloc(self->c, (size_t)ncap * sizeof *nc);
    if (!nc)
        return -1;
    memset(nc + self->nc, 0, (size_t)(ncap - self->nc) * sizeof *nc);
    self->c = nc;
    int i = self->nc;
    self->nc = ncap;
    return i;
}

/* The idle-release rule: a chunk left unused while the pool holds more than
 * its target goes back to the system release_after_us after it was freed.
 * When chunk i goes (UINT64_MAX: it is not free, or the pool is not above
 * its target). */
static uint64_t idle_release_at(const gs_host_pool_t *self, int i, uint64_t pinned, uint64_t target)
{
    if (pinned <= target || self->c[i].state != CHUNK_FREE)
        return UINT64_MAX;
    return self->c[i].free_since + self->cfg.release_after_us;
}

int gs_host_pool_next_job(gs_host_pool_t *self, uint64_t now_us, gs_pool_job_t *job)
{
    uint64_t pinned = (uint64_t)pinned_chunks(self), target = target_chunks(self),
             budget = budget_chunks(self);
    /* 1. Grow towards the target: parks must never wait for pinning. */
    if (pinned < target && now_us >= self->retry_at) {
        int i = empty_slot(self);
        if (i >= 0) {
            self->c[i] = (struct chunk){.state = CHUNK_PINNING, .owner = GS_POOL_NOBODY};
            *job = (gs_pool_job_t){GS_POOL_JOB_PIN, i};
            return 1;
        }
    }
    /* 2. Over the budget (it was lowered): free chunks go at once, those
     *    that hold another user's data first (they would need zeroing). */
    int over = -1;
    for (int i = 0; pinned > budget && i < self->nc; i++)
        if (self->c[i].state == CHUNK_FREE && (over < 0 || self->c[i].owner != GS_POOL_NOBODY))
            over = i;
    if (over >= 0) {
        self->c[over].state = CHUNK_UNPINNING;
        *job = (gs_pool_job_t){GS_POOL_JOB_UNPIN, over};
        return 1;
    }
    /* 3. Unused above the target for long enough: back to the system, the
     *    one free longest first. */
    int idle = -1;
    for (int i = 0; i < self->nc; i++)
        if (now_us >= idle_release_at(self, i, pinned, target) &&
            (idle < 0 || self->c[i].free_since < self->c[idle].free_since))
            idle = i;
    if (idle >= 0) {
        self->c[idle].state = CHUNK_UNPINNING;
        *job = (gs_pool_job_t){GS_POOL_JOB_UNPIN, idle};
        return 1;
    }
    /* 4. Zero what a user left, so that any user can have it at once. */
    for (int i = 0; i < self->nc; i++)
        if (self->c[i].state == CHUNK_FREE && self->c[i].owner != GS_POOL_NOBODY) {
            self->c[i].state = CHUNK_ZEROING;
            *job = (gs_pool_job_t){GS_POOL_JOB_ZERO, i};
            return 1;
        }
    return 0;
}

void gs_host_pool_job_done(gs_host_pool_t *self, const gs_pool_job_t *job, int ok, uint64_t now_us)
{
    GS_ASSERT(job && job->chunk >= 0 && job->chunk < self->nc);
    struct chunk *c = &self->c[job->chunk];
    switch (job->kind) {
    case GS_POOL_JOB_PIN:
        GS_ASSERT(c->state == CHUNK_PINNING);
        if (ok) {
            *c = (struct chunk){.state = CHUNK_FREE, .owner = GS_POOL_NOBODY, .free_since = now_us};
            self->failing = 0;
        } else {
            self->failing = 1;
            *c = (struct chunk){.state = CHUNK_EMPTY};
            self->pin_failures++;
            self->retry_at = now_us + self->cfg.retry_after_us;
        }
        break;
    case GS_POOL_JOB_ZERO:
        GS_ASSERT(c->state == CHUNK_ZEROING);
        c->state = CHUNK_FREE; /* free_since unchanged: zeroing is not use */
        if (ok)
            c->owner = GS_POOL_NOBODY;
        break;
    case GS_POOL_JOB_UNPIN:
        GS_ASSERT(c->state == CHUNK_UNPINNING);
        /* A failed unpin leaves the memory pinned: keep it as a free chunk
         * and let the next round try again. */
        if (ok)
            *c = (struct chunk){.state = CHUNK_EMPTY};
        else
            c->state = CHUNK_FREE;
        break;
    }
    grow(self); /* a chunk pinned or zeroed may be what a growing lease waits for */
}

int gs_host_pool_coming(const gs_host_pool_t *self, uint64_t bytes)
{
    if (self->failing)
        return 0; /* pinning fails: what is missing may never come */
    uint64_t lent = 0;
    for (int i = 0; i < self->nc; i++)
        lent += self->c[i].state == CHUNK_LENT;
    return lent + chunks_for(self, bytes) <= target_chunks(self);
}

static struct lease *find_lease(const gs_host_pool_t *self, uint64_t id)
{
    for (int i = 0; i < self->nl; i++)
        if (self->l[i].id == id)
            return &self->l[i];
    return NULL;
}

/* A new lease of user uid for `want` positions; NULL without memory. */
static struct lease *new_lease(gs_host_pool_t *self, uint32_t uid, int want)
{
    if (self->nl == self->capl) {
        int ncap = self->capl ? 2 * self->capl : 8;
        struct lease *nl = realloc(self->l, (size_t)ncap * sizeof *nl);
        if (!nl)
            return NULL;
        self->l = nl;
        self->capl = ncap;
    }
    int *chunks = malloc((size_t)(want ? want : 1) * sizeof *chunks);
    if (!chunks)
        return NULL;
    struct lease *l = &self->l[self->nl++];
    *l = (struct lease){self->next_lease++, uid, 0, want, chunks};
    return l;
}

static void lend(gs_host_pool_t *self, struct lease *l, int chunk)
{
    struct chunk *c = &self->c[chunk];
    GS_ASSERT(c->state == CHUNK_FREE && l->n < l->want);
    c->state = CHUNK_LENT;
    c->lease = l->id;
    c->owner = l->uid; /* the user writes into it from now on */
    l->chunks[l->n++] = chunk;
}

/* Free chunks user uid may have without zeroing, its own first (they leave
 * the clean ones to others): up to max of them into out; how many. */
/* A chunk a lease of uid may take: free, and clean or uid's own. */
static int usable_by(const struct chunk *c, uint32_t uid)
{
    return c->state == CHUNK_FREE && (c->owner == uid || c->owner == GS_POOL_NOBODY);
}

/* Up to max chunks usable by uid into out[], its own first (no zeroing
 * needed); returns how many. */
static int usable(const gs_host_pool_t *self, uint32_t uid, int *out, int max)
{
    int have = 0;
    for (int pass = 0; pass < 2 && have < max; pass++)
        for (int i = 0; i < self->nc && have < max; i++) {
            const struct chunk *c = &self->c[i];
            if (usable_by(c, uid) && (c->owner == uid) == (pass == 0))
                out[have++] = i;
        }
    return have;
}

/* Growing leases take what became usable for them, oldest first. */
static void grow(gs_host_pool_t *self)
{
    for (int k = 0; k < self->nl; k++) {
        struct lease *l = &self->l[k];
        while (l->n < l->want) {
            int i;
            if (usable(self, l->uid, &i, 1) != 1)
                break;
            lend(self, l, i);
        }
    }
}

uint64_t gs_host_pool_lease(gs_host_pool_t *self, uint32_t uid, uint64_t bytes, int *chunks,
                            int max, int *n)
{
    uint64_t want = chunks_for(self, bytes);
    if ((uint64_t)max < want) {
        *n = (int)want;
        return 0;
    }
    int have = usable(self, uid, chunks, (int)want);
    if ((uint64_t)have < want) {
        *n = (int)(want - (uint64_t)have);
        return 0;
    }
    struct lease *l = new_lease(self, uid, (int)want);
    if (!l) {
        *n = 0;
        return 0;
    }
    for (int k = 0; k < have; k++)
        lend(self, l, chunks[k]);
    *n = (int)want;
    return l->id;
}

uint64_t gs_host_pool_lease_growing(gs_host_pool_t *self, uint32_t uid, uint64_t bytes, int *n_now)
{
    uint64_t want = chunks_for(self, bytes);
    *n_now = 0;
    if (want == 0 || want > INT32_MAX)
        return 0;
    struct lease *l = new_lease(self, uid, (int)want);
    if (!l)
        return 0;
    uint64_t id = l->id;
    grow(self);
    l = find_lease(self, id);
    *n_now = l->n;
    return id;
}

int gs_host_pool_usable(const gs_host_pool_t *self, uint32_t uid)
{
    int n = 0;
    for (int i = 0; i < self->nc; i++)
        n += usable_by(&self->c[i], uid);
    return n;
}

int gs_host_pool_return_some(gs_host_pool_t *self, uint64_t lease, const int *positions, int count,
                             uint64_t now_us)
{
    struct lease *l = find_lease(self, lease);
    if (!l)
        return -1;
    for (int k = 0; k < count; k++)
        if (positions[k] < 0 || positions[k] >= l->n || l->chunks[positions[k]] < 0)
            return -1; /* nothing changed: all or none */
    for (int k = 0; k < count; k++) {
        struct chunk *c = &self->c[l->chunks[positions[k]]];
        GS_ASSERT(c->state == CHUNK_LENT && c->lease == lease);
        c->state = CHUNK_FREE;
        c->lease = 0;
        c->free_since = now_us;
        l->chunks[positions[k]] = -1;
    }
    grow(self);
    return 0;
}

int gs_host_pool_return(gs_host_pool_t *self, uint64_t lease, uint64_t now_us)
{
    struct lease *l = find_lease(self, lease);
    if (!l)
        return -1;
    for (int k = 0; k < l->n; k++) {
        if (l->chunks[k] < 0)
            continue; /* returned early */
        struct chunk *c = &self->c[l->chunks[k]];
        GS_ASSERT(c->state == CHUNK_LENT && c->lease == lease);
        c->state = CHUNK_FREE;
        c->lease = 0;
        c->free_since = now_us;
    }
    free(l->chunks);
    *l = self->l[--self->nl];
    grow(self);
    return 0;
}

const int *gs_host_pool_lease_chunks(const gs_host_pool_t *self, uint64_t lease, int *n)
{
    const struct lease *l = find_lease(self, lease);
    *n = l ? l->n : 0;
    return l ? l->chunks : NULL;
}

int gs_host_pool_lease_want(const gs_host_pool_t *self, uint64_t lease)
{
    const struct lease *l = find_lease(self, lease);
    return l ? l->want : 0;
}

void gs_host_pool_stats(const gs_host_pool_t *self, gs_host_pool_stats_t *out)
{
    memset(out, 0, sizeof *out);
    uint64_t cb = self->cfg.chunk_bytes;
    out->chunk_bytes = cb;
    out->budget_bytes = self->cfg.budget_bytes;
    out->target_bytes = target_chunks(self) * cb;
    out->pin_failures = self->pin_failures;
    out->leases = self->nl;
    for (int i = 0; i < self->nc; i++) {
        const struct chunk *c = &self->c[i];
        switch (c->state) {
        case CHUNK_EMPTY:
            break;
        case CHUNK_PINNING:
            out->pinning_bytes += cb;
            break;
        case CHUNK_FREE:
            out->pinned_bytes += cb;
            out->free_bytes += cb;
            if (c->owner == GS_POOL_NOBODY)
                out->clean_bytes += cb;
            break;
        case CHUNK_ZEROING:
        case CHUNK_UNPINNING:
            out->pinned_bytes += cb;
            out->free_bytes += cb;
            break;
        case CHUNK_LENT:
            out->pinned_bytes += cb;
            out->lent_bytes += cb;
            break;
        }
    }
}

uint64_t gs_host_pool_next_deadline(const gs_host_pool_t *self)
{
    uint64_t next = UINT64_MAX;
    uint64_t pinned = (uint64_t)pinned_chunks(self), target = target_chunks(self);
    if (pinned < target && self->retry_at)
        next = self->retry_at;
    for (int i = 0; i < self->nc; i++) {
        uint64_t at = idle_release_at(self, i, pinned, target);
        if (at < next)
            next = at;
    }
    return next;
}
