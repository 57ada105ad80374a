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
 * The client is seven files (hook_client_impl.h shares their state), in
 * layers that call only downwards: this one, the I/O thread, idleness,
 * memory reports and the client's life, on top; hook_client_recv.c what
 * the broker says; hook_client_conn.c the connection (trust, failing open,
 * refusal, fencing); hook_client_pending.c what waits to be sent;
 * hook_client_room.c allocations waiting for room and hook_client_swap.c
 * the swap tier's commands; at the bottom hook_client_send.c (the shared
 * state, sending, the clock, the wake-up).
 */
#define _GNU_SOURCE
#include "config.h"
#include "hook_client.h"
#include "hook_client_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "endpoint.h"
#include "gs_assert.h"
#include "hook_client_conn.h"
#include "hook_client_recv.h"
#include "hook_client_room.h"
#include "hook_client_swap.h"
#include "hook_clock.h"
#include "hook_config.h"
#include "hook_cuctx.h"
#include "hook_drain.h"
#include "hook_mem.h"
#include "hook_restore.h"
#include "hook_swap.h"
#include "hook_thread.h"
#include "log.h"

#define EXIT_FLUSH_MS 200
#define EXIT_WAIT_MS  500
#define MEM_REPORT_MS 50 /* at most one memory message per device this often */

/* The footprint of each device that changed, at most every MEM_REPORT_MS
 * per device (the latest value; changes in between are coalesced).
 * Returns when the next one may go (0: none pending). */
static uint64_t send_memory(uint64_t now)
{
    uint64_t mask = hook_mem_changed_mask(), wake = 0;
    for (int i = 0; mask && i < HOOK_MAX_DEVICES; i++) {
        if (!(mask & (1ULL << i)))
            continue;
        if (now < hook_client_io.next_mem[i]) {
            if (!wake || hook_client_io.next_mem[i] < wake)
                wake = hook_client_io.next_mem[i];
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
        hook_client_send(m);
        hook_client_io.next_mem[i] = now + MEM_REPORT_MS;
    }
    return wake;
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
    if (!shortest || now < hook_client_io.next_idle_tick)
        return;
    if (atomic_exchange_explicit(&hook_gate_activity.v, 0, memory_order_relaxed))
        hook_client_io.last_activity = now;
    pthread_mutex_lock(&hook_gate_mu);
    /* A gang that waits for the rest of its GPUs is not idle: giving back
     * the ones it holds would only put it behind in their queues again. */
    int gang_waits = 0;
    for (int i = 0; hook_gate_gang && i < HOOK_MAX_DEVICES; i++)
        gang_waits |= hook_gate_st.dev[i].touched && hook_gate_st.dev[i].waiters > 0;
    if (gang_waits)
        hook_client_io.last_activity = now;
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        const struct hook_dev *d = &hook_gate_st.dev[i];
        if (!d->touched || d->state != DS_GRANTED)
            continue;
        unsigned ms = idle_ms_of(d);
        shortest = ms < shortest ? ms : shortest;
        if (now - hook_client_io.last_activity >= ms)
            hook_drain_start_locked(i, DRAIN_IDLE, 1);
    }
    pthread_mutex_unlock(&hook_gate_mu);
    /* A quarter of the shortest threshold: released at most 25 % late. */
    hook_client_io.next_idle_tick = now + (shortest / 4 < 5     ? 5
                                           : shortest / 4 > 250 ? 250
                                                                : shortest / 4);
}

/* ---- the thread ---------------------------------------------------------- */

static void read_monitor(void)
{
    zmq_msg_t ev, addr;
    zmq_msg_init(&ev);
    if (zmq_msg_recv(&ev, hook_client_io.mon, ZMQ_DONTWAIT) < 0) {
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
        zmq_msg_recv(&addr, hook_client_io.mon, 0);
        zmq_msg_close(&addr);
    }
    if (event == ZMQ_EVENT_DISCONNECTED && hook_client_io.ready)
        hook_client_go_ungated("disconnected", 100);
}

