/*
 * park_disk.h - the disk tier (park_disk.c, doc/parking.md "The disk
 * tier"): sessions parked on the swap tier move from their pool chunks to
 * images in park_disk_dir once parked for park_disk_idle_s (or sooner when
 * the host ledger needs their memory), and come back through new chunks.
 * Every function below that says "may end phases" may queue finished
 * unparks for park_jobs_finish_swaps (park_swap.h).
 */
#ifndef GS_PARK_DISK_H
#define GS_PARK_DISK_H

#include <jansson.h>

#include "park_state.h"

/* Starts the copies' worker (with the swap tier); 0, or -1 without one
 * (then there is no disk tier). */
int park_disk_start(gs_park_t *p);
/* park_disk_dir is set to dir ("": off): checked (0, or -1 with err
 * set), and the images a broker that is gone left there are looked at:
 * those whose process lives on wait for it to join, the others are
 * removed. */
int park_disk_dir_set(gs_park_t *p, const char *dir, char *err, size_t errlen);
/* c (just joined) takes over an image of its process found there. */
void park_disk_client_back(gs_park_t *p, pclient_t *c, int64_t now);
/* Waits for the copies under way; images stay on disk (the next broker
 * finds them). */
void park_disk_stop(gs_park_t *p);
/* The worker's eventfd (-1: none), and what to do when it is readable:
 * collect finished copies; may end phases. */
int park_disk_fd(const gs_park_t *p);
void park_disk_collect(gs_park_t *p, int64_t now);
/* Moves sessions to the disk that are due there (sets p->wake for the
 * next one). */
void park_disk_poll(gs_park_t *p, int64_t now);
/* ps (PS_UNPARKING from the swap tier) has memory on the disk or on its
 * way there: 1 when the disk tier brings it into chunks first (the swap_in
 * follows by itself), 0 when the swap tier can take it now. */
int park_disk_unpark(gs_park_t *p, psess_t *ps, int64_t now);
/* A hook's `swapped` with direction "drop". */
void park_disk_dropped(gs_park_t *p, pclient_t *c, int gpu, const json_t *msg, int64_t now);
/* c goes (its process exited or was dropped): an image of an exited
 * process is removed. */
void park_disk_client_gone(gs_park_t *p, pclient_t *c, int exited, int64_t now);
/* "coming back from disk: 6.1 of 24.0 GiB" while ps is read back, else
 * NULL. */
const char *park_disk_progress(const gs_park_t *p, const psess_t *ps, char *buf, size_t len);
/* The tier as a whole for status: directory, budget, bytes and sessions
 * on disk, the last error.  A new object: the caller owns it. */
json_t *park_disk_status(const gs_park_t *p);

#endif
