/*
 * park.c - parking's life in the broker (see park.h): the checkpoint API
 * and the worker threads, the swap tier's pools and socket, the answers
 * waiting for the broker to send them, settings, the hook clients parking
 * may act on, starting park and unpark jobs (or swap-tier conversations,
 * park_swap.c) and taking their results back.  What to park when is
 * decided in park_poll.c (with park_room.c and park_victims.c); status
 * fields are in park_status.c.
 *
 * Which processes: only hook clients of this broker, by the pid from their
 * connection's credentials (never a pid from a message), that are alive
 * when the job starts; the worker checks each one again before every step
 * (park_worker.h).  A session's processes are parked and unparked together.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "endpoint.h"
#include "log.h"
#include "park_internal.h"
#include "proc_alive.h"
#include "size.h"

#define SEC                1000000LL
#define POOL_REFUSED_PAUSE SEC /* a swap-only session the pool refused is not picked again */

static void sess_free(void **item)
{
    free(*item);
    *item = NULL;
}

psess_t *park_sess(gs_park_t *p, const char *id, int create)
{
    psess_t *ps = zhashx_lookup(p->sess, id);
    if (ps || !create)
        return ps;
    ps = calloc(1, sizeof *ps);
    if (!ps)
        return NULL;
    snprintf(ps->id, sizeof ps->id, "%s", id);
    ps->park_s = ps->park_gbps = ps->unpark_s = ps->unpark_gbps = -1;
    ps->move_from = ps->move_to = -1;
    zhashx_insert(p->sess, ps->id, ps);
    return ps;
}

