/*
 * hook_client_conn.c - the broker client's connection: opening it,
 * failing open, being refused, and joining again when fenced.
 *
 * Trust: before connecting, the socket's path and listener are checked
 * (socket_trust.h; it also turns EACCES and a stale socket into messages
 * that say so), and the welcome must carry the credentials of root, the
 * user or the service account: a socket that someone else could have put
 * there is never used, so no stranger's "broker" can hold a grant back.
 *
 * Failing open: when there is no socket file, or no welcome within ~200 ms
 * of the first attempt, or the connection drops later (zmq monitor event;
 * ZMTP heartbeats catch a broker that stopped answering), or the broker
 * announces its shutdown, the hook prints one warning and runs ungated
 * (hook_gate_word = UNGATED: nothing waits).  It keeps trying in the
 * background with a fresh socket, and when a broker answers it registers
 * again (hello, join) and gates from the next submission on.
 *
 * Never failing open where a broker answers: a broker that refuses this
 * process (its hello, e.g. too many connections of its user, or its join)
 * is there and schedules everybody else's work; running ungated beside it
 * would let a refused process take the GPU from those who wait their turn
 * (issue 34: a join refused over a session name ran the program ungated).
 * The hook then says why once, keeps its work waiting at the gate (the wait
 * line says why) and asks again every few seconds (hook_client_go_refused).  Only
 * errors that mean the broker cannot understand this hook at all (another
 * protocol version, a malformed message) still fail open.
 *
 * Fencing (protocol.md): a process stopped for longer than the broker
 * waits for a heartbeat (SIGSTOP, a debugger, a frozen cgroup) is dropped
 * by the broker, which grants the GPU to someone else and cannot tell this
 * process.  When it runs again the hook must not go on under its old
 * grant: every join is answered with an epoch, grants carry the epoch they
 * belong to, heartbeats name it, and the hook joins again (closing its
 * gate and draining first) when the broker says it does not know that
 * epoch, when a request is refused as not joined, or when it sees itself
 * that it was silent for longer than the broker waits.  A grant of an
 * earlier epoch, still on its way, is refused.
 */
#include "hook_client_conn.h"
#include "hook_client_impl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "endpoint.h"
#include "gs_assert.h"
#include "hook_client_room.h"
#include "hook_config.h"
#include "hook_drain.h"
#include "hook_mem.h"
#include "hook_place.h"
#include "hook_restore.h"
#include "log.h"
#include "socket_trust.h"

#define FIRST_WELCOME_MS 200  /* the first attempt decides: gated or fail open */
#define LATER_WELCOME_MS 2000 /* background attempts wait longer before retrying */
#define DEFAULT_HB_MS    1000

static void send_hello(void)
{
    json_t *m = hook_client_msg_seq(GS_MSG_HELLO);
    if (!m)
        return;
    hook_place_hello_fill(m, hook_cfg.session, 0);
    hook_client_send(m);
}

void hook_client_close_socket(void)
{
    if (hook_client_io.sock) {
        zmq_socket_monitor(hook_client_io.sock, NULL, 0);
        zmq_close(hook_client_io.sock);
        hook_client_io.sock = NULL;
    }
    if (hook_client_io.mon) {
        zmq_close(hook_client_io.mon);
        hook_client_io.mon = NULL;
    }
    hook_client_io.ready = 0;
}

/* No broker: one warning per transition, then ungated. */
/* The connection is gone (no broker, or one that refused this process):
 * the client's new state, what waited to be sent dropped, waiting room
 * requests failed with why. */
static void disconnected_locked(enum hook_client_state state, const char *why)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    hook_client_sh.connected = 0;
    if (hook_gate_st.client != CS_STOPPED)
        hook_gate_st.client = state;
    hook_client_sh.decided = 1;
    for (int i = 0; i < hook_client_sh.nreleases; i++)
        json_decref(hook_client_sh.releases[i]);
    hook_client_sh.nreleases = 0;
    for (int i = 0; i < hook_client_sh.nreports; i++)
        json_decref(hook_client_sh.reports[i]);
    hook_client_sh.nreports = 0;
    hook_client_rooms_fail_locked(why);
}

