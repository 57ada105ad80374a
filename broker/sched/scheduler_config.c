/*
 * scheduler_config.c - the scheduler's settings: defaults, validation, one
 * setting by name (for `gpushare set`, the configuration file and signals)
 * and the settings as JSON for status.  Every way of changing a setting
 * goes through gs_sched_set_config, so a value is checked in one place.
 */
#include "scheduler_config.h"

#include "scheduler_state.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEC  1000000LL
#define MSEC 1000LL
#define DAY  (86400LL * SEC)

void gs_sched_config_default(gs_sched_config_t *c)
{
    memset(c, 0, sizeof *c);
    c->enabled = 1;
    c->policy = GS_POLICY_ADAPTIVE;
    c->tq_us = 20 * SEC; /* the thesis' recommended quantum (ch. 12.3) */
    c->alpha = 0.5;
    c->beta = 0.5;
    c->quota_min_us = 20 * MSEC;
    c->quota_max_us = 2 * SEC;
    c->quota_base_us = 300 * MSEC; /* Gemini's base quota */
    c->window_us = 10 * SEC;
    c->request = 0.0; /* no guaranteed share: least recent use goes first */
    c->limit = 1.0;   /* no cap */
    c->boost_us = 500 * MSEC;
    c->adaptive_min_us = 2 * SEC;
    c->adaptive_max_us = 20 * SEC;
    c->headroom = 0.05;
}

static const char *const policy_names[] = {"exclusive", "burst", "adaptive"};

const char *gs_sched_policy_name(gs_sched_policy_t p)
{
    return (unsigned)p < 3 ? policy_names[p] : "?";
}

int gs_sched_policy_parse(const char *name, gs_sched_policy_t *out)
{
    for (int i = 0; i < 3; i++)
        if (name && strcmp(name, policy_names[i]) == 0) {
            *out = (gs_sched_policy_t)i;
            return 0;
        }
    return -1;
}

int gs_sched_set_config(gs_sched_t *s, const gs_sched_config_t *c, char *err, size_t errlen)
{
    if ((unsigned)c->policy > GS_POLICY_ADAPTIVE) {
        snprintf(err, errlen, "policy: must be exclusive, burst or adaptive");
        return -1;
    }
    struct {
        const char *name;
        int64_t v, lo;
    } t[] = {{"tq", c->tq_us, 1},
             {"quota_min_ms", c->quota_min_us, 1},
             {"quota_max_ms", c->quota_max_us, 1},
             {"quota_base_ms", c->quota_base_us, 1},
             {"window_s", c->window_us, 1},
             {"boost_ms", c->boost_us, 0},
             {"adaptive_min_s", c->adaptive_min_us, 1},
             {"adaptive_max_s", c->adaptive_max_us, 1}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].v < t[i].lo || t[i].v > DAY) {
            snprintf(err, errlen, "%s: must be %s and at most a day", t[i].name,
                     t[i].lo ? "greater than 0" : "0 or more");
            return -1;
        }
    if (c->quota_min_us > c->quota_max_us) {
        snprintf(err, errlen, "quota_min_ms must not exceed quota_max_ms (%g ms)",
                 (double)c->quota_max_us / MSEC);
        return -1;
    }
    if (c->adaptive_min_us > c->adaptive_max_us) {
        snprintf(err, errlen, "adaptive_min_s must not exceed adaptive_max_s (%g s)",
                 (double)c->adaptive_max_us / SEC);
        return -1;
    }
    struct {
        const char *name;
        double v, lo, hi;
    } f[] = {{"alpha", c->alpha, 0, 1},
             {"beta", c->beta, 0, 1},
             {"headroom", c->headroom, 0, 0.9},
             {"request", c->request, 0, 1},
             {"limit", c->limit, 0, 1}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (!(f[i].v >= f[i].lo && f[i].v <= f[i].hi)) {
            snprintf(err, errlen, "%s: must be a number from %g to %g", f[i].name, f[i].lo,
                     f[i].hi);
            return -1;
        }
    if (c->limit <= 0) {
        snprintf(err, errlen, "limit: must be greater than 0");
        return -1;
    }
    if (c->request > c->limit) {
        snprintf(err, errlen, "request must not exceed limit (%g)", c->limit);
        return -1;
    }
    s->cfg = *c;
    s->cfg.enabled = c->enabled != 0;
    s->dirty = 1;
    return 0;
}

const gs_sched_config_t *gs_sched_config(const gs_sched_t *s)
{
    return &s->cfg;
}

/* ---- one setting by name ---------------------------------------------------- */

