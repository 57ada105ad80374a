/*
 * settings.c - one path for every setting, whether it comes from the
 * configuration file (at start and on SIGHUP), the state file that
 * `gpushare set --persist` writes (state_file.h), a command-line flag or
 * `gpushare set`: daemon keys are handled here, parking keys (park*) go to
 * parking (gs_park_set), scheduling keys to the scheduler (gs_sched_set),
 * and anything else is an error naming the key.
 *
 * A batch is all or nothing.  The scheduler and parking take each key on
 * their configurations, which are restored on the first bad key; the
 * daemon's own keys (log level, admin group, event log, metrics) are only
 * staged: checked, their files opened and their socket bound, and put in
 * place once every key of the batch is good.  `set --persist` saves the
 * batch between the two, so a batch that cannot be saved changes nothing
 * either.  (Applying log_level at once made `set log_level=debug tq=-1`
 * refuse the batch and still turn debug logging on.)
 */
#include "settings.h"

#include <grp.h>
#include <string.h>

#include "log.h"
#include "sched/park_policy.h"
#include "settle.h"
#include "state_file.h"

/* Keys read once, before the socket is bound (broker.c); a reload that
 * changes them is told to restart. */
static const char *start_only[] = {"endpoint",   "socket_group", "heartbeat_ms",
                                   "gpu_memory", "state_file",   NULL};
/* Keys of the daemon that only the configuration file and the command line
 * may set: who may change settings, and what the broker writes or serves. */
static const char *file_only[] = {
    "admin_group", "event_log", "metrics_port", "metrics_address", "max_connections_per_uid",
    "gpu_access",  NULL};

static int listed(const char *const *list, const char *key)
{
    for (int i = 0; list[i]; i++)
        if (!strcmp(key, list[i]))
            return 1;
    return 0;
}

int gs_settings_is_start_only(const char *key)
{
    return listed(start_only, key);
}

/* A batch's changes to the daemon's own state, held back until every key
 * of the batch is good. */
typedef struct {
    int log_level;   /* -1: unchanged */
    int show_others; /* -1: unchanged */
    int placement;   /* -1: unchanged */
    int gpu_access_set;
    gs_gpu_access_t gpu_access;
    int admin_set;
    gid_t admin_gid;
    int eventlog_set;
    gs_eventlog_t *eventlog; /* opened for the batch; NULL with eventlog_set: off */
    int max_conns;           /* 0: unchanged */
    int metrics_set;
    int metrics_port;
    char metrics_address[64];
    gs_metrics_t *metrics;        /* the new server, when the port or the address changed */
    const setting_t *metrics_key; /* the last metrics key, named when it cannot serve */
} staged_t;

static const char *value_text(const json_t *v, char *buf, size_t len)
{
    if (json_is_string(v))
        return json_string_value(v);
    char *d = json_dumps(v, JSON_ENCODE_ANY);
    snprintf(buf, len, "%s", d ? d : "?");
    free(d);
    return buf;
}

/* 1: a daemon key, staged; 0: not one of the daemon's keys; -1: refused. */
static int stage_daemon_key(gs_broker_t *self, staged_t *st, const setting_t *s, char *err,
                            size_t errlen)
{
    char buf[512];
    const char *key = s->key, *text = value_text(s->value, buf, sizeof buf);
    if (!strcmp(key, "log_level")) {
        int lvl = gs_log_level_parse(text);
        if (lvl < 0) {
            snprintf(err, errlen, "log_level: must be error, warn, info or debug, not \"%.60s\"",
                     text);
            return -1;
        }
        st->log_level = lvl;
        return 1;
    }
    if (!strcmp(key, "show_others")) {
        if (strcmp(text, "names") != 0 && strcmp(text, "anonymous") != 0) {
            snprintf(err, errlen, "show_others: must be names or anonymous, not \"%.60s\"", text);
            return -1;
        }
        st->show_others = !strcmp(text, "names");
        return 1;
    }
    if (!strcmp(key, "placement")) {
        int p = gs_place_policy_parse(text);
        if (p < 0) {
            snprintf(err, errlen, "placement: must be spread, pack or off, not \"%.60s\"", text);
            return -1;
        }
        st->placement = p;
        return 1;
    }
    int is_file_only = listed(file_only, key), is_start_only = listed(start_only, key);
    if (!is_file_only && !is_start_only)
        return 0; /* a scheduling or parking key */
    if (s->runtime_only) {
        snprintf(err, errlen, "%s belongs in the configuration file; set cannot change it", key);
        return -1;
    }
    if (is_start_only)
        return 1; /* read in gs_broker_new; a reload leaves them out and says so */
    if (!strcmp(key, "admin_group")) {
        struct group *gr = text[0] ? getgrnam(text) : NULL;
        if (text[0] && !gr) {
            snprintf(err, errlen, "admin_group: no group named \"%.60s\"", text);
            return -1;
        }
        st->admin_set = 1;
        st->admin_gid = gr ? gr->gr_gid : (gid_t)-1;
        return 1;
    }
    if (!strcmp(key, "gpu_access")) {
        if (gs_gpu_access_parse(text, &st->gpu_access, err, errlen) != 0)
            return -1;
        st->gpu_access_set = 1;
        return 1;
    }
    if (!strcmp(key, "max_connections_per_uid")) {
        if (!json_is_integer(s->value) || json_integer_value(s->value) < 1 ||
            json_integer_value(s->value) > 1000000) {
            snprintf(err, errlen, "max_connections_per_uid: must be 1 to 1000000, not %.60s", text);
            return -1;
        }
        st->max_conns = (int)json_integer_value(s->value);
        return 1;
    }
    if (!strcmp(key, "event_log")) {
        if (st->eventlog_set)
            gs_eventlog_close(&st->eventlog); /* named twice: the last wins */
        st->eventlog_set = 0;
        if (self->eventlog && !strcmp(gs_eventlog_path(self->eventlog), text))
            return 1; /* the log already open */
        if (text[0] && !(st->eventlog = gs_eventlog_open(text, err, errlen)))
            return -1;
        st->eventlog_set = 1;
        return 1;
    }
    if (!strcmp(key, "metrics_port")) {
        if (!json_is_integer(s->value) || json_integer_value(s->value) < 0 ||
            json_integer_value(s->value) > 65535) {
            snprintf(err, errlen, "metrics_port: must be a port number (0 = off), not %.60s", text);
            return -1;
        }
        st->metrics_set = 1;
        st->metrics_key = s;
        st->metrics_port = (int)json_integer_value(s->value);
        return 1;
    }
    /* metrics_address */
    if (strlen(text) >= sizeof st->metrics_address) {
        snprintf(err, errlen, "metrics_address: too long");
        return -1;
    }
    st->metrics_set = 1;
    st->metrics_key = s;
    memcpy(st->metrics_address, text, strlen(text) + 1);
    return 1;
}

