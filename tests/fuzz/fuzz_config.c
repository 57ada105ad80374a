/*
 * fuzz_config.c - libFuzzer target: the broker's configuration file, and
 * the state file of `gpushare set --persist`, which has the same syntax
 * (common/broker_config.c: gs_config_load; broker/state_file.c).
 *
 * The input is the file's contents.  For every entry read, checked:
 *   - the key is one gs_config_add accepts, and fits;
 *   - gs_config_value_json gives a value (a number, true/false or a
 *     string, as its header says): the broker applies it to a setting;
 *   - the value as the endpoint key and as log_level, which the broker
 *     reads with gs_endpoint_normalise (and the pool socket's path beside
 *     it) and gs_log_level_parse;
 *   - what `set --persist` does to the entries it does not change
 *     (gs_state_file_save: load, gs_config_write, and the broker loads it
 *     at the next start) keeps every key and value as it was read.
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker_config.h"
#include "endpoint.h"
#include "log.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const gs_config_entry_t *e)
{
    fprintf(stderr, "fuzz_config: %s", what);
    if (e)
        fprintf(stderr, " (line %d: key \"%s\", value \"%s\")", e->line, e->key, e->value);
    fputc('\n', stderr);
    abort();
}

/* As broker.c reads the endpoint key, into a buffer of the broker's size
 * (allocated alone: ASan sees a write past it). */
static void endpoint(const gs_config_entry_t *e)
{
    enum { SIZE = 256 };
    char *ep = malloc(SIZE), *pool = malloc(108), why[512];
    if (!ep || !pool)
        abort();
    if (gs_endpoint_normalise(e->value, ep, SIZE, why, sizeof why) == 0) {
        if (!gs_endpoint_ipc_path(ep) || !memchr(ep, '\0', SIZE))
            fail("a normalised endpoint is no ipc:// path", e);
        (void)gs_endpoint_pool_path(ep, pool, 108);
    }
    free(ep);
    free(pool);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gs_config_t cfg, again;
    char err[1024];
    if (gs_config_load(fuzz_file(data, size), 0, &cfg, err, sizeof err) != 0) {
        if (cfg.entries || cfg.count)
            fail("entries left after an error", NULL);
        return 0;
    }
    for (size_t i = 0; i < cfg.count; i++) {
        const gs_config_entry_t *e = &cfg.entries[i];
        char why[256];
        gs_config_t probe = {{0}, NULL, 0};
        if (e->line < 1 || gs_config_add(&probe, e->key, e->value, 1, why, sizeof why) != 0)
            fail("an entry that gs_config_add refuses", e);
        gs_config_free(&probe);
        if (gs_config_get(&cfg, e->key) < e)
            fail("gs_config_get does not give the last entry of a key", e);
        json_t *v = gs_config_value_json(e->value);
        if (!json_is_number(v) && !json_is_boolean(v) && !json_is_string(v))
            fail("gs_config_value_json gives no value", e);
        json_decref(v);
        endpoint(e);
        (void)gs_log_level_parse(e->value);
    }

    /* The state file rewritten, as `set --persist` does with the entries
     * it leaves alone, then read back. */
    const char *rewritten = fuzz_dir_file();
    if (gs_config_write(rewritten, &cfg, "# fuzz\n", err, sizeof err) != 0)
        fail(err, NULL);
    if (gs_config_load(rewritten, 0, &again, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_config: %s\n", err);
        fail("a rewritten file does not load", NULL);
    }
    if (again.count != cfg.count)
        fail("a rewritten file has another number of entries", NULL);
    for (size_t i = 0; i < cfg.count; i++)
        if (strcmp(cfg.entries[i].key, again.entries[i].key) != 0 ||
            strcmp(cfg.entries[i].value, again.entries[i].value) != 0)
            fail("an entry changes when the file is rewritten", &cfg.entries[i]);
    gs_config_free(&again);
    gs_config_free(&cfg);
    return 0;
}
