/*
 * park_swap.c - parking on the swap tier: the hooks of a session copy its
 * memory into host memory lent from the GPU's pool (swap_pools.h) and
 * give the GPU's memory back, then copy it back in when the session needs
 * the GPU (doc/parking.md).  A park or unpark here is a conversation, not a
 * worker job: swap_out / swap_in to every process of the session (queued
 * with park_state_answer for the broker to send, like make_room's answers), their
 * `swapped` replies (gs_park_on_swapped), a deadline.  Its end goes through the same
 * bookkeeping as a checkpoint job (its caller hands the finished phase to
 * park_jobs_finish_swaps), so status, events, rates
 * and the scheduler see one kind of park.
 *
 * Chosen per session when every process of it can swap (`join` said so),
 * its memory is on one GPU, what cannot move is small, and the pool can
 * lend enough right now; otherwise the checkpoint tier parks it.
 *
 * Faults: a failed swap_out brings back the processes that had moved
 * anything (swap_in) before the park counts as failed and the session
 * runs on; a failed swap_in leaves the session parked and is retried like
 * any unpark; a process that dies returns its lease; a hook that does not
 * answer by the deadline counts as failed.  A process the broker drops
 * while it still runs (stopped for longer than the heartbeat limit, then
 * fenced: it joins again; or its connection closed) keeps its lease and
 * its device memory, held for it by pid and start time: its chunks hold
 * its data and must not go to anyone else, and its device memory must not
 * be promised to a session coming back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gs_assert.h"
#include "log.h"
#include "park_swap.h"
#include "proc_alive.h"
#include "protocol.h"

#define SEC           1000000LL
#define SWAP_DEADLINE (60 * SEC)
/* How long a park waits for the pool to pin or zero what its lease lacks
 * before it goes to the checkpoint tier: a GiB pins in 0.2-0.4 s, while
 * checkpointing 32 GiB took 15-35 s (H200). */
#define POOL_WAIT_MAX        (10 * SEC)
#define UNMOVABLE_MIN        (256ull << 20) /* resident bytes that may stay behind ... */
#define UNMOVABLE_FRAC       10             /* ... or a tenth of the footprint */
#define HELD_CHECK           SEC            /* how often held leases' processes are looked at */
#define IN_WAIT_BASE_MS      2000           /* a swap_in waits for memory: this, plus ... */
#define IN_WAIT_BYTES_PER_MS 1048576u       /* ... what is leaving at 1 GB/s ... */
#define IN_WAIT_MAX_MS       30000          /* ... at most */
/* A relay starts with this many chunks lent at once, so that both sides of
 * the switch make progress from the start. */
#define RELAY_MIN_CHUNKS 2

static void free_sum(void **item)
{
    free(*item);
    *item = NULL;
}

int park_swap_available(const gs_park_t *p)
{
    return p->pools != NULL;
}

/* How long a hook waits for memory the other side of a switch frees: about
 * as long as it takes at a slow link (1 GB/s), at most IN_WAIT_MAX_MS; if
 * that side fails, this one gives up soon and is retried. */
static json_int_t relay_wait_ms(uint64_t bytes)
{
    uint64_t ms = IN_WAIT_BASE_MS + bytes / IN_WAIT_BYTES_PER_MS;
    return (json_int_t)(ms < IN_WAIT_MAX_MS ? ms : IN_WAIT_MAX_MS);
}

/* swap_out or swap_in for the hook of c, queued for the broker to send
 * (park_state_answer), like make_room's answers: parking sends nothing itself. */
static void send_swap(gs_park_t *p, pclient_t *c, int gpu, int out)
{
    gs_client_t *client = gs_sessions_client_by_key(p->sessions, c->key);
    json_t *m = gs_msg_new(out ? GS_MSG_SWAP_OUT : GS_MSG_SWAP_IN);
    json_object_set_new(m, "device", json_string(p->uuids[gpu]));
    json_object_set_new(m, "lease", json_integer((json_int_t)c->lease));
    if (out) {
        json_object_set_new(m, "chunks", json_integer(c->lease_chunks));
        json_object_set_new(m, "chunk_bytes",
                            json_integer((json_int_t)gs_swap_pools_chunk_bytes(p->pools)));
        psess_t *ps = park_state_sess(p, c->session, 0);
        if (ps && ps->relay) /* its chunks come as the incoming session frees them */
            json_object_set_new(m, "wait_ms", json_integer(relay_wait_ms(c->movable[gpu])));
        if (ps && ps->part[gpu]) /* a partial park: the rest stays on the GPU */
            json_object_set_new(m, "bytes", json_integer((json_int_t)ps->part[gpu]));
    } else {
        /* Memory that is still leaving (a switch's pipeline) is waited for,
         * not for ever: if that park fails the unpark is retried. */
        json_object_set_new(m, "wait_ms", json_integer(relay_wait_ms(park_swap_leaving(p, gpu))));
    }
    c->swap_wait = out ? CW_OUT : CW_IN;
    if (!client || !client->identity) { /* its deadline (or its end) settles it */
        gs_warn("could not send %s to pid %ld: no connection", out ? "swap_out" : "swap_in",
                c->pid);
        json_decref(m);
        return;
    }
    park_state_answer(p, client->identity, m);
}

