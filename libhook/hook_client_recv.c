/*
 * hook_client_recv.c - what the broker says to the hook's client: grants,
 * revokes, answers and errors, moves and the checkpoint tier's locks, each
 * turned into the gate's state (on the I/O thread).
 */
#include "hook_client_recv.h"
#include "hook_client_impl.h"

#include <stdio.h>
#include <string.h>

#include "hook_client.h"
#include "hook_client_conn.h"
#include "hook_client_room.h"
#include "hook_client_swap.h"
#include "hook_swap.h"
#include "hook_clock.h"
#include "hook_config.h"
#include "hook_drain.h"
#include "log.h"
#include "text_safe.h"

static void on_grant(const json_t *m)
{
    const char *uuid = gs_msg_str(m, "device", "");
    /* Not after a stall the broker may have dropped this process for: the
     * grant may be older than the stall. */
    hook_client_check_stall(hook_client_now_ms());
    /* A grant names the membership it was given to; one without (a broker
     * without epochs) is taken only while no epoch was ever given. */
    long long epoch = gs_msg_int(m, "epoch", 0);
    if (epoch > 0 ? epoch != hook_client_io.epoch : hook_client_io.epoch > 0) {
        gs_debug("grant %lld of epoch %lld refused: this process's membership is %lld "
                 "(a grant of before it joined again)",
                 gs_msg_int(m, "grant_id", 0), epoch, hook_client_io.epoch);
        return;
    }
    pthread_mutex_lock(&hook_gate_mu);
    struct hook_dev *d = hook_gate_dev_by_uuid_locked(uuid);
    if (!d)
        gs_debug("grant for a device this process does not use: %s", uuid);
    else if (d->state == DS_DRAINING)
        gs_debug("grant %lld while draining: ignored", gs_msg_int(m, "grant_id", 0));
    else if (d->state != DS_GRANTED && d->given_back_id &&
             gs_msg_int(m, "grant_id", 0) == d->given_back_id)
        /* Sent again (a new idle release) before the broker had our
         * release: it ran on without the GPU, and, parked on the
         * checkpoint tier meanwhile, called into the locked driver
         * instead of asking first (test_multiuser, once in CI). */
        gs_debug("grant %lld again after it was given back: ignored", d->given_back_id);
    else {
        if (d->state != DS_GRANTED) {
            d->granted_ns = hook_clock_ns();
            d->epoch_start = atomic_fetch_add(&hook_gate_epoch.v, 1) + 1;
            hook_client_io.last_activity = hook_client_now_ms();
        }
        d->state = DS_GRANTED;
        if (d->frozen) { /* granted only where its memory is: restored */
            d->frozen = 0;
            atomic_fetch_sub_explicit(&hook_gate_frozen, 1, memory_order_relaxed);
        }
        d->grant_id = gs_msg_int(m, "grant_id", 0);
        d->quantum_us = gs_msg_int(m, "quantum_us", 0);
        /* While a switch is wanted the broker asks for an idle release
         * sooner than ours (a tenth of what switching this process costs),
         * so that the switch can use the idle gap; a grant sent again with
         * the same grant_id only changes this. */
        long long idle_us = gs_msg_int(m, "idle_release_us", 0);
        d->idle_release_ms = idle_us > 0 ? (unsigned)((idle_us + 999) / 1000) : 0;
        d->wait_warned = 0;
        hook_gate_update_locked();
        pthread_cond_broadcast(&hook_gate_cv);
    }
    pthread_mutex_unlock(&hook_gate_mu);
}

static void on_revoke(const json_t *m)
{
    const char *uuid = gs_msg_str(m, "device", "");
    long long gid = gs_msg_int(m, "grant_id", 0);
    const char *reason = gs_msg_str(m, "reason", "");
    int shutdown = strcmp(reason, "shutdown") == 0;
    int drain_dev = -1;
    pthread_mutex_lock(&hook_gate_mu);
    struct hook_dev *d = hook_gate_dev_by_uuid_locked(uuid);
    if (!d || d->grant_id != gid || (d->state != DS_GRANTED && d->state != DS_DRAINING)) {
        gs_debug("revoke of grant %lld (%s), which this process does not hold: ignored", gid,
                 reason);
    } else if (shutdown) {
        /* The broker is going away: no need to drain for it. */
        hook_client_release_locked(d, "revoked");
        d->state = DS_IDLE;
        d->given_back_id = d->grant_id;
        d->grant_id = 0;
        d->drain_gen++;
    } else if (d->state == DS_DRAINING) {
        d->drain_reason = DRAIN_REVOKED; /* an idle release already under way answers it */
    } else {
        drain_dev = (int)(d - hook_gate_st.dev);
        hook_drain_start_locked(drain_dev, DRAIN_REVOKED, 0);
    }
    pthread_mutex_unlock(&hook_gate_mu);
    if (drain_dev >= 0)
        hook_drain_now_or_later(drain_dev);
    if (shutdown) {
        hook_client_send_pending();
        hook_client_go_ungated("the broker is shutting down", RETRY_MS);
    }
}

