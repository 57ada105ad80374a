/*
 * settings.c - one path for every setting, whether it comes from the
 * configuration file (at start and on SIGHUP), a command-line flag or
 * `gpushare set`: daemon keys are handled here, parking keys (park*) go to
 * parking (gs_park_set), scheduling keys to the scheduler (gs_sched_set),
 * and anything else is an error naming the key.  A batch is all-or-nothing
 * for the scheduler and parking: on the first bad key their previous
 * configurations are restored.
 */
#include "settings.h"

#include <grp.h>
#include <string.h>

#include "log.h"
#include "sched/park_policy.h"
#include "settle.h"

/* Keys read once, before the socket is bound; a reload that changes them
 * is told to restart. */
static const char *start_only[] = {"endpoint", "socket_group", "heartbeat_ms", "gpu_memory", NULL};

static int is_start_only(const char *key)
{
    for (int i = 0; start_only[i]; i++)
        if (!strcmp(key, start_only[i]))
            return 1;
    return 0;
}

static const char *value_text(const json_t *v, char *buf, size_t len)
{
    if (json_is_string(v))
        return json_string_value(v);
    char *d = json_dumps(v, JSON_ENCODE_ANY);
    snprintf(buf, len, "%s", d ? d : "?");
    free(d);
    return buf;
}

static int daemon_key(gs_broker_t *self, const char *key, const json_t *value, int from_set,
                      char *err, size_t errlen)
{
    char buf[512];
    const char *text = value_text(value, buf, sizeof buf);
    if (!strcmp(key, "log_level")) {
        int lvl = gs_log_level_parse(text);
        if (lvl < 0) {
            snprintf(err, errlen, "log_level: must be error, warn, info or debug, not \"%.60s\"",
                     text);
            return -1;
        }
        gs_log_set_level((gs_log_level_t)lvl);
        return 1;
    }
    int file_only = !strcmp(key, "admin_group") || !strcmp(key, "event_log") ||
                    !strcmp(key, "max_connections_per_uid") || !strcmp(key, "metrics_port") ||
                    !strcmp(key, "metrics_address") || is_start_only(key);
    if (from_set) {
        if (!file_only)
            return 0; /* a scheduling key */
        snprintf(err, errlen, "%s belongs in the configuration file; set cannot change it", key);
        return -1;
    }
    if (!strcmp(key, "admin_group")) {
        struct group *gr = text[0] ? getgrnam(text) : NULL;
        if (text[0] && !gr) {
            snprintf(err, errlen, "admin_group: no group named \"%.60s\"", text);
            return -1;
        }
        self->admin_gid = gr ? gr->gr_gid : (gid_t)-1;
        return 1;
    }
    if (!strcmp(key, "max_connections_per_uid")) {
        if (!json_is_integer(value) || json_integer_value(value) < 1 ||
            json_integer_value(value) > 1000000) {
            snprintf(err, errlen, "max_connections_per_uid: must be 1 to 1000000, not %.60s", text);
            return -1;
        }
        self->max_conns_per_uid = (int)json_integer_value(value);
        if (self->conns) /* a reload; at start the guard is made later, with it */
            gs_conn_guard_set_per_uid(self->conns, self->max_conns_per_uid);
        return 1;
    }
    if (!strcmp(key, "event_log")) {
        if (self->eventlog && !strcmp(gs_eventlog_path(self->eventlog), text))
            return 1;
        gs_eventlog_t *log = NULL;
        if (text[0] && !(log = gs_eventlog_open(text, err, errlen)))
            return -1;
        gs_eventlog_close(&self->eventlog);
        self->eventlog = log;
        gs_park_set_eventlog(self->park, log);
        return 1;
    }
    if (!strcmp(key, "metrics_port") || !strcmp(key, "metrics_address")) {
        int is_port = !strcmp(key, "metrics_port");
        if (is_port && (!json_is_integer(value) || json_integer_value(value) < 0 ||
                        json_integer_value(value) > 65535)) {
            snprintf(err, errlen, "metrics_port: must be a port number (0 = off), not %.60s", text);
            return -1;
        }
        if (is_port)
            self->metrics_port = (int)json_integer_value(value);
        else if (strlen(text) >= sizeof self->metrics_address) {
            snprintf(err, errlen, "metrics_address: too long");
            return -1;
        } else
            memcpy(self->metrics_address, text, strlen(text) + 1);
        self->metrics_dirty = 1; /* (re)opened after the batch, see gs_settings_apply */
        return 1;
    }
    if (is_start_only(key))
        return 1; /* read in gs_broker_new; a reload compares and warns */
    return 0;
}