/* The GPU holding all of the session's memory, or -1 (none, or several). */
static int only_gpu(const gs_park_t *p, const psess_t *ps)
{
    int g1 = -1;
    for (int g = 0; g < p->ngpus; g++)
        if (ps->bytes[g]) {
            if (g1 >= 0)
                return -1;
            g1 = g;
        }
    return g1;
}

static void return_leases(gs_park_t *p, const char *session, int64_t now)
{
    for (pclient_t *c = zhashx_first(p->clients); c; c = zhashx_next(p->clients))
        if (!strcmp(c->session, session) && c->lease) {
            gs_swap_pools_return(p->pools, c->lease, now);
            c->lease = 0;
        }
}

/* A swap_out (SWAP_OUT) or swap_in (SWAP_IN) to every process of ps that
 * holds a lease, and a swap_in also to one that reports memory out without
 * one (parked by a broker that is gone: its chunks are its own now);
 * pinning waits meanwhile. */
static void begin_phase(gs_park_t *p, psess_t *ps, int phase, int64_t now)
{
    gs_swap_pools_hold(p->pools, 1, now);
    ps->swap_phase = phase;
    ps->swap_failed = 0;
    ps->swap_error[0] = '\0';
    ps->swap_elapsed_us = 0;
    ps->swap_deadline = now + SWAP_DEADLINE;
    ps->job = ++p->next_job;
    ps->swap_waiting = 0;
    if (phase == SWAP_OUT)
        ps->moved_out = 0;
    for (pclient_t *c = zhashx_first(p->clients); c; c = zhashx_next(p->clients))
        if (!strcmp(c->session, ps->id) &&
            (c->lease || (phase == SWAP_IN && c->swapped[ps->swap_gpu]))) {
            send_swap(p, c, ps->swap_gpu, phase == SWAP_OUT);
            ps->swap_waiting++;
        }
}

/* Why the session cannot use the swap tier on GPU g, or NULL if it can. */
static const char *unsuited(const gs_park_t *p, const char *session, int g)
{
    if (!p->pools || !p->cfg.swap)
        return "the swap tier is off";
    if (g < 0)
        return "its memory is on several GPUs";
    /* Every process can swap, and what stays behind is small. */
    uint64_t used = 0, movable = 0;
    int n = 0;
    for (pclient_t *c = zhashx_first(p->clients); c; c = zhashx_next(p->clients)) {
        if (strcmp(c->session, session) != 0)
            continue;
        if (!c->swap)
            return "a process of it cannot swap (its hook said so)";
        if (c->pid <= 0 || c->uid < 0)
            return "a process of it has unknown credentials";
        used += c->used[g];
        movable += c->movable[g];
        n++;
    }
    if (!n)
        return "no process of it is connected";
    if (!movable)
        return "its processes report no movable memory";
    uint64_t stays = used > movable ? used - movable : 0;
    if (stays > UNMOVABLE_MIN && stays * UNMOVABLE_FRAC > used)
        return "too much of its memory cannot move (pools, arrays, managed memory)";
    return NULL;
}

int park_swap_suits(const gs_park_t *p, const char *session, int g)
{
    return unsuited(p, session, g) == NULL;
}

/* The session ps makes room for, when it comes back from the swap tier of
 * GPU g and will free its chunks as it goes (NULL otherwise). */
static psess_t *relay_source(gs_park_t *p, const char *room_for, int g, int64_t now)
{
    psess_t *in = room_for && room_for[0] ? park_state_sess(p, room_for, 0) : NULL;
    /* A failed swap in leaves it stuck, its memory still in its lease:
     * it relays as well (else the budget, which counts that lease, never
     * lets a victim go out for it: it waited for ever on the simulated
     * GPU's pressure bench). */
    /* (One on the disk tier holds no chunks to relay: its memory comes
     * back into new ones, park_disk.c.) */
    if (!in || in->st != PS_PARKED || in->tier != TIER_SWAP || in->swap_gpu != g ||
        in->retry_at > now || in->disk != DISK_NONE)
        return NULL;
    return in;
}

/* The one user whose leases session `in` holds: -1 when it holds none, or
 * leases of several users (chunks are relayed within one user only).
 * (It walks the processes: not inside another loop over them.) */
static int lease_uid(gs_park_t *p, const psess_t *in)
{
    int uid = -1;
    for (pclient_t *c = zhashx_first(p->clients); c; c = zhashx_next(p->clients))
        if (!strcmp(c->session, in->id) && c->lease) {
            if (uid >= 0 && uid != c->uid)
                return -1;
            uid = c->uid;
        }
    return uid;
}

