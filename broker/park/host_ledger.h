/*
 * host_ledger.h - one account of host memory for every parking decision.
 *
 * Parked GPU memory lives in host RAM on two tiers: the swap tier's pool,
 * pinned by the broker, and the checkpoint tier's images, which the driver
 * keeps in the parked process' own memory.  Both come out of the same RAM
 * that the notebooks themselves, the page cache and the rest of the
 * machine need, and Linux's OOM killer takes a notebook when it runs out.
 * So no park, unpark, tier choice or pool growth may take host memory
 * that this ledger does not say is there:
 *
 *   room = min( limit     - reserve - held - pending,      what gpushare may count on
 *               available - reserve - pending,             what the machine has now
 *               budget    - held - pending )               park_host_budget, if set
 *
 * where held is what gpushare holds now (pinned pool chunks, checkpoint
 * images), pending what it has decided to take and the machine may not
 * show yet (pins and checkpoints under way), limit the host memory it may
 * count on (MemTotal, the cgroup's memory.max, or park_host_memory) and
 * available what the machine has free now (MemAvailable, or memory.max -
 * memory.current of the cgroup).  The reserve is kept for everything
 * else.  Pure: the caller reads the machine (host_meminfo.h) and fills in
 * what gpushare holds; tests/unit/test_host_ledger.c drives it.
 */
#ifndef GS_HOST_LEDGER_H
#define GS_HOST_LEDGER_H

#include <stdint.h>

typedef struct {
    uint64_t limit;     /* host memory gpushare may count on (bytes) */
    uint64_t available; /* free for anyone now; UINT64_MAX: not known (limit decides) */
    uint64_t reserve;   /* kept for the rest of the machine */
    uint64_t budget;    /* park_host_budget; 0: auto (the ledger alone decides) */
    uint64_t pinned;    /* the swap tier's pool chunks, pinned (all GPUs) */
    uint64_t images;    /* checkpoint images held by parked processes */
    uint64_t pending;   /* decided, not visible yet: pins and checkpoints under way */
} gs_host_ledger_t;

/* Bytes of host memory gpushare may take now for something new (a pin, a
 * checkpoint image).  0 when there is none. */
uint64_t gs_host_ledger_room(const gs_host_ledger_t *l);

/* What gpushare's parked memory may total now: what it holds and has
 * decided to take, plus the room (the `auto` budget). */
uint64_t gs_host_ledger_capacity(const gs_host_ledger_t *l);

/* Which of the three terms decides the room: "reserve" (the machine is
 * short: available less reserve), "limit", or "budget". */
const char *gs_host_ledger_bound(const gs_host_ledger_t *l);

/* park_host_reserve = auto: what the rest of a machine of `ram` bytes is
 * left at least (a sixteenth of it, at least 2 GiB, at most half). */
uint64_t gs_host_ledger_auto_reserve(uint64_t ram);

#endif