void hook_client_go_ungated(const char *why, uint64_t retry_in_ms)
{
    int was_ready = hook_client_io.ready;
    hook_client_close_socket();
    hook_client_io.next_attempt = hook_client_now_ms() + retry_in_ms;
    pthread_mutex_lock(&hook_gate_mu);
    int warn = hook_gate_st.client != CS_UNGATED;
    disconnected_locked(CS_UNGATED, "no gpushare broker");
    /* Nobody to ask for the GPU: the restore helper brings a frozen process
     * back (its calls wait in the driver meanwhile). */
    for (int i = 0; i < HOOK_MAX_DEVICES; i++)
        hook_gate_st.dev[i].frozen = 0;
    atomic_store_explicit(&hook_gate_frozen, 0, memory_order_relaxed);
    hook_gate_update_locked();
    pthread_cond_broadcast(&hook_gate_cv);
    pthread_mutex_unlock(&hook_gate_mu);
    /* A broker that dies may leave this process on the checkpoint tier,
     * from which it cannot come back by itself (hook_restore.h). */
    if (was_ready)
        hook_restore_broker_lost();
    if (warn) {
        if (was_ready)
            gs_warn("lost the gpushare broker at %s (%s); running without GPU sharing until it "
                    "is back",
                    hook_client_sh.endpoint, why);
        else
            gs_warn("no gpushare broker at %s (%s); running without GPU sharing",
                    hook_client_sh.endpoint, why);
    }
}

/* A broker that answers refused this process: gated, nothing granted, said
 * once per refusal, asked again in retry_in_ms (see the top of the file). */
void hook_client_go_refused(const char *why, uint64_t retry_in_ms)
{
    hook_client_close_socket();
    hook_client_io.next_attempt = hook_client_now_ms() + retry_in_ms;
    pthread_mutex_lock(&hook_gate_mu);
    /* (asked again, it was READY for a moment: its welcome) */
    int warn = hook_gate_st.client != CS_REFUSED && !hook_client_io.was_refused;
    disconnected_locked(CS_REFUSED, why);
    /* What a waiting cell's line shows (hook_wait.h). */
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        struct hook_dev *d = &hook_gate_st.dev[i];
        if (d->touched)
            snprintf(d->wait_info, sizeof d->wait_info,
                     "the gpushare broker refused this "
                     "process: %.200s",
                     why);
    }
    hook_gate_update_locked();
    pthread_cond_broadcast(&hook_gate_cv);
    pthread_mutex_unlock(&hook_gate_mu);
    if (warn)
        gs_error("the gpushare broker at %s refused this process (%s); its GPU work waits "
                 "(it does not run unscheduled beside others') and asks again every %llu s",
                 hook_client_sh.endpoint, why, (unsigned long long)(retry_in_ms / 1000));
}

