/*
 * hook_client_room.c - allocations that wait for the broker to make room
 * (make_room): each waits on its own thread, listed in the client's state
 * for the I/O thread to send and to answer.
 */
#include "hook_client_room.h"
#include "hook_client.h"
#include "hook_client_impl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "gs_assert.h"
#include "hook_clock.h"
#include "hook_wait.h"
#include "log.h"

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

/* hook_gate_mu held: every request waiting for a room reply gets none. */
void hook_client_rooms_fail_locked(const char *why)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    for (struct room_req *q = hook_client_sh.rooms; q; q = q->next)
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
    if (hook_gate_st.client != CS_READY || !hook_client_sh.connected || hook_client_sh.stopping ||
        !hook_gate_st.dev[dev].touched) {
        pthread_mutex_unlock(&hook_gate_mu); /* no broker: the program gets its error at once */
        return 0;
    }
    q.next = hook_client_sh.rooms;
    hook_client_sh.rooms = &q;
    hook_wait_room_enter_locked(&hook_gate_st.dev[dev], bytes);
    pthread_mutex_unlock(&hook_gate_mu);
    hook_client_kick();
    pthread_mutex_lock(&hook_gate_mu);
    while (!q.done && !timed_out)
        timed_out = pthread_cond_timedwait(&hook_gate_cv, &hook_gate_mu, &ts) == ETIMEDOUT;
    for (struct room_req **pp = &hook_client_sh.rooms; *pp; pp = &(*pp)->next)
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

/* The broker answered make_room request seq (reason: NULL for none). */
void hook_client_room_answered(long long seq, int ok, const char *reason)
{
    pthread_mutex_lock(&hook_gate_mu);
    for (struct room_req *q = hook_client_sh.rooms; q; q = q->next)
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
    for (struct room_req *q = hook_client_sh.rooms; q; q = q->next)
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

void hook_client_room_on_reply(const json_t *m)
{
    if (gs_msg_bool(m, "waiting", 0)) {
        room_waits(gs_msg_int(m, "seq", -1), gs_msg_str(m, "reason", "no reason given"));
        return;
    }
    int ok = gs_msg_bool(m, "ok", 0);
    const char *why = gs_msg_str(m, "reason", NULL);
    hook_client_room_answered(gs_msg_int(m, "seq", -1), ok,
                              why || ok ? why : "the broker could not make room");
}

/* hook_gate_mu held: a make_room message (taken by out[i]) for each
 * request not sent yet, at most max; returns how many. */
int hook_client_rooms_ask_locked(json_t **out, int max)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    int n = 0;
    for (struct room_req *q = hook_client_sh.rooms; q && n < max; q = q->next) {
        if (q->seq || q->done)
            continue;
        json_t *m = hook_client_msg_seq(GS_MSG_MAKE_ROOM);
        if (!m)
            continue;
        json_object_set_new(m, "device", json_string(hook_gate_st.dev[q->dev].uuid));
        json_object_set_new(m, "bytes", json_integer((json_int_t)(q->bytes ? q->bytes : 1)));
        json_object_set_new(m, "timeout_ms", json_integer((json_int_t)q->timeout_ms));
        q->seq = hook_client_io.seq;
        out[n++] = m;
    }
    return n;
}

/* hook_gate_mu held: unanswered requests (every one, or request seq's) are
 * sent again with the next round. */
void hook_client_rooms_reask_locked(int every, long long seq)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    for (struct room_req *q = hook_client_sh.rooms; q; q = q->next)
        if (!q->done && (every || q->seq == seq))
            q->seq = 0;
}
