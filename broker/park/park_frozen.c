/*
 * park_frozen.c - a session's hooks are told when the checkpoint tier locks
 * their process and when it is restored (`frozen`, doc/protocol.md).
 *
 * A locked process's CUDA calls block inside the driver, below the hook, so
 * the hook could no longer ask for the GPU: a plain program outside Jupyter
 * (park_plain), which has no cells to say it wants the GPU, waited there
 * for ever while another held the memory (issue 34: two users taking
 * turns).  Told beforehand, the hook asks first (acquire), and the broker
 * brings the session back, making room for it.  Queued with park_state_answer:
 * parking sends nothing itself.
 */
#include "park_frozen.h"

#include <string.h>

#include "protocol.h"

void park_frozen_tell(gs_park_t *p, const psess_t *ps, int frozen)
{
    gs_sessions_t *tab = p->sessions;
    for (gs_client_t *c = gs_sessions_first_client(tab); c; c = gs_sessions_next_client(tab)) {
        if (strcmp(c->session, ps->id) != 0 || strcmp(c->role, "hook") != 0 || !c->identity)
            continue;
        for (int g = 0; g < p->ngpus; g++) {
            if (!ps->bytes[g])
                continue;
            json_t *m = gs_msg_new(GS_MSG_FROZEN);
            json_object_set_new(m, "device", json_string(p->uuids[g]));
            json_object_set_new(m, "frozen", json_boolean(frozen));
            park_state_answer(p, c->identity, m);
        }
    }
}
