/*
 * hook_config.h - the hook's settings: the one place the hook reads its
 * environment (README.md, "Environment", says what each means).  Most are
 * read once by hook_init into hook_cfg; the few read at another time have
 * accessors here that say when (placement before main, the swap tier at
 * its first use), so that each is still read when it was before.
 */
#ifndef GS_HOOK_CONFIG_H
#define GS_HOOK_CONFIG_H

#include <stdint.h>

struct hook_config {
    int disabled;             /* GPUSHARE_DISABLE=1: pure pass-through */
    unsigned idle_release_ms; /* GPUSHARE_IDLE_RELEASE_MS, 0 = never */
    char session[256];        /* GPUSHARE_SESSION, "" = none */
    unsigned burst_merge_us;  /* GPUSHARE_BURST_MERGE_US */
    int bursts_off;           /* GPUSHARE_BURSTS=0 */
    int managed;              /* GPUSHARE_MEMORY=managed */
    uint64_t memory_limit;    /* GPUSHARE_MEMORY_LIMIT, 0 = none */
    unsigned make_room_ms;    /* GPUSHARE_MAKE_ROOM_TIMEOUT_MS */
    uint64_t context_room;    /* GPUSHARE_CONTEXT_ROOM: asked for when a context does not fit */
    /* GPUSHARE_RESTORE_HELPER, else the installed gpushare-restore; "" for
     * GPUSHARE_RESTORE_HELPER=off */
    char restore_helper[4096];
    char libcuda[4096]; /* GPUSHARE_LIBCUDA, else libcuda.so.1 */
};
extern struct hook_config hook_cfg;

/* Fills hook_cfg; a malformed value is named in one warning and ignored. */
void hook_config_read(void);

/* Placement's view of the environment (hook_place.c), read at each call:
 * placement runs at load, before hook_config_read, and its own setenv
 * changes what it reads next.  Silent: hook_config_read names what is
 * wrong once, when the hook starts.  The strings are the environment's
 * own (not to be freed; valid until the variable is set again). */
struct hook_place_env {
    int off;                    /* GPUSHARE_DISABLE set, or GPUSHARE_PLACE=off */
    const char *session;        /* GPUSHARE_SESSION, a valid id; else NULL */
    const char *placed;         /* GPUSHARE_PLACED, NULL: unset */
    const char *placed_session; /* GPUSHARE_PLACED_SESSION, NULL: unset */
};
void hook_config_place_env(struct hook_place_env *out);
/* CUDA_VISIBLE_DEVICES now (placement sets it), NULL: unset; the
 * environment's string, as above. */
const char *hook_config_visible(void);
/* GPUSHARE_GPUS: the GPUs a session asks for; 0: unset or not >= 1. */
int hook_config_gpus_wanted(void);
/* GPUSHARE_GPU_COUNT: the GPUs on this machine, for placement at load
 * where the driver's /proc entries do not tell (a container without them,
 * a simulated driver); -1: unset. */
int hook_config_gpu_count(void);

/* The swap tier's settings, read at its first use (hook_swap.c); a
 * malformed value is named in one warning and ignored. */
struct hook_swap_settings {
    int streams;      /* GPUSHARE_SWAP_STREAMS, else 4 */
    unsigned seg_mib; /* GPUSHARE_SWAP_SEGMENT=NM, 1..1024; 0: the engine's default */
    int backing_off;  /* GPUSHARE_SWAP=off */
};
void hook_config_swap_read(struct hook_swap_settings *out);

#endif