/* A relay starts with the chunks the pool has now: the one going out
 * fills them, which frees GPU memory for the first segment of the one
 * coming back, which then returns its chunks.  With fewer than a few
 * chunks, or less than that first segment, neither side could move (seen
 * on the simulated GPU with 20 MiB segments and 4 MiB chunks: the switch
 * was tried and failed again and again). */
static int relay_can_start(const gs_park_t *p, const psess_t *in, int usable)
{
    uint64_t seg = in->segment ? in->segment : PARK_OLD_SEGMENT;
    return usable >= RELAY_MIN_CHUNKS &&
           (uint64_t)usable * gs_swap_pools_chunk_bytes(p->pools) >= seg;
}

/* Credited only where the relay will happen: every process with memory on
 * the GPU is of the incoming session's user (chunks are relayed within one
 * user) and the pool can lend the first chunks now.  Otherwise the budget
 * stands as it is, rather than let a victim go to the checkpoint tier
 * beyond it. */
uint64_t park_swap_relayable(gs_park_t *p, const char *room_for, int g)
{
    psess_t *in = p->pools && p->cfg.swap ? relay_source(p, room_for, g, INT64_MAX) : NULL;
    if (!in)
        return 0;
    int uid = lease_uid(p, in);
    if (uid < 0 || !relay_can_start(p, in, gs_swap_pools_usable(p->pools, g, (uid_t)uid)))
        return 0;
    uint64_t leased = 0;
    for (pclient_t *c = zhashx_first(p->clients); c; c = zhashx_next(p->clients)) {
        if (c->used[g] && c->uid != uid)
            return 0;
        if (!strcmp(c->session, in->id) && c->lease)
            leased += (uint64_t)gs_swap_pools_lease_chunks(p->pools, c->lease, (uid_t)uid) *
                      gs_swap_pools_chunk_bytes(p->pools);
    }
    /* Its lease comes back whole (a session parked in part holds a lease
     * for all it can move): the host ledger counts those chunks as pinned,
     * so they are what the switch frees. */
    return leased > in->bytes[g] ? leased : in->bytes[g];
}

/* The switch's relay (doc/parking.md): the pool cannot lend c all it needs
 * now, but the session this park makes room for comes back from the swap
 * tier of the same GPU with chunks of the same user, which it returns one
 * by one as its memory comes back; c's lease grows with them, so a switch
 * needs host room for one notebook, not two.  Only for a session of one
 * process with memory to move, and only with a few chunks usable at once
 * (so that both sides can make progress from the start: the incoming one
 * takes GPU memory as the outgoing one frees it).  The lease, or 0. */
typedef struct {
    psess_t *in; /* NULL: no relay */
    int coming;  /* chunks of the incoming session's leases, of its user */
    uid_t uid;
} relay_t;

/* How many of the session's processes have memory to move on GPU g, and
 * the uid of (the last of) them in *uid when asked. */
static int session_movers(gs_park_t *p, const char *session, int g, long *uid)
{
    int movers = 0;
    for (pclient_t *k = zhashx_first(p->clients); k; k = zhashx_next(p->clients))
        if (!strcmp(k->session, session) && k->movable[g]) {
            movers++;
            if (uid)
                *uid = k->uid;
        }
    return movers;
}

int park_swap_can_part(gs_park_t *p, const char *session, int g)
{
    return p->pools && p->cfg.swap && park_swap_suits(p, session, g) &&
           session_movers(p, session, g, NULL) == 1;
}

/* Looks at the processes once (zhashx has one cursor per table: the
 * caller's loop over them must not be disturbed). */
static relay_t relay_plan(gs_park_t *p, const psess_t *ps, int g, int64_t now)
{
    relay_t r = {relay_source(p, ps->room_for, g, now), 0, 0};
    if (!r.in)
        return r;
    long uid = -1;
    int movers = session_movers(p, ps->id, g, &uid);
    r.uid = (uid_t)uid;
    int in_uid = lease_uid(p, r.in);
    if (movers != 1 || in_uid < 0 || in_uid != (int)r.uid) { /* relayed without zeroing only */
        r.in = NULL;
        return r;
    }
    for (pclient_t *k = zhashx_first(p->clients); k; k = zhashx_next(p->clients))
        if (!strcmp(k->session, r.in->id) && k->lease)
            r.coming += gs_swap_pools_lease_chunks(p->pools, k->lease, r.uid);
    return r;
}

