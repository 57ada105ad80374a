/*
 * hook_client.c - talking to the broker: one I/O thread owning one DEALER
 * socket.
 *
 * libzmq is used directly, not czmq: czmq installs SIGINT/SIGTERM handlers
 * and atexit hooks in the host program, which would break ipykernel's
 * interrupt handling.  Other threads never touch the socket: they change the
 * shared state under hook_gate_mu (a device wants the GPU, a release is
 * due) and wake this thread through an eventfd it polls next to the socket.
 * All messages are built and parsed by common/protocol.c.
 *
 * The client calls the gate, the drains and the memory accounting, never
 * the other way round: a finished drain and a changed footprint reach it
 * through the functions it registers when it starts (drained_locked,
 * hook_client_kick).
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
 * line says why) and asks again every few seconds (go_refused).  Only
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
#define _GNU_SOURCE
#include "config.h"
#include "hook_client.h"
#include "hook_swap.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "endpoint.h"
#include "hook_burst.h"
#include "hook_clock.h"
#include "hook_config.h"
#include "hook_cuctx.h"
#include "hook_drain.h"
#include "hook_mem.h"
#include "hook_place.h"
#include "hook_restore.h"
#include "hook_thread.h"
#include "hook_wait.h"
#include "gs_assert.h"
#include "log.h"
#include "protocol.h"
#include "socket_trust.h"
#include "text_safe.h"

#define FIRST_WELCOME_MS 200  /* the first attempt decides: gated or fail open */
#define LATER_WELCOME_MS 2000 /* background attempts wait longer before retrying */
#define RETRY_MS         250
#define REFUSED_RETRY_MS 5000
#define DEFAULT_HB_MS    1000
#define EXIT_FLUSH_MS    200
#define EXIT_WAIT_MS     500
#define MAX_RELEASES     (2 * HOOK_MAX_DEVICES)
#define RECOVER_WAIT_MS  1000 /* without a broker: wait this long for memory, then retry */
#define MEM_REPORT_MS    50   /* at most one memory message per device this often */

/* An allocation waiting for the broker to make room (on its thread's
 * stack, listed under hook_gate_mu). */
struct room_req {
    int dev;
    uint64_t bytes;
    unsigned timeout_ms; /* told to the broker: it says why we wait, and answers before */
    long long seq;       /* 0: not sent yet */
    int done, ok;
    char reason[256];
    struct room_req *next;
};

/* Shared with other threads, under hook_gate_mu. */
static struct {
    int started;
    pid_t pid; /* process that started the thread */
    int efd;
    int stopping;
    int io_done;
    int decided;   /* the first attempt ended (READY or UNGATED) */
    int connected; /* welcomed by the broker on the current socket */
    char endpoint[512];
    json_t *releases[MAX_RELEASES];
    int nreleases;
    json_t *reports[HOOK_MAX_DEVICES]; /* `swapped`, from the swap thread */
    int nreports;
    struct room_req *rooms;
} sh = {.efd = -1};

/* Owned by the I/O thread. */
static struct {
    void *zctx, *sock, *mon;
    int ready;
    unsigned mon_n;
    long long seq;
    long long join_seq;
    int join_without_session;
    int was_refused; /* the broker refused this process before this welcome */
    int heartbeat_ms;
    /* The membership of the last join, from its answer: 0 until then (a
     * grant is refused meanwhile), -1 when the broker gives none (older
     * brokers: no fencing). */
    long long epoch;
    uint64_t last_sent; /* when the broker was last sent anything (ms) */
    uint64_t hello_deadline, next_attempt, next_heartbeat, next_idle_tick, last_activity;
    uint64_t next_mem[HOOK_MAX_DEVICES]; /* earliest time of the next memory message */
    int lost_reported;
} io;

static uint64_t now_ms(void)
{
    return hook_clock_ns() / 1000000ULL;
}

const char *hook_client_ipc_path(void)
{
    return sh.endpoint[0] ? gs_endpoint_ipc_path(sh.endpoint) : NULL;
}

void hook_client_kick(void)
{
    int fd = sh.efd;
    if (fd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(fd, &one, sizeof one);
        (void)w;
    }
}

/* ---- messages ----------------------------------------------------------- */

static void send_msg(json_t *m)
{
    if (!m)
        return;
    gs_perr_t err;
    size_t len;
    char *buf = gs_msg_encode(m, &len, &err);
    if (!buf)
        gs_error("internal: cannot encode a message: %s", err.text);
    else {
        if (gs_log_enabled(GS_LOG_DEBUG))
            gs_debug("-> %s", buf);
        if (io.sock && zmq_send(io.sock, buf, len, ZMQ_DONTWAIT) < 0)
            gs_debug("send failed: %s", zmq_strerror(errno));
        else if (io.sock)
            io.last_sent = now_ms(); /* the broker's silence clock starts again */
        free(buf);
    }
    json_decref(m);
}

static json_t *msg_seq(gs_msg_type_t type)
{
    json_t *m = gs_msg_new(type);
    if (m)
        json_object_set_new(m, "seq", json_integer(++io.seq));
    return m;
}

static void send_hello(void)
{
    json_t *m = msg_seq(GS_MSG_HELLO);
    if (!m)
        return;
    hook_place_hello_fill(m, hook_cfg.session, 0);
    send_msg(m);
}

