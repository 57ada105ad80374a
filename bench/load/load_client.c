/*
 * load_client.c - one simulated hook (load.h): a DEALER socket of its own,
 * so that the broker sees one connection, one routing id and one client
 * per simulated process, exactly as it sees the hook's.
 *
 *   hello -> welcome -> join -> ok (epoch) [-> memory]
 *   then, while the storm lasts:
 *   acquire -> (ok "held by ...") -> grant -> hold -> release (idle)
 *                                           revoke -> release (revoked)
 *   heartbeats every heartbeat_ms with the epoch, as the hook sends them;
 *   at the end: release with reason "exit", which makes the broker forget
 *   the client at once (its last grant, or none).
 *
 * A grant is taken only when it answers the pending acquire and carries
 * the client's epoch, as the hook does; anything else counts as stale.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "load.h"
#include "wire.h"

#define SEC           1000000LL
#define SETUP_TIMEOUT (60 * SEC) /* welcome and join's answer, under 1000 at once */

static int64_t uniform(load_client_t *c, int64_t max)
{
    if (max <= 0)
        return 0;
    return (int64_t)(rand_r(&c->rng) % (unsigned)(max + 1));
}

static int measuring(const load_shared_t *sh)
{
    return atomic_load(&sh->phase) == LOAD_MEASURE;
}

/* Sends msg (consumed) with the next seq; returns that seq. */
static long long send_msg(load_client_t *c, load_shared_t *sh, load_counters_t *k, json_t *msg,
                          gs_msg_type_t type)
{
    long long seq = ++c->seq;
    json_object_set_new(msg, "seq", json_integer(seq));
    gs_perr_t err;
    if (gs_wire_send(c->sock, NULL, msg, &err) != 0)
        load_counters_error(k, "send_failed", err.code ? err.text : zmq_strerror(zmq_errno()));
    else {
        k->sent[type]++;
        k->measured_msgs += measuring(sh);
    }
    json_decref(msg);
    return seq;
}

static json_t *device_msg(gs_msg_type_t type, const load_config_t *cfg)
{
    json_t *m = gs_msg_new(type);
    json_object_set_new(m, "device", json_string(cfg->gpu));
    return m;
}

int load_client_open(load_client_t *c, const load_config_t *cfg, int index)
{
    memset(c, 0, sizeof *c);
    c->index = index;
    c->rng = cfg->seed * 2654435761u + (unsigned)index;
    snprintf(c->session, sizeof c->session, "load-%d", index % cfg->sessions);
    c->sock = zsock_new(ZMQ_DEALER);
    if (!c->sock)
        return -1;
    zsock_set_linger(c->sock, 0);
    zsock_set_rcvtimeo(c->sock, 0); /* reads only what zmq_poll said is there */
    zsock_set_sndhwm(c->sock, 0);   /* at most a few messages are ever in flight */
    zsock_set_rcvhwm(c->sock, 0);
    zsock_set_maxmsgsize(c->sock, GS_PROTO_MAX_SIZE);
    if (zsock_connect(c->sock, "%s", cfg->endpoint) != 0) {
        zsock_destroy(&c->sock);
        return -1;
    }
    c->st = LC_HELLO;
    return 0;
}

void load_client_close(load_client_t *c)
{
    zsock_destroy(&c->sock);
}

static void fail(load_client_t *c, load_shared_t *sh, load_counters_t *k, const char *code,
                 const char *text)
{
    load_counters_error(k, code, text);
    if (c->st == LC_HELLO || c->st == LC_JOIN)
        atomic_fetch_add(&sh->joined, 1); /* the controller waits for nobody else */
    c->st = LC_DONE;
    atomic_fetch_add(&sh->done, 1);
}

/* Leaves for good: the broker forgets a client whose release says "exit"
 * and that holds no grant. */