static void read_socket(void)
{
    for (;;) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, hook_client_io.sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&msg);
            return;
        }
        int more = zmq_msg_more(&msg);
        gs_peer_t peer;
        gs_peer_parse(zmq_msg_gets(&msg, "Peer-Address"), &peer);
        hook_client_on_message(zmq_msg_data(&msg), zmq_msg_size(&msg), &peer);
        zmq_msg_close(&msg);
        while (more) { /* one frame per message; skip anything else */
            zmq_msg_init(&msg);
            zmq_msg_recv(&msg, hook_client_io.sock, 0);
            more = zmq_msg_more(&msg);
            zmq_msg_close(&msg);
        }
        if (!hook_client_io.sock)
            return; /* the message made us drop the connection */
    }
}

static void exit_flush(void)
{
    if (hook_client_io.ready) {
        pthread_mutex_lock(&hook_gate_mu);
        for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
            struct hook_dev *d = &hook_gate_st.dev[i];
            if (d->touched && (d->state == DS_GRANTED || d->state == DS_DRAINING)) {
                hook_client_release_locked(d, "exit");
                d->state = DS_IDLE;
            }
        }
        pthread_mutex_unlock(&hook_gate_mu);
        hook_client_send_pending();
        int linger = EXIT_FLUSH_MS;
        zmq_setsockopt(hook_client_io.sock, ZMQ_LINGER, &linger, sizeof linger);
    }
    hook_client_close_socket();
    zmq_ctx_term(hook_client_io.zctx); /* waits at most EXIT_FLUSH_MS for the releases to leave */
    hook_client_io.zctx = NULL;
}

