/*
 * sched_sim.c - the virtual-clock simulation of sched_sim.h: an event loop
 * over message deliveries, CPU phases, cell starts, the hooks' idle
 * release, copies and the scheduler's deadlines, with the GPU's work
 * advanced as a fluid between events (each process with queued work gets
 * an equal share).  After every event the hooks act, the scheduler's
 * actions become messages, and parking looks again (park_poll), as in the
 * broker's loop.
 */
#include "sched_sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "park_policy.h"

#define SEC   1000000LL
#define MIB   (1ull << 20)
#define NEVER INT64_MAX

typedef enum { GATE_CLOSED, GATE_OPEN, GATE_DRAINING } gate_t;
/* Where a notebook's memory is, as parking sees it (park_state.h). */
typedef enum { P_RES, P_REVOKING, P_OUT, P_PARKED, P_IN } pst_t;

typedef struct {
    const sim_nb_spec_t *spec;
    char session[48], client[48];
    uint64_t rng;
    /* the program */
    int index, in_cell, more, phase;
    sim_cell_t cell;
    int64_t next_cell_at, cpu_end, cell_start;
    /* the hook */
    gate_t gate;
    uint64_t grant_id;
    int asked;
    int64_t idle_hint;    /* the grant's idle_release_us */
    int64_t phase_start;  /* its GPU phase under way began */
    int64_t burst_last;   /* its last GPU phase lasted (the hook's burst; -1: none) */
    double unsub, queued; /* GPU work (us): not submitted yet, queued on the GPU */
    int64_t last_activity;
    /* parking */
    pst_t pst;
    int64_t move_start, move_end, demand_since, demand_expire, unparked_at;
    uint64_t out;    /* in host memory (a partial park leaves the rest on the GPU) */
    uint64_t moving; /* what its copy under way moves */
    uint64_t grants_at_unpark;
} nb_t;

enum { M_ACQUIRE, M_RELEASE, M_CELL, M_GRANT, M_REVOKE };

typedef struct {
    int64_t at;
    uint64_t seq;
    int kind, nb, busy;
    uint64_t grant_id;
    int64_t idle_us; /* grants: idle_release_us */
} msg_t;

typedef struct {
    const sim_params_t *p;
    gs_sched_t *s;
    nb_t nb[SIM_MAX_NB];
    int n;
    int64_t now;
    msg_t *msgs;
    int nmsgs, capmsgs;
    uint64_t seq;
    int64_t park_wake;
    double done[SIM_MAX_NB]; /* GPU work done, us */
    sim_result_t *r;
    int capcells;
    int failed;
} sim_t;

static const char *KIND[] = {"acquire", "release", "cell", "grant", "revoke"};