static int stage_one(gs_broker_t *self, staged_t *st, const setting_t *s, char *err, size_t errlen)
{
    int r = stage_daemon_key(self, st, s, err, errlen);
    if (r != 0)
        return r < 0 ? -1 : 0;
    if (gs_park_policy_is_key(s->key))
        return gs_park_set(self->park, s->key, s->value, err, errlen) == 0 ? 0 : -1;
    return gs_sched_set(self->sched, s->key, s->value, err, errlen) == 0 ? 0 : -1;
}

/* After the keys: a metrics server on the new port or address is opened
 * now, so that one that cannot bind refuses the batch. */
static int stage_metrics(gs_broker_t *self, staged_t *st, char *err, size_t errlen)
{
    if (!st->metrics_set)
        return 0;
    if (st->metrics_port == self->metrics_port &&
        !strcmp(st->metrics_address, self->metrics_address) &&
        (self->metrics != NULL) == (st->metrics_port > 0)) {
        st->metrics_set = 0; /* as it is */
        return 0;
    }
    if (st->metrics_port <= 0)
        return 0; /* off */
    st->metrics = gs_metrics_new(st->metrics_address, st->metrics_port, self->metrics_status, self,
                                 err, errlen);
    return st->metrics ? 0 : -1;
}

static void discard(staged_t *st)
{
    gs_eventlog_close(&st->eventlog);
    gs_metrics_destroy(&st->metrics);
}

static void commit(gs_broker_t *self, staged_t *st)
{
    if (st->log_level >= 0)
        gs_log_set_level((gs_log_level_t)st->log_level);
    if (st->show_others >= 0)
        self->show_others = st->show_others;
    if (st->placement >= 0)
        self->placement = st->placement;
    if (st->gpu_access_set)
        self->gpu_access = st->gpu_access;
    if (st->admin_set)
        self->admin_gid = st->admin_gid;
    if (st->max_conns) {
        self->max_conns_per_uid = st->max_conns;
        if (self->conns) /* a reload; at start the guard is made later, with it */
            gs_conn_guard_set_per_uid(self->conns, self->max_conns_per_uid);
    }
    if (st->eventlog_set) {
        gs_eventlog_close(&self->eventlog);
        self->eventlog = st->eventlog;
        st->eventlog = NULL;
        gs_park_set_eventlog(self->park, self->eventlog);
    }
    if (st->metrics_set) {
        gs_metrics_destroy(&self->metrics);
        self->metrics = st->metrics;
        st->metrics = NULL;
        self->metrics_port = st->metrics_port;
        memcpy(self->metrics_address, st->metrics_address, sizeof self->metrics_address);
        if (self->metrics)
            gs_info("Prometheus metrics on http://%s:%d/metrics",
                    self->metrics_address[0] ? self->metrics_address : "127.0.0.1",
                    gs_metrics_port(self->metrics));
    }
}

/* err = why, after FILE:LINE when the setting came from a file. */
static void located(const setting_t *s, const char *why, char *err, size_t errlen)
{
    if (s && s->path && s->line > 0)
        snprintf(err, errlen, "%s:%d: %s", s->path, s->line, why);
    else if (s && s->path)
        snprintf(err, errlen, "%s: %s", s->path, why);
    else
        snprintf(err, errlen, "%s", why);
}