static uint64_t relay_lease(gs_park_t *p, const relay_t *r, psess_t *ps, pclient_t *c, int g)
{
    uint64_t cb = gs_swap_pools_chunk_bytes(p->pools);
    uint64_t need = (c->movable[g] + cb - 1) / cb;
    int usable = gs_swap_pools_usable(p->pools, g, (uid_t)c->uid);
    if (!r->in || (uid_t)c->uid != r->uid || !relay_can_start(p, r->in, usable) ||
        (uint64_t)usable + (uint64_t)r->coming < need)
        return 0;
    int now_chunks = 0;
    uint64_t lease = gs_swap_pools_lease_growing(p->pools, g, (uid_t)c->uid, (pid_t)c->pid,
                                                 c->movable[g], &c->lease_chunks, &now_chunks);
    if (lease)
        gs_info("session %s goes out on the swap tier while session %s comes back: %d of %d "
                "chunks now, the rest as %s frees them",
                ps->id, r->in->id, now_chunks, c->lease_chunks, r->in->id);
    return lease;
}

int park_swap_try_park(gs_park_t *p, psess_t *ps, int64_t now)
{
    if (ps->rest) {
        /* Parked in part, the rest follows into the lease it holds; should
         * that fail, the rollback brings all of it back (swap_moved), the
         * part out before included. */
        memset(ps->part, 0, sizeof ps->part);
        ps->relay = 0;
        for (pclient_t *c = zhashx_first(p->clients); c; c = zhashx_next(p->clients))
            if (!strcmp(c->session, ps->id) && c->lease)
                c->swap_moved = 1;
        begin_phase(p, ps, SWAP_OUT, now);
        return 1;
    }
    int g = only_gpu(p, ps);
    ps->pool_short = 0;
    ps->relay = 0;
    const char *why = unsuited(p, ps->id, g);
    if (why) {
        if (p->pools && p->cfg.swap)
            gs_info("session %s goes to the checkpoint tier: %s", ps->id, why);
        return 0;
    }
    uint64_t movable = 0;
    for (pclient_t *c = zhashx_first(p->clients); c; c = zhashx_next(p->clients))
        if (!strcmp(c->session, ps->id))
            movable += c->movable[g];
    relay_t relay = relay_plan(p, ps, g, now);
    int movers = session_movers(p, ps->id, g, NULL);
    int part = ps->part[g] && movers == 1 && ps->part[g] < movable;
    /* Host memory for all of them, or none.  A partial park leases all
     * the process can move too: the engine gives every range it touches
     * its whole place in the window, and the rest may follow later into
     * the same lease. */
    for (pclient_t *c = zhashx_first(p->clients); c; c = zhashx_next(p->clients)) {
        if (strcmp(c->session, ps->id) != 0 || !c->movable[g])
            continue;
        uint64_t short_by = 0;
        c->lease = gs_swap_pools_lease(p->pools, g, (uid_t)c->uid, (pid_t)c->pid, c->movable[g],
                                       &c->lease_chunks, &short_by);
        if (!c->lease && (c->lease = relay_lease(p, &relay, ps, c, g)) != 0)
            ps->relay = 1;
        if (!c->lease) {
            char a[32], m[32];
            return_leases(p, ps->id, now);
            park_state_mib(a, sizeof a, short_by);
            park_state_mib(m, sizeof m, movable);
            int first = !ps->pool_wait_since;
            if (first)
                ps->pool_wait_since = now;
            /* Waiting for the pin beats the checkpoint tier for as long
             * as a checkpoint of this much would take (16 s for 32 GiB). */
            int64_t wait_max = POOL_WAIT_MAX;
            double ckpt_bps = p->out_bps[TIER_CHECKPOINT][g];
            if (ckpt_bps > 0 && (double)movable / ckpt_bps * SEC > (double)wait_max)
                wait_max = (int64_t)((double)movable / ckpt_bps * SEC);
            if (now - ps->pool_wait_since < wait_max &&
                gs_swap_pools_coming(p->pools, g, movable)) {
                if (first)
                    gs_info("session %s waits for the host pool of GPU %d: %s of %s still being "
                            "pinned or zeroed",
                            ps->id, g, a, m);
                ps->st = PS_REVOKING;                 /* tried again at each poll (park_poll.c) */
                gs_swap_pools_hold(p->pools, 0, now); /* pinning goes on beside copies */
                if (ps->pool_wait_since + wait_max < p->wake)
                    p->wake = ps->pool_wait_since + wait_max;
                return 2;
            }
            ps->pool_wait_since = 0;
            gs_info("session %s goes to the checkpoint tier: the host pool of GPU %d lacks %s "
                    "for it (of %s)",
                    ps->id, g, a, m);
            ps->pool_short = movable;
            ps->pool_short_gpu = g;
            return 0;
        }
    }
    if (ps->pool_wait_since)
        gs_info("session %s waited %.2f s for the host pool", ps->id,
                (double)(now - ps->pool_wait_since) / SEC);
    ps->pool_wait_since = 0;
    /* A partial park: one process moves what the session coming back
     * needs (park_victims), and counts as leaving only that much
     * (park_swap_leaving) until its answer says what went out. */
    if (part)
        ps->bytes[g] = ps->part[g];
    else
        memset(ps->part, 0, sizeof ps->part);
    ps->tier = TIER_SWAP;
    ps->swap_gpu = g;
    ps->swap_rollback_failed = 0;
    begin_phase(p, ps, SWAP_OUT, now);
    return 1;
}