static int number(const json_t *v, double *out)
{
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return isfinite(*out) ? 0 : -1;
    }
    if (json_is_string(v)) {
        const char *t = json_string_value(v);
        char *end;
        *out = strtod(t, &end);
        return end != t && *end == '\0' && isfinite(*out) ? 0 : -1;
    }
    return -1;
}

static int bad(char *err, size_t errlen, const char *key, const char *what, const json_t *v)
{
    char *text = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL;
    snprintf(err, errlen, "%s: must be %s, not %.60s", key, what, text ? text : "nothing");
    free(text);
    return -1;
}

static share_t *share_slot(gs_sched_t *s, const char *session, int create)
{
    for (int i = 0; i < s->nshares; i++)
        if (strcmp(s->shares[i].session, session) == 0)
            return &s->shares[i];
    if (!create)
        return NULL;
    if (s->nshares == s->capshares) {
        int n = s->capshares ? s->capshares * 2 : 8;
        share_t *p = realloc(s->shares, (size_t)n * sizeof *p);
        if (!p)
            abort();
        s->shares = p;
        s->capshares = n;
    }
    share_t *sh = &s->shares[s->nshares++];
    snprintf(sh->session, sizeof sh->session, "%s", session);
    sh->request = sh->limit = -1;
    return sh;
}

/* share.<session>.request|limit: a fraction, or null for the default. */
static int set_share(gs_sched_t *s, const char *key, const json_t *v, char *err, size_t errlen)
{
    const char *dot = strrchr(key, '.');
    size_t len = (size_t)(dot - (key + 6));
    int is_req = strcmp(dot + 1, "request") == 0;
    if ((!is_req && strcmp(dot + 1, "limit") != 0) || len == 0 || len >= GS_SCHED_ID_MAX) {
        snprintf(err, errlen,
                 "%.80s: share settings are share.<session>.request and "
                 "share.<session>.limit",
                 key);
        return -1;
    }
    char session[GS_SCHED_ID_MAX];
    memcpy(session, key + 6, len);
    session[len] = '\0';
    double x = -1;
    if (!json_is_null(v) && (number(v, &x) != 0 || x < 0 || x > 1 || (!is_req && x == 0)))
        return bad(err, errlen, key,
                   is_req ? "a fraction from 0 to 1 (or null: the default)"
                          : "a fraction above 0, at most 1 (or null: the default)",
                   v);
    share_t *old = share_slot(s, session, 0);
    double req = old ? old->request : -1, lim = old ? old->limit : -1;
    *(is_req ? &req : &lim) = x;
    double ereq = req >= 0 ? req : s->cfg.request, elim = lim >= 0 ? lim : s->cfg.limit;
    if (ereq > elim) {
        snprintf(err, errlen, "%.80s: the request (%g) must not exceed the limit (%g)", key, ereq,
                 elim);
        return -1;
    }
    share_t *sh = share_slot(s, session, 1);
    sh->request = req;
    sh->limit = lim;
    if (req < 0 && lim < 0)
        *sh = s->shares[--s->nshares];
    s->dirty = 1;
    return 0;
}

