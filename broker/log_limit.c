/*
 * log_limit.c - see log_limit.h.
 */
#include "log_limit.h"

#include <stdlib.h>

typedef struct {
    int used; /* the slot holds a uid */
    uid_t uid;
    double tokens;
    int64_t last_us; /* tokens were counted up to here; also "heard from" */
    unsigned long held;
} bucket_t;

struct gs_log_limit {
    int burst;
    double per_us;
    bucket_t b[GS_LOG_LIMIT_UIDS];
};

gs_log_limit_t *gs_log_limit_new(int burst, double per_second)
{
    if (burst <= 0 || !(per_second > 0))
        return NULL;
    gs_log_limit_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->burst = burst;
    self->per_us = per_second / 1e6;
    return self;
}

void gs_log_limit_destroy(gs_log_limit_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free(*self_p);
    *self_p = NULL;
}

/* uid's bucket; a new one (full) in a free slot or in the least recently
 * heard one's. */
static bucket_t *bucket(gs_log_limit_t *self, uid_t uid, int64_t now_us)
{
    bucket_t *free_slot = NULL, *stale = NULL;
    for (int i = 0; i < GS_LOG_LIMIT_UIDS; i++) {
        bucket_t *b = &self->b[i];
        if (b->used && b->uid == uid)
            return b;
        if (!b->used && !free_slot)
            free_slot = b;
        if (b->used && (!stale || b->last_us < stale->last_us))
            stale = b;
    }
    bucket_t *b = free_slot ? free_slot : stale;
    *b = (bucket_t){.used = 1, .uid = uid, .tokens = self->burst, .last_us = now_us};
    return b;
}

int gs_log_limit_allow(gs_log_limit_t *self, uid_t uid, int64_t now_us, unsigned long *held)
{
    if (held)
        *held = 0;
    if (!self)
        return 1;
    bucket_t *b = bucket(self, uid, now_us);
    if (now_us > b->last_us) {
        b->tokens += (double)(now_us - b->last_us) * self->per_us;
        if (b->tokens > self->burst)
            b->tokens = self->burst;
    }
    b->last_us = now_us;
    if (b->tokens < 1) {
        b->held++;
        return 0;
    }
    b->tokens -= 1;
    if (held)
        *held = b->held;
    b->held = 0;
    return 1;
}
