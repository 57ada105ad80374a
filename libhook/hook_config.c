/*
 * hook_config.c - reading the environment: into hook_cfg when the hook
 * starts, and placement's and the swap tier's settings when they need
 * them (hook_config.h says when).  No other file of the hook calls getenv.
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
/* A context's own GPU memory: about 0.5 GiB for a PyTorch process on an
 * H100 with CUDA 13 (its local memory and the driver's structures; the
 * first kernels' modules come on top), so room for 1 GiB lets its first
 * cells start too. */
#define DEFAULT_CONTEXT_ROOM (1ULL << 30)

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

/* A byte count with K/M/G/T, more than 0; dflt when unset or malformed
 * (named in one warning, with an example). */
static uint64_t env_bytes(const char *name, uint64_t dflt, const char *example)
{
    const char *v = getenv(name);
    uint64_t b;
    if (!v || !*v)
        return dflt;
    if (gs_size_parse(v, &b) != 0 || b == 0) {
        gs_warn("ignoring %s=%s (expected bytes, with K/M/G/T: %s)", name, v, example);
        return dflt;
    }
    return b;
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
    hook_cfg.context_room = env_bytes("GPUSHARE_CONTEXT_ROOM", DEFAULT_CONTEXT_ROOM, "1G");
    hook_cfg.memory_limit = env_bytes("GPUSHARE_MEMORY_LIMIT", 0, "8G");
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
    const char *lib = getenv("GPUSHARE_LIBCUDA");
    if (lib && strlen(lib) >= sizeof hook_cfg.libcuda) {
        gs_warn("ignoring GPUSHARE_LIBCUDA (a path of at most %zu bytes)",
                sizeof hook_cfg.libcuda - 1);
        lib = NULL;
    }
    snprintf(hook_cfg.libcuda, sizeof hook_cfg.libcuda, "%s", lib && *lib ? lib : "libcuda.so.1");
}

void hook_config_place_env(struct hook_place_env *out)
{
    const char *dis = getenv("GPUSHARE_DISABLE"), *off = getenv("GPUSHARE_PLACE");
    out->off = (dis && *dis && strcmp(dis, "0") != 0) || (off && !strcmp(off, "off"));
    const char *session = getenv("GPUSHARE_SESSION");
    out->session =
        session && session[0] && gs_proto_id_valid(session, strlen(session)) ? session : NULL;
    out->placed = getenv("GPUSHARE_PLACED");
    out->placed_session = getenv("GPUSHARE_PLACED_SESSION");
}

const char *hook_config_visible(void)
{
    return getenv("CUDA_VISIBLE_DEVICES");
}

int hook_config_gpus_wanted(void)
{
    const char *gpus = getenv("GPUSHARE_GPUS");
    return gpus && atoi(gpus) >= 1 ? atoi(gpus) : 0;
}

int hook_config_gpu_count(void)
{
    const char *n = getenv("GPUSHARE_GPU_COUNT");
    return n && *n ? atoi(n) : -1;
}

void hook_config_swap_read(struct hook_swap_settings *out)
{
    const char *s = getenv("GPUSHARE_SWAP_STREAMS");
    out->streams = s ? atoi(s) : 4;
    out->seg_mib = 0;
    const char *seg = getenv("GPUSHARE_SWAP_SEGMENT");
    if (seg) {
        char *end = NULL;
        unsigned long long mib = strtoull(seg, &end, 10);
        if (end && !strcmp(end, "M") && mib > 0 && mib <= 1024)
            out->seg_mib = (unsigned)mib;
        else
            gs_warn("ignoring GPUSHARE_SWAP_SEGMENT=%s (expected 1M to 1024M)", seg);
    }
    const char *v = getenv("GPUSHARE_SWAP");
    if (v && strcmp(v, "on") != 0 && strcmp(v, "off") != 0)
        gs_warn("ignoring GPUSHARE_SWAP=%s (expected on or off)", v);
    out->backing_off = v && !strcmp(v, "off");
}