static uint64_t host_ram(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

/* The swap tier: host pools and their socket beside the endpoint.  Without
 * them parking keeps to the checkpoint tier and status says why. */
static void swap_tier_start(gs_park_t *p, const char *endpoint, mode_t mode, gid_t group)
{
    uint64_t chunk = 1ull << 30;
    const char *env = getenv("GPUSHARE_POOL_CHUNK"); /* smaller chunks for small GPUs and tests */
    if (env && (gs_size_parse(env, &chunk) != 0 || chunk == 0 || chunk % (2u << 20))) {
        gs_warn("ignoring GPUSHARE_POOL_CHUNK=%s (expected a multiple of 2M: 1G, 64M)", env);
        chunk = 1ull << 30;
    }
    char path[128];
    if (!endpoint || gs_endpoint_pool_path(endpoint, path, sizeof path) != 0) {
        snprintf(p->swap_unavailable, sizeof p->swap_unavailable,
                 "the endpoint is not an ipc socket (descriptors cannot cross tcp)");
        return;
    }
    gs_swap_pools_config_t pc = {chunk, p->cfg.host_budget, 60 * SEC};
    p->pools = gs_swap_pools_new(p->ngpus, &pc, p->swap_unavailable, sizeof p->swap_unavailable);
    if (p->pools) {
        p->pool_sock =
            gs_pool_socket_new(path, mode, group, p->swap_unavailable, sizeof p->swap_unavailable);
        if (!p->pool_sock)
            gs_swap_pools_destroy(&p->pools);
    }
    if (!p->pools)
        gs_info("swap tier unavailable (parking uses the checkpoint API only): %s",
                p->swap_unavailable);
}

gs_park_t *gs_park_new(gs_sched_t *sched, gs_sessions_t *sessions, const gs_gpu_inventory_t *inv,
                       const char *endpoint, mode_t sock_mode, gid_t sock_group)
{
    gs_park_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->sched = sched;
    p->sessions = sessions;
    p->answers_end = &p->answers;
    p->sess = zhashx_new();
    p->clients = zhashx_new();
    zhashx_set_destructor(p->sess, sess_free);
    zhashx_set_destructor(p->clients, sess_free);
    p->wake = INT64_MAX;
    p->host_ram = host_ram();
    p->ngpus = inv->count;
    p->inv = inv;
    for (int i = 0; i < inv->count; i++) {
        p->total[i] = inv->gpus[i].memory_total;
        snprintf(p->uuids[i], sizeof p->uuids[i], "%s", inv->gpus[i].uuid);
        snprintf(p->names[i], sizeof p->names[i], "%s", inv->gpus[i].name);
    }
    park_rates_init(p);
    gs_park_policy_config_default(&p->cfg, inv->count, (const char(*)[48])p->uuids, p->host_ram);
    if (inv->count == 0) {
        snprintf(p->unavailable, sizeof p->unavailable, "no GPUs");
        return p;
    }
    p->api = gs_park_cuda_load(p->unavailable, sizeof p->unavailable);
    if (p->api) {
        p->worker = gs_park_worker_new(p->api, inv->count < 4 ? inv->count : 4);
        if (!p->worker) {
            snprintf(p->unavailable, sizeof p->unavailable, "cannot start the park threads");
            gs_park_cuda_free(&p->api);
        }
    }
    if (!p->api)
        gs_info("parking unavailable: %s", p->unavailable);
    else
        swap_tier_start(p, endpoint, sock_mode, sock_group);
    return p;
}

/* Shutdown: nobody may stay frozen when the broker is gone. */
/* What a restore needs on GPU g beside the memory the hooks report: the
 * contexts', a sixty-fourth of the GPU, 1 GiB at most (an H100's context
 * is about 0.5 GiB). */
static void room_on(const gs_park_t *p, int g, uint64_t bytes, gs_park_room_t *r)
{
    uint64_t margin = p->total[g] / 64;
    if (margin > (1ULL << 30))
        margin = 1ULL << 30;
    snprintf(r->uuid, sizeof r->uuid, "%s", p->uuids[g]);
    r->need = bytes + margin;
}

void park_job_room(const gs_park_t *p, const psess_t *ps, gs_park_job_t *j, unsigned wait_ms)
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

void gs_park_destroy(gs_park_t **self_p)
{
    gs_park_t *p = *self_p;
    if (!p)
        return;
    gs_park_worker_destroy(&p->worker); /* waits for the jobs under way */
    /* Sessions parked on the swap tier bring themselves back when the
     * broker is gone (their hooks keep the host memory mapped). */
    gs_pool_socket_destroy(&p->pool_sock);
    gs_swap_pools_destroy(&p->pools);
    for (psess_t *ps = zhashx_first(p->sess); ps && p->api; ps = zhashx_next(p->sess)) {
        if (ps->st == PS_RESIDENT && !ps->stuck)
            continue;
        if (ps->tier == TIER_SWAP) {
            gs_info("session %s is parked on the swap tier: its processes bring their memory "
                    "back themselves once the broker is gone",
                    ps->id);
            continue;
        }
        gs_park_job_t j;
        memset(&j, 0, sizeof j);
        j.unpark = 1;
        j.npids = ps->npids;
        memcpy(j.pids, ps->pids, sizeof j.pids);
        memcpy(j.start, ps->start, sizeof j.start);
        ps->move_to = -1; /* in place */
        park_job_room(p, ps, &j, 0);
        gs_park_worker_run(p->api, &j);
        if (j.ok)
            gs_info("session %s unparked before the broker exits (%.2f s)", ps->id,
                    (double)j.elapsed_us / SEC);
        else
            gs_error("session %s stays parked (its processes wait, frozen, for the next broker, "
                     "which brings them back when their memory fits): %s",
                     ps->id, j.error);
    }
    for (room_t *r = p->rooms, *next; r; r = next) {
        next = r->next;
        zframe_destroy(&r->peer);
        free(r);
    }
    zframe_t *peer;
    json_t *answer;
    while ((answer = gs_park_next_answer(p, &peer)) != NULL) {
        json_decref(answer);
        zframe_destroy(&peer);
    }
    zhashx_destroy(&p->sess);
    zhashx_destroy(&p->clients);
    park_swap_free_held(p);
    gs_park_cuda_free(&p->api);
    free(p);
    *self_p = NULL;
}

void gs_park_set_eventlog(gs_park_t *p, gs_eventlog_t *eventlog)
{
    p->eventlog = eventlog;
}

int gs_park_fd(const gs_park_t *p)
{
    return p && p->worker ? gs_park_worker_fd(p->worker) : -1;
}

/* ---- answers ---------------------------------------------------------------- */

void park_answer(gs_park_t *p, zframe_t *peer, json_t *msg)
{
    answer_t *a = calloc(1, sizeof *a);
    if (!a)
        abort(); /* the broker cannot keep its promises without memory */
    a->peer = zframe_dup(peer);
    a->msg = msg;
    *p->answers_end = a;
    p->answers_end = &a->next;
}

json_t *gs_park_next_answer(gs_park_t *p, zframe_t **peer)
{
    answer_t *a = p->answers;
    if (!a)
        return NULL;
    p->answers = a->next;
    if (!p->answers)
        p->answers_end = &p->answers;
    json_t *msg = a->msg;
    *peer = a->peer;
    free(a);
    return msg;
}

/* ---- the swap tier's items ---------------------------------------------------- */

/* Its eventfd, the pool socket and its connections. */
_Static_assert(GS_PARK_MAX_POLL_ITEMS >= 1 + 1 + GS_POOL_SOCKET_MAX_CONN,
               "GS_PARK_MAX_POLL_ITEMS holds the swap tier's items");

int gs_park_poll_items(gs_park_t *p, zmq_pollitem_t *items, int max)
{
    if (!p || !p->pools || max < 1)
        return 0;
    items[0] = (zmq_pollitem_t){NULL, gs_swap_pools_fd(p->pools), ZMQ_POLLIN, 0};
    return 1 + gs_pool_socket_poll_items(p->pool_sock, items + 1, max - 1);
}

void gs_park_handle_items(gs_park_t *p, const zmq_pollitem_t *items, int n, int64_t now)
{
    if (!p || !p->pools || n < 1)
        return;
    if (items[0].revents & ZMQ_POLLIN)
        gs_swap_pools_poll(p->pools, now);
    gs_pool_socket_handle(p->pool_sock, items + 1, n - 1, now / 1000, gs_swap_pools_serve,
                          p->pools);
}

/* ---- settings --------------------------------------------------------------- */

int gs_park_set(gs_park_t *p, const char *key, const json_t *v, char *err, size_t errlen)
{
    if (gs_park_policy_config_set(&p->cfg, key, v, p->host_ram, err, errlen) != 0)
        return -1;
    park_ledger_refresh(p, p->mem_at - 1);
    p->wake = 0; /* look again at once */
    for (psess_t *ps = zhashx_first(p->sess); ps; ps = zhashx_next(p->sess))
        ps->no_demand = 0;
    return 0;
}

void *gs_park_config_save(const gs_park_t *p)
{
    gs_park_config_t *c = malloc(sizeof *c);
    if (c)
        *c = p->cfg;
    return c;
}

void gs_park_config_restore(gs_park_t *p, void *saved)
{
    if (saved)
        p->cfg = *(gs_park_config_t *)saved;
    free(saved);
    park_ledger_refresh(p, p->mem_at - 1);
}

json_t *gs_park_config_json_of(const gs_park_t *p)
{
    return gs_park_policy_config_json(&p->cfg);
}

/* ---- clients ------------------------------------------------------------------ */

void gs_park_on_join(gs_park_t *p, const char *client, const char *session, long peer_pid,
                     long peer_uid, int managed, int swap, uint64_t swap_segment, int64_t now)
{
    if (!p)
        return;
    pclient_t *c = zhashx_lookup(p->clients, client);
    if (!c && !(c = calloc(1, sizeof *c)))
        return;
    if (!c->key[0]) {
        snprintf(c->key, sizeof c->key, "%s", client);
        zhashx_insert(p->clients, c->key, c);
    }
    snprintf(c->session, sizeof c->session, "%s", session);
    c->pid = peer_pid;
    c->uid = peer_uid;
    c->managed = managed;
    c->swap = swap && !managed;
    c->segment = swap_segment ? swap_segment : PARK_OLD_SEGMENT;
    c->start = peer_pid > 0 ? gs_proc_start(peer_pid) : 0;
    if (p->pools)
        park_swap_client_back(p, c, now); /* it joined again: its held lease is its own */
    if (!p->api || peer_pid <= 0)
        return;
    /* A previous broker may have exited or died with this process parked:
     * it is adopted as parked and stuck, so it is brought back as soon as
     * its memory (reported by its hook right after join) fits. */
    int st = GS_PROC_RUNNING;
    char err[200];
    psess_t *ps;
    if (gs_park_cuda_state(p->api, (int)peer_pid, &st, err, sizeof err) != 0 ||
        st == GS_PROC_RUNNING || !(ps = park_sess(p, session, 1)) ||
        ps->npids == GS_PARK_MAX_PIDS || (ps->st != PS_RESIDENT && ps->st != PS_PARKED))
        return;
    ps->pids[ps->npids] = (int)peer_pid;
    ps->start[ps->npids++] = gs_proc_start((int)peer_pid);
    ps->st = PS_PARKED;
    ps->failed = ps->stuck = 1;
    /* A checkpointed one waits for its hook's memory report (which comes
     * right after the join): a restore is tried only into memory known to
     * be free (gpu_free.h), and its size is what that report says. */
    if (st == GS_PROC_CHECKPOINTED)
        ps->retry_at = now + 2 * SEC;
    snprintf(ps->why, sizeof ps->why, "pid %ld joined %s (left so by a previous broker)", peer_pid,
             st == GS_PROC_CHECKPOINTED ? "checkpointed" : "locked");
    gs_warn("session %s: %s: bringing it back", session, ps->why);
    gs_eventlog_write(
        p->eventlog, "park_adopted",
        json_pack("{s:s, s:i, s:i}", "session", session, "pid", (int)peer_pid, "state", st));
    gs_sched_set_residency(p->sched, session, GS_SCHED_PARKED, now);
}

/* A parked process that is gone has nothing to bring back; a session
 * whose parked processes are all gone has nothing parked any more. */
void gs_park_on_client_gone(gs_park_t *p, const char *client, int exited, int64_t now)
{
    pclient_t *c = p ? zhashx_lookup(p->clients, client) : NULL;
    if (!c)
        return;
    park_swap_client_gone(p, c, exited, now);
    psess_t *ps = park_sess(p, c->session, 0);
    if (ps && ps->st == PS_PARKED && !ps->job) {
        int n = 0;
        for (int i = 0; i < ps->npids; i++)
            if (ps->pids[i] != (int)c->pid) {
                ps->pids[n] = ps->pids[i];
                ps->start[n++] = ps->start[i];
            }
        ps->npids = n;
        if (n == 0 && !park_swap_session_holds(p, ps->id)) {
            ps->st = PS_RESIDENT;
            ps->failed = ps->stuck = ps->partial = 0;
            memset(ps->bytes, 0, sizeof ps->bytes);
            gs_sched_set_residency(p->sched, ps->id, GS_SCHED_RESIDENT, now);
        }
    }
    zhashx_delete(p->clients, client);
}

void gs_park_on_memory(gs_park_t *p, const char *client, int gpu, uint64_t used, uint64_t movable,
                       uint64_t swapped, uint64_t peak, int64_t now)
{
    pclient_t *c = p ? zhashx_lookup(p->clients, client) : NULL;
    if (!c || gpu < 0 || gpu >= GS_MAX_GPUS)
        return;
    c->used[gpu] = used;
    c->movable[gpu] = movable;
    c->swapped[gpu] = swapped;
    c->peak[gpu] = peak;
    park_swap_reported_out(p, c, gpu, swapped, now);
}

void gs_park_on_swapped(gs_park_t *p, const char *client, int gpu, const json_t *msg, int64_t now)
{
    pclient_t *c = p ? zhashx_lookup(p->clients, client) : NULL;
    if (!c) {
        gs_debug("swapped from a client parking does not know: ignored");
        return;
    }
    park_swap_answered(p, c, gpu, msg, now);
}

int park_session_pids(const gs_park_t *p, const char *session, int *pids, int max,
                      const char **reason)
{
    int n = 0;
    *reason = NULL;
    for (pclient_t *c = zhashx_first(p->clients); c; c = zhashx_next(p->clients)) {
        if (strcmp(c->session, session) != 0)
            continue;
        if (c->managed) {
            *reason = "managed memory";
            return 0;
        }
        if (c->pid <= 0) {
            *reason = "a process without socket credentials";
            return 0;
        }
        if (n == max) {
            *reason = "too many processes";
            return 0;
        }
        pids[n++] = (int)c->pid;
    }
    return n;
}

/* A notebook whose launcher (its cell watcher) is gone while its kernel
 * lives on: no cell event will come, as for a program outside Jupyter. */
static int watcher_gone(const gs_park_t *p, const char *session)
{
    const gs_session_t *s = gs_sessions_session(p->sessions, session, 0);
    return s && s->registrar_gone;
}

int park_unparkable(const gs_park_t *p, const char *session, int64_t now, char *out, size_t len)
{
    int pids[GS_PARK_MAX_PIDS];
    const char *why = NULL;
    gs_sched_info_t si;
    int registered = 0;
    out[0] = '\0';
    if (!p->api)
        snprintf(out, len, "parking unavailable (%s)", p->unavailable);
    else if (!p->cfg.enabled)
        snprintf(out, len, "parking is off");
    else if (park_session_pids(p, session, pids, GS_PARK_MAX_PIDS, &why) == 0)
        snprintf(out, len, "%s", why ? why : "no CUDA process");
    int gpus = 0, gpu = -1;
    for (int g = 0; !out[0] && g < p->ngpus; g++) {
        if (gs_sched_info(p->sched, session, g, now, &si) != 0)
            continue;
        registered |= si.registered;
        if (si.resident_bytes) {
            gpus++;
            gpu = g;
        }
        if (si.resident_bytes && p->cfg.gpu_off[g])
            snprintf(out, len, "parking is off on GPU %d", g);
    }
    if (watcher_gone(p, session))
        registered = 0; /* no cell event comes either */
    /* A program outside Jupyter has no cell to bring it back: on the swap
     * tier its hook's gate does it at its next CUDA call; a checkpointed
     * process cannot ask (doc/parking.md), so that tier needs park_plain. */
    if (!out[0] && !registered && !p->cfg.plain && !(gpus == 1 && park_swap_suits(p, session, gpu)))
        snprintf(out, len,
                 "not a notebook (park_plain is off, and its memory cannot go to the swap "
                 "tier)");
    /* Picked again at once, it would be refused again in a loop while the
     * pool pins or zeroes. */
    const psess_t *ps = zhashx_lookup(p->sess, session);
    if (!out[0] && ps && park_exiting(ps, now))
        snprintf(out, len, "its processes are exiting (their memory frees by itself)");
    if (!out[0] && !registered && !p->cfg.plain && ps && ps->pool_refused_at &&
        now - ps->pool_refused_at < POOL_REFUSED_PAUSE)
        snprintf(out, len,
                 "not a notebook (park_plain is off), and the host pool could not take its "
                 "memory a moment ago");
    return out[0] != '\0';
}

#define EXITING_PAUSE (2 * SEC)

int park_exiting(const psess_t *ps, int64_t now)
{
    return ps->exiting_at && now - ps->exiting_at < EXITING_PAUSE;
}

void park_pause_wake(gs_park_t *p, const psess_t *ps, int64_t now)
{
    if (park_exiting(ps, now) && ps->exiting_at + EXITING_PAUSE < p->wake)
        p->wake = ps->exiting_at + EXITING_PAUSE;
    int64_t end = ps->pool_refused_at + POOL_REFUSED_PAUSE;
    if (ps->pool_refused_at && now < end && end < p->wake)
        p->wake = end;
}

/* Outside Jupyter, and only the swap tier may park it (park_unparkable). */
static int swap_only(const gs_park_t *p, const char *session, int64_t now)
{
    gs_sched_info_t si;
    if (p->cfg.plain)
        return 0;
    if (watcher_gone(p, session))
        return 1;
    for (int g = 0; g < p->ngpus; g++)
        if (gs_sched_info(p->sched, session, g, now, &si) == 0 && si.registered)
            return 0;
    return 1;
}

uint64_t park_host_used(const gs_park_t *p)
{
    uint64_t sum = 0;
    for (psess_t *ps = zhashx_first(p->sess); ps; ps = zhashx_next(p->sess))
        if (ps->st != PS_RESIDENT || ps->stuck)
            for (int g = 0; g < p->ngpus; g++)
                sum += ps->bytes[g];
    return sum;
}

/* ---- jobs ---------------------------------------------------------------------- */

static void submit(gs_park_t *p, psess_t *ps, int unpark, int64_t now);

/* How long an unpark waits for the driver to free the memory its room was
 * made in (a victim's process that exits frees it a moment later). */
#define ROOM_WAIT_MS 10000

void park_submit(gs_park_t *p, psess_t *ps, int64_t now)
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
    int deep = !unpark && ps->deep_next; /* decided by park_start */
    ps->deep_next = 0;
    if (!unpark && !deep && park_swap_try_park(p, ps, now))
        return;
    if (!unpark && swap_only(p, ps->id, now)) {
        gs_park_job_t j;
        memset(&j, 0, sizeof j);
        j.id = ps->job = ++p->next_job;
        snprintf(j.error, sizeof j.error,
                 "a program outside Jupyter parks on the swap tier only (park_plain is off), "
                 "and the host pool cannot take it now");
        ps->tier = TIER_SWAP;
        ps->pool_refused_at = now; /* not chosen again at once (park_unparkable) */
        park_finish_park(p, ps, &j, now);
        ps->job = 0;
        return;
    }
    if (unpark && ps->tier == TIER_SWAP) {
        park_swap_unpark(p, ps, now);
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
        park_finish_park(p, ps, &j, now);
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
        park_tell_frozen(p, ps, 1);
    else
        park_job_room(p, ps, j, ROOM_WAIT_MS);
    gs_park_worker_submit(p->worker, j);
}

static uint64_t total_bytes(const gs_park_t *p, const psess_t *ps)
{
    uint64_t sum = 0;
    for (int g = 0; g < p->ngpus; g++)
        sum += ps->bytes[g];
    return sum;
}

int park_start(gs_park_t *p, psess_t *ps, const char *why, int64_t now)
{
    const char *reason;
    int pids[GS_PARK_MAX_PIDS];
    int n = park_session_pids(p, ps->id, pids, GS_PARK_MAX_PIDS, &reason);
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
    for (int g = 0; g < p->ngpus; g++) {
        gs_sched_info_t si;
        ps->bytes[g] = gs_sched_info(p->sched, ps->id, g, now, &si) == 0 ? si.resident_bytes : 0;
    }
    ps->since = now;
    ps->noted = 0;
    ps->demand_since = 0;
    /* The tier is chosen by how long the session has been idle before its
     * grant is revoked (the release that follows counts as activity). */
    int64_t idle = idle_for(p, ps->id, now);
    if (!ps->deep_next && !ps->rest &&
        gs_park_policy_deep(&p->cfg, idle, !swap_only(p, ps->id, now))) {
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
            (double)total_bytes(p, ps) / 1048576.0, n, n == 1 ? "" : "es", why);
    gs_eventlog_write(p->eventlog, "park_start",
                      json_pack("{s:s, s:I, s:i, s:s}", "session", ps->id, "bytes",
                                (json_int_t)total_bytes(p, ps), "processes", n, "why", why));
    return 0;
}

int gs_park_request(gs_park_t *p, const char *session, int64_t now, char *info, size_t len)
{
    char why[520], a[32], b[32];
    if (!p) {
        snprintf(info, len, "parking unavailable");
        return -1;
    }
    if (park_unparkable(p, session, now, why, sizeof why)) {
        snprintf(info, len, "%s", why);
        return -1;
    }
    psess_t *ps = park_sess(p, session, 1);
    if (!ps) {
        snprintf(info, len, "out of memory");
        return -1;
    }
    if (ps->st != PS_RESIDENT) {
        snprintf(info, len, "nothing to park: the session is %s already",
                 ps->st == PS_PARKED      ? "parked"
                 : ps->st == PS_UNPARKING ? "coming back (its memory is on its way to the GPU)"
                                          : "being parked");
        return 0;
    }
    uint64_t bytes = 0;
    gs_sched_info_t si;
    for (int g = 0; g < p->ngpus; g++)
        if (gs_sched_info(p->sched, session, g, now, &si) == 0)
            bytes += si.resident_bytes;
    if (!bytes) {
        snprintf(info, len, "nothing to park: the session holds no GPU memory");
        return 0;
    }
    if (bytes > park_host_room(p, -1)) {
        char c[32];
        snprintf(info, len,
                 "host memory is full: parking %s would not fit (%s free for parked memory, "
                 "%s parked)",
                 park_mib(a, sizeof a, bytes), park_mib(b, sizeof b, park_host_room(p, -1)),
                 park_mib(c, sizeof c, park_host_used(p)));
        return -1;
    }
    ps->asked = 1;
    snprintf(info, len, "parking %s once the session is idle (its cell ends)",
             park_mib(a, sizeof a, bytes));
    gs_info("session %s asked to be parked (%s)", session, park_mib(a, sizeof a, bytes));
    return 0;
}

void park_start_unpark(gs_park_t *p, psess_t *ps, const char *why, int64_t now)
{
    ps->st = PS_UNPARKING;
    ps->since = now;
    gs_sched_set_residency(p->sched, ps->id, GS_SCHED_MOVING, now);
    p->changed = 1;
    submit(p, ps, 1, now);
    gs_info("unparking session %s (%.1f MiB): %s", ps->id, (double)total_bytes(p, ps) / 1048576.0,
            why);
    gs_eventlog_write(p->eventlog, "unpark_start",
                      json_pack("{s:s, s:I, s:s}", "session", ps->id, "bytes",
                                (json_int_t)total_bytes(p, ps), "why", why));
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
    if (park_exiting(ps, ps->exiting_at))
        return;
    for (room_t *r = p->rooms; r; r = r->next)
        if (r->rounds > 0 && ps->bytes[r->gpu] > 0 && !r->fail[0])
            snprintf(r->fail, sizeof r->fail, "parking session %.64s failed: %.300s", ps->id, text);
}

void park_finish_park(gs_park_t *p, psess_t *ps, const gs_park_job_t *j, int64_t now)
{
    uint64_t bytes = total_bytes(p, ps);
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
            park_tell_frozen(p, ps, 0);
        memset(ps->bytes, 0, sizeof ps->bytes);
        park_swap_still_out(p, ps, now);
    }
}

