/*
 * park_jobs.c - starting parks and unparks and taking their results back:
 * the session's record (park_state.h) goes through its states, the
 * scheduler is told where its memory is, the tier is chosen (the swap
 * tier, park_swap.c, where the session can use it; else a checkpoint job
 * on the worker threads, park_worker.h), and the end of either tier goes
 * through the same bookkeeping (finish_park, finish_unpark), so status,
 * events, rates and the scheduler see one kind of park.  The swap tier
 * reports its ended phases as finished jobs (park_swap_next_done), which
 * park_jobs_finish_swaps takes like the worker's.
 */
#include <string.h>

#include "gpu_free.h"
#include "log.h"
#include "park_disk.h"
#include "park_eligible.h"
#include "park_frozen.h"
#include "park_jobs.h"
#include "park_ledger.h"
#include "park_move.h"
#include "park_rates.h"
#include "park_swap.h"
#include "proc_alive.h"

#define SEC 1000000LL

/* What a restore needs on GPU g: the memory the hooks report and room for
 * the contexts (gs_gpu_free_restore_margin, the restore helper's too). */
static void room_on(const gs_park_t *p, int g, uint64_t bytes, gs_park_room_t *r)
{
    snprintf(r->uuid, sizeof r->uuid, "%s", p->uuids[g]);
    r->need = bytes + gs_gpu_free_restore_margin(p->total[g]);
}

void park_jobs_room(const gs_park_t *p, const psess_t *ps, gs_park_job_t *j, unsigned wait_ms)
{
    j->nroom = 0;
    j->room_wait_ms = wait_ms;
    memset(&j->move_room, 0, sizeof j->move_room);
    for (int g = 0; g < p->ngpus && j->nroom < GS_PARK_MAX_PAIRS; g++) {
        if (!ps->bytes[g])
            continue;
        room_on(p, g, ps->bytes[g], &j->room[j->nroom++]);
        if (j->npairs && g == ps->move_from && ps->move_to >= 0) /* a move: its target */
            room_on(p, ps->move_to, ps->bytes[g], &j->move_room);
    }
}

static void submit(gs_park_t *p, psess_t *ps, int unpark, int64_t now);
static void finish_park(gs_park_t *p, psess_t *ps, const gs_park_job_t *j, int64_t now);
static void finish_unpark(gs_park_t *p, psess_t *ps, const gs_park_job_t *j, int64_t now);

/* How long an unpark waits for the driver to free the memory its room was
 * made in (a victim's process that exits frees it a moment later). */
#define ROOM_WAIT_MS 10000

void park_jobs_submit(gs_park_t *p, psess_t *ps, int64_t now)
{
    ps->st = PS_PARKING;
    submit(p, ps, 0, now);
}

/* How long the session has been idle (its last cell, grant or release). */
static int64_t idle_for(const gs_park_t *p, const char *session, int64_t now)
{
    int64_t last = 0;
    gs_sched_info_t si;
    for (int g = 0; g < p->ngpus; g++)
        if (gs_sched_info(p->sched, session, g, now, &si) == 0 && si.last_active_us > last)
            last = si.last_active_us;
    return now - last;
}

static void submit(gs_park_t *p, psess_t *ps, int unpark, int64_t now)
{
    /* The swap tier where the session can use it; the checkpoint API for
     * the rest (and to bring back what it parked), and for a session idle
     * so long that its context and pinned host memory are better freed
     * (the deep tier, park_policy.h). */
    int deep = !unpark && ps->deep_next; /* decided by park_jobs_park */
    ps->deep_next = 0;
    if (!unpark && !deep && park_swap_try_park(p, ps, now))
        return;
    if (!unpark && park_eligible_swap_only(p, ps->id, now)) {
        gs_park_job_t j;
        memset(&j, 0, sizeof j);
        j.id = ps->job = ++p->next_job;
        snprintf(j.error, sizeof j.error,
                 "a program outside Jupyter parks on the swap tier only (park_plain is off), "
                 "and the host pool cannot take it now");
        ps->tier = TIER_SWAP;
        ps->pool_refused_at = now; /* not chosen again at once (park_eligible_why_not) */
        finish_park(p, ps, &j, now);
        ps->job = 0;
        return;
    }
    if (unpark && ps->tier == TIER_SWAP) {
        if (!park_disk_unpark(p, ps, now)) /* (from disk: into chunks first) */
            park_swap_unpark(p, ps, now);
        park_jobs_finish_swaps(p, now);
        return;
    }
    char full[400];
    if (!unpark && !park_ledger_take_image(p, ps, full, sizeof full)) {
        /* Not beyond the host's memory: the OOM killer would take a
         * notebook.  The session stays on the GPU, and says why. */
        gs_park_job_t j;
        memset(&j, 0, sizeof j);
        j.id = ps->job = ++p->next_job;
        snprintf(j.error, sizeof j.error, "%s", full);
        ps->tier = TIER_CHECKPOINT;
        finish_park(p, ps, &j, now);
        ps->job = 0;
        return;
    }
    ps->tier = TIER_CHECKPOINT;
    gs_park_job_t *j = calloc(1, sizeof *j);
    if (!j)
        abort(); /* the broker cannot keep its promises without memory */
    j->id = ps->job = ++p->next_job;
    j->unpark = unpark;
    snprintf(j->session, sizeof j->session, "%s", ps->id);
    j->npids = ps->npids;
    memcpy(j->pids, ps->pids, sizeof j->pids);
    memcpy(j->start, ps->start, sizeof j->start);
    j->lock_timeout_ms = (unsigned)(p->cfg.lock_timeout_us / 1000);
    if (unpark && ps->move_to >= 0 &&
        !(j->npairs = park_move_pairs(p, ps->move_from, ps->move_to, j->pairs)))
        ps->move_from = ps->move_to = -1;
    if (!unpark) /* before the lock: its hooks ask for the GPU before they call the driver */
        park_frozen_tell(p, ps, 1);
    else
        park_jobs_room(p, ps, j, ROOM_WAIT_MS);
    p->api->submit(p->api->arg, j);
}