static void on_ok(const json_t *m)
{
    long long seq = gs_msg_int(m, "seq", -1);
    if (seq == hook_client_io.join_seq) {
        hook_client_io.epoch = gs_msg_int(m, "epoch", -1);
        if (hook_client_io.was_refused) {
            pthread_mutex_lock(&hook_gate_mu);
            for (int i = 0; i < HOOK_MAX_DEVICES; i++)
                hook_gate_st.dev[i].wait_info[0] = '\0'; /* the refusal is over */
            pthread_mutex_unlock(&hook_gate_mu);
            gs_info("the gpushare broker at %s accepted this process now (session %s); GPU "
                    "sharing resumed",
                    hook_client_sh.endpoint, gs_msg_str(m, "session", "(none)"));
        }
        hook_client_io.was_refused = 0;
        gs_debug("joined session %s (epoch %lld)", gs_msg_str(m, "session", "(none)"),
                 hook_client_io.epoch);
        return;
    }
    const char *info = gs_msg_str(m, "info", NULL);
    if (!info)
        return;
    /* The answer to an acquire that waits: who holds the GPU, and for how
     * long at most (no left_ms: until the holder's cell ends). */
    const char *holder = gs_msg_str(m, "holder", "");
    long long left_ms = gs_msg_int(m, "left_ms", -1);
    uint64_t now = hook_clock_ns();
    pthread_mutex_lock(&hook_gate_mu);
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        struct hook_dev *d = &hook_gate_st.dev[i];
        if (!d->touched || d->acquire_seq != seq)
            continue;
        /* Other users' notebook names: shown on stderr and in the wait
         * line, so without control characters (text_safe.h). */
        gs_text_safe(d->wait_info, sizeof d->wait_info, info);
        gs_text_safe(d->wait_holder, sizeof d->wait_holder, holder);
        d->wait_left_ns = left_ms >= 0 ? now + (uint64_t)left_ms * 1000000ULL : 0;
    }
    pthread_mutex_unlock(&hook_gate_mu);
}

/* An acquire or make_room (request seq) refused as not joined was sent
 * before the latest join: ask again, under the new membership. */
static void ask_again(long long seq)
{
    if (seq < 0)
        return;
    pthread_mutex_lock(&hook_gate_mu);
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        struct hook_dev *d = &hook_gate_st.dev[i];
        if (d->touched && d->state == DS_REQUESTED && d->acquire_seq == seq)
            d->state = DS_WANT;
    }
    hook_client_rooms_reask_locked(0, seq);
    pthread_mutex_unlock(&hook_gate_mu);
    hook_client_kick();
}

/* The error codes of a broker that cannot understand this hook (protocol.h's
 * decoding errors): no broker to speak of, so the hook fails open. */
static int incompatible(const char *code)
{
    static const char *const codes[] = {
        "too_large",       "empty",       "not_json",  "not_object",
        "no_version",      "bad_version", "no_type",   "unknown_type",
        "missing_field",   "wrong_type",  "bad_value", "not_implemented",
        "wrong_direction", NULL};
    for (int i = 0; codes[i]; i++)
        if (strcmp(code, codes[i]) == 0)
            return 1;
    return 0;
}

static void on_error(const json_t *m)
{
    const char *code = gs_msg_str(m, "code", "?");
    const char *text = gs_msg_str(m, "message", "");
    const char *req = gs_msg_str(m, "request_type", "");
    if (strcmp(req, "join") == 0 && strcmp(code, "unknown_session") == 0 &&
        !hook_client_io.join_without_session) {
        gs_warn("the broker does not know session %s; joining without it", hook_cfg.session);
        hook_client_io.join_without_session = 1;
        hook_client_send_join();
        return;
    }
    /* The broker dropped this process: join again, unless the request
     * was sent before the latest join (its answer is old news: ask again).
     * Errors to messages without seq (memory, release) cannot be told
     * apart: the next heartbeat, which has one, is answered the same.  A
     * broker without epochs (hook_client_io.epoch -1) is left to the old ways. */
    if ((strcmp(code, "unknown_client") == 0 || strcmp(code, "not_joined") == 0) &&
        strcmp(req, "join") != 0 && hook_client_io.epoch != -1) {
        long long seq = gs_msg_int(m, "seq", -1);
        if (seq > hook_client_io.join_seq) {
            char why[400];
            snprintf(why, sizeof why, "the broker answered %s with %s: %s", req, code, text);
            hook_client_rejoin(why);
        } else {
            gs_debug("broker error %s to %s: %s (sent before the last join)", code, req, text);
            ask_again(seq);
        }
        return;
    }
    int entry = strcmp(req, "hello") == 0 || strcmp(req, "join") == 0;
    if (entry && !incompatible(code)) {
        char why[400];
        snprintf(why, sizeof why, "%s: %s: %s", req, code, text);
        hook_client_go_refused(why, REFUSED_RETRY_MS);
        return;
    }
    if (entry || strcmp(req, "acquire") == 0) {
        char why[400];
        snprintf(why, sizeof why, "it refused %s: %s: %s", req, code, text);
        hook_client_go_ungated(why, REFUSED_RETRY_MS);
        return;
    }
    if (strcmp(req, "make_room") == 0) {
        char why[300];
        snprintf(why, sizeof why, "the broker refused make_room: %s: %s", code, text);
        hook_client_room_answered(gs_msg_int(m, "seq", -1), 0, why);
        return;
    }
    gs_debug("broker error %s: %s", code, text);
}