void park_swap_unpark(gs_park_t *p, psess_t *ps, int64_t now)
{
    begin_phase(p, ps, SWAP_IN, now);
    if (!ps->swap_waiting) /* nobody left holding memory out: it is back */
        park_swap_check(p, now);
}

/* Finished by the caller (park_jobs_finish_swaps), like a worker's job. */
static void queue_done(gs_park_t *p, const psess_t *ps, gs_park_job_t *j)
{
    snprintf(j->session, sizeof j->session, "%s", ps->id);
    gs_park_job_t *done = malloc(sizeof *done);
    if (!done)
        abort(); /* the broker cannot keep its promises without memory */
    *done = *j;
    done->next = NULL;
    *p->swap_done_end = done;
    p->swap_done_end = &done->next;
}

/* Every process answered (or the deadline passed): finish the phase. */
static void phase_done(gs_park_t *p, psess_t *ps, int64_t now)
{
    gs_park_job_t j;
    memset(&j, 0, sizeof j);
    j.id = ps->job;
    j.unpark = ps->swap_phase == SWAP_IN;
    j.ok = !ps->swap_failed;
    j.elapsed_us = ps->swap_elapsed_us;
    j.npids = 0;
    snprintf(j.error, sizeof j.error, "%s", ps->swap_error);
    if (ps->swap_phase == SWAP_OUT && ps->swap_failed) {
        /* Bring back whoever moved anything; then the park has failed. */
        ps->swap_phase = SWAP_ROLLBACK;
        ps->swap_waiting = 0;
        ps->swap_deadline = now + SWAP_DEADLINE;
        for (pclient_t *c = zhashx_first(p->clients); c; c = zhashx_next(p->clients))
            if (!strcmp(c->session, ps->id) && c->lease) {
                if (c->swap_moved) {
                    send_swap(p, c, ps->swap_gpu, 0);
                    ps->swap_waiting++;
                } else {
                    gs_swap_pools_return(p->pools, c->lease, now);
                    c->lease = 0;
                }
            }
        if (ps->swap_waiting)
            return;
        j.stuck = 0;
    } else if (ps->swap_phase == SWAP_ROLLBACK) {
        j.unpark = 0;
        j.ok = 0;
        j.stuck = ps->swap_rollback_failed;
        snprintf(j.error, sizeof j.error, "%s", ps->swap_first_error);
    }
    /* A partial park is parked with what went out; the rest stays. */
    int g = ps->swap_gpu;
    if (!j.unpark && j.ok && ps->part[g]) {
        ps->partial = 1;
        if (ps->moved_out)
            ps->bytes[g] = ps->moved_out;
    } else if (!j.unpark && j.ok && ps->rest) { /* the rest is out too */
        ps->partial = 0;
        ps->bytes[g] = ps->out_before + ps->moved_out;
    }
    memset(ps->part, 0, sizeof ps->part);
    ps->rest = 0;
    ps->swap_phase = SWAP_NONE;
    ps->job = 0;
    if (j.unpark && j.ok)
        return_leases(p, ps->id, now);
    queue_done(p, ps, &j);
}

void park_swap_unpark_failed(gs_park_t *p, psess_t *ps, const char *why)
{
    gs_park_job_t j;
    memset(&j, 0, sizeof j);
    j.id = ps->job;
    j.unpark = 1;
    snprintf(j.error, sizeof j.error, "%s", why);
    ps->job = 0;
    queue_done(p, ps, &j);
}

gs_park_job_t *park_swap_next_done(gs_park_t *p)
{
    gs_park_job_t *j = p->swap_done;
    if (!j)
        return NULL;
    p->swap_done = j->next;
    if (!p->swap_done)
        p->swap_done_end = &p->swap_done;
    j->next = NULL;
    return j;
}

