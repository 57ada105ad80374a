/*
 * control.c - `set`: change the broker's settings at run time.  Only root
 * or members of the admin group, identified by the socket's credentials.
 *
 * A change lasts until the broker restarts unless the request asks to
 * persist it (`gpushare set --persist`, state_file.h); the reply says
 * which, so that nobody believes a runtime change survives a restart.
 */
#include "control.h"

#include "admin.h"
#include "log.h"
#include "reply.h"
#include "settings.h"

/* What the reply says about the change's lifetime. */
static void lifetime_info(const gs_broker_t *self, const json_t *settings, int persist, char *out,
                          size_t len)
{
    if (!persist) {
        snprintf(out, len,
                 "settings applied until the broker restarts (runtime only; "
                 "`gpushare set --persist` also saves them%s)",
                 self->state_path[0] ? "" : ", once the broker has a state_file");
        return;
    }
    int n = snprintf(out, len, "settings applied and saved in %s", self->state_path);
    /* A flag of the broker's command line wins over the state file at the
     * next start: say so rather than let the saved value look lost. */
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)settings, key, value)
    {
        if (n < 0 || (size_t)n >= len || !gs_config_get(&self->opt.overrides, key))
            continue;
        n += snprintf(out + n, len - (size_t)n,
                      "; note: the broker's command line sets %s too, which wins at its next "
                      "start",
                      key);
    }
}

void gs_control_on_set(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    if (!self->peer.valid || !gs_admin_is_admin(self->peer.uid, self->admin_gid)) {
        gs_reply_error(self->router, peer, msg, "permission_denied",
                       "changing settings needs root or the admin group");
        return;
    }
    const json_t *settings = json_object_get(msg, "settings");
    int persist = json_is_true(json_object_get(msg, "persist"));
    char err[512];
    size_t n = json_object_size(settings);
    if (n == 0) {
        gs_reply_error(self->router, peer, msg, "bad_setting", "no settings given");
        return;
    }
    if (persist && !self->state_path[0]) {
        gs_reply_error(self->router, peer, msg, "cannot_persist",
                       "this broker keeps no state file (the system service does; a per-user "
                       "broker needs state_file = PATH in its configuration); nothing was "
                       "changed");
        return;
    }
    setting_t *list = calloc(n, sizeof *list);
    if (!list) {
        gs_reply_error(self->router, peer, msg, "internal", "out of memory");
        return;
    }
    size_t i = 0;
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)settings, key, value)
    {
        list[i++] = (setting_t){.key = key, .value = value, .runtime_only = 1};
    }
    int rc = gs_settings_apply(self, list, n, persist ? self->state_path : NULL, err, sizeof err);
    free(list);
    if (rc != 0) {
        gs_reply_error(self->router, peer, msg, rc == -2 ? "cannot_persist" : "bad_setting", err);
        return;
    }
    char *text = json_dumps(settings, JSON_COMPACT | JSON_SORT_KEYS);
    gs_info("settings changed by uid %u%s: %s", (unsigned)self->peer.uid,
            persist ? " and saved" : "", text ? text : "?");
    free(text);
    gs_eventlog_write(self->eventlog, "set",
                      json_pack("{s:O, s:i, s:b}", "settings", settings, "uid", (int)self->peer.uid,
                                "persist", persist));
    char info[1024];
    lifetime_info(self, settings, persist, info, sizeof info);
    json_t *ok = gs_msg_new(GS_MSG_OK);
    json_object_set_new(ok, "info", json_string(info));
    gs_reply_echo_seq(ok, msg);
    gs_reply_send(self->router, peer, ok);
}