/* The broker restored this (checkpointed) process onto another GPU: the
 * device keeps its ordinal, and the driver names it by the new UUID from
 * now on.  The hook names it so too and joins again with the new list, so
 * that the broker forgets what it knew of this process on the old GPU. */
static void on_moved(const json_t *m)
{
    const char *from = gs_msg_str(m, "device", ""), *to = gs_msg_str(m, "to", "");
    int found = 0;
    pthread_mutex_lock(&hook_gate_mu);
    for (int i = 0; i < HOOK_MAX_DEVICES && to[0]; i++) {
        struct hook_dev *d = &hook_gate_st.dev[i];
        if (d->uuid[0] && strcmp(d->uuid, from) == 0) {
            snprintf(d->uuid, sizeof d->uuid, "%s", to);
            found = 1;
        }
    }
    pthread_mutex_unlock(&hook_gate_mu);
    if (!found) {
        gs_debug("moved from %s, which this process does not use: ignored", from);
        return;
    }
    gs_info("this process runs on GPU %s now (the broker moved it there from %s)", to, from);
    hook_client_rejoin("it was moved to another GPU");
}

/* The checkpoint tier locks this process (or restored it): while frozen
 * every interposed call asks for the GPU before it calls the driver
 * (hook_submit_unfrozen).  A thread already in the gate's driver calls when
 * the lock came waits there, below the hook: the GPU is asked for on its
 * behalf. */
static void on_frozen(const json_t *m)
{
    const char *uuid = gs_msg_str(m, "device", "");
    int frozen = gs_msg_bool(m, "frozen", 0), ask = 0;
    pthread_mutex_lock(&hook_gate_mu);
    struct hook_dev *d = hook_gate_dev_by_uuid_locked(uuid);
    if (d && d->frozen != frozen) {
        d->frozen = frozen;
        atomic_fetch_add_explicit(&hook_gate_frozen, frozen ? 1 : -1, memory_order_relaxed);
        if (frozen && d->state == DS_IDLE &&
            atomic_load_explicit(&hook_gate_probing, memory_order_relaxed) > 0) {
            d->state = DS_WANT;
            d->wait_since_ns = hook_clock_ns();
            ask = 1;
        }
        pthread_cond_broadcast(&hook_gate_cv);
    }
    pthread_mutex_unlock(&hook_gate_mu);
    if (!d)
        gs_debug("frozen for a device this process does not use: %s", uuid);
    else if (frozen)
        gs_info("parked on the checkpoint tier: the next CUDA call asks for the GPU first%s",
                ask ? " (one waits already)" : "");
    if (ask)
        hook_client_kick();
}

void hook_client_on_message(const void *data, size_t size, const gs_peer_t *peer)
{
    gs_perr_t err;
    gs_msg_type_t type;
    json_t *m = gs_msg_parse(data, size, &type, &err);
    if (!m) {
        gs_debug("unreadable message from the broker: %s", err.text);
        return;
    }
    if (gs_log_enabled(GS_LOG_DEBUG))
        gs_debug("<- %.*s", (int)(size > 300 ? 300 : size), (const char *)data);
    switch (type) {
    case GS_MSG_WELCOME:
        hook_client_on_welcome(m, peer);
        break;
    case GS_MSG_GRANT:
        if (hook_client_io.ready)
            on_grant(m);
        break;
    case GS_MSG_REVOKE:
        if (hook_client_io.ready)
            on_revoke(m);
        break;
    case GS_MSG_OK:
        on_ok(m);
        break;
    case GS_MSG_ROOM:
        if (hook_client_io.ready)
            hook_client_room_on_reply(m);
        break;
    case GS_MSG_ERROR:
        on_error(m);
        break;
    case GS_MSG_SWAP_OUT:
    case GS_MSG_SWAP_IN:
    case GS_MSG_SWAP_DROP:
        if (hook_client_io.ready)
            hook_client_swap_on_command(m, type == GS_MSG_SWAP_OUT    ? HOOK_SWAP_OUT
                                           : type == GS_MSG_SWAP_DROP ? HOOK_SWAP_DROP
                                                                      : HOOK_SWAP_IN);
        break;
    case GS_MSG_MOVED:
        if (hook_client_io.ready)
            on_moved(m);
        break;
    case GS_MSG_FROZEN:
        if (hook_client_io.ready)
            on_frozen(m);
        break;
    default:
        gs_debug("ignoring %s from the broker", gs_msg_type_name(type));
    }
    json_decref(m);
}
