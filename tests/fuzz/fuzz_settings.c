/*
 * fuzz_settings.c - libFuzzer target: the settings of `gpushare set`, as
 * the broker applies them (broker/settings.c hands scheduling keys to
 * gs_sched_set, broker/sched/scheduler_config.c, and parking keys to
 * gs_park_policy_config_set, broker/sched/park_policy.c), and what
 * `set --persist` saves of them (broker/state_file.c).
 *
 * The input is the "settings" object of a set message: JSON, read as the
 * broker reads a frame (duplicate keys refused).  The keys are applied in
 * order, first as one batch, then each on its own.  Checked:
 *   - a value that was accepted and that gs_config_value_text can write
 *     to the state file reads back (gs_config_load, gs_config_value_json)
 *     as the same value, which is accepted again: a persisted setting is
 *     the same setting after a restart;
 *   - the object as one batch (gs_settings_apply): when a key is refused,
 *     what is put back is what was there before, shares included;
 *   - the scheduler's and parking's settings as JSON (what status shows)
 *     are accepted back, key by key, as their headers say;
 *   - gs_size_parse and gs_park_policy_parse_bytes on every string value
 *     (the byte sizes of the hook's environment and of park_host_budget).
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker_config.h"
#include "fuzz_file.h"
#include "park_policy.h"
#include "scheduler.h"
#include "size.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NGPUS    2
#define HOST_RAM (64ULL << 30)

static void fail(const char *what, const char *key, const json_t *v, const char *err)
{
    char *text = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL;
    fprintf(stderr, "fuzz_settings: %s (key \"%s\", value %s%s%s)\n", what, key ? key : "",
            text ? text : "NULL", err ? ": " : "", err ? err : "");
    free(text);
    abort();
}

/* One setting, where the broker would send it. */
static int apply(gs_sched_t *s, gs_park_config_t *park, const char *key, const json_t *v, char *err,
                 size_t errlen)
{
    if (gs_park_policy_is_key(key))
        return gs_park_policy_config_set(park, key, v, HOST_RAM, err, errlen);
    return gs_sched_set(s, key, v, err, errlen);
}

/* The same value, as far as a setting can tell: numbers by value. */
static int same_value(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return json_number_value(a) == json_number_value(b);
    return json_equal((json_t *)a, (json_t *)b);
}

/* `set --persist`: the value saved as gs_state_file_save does (text,
 * put, write), then read back as the broker does at its next start. */
static void persist(gs_sched_t *s, gs_park_config_t *park, const char *key, const json_t *v)
{
    char text[1024], why[256];
    gs_config_t cfg = {{0}, NULL, 0};
    /* gs_state_file_save refuses the batch (and changes nothing) when the
     * file cannot hold the value or the key (a share of a session whose
     * id has ':' or '@'). */
    if (gs_config_value_text(v, text, sizeof text, why, sizeof why) != 0 ||
        gs_config_put(&cfg, key, text, why, sizeof why) != 0) {
        gs_config_free(&cfg);
        return;
    }
    const char *path = fuzz_dir_file();
    if (gs_config_write(path, &cfg, NULL, why, sizeof why) != 0)
        fail("the state file cannot be written", key, v, why);
    gs_config_free(&cfg);
    if (gs_config_load(path, 0, &cfg, why, sizeof why) != 0)
        fail("the state file does not load", key, v, why);
    if (cfg.count != 1 || strcmp(cfg.entries[0].key, key) != 0)
        fail("the state file reads back as another key", key, v, NULL);
    json_t *back = gs_config_value_json(cfg.entries[0].value);
    if (!same_value(v, back))
        fail("a persisted value reads back as another", key, v, cfg.entries[0].value);
    if (apply(s, park, key, back, why, sizeof why) != 0)
        fail("a persisted value is refused after a restart", key, v, why);
    json_decref(back);
    gs_config_free(&cfg);
}

/* The scheduler's and parking's settings, as status shows them. */
static json_t *snapshot(const gs_sched_t *s, const gs_park_config_t *park)
{
    return json_pack("{s:o, s:o}", "sched", gs_sched_config_json(s), "park",
                     gs_park_policy_config_json(park));
}

/* The whole object as one batch, all or nothing, as gs_settings_apply
 * takes it: on the first refused key, the configuration, the shares and
 * parking's settings are put back, and nothing may have changed. */
static void batch(gs_sched_t *s, gs_park_config_t *park, const json_t *settings)
{
    json_t *before = snapshot(s, park);
    gs_sched_config_t saved = *gs_sched_config(s);
    void *shares = gs_sched_shares_save(s);
    gs_park_config_t park_saved = *park;
    const char *key;
    json_t *v;
    char err[512];
    int bad = 0;
    json_object_foreach((json_t *)settings, key, v)
    {
        if (apply(s, park, key, v, err, sizeof err) != 0) {
            bad = 1;
            break;
        }
    }
    if (!bad) {
        free(shares);
        json_decref(before);
        return;
    }
    gs_sched_set_config(s, &saved, err, sizeof err);
    gs_sched_shares_restore(s, shares);
    *park = park_saved;
    json_t *after = snapshot(s, park);
    if (!json_equal(before, after))
        fail("a refused batch changed the settings", key, v, NULL);
    json_decref(before);
    json_decref(after);
}

static void sizes(const json_t *v)
{
    uint64_t b;
    if (json_is_string(v))
        (void)gs_size_parse(json_string_value(v), &b);
    (void)gs_park_policy_parse_bytes(v, &b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *settings = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(settings)) {
        json_decref(settings);
        return 0;
    }
    static const char uuids[NGPUS][48] = {"GPU-8c5e7d1a-3b2f-4e6a-9c0d-1f2e3a4b5c6d",
                                          "GPU-0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9"};
    const uint64_t memory[NGPUS] = {80ULL << 30, 0};
    gs_sched_t *s = gs_sched_new(NGPUS, memory);
    gs_park_config_t park;
    gs_park_policy_config_default(&park, NGPUS, uuids, HOST_RAM);
    if (!s)
        abort();

    const char *key;
    json_t *v;
    char err[512];
    batch(s, &park, settings);
    json_object_foreach(settings, key, v)
    {
        sizes(v);
        if (apply(s, &park, key, v, err, sizeof err) != 0)
            continue;
        persist(s, &park, key, v);
    }

    /* What status shows is accepted back. */
    json_t *sc = gs_sched_config_json(s);
    json_object_foreach(sc, key, v)
    {
        if (strcmp(key, "shares") == 0)
            continue;
        if (gs_sched_set(s, key, v, err, sizeof err) != 0)
            fail("the scheduler refuses its own setting", key, v, err);
    }
    json_t *shares = json_object_get(sc, "shares");
    json_object_foreach(shares, key, v)
    {
        const char *part;
        json_t *x;
        json_object_foreach(v, part, x)
        {
            char name[300];
            snprintf(name, sizeof name, "share.%s.%s", key, part);
            if (gs_sched_set(s, name, x, err, sizeof err) != 0)
                fail("the scheduler refuses its own share", name, x, err);
        }
    }
    json_decref(sc);
    json_t *pc = gs_park_policy_config_json(&park);
    json_object_foreach(pc, key, v)
    {
        if (strcmp(key, "park_host_budget_bytes") == 0)
            continue; /* shown, not a setting (park_policy.h) */
        if (gs_park_policy_config_set(&park, key, v, HOST_RAM, err, sizeof err) != 0)
            fail("parking refuses its own setting", key, v, err);
    }
    json_decref(pc);
    gs_sched_destroy(&s);
    json_decref(settings);
    return 0;
}
