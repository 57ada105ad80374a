/*
 * placement.c - which GPU a session runs on (placement.h).
 */
#include "placement.h"

#include <czmq.h>
#include <stdlib.h>
#include <string.h>

int gs_place_policy_parse(const char *text)
{
    if (!text)
        return -1;
    if (!strcmp(text, "off"))
        return GS_PLACE_OFF;
    if (!strcmp(text, "spread"))
        return GS_PLACE_SPREAD;
    if (!strcmp(text, "pack"))
        return GS_PLACE_PACK;
    return -1;
}

const char *gs_place_policy_name(gs_place_policy_t p)
{
    return p == GS_PLACE_SPREAD ? "spread" : p == GS_PLACE_PACK ? "pack" : "off";
}

/* 1 if GPU a is a better place than b under spread. */
static int emptier(const gs_place_gpu_t *g, int a, int b)
{
    if (g[a].committed != g[b].committed)
        return g[a].committed < g[b].committed;
    if (g[a].sessions != g[b].sessions)
        return g[a].sessions < g[b].sessions;
    return a < b;
}

int gs_place_choose(gs_place_policy_t p, const gs_place_gpu_t *gpus, int n, int want,
                    uint64_t allowed, int *out)
{
    if (n > GS_PLACE_MAX_GPUS)
        n = GS_PLACE_MAX_GPUS;
    int taken[GS_PLACE_MAX_GPUS] = {0}, got = 0, can = 0;
    for (int i = 0; i < n; i++) {
        taken[i] = !(allowed >> i & 1); /* (not allowed: as if taken) */
        can += !taken[i];
    }
    if (n <= 0 || want <= 0 || !can)
        return 0;
    if (want > can)
        want = can;
    int chosen[GS_PLACE_MAX_GPUS] = {0};
    while (got < want) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            if (taken[i])
                continue;
            if (p == GS_PLACE_PACK) {
                /* the first with room; if none has, the emptiest */
                int room = gpus[i].committed < gpus[i].capacity;
                int best_room = best >= 0 && gpus[best].committed < gpus[best].capacity;
                if (best < 0 || (room && !best_room) ||
                    (!room && !best_room && emptier(gpus, i, best)))
                    best = i;
            } else if (best < 0 || emptier(gpus, i, best)) {
                best = i;
            }
        }
        taken[best] = chosen[best] = 1;
        got++;
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        if (chosen[i])
            out[k++] = i; /* in GPU order */
    return k;
}

typedef struct {
    int n;
    int gpu[GS_PLACE_MAX_GPUS];
    /* A pending entry (placement.h): made by a hello, no session yet. */
    int pending;
    uid_t owner;
    long pid;
    unsigned long long start;
    int64_t made_us;
    uint64_t order; /* when it was made, in entries made: the oldest goes first */
} placed_t;

struct gs_placement {
    zhashx_t *by_session; /* session id -> placed_t */
    uint64_t made;        /* entries made so far (their order) */
};

static void free_placed(void **item)
{
    free(*item);
    *item = NULL;
}

gs_placement_t *gs_placement_new(void)
{
    gs_placement_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->by_session = zhashx_new();
    if (!self->by_session) {
        free(self);
        return NULL;
    }
    zhashx_set_destructor(self->by_session, free_placed);
    return self;
}

void gs_placement_destroy(gs_placement_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zhashx_destroy(&(*self_p)->by_session);
    free(*self_p);
    *self_p = NULL;
}

int gs_placement_get(const gs_placement_t *self, const char *session, int *gpus, int max)
{
    const placed_t *p = zhashx_lookup(self->by_session, session);
    if (!p)
        return 0;
    int n = p->n < max ? p->n : max;
    memcpy(gpus, p->gpu, (size_t)n * sizeof *gpus);
    return n;
}

static placed_t *put(gs_placement_t *self, const char *session, const int *gpus, int n)
{
    if (n < 1 || n > GS_PLACE_MAX_GPUS)
        return NULL;
    placed_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n = n;
    p->order = ++self->made;
    memcpy(p->gpu, gpus, (size_t)n * sizeof *gpus);
    zhashx_update(self->by_session, session, p);
    return p;
}

int gs_placement_set(gs_placement_t *self, const char *session, const int *gpus, int n)
{
    return put(self, session, gpus, n) ? 0 : -1;
}

int gs_placement_set_pending(gs_placement_t *self, const char *session, const int *gpus, int n,
                             uid_t owner, long pid, unsigned long long start, int64_t now_us)
{
    placed_t *p = put(self, session, gpus, n);
    if (!p)
        return -1;
    p->pending = 1;
    p->owner = owner;
    p->pid = pid;
    p->start = start;
    p->made_us = now_us;
    return 0;
}

void gs_placement_confirm(gs_placement_t *self, const char *session)
{
    placed_t *p = zhashx_lookup(self->by_session, session);
    if (p)
        p->pending = 0;
}

int gs_placement_prune(gs_placement_t *self, uid_t owner, int cap, int64_t now_us, int64_t hold_us,
                       int (*alive)(long pid, unsigned long long start, void *arg), void *arg)
{
    /* Keys to drop are collected first: a zhashx must not change while it
     * is walked. */
    zlistx_t *gone = zlistx_new();
    if (!gone)
        return 0;
    zlistx_set_destructor(gone, (zlistx_destructor_fn *)zstr_free);
    zlistx_set_duplicator(gone, (zlistx_duplicator_fn *)strdup);
    int mine = 0;
    for (placed_t *p = zhashx_first(self->by_session); p; p = zhashx_next(self->by_session)) {
        if (!p->pending || p->owner != owner)
            continue;
        if (now_us - p->made_us > hold_us && p->pid > 0 && alive && !alive(p->pid, p->start, arg))
            zlistx_add_end(gone, (void *)zhashx_cursor(self->by_session));
        else
            mine++;
    }
    int dropped = 0;
    for (const char *k = zlistx_first(gone); k; k = zlistx_next(gone), dropped++)
        zhashx_delete(self->by_session, k);
    while (cap > 0 && mine >= cap) { /* the oldest, until one more fits */
        const char *oldest = NULL;
        uint64_t order = UINT64_MAX;
        for (placed_t *p = zhashx_first(self->by_session); p; p = zhashx_next(self->by_session))
            if (p->pending && p->owner == owner && p->order < order) {
                order = p->order;
                oldest = zhashx_cursor(self->by_session);
            }
        if (!oldest)
            break;
        zhashx_delete(self->by_session, oldest);
        mine--;
        dropped++;
    }
    zlistx_destroy(&gone);
    return dropped;
}

int gs_placement_pending(const gs_placement_t *self, uid_t owner, int *mine)
{
    int all = 0, own = 0;
    for (placed_t *p = zhashx_first(self->by_session); p; p = zhashx_next(self->by_session)) {
        all += p->pending;
        own += p->pending && p->owner == owner;
    }
    if (mine)
        *mine = own;
    return all;
}

void gs_placement_forget(gs_placement_t *self, const char *session)
{
    zhashx_delete(self->by_session, session);
}

void gs_placement_each(const gs_placement_t *self,
                       void (*fn)(const char *session, const int *gpus, int n, void *arg),
                       void *arg)
{
    for (placed_t *p = zhashx_first(self->by_session); p; p = zhashx_next(self->by_session))
        fn((const char *)zhashx_cursor(self->by_session), p->gpu, p->n, arg);
}