int gs_sched_set(gs_sched_t *s, const char *key, const json_t *v, char *err, size_t errlen)
{
    gs_sched_config_t c = s->cfg;
    double x = 0;
    if (!key || !v) {
        snprintf(err, errlen, "a setting needs a name and a value");
        return -1;
    }
    if (strncmp(key, "share.", 6) == 0 && strchr(key + 6, '.'))
        return set_share(s, key, v, err, errlen);
    if (strcmp(key, "scheduler") == 0) {
        const char *t = json_string_value(v);
        if (json_is_boolean(v))
            c.enabled = json_is_true(v);
        else if (t && (strcmp(t, "on") == 0 || strcmp(t, "off") == 0))
            c.enabled = strcmp(t, "on") == 0;
        else
            return bad(err, errlen, key, "\"on\" or \"off\"", v);
        return gs_sched_set_config(s, &c, err, errlen);
    }
    if (strcmp(key, "policy") == 0) {
        if (gs_sched_policy_parse(json_string_value(v), &c.policy) != 0)
            return bad(err, errlen, key, "\"exclusive\", \"burst\" or \"adaptive\"", v);
        return gs_sched_set_config(s, &c, err, errlen);
    }
    static const struct {
        const char *key;
        size_t off;
        double scale; /* microseconds per unit; 0: a plain fraction */
        const char *what;
    } keys[] = {
        {"tq", offsetof(gs_sched_config_t, tq_us), 1e6, "a number of seconds > 0"},
        {"tq_s", offsetof(gs_sched_config_t, tq_us), 1e6, "a number of seconds > 0"},
        {"boost_ms", offsetof(gs_sched_config_t, boost_us), 1e3, "a number of milliseconds >= 0"},
        {"quota_min_ms", offsetof(gs_sched_config_t, quota_min_us), 1e3,
         "a number of milliseconds > 0"},
        {"quota_max_ms", offsetof(gs_sched_config_t, quota_max_us), 1e3,
         "a number of milliseconds > 0"},
        {"quota_base_ms", offsetof(gs_sched_config_t, quota_base_us), 1e3,
         "a number of milliseconds > 0"},
        {"window_s", offsetof(gs_sched_config_t, window_us), 1e6, "a number of seconds > 0"},
        {"adaptive_min_s", offsetof(gs_sched_config_t, adaptive_min_us), 1e6,
         "a number of seconds > 0"},
        {"adaptive_max_s", offsetof(gs_sched_config_t, adaptive_max_us), 1e6,
         "a number of seconds > 0"},
        {"alpha", offsetof(gs_sched_config_t, alpha), 0, "a number from 0 to 1"},
        {"beta", offsetof(gs_sched_config_t, beta), 0, "a number from 0 to 1"},
        {"headroom", offsetof(gs_sched_config_t, headroom), 0, "a number from 0 to 0.9"},
        {"request", offsetof(gs_sched_config_t, request), 0, "a number from 0 to 1"},
        {"limit", offsetof(gs_sched_config_t, limit), 0, "a number above 0, at most 1"},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (strcmp(key, keys[i].key) != 0)
            continue;
        if (number(v, &x) != 0)
            return bad(err, errlen, key, keys[i].what, v);
        char *field = (char *)&c + keys[i].off;
        if (keys[i].scale > 0) {
            if (x < 0 || x * keys[i].scale > (double)DAY)
                return bad(err, errlen, key, keys[i].what, v);
            *(int64_t *)field = (int64_t)llround(x * keys[i].scale);
        } else {
            *(double *)field = x;
        }
        return gs_sched_set_config(s, &c, err, errlen);
    }
    snprintf(err, errlen,
             "%.80s: no such setting (scheduler, policy, tq, boost_ms, alpha, beta, "
             "quota_min_ms, quota_max_ms, quota_base_ms, window_s, adaptive_min_s, adaptive_max_s, "
             "headroom, "
             "request, limit, share.<session>.request, share.<session>.limit)",
             key);
    return -1;
}

typedef struct {
    int n;
    share_t shares[];
} saved_shares_t;

void *gs_sched_shares_save(const gs_sched_t *s)
{
    saved_shares_t *v = malloc(sizeof *v + (size_t)s->nshares * sizeof *s->shares);
    if (!v)
        return NULL;
    v->n = s->nshares;
    if (v->n)
        memcpy(v->shares, s->shares, (size_t)v->n * sizeof *s->shares);
    return v;
}

void gs_sched_shares_restore(gs_sched_t *s, void *saved)
{
    saved_shares_t *v = saved;
    /* capshares only grows: the array still holds what it held then. */
    if (v && v->n <= s->capshares) {
        if (v->n)
            memcpy(s->shares, v->shares, (size_t)v->n * sizeof *s->shares);
        s->nshares = v->n;
        s->dirty = 1;
    }
    free(v);
}

json_t *gs_sched_config_json(const gs_sched_t *s)
{
    const gs_sched_config_t *c = &s->cfg;
    json_t *shares = json_object();
    for (int i = 0; i < s->nshares; i++) {
        double req, lim;
        sched_state_shares(s, s->shares[i].session, &req, &lim);
        json_object_set_new(shares, s->shares[i].session,
                            json_pack("{s:f, s:f}", "request", req, "limit", lim));
    }
    return json_pack("{s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, "
                     "s:o}",
                     "scheduler", c->enabled ? "on" : "off", "policy",
                     gs_sched_policy_name(c->policy), "tq_s", (double)c->tq_us / SEC, "boost_ms",
                     (double)c->boost_us / MSEC, "alpha", c->alpha, "beta", c->beta, "quota_min_ms",
                     (double)c->quota_min_us / MSEC, "quota_max_ms", (double)c->quota_max_us / MSEC,
                     "quota_base_ms", (double)c->quota_base_us / MSEC, "window_s",
                     (double)c->window_us / SEC, "adaptive_min_s", (double)c->adaptive_min_us / SEC,
                     "adaptive_max_s", (double)c->adaptive_max_us / SEC, "headroom", c->headroom,
                     "request", c->request, "limit", c->limit, "shares", shares);
}