int park_jobs_park(gs_park_t *p, psess_t *ps, const char *why, int64_t now)
{
    const char *reason;
    int pids[GS_PARK_MAX_PIDS];
    int n = park_state_session_pids(p, ps->id, pids, GS_PARK_MAX_PIDS, &reason);
    if (n == 0)
        return -1;
    ps->npids = n;
    for (int i = 0; i < n; i++) {
        ps->pids[i] = pids[i];
        ps->start[i] = gs_proc_start(pids[i]); /* 0: gone, the worker skips it */
    }
    /* Parked in part already: the rest goes out into the same lease. */
    ps->rest = ps->st == PS_PARKED && ps->partial && ps->tier == TIER_SWAP;
    ps->out_before = ps->rest ? ps->bytes[ps->swap_gpu] : 0;
    int granted = 0;
    for (int g = 0; g < p->ngpus; g++) {
        gs_sched_info_t si;
        int known = gs_sched_info(p->sched, ps->id, g, now, &si) == 0;
        ps->bytes[g] = known ? si.resident_bytes : 0;
        granted |= known && si.grants > ps->grants_at_unpark[g];
    }
    ps->cell_guess_missed = ps->st == PS_RESIDENT && ps->unparked_at && !granted;
    ps->since = now;
    ps->noted = 0;
    ps->demand_since = 0;
    /* The tier is chosen by how long the session has been idle before its
     * grant is revoked (the release that follows counts as activity). */
    int64_t idle = idle_for(p, ps->id, now);
    if (!ps->deep_next && !ps->rest &&
        gs_park_policy_deep(&p->cfg, idle, !park_eligible_swap_only(p, ps->id, now))) {
        ps->deep_next = 1;
        gs_info("session %s goes to the deep tier (checkpoint): idle for %.0f s "
                "(park_deep_idle_s = %.0f)",
                ps->id, (double)idle / SEC, (double)p->cfg.deep_idle_us / SEC);
    }
    /* The scheduler revokes a hold ("park"); the job starts after its release. */
    gs_sched_set_residency(p->sched, ps->id, GS_SCHED_MOVING, now);
    p->changed = 1;
    ps->st = gs_sched_session_holding(p->sched, ps->id) ? PS_REVOKING : PS_PARKING;
    if (ps->st == PS_PARKING)
        submit(p, ps, 0, now);
    gs_info("parking session %s (%.1f MiB, %d process%s): %s", ps->id,
            (double)park_state_total_bytes(p, ps) / 1048576.0, n, n == 1 ? "" : "es", why);
    gs_eventlog_write(p->eventlog, "park_start",
                      json_pack("{s:s, s:I, s:i, s:s}", "session", ps->id, "bytes",
                                (json_int_t)park_state_total_bytes(p, ps), "processes", n, "why",
                                why));
    return 0;
}

void park_jobs_unpark(gs_park_t *p, psess_t *ps, const char *why, int64_t now)
{
    ps->st = PS_UNPARKING;
    ps->since = now;
    gs_sched_set_residency(p->sched, ps->id, GS_SCHED_MOVING, now);
    p->changed = 1;
    submit(p, ps, 1, now);
    gs_info("unparking session %s (%.1f MiB): %s", ps->id,
            (double)park_state_total_bytes(p, ps) / 1048576.0, why);
    gs_eventlog_write(p->eventlog, "unpark_start",
                      json_pack("{s:s, s:I, s:s}", "session", ps->id, "bytes",
                                (json_int_t)park_state_total_bytes(p, ps), "why", why));
}

