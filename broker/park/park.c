/*
 * park.c - parking's life in the broker (see park.h): the checkpoint API
 * and the worker threads, the swap tier's pools and socket, settings, the
 * hook clients parking may act on (join, memory reports, `swapped`, gone),
 * a notebook's own `park` request; the broker's calls come in here and go
 * down the layers: park_jobs.c starts parks and unparks and takes their
 * results back (the worker's, gs_park_on_jobs; the swap tier's,
 * park_jobs_finish_swaps), park_swap.c holds the swap tier's
 * conversations, park_state.c the state they all share.  What to park when
 * is decided in park_poll.c (with park_room.c and park_victims.c, above
 * this file); status fields are in park_status.c.
 *
 * A session's processes are parked and unparked together.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "endpoint.h"
#include "log.h"
#include "park.h"
#include "park_disk.h"
#include "park_eligible.h"
#include "park_jobs.h"
#include "park_ledger.h"
#include "park_rates.h"
#include "park_swap.h"
#include "proc_alive.h"
#include "protocol.h"
#include "size.h"

#define SEC 1000000LL

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
    else if (park_disk_start(p) != 0)
        gs_warn("disk tier unavailable: no worker thread for its copies");
}

/* The backend: the one given (a test's), else the driver's. */
static void backend_start(gs_park_t *p, const gs_park_backend_t *given, int threads)
{
    gs_park_backend_t b;
    if (given)
        b = *given;
    else if (gs_park_backend_real(&b, threads, p->unavailable, sizeof p->unavailable) != 0)
        return;
    if (!(p->api = malloc(sizeof *p->api))) {
        snprintf(p->unavailable, sizeof p->unavailable, "out of memory");
        b.stop(b.arg);
        b.destroy(b.arg);
        return;
    }
    *p->api = b;
}

static void backend_free(gs_park_t *p)
{
    if (p->api) {
        p->api->destroy(p->api->arg);
        free(p->api);
        p->api = NULL;
    }
}

gs_park_t *gs_park_new(gs_sched_t *sched, gs_sessions_t *sessions, const gs_gpu_inventory_t *inv,
                       const char *endpoint, mode_t sock_mode, gid_t sock_group)
{
    return gs_park_new_with(sched, sessions, inv, endpoint, sock_mode, sock_group, NULL);
}

gs_park_t *gs_park_new_with(gs_sched_t *sched, gs_sessions_t *sessions,
                            const gs_gpu_inventory_t *inv, const char *endpoint, mode_t sock_mode,
                            gid_t sock_group, const gs_park_backend_t *backend)
{
    gs_park_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->sched = sched;
    p->sessions = sessions;
    p->answers_end = &p->answers;
    p->swap_done_end = &p->swap_done;
    p->sess = zhashx_new();
    p->clients = zhashx_new();
    zhashx_set_destructor(p->sess, park_state_item_free);
    zhashx_set_destructor(p->clients, park_state_item_free);
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
    backend_start(p, backend, inv->count < 4 ? inv->count : 4);
    if (!p->api)
        gs_info("parking unavailable: %s", p->unavailable);
    else
        swap_tier_start(p, endpoint, sock_mode, sock_group);
    return p;
}

/* Shutdown: nobody may stay frozen when the broker is gone. */
void gs_park_destroy(gs_park_t **self_p)
{
    gs_park_t *p = *self_p;
    if (!p)
        return;
    if (p->api)
        p->api->stop(p->api->arg); /* waits for the jobs under way */
    /* Sessions parked on the swap tier bring themselves back when the
     * broker is gone (their hooks keep the host memory mapped). */
    park_disk_stop(p); /* its copies end first: they map the pools' chunks */
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
        park_jobs_room(p, ps, &j, 0);
        p->api->run(p->api->arg, &j);
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
    backend_free(p);
    free(p);
    *self_p = NULL;
}

void gs_park_set_move_hooks(gs_park_t *p, const gs_park_move_hooks_t *hooks)
{
    if (p)
        p->move = *hooks;
}

void gs_park_set_eventlog(gs_park_t *p, gs_eventlog_t *eventlog)
{
    p->eventlog = eventlog;
}

int gs_park_fd(const gs_park_t *p)
{
    return p && p->api ? p->api->fd(p->api->arg) : -1;
}

/* ---- answers ---------------------------------------------------------------- */

json_t *gs_park_next_answer(gs_park_t *p, zframe_t **peer)
{
    return park_state_next_answer(p, peer);
}

/* ---- the swap tier's items ---------------------------------------------------- */

/* Its eventfd, the pool socket and its connections. */
/* Its eventfd, the disk tier's, the pool socket and its connections. */
_Static_assert(GS_PARK_MAX_POLL_ITEMS >= 1 + 1 + 1 + GS_POOL_SOCKET_MAX_CONN,
               "GS_PARK_MAX_POLL_ITEMS holds the swap tier's items");

