/*
 * broker_config.c - see broker_config.h.
 */
#include "broker_config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

static int valid_key(const char *k)
{
    if (!*k)
        return 0;
    for (; *k; k++)
        if (!isalnum((unsigned char)*k) && *k != '_' && *k != '.' && *k != '-')
            return 0;
    return 1;
}

int gs_config_load(const char *path, int missing_ok, gs_config_t *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    snprintf(out->path, sizeof out->path, "%s", path);
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT && missing_ok)
            return 0;
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    char line[1024];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            snprintf(err, errlen, "%s:%d: line longer than %zu bytes", path, lineno,
                     sizeof line - 2);
            goto fail;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = trim(line);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(err, errlen, "%s:%d: expected \"key = value\", got \"%.60s\"", path, lineno,
                     s);
            goto fail;
        }
        *eq = '\0';
        char *key = trim(s), *value = trim(eq + 1);
        size_t vlen = strlen(value);
        if (vlen >= 2 && value[0] == '"' && value[vlen - 1] == '"') {
            value[vlen - 1] = '\0';
            value++;
        }
        char why[160];
        if (gs_config_add(out, key, value, lineno, why, sizeof why) != 0) {
            snprintf(err, errlen, "%s:%d: %s", path, lineno, why);
            goto fail;
        }
    }
    if (ferror(f)) {
        snprintf(err, errlen, "%s: read error", path);
        goto fail;
    }
    fclose(f);
    return 0;
fail:
    fclose(f);
    gs_config_free(out);
    return -1;
}

int gs_config_add(gs_config_t *cfg, const char *key, const char *value, int line, char *err,
                  size_t errlen)
{
    if (!valid_key(key) || strlen(key) >= sizeof cfg->entries->key) {
        snprintf(err, errlen, "\"%.60s\" is not a valid key", key);
        return -1;
    }
    if (strlen(value) >= sizeof cfg->entries->value) {
        snprintf(err, errlen, "the value of %s is too long", key);
        return -1;
    }
    gs_config_entry_t *grown = realloc(cfg->entries, (cfg->count + 1) * sizeof *cfg->entries);
    if (!grown) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    cfg->entries = grown;
    gs_config_entry_t *e = &cfg->entries[cfg->count++];
    snprintf(e->key, sizeof e->key, "%s", key);
    snprintf(e->value, sizeof e->value, "%s", value);
    e->line = line;
    return 0;
}

const gs_config_entry_t *gs_config_get(const gs_config_t *cfg, const char *key)
{
    for (size_t i = cfg->count; i > 0; i--)
        if (strcmp(cfg->entries[i - 1].key, key) == 0)
            return &cfg->entries[i - 1];
    return NULL;
}

json_t *gs_config_value_json(const char *value)
{
    if (!strcmp(value, "true"))
        return json_true();
    if (!strcmp(value, "false"))
        return json_false();
    if (*value) {
        char *end;
        errno = 0;
        long long i = strtoll(value, &end, 10);
        if (!*end && errno == 0)
            return json_integer(i);
        double d = strtod(value, &end);
        if (!*end && errno == 0)
            return json_real(d);
    }
    return json_string(value);
}

void gs_config_free(gs_config_t *cfg)
{
    free(cfg->entries);
    cfg->entries = NULL;
    cfg->count = 0;
}