/* Processes found gone are forgotten: nothing to bring back there. */
static void drop_gone(psess_t *ps, const gs_park_job_t *j)
{
    int n = 0;
    for (int i = 0; i < ps->npids && i < j->npids; i++)
        if (!j->gone[i]) {
            ps->pids[n] = ps->pids[i];
            ps->start[n++] = ps->start[i];
        }
    ps->npids = n;
}

static void room_failures(gs_park_t *p, const psess_t *ps, const char *text)
{
    /* Its processes exit: the memory comes free without a park (on the
     * H100 a 40 GiB notebook quitting during its checkpoint failed the
     * allocation that waited for its room, three times over). */
    if (park_state_exiting(ps, ps->exiting_at))
        return;
    for (room_t *r = p->rooms; r; r = r->next)
        if (r->rounds > 0 && ps->bytes[r->gpu] > 0 && !r->fail[0])
            snprintf(r->fail, sizeof r->fail, "parking session %.64s failed: %.300s", ps->id, text);
}

static void finish_park(gs_park_t *p, psess_t *ps, const gs_park_job_t *j, int64_t now)
{
    uint64_t bytes = park_state_total_bytes(p, ps);
    /* The rest of a session parked in part: this copy moved only that. */
    uint64_t moved = bytes > ps->out_before ? bytes - ps->out_before : bytes;
    ps->out_before = 0;
    double s = (double)j->elapsed_us / SEC;
    if (j->ok) {
        ps->st = PS_PARKED;
        ps->failed = ps->stuck = 0;
        ps->parks++;
        ps->park_s = s;
        ps->park_gbps = s >= 0.001 ? (double)moved / s / 1e9 : -1;
        park_rates_measured(p, ps, 1, moved, s);
        gs_sched_set_residency(p->sched, ps->id, GS_SCHED_PARKED, now);
        ps->parked_at = now;
        gs_info("session %s parked (%s tier): %.1f MiB in %.3f s (%.2f GB/s)", ps->id,
                ps->tier == TIER_SWAP ? "swap" : "checkpoint", bytes / 1048576.0, s, ps->park_gbps);
        gs_eventlog_write(p->eventlog, "park",
                          json_pack("{s:s, s:I, s:f, s:f, s:i, s:s}", "session", ps->id, "bytes",
                                    (json_int_t)bytes, "seconds", s, "gbps", ps->park_gbps,
                                    "processes", ps->npids, "tier",
                                    ps->tier == TIER_SWAP ? "swap" : "checkpoint"));
        return;
    }
    ps->failed = 1;
    ps->stuck = j->stuck;
    if (!j->stuck && strstr(j->error, "processes are gone"))
        ps->exiting_at = now;
    snprintf(ps->why, sizeof ps->why, "park: %.400s%s", j->error,
             j->stuck ? "; a process could not be brought back" : "; the session was left running");
    /* A stuck session is treated as parked: it is brought back when it can. */
    ps->st = j->stuck ? PS_PARKED : PS_RESIDENT;
    ps->partial = 0; /* a stuck one counts as all out until it is back */
    gs_sched_set_residency(p->sched, ps->id, j->stuck ? GS_SCHED_PARKED : GS_SCHED_RESIDENT, now);
    gs_warn("session %s: %s", ps->id, ps->why);
    gs_eventlog_write(p->eventlog, "park_failed",
                      json_pack("{s:s, s:s, s:b}", "session", ps->id, "error", j->error,
                                "left_running", !j->stuck));
    room_failures(p, ps, j->error);
    if (!j->stuck) {
        if (ps->tier == TIER_CHECKPOINT)
            park_frozen_tell(p, ps, 0);
        memset(ps->bytes, 0, sizeof ps->bytes);
        park_swap_still_out(p, ps, now);
    }
}

