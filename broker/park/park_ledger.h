/*
 * park_ledger.h - parking's host memory through one ledger (park_ledger.c).
 */
#ifndef GS_PARK_LEDGER_H
#define GS_PARK_LEDGER_H

#include "host_ledger.h"
#include "park_state.h"

gs_host_ledger_t park_ledger(const gs_park_t *p);
/* Reads the machine (at most once a second), derives the auto budget and
 * steers the pools' budget by the ledger. */
void park_ledger_refresh(gs_park_t *p, int64_t now);
int64_t park_ledger_next(const gs_park_t *p);
/* Host bytes a park on GPU g may take now: the ledger's room and the
 * unused chunks of g's pool (every pool's for g < 0). */
uint64_t park_ledger_host_room(const gs_park_t *p, int g);
/* May ps be checkpointed (its image in host memory)?  1; or 0 with why. */
int park_ledger_take_image(gs_park_t *p, const psess_t *ps, char *why, size_t len);
/* The ledger for status (the caller owns it). */
json_t *park_ledger_json(const gs_park_t *p);

#endif