int gs_park_poll_items(gs_park_t *p, zmq_pollitem_t *items, int max)
{
    if (!p || !p->pools || max < 2)
        return 0;
    items[0] = (zmq_pollitem_t){NULL, gs_swap_pools_fd(p->pools), ZMQ_POLLIN, 0};
    /* (-1 without a disk tier: poll passes over it) */
    items[1] = (zmq_pollitem_t){NULL, park_disk_fd(p), ZMQ_POLLIN, 0};
    return 2 + gs_pool_socket_poll_items(p->pool_sock, items + 2, max - 2);
}

void gs_park_handle_items(gs_park_t *p, const zmq_pollitem_t *items, int n, int64_t now)
{
    if (!p || !p->pools || n < 2)
        return;
    if (items[0].revents & ZMQ_POLLIN)
        gs_swap_pools_poll(p->pools, now);
    if (items[1].revents & ZMQ_POLLIN) {
        park_disk_collect(p, now);
        park_jobs_finish_swaps(p, now);
    }
    gs_pool_socket_handle(p->pool_sock, items + 2, n - 2, now / 1000, gs_swap_pools_serve,
                          p->pools);
}

/* ---- settings --------------------------------------------------------------- */

int gs_park_set(gs_park_t *p, const char *key, const json_t *v, char *err, size_t errlen)
{
    /* The disk tier's directory holds other users' memory: one that is
     * not the broker's own is refused at once, with the reason. */
    const char *dir = !strcmp(key, "park_disk_dir") ? json_string_value(v) : NULL;
    if (dir && (*dir == '/' || !*dir) && park_disk_dir_set(p, dir, err, errlen) != 0)
        return -1;
    if (gs_park_policy_config_set(&p->cfg, key, v, p->host_ram, err, errlen) != 0)
        return -1;
    park_ledger_refresh(p, p->mem_at - 1);
    p->wake = 0; /* look again at once */
    for (psess_t *ps = zhashx_first(p->sess); ps; ps = zhashx_next(p->sess))
        ps->no_demand = 0;
    return 0;
}

gs_park_config_t *gs_park_config_save(const gs_park_t *p)
{
    gs_park_config_t *c = malloc(sizeof *c);
    if (c)
        *c = p->cfg;
    return c;
}

void gs_park_config_restore(gs_park_t *p, gs_park_config_t *saved)
{
    if (saved)
        p->cfg = *saved;
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
    if (p->pools) {
        park_swap_client_back(p, c, now); /* it joined again: its held lease is its own */
        park_disk_client_back(p, c, now); /* (its image, after a broker died) */
    }
    if (!p->api || peer_pid <= 0)
        return;
    /* A previous broker may have exited or died with this process parked:
     * it is adopted as parked and stuck, so it is brought back as soon as
     * its memory (reported by its hook right after join) fits. */
    int st = GS_PROC_RUNNING;
    char err[200];
    psess_t *ps;
    if (p->api->proc_state(p->api->arg, (int)peer_pid, &st, err, sizeof err) != 0 ||
        st == GS_PROC_RUNNING || !(ps = park_state_sess(p, session, 1)) ||
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
    park_disk_client_gone(p, c, exited, now);
    park_jobs_finish_swaps(p, now);
    psess_t *ps = park_state_sess(p, c->session, 0);
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
    if (!strcmp(gs_msg_str(msg, "direction", ""), "drop"))
        park_disk_dropped(p, c, gpu, msg, now);
    else
        park_swap_answered(p, c, gpu, msg, now);
    park_jobs_finish_swaps(p, now);
}

int gs_park_request(gs_park_t *p, const char *session, int64_t now, char *info, size_t len)
{
    char why[520], a[32], b[32];
    if (!p) {
        snprintf(info, len, "parking unavailable");
        return -1;
    }
    if (park_eligible_why_not(p, session, now, why, sizeof why)) {
        snprintf(info, len, "%s", why);
        return -1;
    }
    psess_t *ps = park_state_sess(p, session, 1);
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
    if (bytes > park_ledger_host_room(p, -1)) {
        char c[32];
        snprintf(info, len,
                 "host memory is full: parking %s would not fit (%s free for parked memory, "
                 "%s parked)",
                 park_state_mib(a, sizeof a, bytes),
                 park_state_mib(b, sizeof b, park_ledger_host_room(p, -1)),
                 park_state_mib(c, sizeof c, park_state_host_used(p)));
        return -1;
    }
    ps->asked = 1;
    snprintf(info, len, "parking %s once the session is idle (its cell ends)",
             park_state_mib(a, sizeof a, bytes));
    gs_info("session %s asked to be parked (%s)", session, park_state_mib(a, sizeof a, bytes));
    return 0;
}

void gs_park_on_jobs(gs_park_t *p, int64_t now)
{
    if (p)
        park_jobs_collect(p, now);
}
