/*
 * park_room.h - make_room requests (park_room.c).
 */
#ifndef GS_PARK_ROOM_H
#define GS_PARK_ROOM_H

#include "park_views.h"

void park_room_reply(gs_park_t *p, room_t *r, int ok, uint64_t free_bytes, const char *reason);
/* 1: answered (go on with the next need); 0: it waits. */
int park_room_serve(gs_park_t *p, park_views_t *vs, room_t *r, int64_t now);
void park_room_expire(gs_park_t *p, const park_views_t *vs, int64_t now);

#endif