int gs_settings_apply(gs_broker_t *self, const setting_t *settings, size_t n,
                      const char *persist_path, char *err, size_t errlen)
{
    gs_sched_config_t saved = *gs_sched_config(self->sched);
    void *shares_saved = gs_sched_shares_save(self->sched);
    void *park_saved = gs_park_config_save(self->park);
    staged_t st = {.log_level = -1, .show_others = -1, .placement = -1};
    memcpy(st.metrics_address, self->metrics_address, sizeof st.metrics_address);
    st.metrics_port = self->metrics_port;
    char why[400];
    int bad = 0;
    for (size_t i = 0; i < n && !bad; i++)
        if (stage_one(self, &st, &settings[i], why, sizeof why) != 0) {
            bad = 1;
            located(&settings[i], why, err, errlen);
        }
    if (!bad && stage_metrics(self, &st, why, sizeof why) != 0) {
        bad = 1;
        located(st.metrics_key, why, err, errlen);
    }
    if (!bad && persist_path && gs_state_file_save(persist_path, settings, n, why, sizeof why)) {
        bad = 2;
        snprintf(err, errlen, "cannot save the settings: %s; nothing was changed", why);
    }
    if (bad) {
        char ignore[64];
        gs_sched_set_config(self->sched, &saved, ignore, sizeof ignore);
        gs_sched_shares_restore(self->sched, shares_saved);
        gs_park_config_restore(self->park, park_saved);
        discard(&st);
        return -bad;
    }
    free(shares_saved);
    free(park_saved);
    commit(self, &st);
    gs_settle(self);
    return 0;
}

/* The entries of cfg appended to list (values converted; the caller
 * decrefs them). */
static int append_config(setting_t **list, size_t *n, const gs_config_t *cfg, int runtime_only,
                         int skip_start_only)
{
    for (size_t i = 0; cfg && i < cfg->count; i++) {
        const gs_config_entry_t *e = &cfg->entries[i];
        if (skip_start_only && gs_settings_is_start_only(e->key))
            continue;
        setting_t *grown = realloc(*list, (*n + 1) * sizeof **list);
        if (!grown)
            return -1;
        *list = grown;
        grown[(*n)++] = (setting_t){.key = e->key,
                                    .value = gs_config_value_json(e->value),
                                    .path = cfg->path,
                                    .line = e->line,
                                    .runtime_only = runtime_only};
    }
    return 0;
}

int gs_settings_apply_files(gs_broker_t *self, const gs_config_t *file, const gs_config_t *state,
                            const gs_config_t *flags, int skip_start_only, char *err, size_t errlen)
{
    setting_t *list = NULL;
    size_t n = 0;
    /* In this order, so that the state file wins over the configuration
     * file and the command line over both. */
    int rc = append_config(&list, &n, file, 0, skip_start_only) != 0 ||
                     append_config(&list, &n, state, 1, skip_start_only) != 0 ||
                     append_config(&list, &n, flags, 0, skip_start_only) != 0
                 ? -1
                 : 0;
    if (rc != 0)
        snprintf(err, errlen, "out of memory");
    else
        rc = gs_settings_apply(self, list, n, NULL, err, errlen);
    for (size_t i = 0; i < n; i++)
        json_decref(list[i].value);
    free(list);
    return rc;
}

int gs_settings_reload(gs_broker_t *self)
{
    gs_config_t cfg = {{0}, NULL, 0}, state = {{0}, NULL, 0};
    char err[512];
    if (self->opt.config_path[0] &&
        gs_config_load(self->opt.config_path, 1, &cfg, err, sizeof err) != 0) {
        gs_error("reload: %s; keeping the running configuration", err);
        return -1;
    }
    if (self->state_path[0] && gs_state_file_load(self->state_path, &state, err, sizeof err)) {
        gs_error("reload: %s; keeping the running configuration", err);
        gs_config_free(&cfg);
        return -1;
    }
    for (size_t i = 0; i < cfg.count; i++)
        if (gs_settings_is_start_only(cfg.entries[i].key))
            gs_info("reload: %s:%d: %s takes effect at the next start", cfg.path,
                    cfg.entries[i].line, cfg.entries[i].key);
    int rc = gs_settings_apply_files(self, &cfg, &state, &self->opt.overrides, 1, err, sizeof err);
    gs_config_free(&cfg);
    gs_config_free(&state);
    if (rc != 0)
        gs_error("reload: %s; keeping the running configuration", err);
    else
        gs_info("reloaded %s%s%s", self->opt.config_path[0] ? self->opt.config_path : "",
                self->opt.config_path[0] && self->state_path[0] ? " and " : "",
                self->state_path[0] ? self->state_path : "");
    if (gs_eventlog_reopen(self->eventlog) != 0)
        gs_warn("cannot reopen the event log %s", gs_eventlog_path(self->eventlog));
    return rc;
}