#define TRACE(S, ...)                                                                              \
    do {                                                                                           \
        if ((S)->p->trace) {                                                                       \
            fprintf(stderr, "%10.3f ms  ", (double)(S)->now / 1000.0);                             \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

void sim_params_default(sim_params_t *p)
{
    memset(p, 0, sizeof *p);
    p->msg_us = 250;       /* ipc and the broker's loop: the idle handoff is ~2 ms */
    p->cell_msg_us = 1000; /* IOPub -> watcher -> broker */
    p->idle_release_us = 200 * 1000;
    p->out_bps = 35e9; /* the swap tier on the H200 */
    p->in_bps = 35e9;
    p->move_fixed_us = 10 * 1000; /* a lease round trip and the swap_out/in messages */
    p->partial = 1;
    p->seg_bytes = 256 * MIB;
    p->park_idle_us = 0;
    gs_sched_config_default(&p->cfg);
    p->end_us = 60 * SEC;
    p->seed = 1;
}

/* ---- random numbers (splitmix64) ------------------------------------------ */

static uint64_t next64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double sim_uniform(uint64_t *rng)
{
    return (double)(next64(rng) >> 11) / 9007199254740992.0;
}

double sim_exp(uint64_t *rng, double mean)
{
    return -mean * log(1.0 - sim_uniform(rng));
}

/* ---- messages ---------------------------------------------------------------- */

static void send(sim_t *S, int kind, int nb, uint64_t grant_id, int busy, int64_t idle_us)
{
    if (S->nmsgs == S->capmsgs) {
        S->capmsgs = S->capmsgs ? 2 * S->capmsgs : 64;
        S->msgs = realloc(S->msgs, (size_t)S->capmsgs * sizeof *S->msgs);
        if (!S->msgs)
            abort();
    }
    int64_t delay = kind == M_CELL ? S->p->cell_msg_us : S->p->msg_us;
    S->msgs[S->nmsgs++] = (msg_t){S->now + delay, ++S->seq, kind, nb, busy, grant_id, idle_us};
}

/* The broker's actions become messages to the hooks. */
static void pull_actions(sim_t *S)
{
    gs_sched_action_t a;
    while (gs_sched_pop_action(S->s, &a)) {
        int k = 0;
        while (k < S->n && strcmp(S->nb[k].client, a.client) != 0)
            k++;
        if (k == S->n)
            continue;
        TRACE(S, "broker: %s %s%s%s", a.kind == GS_ACT_GRANT ? "grant" : "revoke", a.client,
              a.reason ? " " : "", a.reason ? a.reason : "");
        if (a.kind == GS_ACT_REVOKE)
            S->r->revokes++;
        send(S, a.kind == GS_ACT_GRANT ? M_GRANT : M_REVOKE, k, a.grant_id, 0, a.idle_release_us);
    }
}

/* ---- parking (broker/park/park_poll.c, park_victims.c) --------------------- */

static int64_t copy_us(const sim_t *S, uint64_t bytes, double bps)
{
    return (int64_t)llround((double)bytes / bps * 1e6) + S->p->move_fixed_us;
}

/* What it holds on the GPU: all of it while it comes back (it takes the
 * memory as it goes), else what is not out. */
static uint64_t on_gpu(const nb_t *b)
{
    return b->pst == P_IN ? b->spec->bytes : b->spec->bytes - b->out;
}

static int64_t free_bytes(const sim_t *S)
{
    int64_t left = (int64_t)S->p->gpu_bytes;
    for (int i = 0; i < S->n; i++)
        left -= (int64_t)on_gpu(&S->nb[i]);
    return left;
}

static uint64_t margin(const sim_t *S)
{
    return S->p->gpu_bytes / 100 > 2 * MIB ? S->p->gpu_bytes / 100 : 2 * MIB;
}

static gs_sched_info_t info(const sim_t *S, const nb_t *b)
{
    gs_sched_info_t si;
    gs_sched_info(S->s, b->session, 0, S->now, &si);
    return si;
}

/* bytes: what goes out (0: all it holds). */
static void start_park(sim_t *S, nb_t *b, uint64_t bytes)
{
    b->moving = bytes && bytes < on_gpu(b) ? bytes : on_gpu(b);
    TRACE(S, "park: %s goes out (%llu MiB)", b->session, (unsigned long long)(b->moving / MIB));
    gs_sched_set_residency(S->s, b->session, GS_SCHED_MOVING, S->now);
    b->pst = gs_sched_session_holding(S->s, b->session) ? P_REVOKING : P_OUT;
    if (b->pst == P_OUT) {
        b->move_start = S->now;
        b->move_end = S->now + copy_us(S, b->moving, S->p->out_bps);
    }
}

static void start_unpark(sim_t *S, nb_t *b)
{
    /* A switch runs both ways at once: the one coming back takes memory
     * as the one going out frees it, so it ends no sooner than that. */
    int64_t end = S->now + copy_us(S, b->out, S->p->in_bps);
    for (int i = 0; i < S->n; i++)
        if (S->nb[i].pst == P_OUT && S->nb[i].move_end > end)
            end = S->nb[i].move_end;
    TRACE(S, "park: %s comes back", b->session);
    b->pst = P_IN;
    b->move_start = S->now;
    b->move_end = end;
    gs_sched_set_residency(S->s, b->session, GS_SCHED_MOVING, S->now);
}

static void move_done(sim_t *S, nb_t *b)
{
    S->r->copy_us += S->now - b->move_start;
    if (b->pst == P_OUT) {
        TRACE(S, "park: %s parked", b->session);
        b->pst = P_PARKED;
        b->out += b->moving;
        S->r->parks++;
        gs_sched_set_residency(S->s, b->session, GS_SCHED_PARKED, S->now);
        return;
    }
    TRACE(S, "park: %s back", b->session);
    b->pst = P_RES;
    b->out = 0;
    S->r->unparks++;
    b->unparked_at = S->now;
    b->demand_since = 0;
    b->demand_expire = S->now + 2 * SEC;
    b->grants_at_unpark = info(S, b).grants;
    gs_sched_set_residency(S->s, b->session, GS_SCHED_RESIDENT, S->now);
}

/* Queue parked sessions whose cell runs (or that ask) by demand, and take
 * the demand back from those that got the GPU. */
static void update_demand(sim_t *S)
{
    for (int i = 0; i < S->n; i++) {
        nb_t *b = &S->nb[i];
        gs_sched_info_t si = info(S, b);
        int parked = b->pst == P_PARKED || b->pst == P_IN;
        int want = parked && (si.cell_busy || si.wants);
        if (want && !b->demand_since)
            b->demand_since = S->now;
        else if (!want && b->pst == P_PARKED)
            b->demand_since = 0;
        if (parked && !want && si.demand && !si.wants)
            gs_sched_demand(S->s, b->session, 0, 0, S->now);
        else if (parked && want && !si.demand && !si.wants && si.state != GS_SESS_RUNNING)
            gs_sched_demand(S->s, b->session, 0, 1, S->now);
        else if (b->pst == P_RES && si.demand && !si.wants && S->now >= b->demand_expire)
            gs_sched_demand(S->s, b->session, 0, 0, S->now);
        if (b->pst == P_RES && b->demand_expire > S->now && b->demand_expire < S->park_wake)
            S->park_wake = b->demand_expire;
    }
}

/* A session unparked for its cell keeps its slice until its first grant
 * or its shortest slice went by: when that ends, 0 if not (park_victims.c). */
static int64_t protected_until(const sim_t *S, const nb_t *b, const gs_sched_info_t *si)
{
    int64_t until = b->unparked_at + si->min_slice_us;
    return b->unparked_at && si->grants == b->grants_at_unpark && S->now < until ? until : 0;
}

/* Victims for `need` bytes to bring back `head`, parked at once. */
static void choose_victims(sim_t *S, const nb_t *head, uint64_t need)
{
    gs_park_cand_t c[SIM_MAX_NB] = {{0}};
    int map[SIM_MAX_NB], picked[SIM_MAX_NB], n = 0;
    for (int i = 0; i < S->n; i++) {
        nb_t *b = &S->nb[i];
        if (b == head || b->pst != P_RES || !b->spec->bytes)
            continue;
        gs_sched_info_t si = info(S, b);
        int holding = si.state == GS_SESS_RUNNING;
        int idle = !holding && !si.cell_busy && !si.wants && !si.demand;
        int settling = holding && !si.cell_busy;
        if (holding && !settling)
            continue;
        int active = !idle && !settling;
        int64_t until = protected_until(S, b, &si), at = 0;
        if (!si.switchable && si.switchable_at_us != NEVER)
            at = si.switchable_at_us;
        if (until && (si.switchable || at) && at < until)
            at = until;
        c[n] = (gs_park_cand_t){.bytes = on_gpu(b),
                                .host_bytes = on_gpu(b),
                                .last_active = si.last_active_us,
                                .idle = idle,
                                .settling = settling,
                                .switched_out = active && !until && si.switchable,
                                .switch_at = active ? at : 0,
                                .cost_us = si.switch_cost_us};
        map[n++] = i;
    }
    int64_t wait = 0;
    gs_park_pick_rc_t rc = gs_park_policy_choose(c, n, need, 1, UINT64_MAX, S->now,
                                                 S->p->park_idle_us, NEVER, picked, &wait);
    if (rc == GS_PICK_WAIT && wait < S->park_wake)
        S->park_wake = wait;
    /* The last victim moves only what is still needed, plus room for
     * GPU/32, in whole segments (park_victims.c). */
    uint64_t left = need + S->p->gpu_bytes / 32;
    for (int k = 0; rc == GS_PICK_OK && k < n; k++) {
        if (!picked[k])
            continue;
        uint64_t part = 0;
        if (S->p->partial && left < c[k].bytes)
            part = (left + S->p->seg_bytes - 1) / S->p->seg_bytes * S->p->seg_bytes;
        start_park(S, &S->nb[map[k]], part);
        left = left > c[k].bytes ? left - c[k].bytes : 0;
    }
}

/* What parking tells the scheduler of each session's switch
 * (park_rates.c): the swap tier's rates, both ways at once, and what a
 * switch moves: beside a session parked (in part), only the room it
 * lacks, in whole segments; otherwise all of it. */
static void tell_moves(sim_t *S)
{
    uint64_t in = 0;
    for (int i = 0; i < S->n; i++)
        if (S->nb[i].pst == P_PARKED && S->nb[i].out > in)
            in = S->nb[i].out;
    for (int i = 0; i < S->n; i++) {
        nb_t *b = &S->nb[i];
        uint64_t foot = b->pst == P_PARKED ? b->out : b->spec->bytes;
        gs_sched_move_t m = {S->p->out_bps, S->p->in_bps, foot, 1};
        if (S->p->partial && b->pst == P_RES && in) {
            int64_t lacks = (int64_t)(in + margin(S)) - free_bytes(S);
            uint64_t moves = (lacks > 0 ? (uint64_t)lacks : 0) + S->p->seg_bytes;
            m.bytes = moves < foot ? moves : foot;
        }
        if (m.bytes < foot / 32)
            m.bytes = foot / 32;
        gs_sched_set_move(S->s, b->session, 0, &m);
    }
}

static void park_poll(sim_t *S)
{
    S->park_wake = NEVER;
    if (!S->p->gpu_bytes)
        return;
    for (int i = 0; i < S->n; i++) {
        nb_t *b = &S->nb[i];
        if (b->pst == P_REVOKING && !gs_sched_session_holding(S->s, b->session)) {
            b->pst = P_OUT;
            b->move_start = S->now;
            b->move_end = S->now + copy_us(S, b->moving, S->p->out_bps);
        }
    }
    tell_moves(S);
    update_demand(S);
    /* The needs, first come first served. */
    for (;;) {
        nb_t *head = NULL;
        for (int i = 0; i < S->n; i++) {
            nb_t *b = &S->nb[i];
            if (b->pst == P_PARKED && b->demand_since &&
                (!head || b->demand_since < head->demand_since))
                head = b;
        }
        if (!head)
            return;
        int64_t need = (int64_t)(head->out + margin(S)), free = free_bytes(S), leaving = 0;
        int in_flight = 0;
        for (int i = 0; i < S->n; i++) {
            leaving += S->nb[i].pst == P_OUT ? (int64_t)S->nb[i].moving : 0;
            in_flight |= S->nb[i].pst == P_OUT || S->nb[i].pst == P_REVOKING;
        }
        if (free >= need || (leaving && free + leaving >= need)) {
            start_unpark(S, head);
            continue;
        }
        if (!in_flight)
            choose_victims(S, head, (uint64_t)(need - (free > 0 ? free : 0)));
        return;
    }
}

/* ---- the hooks and the programs ------------------------------------------------ */

static void start_phase(sim_t *S, nb_t *b);

static void end_cell(sim_t *S, nb_t *b)
{
    sim_result_t *r = S->r;
    if (r->ncells == S->capcells) {
        S->capcells = S->capcells ? 2 * S->capcells : 256;
        r->cells = realloc(r->cells, (size_t)S->capcells * sizeof *r->cells);
        if (!r->cells)
            abort();
    }
    int64_t solo = 0, gpu = 0;
    for (int i = 0; i < b->cell.nphases; i++) {
        solo += b->cell.ph[i].us;
        gpu += b->cell.ph[i].gpu ? b->cell.ph[i].us : 0;
    }
    int k = (int)(b - S->nb);
    r->cells[r->ncells++] = (sim_cell_result_t){k, b->cell_start, S->now, solo, gpu};
    r->finished_at[k] = S->now;
    TRACE(S, "%s: cell %d ended (%.1f ms, solo %.1f)", b->session, b->index,
          (double)(S->now - b->cell_start) / 1000.0, (double)solo / 1000.0);
    b->in_cell = 0;
    send(S, M_CELL, k, 0, 0, 0);
    b->index++;
    b->more = b->spec->program(b->spec->arg, b->index, S->now, &b->rng, &b->cell);
    b->next_cell_at = b->cell.start > S->now ? b->cell.start : S->now;
}

static int in_gpu_phase(const nb_t *b)
{
    return b->in_cell && b->phase < b->cell.nphases && b->cell.ph[b->phase].gpu;
}

static void next_phase(sim_t *S, nb_t *b)
{
    if (in_gpu_phase(b))
        b->burst_last = S->now - b->phase_start;
    if (++b->phase >= b->cell.nphases)
        end_cell(S, b);
    else
        start_phase(S, b);
}

static void start_phase(sim_t *S, nb_t *b)
{
    const sim_phase_t *ph = &b->cell.ph[b->phase];
    if (ph->us <= 0) {
        next_phase(S, b);
    } else if (ph->gpu) {
        b->unsub = (double)ph->us;
        b->phase_start = S->now;
    } else {
        b->cpu_end = S->now + ph->us;
    }
}

static void start_cell(sim_t *S, nb_t *b)
{
    TRACE(S, "%s: cell %d starts", b->session, b->index);
    b->in_cell = 1;
    b->phase = 0;
    b->cell_start = S->now;
    send(S, M_CELL, (int)(b - S->nb), 0, 1, 0);
    start_phase(S, b);
}

/* What a hook does at once: submit, give back a drained grant, ask. */
static void hook_step(sim_t *S, nb_t *b)
{
    int k = (int)(b - S->nb);
    double depth = (double)(b->spec->depth_us > 0 ? b->spec->depth_us : 1);
    if (b->gate == GATE_OPEN && b->unsub > 0 && b->queued < depth) {
        double x = depth - b->queued < b->unsub ? depth - b->queued : b->unsub;
        b->queued += x;
        b->unsub -= x;
        b->last_activity = S->now;
    }
    if (b->gate == GATE_DRAINING && b->queued <= 0) {
        TRACE(S, "%s: release", b->client);
        send(S, M_RELEASE, k, b->grant_id, 0, 0);
        b->gate = GATE_CLOSED;
        b->grant_id = 0;
    }
    if (b->gate == GATE_CLOSED && b->unsub > 0 && !b->asked) {
        TRACE(S, "%s: acquire", b->client);
        send(S, M_ACQUIRE, k, 0, 0, 0);
        b->asked = 1;
    }
    if (in_gpu_phase(b) && b->unsub <= 0 && b->queued <= 0)
        next_phase(S, b); /* its sync returned */
}

/* The hook's idle release: the first tick idle_release_us (or the grant's
 * shorter one) after its last submission; it looks every quarter of that,
 * 5 to 250 ms (hook_client.c). */
static int64_t idle_release_at(const sim_t *S, const nb_t *b)
{
    int64_t own = S->p->idle_release_us;
    if (b->gate != GATE_OPEN || b->unsub > 0 || !own)
        return NEVER;
    int64_t idle = b->idle_hint && b->idle_hint < own ? b->idle_hint : own;
    int64_t tick = idle / 4 < 5000 ? 5000 : idle / 4 > 250000 ? 250000 : idle / 4;
    int64_t t = b->last_activity + idle;
    return (t + tick - 1) / tick * tick;
}

static void deliver(sim_t *S, const msg_t *m)
{
    nb_t *b = &S->nb[m->nb];
    switch (m->kind) {
    case M_ACQUIRE:
        gs_sched_acquire(S->s, b->client, 0, b->burst_last, b->burst_last, S->now);
        break;
    case M_RELEASE:
        gs_sched_release(S->s, b->client, 0, m->grant_id, S->now);
        break;
    case M_CELL:
        gs_sched_cell(S->s, b->session, m->busy, S->now);
        break;
    case M_GRANT:
        if (b->gate == GATE_CLOSED) {
            b->gate = GATE_OPEN;
            b->grant_id = m->grant_id;
            b->asked = 0;
            b->last_activity = S->now;
        }
        if (b->gate == GATE_OPEN && b->grant_id == m->grant_id)
            b->idle_hint = m->idle_us; /* the same grant again: its idle release */
        return;
    case M_REVOKE:
        if (b->gate == GATE_OPEN && b->grant_id == m->grant_id)
            b->gate = GATE_DRAINING;
        return;
    }
    pull_actions(S);
}

/* Everything that follows an event at once, until nothing changes. */
static void settle(sim_t *S)
{
    for (int round = 0; round < 8; round++) {
        uint64_t seq = S->seq;
        for (int i = 0; i < S->n; i++)
            hook_step(S, &S->nb[i]);
        pull_actions(S);
        park_poll(S);
        pull_actions(S);
        if (S->seq == seq)
            return;
    }
}

/* ---- the GPU ---------------------------------------------------------------------- */

static int active(const sim_t *S)
{
    int n = 0;
    for (int i = 0; i < S->n; i++)
        n += S->nb[i].queued > 0;
    return n;
}

static int64_t gpu_next(const sim_t *S)
{
    int n = active(S);
    double best = -1;
    for (int i = 0; i < S->n && n; i++) {
        const nb_t *b = &S->nb[i];
        if (b->queued <= 0)
            continue;
        double left = b->gate == GATE_OPEN && b->unsub > 0 ? b->unsub : b->queued;
        if (best < 0 || left * n < best)
            best = left * n;
    }
    return best < 0 ? NEVER : S->now + (int64_t)ceil(best - 1e-9);
}

static void gpu_advance(sim_t *S, int64_t dt)
{
    int n = active(S);
    if (!n || dt <= 0)
        return;
    double e0 = (double)dt / n;
    for (int i = 0; i < S->n; i++) {
        nb_t *b = &S->nb[i];
        if (b->queued <= 0)
            continue;
        double e = e0, done = 0;
        if (b->gate == GATE_OPEN && b->unsub > 0) { /* it refills its queue as it runs */
            double x = e < b->unsub ? e : b->unsub;
            b->unsub -= x;
            e -= x;
            done += x;
            b->last_activity = S->now + dt;
            if (b->unsub < 1e-6)
                b->unsub = 0;
        }
        double y = e < b->queued ? e : b->queued;
        b->queued -= y;
        done += y;
        if (b->queued < 1e-6)
            b->queued = 0;
        S->done[i] += done;
    }
}

/* ---- the loop ------------------------------------------------------------------------ */

static int64_t next_event(sim_t *S)
{
    int64_t t = gs_sched_next_deadline(S->s);
    if (S->park_wake < t)
        t = S->park_wake;
    for (int i = 0; i < S->nmsgs; i++)
        if (S->msgs[i].at < t)
            t = S->msgs[i].at;
    int64_t g = gpu_next(S);
    if (g < t)
        t = g;
    for (int i = 0; i < S->n; i++) {
        const nb_t *b = &S->nb[i];
        int64_t c = NEVER;
        if (!b->in_cell && b->more)
            c = b->next_cell_at;
        else if (b->in_cell && !in_gpu_phase(b))
            c = b->cpu_end;
        if (c < t)
            t = c;
        if (idle_release_at(S, b) < t)
            t = idle_release_at(S, b);
        if ((b->pst == P_OUT || b->pst == P_IN) && b->move_end < t)
            t = b->move_end;
    }
    return t < S->now ? S->now : t;
}

static void fire(sim_t *S)
{
    /* Messages in the order they were sent. */
    for (;;) {
        int k = -1;
        for (int i = 0; i < S->nmsgs; i++)
            if (S->msgs[i].at <= S->now && (k < 0 || S->msgs[i].seq < S->msgs[k].seq))
                k = i;
        if (k < 0)
            break;
        msg_t m = S->msgs[k];
        S->msgs[k] = S->msgs[--S->nmsgs];
        TRACE(S, "%s %s%s", KIND[m.kind], S->nb[m.nb].session,
              m.kind == M_CELL ? (m.busy ? " busy" : " idle") : "");
        deliver(S, &m);
        settle(S);
    }
    for (int i = 0; i < S->n; i++) {
        nb_t *b = &S->nb[i];
        if ((b->pst == P_OUT || b->pst == P_IN) && b->move_end <= S->now) {
            move_done(S, b);
            pull_actions(S);
        }
        if (!b->in_cell && b->more && b->next_cell_at <= S->now)
            start_cell(S, b);
        else if (b->in_cell && !in_gpu_phase(b) && b->cpu_end <= S->now)
            next_phase(S, b);
        if (idle_release_at(S, b) <= S->now) {
            TRACE(S, "%s: idle release", b->client);
            b->gate = GATE_DRAINING;
        }
        settle(S);
    }
    if (gs_sched_next_deadline(S->s) <= S->now) {
        gs_sched_tick(S->s, S->now);
        pull_actions(S);
    }
    settle(S);
}

static int all_done(const sim_t *S)
{
    for (int i = 0; i < S->n; i++)
        if (S->nb[i].in_cell || S->nb[i].more)
            return 0;
    return 1;
}

int sim_run(const sim_params_t *p, const sim_nb_spec_t *nbs, int n, sim_result_t *out)
{
    static sim_t S0;
    sim_t *S = &S0;
    memset(S, 0, sizeof *S);
    memset(out, 0, sizeof *out);
    if (n > SIM_MAX_NB)
        return -1;
    S->p = p;
    S->r = out;
    S->n = n;
    S->park_wake = NEVER;
    uint64_t mem = p->gpu_bytes;
    S->s = gs_sched_new(1, &mem);
    char err[200];
    if (gs_sched_set_config(S->s, &p->cfg, err, sizeof err) != 0) {
        fprintf(stderr, "sim: %s\n", err);
        gs_sched_destroy(&S->s);
        return -1;
    }
    uint64_t rng = p->seed;
    for (int i = 0; i < n; i++) {
        nb_t *b = &S->nb[i];
        b->spec = &nbs[i];
        b->rng = next64(&rng);
        snprintf(b->session, sizeof b->session, "%s", nbs[i].name);
        snprintf(b->client, sizeof b->client, "%s.hook", nbs[i].name);
        b->burst_last = -1;
        gs_sched_register(S->s, b->session, 0);
        gs_sched_join(S->s, b->client, b->session, 0);
        gs_sched_memory(S->s, b->client, 0, nbs[i].bytes, 0);
        b->more = nbs[i].program(nbs[i].arg, 0, 0, &b->rng, &b->cell);
        b->next_cell_at = b->cell.start;
    }
    /* The last ones allocated last: earlier ones were parked to make room. */
    int64_t left = (int64_t)mem;
    for (int i = n - 1; i >= 0 && mem; i--) {
        left -= (int64_t)nbs[i].bytes;
        if (left < 0) {
            S->nb[i].pst = P_PARKED;
            S->nb[i].out = nbs[i].bytes;
            gs_sched_set_residency(S->s, S->nb[i].session, GS_SCHED_PARKED, 0);
        }
    }
    gs_sched_tick(S->s, 0);
    pull_actions(S);
    settle(S);
    while (!all_done(S) && !S->failed) {
        int64_t t = next_event(S);
        if (t > p->end_us || t == NEVER)
            break;
        gpu_advance(S, t - S->now);
        S->now = t;
        fire(S);
    }
    out->end_us = S->now;
    for (int i = 0; i < n; i++)
        out->gpu_done_us[i] = (int64_t)llround(S->done[i]);
    gs_sched_destroy(&S->s);
    free(S->msgs);
    return S->failed ? -1 : 0;
}

void sim_result_free(sim_result_t *r)
{
    free(r->cells);
    r->cells = NULL;
}

/* ---- results ---------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int sim_slowdowns(const sim_result_t *r, int nb, double **out)
{
    double *v = malloc(((size_t)r->ncells + 1) * sizeof *v);
    int n = 0;
    for (int i = 0; v && i < r->ncells; i++)
        if ((nb < 0 || r->cells[i].nb == nb) && r->cells[i].solo_us > 0)
            v[n++] = (double)(r->cells[i].end - r->cells[i].start) / (double)r->cells[i].solo_us;
    if (v)
        qsort(v, (size_t)n, sizeof *v, cmp_double);
    *out = v;
    return n;
}

double sim_quantile(const double *v, int n, double p)
{
    if (n <= 0)
        return 0;
    int i = (int)ceil(p * (n - 1));
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}
