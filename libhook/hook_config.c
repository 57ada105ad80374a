/*
 * hook_config.c - reading the environment into hook_cfg.
 */
#include "hook_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "protocol.h"
#include "size.h"

struct hook_config hook_cfg;

#define DEFAULT_IDLE_RELEASE_MS 200
#define DEFAULT_BURST_MERGE_US  100
#define DEFAULT_MAKE_ROOM_MS    300000

static unsigned env_uint(const char *name, unsigned dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    unsigned long x = strtoul(v, &end, 10);
    if (*end || x > 86400000UL) {
        gs_warn("ignoring %s=%s (expected %s)", name, v,
                strstr(name, "_US") ? "microseconds" : "milliseconds");
        return dflt;
    }
    return (unsigned)x;
}

static void memory_env(void)
{
    const char *mode = getenv("GPUSHARE_MEMORY");
    if (mode && *mode) {
        if (strcmp(mode, "managed") == 0)
            hook_cfg.managed = 1;
        else if (strcmp(mode, "device") != 0)
            gs_warn("ignoring GPUSHARE_MEMORY=%s (expected device or managed)", mode);
    }
    const char *lim = getenv("GPUSHARE_MEMORY_LIMIT");
    if (lim && *lim) {
        uint64_t b;
        if (gs_size_parse(lim, &b) != 0 || b == 0)
            gs_warn("ignoring GPUSHARE_MEMORY_LIMIT=%s (expected bytes, with K/M/G/T: 8G)", lim);
        else
            hook_cfg.memory_limit = b;
    }
}

void hook_config_read(void)
{
    const char *dis = getenv("GPUSHARE_DISABLE");
    hook_cfg.disabled = dis && *dis && strcmp(dis, "0") != 0;
    hook_cfg.idle_release_ms = env_uint("GPUSHARE_IDLE_RELEASE_MS", DEFAULT_IDLE_RELEASE_MS);
    hook_cfg.burst_merge_us = env_uint("GPUSHARE_BURST_MERGE_US", DEFAULT_BURST_MERGE_US);
    const char *bursts = getenv("GPUSHARE_BURSTS");
    hook_cfg.bursts_off = bursts && strcmp(bursts, "0") == 0;
    hook_cfg.make_room_ms = env_uint("GPUSHARE_MAKE_ROOM_TIMEOUT_MS", DEFAULT_MAKE_ROOM_MS);
    memory_env();
    const char *helper = getenv("GPUSHARE_RESTORE_HELPER");
    if (!helper || !*helper)
        helper = GS_RESTORE_HELPER;
    else if (strcmp(helper, "off") == 0)
        helper = "";
    if (strlen(helper) >= sizeof hook_cfg.restore_helper) {
        gs_warn("ignoring GPUSHARE_RESTORE_HELPER (a path of at most %zu bytes)",
                sizeof hook_cfg.restore_helper - 1);
        helper = GS_RESTORE_HELPER;
    }
    snprintf(hook_cfg.restore_helper, sizeof hook_cfg.restore_helper, "%s", helper);
    /* The broker refuses a session id outside the protocol's id rule; better
     * to join a session of our own than to send a join it cannot read. */
    const char *sess = getenv("GPUSHARE_SESSION");
    if (sess && *sess && !gs_proto_id_valid(sess, strlen(sess))) {
        gs_warn("ignoring GPUSHARE_SESSION=%.60s (a session id is at most %d letters, digits "
                "and \"%s\")",
                sess, GS_PROTO_MAX_ID, GS_PROTO_ID_PUNCT);
        sess = NULL;
    }
    snprintf(hook_cfg.session, sizeof hook_cfg.session, "%s", sess ? sess : "");
}