static int apply_one(gs_broker_t *self, const char *key, const json_t *value, int from_set,
                     char *err, size_t errlen)
{
    int r = daemon_key(self, key, value, from_set, err, errlen);
    if (r != 0)
        return r < 0 ? -1 : 0;
    if (gs_park_policy_is_key(key))
        return gs_park_set(self->park, key, value, err, errlen) == 0 ? 0 : -1;
    return gs_sched_set(self->sched, key, value, err, errlen) == 0 ? 0 : -1;
}

static int reopen_metrics(gs_broker_t *self, char *err, size_t errlen)
{
    if (!self->metrics_dirty)
        return 0;
    self->metrics_dirty = 0;
    gs_metrics_destroy(&self->metrics);
    if (self->metrics_port <= 0)
        return 0;
    self->metrics = gs_metrics_new(self->metrics_address, self->metrics_port, err, errlen);
    if (!self->metrics)
        return -1;
    gs_info("Prometheus metrics on http://%s:%d/metrics",
            self->metrics_address[0] ? self->metrics_address : "127.0.0.1",
            gs_metrics_port(self->metrics));
    return 0;
}

int gs_settings_apply(gs_broker_t *self, const json_t *settings, int from_set, char *err,
                      size_t errlen)
{
    gs_sched_config_t saved = *gs_sched_config(self->sched);
    void *park_saved = gs_park_config_save(self->park);
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)settings, key, value)
    {
        char why[256];
        if (apply_one(self, key, value, from_set, why, sizeof why) != 0) {
            snprintf(err, errlen, "%s", why);
            char ignore[64];
            gs_sched_set_config(self->sched, &saved, ignore, sizeof ignore);
            gs_park_config_restore(self->park, park_saved);
            return -1;
        }
    }
    free(park_saved);
    if (reopen_metrics(self, err, errlen) != 0)
        return -1;
    gs_settle(self);
    return 0;
}

int gs_settings_apply_config(gs_broker_t *self, const gs_config_t *cfg, char *err, size_t errlen)
{
    for (size_t i = 0; i < cfg->count; i++) {
        const gs_config_entry_t *e = &cfg->entries[i];
        json_t *v = gs_config_value_json(e->value);
        char why[256];
        int rc = apply_one(self, e->key, v, 0, why, sizeof why);
        json_decref(v);
        if (rc != 0) {
            if (e->line > 0)
                snprintf(err, errlen, "%s:%d: %s", cfg->path, e->line, why);
            else
                snprintf(err, errlen, "%s: %s", cfg->path, why);
            return -1;
        }
    }
    return reopen_metrics(self, err, errlen);
}

/* The file's entries then the overrides, as one {key: value} object. */
static json_t *config_settings(const gs_config_t *cfg, const gs_config_t *overrides)
{
    json_t *s = json_object();
    const gs_config_t *both[] = {cfg, overrides};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; both[k] && i < both[k]->count; i++)
            json_object_set_new(s, both[k]->entries[i].key,
                                gs_config_value_json(both[k]->entries[i].value));
    return s;
}

int gs_settings_reload(gs_broker_t *self)
{
    if (!self->opt.config_path[0])
        return 0;
    gs_config_t cfg;
    char err[512];
    if (gs_config_load(self->opt.config_path, 1, &cfg, err, sizeof err) != 0) {
        gs_error("reload: %s; keeping the running configuration", err);
        return -1;
    }
    for (size_t i = 0; i < cfg.count; i++)
        if (is_start_only(cfg.entries[i].key))
            gs_info("reload: %s:%d: %s takes effect at the next start", cfg.path,
                    cfg.entries[i].line, cfg.entries[i].key);
    json_t *settings = config_settings(&cfg, &self->opt.overrides);
    for (int i = 0; start_only[i]; i++)
        json_object_del(settings, start_only[i]);
    int rc = gs_settings_apply(self, settings, 0, err, sizeof err);
    json_decref(settings);
    gs_config_free(&cfg);
    if (rc != 0)
        gs_error("reload of %s: %s; keeping the running configuration", self->opt.config_path, err);
    else
        gs_info("reloaded %s", self->opt.config_path);
    if (gs_eventlog_reopen(self->eventlog) != 0)
        gs_warn("cannot reopen the event log %s", gs_eventlog_path(self->eventlog));
    return rc;
}
