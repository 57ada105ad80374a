/*
 * gpu_access.h - which GPUs an admin lets a user's sessions be placed on
 * (broker.conf `gpu_access`, issue 18): "alice:0,1 @students:2-3" gives
 * alice GPUs 0 and 1 and the members of group students GPUs 2 and 3; a
 * user named in no entry may use every GPU, one named in several the
 * union.  Placement keeps to it (placement.c); a spawner's own
 * CUDA_VISIBLE_DEVICES is the spawner's business.
 */
#ifndef GS_GPU_ACCESS_H
#define GS_GPU_ACCESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define GS_GPU_ACCESS_MAX 64 /* entries */

typedef struct {
    int is_group;
    uid_t uid;
    gid_t gid;
    uint64_t gpus; /* bit i: GPU i */
} gs_gpu_access_entry_t;

typedef struct {
    int n;
    gs_gpu_access_entry_t e[GS_GPU_ACCESS_MAX];
} gs_gpu_access_t;

/* Parses text (empty: no rules); 0, or -1 with err naming the entry and
 * what is wrong (unknown user or group, a bad GPU list). */
int gs_gpu_access_parse(const char *text, gs_gpu_access_t *out, char *err, size_t errlen);
/* The GPUs uid may be placed on: every bit set when no entry names it. */
uint64_t gs_gpu_access_mask(const gs_gpu_access_t *a, uid_t uid);

#endif