static void leave(load_client_t *c, load_shared_t *sh, load_counters_t *k)
{
    const load_config_t *cfg = sh->cfg;
    json_t *r = device_msg(GS_MSG_RELEASE, cfg);
    long long id = c->st == LC_HOLDING ? c->grant_id : c->last_grant_id ? c->last_grant_id : 1;
    json_object_set_new(r, "grant_id", json_integer(id));
    json_object_set_new(r, "reason", json_string("exit"));
    send_msg(c, sh, k, r, GS_MSG_RELEASE);
    k->releases++;
    c->st = LC_DONE;
    atomic_fetch_add(&sh->done, 1);
}

static void release(load_client_t *c, load_shared_t *sh, load_counters_t *k, const char *reason,
                    int64_t now)
{
    json_t *r = device_msg(GS_MSG_RELEASE, sh->cfg);
    json_object_set_new(r, "grant_id", json_integer(c->grant_id));
    json_object_set_new(r, "reason", json_string(reason));
    json_object_set_new(r, "used_us", json_integer(now - c->granted_at));
    send_msg(c, sh, k, r, GS_MSG_RELEASE);
    k->releases++;
    c->last_grant_id = c->grant_id;
    c->grant_id = 0;
    c->st = LC_IDLE;
    c->due = now + uniform(c, sh->cfg->think_us);
}

static void on_welcome(load_client_t *c, load_shared_t *sh, load_counters_t *k, const json_t *msg,
                       int64_t now)
{
    c->heartbeat_us = gs_msg_int(msg, "heartbeat_ms", 1000) * 1000;
    c->heartbeat_at = now + c->heartbeat_us;
    json_t *j = gs_msg_new(GS_MSG_JOIN);
    json_object_set_new(j, "pid", json_integer(getpid()));
    json_object_set_new(j, "session", json_string(c->session));
    json_object_set_new(j, "devices", json_pack("[s]", sh->cfg->gpu));
    c->acquire_seq = send_msg(c, sh, k, j, GS_MSG_JOIN); /* the join's seq, until acquires */
    c->st = LC_JOIN;
}

static void on_joined(load_client_t *c, load_shared_t *sh, load_counters_t *k, const json_t *msg,
                      int64_t now)
{
    c->epoch = gs_msg_int(msg, "epoch", 0);
    if (sh->cfg->memory) {
        json_t *m = device_msg(GS_MSG_MEMORY, sh->cfg);
        json_object_set_new(m, "used_bytes", json_integer((json_int_t)sh->cfg->memory));
        send_msg(c, sh, k, m, GS_MSG_MEMORY);
    }
    c->st = LC_IDLE;
    c->due = now;
    atomic_fetch_add(&sh->joined, 1);
}

static void on_grant(load_client_t *c, load_shared_t *sh, load_counters_t *k, const json_t *msg,
                     int64_t now)
{
    long long epoch = gs_msg_int(msg, "epoch", 0), seq = gs_msg_int(msg, "seq", -1);
    if (c->st != LC_WAITING || (epoch && epoch != c->epoch) ||
        (seq >= 0 && seq != c->acquire_seq)) {
        k->stale++; /* the hook would refuse it too */
        return;
    }
    if (c->measured)
        load_hist_add(&k->latency, now - c->asked_at);
    k->grants++;
    k->grants_measured += c->measured;
    if (++c->grants == (uint64_t)sh->cfg->warmup_grants)
        atomic_fetch_add(&sh->warmed, 1);
    c->grant_id = gs_msg_int(msg, "grant_id", 0);
    c->granted_at = now;
    c->st = LC_HOLDING;
    c->due = now + uniform(c, sh->cfg->hold_us);
}