static void send_join(void)
{
    json_t *m = msg_seq(GS_MSG_JOIN);
    if (!m)
        return;
    io.join_seq = io.seq;
    json_object_set_new(m, "pid", json_integer(getpid()));
    if (hook_cfg.session[0] && !io.join_without_session)
        json_object_set_new(m, "session", json_string(hook_cfg.session));
    json_t *devs = json_array();
    pthread_mutex_lock(&hook_gate_mu);
    for (int i = 0; i < hook_gate_st.ndev && i < GS_PROTO_MAX_ITEMS; i++)
        json_array_append_new(devs, json_string(hook_gate_st.dev[i].uuid));
    pthread_mutex_unlock(&hook_gate_mu);
    json_object_set_new(m, "devices", devs);
    json_object_set_new(m, "memory_mode", json_string(hook_cfg.managed ? "managed" : "device"));
    if (!hook_cfg.managed && hook_swap_available()) {
        json_object_set_new(m, "swap", json_true());
        json_object_set_new(m, "swap_segment_bytes",
                            json_integer((json_int_t)hook_swap_segment_bytes()));
    }
    if (hook_gate_gang) /* a broker restarted since the placement learns it here */
        json_object_set_new(m, "gang", json_true());
    send_msg(m);
}

/* hook_gate_mu held.  Queued; sent by the I/O thread when connected, dropped
 * when not (a new broker knows nothing of old grants). */
void hook_client_release_locked(struct hook_dev *d, const char *reason)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    if (!sh.connected || d->grant_id < 1 || sh.nreleases >= MAX_RELEASES)
        return;
    json_t *m = gs_msg_new(GS_MSG_RELEASE);
    if (!m)
        return;
    uint64_t used_us = (hook_clock_ns() - d->granted_ns) / 1000ULL;
    json_object_set_new(m, "device", json_string(d->uuid));
    json_object_set_new(m, "grant_id", json_integer(d->grant_id));
    json_object_set_new(m, "reason", json_string(reason));
    json_object_set_new(m, "used_us", json_integer((json_int_t)used_us));
    uint64_t q = d->quantum_us > 0 ? (uint64_t)d->quantum_us : 0;
    json_object_set_new(m, "overuse_us",
                        json_integer(q && used_us > q ? (json_int_t)(used_us - q) : 0));
    sh.releases[sh.nreleases++] = m;
}

/* Releases queued, then acquires for devices someone waits for. */
static void send_pending(void)
{
    json_t *out[MAX_RELEASES + HOOK_MAX_DEVICES];
    int n = 0;
    json_t *reports[HOOK_MAX_DEVICES];
    int nrep = 0;
    pthread_mutex_lock(&hook_gate_mu);
    for (int i = 0; i < sh.nreports; i++)
        reports[nrep++] = sh.reports[i];
    sh.nreports = 0;
    for (int i = 0; i < sh.nreleases; i++)
        out[n++] = sh.releases[i];
    sh.nreleases = 0;
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        struct hook_dev *d = &hook_gate_st.dev[i];
        if (!d->touched || d->state != DS_WANT)
            continue;
        json_t *m = msg_seq(GS_MSG_ACQUIRE);
        if (!m)
            continue;
        json_object_set_new(m, "device", json_string(d->uuid));
        long long p90, last;
        if (hook_burst_stats(i, &p90, &last)) { /* bmu is a leaf lock */
            json_object_set_new(m, "burst_p90_us", json_integer(p90));
            json_object_set_new(m, "burst_last_us", json_integer(last));
        }
        d->state = DS_REQUESTED;
        d->acquire_seq = io.seq;
        d->wait_info[0] = 0;
        d->wait_holder[0] = 0;
        d->wait_left_ns = 0;
        out[n++] = m;
    }
    for (struct room_req *q = sh.rooms; q && n < (int)(sizeof out / sizeof out[0]); q = q->next) {
        if (q->seq || q->done)
            continue;
        json_t *m = msg_seq(GS_MSG_MAKE_ROOM);
        if (!m)
            continue;
        json_object_set_new(m, "device", json_string(hook_gate_st.dev[q->dev].uuid));
        json_object_set_new(m, "bytes", json_integer((json_int_t)(q->bytes ? q->bytes : 1)));
        json_object_set_new(m, "timeout_ms", json_integer((json_int_t)q->timeout_ms));
        q->seq = io.seq;
        out[n++] = m;
    }
    pthread_mutex_unlock(&hook_gate_mu);
    for (int i = 0; i < nrep; i++)
        send_msg(reports[i]);
    for (int i = 0; i < n; i++)
        send_msg(out[i]);
}

/* The footprint of each device that changed, at most every MEM_REPORT_MS
 * per device (the latest value; changes in between are coalesced).
 * Returns when the next one may go (0: none pending). */
static uint64_t send_memory(uint64_t now)
{
    uint64_t mask = hook_mem_changed_mask(), wake = 0;
    for (int i = 0; mask && i < HOOK_MAX_DEVICES; i++) {
        if (!(mask & (1ULL << i)))
            continue;
        if (now < io.next_mem[i]) {
            if (!wake || io.next_mem[i] < wake)
                wake = io.next_mem[i];
            continue;
        }
        char uuid[HOOK_UUID_LEN];
        pthread_mutex_lock(&hook_gate_mu);
        int known = hook_gate_st.dev[i].touched;
        memcpy(uuid, hook_gate_st.dev[i].uuid, sizeof uuid);
        pthread_mutex_unlock(&hook_gate_mu);
        if (!known)
            continue; /* stays marked until the device is touched */
        uint64_t used, managed, peak;
        if (!hook_mem_take(i, &used, &managed, &peak))
            continue;
        json_t *m = gs_msg_new(GS_MSG_MEMORY);
        if (!m)
            continue;
        json_object_set_new(m, "device", json_string(uuid));
        json_object_set_new(m, "used_bytes", json_integer((json_int_t)used));
        json_object_set_new(m, "managed_bytes", json_integer((json_int_t)managed));
        json_object_set_new(m, "peak_bytes", json_integer((json_int_t)peak));
        uint64_t movable, swapped;
        hook_swap_totals(i, &movable, &swapped);
        if (movable || swapped) {
            json_object_set_new(m, "movable_bytes", json_integer((json_int_t)movable));
            json_object_set_new(m, "swapped_bytes", json_integer((json_int_t)swapped));
        }
        send_msg(m);
        io.next_mem[i] = now + MEM_REPORT_MS;
    }
    return wake;
}

