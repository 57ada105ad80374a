/*
 * placement.h - which GPU a session runs on, on a server with several
 * (issue 18): the broker decides when the session's first process starts
 * (its hook asks at cuInit, before the driver reads CUDA_VISIBLE_DEVICES),
 * remembers it, and gives every later process of the session the same
 * answer.
 *
 * spread (default): the GPU with the least memory committed (the sessions
 * placed there), then the fewest sessions; pack: the first GPU, in order,
 * that has room left, so that whole GPUs stay free for big jobs.
 */
#ifndef GS_PLACEMENT_H
#define GS_PLACEMENT_H

#include <stdint.h>

#define GS_PLACE_MAX_GPUS 64

typedef enum { GS_PLACE_OFF = 0, GS_PLACE_SPREAD, GS_PLACE_PACK } gs_place_policy_t;

/* "off", "spread", "pack" -> the policy; -1 for anything else. */
int gs_place_policy_parse(const char *text);
const char *gs_place_policy_name(gs_place_policy_t p);

/* What the choice looks at, per GPU. */
typedef struct {
    uint64_t committed; /* memory of the sessions placed there */
    uint64_t capacity;
    int sessions; /* placed there */
} gs_place_gpu_t;

/* Chooses `want` GPUs of n (1 <= want <= n) among those whose bit is set
 * in allowed (gpu_access.h) into out[], in GPU order (a session with
 * several takes its grants in that order); returns how many (fewer when
 * fewer are allowed; 0: none). */
int gs_place_choose(gs_place_policy_t p, const gs_place_gpu_t *gpus, int n, int want,
                    uint64_t allowed, int *out);

/* Sessions and their GPUs. */
typedef struct gs_placement gs_placement_t;

gs_placement_t *gs_placement_new(void);
void gs_placement_destroy(gs_placement_t **self_p);
/* The session's GPUs (0: not placed). */
int gs_placement_get(const gs_placement_t *self, const char *session, int *gpus, int max);
/* 0, or -1 without memory. */
int gs_placement_set(gs_placement_t *self, const char *session, const int *gpus, int n);
void gs_placement_forget(gs_placement_t *self, const char *session);
/* Calls fn for every placed session. */
void gs_placement_each(const gs_placement_t *self,
                       void (*fn)(const char *session, const int *gpus, int n, void *arg),
                       void *arg);

#endif
