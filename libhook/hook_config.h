/*
 * hook_config.h - the hook's settings, read from the environment once by
 * hook_init (README.md, "Environment", says what each means).
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
    /* GPUSHARE_RESTORE_HELPER, else the installed gpushare-restore; "" for
     * GPUSHARE_RESTORE_HELPER=off */
    char restore_helper[4096];
};
extern struct hook_config hook_cfg;

/* Fills hook_cfg; a malformed value is named in one warning and ignored. */
void hook_config_read(void);

#endif