/* hook_gate_mu held: every request waiting for a room reply gets none. */
static void rooms_fail_locked(const char *why)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    for (struct room_req *q = sh.rooms; q; q = q->next)
        if (!q->done) {
            q->done = 1;
            q->ok = 0;
            snprintf(q->reason, sizeof q->reason, "%s", why);
        }
    pthread_cond_broadcast(&hook_gate_cv);
}

int hook_client_make_room(int dev, uint64_t bytes, unsigned timeout_ms, char *reason,
                          size_t reason_len)
{
    if (reason_len)
        reason[0] = 0;
    if (dev < 0 || dev >= HOOK_MAX_DEVICES || !timeout_ms)
        return 0;
    struct room_req q = {.dev = dev, .bytes = bytes, .timeout_ms = timeout_ms};
    uint64_t deadline = hook_clock_ns() + (uint64_t)timeout_ms * 1000000ULL;
    struct timespec ts = {(time_t)(deadline / 1000000000ULL), (long)(deadline % 1000000000ULL)};
    int timed_out = 0;
    pthread_mutex_lock(&hook_gate_mu);
    /* the first connection attempt decides within ~200 ms (no socket file:
     * at once) */
    while (hook_gate_st.client == CS_CONNECTING && !timed_out)
        timed_out = pthread_cond_timedwait(&hook_gate_cv, &hook_gate_mu, &ts) == ETIMEDOUT;
    if (hook_gate_st.client != CS_READY || !sh.connected || sh.stopping ||
        !hook_gate_st.dev[dev].touched) {
        pthread_mutex_unlock(&hook_gate_mu); /* no broker: the program gets its error at once */
        return 0;
    }
    q.next = sh.rooms;
    sh.rooms = &q;
    hook_wait_room_enter_locked(&hook_gate_st.dev[dev], bytes);
    pthread_mutex_unlock(&hook_gate_mu);
    hook_client_kick();
    pthread_mutex_lock(&hook_gate_mu);
    while (!q.done && !timed_out)
        timed_out = pthread_cond_timedwait(&hook_gate_cv, &hook_gate_mu, &ts) == ETIMEDOUT;
    for (struct room_req **pp = &sh.rooms; *pp; pp = &(*pp)->next)
        if (*pp == &q) {
            *pp = q.next;
            break;
        }
    if (!q.done)
        snprintf(q.reason, sizeof q.reason, "the broker did not answer within %u ms", timeout_ms);
    /* The wait line's summary says why the allocation failed. */
    snprintf(hook_gate_st.dev[dev].room_error, sizeof hook_gate_st.dev[dev].room_error, "%s",
             q.done && q.ok ? "" : q.reason);
    hook_wait_room_leave_locked(&hook_gate_st.dev[dev]);
    pthread_mutex_unlock(&hook_gate_mu);
    if (reason_len)
        snprintf(reason, reason_len, "%s", q.reason);
    return q.done && q.ok;
}

/* ---- connection state --------------------------------------------------- */

static void close_socket(void)
{
    if (io.sock) {
        zmq_socket_monitor(io.sock, NULL, 0);
        zmq_close(io.sock);
        io.sock = NULL;
    }
    if (io.mon) {
        zmq_close(io.mon);
        io.mon = NULL;
    }
    io.ready = 0;
}

/* No broker: one warning per transition, then ungated. */
/* The connection is gone (no broker, or one that refused this process):
 * the client's new state, what waited to be sent dropped, waiting room
 * requests failed with why. */
static void disconnected_locked(enum hook_client_state state, const char *why)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    sh.connected = 0;
    if (hook_gate_st.client != CS_STOPPED)
        hook_gate_st.client = state;
    sh.decided = 1;
    for (int i = 0; i < sh.nreleases; i++)
        json_decref(sh.releases[i]);
    sh.nreleases = 0;
    for (int i = 0; i < sh.nreports; i++)
        json_decref(sh.reports[i]);
    sh.nreports = 0;
    rooms_fail_locked(why);
}

static void go_ungated(const char *why, uint64_t retry_in_ms)
{
    int was_ready = io.ready;
    close_socket();
    io.next_attempt = now_ms() + retry_in_ms;
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
                    sh.endpoint, why);
        else
            gs_warn("no gpushare broker at %s (%s); running without GPU sharing", sh.endpoint, why);
    }
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

/* A broker that answers refused this process: gated, nothing granted, said
 * once per refusal, asked again in retry_in_ms (see the top of the file). */
static void go_refused(const char *why, uint64_t retry_in_ms)
{
    close_socket();
    io.next_attempt = now_ms() + retry_in_ms;
    pthread_mutex_lock(&hook_gate_mu);
    /* (asked again, it was READY for a moment: its welcome) */
    int warn = hook_gate_st.client != CS_REFUSED && !io.was_refused;
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
                 sh.endpoint, why, (unsigned long long)(retry_in_ms / 1000));
}

