/*
 * broker_config.h - the broker's configuration file: `key = value` lines.
 *
 * /etc/gpushare/broker.conf (or --config FILE).  '#' starts a comment;
 * blank lines are ignored; every key is documented in gpushare-broker(8).
 * This module only reads the syntax; the broker decides what each key
 * means (daemon keys itself, scheduling keys through the scheduler), so a
 * key is validated in one place whether it comes from the file, a flag or
 * `gpushare set`.
 */
#ifndef GS_BROKER_CONFIG_H
#define GS_BROKER_CONFIG_H

#include <jansson.h>
#include <stddef.h>

#define GS_DEFAULT_CONFIG "/etc/gpushare/broker.conf"

typedef struct {
    char key[64];
    char value[512];
    int line;
} gs_config_entry_t;

typedef struct {
    char path[512];
    gs_config_entry_t *entries;
    size_t count;
} gs_config_t;

/* Read path.  Returns 0, or -1 with "path:line: problem" in err.  When
 * missing_ok is set, a file that does not exist gives an empty config. */
int gs_config_load(const char *path, int missing_ok, gs_config_t *out, char *err, size_t errlen);

/* Append key = value (line 0: it came from a flag).  Returns 0, or -1
 * with err set (bad key, too long, not UTF-8, out of memory). */
int gs_config_add(gs_config_t *cfg, const char *key, const char *value, int line, char *err,
                  size_t errlen);

/* Last value of key, or NULL. */
const gs_config_entry_t *gs_config_get(const gs_config_t *cfg, const char *key);

/* A value as JSON: an integer or real when it is a finite number,
 * true/false for the words, else a string.  New reference; NULL only for
 * text that is not UTF-8 (no entry holds such: gs_config_add refuses it). */
json_t *gs_config_value_json(const char *value);

/* The inverse: the text that gs_config_value_json reads back as v (a
 * string, number or boolean), as an entry holds it (gs_config_write adds
 * the quotes that the file needs).  0, or -1 with err set when no line of
 * the file can hold it (another JSON type, '#' or a line break, too long). */
int gs_config_value_text(const json_t *v, char *out, size_t outlen, char *err, size_t errlen);

/* Set key to value: the last entry of key changes (line kept), else one is
 * appended (line 0).  0, or -1 with err set. */
int gs_config_put(gs_config_t *cfg, const char *key, const char *value, char *err, size_t errlen);

/* Write cfg's entries as `key = value` lines after header (comment lines,
 * each starting with '#'), quoting a value that gs_config_load would
 * otherwise trim or unquote, and replace path atomically: a temporary file
 * in the same directory, fsync, rename.  A reader sees the old file or the
 * new one, never a part.  0, or -1 with "path: problem" in err. */
int gs_config_write(const char *path, const gs_config_t *cfg, const char *header, char *err,
                    size_t errlen);

void gs_config_free(gs_config_t *cfg);

#endif