void park_finish_unpark(gs_park_t *p, psess_t *ps, const gs_park_job_t *j, int64_t now)
{
    park_move_finish(p, ps, j, now);
    int wanted = ps->demand_since != 0; /* its cell started meanwhile, or it asked */
    uint64_t bytes = total_bytes(p, ps);
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
        park_tell_frozen(p, ps, 0);
    memset(ps->bytes, 0, sizeof ps->bytes);
    if (ps->demoting) { /* back only to go to the deep tier, unless it is wanted now */
        ps->demoting = 0;
        ps->deep_next = !wanted;
        if (!wanted && park_start(p, ps,
                                  "to the deep tier (parked on the swap tier for "
                                  "park_deep_idle_s)",
                                  now) != 0)
            ps->deep_next = 0;
    }
    park_swap_still_out(p, ps, now);
}

void gs_park_on_jobs(gs_park_t *p, int64_t now)
{
    gs_park_job_t *j;
    while (p && p->worker && (j = gs_park_worker_done(p->worker)) != NULL) {
        psess_t *ps = park_sess(p, j->session, 0);
        for (psess_t *o = zhashx_first(p->sess); o; o = zhashx_next(p->sess))
            o->no_demand = 0; /* what is parked changed: the budget may allow more */
        if (ps && ps->job == j->id) {
            ps->job = 0;
            drop_gone(ps, j);
            if (j->unpark)
                park_finish_unpark(p, ps, j, now);
            else
                park_finish_park(p, ps, j, now);
            p->changed = 1;
        }
        free(j);
    }
}
