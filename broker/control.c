/*
 * control.c - `set`: change the broker's settings at run time.  Only root
 * or members of the admin group, identified by the socket's credentials.
 */
#include "control.h"

#include "admin.h"
#include "log.h"
#include "reply.h"
#include "settings.h"

void gs_control_on_set(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    if (!self->peer.valid || !gs_admin_is_admin(self->peer.uid, self->admin_gid)) {
        gs_reply_error(self->router, peer, msg, "permission_denied",
                       "changing settings needs root or the admin group");
        return;
    }
    const json_t *settings = json_object_get(msg, "settings");
    char err[256];
    if (json_object_size(settings) == 0) {
        gs_reply_error(self->router, peer, msg, "bad_setting", "no settings given");
        return;
    }
    if (gs_settings_apply(self, settings, 1, err, sizeof err) != 0) {
        gs_reply_error(self->router, peer, msg, "bad_setting", err);
        return;
    }
    char *text = json_dumps(settings, JSON_COMPACT | JSON_SORT_KEYS);
    gs_info("settings changed by uid %u: %s", (unsigned)self->peer.uid, text ? text : "?");
    free(text);
    gs_eventlog_write(self->eventlog, "set",
                      json_pack("{s:O, s:i}", "settings", settings, "uid", (int)self->peer.uid));
    json_t *ok = gs_msg_new(GS_MSG_OK);
    json_object_set_new(ok, "info", json_string("settings applied"));
    gs_reply_echo_seq(ok, msg);
    gs_reply_send(self->router, peer, ok);
}