static void open_socket(void)
{
    const char *path = gs_endpoint_ipc_path(sh.endpoint);
    uint64_t now = now_ms();
    char why[600];
    gs_probe_t probe = path
                           ? gs_trust_probe(path, gs_endpoint_is_user_socket(path), why, sizeof why)
                           : GS_PROBE_OK;
    if (probe == GS_PROBE_ABSENT) {
        if (!sh.decided)
            go_ungated("no socket file", RETRY_MS);
        io.next_attempt = now + RETRY_MS;
        return;
    }
    if (probe != GS_PROBE_OK) { /* named at once, not after a welcome that cannot come */
        go_ungated(why, probe == GS_PROBE_STALE ? RETRY_MS : REFUSED_RETRY_MS);
        return;
    }
    io.sock = zmq_socket(io.zctx, ZMQ_DEALER);
    if (!io.sock) {
        go_ungated(zmq_strerror(errno), RETRY_MS);
        return;
    }
    int zero = 0, ivl = DEFAULT_HB_MS, tmo = 3 * DEFAULT_HB_MS, rivl = 100;
    int64_t maxmsg = GS_PROTO_MAX_SIZE; /* a larger frame drops the link, unread */
    zmq_setsockopt(io.sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(io.sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    zmq_setsockopt(io.sock, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(io.sock, ZMQ_HEARTBEAT_TIMEOUT, &tmo, sizeof tmo);
    zmq_setsockopt(io.sock, ZMQ_RECONNECT_IVL, &rivl, sizeof rivl);
    char monep[96];
    snprintf(monep, sizeof monep, "inproc://gpushare-hook-mon-%d-%u", (int)getpid(), ++io.mon_n);
    if (zmq_socket_monitor(io.sock, monep, ZMQ_EVENT_DISCONNECTED) == 0) {
        io.mon = zmq_socket(io.zctx, ZMQ_PAIR);
        if (io.mon && zmq_connect(io.mon, monep) != 0) {
            zmq_close(io.mon);
            io.mon = NULL;
        }
    }
    if (zmq_connect(io.sock, sh.endpoint) != 0) {
        snprintf(why, sizeof why, "connect: %s", zmq_strerror(errno));
        go_ungated(why, REFUSED_RETRY_MS);
        return;
    }
    send_hello();
    io.hello_deadline = now + (sh.decided ? LATER_WELCOME_MS : FIRST_WELCOME_MS);
}

/* With a seq, so that an unknown_client answer can be told from one to a
 * heartbeat of before the last join; and the epoch the hook believes in. */
static void send_heartbeat(void)
{
    json_t *m = msg_seq(GS_MSG_HEARTBEAT);
    if (m && io.epoch > 0)
        json_object_set_new(m, "epoch", json_integer(io.epoch));
    send_msg(m);
}

/* The broker no longer knows this process (it said so), or may not (the
 * process did not run for longer than the broker waits for a heartbeat):
 * what it granted is gone and another session may hold the GPU now.  The
 * gate closes on every device and what was submitted drains, with no
 * release (the broker has forgotten those grants); what was queued for the
 * old membership is dropped or asked again; the hook joins again, and a
 * grant of the old membership still on its way is refused (epoch 0 until
 * the new join is answered).  New work waits for a grant of the new one. */
static void rejoin(const char *why)
{
    int drain[HOOK_MAX_DEVICES], ndrain = 0, held = 0;
    pthread_mutex_lock(&hook_gate_mu);
    for (int i = 0; i < sh.nreleases; i++)
        json_decref(sh.releases[i]); /* they name grants of the old membership */
    sh.nreleases = 0;
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        struct hook_dev *d = &hook_gate_st.dev[i];
        if (!d->touched)
            continue;
        held |= d->state == DS_GRANTED || d->state == DS_DRAINING;
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
    for (struct room_req *q = sh.rooms; q; q = q->next)
        if (!q->done)
            q->seq = 0; /* asked again after the join */
    hook_gate_update_locked();
    pthread_cond_broadcast(&hook_gate_cv);
    pthread_mutex_unlock(&hook_gate_mu);
    for (int i = 0; i < ndrain; i++)
        hook_drain_now_or_later(drain[i]);
    gs_warn("%s; %s the gpushare broker again", why,
            held ? "the GPU grant is gone: draining and joining" : "joining");
    io.epoch = 0;
    send_join();
    /* the broker forgot our memory along with the grants */
    hook_mem_mark_all();
    memset(io.next_mem, 0, sizeof io.next_mem);
}

/* The broker drops a client it has heard nothing from for 3 heartbeat
 * intervals.  When this process has sent nothing for that long (it was
 * stopped: SIGSTOP, a debugger, a frozen cgroup, a swap storm), the broker
 * may have dropped it and granted its GPU to someone else, without a word
 * that could reach it: it fences itself and joins again.  Below the limit
 * the broker cannot have dropped it (it heard from it more recently than
 * the hook last sent). */
static void check_stall(uint64_t now)
{
    if (!io.ready || io.epoch <= 0 || io.heartbeat_ms <= 0)
        return;
    uint64_t limit = 3 * (uint64_t)io.heartbeat_ms;
    if (now - io.last_sent <= limit)
        return;
    char why[200];
    snprintf(why, sizeof why,
             "this process did not run for %llu ms (the broker drops a client silent for %llu "
             "ms)",
             (unsigned long long)(now - io.last_sent), (unsigned long long)limit);
    rejoin(why);
}

static void on_welcome(const json_t *m, const gs_peer_t *peer)
{
    char why[400];
    if (gs_trust_peer(peer, sh.endpoint, why, sizeof why) != 0) {
        go_ungated(why, REFUSED_RETRY_MS);
        return;
    }
    io.ready = 1;
    /* Before the join: this broker adopts what is still parked, and parks
     * nothing of ours before we joined. */
    hook_restore_stop();
    io.heartbeat_ms = (int)gs_msg_int(m, "heartbeat_ms", DEFAULT_HB_MS);
    io.next_heartbeat = now_ms() + (uint64_t)io.heartbeat_ms;
    io.epoch = 0; /* a new connection: no membership until the join is answered */
    io.last_sent = now_ms();
    pthread_mutex_lock(&hook_gate_mu);
    int was_ungated = hook_gate_st.client == CS_UNGATED;
    io.was_refused = hook_gate_st.client == CS_REFUSED;
    if (hook_gate_st.client != CS_STOPPED)
        hook_gate_st.client = CS_READY;
    sh.decided = 1;
    sh.connected = 1;
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
    }
    hook_gate_update_locked();
    pthread_cond_broadcast(&hook_gate_cv);
    pthread_mutex_unlock(&hook_gate_mu);
    if (was_ungated)
        gs_info("connected to the gpushare broker at %s; GPU sharing resumed", sh.endpoint);
    else
        gs_debug("connected to the gpushare broker at %s", sh.endpoint);
    send_join();
    /* a (new) broker knows nothing of our memory */
    hook_mem_mark_all();
    memset(io.next_mem, 0, sizeof io.next_mem);
}

/* The broker answered make_room request seq (reason: NULL for none). */
static void room_answered(long long seq, int ok, const char *reason)
{
    pthread_mutex_lock(&hook_gate_mu);
    for (struct room_req *q = sh.rooms; q; q = q->next)
        if (q->seq == seq && !q->done) {
            q->done = 1;
            q->ok = ok;
            if (reason)
                snprintf(q->reason, sizeof q->reason, "%s", reason);
            pthread_cond_broadcast(&hook_gate_cv);
        }
    pthread_mutex_unlock(&hook_gate_mu);
}

/* The broker says why request seq still waits: the wait line shows it,
 * and the log says it once per reason. */
static void room_waits(long long seq, const char *reason)
{
    int dev = -1;
    pthread_mutex_lock(&hook_gate_mu);
    for (struct room_req *q = sh.rooms; q; q = q->next)
        if (q->seq == seq && !q->done)
            dev = q->dev;
    int news = dev >= 0 && strcmp(hook_gate_st.dev[dev].room_info, reason) != 0;
    if (news)
        snprintf(hook_gate_st.dev[dev].room_info, sizeof hook_gate_st.dev[dev].room_info, "%s",
                 reason);
    pthread_mutex_unlock(&hook_gate_mu);
    if (news)
        gs_warn("an allocation waits for room on GPU %d: %s", dev, reason);
}

static void on_room(const json_t *m)
{
    if (gs_msg_bool(m, "waiting", 0)) {
        room_waits(gs_msg_int(m, "seq", -1), gs_msg_str(m, "reason", "no reason given"));
        return;
    }
    int ok = gs_msg_bool(m, "ok", 0);
    const char *why = gs_msg_str(m, "reason", NULL);
    room_answered(gs_msg_int(m, "seq", -1), ok, why || ok ? why : "the broker could not make room");
}

static void on_grant(const json_t *m)
{
    const char *uuid = gs_msg_str(m, "device", "");
    /* Not after a stall the broker may have dropped this process for: the
     * grant may be older than the stall. */
    check_stall(now_ms());
    /* A grant names the membership it was given to; one without (a broker
     * without epochs) is taken only while no epoch was ever given. */
    long long epoch = gs_msg_int(m, "epoch", 0);
    if (epoch > 0 ? epoch != io.epoch : io.epoch > 0) {
        gs_debug("grant %lld of epoch %lld refused: this process's membership is %lld "
                 "(a grant of before it joined again)",
                 gs_msg_int(m, "grant_id", 0), epoch, io.epoch);
        return;
    }
    pthread_mutex_lock(&hook_gate_mu);
    struct hook_dev *d = hook_gate_dev_by_uuid_locked(uuid);
    if (!d)
        gs_debug("grant for a device this process does not use: %s", uuid);
    else if (d->state == DS_DRAINING)
        gs_debug("grant %lld while draining: ignored", gs_msg_int(m, "grant_id", 0));
    else {
        if (d->state != DS_GRANTED) {
            d->granted_ns = hook_clock_ns();
            d->epoch_start = atomic_fetch_add(&hook_gate_epoch.v, 1) + 1;
            io.last_activity = now_ms();
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
        send_pending();
        go_ungated("the broker is shutting down", RETRY_MS);
    }
}

/* ---- the swap tier ------------------------------------------------------- */

/* On the swap thread: the command is done; `swapped` goes out from the I/O
 * thread, and memory that is back opens the device's gate again. */
static void on_swap_done(const hook_swap_report_t *r)
{
    json_t *m = gs_msg_new(GS_MSG_SWAPPED);
    pthread_mutex_lock(&hook_gate_mu);
    struct hook_dev *d =
        r->dev >= 0 && r->dev < HOOK_MAX_DEVICES ? &hook_gate_st.dev[r->dev] : NULL;
    uint64_t movable = 0, out = 0;
    if (d) {
        hook_swap_totals(r->dev, &movable, &out);
        d->swapped = out > 0;
        hook_gate_update_locked();
        pthread_cond_broadcast(&hook_gate_cv);
    }
    if (m && d && sh.connected && sh.nreports < HOOK_MAX_DEVICES) {
        json_object_set_new(m, "device", json_string(d->uuid));
        json_object_set_new(m, "lease", json_integer((json_int_t)r->lease));
        json_object_set_new(m, "direction", json_string(r->out ? "out" : "in"));
        json_object_set_new(m, "ok", json_boolean(r->ok));
        json_object_set_new(m, "bytes", json_integer((json_int_t)r->bytes));
        json_object_set_new(m, "elapsed_us", json_integer((json_int_t)r->elapsed_us));
        json_object_set_new(m, "resident_bytes", json_integer((json_int_t)r->left_resident));
        /* The totals as they are now: a park that follows at once must
         * not go by the last memory report, taken while it was out. */
        json_object_set_new(m, "movable_bytes", json_integer((json_int_t)movable));
        json_object_set_new(m, "swapped_bytes", json_integer((json_int_t)out));
        if (!r->ok && r->error[0])
            json_object_set_new(m, "error", json_string(r->error));
        sh.reports[sh.nreports++] = m;
        m = NULL;
    }
    pthread_mutex_unlock(&hook_gate_mu);
    json_decref(m);
    hook_mem_mark_all(); /* the movable and swapped bytes changed */
    hook_client_kick();
}

static void on_swap(const json_t *m, int out)
{
    const char *uuid = gs_msg_str(m, "device", "");
    uint64_t lease = (uint64_t)gs_msg_int(m, "lease", 0);
    unsigned wait_ms = (unsigned)gs_msg_int(m, "wait_ms", 0);
    uint64_t bytes = out ? (uint64_t)gs_msg_int(m, "bytes", 0) : 0; /* a partial park */
    char pool[128] = "";
    pthread_mutex_lock(&hook_gate_mu);
    struct hook_dev *d = hook_gate_dev_by_uuid_locked(uuid);
    int dev = d ? (int)(d - hook_gate_st.dev) : -1;
    const char *refuse = !d                       ? "this process does not use that GPU"
                         : !hook_swap_available() ? "the swap tier is off in this process"
                         : out && (d->state == DS_GRANTED || d->state == DS_DRAINING)
                             ? "the process still holds the GPU"
                             : NULL;
    if (!refuse && out)
        d->swapped = 1; /* closed from now: nothing may touch the memory as it leaves */
    hook_gate_update_locked();
    pthread_mutex_unlock(&hook_gate_mu);
    if (refuse) {
        hook_swap_report_t r = {.dev = dev, .out = out, .lease = lease};
        snprintf(r.error, sizeof r.error, "%s", refuse);
        if (dev >= 0)
            on_swap_done(&r);
        return;
    }
    gs_endpoint_pool_path(sh.endpoint, pool, sizeof pool);
    hook_swap_command(dev, out, lease, wait_ms, bytes, pool, on_swap_done);
}

/* The gate opens for a device once its memory is back (on the swap
 * thread). */
static void swapped_back(void)
{
    pthread_mutex_lock(&hook_gate_mu);
    for (int i = 0; i < HOOK_MAX_DEVICES; i++)
        if (hook_gate_st.dev[i].swapped && !hook_swap_parked(i))
            hook_gate_st.dev[i].swapped = 0;
    hook_gate_update_locked();
    pthread_cond_broadcast(&hook_gate_cv);
    pthread_mutex_unlock(&hook_gate_mu);
}

/* Without a broker, memory in host memory comes back by itself (the
 * mappings of the broker's chunks stay valid in this process).  Not on
 * this thread: the driver may block it (a process a dead broker left
 * locked), and this thread must reach the next broker, which unlocks it. */
static void recover_swapped(void)
{
    int any = 0;
    pthread_mutex_lock(&hook_gate_mu);
    for (int i = 0; i < HOOK_MAX_DEVICES; i++)
        any |= hook_gate_st.dev[i].touched && hook_gate_st.dev[i].swapped;
    pthread_mutex_unlock(&hook_gate_mu);
    if (any)
        hook_swap_recover(RECOVER_WAIT_MS, swapped_back);
}

static void on_ok(const json_t *m)
{
    long long seq = gs_msg_int(m, "seq", -1);
    if (seq == io.join_seq) {
        io.epoch = gs_msg_int(m, "epoch", -1);
        if (io.was_refused) {
            pthread_mutex_lock(&hook_gate_mu);
            for (int i = 0; i < HOOK_MAX_DEVICES; i++)
                hook_gate_st.dev[i].wait_info[0] = '\0'; /* the refusal is over */
            pthread_mutex_unlock(&hook_gate_mu);
            gs_info("the gpushare broker at %s accepted this process now (session %s); GPU "
                    "sharing resumed",
                    sh.endpoint, gs_msg_str(m, "session", "(none)"));
        }
        io.was_refused = 0;
        gs_debug("joined session %s (epoch %lld)", gs_msg_str(m, "session", "(none)"), io.epoch);
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
    for (struct room_req *q = sh.rooms; q; q = q->next)
        if (q->seq == seq && !q->done)
            q->seq = 0;
    pthread_mutex_unlock(&hook_gate_mu);
    hook_client_kick();
}

static void on_error(const json_t *m)
{
    const char *code = gs_msg_str(m, "code", "?");
    const char *text = gs_msg_str(m, "message", "");
    const char *req = gs_msg_str(m, "request_type", "");
    if (strcmp(req, "join") == 0 && strcmp(code, "unknown_session") == 0 &&
        !io.join_without_session) {
        gs_warn("the broker does not know session %s; joining without it", hook_cfg.session);
        io.join_without_session = 1;
        send_join();
        return;
    }
    /* The broker dropped this process: join again, unless the request
     * was sent before the latest join (its answer is old news: ask again).
     * Errors to messages without seq (memory, release) cannot be told
     * apart: the next heartbeat, which has one, is answered the same.  A
     * broker without epochs (io.epoch -1) is left to the old ways. */
    if ((strcmp(code, "unknown_client") == 0 || strcmp(code, "not_joined") == 0) &&
        strcmp(req, "join") != 0 && io.epoch != -1) {
        long long seq = gs_msg_int(m, "seq", -1);
        if (seq > io.join_seq) {
            char why[400];
            snprintf(why, sizeof why, "the broker answered %s with %s: %s", req, code, text);
            rejoin(why);
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
        go_refused(why, REFUSED_RETRY_MS);
        return;
    }
    if (entry || strcmp(req, "acquire") == 0) {
        char why[400];
        snprintf(why, sizeof why, "it refused %s: %s: %s", req, code, text);
        go_ungated(why, REFUSED_RETRY_MS);
        return;
    }
    if (strcmp(req, "make_room") == 0) {
        char why[300];
        snprintf(why, sizeof why, "the broker refused make_room: %s: %s", code, text);
        room_answered(gs_msg_int(m, "seq", -1), 0, why);
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
    rejoin("it was moved to another GPU");
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

static void on_message(const void *data, size_t size, const gs_peer_t *peer)
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
        on_welcome(m, peer);
        break;
    case GS_MSG_GRANT:
        if (io.ready)
            on_grant(m);
        break;
    case GS_MSG_REVOKE:
        if (io.ready)
            on_revoke(m);
        break;
    case GS_MSG_OK:
        on_ok(m);
        break;
    case GS_MSG_ROOM:
        if (io.ready)
            on_room(m);
        break;
    case GS_MSG_ERROR:
        on_error(m);
        break;
    case GS_MSG_SWAP_OUT:
    case GS_MSG_SWAP_IN:
        if (io.ready)
            on_swap(m, type == GS_MSG_SWAP_OUT);
        break;
    case GS_MSG_MOVED:
        if (io.ready)
            on_moved(m);
        break;
    case GS_MSG_FROZEN:
        if (io.ready)
            on_frozen(m);
        break;
    default:
        gs_debug("ignoring %s from the broker", gs_msg_type_name(type));
    }
    json_decref(m);
}

/* ---- idleness ------------------------------------------------------------ */

/* A granted device's idle release: the grant's, never later than the
 * process' own (GPUSHARE_IDLE_RELEASE_MS; 0 there turns it off). */
static unsigned idle_ms_of(const struct hook_dev *d)
{
    unsigned own = hook_cfg.idle_release_ms;
    return d->idle_release_ms && d->idle_release_ms < own ? d->idle_release_ms : own;
}

static void idle_tick(uint64_t now)
{
    unsigned shortest = hook_cfg.idle_release_ms;
    if (!shortest || now < io.next_idle_tick)
        return;
    if (atomic_exchange_explicit(&hook_gate_activity.v, 0, memory_order_relaxed))
        io.last_activity = now;
    pthread_mutex_lock(&hook_gate_mu);
    /* A gang that waits for the rest of its GPUs is not idle: giving back
     * the ones it holds would only put it behind in their queues again. */
    int gang_waits = 0;
    for (int i = 0; hook_gate_gang && i < HOOK_MAX_DEVICES; i++)
        gang_waits |= hook_gate_st.dev[i].touched && hook_gate_st.dev[i].waiters > 0;
    if (gang_waits)
        io.last_activity = now;
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        const struct hook_dev *d = &hook_gate_st.dev[i];
        if (!d->touched || d->state != DS_GRANTED)
            continue;
        unsigned ms = idle_ms_of(d);
        shortest = ms < shortest ? ms : shortest;
        if (now - io.last_activity >= ms)
            hook_drain_start_locked(i, DRAIN_IDLE, 1);
    }
    pthread_mutex_unlock(&hook_gate_mu);
    /* A quarter of the shortest threshold: released at most 25 % late. */
    io.next_idle_tick = now + (shortest / 4 < 5 ? 5 : shortest / 4 > 250 ? 250 : shortest / 4);
}

/* ---- the thread ---------------------------------------------------------- */

static void read_monitor(void)
{
    zmq_msg_t ev, addr;
    zmq_msg_init(&ev);
    if (zmq_msg_recv(&ev, io.mon, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&ev);
        return;
    }
    uint16_t event = 0;
    if (zmq_msg_size(&ev) >= 2)
        memcpy(&event, zmq_msg_data(&ev), 2);
    int more = zmq_msg_more(&ev);
    zmq_msg_close(&ev);
    if (more) {
        zmq_msg_init(&addr);
        zmq_msg_recv(&addr, io.mon, 0);
        zmq_msg_close(&addr);
    }
    if (event == ZMQ_EVENT_DISCONNECTED && io.ready)
        go_ungated("disconnected", 100);
}

static void read_socket(void)
{
    for (;;) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, io.sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&msg);
            return;
        }
        int more = zmq_msg_more(&msg);
        gs_peer_t peer;
        gs_peer_parse(zmq_msg_gets(&msg, "Peer-Address"), &peer);
        on_message(zmq_msg_data(&msg), zmq_msg_size(&msg), &peer);
        zmq_msg_close(&msg);
        while (more) { /* one frame per message; skip anything else */
            zmq_msg_init(&msg);
            zmq_msg_recv(&msg, io.sock, 0);
            more = zmq_msg_more(&msg);
            zmq_msg_close(&msg);
        }
        if (!io.sock)
            return; /* the message made us drop the connection */
    }
}

static void exit_flush(void)
{
    if (io.ready) {
        pthread_mutex_lock(&hook_gate_mu);
        for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
            struct hook_dev *d = &hook_gate_st.dev[i];
            if (d->touched && (d->state == DS_GRANTED || d->state == DS_DRAINING)) {
                hook_client_release_locked(d, "exit");
                d->state = DS_IDLE;
            }
        }
        pthread_mutex_unlock(&hook_gate_mu);
        send_pending();
        int linger = EXIT_FLUSH_MS;
        zmq_setsockopt(io.sock, ZMQ_LINGER, &linger, sizeof linger);
    }
    close_socket();
    zmq_ctx_term(io.zctx); /* waits at most EXIT_FLUSH_MS for the releases to leave */
    io.zctx = NULL;
}

