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
#include <sys/types.h>

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
/* 0, or -1 without memory.  The session exists (it joined, was moved):
 * the entry stays until gs_placement_forget. */
int gs_placement_set(gs_placement_t *self, const char *session, const int *gpus, int n);

/* Pending placements (issue 34, item 5): a hook's hello places its
 * session before the session exists (it exists once the process joins or
 * its launcher registers it), and anyone can send hellos naming sessions
 * that will never exist.  Such an entry is pending: it belongs to the uid
 * that asked and records the asking process (pid, its start time: 0 when
 * unknown) and when it asked.  It becomes a session's with
 * gs_placement_confirm; until then gs_placement_prune may drop it. */
int gs_placement_set_pending(gs_placement_t *self, const char *session, const int *gpus, int n,
                             uid_t owner, long pid, unsigned long long start, int64_t now_us);
void gs_placement_confirm(gs_placement_t *self, const char *session);
/* Drops owner's pending entries made more than hold_us before now_us whose
 * asking process is gone (alive(pid, start, arg) returns 0; entries
 * without a pid are left to the cap): a session's later process, a minute
 * after a first one that only looked at the GPUs, still gets its answer.
 * Then the oldest ones while owner has cap or more, so that one more fits
 * under cap.  Returns how many were dropped. */
int gs_placement_prune(gs_placement_t *self, uid_t owner, int cap, int64_t now_us, int64_t hold_us,
                       int (*alive)(long pid, unsigned long long start, void *arg), void *arg);
/* How many entries are pending (all uids; owner's into *mine when not NULL). */
int gs_placement_pending(const gs_placement_t *self, uid_t owner, int *mine);
void gs_placement_forget(gs_placement_t *self, const char *session);
/* Calls fn for every placed session. */
void gs_placement_each(const gs_placement_t *self,
                       void (*fn)(const char *session, const int *gpus, int n, void *arg),
                       void *arg);

#endif
