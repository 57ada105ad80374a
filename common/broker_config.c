/*
 * broker_config.c - see broker_config.h.
 */
#include "broker_config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* A value the reader would change unless it is quoted: it trims blanks
 * at either end and strips a pair of quotes around the value. */
static int needs_quotes(const char *s)
{
    size_t len = strlen(s);
    return len && (isspace((unsigned char)s[0]) || isspace((unsigned char)s[len - 1]) ||
                   (len >= 2 && s[0] == '"' && s[len - 1] == '"'));
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
    /* Every value becomes JSON (gs_config_value_json), which holds UTF-8
     * only: refused here, where the line is named, rather than lost later. */
    json_t *text = json_string(value);
    if (!text) {
        snprintf(err, errlen, "the value of %s is not UTF-8 text", key);
        return -1;
    }
    json_decref(text);
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
        if (!*end && errno == 0 && isfinite(d)) /* "nan" and "inf" stay text */
            return json_real(d);
    }
    return json_string(value);
}

int gs_config_value_text(const json_t *v, char *out, size_t outlen, char *err, size_t errlen)
{
    int n;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strpbrk(s, "#\n\r")) {
            snprintf(err, errlen,
                     "\"%.60s\" cannot be written to a file: it holds '#' or a line "
                     "break",
                     s);
            return -1;
        }
        /* The reader types what it reads (gs_config_value_json): text
         * that looks like a number or a boolean would come back as one. */
        json_t *back = gs_config_value_json(s);
        int same = json_is_string(back);
        json_decref(back);
        if (!same) {
            snprintf(err, errlen, "the text \"%.60s\" would read back as a number or boolean", s);
            return -1;
        }
        n = snprintf(out, outlen, "%s", s); /* gs_config_write quotes it if need be */
    } else if (json_is_integer(v))
        n = snprintf(out, outlen, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v))
        n = snprintf(out, outlen, "%.17g", json_real_value(v));
    else if (json_is_boolean(v))
        n = snprintf(out, outlen, "%s", json_is_true(v) ? "true" : "false");
    else {
        snprintf(err, errlen, "only strings, numbers and true/false can be written to a file");
        return -1;
    }
    if (n < 0 || (size_t)n >= outlen || (size_t)n >= sizeof((gs_config_entry_t *)0)->value) {
        snprintf(err, errlen, "the value is too long");
        return -1;
    }
    return 0;
}

int gs_config_put(gs_config_t *cfg, const char *key, const char *value, char *err, size_t errlen)
{
    for (size_t i = cfg->count; i > 0; i--) {
        gs_config_entry_t *e = &cfg->entries[i - 1];
        if (strcmp(e->key, key) != 0)
            continue;
        if (strlen(value) >= sizeof e->value) {
            snprintf(err, errlen, "the value of %s is too long", key);
            return -1;
        }
        snprintf(e->value, sizeof e->value, "%s", value);
        return 0;
    }
    return gs_config_add(cfg, key, value, 0, err, errlen);
}

int gs_config_write(const char *path, const gs_config_t *cfg, const char *header, char *err,
                    size_t errlen)
{
    char tmp[sizeof cfg->path + 16];
    if (snprintf(tmp, sizeof tmp, "%s.XXXXXX", path) >= (int)sizeof tmp) {
        snprintf(err, errlen, "%s: path too long", path);
        return -1;
    }
    int fd = mkstemp(tmp);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot create a file beside it: %s", path, strerror(errno));
        return -1;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        unlink(tmp);
        return -1;
    }
    if (header)
        fputs(header, f);
    for (size_t i = 0; i < cfg->count; i++) {
        const char *v = cfg->entries[i].value;
        const char *q = needs_quotes(v) ? "\"" : "";
        fprintf(f, "%s = %s%s%s\n", cfg->entries[i].key, q, v, q);
    }
    /* mkstemp made it 0600; the configuration is no secret, like the file. */
    int bad = fchmod(fd, 0644) != 0 || fflush(f) != 0 || fsync(fd) != 0;
    int saved = errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        saved = errno;
    }
    if (bad || rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(bad ? saved : errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

void gs_config_free(gs_config_t *cfg)
{
    free(cfg->entries);
    cfg->entries = NULL;
    cfg->count = 0;
}