static void *io_main(void *arg)
{
    (void)arg;
    hook_thread_mark_internal();
    memset(&io, 0, sizeof io);
    io.zctx = zmq_ctx_new();
    if (io.zctx)
        zmq_ctx_set(io.zctx, ZMQ_BLOCKY, 0);
    else
        go_ungated("cannot create a ZeroMQ context", 0);
    for (;;) {
        pthread_mutex_lock(&hook_gate_mu);
        int stopping = sh.stopping;
        pthread_mutex_unlock(&hook_gate_mu);
        if (stopping || !io.zctx)
            break;
        uint64_t now = now_ms();
        check_stall(now); /* before this round sends anything */
        if (!io.sock && now >= io.next_attempt)
            open_socket();
        now = now_ms();
        if (io.sock && !io.ready && now >= io.hello_deadline)
            go_ungated("no welcome", RETRY_MS);
        if (io.ready) {
            if (now >= io.next_heartbeat) {
                send_heartbeat();
                io.next_heartbeat = now + (uint64_t)io.heartbeat_ms;
            }
            idle_tick(now);
            send_pending();
        }
        if (!io.ready && sh.decided)
            recover_swapped();
        hook_restore_reap();
        uint64_t mem_wake = io.ready ? send_memory(now) : 0;
        /* sleep until the next timer or event */
        uint64_t wake = now + 1000;
        if (mem_wake && mem_wake < wake)
            wake = mem_wake;
        if (!io.sock && io.next_attempt < wake)
            wake = io.next_attempt;
        if (io.sock && !io.ready && io.hello_deadline < wake)
            wake = io.hello_deadline;
        if (io.ready && io.next_heartbeat < wake)
            wake = io.next_heartbeat;
        if (io.ready && hook_cfg.idle_release_ms && io.next_idle_tick < wake)
            wake = io.next_idle_tick;
        zmq_pollitem_t items[3];
        int n = 0;
        items[n++] = (zmq_pollitem_t){NULL, sh.efd, ZMQ_POLLIN, 0};
        if (io.sock)
            items[n++] = (zmq_pollitem_t){io.sock, 0, ZMQ_POLLIN, 0};
        if (io.mon)
            items[n++] = (zmq_pollitem_t){io.mon, 0, ZMQ_POLLIN, 0};
        long timeout = wake > now ? (long)(wake - now) : 0;
        if (zmq_poll(items, n, timeout) < 0 && errno != EINTR) {
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
            continue;
        }
        if (items[0].revents & ZMQ_POLLIN) {
            uint64_t v;
            ssize_t r = read(sh.efd, &v, sizeof v);
            (void)r;
        }
        /* A process stopped while this thread waited resumes here: before
         * it reads what came meanwhile (a grant of before the stop). */
        check_stall(now_ms());
        for (int i = 1; i < n; i++) {
            if (!(items[i].revents & ZMQ_POLLIN))
                continue;
            if (items[i].socket == io.mon && io.mon)
                read_monitor();
            else if (items[i].socket == io.sock && io.sock)
                read_socket();
        }
    }
    hook_restore_stop();
    if (io.zctx)
        exit_flush();
    pthread_mutex_lock(&hook_gate_mu);
    sh.io_done = 1;
    pthread_cond_broadcast(&hook_gate_cv);
    pthread_mutex_unlock(&hook_gate_mu);
    return NULL;
}