void park_swap_answered(gs_park_t *p, pclient_t *c, int gpu, const json_t *msg, int64_t now)
{
    psess_t *ps = c ? park_state_sess(p, c->session, 0) : NULL;
    int out = strcmp(gs_msg_str(msg, "direction", ""), "out") == 0;
    if (!ps || ps->tier != TIER_SWAP || ps->swap_phase == SWAP_NONE || gpu != ps->swap_gpu ||
        (uint64_t)gs_msg_int(msg, "lease", 0) != c->lease ||
        c->swap_wait != (out ? CW_OUT : CW_IN)) {
        gs_debug("swapped from pid %ld that nothing waits for: ignored", c ? c->pid : 0L);
        return;
    }
    int ok = json_is_true(json_object_get(msg, "ok"));
    uint64_t bytes = (uint64_t)gs_msg_int(msg, "bytes", 0);
    int64_t us = gs_msg_int(msg, "elapsed_us", 0);
    c->swap_wait = CW_NONE;
    /* What it holds now, as its next memory report will say: a park that
     * comes first (a turn ends at once) must not see the totals it had
     * while it was out (nothing movable: the checkpoint tier). */
    if (json_object_get(msg, "movable_bytes"))
        c->movable[gpu] = (uint64_t)gs_msg_int(msg, "movable_bytes", 0);
    if (json_object_get(msg, "swapped_bytes"))
        c->swapped[gpu] = (uint64_t)gs_msg_int(msg, "swapped_bytes", 0);
    if (us > ps->swap_elapsed_us)
        ps->swap_elapsed_us = us; /* the processes move at once: the longest counts */
    if (out)
        c->swap_moved = ok || bytes > 0 || ps->rest; /* (park_swap_try_park) */
    if (out && ok)
        ps->moved_out += bytes;
    if (!ok) {
        char text[300];
        snprintf(text, sizeof text, "pid %ld: swap %s: %.200s", c->pid, out ? "out" : "in",
                 gs_msg_str(msg, "error", "failed"));
        if (!ps->swap_failed)
            snprintf(ps->swap_first_error, sizeof ps->swap_first_error, "%s", text);
        snprintf(ps->swap_error, sizeof ps->swap_error, "%s", text);
        if (ps->swap_phase == SWAP_ROLLBACK)
            ps->swap_rollback_failed = 1;
        ps->swap_failed = 1;
    } else if (!out) {
        if (c->lease) /* back: its host memory is free */
            gs_swap_pools_return(p->pools, c->lease, now);
        c->lease = 0;
        c->swap_moved = 0;
        if (!json_object_get(msg, "swapped_bytes"))
            c->swapped[gpu] = 0; /* an older hook: until it reports again */
    }
    GS_ASSERT(ps->swap_waiting > 0);
    if (--ps->swap_waiting <= 0)
        phase_done(p, ps, now);
}

void park_swap_check(gs_park_t *p, int64_t now)
{
    int moving = 0, waiting = 0;
    for (psess_t *ps = zhashx_first(p->sess); ps; ps = zhashx_next(p->sess)) {
        moving |= ps->tier == TIER_SWAP && ps->swap_phase != SWAP_NONE;
        waiting |= ps->pool_wait_since != 0;
    }
    /* Copies first, pinning after; but a park that waits for the pool
     * waits for pinning: then pinning goes on beside the copies. */
    if (p->pools)
        gs_swap_pools_hold(p->pools, moving && !waiting, now);
    for (psess_t *ps = zhashx_first(p->sess); ps; ps = zhashx_next(p->sess)) {
        if (ps->tier != TIER_SWAP || ps->swap_phase == SWAP_NONE)
            continue;
        if (ps->swap_waiting > 0 && now < ps->swap_deadline) {
            if (ps->swap_deadline < p->wake)
                p->wake = ps->swap_deadline;
            continue;
        }
        if (ps->swap_waiting > 0) {
            snprintf(ps->swap_error, sizeof ps->swap_error, "%d process%s did not answer in %lld s",
                     ps->swap_waiting, ps->swap_waiting == 1 ? "" : "es",
                     (long long)(SWAP_DEADLINE / SEC));
            if (!ps->swap_failed)
                snprintf(ps->swap_first_error, sizeof ps->swap_first_error, "%s", ps->swap_error);
            if (ps->swap_phase == SWAP_ROLLBACK)
                ps->swap_rollback_failed = 1;
            ps->swap_failed = 1;
            for (pclient_t *c = zhashx_first(p->clients); c; c = zhashx_next(p->clients))
                if (!strcmp(c->session, ps->id))
                    c->swap_wait = CW_NONE;
        }
        ps->swap_waiting = 0;
        phase_done(p, ps, now);
    }
}

uint64_t park_swap_leaving(const gs_park_t *p, int gpu)
{
    uint64_t sum = 0;
    for (const psess_t *ps = zhashx_first(p->sess); ps; ps = zhashx_next(p->sess))
        if (ps->tier == TIER_SWAP && ps->swap_phase == SWAP_OUT && ps->swap_gpu == gpu)
            sum += ps->bytes[gpu];
    return sum;
}

/* The process of c (alive, it was dropped) keeps its memory: held. */
static int hold_proc(gs_park_t *p, const pclient_t *c, int gpu)
{
    held_proc_t *h = calloc(1, sizeof *h);
    if (!h)
        return -1;
    h->pid = c->pid;
    h->start = c->start;
    snprintf(h->session, sizeof h->session, "%s", c->session);
    uint64_t used = 0;
    for (int g = 0; g < GS_MAX_GPUS; g++)
        used += h->used[g] = c->used[g];
    h->lease = c->lease;
    h->chunks = c->lease_chunks;
    h->gpu = gpu;
    h->moved = c->swap_moved;
    h->next = p->held;
    p->held = h;
    gs_info("pid %ld of session %s was dropped while it runs: its memory (%llu bytes on the GPU, "
            "lease %llu in host memory) is kept for it",
            c->pid, c->session, (unsigned long long)used, (unsigned long long)c->lease);
    return 0;
}