void hook_client_open_socket(void)
{
    const char *path = gs_endpoint_ipc_path(hook_client_sh.endpoint);
    uint64_t now = hook_client_now_ms();
    char why[600];
    gs_probe_t probe = path
                           ? gs_trust_probe(path, gs_endpoint_is_user_socket(path), why, sizeof why)
                           : GS_PROBE_OK;
    if (probe == GS_PROBE_ABSENT) {
        if (!hook_client_sh.decided)
            hook_client_go_ungated("no socket file", RETRY_MS);
        hook_client_io.next_attempt = now + RETRY_MS;
        return;
    }
    if (probe != GS_PROBE_OK) { /* named at once, not after a welcome that cannot come */
        hook_client_go_ungated(why, probe == GS_PROBE_STALE ? RETRY_MS : REFUSED_RETRY_MS);
        return;
    }
    hook_client_io.sock = zmq_socket(hook_client_io.zctx, ZMQ_DEALER);
    if (!hook_client_io.sock) {
        hook_client_go_ungated(zmq_strerror(errno), RETRY_MS);
        return;
    }
    int zero = 0, ivl = DEFAULT_HB_MS, tmo = 3 * DEFAULT_HB_MS, rivl = 100;
    int64_t maxmsg = GS_PROTO_MAX_SIZE; /* a larger frame drops the link, unread */
    zmq_setsockopt(hook_client_io.sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(hook_client_io.sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    zmq_setsockopt(hook_client_io.sock, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(hook_client_io.sock, ZMQ_HEARTBEAT_TIMEOUT, &tmo, sizeof tmo);
    zmq_setsockopt(hook_client_io.sock, ZMQ_RECONNECT_IVL, &rivl, sizeof rivl);
    char monep[96];
    snprintf(monep, sizeof monep, "inproc://gpushare-hook-mon-%d-%u", (int)getpid(),
             ++hook_client_io.mon_n);
    if (zmq_socket_monitor(hook_client_io.sock, monep, ZMQ_EVENT_DISCONNECTED) == 0) {
        hook_client_io.mon = zmq_socket(hook_client_io.zctx, ZMQ_PAIR);
        if (hook_client_io.mon && zmq_connect(hook_client_io.mon, monep) != 0) {
            zmq_close(hook_client_io.mon);
            hook_client_io.mon = NULL;
        }
    }
    if (zmq_connect(hook_client_io.sock, hook_client_sh.endpoint) != 0) {
        snprintf(why, sizeof why, "connect: %s", zmq_strerror(errno));
        hook_client_go_ungated(why, REFUSED_RETRY_MS);
        return;
    }
    send_hello();
    hook_client_io.hello_deadline =
        now + (hook_client_sh.decided ? LATER_WELCOME_MS : FIRST_WELCOME_MS);
}

/* With a seq, so that an unknown_client answer can be told from one to a
 * heartbeat of before the last join; and the epoch the hook believes in. */
void hook_client_send_heartbeat(void)
{
    json_t *m = hook_client_msg_seq(GS_MSG_HEARTBEAT);
    if (m && hook_client_io.epoch > 0)
        json_object_set_new(m, "epoch", json_integer(hook_client_io.epoch));
    hook_client_send(m);
}

/* The broker no longer knows this process (it said so), or may not (the
 * process did not run for longer than the broker waits for a heartbeat):
 * what it granted is gone and another session may hold the GPU now.  The
 * gate closes on every device and what was submitted drains, with no
 * release (the broker has forgotten those grants); what was queued for the
 * old membership is dropped or asked again; the hook joins again, and a
 * grant of the old membership still on its way is refused (epoch 0 until
 * the new join is answered).  New work waits for a grant of the new one. */
void hook_client_rejoin(const char *why)
{
    int drain[HOOK_MAX_DEVICES], ndrain = 0, held = 0;
    pthread_mutex_lock(&hook_gate_mu);
    for (int i = 0; i < hook_client_sh.nreleases; i++)
        json_decref(hook_client_sh.releases[i]); /* they name grants of the old membership */
    hook_client_sh.nreleases = 0;
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        struct hook_dev *d = &hook_gate_st.dev[i];
        if (!d->touched)
            continue;
        held |= d->state == DS_GRANTED || d->state == DS_DRAINING;
        d->given_back_id = 0; /* (a new membership's grants are new ones) */
        if (d->state == DS_GRANTED) {
            d->grant_id = 0; /* nothing to release when the drain is done */
            hook_drain_start_locked(i, DRAIN_REVOKED, 0);
            drain[ndrain++] = i;
        } else if (d->state == DS_DRAINING) {
            d->grant_id = 0;
            d->drain_reason = DRAIN_REVOKED; /* new work must not call it off */
        } else if (d->state == DS_REQUESTED) {
            d->state = DS_WANT; /* asked of the old membership: ask again */
        }
    }
    hook_client_rooms_reask_locked(1, 0); /* asked again after the join */
    hook_gate_update_locked();
    pthread_cond_broadcast(&hook_gate_cv);
    pthread_mutex_unlock(&hook_gate_mu);
    for (int i = 0; i < ndrain; i++)
        hook_drain_now_or_later(drain[i]);
    gs_warn("%s; %s the gpushare broker again", why,
            held ? "the GPU grant is gone: draining and joining" : "joining");
    hook_client_io.epoch = 0;
    hook_client_send_join();
    /* the broker forgot our memory along with the grants */
    hook_mem_mark_all();
    memset(hook_client_io.next_mem, 0, sizeof hook_client_io.next_mem);
}

/* The broker drops a client it has heard nothing from for 3 heartbeat
 * intervals.  When this process has sent nothing for that long (it was
 * stopped: SIGSTOP, a debugger, a frozen cgroup, a swap storm), the broker
 * may have dropped it and granted its GPU to someone else, without a word
 * that could reach it: it fences itself and joins again.  Below the limit
 * the broker cannot have dropped it (it heard from it more recently than
 * the hook last sent). */
void hook_client_check_stall(uint64_t now)
{
    if (!hook_client_io.ready || hook_client_io.epoch <= 0 || hook_client_io.heartbeat_ms <= 0)
        return;
    uint64_t limit = 3 * (uint64_t)hook_client_io.heartbeat_ms;
    if (now - hook_client_io.last_sent <= limit)
        return;
    char why[200];
    snprintf(why, sizeof why,
             "this process did not run for %llu ms (the broker drops a client silent for %llu "
             "ms)",
             (unsigned long long)(now - hook_client_io.last_sent), (unsigned long long)limit);
    hook_client_rejoin(why);
}

void hook_client_on_welcome(const json_t *m, const gs_peer_t *peer)
{
    char why[400];
    if (gs_trust_peer(peer, hook_client_sh.endpoint, why, sizeof why) != 0) {
        hook_client_go_ungated(why, REFUSED_RETRY_MS);
        return;
    }
    hook_client_io.ready = 1;
    /* Before the join: this broker adopts what is still parked, and parks
     * nothing of ours before we joined. */
    hook_restore_stop();
    hook_client_io.heartbeat_ms = (int)gs_msg_int(m, "heartbeat_ms", DEFAULT_HB_MS);
    hook_client_io.next_heartbeat = hook_client_now_ms() + (uint64_t)hook_client_io.heartbeat_ms;
    hook_client_io.epoch = 0; /* a new connection: no membership until the join is answered */
    hook_client_io.last_sent = hook_client_now_ms();
    pthread_mutex_lock(&hook_gate_mu);
    int was_ungated = hook_gate_st.client == CS_UNGATED;
    hook_client_io.was_refused = hook_gate_st.client == CS_REFUSED;
    if (hook_gate_st.client != CS_STOPPED)
        hook_gate_st.client = CS_READY;
    hook_client_sh.decided = 1;
    hook_client_sh.connected = 1;
    /* A (new) broker: no grants yet; whoever waits asks again (in a gang,
     * for all of its GPUs: hook_submit.c waits for them one by one). */
    int gang_waits = 0;
    for (int i = 0; hook_gate_gang && i < HOOK_MAX_DEVICES; i++)
        gang_waits |= hook_gate_st.dev[i].touched && hook_gate_st.dev[i].waiters > 0;
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        struct hook_dev *d = &hook_gate_st.dev[i];
        if (!d->touched)
            continue;
        if (d->state == DS_DRAINING)
            d->drain_gen++; /* its release would name a grant this broker never gave */
        d->state = d->waiters > 0 || gang_waits ? DS_WANT : DS_IDLE;
        d->grant_id = 0;
        d->given_back_id = 0; /* (grant ids are the broker's: a new one starts again) */
    }
    hook_gate_update_locked();
    pthread_cond_broadcast(&hook_gate_cv);
    pthread_mutex_unlock(&hook_gate_mu);
    if (was_ungated)
        gs_info("connected to the gpushare broker at %s; GPU sharing resumed",
                hook_client_sh.endpoint);
    else
        gs_debug("connected to the gpushare broker at %s", hook_client_sh.endpoint);
    hook_client_send_join();
    /* a (new) broker knows nothing of our memory */
    hook_mem_mark_all();
    memset(hook_client_io.next_mem, 0, sizeof hook_client_io.next_mem);
}