/* A drain has finished: its release goes out with the I/O thread's next
 * round (hook_gate_mu held). */
static void drained_locked(struct hook_dev *d, const char *reason)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    hook_client_release_locked(d, reason);
    hook_client_kick();
}

/* The I/O thread, once. */
static void start(void)
{
    pthread_mutex_lock(&hook_gate_mu);
    if (sh.started) {
        pthread_mutex_unlock(&hook_gate_mu);
        return;
    }
    sh.started = 1;
    sh.pid = getpid();
    hook_drain_set_report(drained_locked);
    hook_mem_set_notify(hook_client_kick);
    char err[256], note[600];
    if (gs_endpoint_for_client(sh.endpoint, sizeof sh.endpoint, note, sizeof note, err,
                               sizeof err) != 0) {
        hook_gate_st.client = CS_UNGATED;
        hook_gate_update_locked();
        pthread_mutex_unlock(&hook_gate_mu);
        gs_warn("%s; running without GPU sharing", err);
        return;
    }
    if (note[0])
        gs_warn("%s", note);
    sh.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    hook_gate_st.client = CS_CONNECTING;
    int r = sh.efd >= 0 ? hook_thread_spawn(io_main, NULL) : -1;
    if (r != 0) {
        hook_gate_st.client = CS_UNGATED;
        hook_gate_update_locked();
        pthread_mutex_unlock(&hook_gate_mu);
        gs_warn("cannot start the broker thread; running without GPU sharing");
        return;
    }
    pthread_mutex_unlock(&hook_gate_mu);
}