static int holds_anything(const pclient_t *c)
{
    for (int g = 0; g < GS_MAX_GPUS; g++)
        if (c->used[g])
            return 1;
    return c->lease != 0;
}

void park_swap_client_gone(gs_park_t *p, pclient_t *c, int exited, int64_t now)
{
    psess_t *ps = park_state_sess(p, c->session, 0);
    int alive = c->pid > 0 && c->start && gs_proc_alive(c->pid, c->start);
    int swapping = p->pools && ps && ps->tier == TIER_SWAP;
    int awaited = swapping && ps->swap_phase != SWAP_NONE && c->swap_wait != CW_NONE;
    if (awaited && alive) { /* it will not answer; its data is wherever it got to */
        snprintf(ps->swap_error, sizeof ps->swap_error,
                 "pid %ld was dropped by the broker before it answered", c->pid);
        if (!ps->swap_failed)
            snprintf(ps->swap_first_error, sizeof ps->swap_first_error, "%s", ps->swap_error);
        if (ps->swap_phase == SWAP_ROLLBACK)
            ps->swap_rollback_failed = 1;
        ps->swap_failed = 1;
        c->swap_moved = 1;
    }
    /* One that said it exits frees its memory as it goes; its mappings of
     * the chunks die with it. */
    int held =
        alive && !exited && holds_anything(c) && hold_proc(p, c, swapping ? ps->swap_gpu : 0) == 0;
    if (c->lease && !held)
        gs_swap_pools_return(p->pools, c->lease, now);
    c->lease = 0;
    if (awaited) {
        c->swap_wait = CW_NONE;
        if (--ps->swap_waiting <= 0)
            phase_done(p, ps, now);
    }
}

void park_swap_client_back(gs_park_t *p, pclient_t *c, int64_t now)
{
    for (held_proc_t **hp = &p->held; *hp; hp = &(*hp)->next) {
        held_proc_t *h = *hp;
        if (h->pid != c->pid || h->start != c->start || !c->start)
            continue;
        *hp = h->next;
        if (c->lease) /* cannot be: a new client holds nothing yet */
            gs_swap_pools_return(p->pools, c->lease, now);
        for (int g = 0; g < GS_MAX_GPUS; g++)
            c->used[g] = h->used[g]; /* until its hook reports again */
        c->lease = h->lease;
        c->lease_chunks = h->chunks;
        c->swap_moved = h->moved;
        gs_info("pid %ld joined session %s again and takes back its memory (lease %llu)", c->pid,
                c->session, (unsigned long long)c->lease);
        /* Coming back with the rest, unless the phase has failed already
         * (this process' drop failed it, most often): the unpark's retry
         * (or, after a rollback, the stuck session's unpark) brings it
         * back, and a swap_in now would be its second, queued on its swap
         * thread behind the first, which it may still be running. */
        psess_t *ps = park_state_sess(p, c->session, 0);
        int in = c->lease && ps && ps->tier == TIER_SWAP && h->gpu == ps->swap_gpu &&
                 (ps->swap_phase == SWAP_IN || ps->swap_phase == SWAP_ROLLBACK);
        if (in && !(ps->swap_phase == SWAP_IN ? ps->swap_failed : ps->swap_rollback_failed)) {
            gs_info("pid %ld comes back with the rest of session %s", c->pid, c->session);
            send_swap(p, c, ps->swap_gpu, 0);
            ps->swap_waiting++;
        } else if (in) {
            gs_info("pid %ld: session %s's swap-in has failed already; the next one brings it "
                    "back",
                    c->pid, c->session);
        }
        free(h);
        return;
    }
}

uint64_t park_swap_held_used(const gs_park_t *p, int g)
{
    uint64_t sum = 0;
    for (const held_proc_t *h = p->held; h; h = h->next)
        sum += h->used[g];
    return sum;
}

int park_swap_session_holds(const gs_park_t *p, const char *session)
{
    for (held_proc_t *h = p->held; h; h = h->next)
        if (h->lease && !strcmp(h->session, session))
            return 1;
    for (pclient_t *c = zhashx_first(p->clients); c; c = zhashx_next(p->clients))
        if (c->lease && !strcmp(c->session, session))
            return 1;
    return 0;
}

