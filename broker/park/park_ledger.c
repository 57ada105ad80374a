/*
 * park_ledger.c - parking's host memory through one ledger
 * (host_ledger.h): what the machine has (host_meminfo.h, read at most
 * once a second), what gpushare holds (the pools' pinned chunks, the
 * checkpoint images of parked processes) and what it has decided to take
 * (pins and checkpoints under way).  Every park, tier choice and pool
 * growth asks it first, so that neither the OOM killer nor a failed host
 * allocation takes a notebook; the `auto` budget is its capacity.
 */
#include <string.h>

#include "host_meminfo.h"
#include "log.h"
#include "park_ledger.h"

#define SEC              1000000LL
#define MEMINFO_EVERY_US SEC

/* Checkpoint images: held by parked processes (a stuck one too), being
 * made (pending) or being restored (held until the restore ends). */
static void images(const gs_park_t *p, const psess_t *skip, uint64_t *held, uint64_t *making)
{
    *held = *making = 0;
    for (const psess_t *ps = zhashx_first(p->sess); ps; ps = zhashx_next(p->sess)) {
        if (ps == skip || ps->tier != TIER_CHECKPOINT)
            continue;
        uint64_t b = 0;
        for (int g = 0; g < p->ngpus; g++)
            b += ps->bytes[g];
        if (ps->st == PS_PARKING && ps->job)
            *making += b;
        else if (ps->st == PS_PARKED || ps->st == PS_UNPARKING || ps->stuck)
            *held += b;
    }
}

static gs_host_ledger_t ledger_without(const gs_park_t *p, const psess_t *skip)
{
    gs_host_ledger_t l = {0};
    uint64_t ram = p->mem.total ? p->mem.total : p->host_ram;
    l.limit = p->cfg.host_memory && p->cfg.host_memory < ram ? p->cfg.host_memory : ram;
    l.available = p->mem.total ? p->mem.available : UINT64_MAX;
    /* auto: a part of what is counted on (park_host_memory, or the RAM) */
    l.reserve = p->cfg.reserve_auto ? gs_host_ledger_auto_reserve(l.limit) : p->cfg.host_reserve;
    l.budget = p->cfg.budget_auto ? 0 : p->cfg.host_budget;
    uint64_t made, making;
    images(p, skip, &made, &making);
    l.images = made;
    l.pending = making;
    if (p->pools) {
        gs_host_pool_stats_t st;
        gs_swap_pools_stats(p->pools, -1, &st);
        l.pinned = st.pinned_bytes;
        l.pending += st.pinning_bytes;
    }
    return l;
}

gs_host_ledger_t park_ledger(const gs_park_t *p)
{
    return ledger_without(p, NULL);
}

uint64_t park_ledger_host_room(const gs_park_t *p, int g)
{
    gs_host_ledger_t l = park_ledger(p);
    uint64_t room = gs_host_ledger_room(&l);
    if (p->pools) { /* g < 0: every pool's */
        gs_host_pool_stats_t st;
        gs_swap_pools_stats(p->pools, g, &st);
        room += st.free_bytes; /* a swap park's lease, or unpinned for an image */
    }
    return room;
}

/* The pools may pin what the ledger has room for; when the machine is
 * short (available below the reserve), chunks nobody holds go back. */
static void steer_pools(gs_park_t *p, const gs_host_ledger_t *l)
{
    if (!p->pools)
        return;
    uint64_t room = gs_host_ledger_room(l), budget = l->pinned + room;
    uint64_t need = l->reserve + l->pending;
    if (l->available != UINT64_MAX && l->available < need) {
        uint64_t deficit = need - l->available;
        uint64_t lent = gs_swap_pools_lent(p->pools, -1);
        budget = l->pinned > deficit ? l->pinned - deficit : 0;
        if (budget < lent)
            budget = lent;
    }
    gs_swap_pools_set_budget(p->pools, budget);
}

