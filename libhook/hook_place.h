/*
 * hook_place.h - the GPUs a session's process sees, asked of the broker
 * before the driver starts (hook_place.c).
 */
#ifndef GS_HOOK_PLACE_H
#define GS_HOOK_PLACE_H

#include <jansson.h>

/* The hook's hello, one builder for both of its kinds: role, pid, session,
 * version and the process' CUDA_VISIBLE_DEVICES; place: also asks where
 * the session runs (place, and GPUSHARE_GPUS as gpus). */
void hook_place_hello_fill(json_t *m, const char *session, int place);

/* Once per process, before the real cuInit: sets CUDA_VISIBLE_DEVICES to
 * what the broker placed the session on, or leaves it (fails open). */
void hook_place_before_init(void);

#endif
