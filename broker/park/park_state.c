/*
 * park_state.c - the few functions every part of parking needs over its
 * state (park_state.h): a session's record, the answers' queue (parking
 * sends nothing itself: the broker takes them with gs_park_next_answer),
 * the processes parking would act on, sizes for the log.
 *
 * Which processes: only hook clients of this broker, by the pid from their
 * connection's credentials (never a pid from a message); the worker checks
 * each one again before every step (park_worker.h).
 */
#include <stdlib.h>
#include <string.h>

#include "park_state.h"

#define MIB 1048576.0

void park_state_item_free(void **item)
{
    free(*item);
    *item = NULL;
}

psess_t *park_state_sess(gs_park_t *p, const char *id, int create)
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

void park_state_answer(gs_park_t *p, zframe_t *peer, json_t *msg)
{
    answer_t *a = calloc(1, sizeof *a);
    if (!a)
        abort(); /* the broker cannot keep its promises without memory */
    a->peer = zframe_dup(peer);
    a->msg = msg;
    *p->answers_end = a;
    p->answers_end = &a->next;
}

json_t *park_state_next_answer(gs_park_t *p, zframe_t **peer)
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

int park_state_session_pids(const gs_park_t *p, const char *session, int *pids, int max,
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

int park_state_exiting(const psess_t *ps, int64_t now)
{
    return ps->exiting_at && now - ps->exiting_at < PARK_EXITING_PAUSE;
}

uint64_t park_state_host_used(const gs_park_t *p)
{
    uint64_t sum = 0;
    for (psess_t *ps = zhashx_first(p->sess); ps; ps = zhashx_next(p->sess))
        if ((ps->st != PS_RESIDENT || ps->stuck) && ps->disk != DISK_ON) /* (on disk: no RAM) */
            for (int g = 0; g < p->ngpus; g++)
                sum += ps->bytes[g];
    return sum;
}

const char *park_state_mib(char *buf, size_t len, uint64_t bytes)
{
    if (bytes >= (1ull << 30))
        snprintf(buf, len, "%.1f GiB", bytes / (MIB * 1024));
    else
        snprintf(buf, len, "%.1f MiB", bytes / MIB);
    return buf;
}

uint64_t park_state_margin(const gs_park_t *p, int g)
{
    return p->total[g] / 100 > (2u << 20) ? p->total[g] / 100 : (2u << 20);
}

uint64_t park_state_total_bytes(const gs_park_t *p, const psess_t *ps)
{
    uint64_t sum = 0;
    for (int g = 0; g < p->ngpus; g++)
        sum += ps->bytes[g];
    return sum;
}
