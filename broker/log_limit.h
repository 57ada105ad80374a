/*
 * log_limit.h - how many lines one user's messages may add to the log
 * (issue 34, item 5): 100 000 hellos with junk session ids wrote 100 000
 * "placed" lines.  Lines that any user can cause, one per message, go
 * through a token bucket per uid: a burst, then a steady rate; what is
 * held back is counted and said with the next line that is written
 * ("... (37 more like it from uid 1002 not logged)").
 *
 * Pure (no clock, no I/O): the caller gives the time.  The table holds at
 * most GS_LOG_LIMIT_UIDS uids; a new one takes the place of the one heard
 * from least recently, so it stays bounded whoever sends.
 */
#ifndef GS_LOG_LIMIT_H
#define GS_LOG_LIMIT_H

#include <stdint.h>
#include <sys/types.h>

#define GS_LOG_LIMIT_UIDS 256

typedef struct gs_log_limit gs_log_limit_t;

/* burst lines at once, then per_second lines a second (both > 0). */
gs_log_limit_t *gs_log_limit_new(int burst, double per_second);
void gs_log_limit_destroy(gs_log_limit_t **self_p);

/* 1 when uid's line may be written now (then *held, when not NULL, is how
 * many of uid's lines were held back since its last written one; 0
 * usually); 0 when it is held back (counted). */
int gs_log_limit_allow(gs_log_limit_t *self, uid_t uid, int64_t now_us, unsigned long *held);

#endif