static void on_message(load_client_t *c, load_shared_t *sh, load_counters_t *k, gs_msg_type_t type,
                       const json_t *msg, int64_t now)
{
    switch (type) {
    case GS_MSG_WELCOME:
        if (c->st == LC_HELLO)
            on_welcome(c, sh, k, msg, now);
        break;
    case GS_MSG_OK:
        /* The join's answer; otherwise an acquire's "held by ..." */
        if (c->st == LC_JOIN && gs_msg_int(msg, "seq", -1) == c->acquire_seq)
            on_joined(c, sh, k, msg, now);
        break;
    case GS_MSG_GRANT:
        on_grant(c, sh, k, msg, now);
        break;
    case GS_MSG_REVOKE:
        /* A revoke of a grant released meanwhile needs no answer. */
        k->revokes++;
        if (c->st == LC_HOLDING && gs_msg_int(msg, "grant_id", 0) == c->grant_id)
            release(c, sh, k, "revoked", now);
        break;
    case GS_MSG_ERROR:
        if (c->st == LC_HELLO || c->st == LC_JOIN)
            fail(c, sh, k, gs_msg_str(msg, "code", "?"), gs_msg_str(msg, "message", ""));
        else
            load_counters_error(k, gs_msg_str(msg, "code", "?"), gs_msg_str(msg, "message", ""));
        break;
    default:
        break;
    }
}

void load_client_read(load_client_t *c, load_shared_t *sh, load_counters_t *k, int64_t now)
{
    while (c->st != LC_DONE) {
        gs_msg_type_t type;
        gs_perr_t err;
        json_t *msg = gs_wire_recv(c->sock, NULL, &type, &err, NULL, NULL);
        if (!msg) {
            if (err.code == GS_PERR_NONE)
                return; /* nothing more queued */
            k->bad_frame++;
            load_counters_error(k, "bad_frame", err.text);
            continue;
        }
        k->received[type]++;
        k->measured_msgs += measuring(sh);
        on_message(c, sh, k, type, msg, now);
        json_decref(msg);
    }
}

int64_t load_client_tick(load_client_t *c, load_shared_t *sh, load_counters_t *k, int64_t now)
{
    int phase = atomic_load(&sh->phase);
    if (c->st == LC_DONE)
        return INT64_MAX;
    if (c->st == LC_HELLO || c->st == LC_JOIN) {
        if (c->st == LC_HELLO && !c->seq) {
            json_t *h = gs_msg_new(GS_MSG_HELLO);
            json_object_set_new(h, "role", json_string("hook"));
            json_object_set_new(h, "pid", json_integer(getpid()));
            send_msg(c, sh, k, h, GS_MSG_HELLO);
            c->due = now + SETUP_TIMEOUT;
        } else if (now >= c->due || phase == LOAD_STOP)
            fail(c, sh, k, "timeout", c->st == LC_HELLO ? "no welcome" : "no answer to join");
        return c->due;
    }
    if (now >= c->heartbeat_at) {
        json_t *h = gs_msg_new(GS_MSG_HEARTBEAT);
        json_object_set_new(h, "epoch", json_integer(c->epoch));
        send_msg(c, sh, k, h, GS_MSG_HEARTBEAT);
        c->heartbeat_at = now + c->heartbeat_us;
    }
    if (c->st == LC_HOLDING && (phase >= LOAD_DRAIN || now >= c->due)) {
        if (phase >= LOAD_DRAIN) {
            leave(c, sh, k); /* gives the grant back and goes */
            return INT64_MAX;
        }
        release(c, sh, k, "idle", now);
    }
    if (c->st == LC_IDLE && phase >= LOAD_DRAIN) {
        leave(c, sh, k);
        return INT64_MAX;
    }
    if (c->st == LC_WAITING && phase == LOAD_STOP) {
        leave(c, sh, k); /* its grant did not come within the drain */
        return INT64_MAX;
    }
    if (c->st == LC_IDLE && phase >= LOAD_WARMUP && now >= c->due) {
        c->acquire_seq = send_msg(c, sh, k, device_msg(GS_MSG_ACQUIRE, sh->cfg), GS_MSG_ACQUIRE);
        c->asked_at = now;
        c->measured = phase == LOAD_MEASURE;
        c->st = LC_WAITING;
    }
    int64_t next = c->heartbeat_at;
    int timed = c->st == LC_HOLDING || (c->st == LC_IDLE && phase >= LOAD_WARMUP);
    if (timed && c->due < next)
        next = c->due;
    return next;
}
