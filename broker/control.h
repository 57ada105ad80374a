/*
 * control.h - `set` from `gpushare set`: the broker's settings changed at
 * run time, by root or the admin group only.
 */
#ifndef GS_CONTROL_H
#define GS_CONTROL_H

#include "broker_state.h"

/* Check the sender (b->peer), apply the settings (settings.h), answer. */
void gs_control_on_set(gs_broker_t *b, zframe_t *peer, const json_t *msg);

#endif