/* A context for `dev` exists now: from here on, submissions to it pass the
 * gate only with a grant.  Called (after hook_init) before the context is
 * handed to the program, so no submission can precede it. */
void hook_client_touch(int dev)
{
    if (hook_cfg.disabled)
        return;
    hook_cuctx_enumerate();
    pthread_mutex_lock(&hook_gate_mu);
    hook_gate_touch_locked(dev);
    pthread_mutex_unlock(&hook_gate_mu);
    start();
}

/* At exit: grants go back (reason exit) if connected; bounded wait. */
void hook_client_stop(void)
{
    pthread_mutex_lock(&hook_gate_mu);
    if (!sh.started || sh.pid != getpid() || sh.efd < 0 || sh.stopping) {
        pthread_mutex_unlock(&hook_gate_mu);
        return;
    }
    sh.stopping = 1;
    hook_gate_st.client = CS_STOPPED;
    rooms_fail_locked("the program is exiting");
    pthread_mutex_unlock(&hook_gate_mu);
    hook_client_kick();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t deadline =
        (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec + EXIT_WAIT_MS * 1000000ULL;
    pthread_mutex_lock(&hook_gate_mu);
    while (!sh.io_done) {
        struct timespec dl = {(time_t)(deadline / 1000000000ULL), (long)(deadline % 1000000000ULL)};
        if (pthread_cond_timedwait(&hook_gate_cv, &hook_gate_mu, &dl) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&hook_gate_mu);
}

/* The child has no I/O thread and must not use the parent's ZeroMQ objects
 * (they are left alone, not closed); it connects afresh if it touches a
 * device.  The inherited connection itself is closed by hook_fork.c. */
void hook_client_atfork_child(void)
{
    hook_restore_atfork_child();
    if (sh.efd >= 0)
        close(sh.efd);
    for (int i = 0; i < sh.nreleases; i++)
        json_decref(sh.releases[i]);
    char ep[sizeof sh.endpoint];
    memcpy(ep, sh.endpoint, sizeof ep);
    memset(&sh, 0, sizeof sh);
    memcpy(sh.endpoint, ep, sizeof ep); /* hook_fork.c still needs the path */
    sh.efd = -1;
    hook_gate_st.client = CS_NONE;
}