void park_swap_reported_out(gs_park_t *p, pclient_t *c, int gpu, uint64_t swapped, int64_t now)
{
    psess_t *ps = park_state_sess(p, c->session, 0);
    if (!swapped || !p->pools || (ps && (ps->st != PS_RESIDENT || ps->job)))
        return;
    if (!ps && !(ps = park_state_sess(p, c->session, 1)))
        return;
    ps->st = PS_PARKED;
    ps->tier = TIER_SWAP;
    ps->swap_gpu = gpu;
    ps->failed = ps->stuck = 1;
    ps->bytes[gpu] = swapped;
    snprintf(ps->why, sizeof ps->why, "pid %ld reports %llu bytes still in host memory", c->pid,
             (unsigned long long)swapped);
    gs_warn("session %s: %s: it is brought back when it needs the GPU", ps->id, ps->why);
    gs_sched_set_residency(p->sched, ps->id, GS_SCHED_PARKED, now);
    p->changed = 1;
}

void park_swap_still_out(gs_park_t *p, psess_t *ps, int64_t now)
{
    for (pclient_t *c = zhashx_first(p->clients); c && ps->st == PS_RESIDENT;
         c = zhashx_next(p->clients))
        if (!strcmp(c->session, ps->id))
            for (int g = 0; g < p->ngpus; g++)
                if (c->swapped[g]) {
                    park_swap_reported_out(p, c, g, c->swapped[g], now);
                    break;
                }
}

/* What processes that are gone held returns: leases to the pool. */
void park_swap_check_held(gs_park_t *p, int64_t now)
{
    if (!p->held || now < p->held_check_at)
        return;
    for (held_proc_t **hp = &p->held; *hp;) {
        held_proc_t *h = *hp;
        if (gs_proc_alive(h->pid, h->start)) {
            hp = &h->next;
            continue;
        }
        gs_info("pid %ld of session %s is gone: the memory held for it is free", h->pid,
                h->session);
        if (h->lease)
            gs_swap_pools_return(p->pools, h->lease, now);
        *hp = h->next;
        free(h);
    }
    p->held_check_at = now + HELD_CHECK; /* gs_park_next_deadline */
}

void park_swap_free_held(gs_park_t *p)
{
    for (gs_park_job_t *j; (j = park_swap_next_done(p)) != NULL;)
        free(j);
    while (p->held) {
        held_proc_t *h = p->held;
        p->held = h->next;
        free(h);
    }
}

/* What each pool should hold: what is lent there, plus what is parked on
 * the checkpoint tier only because the pool lacked room when it went (else
 * two sessions that take turns settle into one swap and one checkpoint
 * each turn: the pool follows what is lent, and the checkpointed one
 * holds no lease), plus, where two or more sessions share the GPU's
 * memory, the largest footprint that could be parked next (so that its
 * park never waits for pinning). */
void park_swap_targets(gs_park_t *p)
{
    if (!p->pools)
        return;
    for (int g = 0; g < p->ngpus; g++) {
        /* One pass over the processes, summed per session (zhashx has one
         * cursor per table: no nested walks): what each could move out
         * now, and whether it has memory here at all (a session parked on
         * the swap tier reports nothing movable: it is all out). */
        zhashx_t *sums = zhashx_new();
        if (!sums)
            return;
        zhashx_set_destructor(sums, free_sum);
        for (pclient_t *c = zhashx_first(p->clients); c; c = zhashx_next(p->clients)) {
            if (!c->movable[g] && !c->swapped[g])
                continue;
            uint64_t *sum = zhashx_lookup(sums, c->session);
            if (!sum && (sum = calloc(1, sizeof *sum)) != NULL)
                zhashx_insert(sums, c->session, sum);
            if (sum)
                *sum += c->movable[g];
        }
        uint64_t biggest = 0;
        for (uint64_t *sum = zhashx_first(sums); sum; sum = zhashx_next(sums))
            if (*sum > biggest)
                biggest = *sum;
        size_t holders = zhashx_size(sums);
        /* One chunk more: leases are rounded up per process, and one chunk
         * short sent 32 GiB to the checkpoint tier (22 s on the H200). */
        uint64_t spare = gs_swap_pools_chunk_bytes(p->pools);
        uint64_t fell_short = 0;
        for (const psess_t *ps = zhashx_first(p->sess); ps; ps = zhashx_next(p->sess))
            if (ps->pool_short && ps->pool_short_gpu == g && ps->st != PS_RESIDENT &&
                ps->tier == TIER_CHECKPOINT) {
                fell_short += ps->pool_short;
                holders += !zhashx_lookup(sums, ps->id);
            }
        zhashx_destroy(&sums);
        /* Pinned ahead for the largest footprint as soon as one session
         * holds memory (within the host ledger, park_ledger.c): the first
         * park of a fresh broker lands on the swap tier too, and a program
         * outside Jupyter, which parks there only, can be parked at all. */
        /* Images coming back from the disk tier need chunks to land in. */
        gs_swap_pools_set_target(p->pools, g,
                                 gs_swap_pools_lent(p->pools, g) + fell_short + p->disk_coming[g] +
                                     (holders >= 1 ? biggest + spare : 0));
    }
}