void park_ledger_refresh(gs_park_t *p, int64_t now)
{
    if (now >= p->mem_at) {
        char err[200];
        gs_host_meminfo_t m;
        if (gs_host_meminfo_now(&m, err, sizeof err) == 0) {
            p->mem = m;
            p->mem_err[0] = 0;
        } else if (strcmp(err, p->mem_err) != 0) {
            gs_warn("host memory unknown (%s): counting %.1f GiB of RAM and nothing else", err,
                    p->host_ram / 1073741824.0);
            snprintf(p->mem_err, sizeof p->mem_err, "%s", err);
        }
        p->mem_at = now + MEMINFO_EVERY_US;
    }
    gs_host_ledger_t l = park_ledger(p);
    if (p->cfg.budget_auto)
        p->cfg.host_budget = gs_host_ledger_capacity(&l);
    steer_pools(p, &l);
}

int64_t park_ledger_next(const gs_park_t *p)
{
    return p->mem_at;
}

/* The owners' cgroups: an image grows the parked process itself, so it
 * must fit under the limit of the cgroup that process runs in (a
 * JupyterHub's per-user slice) as well as on the machine. */
static int fits_cgroups(const gs_park_t *p, const psess_t *ps, char *why, size_t len)
{
    for (const pclient_t *c = zhashx_first(p->clients); c; c = zhashx_next(p->clients)) {
        if (strcmp(c->session, ps->id) != 0 || c->pid <= 0)
            continue;
        uint64_t used = 0;
        for (int g = 0; g < p->ngpus; g++)
            used += c->used[g];
        uint64_t room = gs_host_meminfo_cgroup_room(c->pid);
        if (room != UINT64_MAX && used > room) {
            char a[32], b[32];
            snprintf(why, len,
                     "process %ld's cgroup has %s of memory left, its checkpoint image needs %s",
                     c->pid, park_state_mib(a, sizeof a, room), park_state_mib(b, sizeof b, used));
            return 0;
        }
    }
    return 1;
}

int park_ledger_take_image(gs_park_t *p, const psess_t *ps, char *why, size_t len)
{
    uint64_t bytes = 0;
    for (int g = 0; g < p->ngpus; g++)
        bytes += ps->bytes[g];
    gs_host_ledger_t l = ledger_without(p, ps);
    uint64_t room = gs_host_ledger_room(&l);
    uint64_t pool_free = 0;
    if (p->pools) {
        gs_host_pool_stats_t st;
        gs_swap_pools_stats(p->pools, -1, &st);
        pool_free = st.free_bytes;
    }
    if (bytes > room + pool_free) {
        char a[32], b[32], c[32], d[32];
        snprintf(why, len,
                 "host memory is full: a checkpoint image of %s does not fit (%s free for "
                 "parking, bound by %s: %s pinned, %s in checkpoint images)",
                 park_state_mib(a, sizeof a, bytes), park_state_mib(b, sizeof b, room + pool_free),
                 gs_host_ledger_bound(&l), park_state_mib(c, sizeof c, l.pinned),
                 park_state_mib(d, sizeof d, l.images));
        return 0;
    }
    if (!fits_cgroups(p, ps, why, len))
        return 0;
    if (bytes > room && p->pools) /* the pool's unused chunks make way for the image */
        gs_swap_pools_set_budget(p->pools, l.pinned - (bytes - room));
    return 1;
}

json_t *park_ledger_json(const gs_park_t *p)
{
    gs_host_ledger_t l = park_ledger(p);
    json_t *o =
        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:b}", "limit_bytes",
                  (json_int_t)l.limit, "reserve_bytes", (json_int_t)l.reserve, "pinned_bytes",
                  (json_int_t)l.pinned, "images_bytes", (json_int_t)l.images, "pending_bytes",
                  (json_int_t)l.pending, "room_bytes", (json_int_t)gs_host_ledger_room(&l),
                  "capacity_bytes", (json_int_t)gs_host_ledger_capacity(&l), "bound",
                  gs_host_ledger_bound(&l), "cgroup", p->mem.cgroup);
    if (l.available != UINT64_MAX)
        json_object_set_new(o, "available_bytes", json_integer((json_int_t)l.available));
    return o;
}
