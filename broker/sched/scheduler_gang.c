/*
 * scheduler_gang.c - a session placed on several GPUs (placement.h: "Shared
 * GPU x2") holds them together and takes them in GPU order.
 *
 * Why: a program on two GPUs runs work on one that waits for the other
 * (NCCL collectives, peer copies, an event recorded on one GPU and waited
 * for on the other).  If two such sessions each held one of the GPUs and
 * waited for the other, neither would finish, and a drain on one GPU could
 * wait for a kernel that waits for a GPU the session lost.  So:
 *   - such a session is granted a GPU only while it holds every lower GPU
 *     of its gang (a total order: no cycle of waits, so no deadlock among
 *     gangs; a session of one GPU never holds one GPU while waiting for
 *     another);
 *   - a revoke on any GPU of a gang revokes all of them (it never keeps a
 *     higher GPU while it waits for a lower one: sched_holds_revoke);
 *   - its hook asks for every GPU of the gang at once and submits only
 *     while it holds them all (libhook/hook_submit.c).
 * A gang that is being revoked on a lower GPU still counts as holding it,
 * so work it already started across its GPUs can finish.
 */
#include "scheduler_gang.h"

static int in_gang(const sched_session_t *ss, int gpu)
{
    return ss->gang && gpu >= 0 && gpu < GS_SCHED_MAX_GPUS && (ss->gang >> gpu & 1u);
}

int sched_gang_ready(const sched_session_t *ss, int gpu)
{
    if (!in_gang(ss, gpu))
        return 1;
    for (int j = 0; j < gpu; j++)
        if (in_gang(ss, j) && !ss->g[j].holding)
            return 0;
    return 1;
}

int sched_gang_member(const sched_session_t *ss, int gpu)
{
    return in_gang(ss, gpu);
}

int sched_gang_filter(sched_session_t **w, int nw, int gpu)
{
    int k = 0;
    for (int i = 0; i < nw; i++)
        if (sched_gang_ready(w[i], gpu))
            w[k++] = w[i];
    return k;
}
