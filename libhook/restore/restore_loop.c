/*
 * restore_loop.c - bringing one process back from the checkpoint tier (see
 * restore_loop.h).
 *
 * The state is read before every step, so the loop is idempotent and
 * shares the process with a broker that comes back meanwhile (its unpark
 * reads the state too, park_worker.c): whoever finds it CHECKPOINTED
 * restores it, whoever finds it LOCKED unlocks it.  The helper is asked
 * to stop (SIGTERM) when a broker is back; it then does nothing more,
 * except the unlock that follows its own successful restore: that lock is
 * its own, and nobody else would know to lift it at once.
 */
#include "restore_loop.h"

#include "log.h"

struct run {
    const gs_restore_ops_t *ops;
    const gs_restore_limits_t *lim;
    int pid;
    int errors;     /* failed driver calls in a row (not counting "no room") */
    int announced;  /* said that the process is parked and what it does */
    uint64_t t0;    /* when the helper found the process parked */
    uint64_t wait0; /* since when it waits for memory, 0: not waiting */
    uint64_t last_wait_log;
};

static const char *state_name(int st)
{
    switch (st) {
    case GS_RST_RUNNING:
        return "running";
    case GS_RST_LOCKED:
        return "locked";
    case GS_RST_CHECKPOINTED:
        return "checkpointed";
    case GS_RST_FAILED:
        return "failed";
    default:
        return "in an unknown state";
    }
}

/* A driver call failed: said, then a pause that grows (0.2 s, 0.4 s, ...
 * 2 s); 1 when that was the last try. */
static int failed(struct run *r, const char *step, const char *call, int rc)
{
    char buf[64];
    const char *name = r->ops->error_name(r->ops->ctx, rc, buf, sizeof buf);
    r->errors++;
    if (r->errors >= (int)r->lim->tries) {
        gs_error("%s pid %d failed %d times (%s: %s); giving up: the process stays parked until "
                 "a gpushare broker is back",
                 step, r->pid, r->errors, call, name);
        return 1;
    }
    gs_warn("%s pid %d failed (%s: %s); trying again (%d of %u)", step, r->pid, call, name,
            r->errors + 1, r->lim->tries);
    unsigned ms = 200u << (r->errors - 1 < 3 ? r->errors - 1 : 3);
    r->ops->nap_ms(r->ops->ctx, ms > 2000 ? 2000 : ms);
    return 0;
}

/* The GPU has no room for the process yet: said at once, then at most
 * every log_every_ms; one try every retry_ms. */
static void no_room(struct run *r)
{
    uint64_t now = r->ops->now_ms(r->ops->ctx);
    if (!r->wait0) {
        r->wait0 = r->last_wait_log = now;
        gs_warn("no room on the GPU for pid %d yet: waiting for GPU memory, looking every %.1f s",
                r->pid, r->lim->retry_ms / 1000.0);
    } else if (now - r->last_wait_log >= r->lim->log_every_ms) {
        r->last_wait_log = now;
        gs_warn("still waiting for GPU memory for pid %d (%.0f s so far)", r->pid,
                (double)(now - r->wait0) / 1000.0);
    }
    r->ops->nap_ms(r->ops->ctx, r->lim->retry_ms);
}

int gs_restore_run(const gs_restore_ops_t *ops, int pid, unsigned long long start,
                   const gs_restore_limits_t *lim)
{
    struct run r = {.ops = ops, .lim = lim, .pid = pid};
    for (;;) {
        if (!ops->alive(ops->ctx, pid, start)) {
            if (r.announced)
                gs_warn("pid %d ended before it was back", pid);
            return GS_RST_EXIT_NOT_DONE;
        }
        int st = -1, rc = ops->state(ops->ctx, pid, &st);
        if (rc != 0) {
            if (failed(&r, "reading the state of", "cuCheckpointProcessGetState", rc))
                return GS_RST_EXIT_FAILED;
            continue;
        }
        if (st == GS_RST_RUNNING) {
            if (r.announced)
                gs_warn("pid %d runs again: back from the checkpoint tier after %.1f s", pid,
                        (double)(ops->now_ms(ops->ctx) - r.t0) / 1000.0);
            return GS_RST_EXIT_RUNS;
        }
        if (ops->stop(ops->ctx)) {
            if (r.announced)
                gs_warn("stopped (a gpushare broker is back): pid %d, %s, is left to it", pid,
                        state_name(st));
            return GS_RST_EXIT_NOT_DONE;
        }
        if (st == GS_RST_FAILED) {
            gs_error("the driver reports pid %d FAILED (cuCheckpointProcessGetState): it cannot "
                     "be brought back",
                     pid);
            return GS_RST_EXIT_FAILED;
        }
        if (st != GS_RST_LOCKED && st != GS_RST_CHECKPOINTED) {
            gs_error("pid %d is in checkpoint state %d, which this helper does not know", pid, st);
            return GS_RST_EXIT_FAILED;
        }
        if (!r.announced) {
            r.announced = 1;
            r.t0 = ops->now_ms(ops->ctx);
            gs_warn("the gpushare broker is gone; bringing pid %d back from the checkpoint tier "
                    "(it is %s)",
                    pid, state_name(st));
        }
        if (st == GS_RST_CHECKPOINTED) {
            if (ops->has_room && !ops->has_room(ops->ctx)) {
                no_room(&r); /* never a restore into too little memory */
                continue;
            }
            rc = ops->restore(ops->ctx, pid);
            if (rc == GS_RST_OUT_OF_MEMORY) {
                no_room(&r);
                continue;
            }
            if (rc != 0) {
                if (failed(&r, "restoring", "cuCheckpointProcessRestore", rc))
                    return GS_RST_EXIT_FAILED;
                continue;
            }
            if (r.wait0)
                gs_warn("GPU memory for pid %d is free after %.0f s of waiting: restored", pid,
                        (double)(ops->now_ms(ops->ctx) - r.wait0) / 1000.0);
            r.wait0 = 0;
            r.errors = 0;
            /* Locked by our own restore: lifted now, even when a stop came
             * meanwhile (the next round reads the state again). */
        }
        rc = ops->unlock(ops->ctx, pid);
        if (rc != 0 && failed(&r, "unlocking", "cuCheckpointProcessUnlock", rc))
            return GS_RST_EXIT_FAILED;
        if (rc == 0)
            r.errors = 0;
    }
}