static void finish_unpark(gs_park_t *p, psess_t *ps, const gs_park_job_t *j, int64_t now)
{
    park_move_finish(p, ps, j, now);
    int wanted = ps->demand_since != 0; /* its cell started meanwhile, or it asked */
    uint64_t bytes = park_state_total_bytes(p, ps);
    double s = (double)j->elapsed_us / SEC;
    if (!j->ok) {
        ps->st = PS_PARKED;
        ps->failed = ps->stuck = 1;
        snprintf(ps->why, sizeof ps->why, "unpark: %.400s", j->error);
        ps->retries++;
        /* Out of GPU memory where the estimate saw room: it errs (memory
         * the hooks do not report); ask for more room next time, a
         * sixteenth of the largest GPU it is on, doubling, so that others
         * are parked for it instead of failing again. */
        if (strstr(j->error, "OUT_OF_MEMORY")) {
            uint64_t step = 0;
            for (int g = 0; g < p->ngpus; g++)
                if (ps->bytes[g] && p->total[g] / 16 > step)
                    step = p->total[g] / 16;
            ps->oom_extra = ps->oom_extra ? 2 * ps->oom_extra : step;
        }
        int64_t back = SEC << (ps->retries < 5 ? ps->retries : 5); /* 2 s .. 32 s */
        /* Not tried for want of free memory (the job looked for
         * ROOM_WAIT_MS): nothing failed, so again a second later. */
        if (strncmp(j->error, "not restored yet", 16) == 0) {
            ps->retries--;
            back = SEC;
        }
        ps->retry_at = now + back;
        gs_sched_set_residency(p->sched, ps->id, GS_SCHED_PARKED, now);
        gs_error("session %s: %s; trying again in %lld s", ps->id, ps->why,
                 (long long)(back / SEC));
        gs_eventlog_write(p->eventlog, "unpark_failed",
                          json_pack("{s:s, s:s}", "session", ps->id, "error", j->error));
        return;
    }
    ps->st = PS_RESIDENT;
    ps->failed = ps->stuck = ps->partial = 0;
    ps->retries = 0;
    ps->oom_extra = 0;
    ps->unparks++;
    ps->unpark_s = s;
    ps->unpark_gbps = s >= 0.001 ? (double)bytes / s / 1e9 : -1;
    ps->unparked_at = now;
    ps->demand_since = 0;
    ps->demand_expire = now + 2 * SEC;
    if (j->error[0])
        snprintf(ps->why, sizeof ps->why, "unpark needed retries: %.400s", j->error);
    park_rates_measured(p, ps, 0, bytes, s);
    for (int g = 0; g < p->ngpus; g++) {
        gs_sched_info_t si;
        if (!ps->bytes[g])
            continue;
        if (gs_sched_info(p->sched, ps->id, g, now, &si) == 0)
            ps->grants_at_unpark[g] = si.grants;
    }
    gs_sched_set_residency(p->sched, ps->id, GS_SCHED_RESIDENT, now);
    gs_info("session %s unparked: %.1f MiB in %.3f s (%.2f GB/s)%s%s", ps->id, bytes / 1048576.0, s,
            ps->unpark_gbps, j->error[0] ? " after retries: " : "", j->error);
    gs_eventlog_write(p->eventlog, "unpark",
                      json_pack("{s:s, s:I, s:f, s:f, s:s, s:s?}", "session", ps->id, "bytes",
                                (json_int_t)bytes, "seconds", s, "gbps", ps->unpark_gbps, "tier",
                                ps->tier == TIER_SWAP ? "swap" : "checkpoint", "retried",
                                j->error[0] ? j->error : NULL));
    if (ps->tier == TIER_CHECKPOINT)
        park_frozen_tell(p, ps, 0);
    memset(ps->bytes, 0, sizeof ps->bytes);
    if (ps->demoting) { /* back only to go to the deep tier, unless it is wanted now */
        ps->demoting = 0;
        ps->deep_next = !wanted;
        if (!wanted && park_jobs_park(p, ps,
                                      "to the deep tier (parked on the swap tier for "
                                      "park_deep_idle_s)",
                                      now) != 0)
            ps->deep_next = 0;
    }
    park_swap_still_out(p, ps, now);
}

void park_jobs_collect(gs_park_t *p, int64_t now)
{
    gs_park_job_t *j;
    while (p && p->api && (j = p->api->done(p->api->arg)) != NULL) {
        psess_t *ps = park_state_sess(p, j->session, 0);
        for (psess_t *o = zhashx_first(p->sess); o; o = zhashx_next(p->sess))
            o->no_demand = 0; /* what is parked changed: the budget may allow more */
        if (ps && ps->job == j->id) {
            ps->job = 0;
            drop_gone(ps, j);
            if (j->unpark)
                finish_unpark(p, ps, j, now);
            else
                finish_park(p, ps, j, now);
            p->changed = 1;
        }
        free(j);
    }
}

void park_jobs_finish_swaps(gs_park_t *p, int64_t now)
{
    gs_park_job_t *j;
    while ((j = park_swap_next_done(p)) != NULL) {
        psess_t *ps = park_state_sess(p, j->session, 0);
        if (ps) {
            if (j->unpark)
                finish_unpark(p, ps, j, now);
            else
                finish_park(p, ps, j, now);
            if (!j->unpark && !j->ok && !j->stuck)
                ps->tier = TIER_CHECKPOINT;
            p->changed = 1;
        }
        free(j);
    }
}
