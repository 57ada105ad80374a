/*
 * session_dispatch.h - the messages of sessions and their processes:
 * register, unregister and cell from launchers; join, acquire, release,
 * memory and make_room from hooks.
 */
#ifndef GS_SESSION_DISPATCH_H
#define GS_SESSION_DISPATCH_H

#include "broker_state.h"

/* Handle msg from peer when it is one of those (returns 1), else return 0.
 * The sender's credentials are in b->peer. */
int gs_session_dispatch(gs_broker_t *b, zframe_t *peer, gs_msg_type_t type, const json_t *msg);

#endif