static void *io_main(void *arg)
{
    (void)arg;
    hook_thread_mark_internal();
    memset(&hook_client_io, 0, sizeof hook_client_io);
    hook_client_io.zctx = zmq_ctx_new();
    if (hook_client_io.zctx)
        zmq_ctx_set(hook_client_io.zctx, ZMQ_BLOCKY, 0);
    else
        hook_client_go_ungated("cannot create a ZeroMQ context", 0);
    for (;;) {
        pthread_mutex_lock(&hook_gate_mu);
        int stopping = hook_client_sh.stopping;
        pthread_mutex_unlock(&hook_gate_mu);
        if (stopping || !hook_client_io.zctx)
            break;
        uint64_t now = hook_client_now_ms();
        hook_client_check_stall(now); /* before this round sends anything */
        if (!hook_client_io.sock && now >= hook_client_io.next_attempt)
            hook_client_open_socket();
        now = hook_client_now_ms();
        if (hook_client_io.sock && !hook_client_io.ready && now >= hook_client_io.hello_deadline)
            hook_client_go_ungated("no welcome", RETRY_MS);
        if (hook_client_io.ready) {
            if (now >= hook_client_io.next_heartbeat) {
                hook_client_send_heartbeat();
                hook_client_io.next_heartbeat = now + (uint64_t)hook_client_io.heartbeat_ms;
            }
            idle_tick(now);
            hook_client_send_pending();
        }
        if (!hook_client_io.ready && hook_client_sh.decided)
            hook_client_swap_recover();
        hook_restore_reap();
        uint64_t mem_wake = hook_client_io.ready ? send_memory(now) : 0;
        /* sleep until the next timer or event */
        uint64_t wake = now + 1000;
        if (mem_wake && mem_wake < wake)
            wake = mem_wake;
        if (!hook_client_io.sock && hook_client_io.next_attempt < wake)
            wake = hook_client_io.next_attempt;
        if (hook_client_io.sock && !hook_client_io.ready && hook_client_io.hello_deadline < wake)
            wake = hook_client_io.hello_deadline;
        if (hook_client_io.ready && hook_client_io.next_heartbeat < wake)
            wake = hook_client_io.next_heartbeat;
        if (hook_client_io.ready && hook_cfg.idle_release_ms &&
            hook_client_io.next_idle_tick < wake)
            wake = hook_client_io.next_idle_tick;
        zmq_pollitem_t items[3];
        int n = 0;
        items[n++] = (zmq_pollitem_t){NULL, hook_client_sh.efd, ZMQ_POLLIN, 0};
        if (hook_client_io.sock)
            items[n++] = (zmq_pollitem_t){hook_client_io.sock, 0, ZMQ_POLLIN, 0};
        if (hook_client_io.mon)
            items[n++] = (zmq_pollitem_t){hook_client_io.mon, 0, ZMQ_POLLIN, 0};
        long timeout = wake > now ? (long)(wake - now) : 0;
        if (zmq_poll(items, n, timeout) < 0 && errno != EINTR) {
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
            continue;
        }
        if (items[0].revents & ZMQ_POLLIN) {
            uint64_t v;
            ssize_t r = read(hook_client_sh.efd, &v, sizeof v);
            (void)r;
        }
        /* A process stopped while this thread waited resumes here: before
         * it reads what came meanwhile (a grant of before the stop). */
        hook_client_check_stall(hook_client_now_ms());
        for (int i = 1; i < n; i++) {
            if (!(items[i].revents & ZMQ_POLLIN))
                continue;
            if (items[i].socket == hook_client_io.mon && hook_client_io.mon)
                read_monitor();
            else if (items[i].socket == hook_client_io.sock && hook_client_io.sock)
                read_socket();
        }
    }
    hook_restore_stop();
    if (hook_client_io.zctx)
        exit_flush();
    pthread_mutex_lock(&hook_gate_mu);
    hook_client_sh.io_done = 1;
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
    if (hook_client_sh.started) {
        pthread_mutex_unlock(&hook_gate_mu);
        return;
    }
    hook_client_sh.started = 1;
    hook_client_sh.pid = getpid();
    hook_drain_set_report(drained_locked);
    hook_mem_set_notify(hook_client_kick);
    char err[256], note[600];
    if (gs_endpoint_for_client(hook_client_sh.endpoint, sizeof hook_client_sh.endpoint, note,
                               sizeof note, err, sizeof err) != 0) {
        hook_gate_st.client = CS_UNGATED;
        hook_gate_update_locked();
        pthread_mutex_unlock(&hook_gate_mu);
        gs_warn("%s; running without GPU sharing", err);
        return;
    }
    if (note[0])
        gs_warn("%s", note);
    hook_client_sh.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    hook_gate_st.client = CS_CONNECTING;
    int r = hook_client_sh.efd >= 0 ? hook_thread_spawn(io_main, NULL) : -1;
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
    if (!hook_client_sh.started || hook_client_sh.pid != getpid() || hook_client_sh.efd < 0 ||
        hook_client_sh.stopping) {
        pthread_mutex_unlock(&hook_gate_mu);
        return;
    }
    hook_client_sh.stopping = 1;
    hook_gate_st.client = CS_STOPPED;
    hook_client_rooms_fail_locked("the program is exiting");
    pthread_mutex_unlock(&hook_gate_mu);
    hook_client_kick();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t deadline =
        (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec + EXIT_WAIT_MS * 1000000ULL;
    pthread_mutex_lock(&hook_gate_mu);
    while (!hook_client_sh.io_done) {
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
    if (hook_client_sh.efd >= 0)
        close(hook_client_sh.efd);
    for (int i = 0; i < hook_client_sh.nreleases; i++)
        json_decref(hook_client_sh.releases[i]);
    char ep[sizeof hook_client_sh.endpoint];
    memcpy(ep, hook_client_sh.endpoint, sizeof ep);
    memset(&hook_client_sh, 0, sizeof hook_client_sh);
    memcpy(hook_client_sh.endpoint, ep, sizeof ep); /* hook_fork.c still needs the path */
    hook_client_sh.efd = -1;
    hook_gate_st.client = CS_NONE;
}
