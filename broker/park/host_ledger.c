/*
 * host_ledger.c - one account of host memory for every parking decision
 * (host_ledger.h).
 */
#include "host_ledger.h"

static uint64_t sub(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

static uint64_t term_limit(const gs_host_ledger_t *l)
{
    return sub(sub(sub(l->limit, l->reserve), l->pinned + l->images), l->pending);
}

static uint64_t term_available(const gs_host_ledger_t *l)
{
    if (l->available == UINT64_MAX)
        return UINT64_MAX;
    return sub(sub(l->available, l->reserve), l->pending);
}

static uint64_t term_budget(const gs_host_ledger_t *l)
{
    if (!l->budget)
        return UINT64_MAX;
    return sub(sub(l->budget, l->pinned + l->images), l->pending);
}

uint64_t gs_host_ledger_room(const gs_host_ledger_t *l)
{
    uint64_t r = term_limit(l), a = term_available(l), b = term_budget(l);
    if (a < r)
        r = a;
    if (b < r)
        r = b;
    return r;
}

uint64_t gs_host_ledger_capacity(const gs_host_ledger_t *l)
{
    return l->pinned + l->images + l->pending + gs_host_ledger_room(l);
}

const char *gs_host_ledger_bound(const gs_host_ledger_t *l)
{
    uint64_t r = term_limit(l), a = term_available(l), b = term_budget(l);
    if (b <= r && b <= a)
        return "budget";
    return a < r ? "reserve" : "limit";
}

uint64_t gs_host_ledger_auto_reserve(uint64_t ram)
{
    uint64_t r = ram / 16, floor = 2ull << 30;
    if (r < floor)
        r = floor;
    if (r > ram / 2)
        r = ram / 2;
    return r;
}
